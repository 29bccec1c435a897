package leased.client;

/**
 * A lease on one name that the thread holding it may take again, like {@link
 * java.util.concurrent.locks.ReentrantLock}: a nested {@link #acquire()} by that thread answers at
 * once with the same guard, without asking the server, and only the outermost release (each
 * level's {@link LeaseGuard#close()}, or {@link #unlock()}) ends the lease. A loss ends every
 * level: the guard's {@link LeaseGuard#lost()} completes for all of them, and the thread's next
 * acquire asks the server again. Another thread asks the server like any other caller: it waits
 * (up to the options' wait) behind the thread that holds the lease.
 *
 * <pre>{@code
 * ReentrantLeaseLock lock = client.reentrantLock("ledger", AcquireOptions.ttl(ttl).waitFor(wait));
 * if (lock.acquire() instanceof Acquired.Granted granted) {
 *   try (LeaseGuard lease = granted.lease()) {
 *     post(lease.fencingToken()); // may call lock.acquire() again: no round trip
 *   }
 * }
 * }</pre>
 */
public final class ReentrantLeaseLock {
  private final LeaseClient client;
  private final String name;
  private final AcquireOptions options;
  /** The current thread's guard: held while its hold count is above 0. */
  private final ThreadLocal<LeaseGuard> held = new ThreadLocal<>();
  /** The other lock of a {@link LeaseReadWriteLock}, which this thread may not hold meanwhile. */
  private ReentrantLeaseLock otherMode;

  ReentrantLeaseLock(LeaseClient client, String name, AcquireOptions options) {
    this.client = client;
    this.name = name;
    this.options = options;
  }

  void excludes(ReentrantLeaseLock otherMode) {
    this.otherMode = otherMode;
  }

  public String name() {
    return name;
  }

  /**
   * Takes the lease in the calling thread: at once if this thread holds it already (one more
   * level), else from the server, waiting up to the options' wait. Answers {@link
   * Acquired.Granted} or {@link Acquired.NotGranted}; throws the server's {@code
   * StatusRuntimeException} as {@link LeaseClient#acquire} fails. An interrupt gives the wait up
   * (the call is cancelled and its id released) and throws {@code InterruptedException}.
   *
   * @throws IllegalStateException if this thread holds the other lock of a read-write lock: there
   *     is no upgrade nor downgrade (release it, then acquire this one)
   */
  public Acquired acquire() throws InterruptedException {
    LeaseGuard guard = held.get();
    if (guard != null && guard.holdAgain()) {
      return new Acquired.Granted(guard);
    }
    held.remove();
    if (otherMode != null && otherMode.isHeldByCurrentThread()) {
      // The server would make this thread wait for itself until its wait ran out.
      throw new IllegalStateException(
          "this thread holds the other lock of the read-write lock on "
              + name
              + ": no upgrade or downgrade, release it first");
    }
    Acquired acquired = LeaseClient.await(client.acquire(name, options));
    if (acquired instanceof Acquired.Granted granted) {
      held.set(granted.lease());
    }
    return acquired;
  }

  /** Whether the calling thread holds the lease (and it was not lost). */
  public boolean isHeldByCurrentThread() {
    return getHoldCount() > 0;
  }

  /** How many levels the calling thread holds: 0 if none, or once the lease was lost. */
  public int getHoldCount() {
    LeaseGuard guard = held.get();
    return guard == null ? 0 : guard.holdCount();
  }

  /**
   * Ends one level held by the calling thread (the outermost: releases the lease), as that
   * level's {@link LeaseGuard#close()} does.
   *
   * @throws IllegalMonitorStateException if the calling thread holds no level
   */
  public void unlock() {
    LeaseGuard guard = held.get();
    if (guard == null || guard.holdCount() == 0) {
      held.remove();
      throw new IllegalMonitorStateException("this thread does not hold " + name);
    }
    guard.close();
  }

  @Override
  public String toString() {
    return "ReentrantLeaseLock{" + name + (options.shared ? ", shared" : "") + "}";
  }
}
