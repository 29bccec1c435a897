package leased.client;

/**
 * A read-write lock on one name, like {@link java.util.concurrent.locks.ReadWriteLock}: {@link
 * #readLock()} takes shared grants, which coexist, and {@link #writeLock()} exclusive ones, which
 * exclude every other grant. Readers and writers wait in one queue, first come first served, so a
 * reader that comes after a waiting writer is granted after it. Both locks are {@link
 * ReentrantLeaseLock}s (per thread), and each grant is a {@link LeaseGuard} with its own fencing
 * token, renewed and lost like any lease.
 *
 * <p>There is no upgrade from read to write, nor downgrade: release, then acquire the other (a
 * thread that holds one and asks for the other gets an {@code IllegalStateException} rather than
 * waiting for itself).
 *
 * <pre>{@code
 * LeaseReadWriteLock rw = client.readWriteLock("catalog", AcquireOptions.ttl(ttl).waitFor(wait));
 * if (rw.readLock().acquire() instanceof Acquired.Granted granted) {
 *   try (LeaseGuard lease = granted.lease()) {
 *     read(lease.fencingToken());
 *   }
 * }
 * }</pre>
 */
public final class LeaseReadWriteLock {
  private final ReentrantLeaseLock read;
  private final ReentrantLeaseLock write;

  LeaseReadWriteLock(LeaseClient client, String name, AcquireOptions options) {
    this.read = new ReentrantLeaseLock(client, name, options.copy().shared(true));
    this.write = new ReentrantLeaseLock(client, name, options.copy().shared(false));
    read.excludes(write);
    write.excludes(read);
  }

  /** Shared grants: held by any number of readers at once, by no reader while a writer holds. */
  public ReentrantLeaseLock readLock() {
    return read;
  }

  /** Exclusive grants: one writer, and no reader meanwhile. */
  public ReentrantLeaseLock writeLock() {
    return write;
  }
}
