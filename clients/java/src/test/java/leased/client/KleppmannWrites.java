package leased.client;

import io.grpc.ManagedChannel;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.concurrent.TimeUnit;

/**
 * The writes of Kleppmann's scenario, the same code for holder 1 (the {@link FencingHolder}
 * process) and holder 2 (the test): one value written to one key of a resource, with the
 * holder's token, through an adapter with fencing on or off. A refused write throws {@link
 * StaleTokenException} (or gRPC's FAILED_PRECONDITION); the resource is read back with {@link
 * #read}.
 *
 * <ul>
 *   <li>{@code pg-fence}: table kleppmann_values; on: {@code Fencing.fence(connection,
 *       "kleppmann:KEY", token)} then the UPDATE, in one transaction; off: the UPDATE alone.
 *   <li>{@code pg-row}: on: table kleppmann_rows, whose fencing_token column the row trigger
 *       guards; off: kleppmann_rows_unguarded, the same table without the trigger.
 *   <li>{@code redis}: on: {@code leased_set} with the mark fence:{KEY}; off: a plain SET.
 *   <li>{@code grpc}: a Put to a {@link FencedStore} whose target is the key, with the lease's
 *       fencing metadata; fencing off is a store served without the interceptor.
 * </ul>
 */
final class KleppmannWrites {
  static final String SCHEMA =
      """
      CREATE TABLE IF NOT EXISTS kleppmann_values (id text PRIMARY KEY, value text);
      CREATE TABLE IF NOT EXISTS kleppmann_rows (
        id text PRIMARY KEY, value text, fencing_token bigint NOT NULL);
      CREATE OR REPLACE TRIGGER kleppmann_rows_fencing BEFORE INSERT OR UPDATE ON kleppmann_rows
        FOR EACH ROW EXECUTE FUNCTION leased.fencing_token_guard();
      CREATE TABLE IF NOT EXISTS kleppmann_rows_unguarded (
        id text PRIMARY KEY, value text, fencing_token bigint NOT NULL);
      """;

  private final String jdbcUrl;
  private final int redisPort;

  KleppmannWrites(String jdbcUrl, int redisPort) {
    this.jdbcUrl = jdbcUrl;
    this.redisPort = redisPort;
  }

  /** Creates the tables, and the key's rows with a first value (token 1). */
  void prepare(String adapter, String key) throws Exception {
    if (!adapter.startsWith("pg-")) {
      return;
    }
    try (Connection db = DriverManager.getConnection(jdbcUrl);
        Statement statement = db.createStatement()) {
      statement.execute(SCHEMA);
      for (String table : new String[] {"kleppmann_rows", "kleppmann_rows_unguarded"}) {
        try (PreparedStatement insert =
            db.prepareStatement(
                "INSERT INTO " + table + " VALUES (?, 'initial', 1) ON CONFLICT DO NOTHING")) {
          insert.setString(1, key);
          insert.executeUpdate();
        }
      }
      try (PreparedStatement insert =
          db.prepareStatement(
              "INSERT INTO kleppmann_values VALUES (?, 'initial') ON CONFLICT DO NOTHING")) {
        insert.setString(1, key);
        insert.executeUpdate();
      }
    }
  }

  void write(String adapter, boolean fencing, String key, LeaseGuard lease, String value)
      throws Exception {
    long token = lease.fencingToken();
    switch (adapter) {
      case "pg-fence" -> {
        try (Connection db = DriverManager.getConnection(jdbcUrl)) {
          db.setAutoCommit(false);
          if (fencing) {
            Fencing.fence(db, "kleppmann:" + key, token);
          }
          update(db, "UPDATE kleppmann_values SET value = ? WHERE id = ?", value, key);
          db.commit();
        }
      }
      case "pg-row" -> {
        try (Connection db = DriverManager.getConnection(jdbcUrl)) {
          String table = fencing ? "kleppmann_rows" : "kleppmann_rows_unguarded";
          try (PreparedStatement update =
              db.prepareStatement(
                  "UPDATE " + table + " SET value = ?, fencing_token = ? WHERE id = ?")) {
            update.setString(1, value);
            update.setLong(2, token);
            update.setString(3, key);
            update.executeUpdate();
          } catch (SQLException e) {
            Fencing.throwIfFencingError(e);
            throw e;
          }
        }
      }
      case "redis" -> {
        try (Resp redis = new Resp(redisPort)) {
          if (fencing) {
            new RedisFencing(redis::fcall).set("fence:{" + key + "}", "{" + key + "}:value", token, value);
          } else {
            redis.call("SET", "{" + key + "}:value", value);
          }
        }
      }
      case "grpc" -> {
        ManagedChannel channel = FencedStore.channel(key);
        try {
          FencedStore.put(channel, lease, value);
        } finally {
          channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
        }
      }
      default -> throw new IllegalArgumentException("no adapter " + adapter);
    }
  }

  /** The value the resource holds for the key (for grpc, the caller reads its store). */
  String read(String adapter, boolean fencing, String key) throws Exception {
    if (adapter.equals("redis")) {
      try (Resp redis = new Resp(redisPort)) {
        return (String) redis.call("GET", "{" + key + "}:value");
      }
    }
    String table =
        adapter.equals("pg-fence")
            ? "kleppmann_values"
            : fencing ? "kleppmann_rows" : "kleppmann_rows_unguarded";
    try (Connection db = DriverManager.getConnection(jdbcUrl);
        PreparedStatement select =
            db.prepareStatement("SELECT value FROM " + table + " WHERE id = ?")) {
      select.setString(1, key);
      try (ResultSet row = select.executeQuery()) {
        row.next();
        return row.getString(1);
      }
    }
  }

  private static void update(Connection db, String sql, String value, String key)
      throws SQLException {
    try (PreparedStatement update = db.prepareStatement(sql)) {
      update.setString(1, value);
      update.setString(2, key);
      update.executeUpdate();
    }
  }
}
