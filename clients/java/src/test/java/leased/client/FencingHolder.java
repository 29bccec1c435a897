package leased.client;

import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

/**
 * Holder 1 of Kleppmann's scenario, a process of its own so that the test can SIGSTOP it: driven
 * over stdin, one command a line, one answer a line on stdout.
 *
 * <pre>
 *   acquire NAME TTL_MS              -> granted TOKEN
 *   write ADAPTER on|off KEY VALUE   -> ok | refused MESSAGE | error MESSAGE
 * </pre>
 *
 * A write does not look at the lease first: it stands for a holder that checked its lease, then
 * paused (the SIGSTOP lands while it waits for the command) and writes when it resumes.
 *
 * <p>Usage: {@code FencingHolder LEASED_TARGET JDBC_URL REDIS_PORT}.
 */
public final class FencingHolder {
  public static void main(String[] args) throws Exception {
    KleppmannWrites writes = new KleppmannWrites(args[1], Integer.parseInt(args[2]));
    BufferedReader commands =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    try (LeaseClient client = LeaseClient.forTarget(args[0])) {
      LeaseGuard lease = null;
      System.out.println("ready");
      for (String line; (line = commands.readLine()) != null; ) {
        String[] command = line.split(" ", 5);
        try {
          if (command[0].equals("acquire")) {
            if (lease != null) {
              lease.close();
            }
            AcquireOptions options =
                AcquireOptions.ttl(Duration.ofMillis(Long.parseLong(command[2])))
                    .waitFor(Duration.ofSeconds(10));
            Acquired acquired = client.acquire(command[1], options).get(20, TimeUnit.SECONDS);
            lease = ((Acquired.Granted) acquired).lease();
            System.out.println("granted " + lease.fencingToken());
          } else if (command[0].equals("write")) {
            writes.write(command[1], command[2].equals("on"), command[3], lease, command[4]);
            System.out.println("ok");
          } else {
            System.out.println("error unknown command " + line);
          }
        } catch (StaleTokenException stale) {
          System.out.println("refused " + oneLine(stale.getMessage()));
        } catch (StatusRuntimeException e) {
          boolean stale = e.getStatus().getCode() == Status.Code.FAILED_PRECONDITION;
          System.out.println((stale ? "refused " : "error ") + oneLine(e.getMessage()));
        } catch (Exception e) {
          System.out.println("error " + oneLine(String.valueOf(e)));
        }
      }
    }
  }

  /** The first line: PostgreSQL's message goes on with its detail, hint and context. */
  private static String oneLine(String text) {
    return text.lines().findFirst().orElse("");
  }
}
