package leased.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;
import java.util.function.Function;
import lease.v1.Lease.AcquireRequest;
import lease.v1.Lease.AcquireResponse;
import lease.v1.Lease.DescribeResponse;
import lease.v1.Lease.Granted;
import lease.v1.Lease.ReleaseRequest;
import lease.v1.LeaseServiceGrpc;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIfEnvironmentVariable;
import org.junit.jupiter.api.parallel.Isolated;

/**
 * 100 callers give up a wait at the moment the holder releases: none may keep the lease (TTL
 * 30 s). The client cancels the call, then releases its own lease id. The control shows why both
 * are needed: a plain gRPC cancel, without an own id and without a Release, leaves some held, and
 * so does a cancel with an own id but no Release (the server never releases such a grant itself).
 */
// Alone, while no other test class runs (test.sh runs the others concurrently): how often the race is hit depends on timing.
@Isolated
class GiveUpRaceTest {
  private static final int TRIES = 100;
  private static final int AT_ONCE = 20;

  /**
   * How many tries must hit the race (a grant that crossed the give-up, ended by the client's
   * Release: {@code untakenGrantsReleased}), or "nothing left held" shows nothing: 18 to 58 did in
   * 26 runs on a loaded 2-core machine, so 5 cannot fail by chance; a test whose give-ups never
   * race the release finds 0.
   */
  private static final int RACE_HIT_AT_LEAST = 5;

  /** One way of waiting for a lease and giving the wait up. */
  interface Waiter {
    /** Returns once the wait is in line. */
    void awaitQueued() throws InterruptedException;

    /** Gives up; false if the grant came first (the waiter then let the lease go). */
    boolean giveUp();
  }

  @Test
  void aCallerThatGivesUpNeverKeepsTheLease() throws Exception {
    try (Stack stack = Stack.start();
        LeaseClient holders = LeaseClient.forTarget(stack.target);
        LeaseClient waiters = LeaseClient.forTarget(stack.target)) {
      int[] outcome = race(holders, "java-give-up-", name -> clientWaiter(waiters, name));
      waiters.close(); // waits for the give-ups' Releases, so that each one is counted
      int racesHit = waiters.untakenGrantsReleased.get();
      System.out.printf(
          "give-up race (cancel + Release), %d tries: granted before giving up %d, give-ups"
              + " whose Release ended a grant %d, orphans %d/%d%n",
          TRIES, outcome[0], racesHit, outcome[1], TRIES);
      assertEquals(0, outcome[1], outcome[1] + " leases left held by a caller that gave up");
      assertTrue(
          racesHit >= RACE_HIT_AT_LEAST,
          "only "
              + racesHit
              + " of "
              + TRIES
              + " give-ups hit the race (a grant ended by the give-up's Release; at least "
              + RACE_HIT_AT_LEAST
              + " expected): nothing left held shows nothing");
    }
  }

  /**
   * The control: cancelling without a Release orphans leases, whether the Acquire carried an own
   * id or not. Opt-in (LEASED_JAVA_GIVE_UP_CONTROL=1): how many is down to timing.
   */
  @Test
  @EnabledIfEnvironmentVariable(named = "LEASED_JAVA_GIVE_UP_CONTROL", matches = "1")
  void cancellingWithoutAReleaseLeavesLeasesHeld() throws Exception {
    try (Stack stack = Stack.start();
        LeaseClient holders = LeaseClient.forTarget(stack.target)) {
      ManagedChannel channel = ManagedChannelBuilder.forTarget(stack.target).usePlaintext().build();
      try {
        LeaseServiceGrpc.LeaseServiceStub stub = LeaseServiceGrpc.newStub(channel);
        int[] plain = race(holders, "java-plain-cancel-", name -> cancelOnly(stub, name, ""));
        System.out.printf(
            "control, a plain cancel (no own id, no Release): orphans %d/%d%n", plain[1], TRIES);
        int[] ownId =
            race(
                holders,
                "java-own-id-cancel-",
                name -> cancelOnly(stub, name, LeaseClient.newLeaseId()));
        System.out.printf(
            "control, a cancel with an own id and no Release: orphans %d/%d%n", ownId[1], TRIES);
        assertTrue(plain[1] + ownId[1] > 0);
      } finally {
        channel.shutdownNow();
      }
    }
  }

  private static AcquireOptions waitOptions() {
    return AcquireOptions.ttl(Duration.ofSeconds(30))
        .waitFor(Duration.ofSeconds(30))
        .holder("gave-up");
  }

  /** The client's way: cancel the future. */
  private static Waiter clientWaiter(LeaseClient waiters, String name) {
    CountDownLatch queued = new CountDownLatch(1);
    CompletableFuture<Acquired> waiter =
        waiters.acquire(name, waitOptions().onWaiting(w -> queued.countDown()));
    return new Waiter() {
      @Override
      public void awaitQueued() throws InterruptedException {
        assertTrue(queued.await(10, TimeUnit.SECONDS), name + ": never queued");
      }

      @Override
      public boolean giveUp() {
        if (waiter.cancel(true)) {
          return true;
        }
        ((Acquired.Granted) waiter.join()).lease().close();
        return false;
      }
    };
  }

  /** A naive client: cancels the call and ignores whatever arrives after that. */
  private static Waiter cancelOnly(LeaseServiceGrpc.LeaseServiceStub stub, String name, String id) {
    CountDownLatch queued = new CountDownLatch(1);
    AtomicReference<Granted> granted = new AtomicReference<>();
    AtomicReference<ClientCallStreamObserver<AcquireRequest>> call = new AtomicReference<>();
    AcquireOptions options = waitOptions();
    AcquireRequest request =
        AcquireRequest.newBuilder()
            .setName(name)
            .setHolder(options.holder)
            .setTtlMs(options.ttl.toMillis())
            .setWaitMs(options.wait.toMillis())
            .setLeaseId(id)
            .build();
    stub.acquire(
        request,
        new ClientResponseObserver<AcquireRequest, AcquireResponse>() {
          @Override
          public void beforeStart(ClientCallStreamObserver<AcquireRequest> started) {
            call.set(started);
          }

          @Override
          public void onNext(AcquireResponse response) {
            if (response.hasWaiting()) {
              queued.countDown();
            } else if (response.hasGranted()) {
              granted.set(response.getGranted());
            }
          }

          @Override
          public void onError(Throwable error) {}

          @Override
          public void onCompleted() {}
        });
    return new Waiter() {
      @Override
      public void awaitQueued() throws InterruptedException {
        assertTrue(queued.await(10, TimeUnit.SECONDS), name + ": never queued");
      }

      @Override
      public boolean giveUp() {
        Granted first = granted.get();
        if (first != null) {
          LeaseServiceGrpc.newBlockingStub(stub.getChannel())
              .release(
                  ReleaseRequest.newBuilder()
                      .setName(name)
                      .setLeaseId(first.getLeaseId())
                      .build());
          return false;
        }
        call.get().cancel("the caller gave up", null);
        return true;
      }
    };
  }

  /** Runs the tries; answers {granted before giving up, left held}. */
  private static int[] race(
      LeaseClient holders, String prefix, Function<String, Waiter> waiters)
      throws Exception {
    AtomicInteger grantedFirst = new AtomicInteger();
    AtomicInteger leftHeld = new AtomicInteger();
    ExecutorService pool = Executors.newFixedThreadPool(AT_ONCE);
    // The holders' releases on threads of their own: in the common pool (one thread on 2 cores)
    // they queued behind each other, and most give-ups came before their release was even sent.
    ExecutorService releases = Executors.newFixedThreadPool(AT_ONCE);
    try {
      for (int batch = 0; batch < TRIES / AT_ONCE; batch++) {
        List<CompletableFuture<Void>> tries = new ArrayList<>();
        for (int i = 0; i < AT_ONCE; i++) {
          int index = batch * AT_ONCE + i;
          tries.add(
              CompletableFuture.runAsync(
                  () ->
                      oneTry(
                          holders,
                          waiters,
                          prefix + index,
                          index,
                          releases,
                          grantedFirst,
                          leftHeld),
                  pool));
        }
        CompletableFuture.allOf(tries.toArray(CompletableFuture[]::new)).get(60, TimeUnit.SECONDS);
      }
    } finally {
      pool.shutdownNow();
      releases.shutdownNow();
    }
    return new int[] {grantedFirst.get(), leftHeld.get()};
  }

  private static void oneTry(
      LeaseClient holders,
      Function<String, Waiter> waiters,
      String name,
      int index,
      ExecutorService releases,
      AtomicInteger grantedFirst,
      AtomicInteger leftHeld) {
    try {
      LeaseGuard holder =
          LeaseClientTest.mustHold(holders, name, AcquireOptions.ttl(Duration.ofSeconds(30)));
      Waiter waiter = waiters.apply(name);
      waiter.awaitQueued();
      // The give-up lands anywhere from just after the release starts to after the grant left:
      // 0 to 38 ms after it (with 20 tries at once on a loaded 2-core machine, the grant seldom
      // reached the waiter within 38 ms; give-ups 0 to 9 ms after it hit the race 5-26 times).
      CompletableFuture<Boolean> released =
          CompletableFuture.supplyAsync(holder::release, releases);
      LockSupport.parkNanos(Duration.ofMillis(index % 20 * 2).toNanos());
      if (!waiter.giveUp()) {
        grantedFirst.incrementAndGet(); // the grant won: the waiter held the lease, then let go
      }
      assertTrue(released.get(10, TimeUnit.SECONDS));
      // The give-up's Release is on its way: give it its deadline. A lease still held after
      // that is held for its TTL (30 s), by nobody.
      long deadline =
          System.nanoTime() + LeaseClient.GIVE_UP_RELEASE_TIMEOUT.plusSeconds(1).toNanos();
      DescribeResponse state = holders.describe(name);
      while (state.getHeld() && System.nanoTime() < deadline) {
        Thread.sleep(50);
        state = holders.describe(name);
      }
      if (state.getHeld()) {
        System.out.printf(
            "orphan %s: held by %s for %d ms more%n",
            name, state.getHolder(), state.getRemainingMs());
        leftHeld.incrementAndGet();
        holders.revoke(name, "the race test cleans up", 0);
      }
      assertFalse(holder.isLost());
    } catch (Exception e) {
      throw new IllegalStateException(name, e);
    }
  }
}
