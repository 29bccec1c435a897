package leased.client;

import java.time.Duration;
import java.util.function.Consumer;

/**
 * How to acquire: the TTL, how long the server may wait for a busy lease, who is asking, how many
 * may hold the name at once or whether the grant is shared, the lock-delay after an expiry, and
 * who hears of {@code waiting}.
 */
public final class AcquireOptions {
  final Duration ttl;
  Duration wait = Duration.ZERO;
  String holder = LeaseClient.defaultHolder();
  int limit;
  boolean shared;
  Duration lockDelay = Duration.ZERO;
  Consumer<Waiting> onWaiting = waiting -> {};

  private AcquireOptions(Duration ttl) {
    this.ttl = ttl;
  }

  /** A TTL, no waiting, this host and process as the holder, an exclusive lease. */
  public static AcquireOptions ttl(Duration ttl) {
    return new AcquireOptions(ttl);
  }

  /** The server waits up to {@code wait} for a busy lease (then answers NotGranted). */
  public AcquireOptions waitFor(Duration wait) {
    this.wait = wait;
    return this;
  }

  public AcquireOptions holder(String holder) {
    this.holder = holder;
    return this;
  }

  /** Up to {@code limit} holders at once (a counting lease); 0 or 1 is exclusive. */
  public AcquireOptions limit(int limit) {
    this.limit = limit;
    return this;
  }

  /**
   * A shared (read) grant: shared grants of a name coexist, an exclusive one (the default)
   * excludes every other. Only with a limit of 0 or 1 (the server answers INVALID_ARGUMENT
   * otherwise). {@link LeaseClient#readWriteLock} sets it for its read lock.
   */
  public AcquireOptions shared(boolean shared) {
    this.shared = shared;
    return this;
  }

  public AcquireOptions lockDelay(Duration lockDelay) {
    this.lockDelay = lockDelay;
    return this;
  }

  /** Called (on a gRPC thread) for each {@code waiting} message while the caller waits. */
  public AcquireOptions onWaiting(Consumer<Waiting> onWaiting) {
    this.onWaiting = onWaiting;
    return this;
  }

  /** A copy, so that a lock's options stay as they were when it was made. */
  AcquireOptions copy() {
    AcquireOptions copy = new AcquireOptions(ttl);
    copy.wait = wait;
    copy.holder = holder;
    copy.limit = limit;
    copy.shared = shared;
    copy.lockDelay = lockDelay;
    copy.onWaiting = onWaiting;
    return copy;
  }
}
