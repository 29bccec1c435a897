package leased.example;

import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import leased.client.AcquireOptions;
import leased.client.Acquired;
import leased.client.LeaseClient;
import leased.client.LeaseGuard;
import leased.client.LostReason;

/**
 * Holds a lease while doing some work, and stops the moment it is lost.
 *
 * <p>Usage: {@code Example [TARGET [NAME [WORK_MS [WAIT_MS]]]]}. Exit status: 0 worked and released, 75 busy,
 * 76 lost during the work.
 */
public final class Example {
  public static void main(String[] args) throws Exception {
    String target = args.length > 0 ? args[0] : "127.0.0.1:50051";
    String name = args.length > 1 ? args[1] : "nightly-report";
    long workMs = args.length > 2 ? Long.parseLong(args[2]) : 2_000;
    long waitMs = args.length > 3 ? Long.parseLong(args[3]) : 10_000;
    try (LeaseClient client = LeaseClient.forTarget(target)) {
      AcquireOptions options =
          AcquireOptions.ttl(Duration.ofSeconds(3))
              .waitFor(Duration.ofMillis(waitMs))
              .onWaiting(w -> System.out.println("waiting behind " + w.holder()));
      Acquired acquired = client.acquire(name, options).get();
      if (acquired instanceof Acquired.NotGranted busy) {
        System.out.println("busy: " + busy.holder() + " holds it");
        System.exit(75);
      }
      try (LeaseGuard lease = ((Acquired.Granted) acquired).lease()) {
        System.out.println(
            "holding " + name + " with fencing token " + Long.toUnsignedString(lease.fencingToken()));
        try {
          // The work: here, waiting. A real job passes the token with every write, and checks
          // lease.isLost() between steps or stops when lost() completes, as here.
          LostReason reason = lease.lost().get(workMs, TimeUnit.MILLISECONDS);
          System.out.println("stopped: " + reason);
          System.exit(76);
        } catch (TimeoutException done) {
          System.out.println("work done");
        }
      }
    }
  }
}
