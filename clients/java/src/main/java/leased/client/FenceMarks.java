package leased.client;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Where a {@link FencingInterceptor} keeps its high-water marks: the largest fencing token it
 * accepted per lease name. {@link #fence} refuses a token below the mark with {@link
 * StaleTokenException}; otherwise it records it (a token equal to the mark passes: one holder
 * calls many times) and returns the mark, now {@code token}. Any other exception is a store
 * failure: the interceptor answers {@code UNAVAILABLE} and the handler does not run.
 *
 * <ul>
 *   <li>{@link #inProcess()}, the default: a map in this process, only as durable as the process
 *       (a restarted service accepts any token until it sees a newer one) and private to it (each
 *       replica of a service keeps its own);
 *   <li>{@link #postgres}: {@code SELECT leased.fence(prefix || name, token)}, autocommit, in the
 *       database where {@code fencing/postgres/leased_fencing.sql} was applied;
 *   <li>{@link #redis}: {@code FCALL leased_fence 1 <prefix><name> <token>}, on a Redis where the
 *       {@code leased_fencing} library is loaded.
 * </ul>
 *
 * The last two are shared by every replica that uses the same database or Redis and survive a
 * restart; the prefix keeps one service's marks apart from other resources' there.
 */
public interface FenceMarks {
  /** Checks {@code token} against {@code name}'s mark and records it when it is not smaller. */
  long fence(String name, long token);

  /** Marks in this process's memory (one entry per lease name ever fenced). */
  static FenceMarks inProcess() {
    return new InProcess();
  }

  /**
   * Marks in PostgreSQL, through {@code leased.fence} in a transaction of its own (committed
   * before the handler runs). {@code connections} opens a connection per check and the check
   * closes it: a pool's {@code dataSource::getConnection} returns it to the pool.
   */
  static FenceMarks postgres(Connections connections, String prefix) {
    return (name, token) -> {
      try (Connection connection = connections.open()) {
        boolean ownTransaction = !connection.getAutoCommit();
        try (PreparedStatement fence = connection.prepareStatement("SELECT leased.fence(?, ?)")) {
          fence.setString(1, prefix + name);
          fence.setLong(2, Fencing.checkToken(token));
          try (ResultSet mark = fence.executeQuery()) {
            mark.next();
            long recorded = mark.getLong(1);
            if (ownTransaction) {
              connection.commit();
            }
            return recorded;
          }
        } catch (SQLException e) {
          if (ownTransaction) {
            connection.rollback();
          }
          throw e;
        }
      } catch (SQLException e) {
        Fencing.throwIfFencingError(e);
        throw new IllegalStateException("PostgreSQL: " + e.getMessage(), e);
      }
    };
  }

  /** Marks in Redis: the mark of lease {@code name} is the string key {@code prefix + name}. */
  static FenceMarks redis(RedisFunctionCall redis, String prefix) {
    RedisFencing fencing = new RedisFencing(redis);
    return (name, token) -> fencing.fence(prefix + name, token);
  }

  /** Opens a JDBC connection: {@code dataSource::getConnection}, or a DriverManager lambda. */
  @FunctionalInterface
  interface Connections {
    Connection open() throws SQLException;
  }

  /** The in-process store; {@link FencingInterceptor} also runs its unary handlers in turn. */
  final class InProcess implements FenceMarks {
    private final Map<String, Long> marks = new ConcurrentHashMap<>();

    private InProcess() {}

    @Override
    public long fence(String name, long token) {
      Fencing.checkToken(token);
      long[] seen = new long[1];
      marks.compute(
          name,
          (key, mark) -> {
            seen[0] = mark == null ? 0 : mark;
            return Math.max(seen[0], token);
          });
      if (token < seen[0]) {
        throw new StaleTokenException(
            name,
            token,
            seen[0],
            "stale fencing token " + token + " for " + name + ": the highest seen is " + seen[0],
            null);
      }
      return token;
    }
  }
}
