package leased.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Concurrent writers with random pauses against each adapter: for a few seconds, writers take
 * turns at a lease and each writes once with its grant's token after a random pause, without
 * looking at the lease first, while a breaker revokes the lease at random moments (as an expiry
 * during a pause would end it), so that some writers write after their lease went to another.
 * Afterwards the resource's history of accepted tokens (kept by the resource, in the order it
 * accepted them) only increases: 0 stale writes accepted; and every refusal names a mark above
 * the refused token.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class ConcurrentFencingTest {
  private static final int WRITERS = 4;
  private static final Duration RUN_FOR = Duration.ofMillis(2_500);
  private static final int MAX_WRITES_PER_WRITER = 100;
  private static final Duration TTL = Duration.ofSeconds(2);
  private static final int MAX_PAUSE_MS = 100;
  private static final int MAX_BREAKER_INTERVAL_MS = 100;



  /** One fenced write with this token; false when the resource refused it as stale. */
  @FunctionalInterface
  private interface Writer {
    boolean write(LeaseGuard lease) throws Exception;
  }

  /** Opens a writer for one thread (its own connection); closed at the end with {@code close}. */
  @FunctionalInterface
  private interface WriterFactory {
    Writer open(List<AutoCloseable> close) throws Exception;
  }

  @Test
  void postgresFenceForm() throws Exception {
    try (Connection db = Scratch.connect(); Statement ddl = db.createStatement()) {
      ddl.execute(
          "CREATE TABLE concurrent_fence_history (id bigserial PRIMARY KEY, token bigint NOT NULL)");
    }
    WriterFactory writers =
        close -> {
          Connection db = transactional(close);
          PreparedStatement record =
              db.prepareStatement("INSERT INTO concurrent_fence_history (token) VALUES (?)");
          return lease -> {
            try {
              Fencing.fence(db, "concurrent-fence", lease.fencingToken());
              record.setLong(1, lease.fencingToken());
              record.executeUpdate();
              db.commit();
              return true;
            } catch (StaleTokenException stale) {
              db.rollback();
              assertTrue(stale.mark() > stale.token(), stale.getMessage());
              return false;
            }
          };
        };
    run("pg-fence", writers, () -> tokens("SELECT token FROM concurrent_fence_history ORDER BY id"));
  }

  @Test
  void postgresRowTriggerForm() throws Exception {
    try (Connection db = Scratch.connect(); Statement ddl = db.createStatement()) {
      ddl.execute(
          """
          CREATE TABLE concurrent_rows (id int PRIMARY KEY, fencing_token bigint NOT NULL);
          CREATE TRIGGER concurrent_rows_fencing BEFORE INSERT OR UPDATE ON concurrent_rows
            FOR EACH ROW EXECUTE FUNCTION leased.fencing_token_guard();
          INSERT INTO concurrent_rows VALUES (1, 1);
          CREATE TABLE concurrent_rows_history (id bigserial PRIMARY KEY, token bigint NOT NULL);
          """);
    }
    WriterFactory writers =
        close -> {
          Connection db = transactional(close);
          PreparedStatement update =
              db.prepareStatement("UPDATE concurrent_rows SET fencing_token = ? WHERE id = 1");
          PreparedStatement record =
              db.prepareStatement("INSERT INTO concurrent_rows_history (token) VALUES (?)");
          return lease -> {
            try {
              update.setLong(1, lease.fencingToken());
              update.executeUpdate();
              record.setLong(1, lease.fencingToken());
              record.executeUpdate();
              db.commit();
              return true;
            } catch (java.sql.SQLException e) {
              db.rollback();
              try {
                Fencing.throwIfFencingError(e);
              } catch (StaleTokenException stale) {
                assertTrue(stale.mark() > stale.token(), stale.getMessage());
                return false;
              }
              throw e;
            }
          };
        };
    run("pg-row", writers, () -> tokens("SELECT token FROM concurrent_rows_history ORDER BY id"));
  }

  /**
   * Redis keeps no history of its own: each accepted write is {@code leased_set ... GET}, which
   * answers the value it replaced (the previous accepted token), so the accepted writes chain
   * into the order Redis applied them.
   */
  @Test
  void redisFencedSet() throws Exception {
    Map<String, Long> replaced = new HashMap<>(); // previous value -> the token that replaced it
    WriterFactory writers =
        close -> {
          Resp redis = new Resp(Scratch.redis());
          close.add(redis);
          RedisFencing fencing = new RedisFencing(redis::fcall);
          return lease -> {
            long token = lease.fencingToken();
            try {
              Object previous =
                  fencing.set("fence:{concurrent}", "{concurrent}:value", token, "" + token, "GET");
              synchronized (replaced) {
                Long twice = replaced.put(String.valueOf(previous), token);
                assertEquals(null, twice, "two writes replaced " + previous);
              }
              return true;
            } catch (StaleTokenException stale) {
              assertTrue(stale.mark() > stale.token(), stale.getMessage());
              return false;
            }
          };
        };
    run(
        "redis",
        writers,
        () -> {
          List<Long> history = new ArrayList<>();
          for (Long token = replaced.get("null"); token != null; token = replaced.get("" + token)) {
            history.add(token);
          }
          assertEquals(replaced.size(), history.size(), "accepted writes outside the chain");
          return history;
        });
  }

  @Test
  void fencingInterceptor() throws Exception {
    try (FencedStore store = new FencedStore(new FencingInterceptor())) {
      WriterFactory writers =
          close -> {
            ManagedChannel channel = FencedStore.channel(store.target());
            close.add(() -> channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS));
            return lease -> {
              try {
                FencedStore.put(channel, lease, "" + lease.fencingToken());
                return true;
              } catch (StatusRuntimeException e) {
                assertEquals(Status.Code.FAILED_PRECONDITION, e.getStatus().getCode(), e.getMessage());
                return false;
              }
            };
          };
      run("grpc", writers, () -> store.accepted().stream().map(Long::parseLong).toList());
    }
  }

  @FunctionalInterface
  private interface History {
    List<Long> read() throws Exception;
  }

  private void run(String adapter, WriterFactory writerFactory, History history) throws Exception {
    String lease = "concurrent-" + adapter;
    AtomicInteger attempted = new AtomicInteger();
    AtomicInteger accepted = new AtomicInteger();
    AtomicInteger refused = new AtomicInteger();
    AtomicInteger revoked = new AtomicInteger();
    ExecutorService threads = Executors.newFixedThreadPool(WRITERS + 1);
    List<AutoCloseable> close = new ArrayList<>();
    try {
      List<Writer> writers = new ArrayList<>();
      for (int w = 0; w < WRITERS; w++) {
        writers.add(writerFactory.open(close));
      }
      long deadline = System.nanoTime() + RUN_FOR.toNanos(); // from here: the resources are up
      List<Future<?>> running = new ArrayList<>();
      for (Writer writer : writers) {
        running.add(
            threads.submit(
                () -> {
                  AcquireOptions options = AcquireOptions.ttl(TTL).waitFor(Duration.ofSeconds(2));
                  for (int i = 0; i < MAX_WRITES_PER_WRITER && System.nanoTime() < deadline; i++) {
                    Acquired acquired = Scratch.client().acquire(lease, options).get(10, TimeUnit.SECONDS);
                    if (!(acquired instanceof Acquired.Granted granted)) {
                      continue;
                    }
                    try (LeaseGuard guard = granted.lease()) {
                      // A pause (GC, a slow disk...) that may outlast the lease; then the write.
                      Thread.sleep(ThreadLocalRandom.current().nextInt(MAX_PAUSE_MS));
                      attempted.incrementAndGet();
                      (writer.write(guard) ? accepted : refused).incrementAndGet();
                    }
                  }
                  return null;
                }));
      }
      running.add(
          threads.submit(
              () -> {
                while (System.nanoTime() < deadline) {
                  Thread.sleep(ThreadLocalRandom.current().nextInt(MAX_BREAKER_INTERVAL_MS));
                  if (Scratch.client().revoke(lease, "a pause outlasted the lease", 0) != 0) {
                    revoked.incrementAndGet();
                  }
                }
                return null;
              }));
      for (Future<?> writer : running) {
        writer.get(30, TimeUnit.SECONDS);
      }
    } finally {
      threads.shutdownNow();
      for (AutoCloseable resource : close) {
        resource.close();
      }
    }
    List<Long> tokens = history.read();
    int staleAccepted = 0;
    for (int i = 1; i < tokens.size(); i++) {
      if (tokens.get(i) <= tokens.get(i - 1)) {
        staleAccepted++;
      }
    }
    System.out.printf(
        "concurrent %s: %d writers, %d leases revoked, %d writes attempted, %d accepted,"
            + " %d refused as stale; the resource's history holds %d tokens, strictly increasing:"
            + " %s; stale accepted: %d%n",
        adapter, WRITERS, revoked.get(), attempted.get(), accepted.get(), refused.get(),
        tokens.size(), staleAccepted == 0, staleAccepted);
    assertEquals(accepted.get(), tokens.size(), "accepted writes in the resource's history");
    assertEquals(0, staleAccepted, "stale writes accepted; history " + tokens);
    assertEquals(attempted.get(), accepted.get() + refused.get());
    // Dozens of revocations land in writers' pauses: a run without one stale write attempted
    // would prove nothing.
    assertTrue(refused.get() > 0, "no stale write was attempted");
  }

  /** A connection of one writer, autocommit off, closed at the end of the run. */
  private static Connection transactional(List<AutoCloseable> close) throws Exception {
    Connection db = Scratch.connect();
    close.add(db);
    db.setAutoCommit(false);
    return db;
  }

  private static List<Long> tokens(String query) throws Exception {
    List<Long> tokens = new ArrayList<>();
    try (Connection db = Scratch.connect();
        Statement select = db.createStatement();
        ResultSet rows = select.executeQuery(query)) {
      while (rows.next()) {
        tokens.add(rows.getLong(1));
      }
    }
    return tokens;
  }
}
