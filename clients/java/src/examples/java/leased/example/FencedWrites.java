package leased.example;

import io.grpc.BindableService;
import io.grpc.Server;
import io.grpc.ServerInterceptors;
import io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.AbstractStub;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.util.Map;
import leased.client.FenceMarks;
import leased.client.Fencing;
import leased.client.FencingInterceptor;
import leased.client.LeaseGuard;
import leased.client.RedisFencing;
import leased.client.RedisFunctionCall;
import leased.client.StaleTokenException;

/**
 * Writes that a resource refuses once a newer holder of the lease wrote: the lease's fencing
 * token checked by PostgreSQL, by Redis, and by a gRPC service of your own. FencingTest runs each.
 */
public final class FencedWrites {
  private FencedWrites() {}

  /**
   * Inserts an order in one transaction with the fence: {@code leased.fence} refuses a token
   * below the largest one seen for "orders", and the insert commits only with the check.
   */
  public static void insertOrder(Connection db, LeaseGuard lease, String order) throws SQLException {
    db.setAutoCommit(false);
    try (PreparedStatement insert = db.prepareStatement("INSERT INTO orders (body) VALUES (?)")) {
      Fencing.fence(db, "orders", lease.fencingToken()); // StaleTokenException: a newer holder wrote
      insert.setString(1, order);
      insert.executeUpdate();
      db.commit();
    } catch (SQLException | RuntimeException e) {
      db.rollback();
      throw e;
    }
  }

  /** The row-level form: the trigger on {@code accounts} refuses a smaller fencing_token. */
  public static void setBalance(Connection db, LeaseGuard lease, String account, long cents)
      throws SQLException {
    try (PreparedStatement update =
        db.prepareStatement("UPDATE accounts SET cents = ?, fencing_token = ? WHERE id = ?")) {
      update.setLong(1, cents);
      update.setLong(2, lease.fencingToken());
      update.setString(3, account);
      update.executeUpdate();
    } catch (SQLException e) {
      Fencing.throwIfFencingError(e); // LF001: StaleTokenException, 22023: IllegalArgumentException
      throw e;
    }
  }

  /**
   * Redis as the resource: the report and its metadata, each write refused if a newer holder of
   * the lease wrote. {@code redis} is your client's FCALL, e.g. {@code jedis::fcall}.
   */
  public static void publishReport(RedisFunctionCall redis, LeaseGuard lease, String report) {
    RedisFencing fencing = new RedisFencing(redis);
    long token = lease.fencingToken();
    try {
      fencing.set("fence:{report}", "{report}:latest", token, report, "PX", "86400000");
      fencing.hset("fence:{report}", "{report}:meta", token, Map.of("writer", "nightly"));
    } catch (StaleTokenException stale) {
      System.out.println("not published: lease lost to token " + stale.mark());
    }
  }

  /** A gRPC service of your own as a fenced resource; its marks in this process. */
  public static Server serveFenced(BindableService service, int port) throws IOException {
    return NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", port))
        .addService(ServerInterceptors.intercept(service, new FencingInterceptor()))
        .build()
        .start();
  }

  /** The same, with the marks in Redis, shared by every replica of the service. */
  public static FencingInterceptor sharedFencing(RedisFunctionCall redis) {
    return new FencingInterceptor(FenceMarks.redis(redis, "orders-service:"));
  }

  /** A stub whose calls carry the lease's name and token, for a fenced service. */
  public static <S extends AbstractStub<S>> S fenced(S stub, LeaseGuard lease) {
    return stub.withInterceptors(lease.fencingInterceptor());
  }
}
