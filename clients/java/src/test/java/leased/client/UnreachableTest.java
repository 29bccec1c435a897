package leased.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.parallel.Isolated;

/** The server dies: the guard says the lease is lost before it could expire on the server. */
// Alone, while no other test class runs (test.sh runs the others concurrently): its bounds are on timers.
@Isolated
class UnreachableTest {
  @Test
  void lossIsReportedBeforeExpiryWhenTheServerIsKilled() throws Exception {
    try (Stack stack = Stack.start();
        LeaseClient client = LeaseClient.forTarget(stack.target)) {
      LeaseGuard lease =
          LeaseClientTest.mustHold(client, "java-cut-off", AcquireOptions.ttl(Duration.ofSeconds(3)));
      // The first renewal goes out at 1 s; it is the last one answered.
      Thread.sleep(1_500);
      stack.killLeased();
      long killedAt = System.nanoTime();
      LostReason reason = lease.lost().get(10, TimeUnit.SECONDS);
      long afterKillMs = (System.nanoTime() - killedAt) / 1_000_000;
      System.out.printf("server killed: loss reported %d ms later (TTL 3 s)%n", afterKillMs);
      assertEquals(LostReason.Kind.UNREACHABLE, reason.kind());
      // Due 2.85 s after the last answered renewal was sent (about 1 s after the grant), so
      // about 2.35 s after the kill; never as late as the TTL.
      assertTrue(afterKillMs < 3_000, afterKillMs + " ms");
      assertTrue(afterKillMs > 1_500, afterKillMs + " ms");
    }
  }
}
