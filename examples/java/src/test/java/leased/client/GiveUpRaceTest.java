package leased.client;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.LockSupport;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIfEnvironmentVariable;

/**
 * 100 callers give up a wait at the moment the holder releases: none may keep the lease (TTL
 * 30 s). Without the give-up grace (cancel at once, as a plain gRPC cancel does) some do.
 */
class GiveUpRaceTest {
  private static final int TRIES = 100;
  private static final int AT_ONCE = 20;

  @Test
  void aCallerThatGivesUpNeverKeepsTheLease() throws Exception {
    try (Stack stack = Stack.start();
        LeaseClient holders = LeaseClient.forTarget(stack.target);
        LeaseClient waiters = LeaseClient.forTarget(stack.target)) {
      int[] outcome = race(holders, waiters, "java-give-up-");
      System.out.printf(
          "give-up race, %d tries: granted after giving up and released by the client %d,"
              + " granted before giving up %d, left held %d%n",
          TRIES, waiters.untakenGrantsReleased.get(), outcome[0], outcome[1]);
      assertTrue(outcome[1] == 0, outcome[1] + " leases left held by a caller that gave up");
    }
  }

  /** The control: cancelling at once orphans leases. Opt-in: LEASED_JAVA_NO_GRACE=1. */
  @Test
  @EnabledIfEnvironmentVariable(named = "LEASED_JAVA_NO_GRACE", matches = "1")
  void cancellingAtOnceLeavesLeasesHeld() throws Exception {
    try (Stack stack = Stack.start();
        LeaseClient holders = LeaseClient.forTarget(stack.target);
        LeaseClient waiters = LeaseClient.withGiveUpGrace(stack.target, Duration.ZERO)) {
      int[] outcome = race(holders, waiters, "java-no-grace-");
      System.out.printf("without the grace: %d of %d left held%n", outcome[1], TRIES);
      assertTrue(outcome[1] > 0);
    }
  }

  /** Runs the tries; answers {granted before giving up, left held}. */
  private static int[] race(LeaseClient holders, LeaseClient waiters, String prefix)
      throws Exception {
    AtomicInteger grantedFirst = new AtomicInteger();
    AtomicInteger leftHeld = new AtomicInteger();
    for (int batch = 0; batch < TRIES / AT_ONCE; batch++) {
      List<CompletableFuture<Void>> tries = new ArrayList<>();
      for (int i = 0; i < AT_ONCE; i++) {
        int index = batch * AT_ONCE + i;
        tries.add(
            CompletableFuture.runAsync(
                () -> oneTry(holders, waiters, prefix + index, index, grantedFirst, leftHeld)));
      }
      CompletableFuture.allOf(tries.toArray(CompletableFuture[]::new)).get(60, TimeUnit.SECONDS);
    }
    return new int[] {grantedFirst.get(), leftHeld.get()};
  }

  private static void oneTry(
      LeaseClient holders,
      LeaseClient waiters,
      String name,
      int index,
      AtomicInteger grantedFirst,
      AtomicInteger leftHeld) {
    try {
      LeaseGuard holder =
          LeaseClientTest.mustHold(holders, name, AcquireOptions.ttl(Duration.ofSeconds(30)));
      CountDownLatch queued = new CountDownLatch(1);
      CompletableFuture<Acquired> waiter =
          waiters.acquire(
              name,
              AcquireOptions.ttl(Duration.ofSeconds(30))
                  .waitFor(Duration.ofSeconds(30))
                  .holder("gave-up")
                  .onWaiting(w -> queued.countDown()));
      assertTrue(queued.await(10, TimeUnit.SECONDS), name + ": never queued");
      // The give-up lands anywhere from just after the release starts to after the grant left.
      CompletableFuture<Boolean> released = CompletableFuture.supplyAsync(holder::release);
      LockSupport.parkNanos(Duration.ofMillis(index % 10).toNanos());
      if (!waiter.cancel(true)) {
        // The grant won the race: the waiter held the lease before it would have given up.
        ((Acquired.Granted) waiter.join()).lease().close();
        grantedFirst.incrementAndGet();
      }
      assertTrue(released.get(10, TimeUnit.SECONDS));
      Thread.sleep(LeaseClient.GIVE_UP_GRACE.plusSeconds(1).toMillis());
      if (holders.describe(name).getHeld()) {
        leftHeld.incrementAndGet();
        holders.revoke(name, "the race test cleans up", 0);
      }
      assertFalse(holder.isLost());
    } catch (Exception e) {
      throw new IllegalStateException(name, e);
    }
  }
}
