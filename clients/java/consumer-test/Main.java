// A program that uses leased-client as a user's would: it sees only the jar and the jar's
// dependencies, no source of the client. LeaseClientTest runs it with Java's source launcher
// (`java -cp leased-client-0.1.0.jar:DEPENDENCIES Main.java TARGET`) against a real leased.
// It acquires a lease, checks that the server holds it for its token while the guard renews
// it, and releases it; exit status 0 when all of that held, 1 otherwise.
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import leased.client.AcquireOptions;
import leased.client.Acquired;
import leased.client.LeaseClient;
import leased.client.LeaseGuard;

public class Main {
  public static void main(String[] args) throws Exception {
    try (LeaseClient client = LeaseClient.forTarget(args[0])) {
      AcquireOptions options = AcquireOptions.ttl(Duration.ofMillis(600)).holder("consumer");
      Acquired acquired = client.acquire("consumer-test", options).get(30, TimeUnit.SECONDS);
      if (!(acquired instanceof Acquired.Granted granted)) {
        throw new AssertionError("not granted: " + acquired);
      }
      try (LeaseGuard lease = granted.lease()) {
        Thread.sleep(1_500); // more than two TTLs: only the guard's renewals keep it
        check(!lease.isLost(), "the guard lost the lease: " + lease.lost().getNow(null));
        check(client.checkToken("consumer-test", lease.fencingToken()).getCurrent(),
            "the server does not hold the lease with our token");
        check(lease.release(), "the release found nothing to release");
      }
      check(!client.describe("consumer-test").getHeld(), "still held after the release");
      System.out.println("consumer: acquired, guarded, released");
    }
  }

  static void check(boolean holds, String otherwise) {
    if (!holds) {
      System.out.println("consumer: " + otherwise);
      System.exit(1);
    }
  }
}
