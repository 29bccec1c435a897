package leased.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.MetadataUtils;
import io.grpc.stub.StreamObserver;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import lease.v1.Lease.DescribeRequest;
import lease.v1.Lease.DescribeResponse;
import lease.v1.LeaseServiceGrpc;
import leased.example.FencedWrites;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The fencing adapters' contracts on real resources (PostgreSQL, Redis, a gRPC service on
 * loopback): bad input is a clear error naming the field, never a silent accept; the boundary
 * (2^63 - 1 accepted, 2^63 refused); stale tokens refused with both tokens named; the mark
 * stores; the guard's metadata; and the README's code (leased.example.FencedWrites) run.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class FencingTest {
  private static final long MAX = Fencing.MAX_TOKEN;
  private static final long TWO_TO_THE_63 = Long.MIN_VALUE; // 2^63 as the wire's uint64



  @Test
  void tokensAreOneToTwoToThe63MinusOne() {
    assertEquals(MAX, Fencing.checkToken(MAX));
    assertEquals(1, Fencing.checkToken(1));
    for (long bad : new long[] {0, -5, TWO_TO_THE_63}) {
      var refused = assertThrows(IllegalArgumentException.class, () -> Fencing.checkToken(bad));
      assertEquals(
          "token must be a fencing token from 1 to 9223372036854775807, not "
              + Long.toUnsignedString(bad),
          refused.getMessage());
    }
    assertEquals(MAX, Fencing.parseToken("9223372036854775807"));
    assertEquals(1_800_000_000_000_000L, Fencing.parseToken("1800000000000000"));
    for (String bad :
        new String[] {
          "", "0", "-5", "+5", "05", " 5", "5 ", "12a", "1e3", "9223372036854775808",
          "18446744073709551616", "99999999999999999999"
        }) {
      var refused = assertThrows(IllegalArgumentException.class, () -> Fencing.parseToken(bad));
      assertEquals(
          "must be a fencing token from 1 to 9223372036854775807, not \"" + bad + "\"",
          refused.getMessage());
    }
    String long50 = "x".repeat(50);
    assertTrue(
        assertThrows(IllegalArgumentException.class, () -> Fencing.parseToken(long50))
            .getMessage()
            .endsWith("not \"" + "x".repeat(40) + "\"…"));
    assertTrue(
        assertThrows(IllegalArgumentException.class, () -> Fencing.parseToken("1\n\"2"))
            .getMessage()
            .endsWith("not \"1\\n\\\"2\""));
  }

  @Test
  void postgresFenceRefusesSmallerTokensInTheTransaction() throws Exception {
    try (Connection db = Scratch.connect()) {
      db.setAutoCommit(false);
      assertEquals(MAX, Fencing.fence(db, "boundary", MAX)); // 2^63 - 1 accepted
      db.commit();
      var stale =
          assertThrows(StaleTokenException.class, () -> Fencing.fence(db, "boundary", MAX - 1));
      db.rollback();
      assertEquals(MAX - 1, stale.token());
      assertEquals(MAX, stale.mark());
      assertEquals("resource 'boundary'", stale.resource());
      assertTrue(stale.getMessage().contains("the highest seen is " + MAX), stale.getMessage());

      // Equal passes: one holder writes many times.
      assertEquals(7, Fencing.fence(db, "equal", 7));
      assertEquals(7, Fencing.fence(db, "equal", 7));
      db.commit();
    }
  }

  @Test
  void postgresFenceRefusesBadInput() throws Exception {
    Connection closed = Scratch.connect();
    closed.close();
    // Refused before anything is sent: the connection is closed, and no SQLException comes.
    for (long bad : new long[] {0, -5, TWO_TO_THE_63}) {
      var refused =
          assertThrows(IllegalArgumentException.class, () -> Fencing.fence(closed, "r", bad));
      assertTrue(refused.getMessage().startsWith("token must be"), refused.getMessage());
    }
    try (Connection db = Scratch.connect()) {
      var autocommit =
          assertThrows(IllegalStateException.class, () -> Fencing.fence(db, "orders", 5));
      assertTrue(autocommit.getMessage().contains("autocommit"), autocommit.getMessage());
      db.setAutoCommit(false);
      // SQLSTATE 22023 from the server, named by its argument.
      var empty = assertThrows(IllegalArgumentException.class, () -> Fencing.fence(db, "", 5));
      assertTrue(empty.getMessage().contains("resource must be a non-empty"), empty.getMessage());
      db.rollback();
      var tooLong =
          assertThrows(
              IllegalArgumentException.class, () -> Fencing.fence(db, "r".repeat(1025), 5));
      assertTrue(tooLong.getMessage().contains("resource must be at most 1024 bytes"));
      db.rollback();
      var nullResource =
          assertThrows(IllegalArgumentException.class, () -> Fencing.fence(db, null, 5));
      assertTrue(nullResource.getMessage().contains("resource must be a non-empty"));
      db.rollback();
    }
  }

  @Test
  void postgresRowTriggerRefusesSmallerAndBadTokens() throws Exception {
    try (Connection db = Scratch.connect(); Statement ddl = db.createStatement()) {
      ddl.execute(
          """
          CREATE TABLE guarded (id int PRIMARY KEY, v text, fencing_token bigint NOT NULL);
          CREATE TRIGGER guarded_fencing BEFORE INSERT OR UPDATE ON guarded
            FOR EACH ROW EXECUTE FUNCTION leased.fencing_token_guard();
          INSERT INTO guarded VALUES (1, 'first', 5);
          """);
      var stale = assertThrows(StaleTokenException.class, () -> updateGuarded(db, 4));
      assertEquals(4, stale.token());
      assertEquals(5, stale.mark());
      assertEquals("a row of guarded", stale.resource());
      for (long bad : new long[] {0, -5}) {
        var refused = assertThrows(IllegalArgumentException.class, () -> updateGuarded(db, bad));
        assertTrue(refused.getMessage().contains("fencing_token must be"), refused.getMessage());
      }
      updateGuarded(db, MAX);
      assertThrows(StaleTokenException.class, () -> updateGuarded(db, MAX - 1));
    }
  }

  private static void updateGuarded(Connection db, long token) throws SQLException {
    try (PreparedStatement update =
        db.prepareStatement("UPDATE guarded SET fencing_token = ? WHERE id = 1")) {
      update.setLong(1, token);
      update.executeUpdate();
    } catch (SQLException e) {
      Fencing.throwIfFencingError(e);
      throw e;
    }
  }

  @Test
  void redisFencedWritesRefuseSmallerAndBadTokens() throws Exception {
    try (Resp redis = new Resp(Scratch.redis())) {
      RedisFencing fencing = new RedisFencing(redis::fcall);
      assertEquals("OK", fencing.set("fence:{b}", "{b}:v", MAX, "max")); // 2^63 - 1 accepted
      var stale =
          assertThrows(
              StaleTokenException.class, () -> fencing.set("fence:{b}", "{b}:v", MAX - 1, "no"));
      assertEquals(MAX - 1, stale.token());
      assertEquals(MAX, stale.mark());
      assertEquals("fence:{b}", stale.resource());
      assertEquals("max", redis.call("GET", "{b}:v"));

      assertEquals(10, fencing.fence("fence:{h}", 10));
      assertEquals(2, fencing.hset("fence:{h}", "{h}:hash", 10, Map.of("a", "1", "b", "2")));
      assertEquals(11, fencing.fence("fence:{h}", 11));
      assertThrows(
          StaleTokenException.class,
          () -> fencing.hset("fence:{h}", "{h}:hash", 10, Map.of("a", "stale")));
      assertEquals("1", redis.call("HGET", "{h}:hash", "a"));
      assertThrows(StaleTokenException.class, () -> fencing.del("fence:{h}", 10, "{h}:hash"));
      assertEquals(1, fencing.del("fence:{h}", 11, "{h}:hash"));

      // Refused before sending: not a token an adapter stores.
      for (long bad : new long[] {0, -5, TWO_TO_THE_63}) {
        assertThrows(IllegalArgumentException.class, () -> fencing.fence("fence:{x}", bad));
      }
      // 2^63 sent as text: Redis's BADTOKEN, as IllegalArgumentException.
      var raw =
          assertThrows(
              Resp.ErrorReply.class,
              () -> redis.call("FCALL", "leased_fence", 1, "fence:{x}", "9223372036854775808"));
      assertTrue(raw.getMessage().startsWith("BADTOKEN "), raw.getMessage());
      RedisFencing sendsTwoToThe63 =
          new RedisFencing((f, keys, args) -> redis.fcall(f, keys, List.of("9223372036854775808")));
      var bad =
          assertThrows(IllegalArgumentException.class, () -> sendsTwoToThe63.fence("fence:{x}", 1));
      assertTrue(bad.getMessage().contains("9223372036854775808"), bad.getMessage());
      assertNull(redis.call("GET", "fence:{x}"));
    }
  }

  /** What the interceptor answers a Put carrying these metadata entries (null: accepted). */
  private static Status put(FencedStore store, String... entries) throws Exception {
    return putValue(store, "value", entries);
  }

  private static Status putValue(FencedStore store, String value, String... entries)
      throws Exception {
    Metadata metadata = new Metadata();
    for (int i = 0; i < entries.length; i += 2) {
      metadata.put(Metadata.Key.of(entries[i], Metadata.ASCII_STRING_MARSHALLER), entries[i + 1]);
    }
    ManagedChannel channel = FencedStore.channel(store.target());
    try {
      FencedStore.put(
          io.grpc.ClientInterceptors.intercept(
              channel, MetadataUtils.newAttachHeadersInterceptor(metadata)),
          null,
          value);
      return null;
    } catch (StatusRuntimeException e) {
      return e.getStatus();
    } finally {
      channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  private static final String NAME = "leased-lease-name";
  private static final String TOKEN = "leased-fencing-token";

  @Test
  void theInterceptorRefusesBadMetadataNamingTheEntry() throws Exception {
    FencingInterceptor fencing = new FencingInterceptor();
    try (FencedStore store = new FencedStore(fencing);
        FencedStore optional = new FencedStore(fencing.optional())) {
      Status none = put(store);
      assertEquals(Status.Code.INVALID_ARGUMENT, none.getCode());
      assertTrue(none.getDescription().startsWith("this service is fenced: the call needs"));
      assertNull(put(optional), "required off: a call without the metadata passes");

      assertInvalid(put(store, TOKEN, "5"), "leased-lease-name is missing");
      assertInvalid(put(store, NAME, "job"), "leased-fencing-token is missing");
      assertInvalid(put(store, NAME, "", TOKEN, "5"), "leased-lease-name must be a lease name");
      for (String bad : new String[] {"0", "-5", "05", "12a", "", "9223372036854775808"}) {
        Status refused = put(store, NAME, "job", TOKEN, bad);
        assertInvalid(
            refused,
            "leased-fencing-token must be a fencing token from 1 to 9223372036854775807, not \""
                + bad
                + "\"");
        assertInvalid(put(optional, NAME, "job", TOKEN, bad), "leased-fencing-token must be");
      }
      assertInvalid(put(optional, TOKEN, "5"), "leased-lease-name is missing");
      assertEquals(List.of("value"), optional.accepted(), "only the call without metadata ran");
      assertEquals(List.of(), store.accepted(), "no refused call reached the handler");

      assertNull(put(store, NAME, "job", TOKEN, "9223372036854775807")); // 2^63 - 1 accepted
      Status stale = put(store, NAME, "job", TOKEN, "9223372036854775806");
      assertEquals(Status.Code.FAILED_PRECONDITION, stale.getCode());
      assertEquals(
          "stale fencing token 9223372036854775806 for lease \"job\": the highest seen is"
              + " 9223372036854775807",
          stale.getDescription());
      assertNull(put(store, NAME, "job", TOKEN, "9223372036854775807"), "equal passes");
      assertNull(put(store, NAME, "other", TOKEN, "3"), "marks are per lease name");
      assertEquals(3, store.accepted().size());
    }
  }

  /**
   * The in-process form's lock: a handler paused mid-call (token 20) keeps the next call of its
   * lease name (token 21) waiting, so the writes land in token order rather than 21 then 20.
   */
  @Test
  void inProcessTheHandlersOfOneNameRunInTurn() throws Exception {
    try (FencedStore store = new FencedStore(new FencingInterceptor())) {
      var paused =
          CompletableFuture.supplyAsync(
              () -> {
                try {
                  return putValue(store, "pause 500 token 20", NAME, "job", TOKEN, "20");
                } catch (Exception e) {
                  throw new IllegalStateException(e);
                }
              });
      assertTrue(store.handlersStarted.tryAcquire(10, TimeUnit.SECONDS), "the paused handler");
      assertNull(putValue(store, "token 21", NAME, "job", TOKEN, "21"));
      assertNull(paused.get(10, TimeUnit.SECONDS));
      assertEquals(List.of("pause 500 token 20", "token 21"), store.accepted());
      // Another name does not wait for "job".
      assertNull(put(store, NAME, "other", TOKEN, "1"));
    }
  }

  private static void assertInvalid(Status status, String start) {
    assertEquals(Status.Code.INVALID_ARGUMENT, status.getCode(), status.toString());
    assertTrue(status.getDescription().startsWith(start), status.getDescription());
  }

  @Test
  void theMarksLiveInPostgresOrRedisSharedByReplicas() throws Exception {
    try (Resp redis = new Resp(Scratch.redis())) {
      String postgres = Scratch.postgres();
      FenceMarks[] stores = {
        FenceMarks.postgres(() -> DriverManager.getConnection(postgres), "svc:"), FenceMarks.redis(redis::fcall, "svc:")
      };
      for (FenceMarks marks : stores) {
        try (FencedStore replica1 = new FencedStore(new FencingInterceptor(marks));
            FencedStore replica2 = new FencedStore(new FencingInterceptor(marks))) {
          assertNull(put(replica1, NAME, "shared", TOKEN, "20"));
          Status stale = put(replica2, NAME, "shared", TOKEN, "19");
          assertEquals(Status.Code.FAILED_PRECONDITION, stale.getCode(), stale.toString());
          assertEquals(
              "stale fencing token 19 for lease \"shared\": the highest seen is 20",
              stale.getDescription());
          assertNull(put(replica2, NAME, "shared", TOKEN, "20"));
        }
      }
      assertEquals("20", redis.call("GET", "svc:shared"), "the prefixed mark key");
      try (Connection db = Scratch.connect();
          Statement select = db.createStatement();
          ResultSet mark =
              select.executeQuery(
                  "SELECT token FROM leased.fence_marks WHERE resource = 'svc:shared'")) {
        assertTrue(mark.next());
        assertEquals(20, mark.getLong(1));
      }
    }
  }

  @Test
  void aFailingMarkStoreIsUnavailableAndTheHandlerDoesNotRun() throws Exception {
    int nobody = Stack.freePort();
    FenceMarks unreachable =
        FenceMarks.postgres(
            () ->
                DriverManager.getConnection(
                    "jdbc:postgresql://127.0.0.1:" + nobody + "/postgres?user=postgres"),
            "");
    try (FencedStore store = new FencedStore(new FencingInterceptor(unreachable))) {
      Status failed = put(store, NAME, "job", TOKEN, "5");
      assertEquals(Status.Code.UNAVAILABLE, failed.getCode(), failed.toString());
      assertTrue(failed.getDescription().startsWith("the fencing mark store failed: PostgreSQL"));
      assertEquals(List.of(), store.accepted());
    }
  }

  @Test
  void theGuardAttachesItsNameAndToken() throws Exception {
    AcquireOptions options = AcquireOptions.ttl(Duration.ofSeconds(10));
    Acquired acquired = Scratch.client().acquire("fenced-job", options).get(10, TimeUnit.SECONDS);
    try (LeaseGuard lease = ((Acquired.Granted) acquired).lease();
        FencedStore store = new FencedStore(new FencingInterceptor())) {
      Metadata metadata = lease.fencingMetadata();
      assertEquals("fenced-job", metadata.get(Fencing.LEASE_NAME));
      assertEquals(Long.toString(lease.fencingToken()), metadata.get(Fencing.FENCING_TOKEN));
      ManagedChannel channel = FencedStore.channel(store.target());
      try {
        assertEquals("stored", FencedStore.put(channel, lease, "through the guard"));
      } finally {
        channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
      }
      assertEquals(List.of("through the guard"), store.accepted());
    }
  }

  /** README.md's fencing code, run: leased.example.FencedWrites against real resources. */
  @Test
  void theReadmeFencingExamplesRun() throws Exception {
    AcquireOptions options = AcquireOptions.ttl(Duration.ofSeconds(10));
    try (Connection db = Scratch.connect(); Statement ddl = db.createStatement()) {
      ddl.execute(
          """
          CREATE TABLE orders (id bigserial PRIMARY KEY, body text);
          CREATE TABLE accounts (id text PRIMARY KEY, cents bigint, fencing_token bigint NOT NULL);
          CREATE TRIGGER accounts_fencing BEFORE INSERT OR UPDATE ON accounts
            FOR EACH ROW EXECUTE FUNCTION leased.fencing_token_guard();
          INSERT INTO accounts VALUES ('alice', 0, 1);
          """);
      LeaseGuard first = granted("example", options);
      first.release(); // a newer holder takes over
      try (LeaseGuard second = granted("example", options); Resp redis = new Resp(Scratch.redis())) {
        FencedWrites.insertOrder(db, second, "second's order");
        assertThrows(
            StaleTokenException.class, () -> FencedWrites.insertOrder(db, first, "first's order"));
        FencedWrites.setBalance(db, second, "alice", 100);
        assertThrows(
            StaleTokenException.class, () -> FencedWrites.setBalance(db, first, "alice", 5));
        db.setAutoCommit(true);
        try (ResultSet rows = ddl.executeQuery("SELECT string_agg(body, ',') FROM orders")) {
          rows.next();
          assertEquals("second's order", rows.getString(1));
        }

        FencedWrites.publishReport(redis::fcall, second, "second's report");
        FencedWrites.publishReport(redis::fcall, first, "first's report"); // not published
        assertEquals("second's report", redis.call("GET", "{report}:latest"));

        Server server = FencedWrites.serveFenced(new Describer(), 0);
        ManagedChannel channel = FencedStore.channel("127.0.0.1:" + server.getPort());
        try {
          var stub = LeaseServiceGrpc.newBlockingStub(channel);
          DescribeRequest request = DescribeRequest.newBuilder().setName("x").build();
          FencedWrites.fenced(stub, second).describe(request);
          var stale =
              assertThrows(
                  StatusRuntimeException.class,
                  () -> FencedWrites.fenced(stub, first).describe(request));
          assertEquals(Status.Code.FAILED_PRECONDITION, stale.getStatus().getCode());
        } finally {
          channel.shutdownNow();
          server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
        }
        try (FencedStore shared = new FencedStore(FencedWrites.sharedFencing(redis::fcall))) {
          ManagedChannel toShared = FencedStore.channel(shared.target());
          try {
            FencedStore.put(toShared, second, "second");
          } finally {
            toShared.shutdownNow();
          }
        }
        assertEquals(
            Long.toString(second.fencingToken()), redis.call("GET", "orders-service:example"));
      }
    }
  }

  private static LeaseGuard granted(String name, AcquireOptions options) throws Exception {
    return ((Acquired.Granted) Scratch.client().acquire(name, options).get(10, TimeUnit.SECONDS)).lease();
  }

  /** A stand-in service to fence: Describe answers "not held". */
  private static final class Describer extends LeaseServiceGrpc.LeaseServiceImplBase {
    @Override
    public void describe(DescribeRequest request, StreamObserver<DescribeResponse> reply) {
      reply.onNext(DescribeResponse.getDefaultInstance());
      reply.onCompleted();
    }
  }
}
