package leased.example;

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import lease.v1.Lease.WatchEvent;
import leased.client.AcquireOptions;
import leased.client.Acquired;
import leased.client.LeaseClient;
import leased.client.LeaseGuard;
import leased.client.Watch;

/**
 * Leader election on a leased lease.
 *
 * <p>Usage: {@code LeaderElection [--target 127.0.0.1:50051] [--election leader/demo] [--id ID]
 * [--ttl-ms 5000]}
 *
 * <p>Every copy of this program is a candidate: it campaigns with a waiting Acquire, leads while
 * its lease holds, and steps down (then campaigns again) the moment the lease is lost. Every
 * candidate follows the election with Watch and prints who leads. A leader that dies is replaced
 * one TTL later, with a larger fencing token; one stopped with Ctrl-C or SIGTERM releases the
 * lease and is replaced at once.
 */
public final class LeaderElection {
  /** How long one campaign waits in line before asking again (the server's --max-wait is 10 min). */
  static final Duration CAMPAIGN_WAIT = Duration.ofMinutes(1);

  /** Pause before retrying a campaign or a watch that failed (server unreachable, say). */
  static final long RETRY_DELAY_MS = 1000;

  public static void main(String[] args) throws Exception {
    Map<String, String> flags = flags(args);
    String election = flags.getOrDefault("--election", "leader/demo");
    String id = flags.getOrDefault("--id", LeaseClient.defaultHolder());
    AcquireOptions options =
        AcquireOptions.ttl(Duration.ofMillis(Long.parseLong(flags.getOrDefault("--ttl-ms", "5000"))))
            .waitFor(CAMPAIGN_WAIT)
            .holder(id);
    // SIGTERM and Ctrl-C run shutdown hooks: this one tells the campaign to stop, and holds the
    // JVM up until the campaign has released its lease.
    CompletableFuture<Void> stopping = new CompletableFuture<>();
    Thread campaigner = Thread.currentThread();
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  stopping.complete(null);
                  try {
                    campaigner.join(5_000);
                  } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                  }
                }));
    try (LeaseClient client = LeaseClient.forTarget(flags.getOrDefault("--target", "127.0.0.1:50051"))) {
      // Every candidate follows the election, the leader too: one view of who leads, for all.
      follow(client, election, stopping);
      campaign(client, election, options, id, stopping);
    }
  }

  /** Campaigns until stopped: wait in line for the lease, lead while it holds, campaign again. */
  static void campaign(
      LeaseClient client, String election, AcquireOptions options, String id, CompletableFuture<Void> stopping)
      throws InterruptedException {
    while (!stopping.isDone()) {
      CompletableFuture<Acquired> acquiring = client.acquire(election, options);
      Acquired acquired;
      try {
        CompletableFuture.anyOf(acquiring, stopping).get();
        if (stopping.isDone()) {
          // Give the wait up: the client cancels it and releases a grant made meanwhile. A grant
          // that arrived just before is ours to release.
          if (!acquiring.cancel(true) && acquiring.getNow(null) instanceof Acquired.Granted late) {
            late.lease().close();
          }
          return;
        }
        acquired = acquiring.get();
      } catch (ExecutionException failed) {
        System.err.println("campaign failed: " + failed.getCause() + "; retrying");
        Thread.sleep(RETRY_DELAY_MS);
        continue;
      }
      if (!(acquired instanceof Acquired.Granted granted)) {
        continue; // someone led for the whole wait: queue again
      }
      try (LeaseGuard lease = granted.lease()) { // close() releases
        System.out.println(
            "leading as " + id + " with fencing token " + Long.toUnsignedString(lease.fencingToken()));
        // Lead until the lease is lost or we are stopped; then step down before anyone else can
        // be granted the lease. The leader's work would run here, every write it makes carrying
        // lease.fencingToken(), so that a resource can refuse a leader replaced without noticing.
        CompletableFuture.anyOf(lease.lost(), stopping).join();
        System.out.println(
            stopping.isDone() ? "stepped down: stopping" : "stepped down: " + lease.lost().join());
      }
    }
  }

  /**
   * Prints who leads, from the election's Watch: a snapshot first, then each change. A watch that
   * fails (the server restarts, say) is opened again; its snapshot restates the leader.
   */
  static void follow(LeaseClient client, String election, CompletableFuture<Void> stopping) {
    Watch watch = client.watch(election, LeaderElection::print);
    stopping.thenRun(watch::close);
    watch
        .ended()
        .whenComplete(
            (closed, error) -> {
              if (error != null && !stopping.isDone()) {
                System.err.println("watch ended: " + error + "; watching again");
                CompletableFuture.delayedExecutor(RETRY_DELAY_MS, TimeUnit.MILLISECONDS)
                    .execute(() -> follow(client, election, stopping));
              }
            });
  }

  /** One line per event: the cause, and the leader after it. */
  static void print(WatchEvent event) {
    String cause = event.getCause().name().replace("CAUSE_", "");
    String who =
        event.getHeld()
            ? "leader "
                + quoted(event.getHolders(0).getHolder())
                + ", fencing token "
                + Long.toUnsignedString(event.getHolders(0).getFencingToken())
            : "no leader";
    System.out.println("[" + cause + "] " + who);
  }

  /** The holder in quotes, with the characters a terminal would act on escaped. */
  static String quoted(String text) {
    StringBuilder out = new StringBuilder("\"");
    text.codePoints()
        .forEach(c -> out.append(Character.isISOControl(c) || c == '"' ? String.format("\\u%04x", c) : Character.toString(c)));
    return out.append('"').toString();
  }

  /** {@code --flag value} pairs. */
  static Map<String, String> flags(String[] args) {
    Map<String, String> flags = new HashMap<>();
    for (int i = 0; i + 1 < args.length; i += 2) {
      flags.put(args[i], args[i + 1]);
    }
    return flags;
  }
}
