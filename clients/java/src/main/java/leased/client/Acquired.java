package leased.client;

import java.time.Duration;

/** The answer to {@link LeaseClient#acquire}: the lease, or who holds it. Contention is not an error. */
public sealed interface Acquired permits Acquired.Granted, Acquired.NotGranted {

  /** The lease is ours, kept alive by its guard until released or lost. */
  record Granted(LeaseGuard lease) implements Acquired {}

  /**
   * Someone else held the lease for the whole wait. {@code holder}, {@code fencingToken} and
   * {@code remaining} describe the holder (for a counting lease, the permit that frees soonest);
   * {@code held} and {@code limit} say how full it is. An empty holder with token 0 means it is
   * free right now but being handed to a caller waiting ahead.
   *
   * @param fencingToken a uint64 on the wire: compare with {@link Long#compareUnsigned}
   * @param remaining null if that holder's lease has no expiry
   */
  record NotGranted(String holder, long fencingToken, Duration remaining, int held, int limit)
      implements Acquired {}
}
