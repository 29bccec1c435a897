package leased.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.ServerCallStreamObserver;
import io.grpc.stub.StreamObserver;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import lease.v1.Lease.AcquireRequest;
import lease.v1.Lease.AcquireResponse;
import lease.v1.Lease.Granted;
import lease.v1.Lease.ReleaseRequest;
import lease.v1.Lease.ReleaseResponse;
import lease.v1.LeaseServiceGrpc;
import org.junit.jupiter.api.Test;

/**
 * Own lease ids, retries and the give-up: the client's logic against a scripted fake LeaseService
 * (in process), and a retried waiter against a real leased whose connection is reset.
 */
class RetryTest {

  /** Answers each Acquire as the script's next step says (then grants); records what it got. */
  static final class ScriptedLeaseService extends LeaseServiceGrpc.LeaseServiceImplBase {
    private final Deque<String> script;
    final List<AcquireRequest> acquires = new CopyOnWriteArrayList<>();
    final List<String> released = new CopyOnWriteArrayList<>();
    final CountDownLatch cancelled = new CountDownLatch(1);

    ScriptedLeaseService(String... steps) {
      this.script = new ArrayDeque<>(List.of(steps));
    }

    @Override
    public void acquire(AcquireRequest request, StreamObserver<AcquireResponse> replies) {
      acquires.add(request);
      String step;
      synchronized (script) {
        step = script.isEmpty() ? "grant" : script.poll();
      }
      switch (step) {
        case "unavailable" ->
            replies.onError(
                Status.UNAVAILABLE
                    .withDescription("the fake's connection reset")
                    .asRuntimeException());
        case "invalid" ->
            replies.onError(Status.INVALID_ARGUMENT.withDescription("ttl_ms").asRuntimeException());
        case "end" -> { // a waiter whose stream ends, without a terminal message
          replies.onNext(waiting());
          replies.onCompleted();
        }
        case "wait" -> { // waits for ever
          ((ServerCallStreamObserver<AcquireResponse>) replies)
              .setOnCancelHandler(cancelled::countDown);
          replies.onNext(waiting());
        }
        case "grant" -> {
          Granted granted =
              Granted.newBuilder()
                  .setName(request.getName())
                  .setLeaseId(request.getLeaseId())
                  .setFencingToken(7)
                  .setTtlMs(request.getTtlMs())
                  .build();
          replies.onNext(AcquireResponse.newBuilder().setGranted(granted).build());
          replies.onCompleted();
        }
        default -> throw new IllegalArgumentException(step);
      }
    }

    private static AcquireResponse waiting() {
      return AcquireResponse.newBuilder()
          .setWaiting(lease.v1.Lease.Waiting.newBuilder().setPosition(1))
          .build();
    }

    @Override
    public void release(ReleaseRequest request, StreamObserver<ReleaseResponse> replies) {
      released.add(request.getLeaseId());
      replies.onNext(ReleaseResponse.newBuilder().setReleased(false).build());
      replies.onCompleted();
    }

    /** The one lease id every Acquire carried. */
    String onlyLeaseId() {
      String id = acquires.get(0).getLeaseId();
      assertTrue(id.matches("[0-9a-f]{32}"), id);
      for (AcquireRequest request : acquires) {
        assertEquals(id, request.getLeaseId(), "a retry with another id");
      }
      return id;
    }
  }

  private static final AcquireOptions WAIT_5S =
      AcquireOptions.ttl(Duration.ofSeconds(30)).waitFor(Duration.ofSeconds(5));

  @Test
  void anUnavailableAcquireIsRetriedWithTheSameIdAndTheWaitLeft() throws Exception {
    ScriptedLeaseService service = new ScriptedLeaseService("unavailable", "unavailable");
    try (GuardTimingTest.Faked faked = new GuardTimingTest.Faked(service)) {
      long start = System.nanoTime();
      Acquired acquired = faked.client.acquire("retried", WAIT_5S).get(10, TimeUnit.SECONDS);
      long tookMs = (System.nanoTime() - start) / 1_000_000;
      LeaseGuard lease = assertInstanceOf(Acquired.Granted.class, acquired).lease();
      assertEquals(3, service.acquires.size());
      assertEquals(service.onlyLeaseId(), lease.leaseId());
      List<Long> waits = service.acquires.stream().map(AcquireRequest::getWaitMs).toList();
      System.out.printf("UNAVAILABLE twice: granted on the third try after %d ms, wait_ms %s%n",
          tookMs, waits);
      assertEquals(5_000, waits.get(0));
      // The backoff (100 ms, then 200 ms) comes out of the wait.
      assertTrue(waits.get(1) <= 4_900 && waits.get(2) <= 4_700, waits.toString());
      assertTrue(tookMs >= 300, tookMs + " ms");
      lease.close();
    }
  }

  @Test
  void aStreamThatEndsWithoutAnAnswerIsRetriedWithTheSameId() throws Exception {
    ScriptedLeaseService service = new ScriptedLeaseService("end");
    try (GuardTimingTest.Faked faked = new GuardTimingTest.Faked(service)) {
      Acquired acquired = faked.client.acquire("cut-off", WAIT_5S).get(10, TimeUnit.SECONDS);
      LeaseGuard lease = assertInstanceOf(Acquired.Granted.class, acquired).lease();
      assertEquals(2, service.acquires.size());
      assertEquals(service.onlyLeaseId(), lease.leaseId());
      lease.close();
    }
  }

  /** Three retries at most; then UNAVAILABLE, after a Release of the id (a try may have won). */
  @Test
  void retriesAreBoundedAndTheIdIsReleasedBeforeTheFailure() throws Exception {
    ScriptedLeaseService service =
        new ScriptedLeaseService("unavailable", "unavailable", "unavailable", "unavailable");
    try (GuardTimingTest.Faked faked = new GuardTimingTest.Faked(service)) {
      ExecutionException failure =
          assertThrows(
              ExecutionException.class,
              () -> faked.client.acquire("down", WAIT_5S).get(10, TimeUnit.SECONDS));
      StatusRuntimeException status =
          assertInstanceOf(StatusRuntimeException.class, failure.getCause());
      assertEquals(Status.Code.UNAVAILABLE, status.getStatus().getCode());
      assertEquals(1 + LeaseClient.ACQUIRE_RETRIES, service.acquires.size());
      assertEquals(List.of(service.onlyLeaseId()), service.released);
    }
  }

  @Test
  void otherErrorsAreNotRetried() throws Exception {
    ScriptedLeaseService service = new ScriptedLeaseService("invalid");
    try (GuardTimingTest.Faked faked = new GuardTimingTest.Faked(service)) {
      ExecutionException failure =
          assertThrows(
              ExecutionException.class,
              () -> faked.client.acquire("bad", WAIT_5S).get(10, TimeUnit.SECONDS));
      StatusRuntimeException status =
          assertInstanceOf(StatusRuntimeException.class, failure.getCause());
      assertEquals(Status.Code.INVALID_ARGUMENT, status.getStatus().getCode());
      assertEquals(1, service.acquires.size());
    }
  }

  /** A caller that gives up: the call is cancelled, then its id released. */
  @Test
  void aGiveUpCancelsTheCallAndReleasesTheId() throws Exception {
    ScriptedLeaseService service = new ScriptedLeaseService("wait");
    try (GuardTimingTest.Faked faked = new GuardTimingTest.Faked(service)) {
      CountDownLatch queued = new CountDownLatch(1);
      CompletableFuture<Acquired> waiter =
          faked.client.acquire("given-up", WAIT_5S.copy().onWaiting(w -> queued.countDown()));
      assertTrue(queued.await(5, TimeUnit.SECONDS));
      assertTrue(waiter.cancel(true));
      assertTrue(service.cancelled.await(5, TimeUnit.SECONDS), "the call was not cancelled");
      long deadline = System.nanoTime() + Duration.ofSeconds(5).toNanos();
      while (service.released.isEmpty() && System.nanoTime() < deadline) {
        Thread.sleep(10);
      }
      assertEquals(List.of(service.onlyLeaseId()), service.released);
      assertEquals(1, service.acquires.size());
    }
  }

  /**
   * A real leased: a waiter whose connection is reset is retried with its id and keeps its place
   * in the queue, ahead of a waiter that came after it.
   */
  @Test
  void aRetriedWaiterKeepsItsPlaceInTheQueue() throws Exception {
    Recorder recorder = new Recorder();
    try (Stack stack = Stack.start();
        Proxy proxy = new Proxy(stack.target);
        LeaseClient direct = LeaseClient.forTarget(stack.target)) {
      ManagedChannel proxied = recorder.channel(proxy.target);
      try (LeaseClient first = LeaseClient.on(proxied)) {
        String name = "java-retried-waiter";
        AcquireOptions options = AcquireOptions.ttl(Duration.ofSeconds(30));
        LeaseGuard holder = LeaseClientTest.mustHold(direct, name, options.copy().holder("holder"));
        List<Long> positions = new CopyOnWriteArrayList<>();
        CompletableFuture<Acquired> firstWaiter =
            first.acquire(
                name,
                options.copy()
                    .waitFor(Duration.ofSeconds(20))
                    .holder("first")
                    .onWaiting(w -> positions.add(w.position())));
        awaitWaiters(direct, name, 1);
        CompletableFuture<Acquired> secondWaiter =
            direct.acquire(name, options.copy().waitFor(Duration.ofSeconds(20)).holder("second"));
        awaitWaiters(direct, name, 2);

        proxy.cut();
        long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
        while (recorder.acquires.size() < 2) {
          assertTrue(System.nanoTime() < deadline, "the reset Acquire was not retried");
          Thread.sleep(10);
        }
        Thread.sleep(500); // the retry is in line again
        assertEquals(2, recorder.acquires.size());
        String id = recorder.acquires.get(0).getLeaseId();
        assertEquals(id, recorder.acquires.get(1).getLeaseId());
        assertFalse(firstWaiter.isDone());
        // Not asserted: the retried call usually hears `waiting` at position 1 again, but not
        // always (the server sometimes sends none); where it stands shows below.
        System.out.printf("a reset waiter, retried: positions heard %s, waiters %d%n",
            positions, direct.describe(name).getWaiters());

        assertTrue(holder.release());
        LeaseGuard firstLease =
            assertInstanceOf(Acquired.Granted.class, firstWaiter.get(10, TimeUnit.SECONDS)).lease();
        assertEquals(id, firstLease.leaseId());
        assertFalse(secondWaiter.isDone(), "the waiter behind was served first");
        assertEquals("first", direct.describe(name).getHolder());
        assertTrue(firstLease.release());
        LeaseGuard secondLease =
            assertInstanceOf(Acquired.Granted.class, secondWaiter.get(10, TimeUnit.SECONDS))
                .lease();
        assertTrue(secondLease.release());
      } finally {
        proxied.shutdownNow();
      }
    }
  }

  static void awaitWaiters(LeaseClient client, String name, int waiters) throws Exception {
    long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
    while (client.describe(name).getWaiters() != waiters) {
      assertTrue(System.nanoTime() < deadline, name + ": never " + waiters + " waiters");
      Thread.sleep(10);
    }
  }
}
