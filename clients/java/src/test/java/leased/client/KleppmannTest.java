package leased.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.StatusRuntimeException;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.sql.DriverManager;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Kleppmann's scenario, with real processes, for each fencing adapter: holder 1 (a {@link
 * FencingHolder} process) acquires a 500 ms lease from a real leased and is SIGSTOPped before its
 * write; well past its TTL, holder 2 (this test) is granted the lease, with a larger token, and
 * writes; holder 1 is resumed with its write. Fencing on, the resource refuses holder 1's write
 * and holds holder 2's data; fencing off, holder 1's write overwrites holder 2's (the test of each
 * adapter can fail). The resources are a real PostgreSQL, a real redis-server and a real gRPC
 * service on loopback TCP.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class KleppmannTest {
  private static final Duration TTL = Duration.ofMillis(500);
  private static final AtomicInteger SCENARIOS = new AtomicInteger(); // a lease name each

  private static KleppmannWrites writes;
  private static Process holder1;
  private static BufferedReader holder1Says;
  private static Writer holder1Hears;
  private static LeaseClient holder2;
  private static FencedStore fencedStore;
  private static FencedStore unfencedStore;
  private static FencedStore postgresMarkedStore;
  private static FencedStore redisMarkedStore;
  private static Resp redisMarks;

  @BeforeAll
  static void start() throws Exception {
    writes = new KleppmannWrites(Scratch.postgres(), Scratch.redis());
    holder1 =
        new ProcessBuilder(
                "java", "-XX:TieredStopAtLevel=1", "-cp", Installed.testClasspath(),
                FencingHolder.class.getName(), Scratch.leased().target, Scratch.postgres(),
                String.valueOf(Scratch.redis()))
            .redirectError(ProcessBuilder.Redirect.INHERIT)
            .start();
    holder1Says =
        new BufferedReader(new InputStreamReader(holder1.getInputStream(), StandardCharsets.UTF_8));
    holder1Hears = new OutputStreamWriter(holder1.getOutputStream(), StandardCharsets.UTF_8);
    assertEquals("ready", answer());
    holder2 = Scratch.client();
    fencedStore = new FencedStore(new FencingInterceptor());
    unfencedStore = new FencedStore(null);
    String postgres = Scratch.postgres();
    postgresMarkedStore =
        new FencedStore(
            new FencingInterceptor(
                FenceMarks.postgres(() -> DriverManager.getConnection(postgres), "kleppmann:")));
    redisMarks = new Resp(Scratch.redis());
    redisMarkedStore =
        new FencedStore(new FencingInterceptor(FenceMarks.redis(redisMarks::fcall, "kleppmann:")));
  }

  @AfterAll
  static void stop() throws Exception {
    if (holder1 != null) {
      holder1.destroyForcibly().waitFor();
    }
    for (FencedStore store :
        new FencedStore[] {fencedStore, unfencedStore, postgresMarkedStore, redisMarkedStore}) {
      if (store != null) {
        store.close();
      }
    }
    if (redisMarks != null) {
      redisMarks.close();
    }
  }

  @Test
  void postgresFenceRefusesThePausedHolder() throws Exception {
    refused("PostgreSQL leased.fence", "pg-fence", "row-1");
  }

  @Test
  void postgresFenceOffLetsThePausedHolderOverwrite() throws Exception {
    overwritten("PostgreSQL leased.fence", "pg-fence", "row-2");
  }

  @Test
  void postgresRowTriggerRefusesThePausedHolder() throws Exception {
    refused("PostgreSQL row trigger", "pg-row", "row-1");
  }

  @Test
  void postgresRowsWithoutTheTriggerLetThePausedHolderOverwrite() throws Exception {
    overwritten("PostgreSQL row trigger", "pg-row", "row-2");
  }

  @Test
  void redisFencedSetRefusesThePausedHolder() throws Exception {
    refused("Redis leased_set", "redis", "kleppmann-1");
  }

  @Test
  void redisPlainSetLetsThePausedHolderOverwrite() throws Exception {
    overwritten("Redis leased_set", "redis", "kleppmann-2");
  }

  @Test
  void fencingInterceptorRefusesThePausedHolder() throws Exception {
    refused("gRPC interceptor, marks in process", "grpc", fencedStore.target());
  }

  @Test
  void fencingInterceptorWithMarksInPostgresRefusesThePausedHolder() throws Exception {
    refused("gRPC interceptor, marks in PostgreSQL", "grpc", postgresMarkedStore.target());
  }

  @Test
  void fencingInterceptorWithMarksInRedisRefusesThePausedHolder() throws Exception {
    refused("gRPC interceptor, marks in Redis", "grpc", redisMarkedStore.target());
  }

  @Test
  void serviceWithoutTheInterceptorLetsThePausedHolderOverwrite() throws Exception {
    overwritten("gRPC interceptor", "grpc", unfencedStore.target());
  }

  private void refused(String label, String adapter, String key) throws Exception {
    Outcome outcome = play(adapter, true, key);
    assertTrue(
        outcome.holder1Answer.startsWith("refused "),
        adapter + ": holder 1's stale write was not refused: " + outcome.holder1Answer);
    assertTrue(
        outcome.holder1Answer.contains(Long.toString(outcome.token1))
            && outcome.holder1Answer.contains(Long.toString(outcome.token2)),
        "the refusal names both tokens: " + outcome.holder1Answer);
    assertEquals(outcome.holder2Value, outcome.stored, adapter + ": the resource's data");
    System.out.printf(
        "kleppmann, %s, fencing on: holder 1's write (token %d) refused (%s); the resource holds"
            + " holder 2's data (token %d)%n",
        label, outcome.token1, outcome.holder1Answer, outcome.token2);
  }

  private void overwritten(String label, String adapter, String key) throws Exception {
    Outcome outcome = play(adapter, false, key);
    assertEquals("ok", outcome.holder1Answer, adapter + ": holder 1's write without fencing");
    assertEquals(outcome.holder1Value, outcome.stored, adapter + ": the resource's data");
    System.out.printf(
        "kleppmann, %s, fencing off: holder 1's write (token %d) overwrote holder 2's (token %d);"
            + " the resource holds \"%s\"%n",
        label, outcome.token1, outcome.token2, outcome.stored);
  }

  private record Outcome(
      long token1, long token2, String holder1Value, String holder2Value, String holder1Answer,
      String stored) {}

  /** The scenario, once: holder 1 paused past its TTL while holder 2 acquires and writes. */
  private Outcome play(String adapter, boolean fencing, String key) throws Exception {
    String lease = "kleppmann-" + SCENARIOS.incrementAndGet();
    writes.prepare(adapter, key);
    String granted = ask("acquire " + lease + " " + TTL.toMillis());
    assertTrue(granted.startsWith("granted "), granted);
    long token1 = Long.parseLong(granted.substring("granted ".length()));

    Scratch.signal(holder1, "-STOP"); // paused before its write, with its lease
    try {
      Thread.sleep(TTL.toMillis() * 2); // well past its TTL: no renewal went out
      AcquireOptions options = AcquireOptions.ttl(Duration.ofSeconds(10)).waitFor(Duration.ofSeconds(10));
      Acquired acquired = holder2.acquire(lease, options).get(20, TimeUnit.SECONDS);
      try (LeaseGuard holder2Lease = ((Acquired.Granted) acquired).lease()) {
        long token2 = holder2Lease.fencingToken();
        assertTrue(token2 > token1, "holder 2's token " + token2 + " after " + token1);
        String holder2Value = "holder 2, token " + token2;
        writes.write(adapter, fencing, key, holder2Lease, holder2Value);

        // Holder 1 resumes where it paused: its write, with its old token.
        String holder1Value = "holder 1, token " + token1;
        tell("write " + adapter + " " + (fencing ? "on" : "off") + " " + key + " " + holder1Value);
        Scratch.signal(holder1, "-CONT");
        String holder1Answer = answer();
        String stored =
            adapter.equals("grpc") ? store(key).value() : writes.read(adapter, fencing, key);
        return new Outcome(token1, token2, holder1Value, holder2Value, holder1Answer, stored);
      } catch (StatusRuntimeException | StaleTokenException holder2Refused) {
        throw new AssertionError("holder 2's write was refused", holder2Refused);
      }
    } finally {
      Scratch.signal(holder1, "-CONT"); // harmless if running
    }
  }

  /** The gRPC store served at this target. */
  private static FencedStore store(String target) {
    for (FencedStore store :
        new FencedStore[] {fencedStore, unfencedStore, postgresMarkedStore, redisMarkedStore}) {
      if (store.target().equals(target)) {
        return store;
      }
    }
    throw new IllegalArgumentException("no store at " + target);
  }

  private static String ask(String command) throws Exception {
    tell(command);
    return answer();
  }

  private static void tell(String command) throws Exception {
    holder1Hears.write(command + "\n");
    holder1Hears.flush();
  }

  /** Holder 1's next line, within 30 s. */
  private static String answer() throws Exception {
    String line =
        CompletableFuture.supplyAsync(
                () -> {
                  try {
                    return holder1Says.readLine();
                  } catch (java.io.IOException e) {
                    throw new java.io.UncheckedIOException(e);
                  }
                })
            .get(30, TimeUnit.SECONDS);
    if (line == null) {
      throw new AssertionError("holder 1 exited: " + holder1.waitFor());
    }
    return line;
  }
}
