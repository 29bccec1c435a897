package leased.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import lease.v1.Lease.AcquireRequest;
import lease.v1.Lease.AcquireResponse;
import lease.v1.Lease.DescribeResponse;
import lease.v1.Lease.Granted;
import lease.v1.LeaseServiceGrpc;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The client against a real leased on a real redis-server. */
class LeaseClientTest {
  private static Stack stack;
  private static LeaseClient client;
  private static LeaseClient other;

  @BeforeAll
  static void start() throws Exception {
    stack = Stack.start();
    client = LeaseClient.forTarget(stack.target);
    other = LeaseClient.forTarget(stack.target);
  }

  @AfterAll
  static void stop() throws Exception {
    client.close();
    other.close();
    stack.close();
  }

  static LeaseGuard mustHold(LeaseClient client, String name, AcquireOptions options)
      throws Exception {
    Acquired acquired = client.acquire(name, options).get(30, TimeUnit.SECONDS);
    return assertInstanceOf(Acquired.Granted.class, acquired, name + " is busy").lease();
  }

  /** Renewals at a third of the TTL keep a 900 ms lease for more than three TTLs. */
  @Test
  void grantIsKeptAliveUntilReleased() throws Exception {
    LeaseGuard lease =
        mustHold(client, "java-kept", AcquireOptions.ttl(Duration.ofMillis(900)).holder("java-a"));
    assertTrue(lease.fencingToken() != 0);
    for (int i = 0; i < 12; i++) {
      DescribeResponse held = other.describe("java-kept");
      assertEquals("java-a", held.getHolder());
      assertEquals(lease.fencingToken(), held.getFencingToken());
      assertFalse(lease.isLost(), () -> lease.lost().join().toString());
      Thread.sleep(250);
    }
    assertTrue(lease.release());
    assertFalse(lease.release(), "a second release is a no-op");
    assertFalse(other.describe("java-kept").getHeld());
    assertFalse(lease.isLost());
  }

  /** A busy lease answers NotGranted naming its holder and token: contention is not an error. */
  @Test
  void busyLeaseIsNotGrantedAndNamesItsHolder() throws Exception {
    try (LeaseGuard first =
        mustHold(client, "java-busy", AcquireOptions.ttl(Duration.ofSeconds(10)).holder("first"))) {
      Acquired second =
          other.acquire("java-busy", AcquireOptions.ttl(Duration.ofSeconds(10))).get();
      Acquired.NotGranted busy = assertInstanceOf(Acquired.NotGranted.class, second);
      assertEquals("first", busy.holder());
      assertEquals(first.fencingToken(), busy.fencingToken());
      assertEquals(1, busy.held());
      assertEquals(1, busy.limit());
    }
  }

  /**
   * A waiter hears {@code waiting}, and gets the lease with a larger token when the holder
   * releases. Its TTL is shorter than its wait, so the grant is confirmed by a renewal first.
   */
  @Test
  void waiterIsGrantedWhenTheHolderReleases() throws Exception {
    LeaseGuard first =
        mustHold(client, "java-handover", AcquireOptions.ttl(Duration.ofSeconds(10)).holder("first"));
    CountDownLatch waiting = new CountDownLatch(1);
    CompletableFuture<Acquired> waiter =
        other.acquire(
            "java-handover",
            AcquireOptions.ttl(Duration.ofMillis(900))
                .waitFor(Duration.ofSeconds(20))
                .holder("waiter")
                .onWaiting(
                    w -> {
                      assertEquals("first", w.holder());
                      assertEquals(1, w.position());
                      waiting.countDown();
                    }));
    assertTrue(waiting.await(10, TimeUnit.SECONDS), "no waiting message");
    Thread.sleep(1_000);
    assertFalse(waiter.isDone());
    assertTrue(first.release());
    LeaseGuard lease =
        assertInstanceOf(Acquired.Granted.class, waiter.get(10, TimeUnit.SECONDS)).lease();
    assertTrue(Long.compareUnsigned(lease.fencingToken(), first.fencingToken()) > 0);
    Thread.sleep(1_500); // beyond its TTL: held thanks to the keepalive
    assertFalse(lease.isLost(), () -> lease.lost().join().toString());
    assertEquals("waiter", client.describe("java-handover").getHolder());
    assertTrue(lease.release());
  }

  /** An operator's Revoke reaches the holder as a loss, with the reason. */
  @Test
  void revokeIsReportedAsALoss() throws Exception {
    LeaseGuard lease = mustHold(client, "java-revoked", AcquireOptions.ttl(Duration.ofMillis(900)));
    assertEquals(lease.fencingToken(), other.revoke("java-revoked", "java test", 0));
    LostReason reason = lease.lost().get(5, TimeUnit.SECONDS);
    assertEquals(new LostReason(LostReason.Kind.LOST, "revoked: java test"), reason);
    assertFalse(lease.release(), "already gone");
  }

  /** A release by lease id from another client (another process) is a loss for the guard. */
  @Test
  void releaseFromAnotherClientIsReportedAsALoss() throws Exception {
    LeaseGuard lease = mustHold(client, "java-released", AcquireOptions.ttl(Duration.ofMillis(900)));
    assertTrue(other.release("java-released", lease.leaseId()));
    LostReason reason = lease.lost().get(5, TimeUnit.SECONDS);
    assertEquals(LostReason.Kind.LOST, reason.kind());
  }

  /** Bad input is the server's INVALID_ARGUMENT, naming the field. */
  @Test
  void badInputIsInvalidArgument() {
    for (String name : List.of("java-bad", "java bad")) {
      long ttlMs = name.contains(" ") ? 1_000 : 1;
      ExecutionException failure =
          org.junit.jupiter.api.Assertions.assertThrows(
              ExecutionException.class,
              () -> client.acquire(name, AcquireOptions.ttl(Duration.ofMillis(ttlMs))).get());
      StatusRuntimeException status =
          assertInstanceOf(StatusRuntimeException.class, failure.getCause());
      assertEquals(Status.Code.INVALID_ARGUMENT, status.getStatus().getCode());
      String field = name.contains(" ") ? "name" : "ttl_ms";
      assertTrue(status.getMessage().contains(field), status.getMessage());
    }
  }

  /** Giving up with orTimeout answers the caller at once and leaves the line. */
  @Test
  void aTimeoutGivesUpTheWait() throws Exception {
    try (LeaseGuard holder =
        mustHold(client, "java-timeout", AcquireOptions.ttl(Duration.ofSeconds(30)))) {
      long start = System.nanoTime();
      CompletableFuture<Acquired> waiter =
          other
              .acquire("java-timeout", AcquireOptions.ttl(Duration.ofSeconds(30)).waitFor(Duration.ofSeconds(30)))
              .orTimeout(500, TimeUnit.MILLISECONDS);
      ExecutionException failure =
          org.junit.jupiter.api.Assertions.assertThrows(ExecutionException.class, waiter::get);
      assertInstanceOf(java.util.concurrent.TimeoutException.class, failure.getCause());
      assertTrue(System.nanoTime() - start < Duration.ofSeconds(2).toNanos());
      // The call is cancelled at once (and its id released): the waiter leaves the queue.
      long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
      while (client.describe("java-timeout").getWaiters() != 0) {
        assertTrue(System.nanoTime() < deadline, "the waiter stayed in line");
        Thread.sleep(50);
      }
    }
  }

  /**
   * Two Acquires with the same own lease id answer the same grant (token and expiry): what makes
   * a retry safe. Another id finds the lease busy.
   */
  @Test
  void anAcquireWithTheSameOwnIdAnswersTheSameGrant() throws Exception {
    ManagedChannel channel = ManagedChannelBuilder.forTarget(stack.target).usePlaintext().build();
    try {
      LeaseServiceGrpc.LeaseServiceBlockingStub stub = LeaseServiceGrpc.newBlockingStub(channel);
      String id = LeaseClient.newLeaseId();
      AcquireRequest request =
          AcquireRequest.newBuilder()
              .setName("java-same-id")
              .setTtlMs(30_000)
              .setLeaseId(id)
              .build();
      Granted first = onlyAnswer(stub, request).getGranted();
      Granted again = onlyAnswer(stub, request).getGranted();
      assertEquals(id, first.getLeaseId());
      assertTrue(first.getFencingToken() != 0);
      assertEquals(first.getFencingToken(), again.getFencingToken());
      assertEquals(first.getExpiresAt(), again.getExpiresAt());
      System.out.printf("the same own id twice: tokens %d and %d%n",
          first.getFencingToken(), again.getFencingToken());
      AcquireResponse another =
          onlyAnswer(stub, request.toBuilder().setLeaseId(LeaseClient.newLeaseId()).build());
      assertTrue(another.hasNotGranted(), another.toString());
      assertTrue(client.release("java-same-id", id));
    } finally {
      channel.shutdownNow();
    }
  }

  private static AcquireResponse onlyAnswer(
      LeaseServiceGrpc.LeaseServiceBlockingStub stub, AcquireRequest request) {
    Iterator<AcquireResponse> answers = stub.acquire(request);
    AcquireResponse answer = answers.next();
    assertFalse(answers.hasNext(), "more than one answer to a try-once Acquire");
    return answer;
  }

  /** The example program holds a lease, works, releases (exit 0); a busy lease exits 75. */
  @Test
  void theExampleRuns() throws Exception {
    Process example = runExample("java-example", 300);
    String output = new String(example.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertEquals(0, example.waitFor(), output);
    assertTrue(output.contains("work done"), output);
    assertFalse(client.describe("java-example").getHeld());
    try (LeaseGuard holder =
        mustHold(client, "java-example", AcquireOptions.ttl(Duration.ofSeconds(30)).holder("busy-holder"))) {
      // The example waits (500 ms here) for the lease, then says who holds it.
      Process busy = runExample("java-example", 300);
      String busyOutput = new String(busy.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      assertEquals(75, busy.waitFor(), busyOutput);
      assertTrue(busyOutput.contains("busy: busy-holder"), busyOutput);
    }
  }

  /**
   * consumer-test/Main.java, compiled and run by Java's source launcher on the jar and its
   * dependencies alone (no class of the source tree or the tests), acquires, guards and releases.
   */
  @Test
  void aConsumerOfTheJarAloneAcquiresGuardsAndReleases() throws Exception {
    Process consumer =
        new ProcessBuilder(
                java(), "-cp", Installed.jarAndDependencies(), "consumer-test/Main.java", stack.target)
            .redirectErrorStream(true)
            .start();
    String output = new String(consumer.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertEquals(0, consumer.waitFor(), output);
    assertTrue(output.contains("consumer: acquired, guarded, released"), output);
  }

  /** The locks example: a nested acquire gets the same lease; a read lock is shared. */
  @Test
  void theLocksExampleRuns() throws Exception {
    Process example =
        new ProcessBuilder(java(), "-cp", Installed.examplesClasspath(), "leased.example.Locks", stack.target)
            .redirectErrorStream(true)
            .start();
    String output = new String(example.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertEquals(0, example.waitFor(), output);
    assertTrue(output.contains("hold count 2, same lease: true"), output);
    assertTrue(output.contains("reading the catalog, shared: true"), output);
    assertFalse(client.describe("ledger").getHeld());
    assertFalse(client.describe("catalog").getHeld());
  }

  private static Process runExample(String name, long workMs) throws Exception {
    return new ProcessBuilder(
            java(), "-cp", Installed.examplesClasspath(), "leased.example.Example",
            stack.target, name, String.valueOf(workMs), "500")
        .redirectErrorStream(true)
        .start();
  }

  static String java() {
    return Path.of(System.getProperty("java.home"), "bin", "java").toString();
  }
}
