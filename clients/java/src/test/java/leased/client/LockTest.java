package leased.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.ManagedChannel;
import java.time.Duration;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import lease.v1.Lease.DescribeResponse;
import lease.v1.Lease.HolderInfo;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The reentrant lock and the read-write lock against a real leased on a real redis-server. */
class LockTest {
  private static Stack stack;
  private static Recorder recorder;
  private static ManagedChannel recorded;
  private static LeaseClient client; // its Acquires are recorded
  private static LeaseClient other;

  @BeforeAll
  static void start() throws Exception {
    stack = Stack.start();
    recorder = new Recorder();
    recorded = recorder.channel(stack.target);
    client = LeaseClient.on(recorded);
    other = LeaseClient.forTarget(stack.target);
  }

  @AfterAll
  static void stop() {
    client.close();
    recorded.shutdownNow();
    other.close();
    stack.close();
  }

  static LeaseGuard granted(Acquired acquired) {
    return assertInstanceOf(Acquired.Granted.class, acquired, "busy").lease();
  }

  /** Runs {@code task} on a thread of its own: a new thread holds no lock yet. */
  static <T> CompletableFuture<T> onNewThread(Callable<T> task) {
    CompletableFuture<T> result = new CompletableFuture<>();
    new Thread(
            () -> {
              try {
                result.complete(task.call());
              } catch (Throwable error) {
                result.completeExceptionally(error);
              }
            })
        .start();
    return result;
  }

  /**
   * A nested acquire answers at once with the same guard, without an Acquire; another thread asks
   * the server and finds it busy; only the outermost release ends the lease, which is renewed
   * until then.
   */
  @Test
  void aNestedAcquireNeedsNoRoundTripAndOnlyTheOutermostReleases() throws Exception {
    String name = "java-reentrant";
    ReentrantLeaseLock lock =
        client.reentrantLock(name, AcquireOptions.ttl(Duration.ofMillis(900)).holder("reentrant"));
    int before = recorder.acquires.size();
    LeaseGuard outer = granted(lock.acquire());
    assertEquals(before + 1, recorder.acquires.size());
    long start = System.nanoTime();
    LeaseGuard inner = granted(lock.acquire());
    long nestedMicros = (System.nanoTime() - start) / 1_000;
    System.out.printf("a nested acquire: %d us, no Acquire sent%n", nestedMicros);
    assertSame(outer, inner);
    assertEquals(before + 1, recorder.acquires.size(), "the nested acquire asked the server");
    assertEquals(2, lock.getHoldCount());

    Acquired fromAnotherThread = onNewThread(lock::acquire).get(10, TimeUnit.SECONDS);
    assertInstanceOf(Acquired.NotGranted.class, fromAnotherThread);
    assertEquals(before + 2, recorder.acquires.size());

    inner.close();
    assertEquals(1, lock.getHoldCount());
    Thread.sleep(1_200); // beyond its TTL: still renewed
    DescribeResponse held = other.describe(name);
    assertTrue(held.getHeld(), "the inner release ended the lease");
    assertEquals(outer.fencingToken(), held.getFencingToken());
    assertFalse(outer.isLost());

    outer.close();
    assertFalse(other.describe(name).getHeld());
    assertFalse(lock.isHeldByCurrentThread());
    assertThrows(IllegalMonitorStateException.class, lock::unlock);
  }

  /** unlock() ends a level as the guard's close() does. */
  @Test
  void unlockEndsOneLevel() throws Exception {
    String name = "java-reentrant-unlock";
    ReentrantLeaseLock lock =
        client.reentrantLock(name, AcquireOptions.ttl(Duration.ofSeconds(10)));
    granted(lock.acquire());
    granted(lock.acquire());
    lock.unlock();
    assertTrue(other.describe(name).getHeld());
    lock.unlock();
    assertFalse(other.describe(name).getHeld());
    assertEquals(0, lock.getHoldCount());
  }

  /** A loss ends every level; the thread's next acquire asks the server for a new lease. */
  @Test
  void aLossEndsEveryLevel() throws Exception {
    String name = "java-reentrant-lost";
    ReentrantLeaseLock lock =
        client.reentrantLock(name, AcquireOptions.ttl(Duration.ofMillis(900)));
    LeaseGuard outer = granted(lock.acquire());
    LeaseGuard inner = granted(lock.acquire());
    assertEquals(outer.fencingToken(), other.revoke(name, "java reentrant test", 0));
    LostReason reason = inner.lost().get(5, TimeUnit.SECONDS);
    assertEquals(new LostReason(LostReason.Kind.LOST, "revoked: java reentrant test"), reason);
    assertEquals(reason, outer.lost().get(5, TimeUnit.SECONDS));
    assertFalse(lock.isHeldByCurrentThread());
    assertEquals(0, lock.getHoldCount());
    assertFalse(inner.release(), "gone");
    assertFalse(outer.release(), "gone");

    int before = recorder.acquires.size();
    LeaseGuard again = granted(lock.acquire());
    assertEquals(before + 1, recorder.acquires.size(), "no new lease asked for after the loss");
    assertTrue(Long.compareUnsigned(again.fencingToken(), outer.fencingToken()) > 0);
    assertEquals(1, lock.getHoldCount());
    assertTrue(again.release());
  }

  /**
   * Two readers hold together; a writer waits for both; a reader that comes after the writer
   * waits for the writer, and is granted after it. Describe marks the shared holders.
   */
  @Test
  void readersShareAndAWriterWaitsForThemAndReadersBehindIt() throws Exception {
    String name = "java-rw";
    AcquireOptions options =
        AcquireOptions.ttl(Duration.ofSeconds(10)).waitFor(Duration.ofSeconds(20));
    LeaseReadWriteLock rw = client.readWriteLock(name, options.copy().holder("reader"));
    LeaseGuard reader1 = granted(onNewThread(rw.readLock()::acquire).get(10, TimeUnit.SECONDS));
    LeaseGuard reader2 = granted(onNewThread(rw.readLock()::acquire).get(10, TimeUnit.SECONDS));
    assertTrue(reader1.shared() && reader2.shared());
    DescribeResponse readers = other.describe(name);
    assertEquals(2, readers.getHoldersCount());
    assertTrue(
        readers.getHoldersList().stream().allMatch(HolderInfo::getShared), readers.toString());

    CountDownLatch writerQueued = new CountDownLatch(1);
    LeaseReadWriteLock writerSide =
        client.readWriteLock(
            name, options.copy().holder("writer").onWaiting(w -> writerQueued.countDown()));
    CompletableFuture<Acquired> writer = onNewThread(writerSide.writeLock()::acquire);
    assertTrue(writerQueued.await(10, TimeUnit.SECONDS), "the writer was granted beside readers");

    CountDownLatch lateReaderQueued = new CountDownLatch(1);
    LeaseReadWriteLock lateSide =
        client.readWriteLock(
            name,
            options.copy().holder("late-reader").onWaiting(w -> lateReaderQueued.countDown()));
    CompletableFuture<Acquired> lateReader = onNewThread(lateSide.readLock()::acquire);
    assertTrue(
        lateReaderQueued.await(10, TimeUnit.SECONDS), "a reader overtook the waiting writer");

    assertTrue(reader1.release());
    Thread.sleep(300);
    assertFalse(writer.isDone(), "the writer was granted beside a reader");
    assertTrue(reader2.release());
    LeaseGuard writing = granted(writer.get(10, TimeUnit.SECONDS));
    assertFalse(writing.shared());
    DescribeResponse written = other.describe(name);
    assertEquals(1, written.getHoldersCount());
    assertFalse(written.getHolders(0).getShared());
    assertEquals("writer", written.getHolder());
    Thread.sleep(300);
    assertFalse(lateReader.isDone(), "a reader was granted beside the writer");

    assertTrue(writing.release());
    LeaseGuard lateReading = granted(lateReader.get(10, TimeUnit.SECONDS));
    assertTrue(Long.compareUnsigned(lateReading.fencingToken(), writing.fencingToken()) > 0);
    assertTrue(Long.compareUnsigned(writing.fencingToken(), reader2.fencingToken()) > 0);
    DescribeResponse lateRead = other.describe(name);
    assertEquals("late-reader", lateRead.getHolder());
    assertTrue(lateRead.getHolders(0).getShared());
    assertTrue(lateReading.release());
  }

  /** No upgrade: a thread that holds the read lock may not ask for the write lock meanwhile. */
  @Test
  void thereIsNoUpgrade() throws Exception {
    String name = "java-rw-upgrade";
    LeaseReadWriteLock rw = client.readWriteLock(name, AcquireOptions.ttl(Duration.ofSeconds(10)));
    try (LeaseGuard reading = granted(rw.readLock().acquire())) {
      assertThrows(IllegalStateException.class, rw.writeLock()::acquire);
      assertTrue(reading.shared());
    }
    try (LeaseGuard writing = granted(rw.writeLock().acquire())) {
      assertFalse(writing.shared());
    }
  }
}
