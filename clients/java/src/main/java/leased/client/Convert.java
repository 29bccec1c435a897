package leased.client;

import java.time.Duration;
import lease.v1.Lease.DescribeResponse;
import lease.v1.Lease.HolderInfo;

/** Wire messages to this package's types. */
final class Convert {
  private Convert() {}

  /** The wire's {@code remaining_ms}: negative means no expiry (null). */
  static Duration remaining(long remainingMs) {
    return remainingMs < 0 ? null : Duration.ofMillis(remainingMs);
  }

  static Waiting waiting(lease.v1.Lease.Waiting w) {
    return new Waiting(
        w.getHolder(),
        w.getFencingToken(),
        remaining(w.getRemainingMs()),
        w.getPosition(),
        w.getHeld(),
        w.getLimit());
  }

  static Acquired.NotGranted notGranted(lease.v1.Lease.NotGranted n) {
    return new Acquired.NotGranted(
        n.getHolder(), n.getFencingToken(), remaining(n.getRemainingMs()), n.getHeld(), n.getLimit());
  }

  /** NotGranted as Acquire would say it, from a Describe: the permit that frees soonest. */
  static Acquired.NotGranted notGranted(DescribeResponse d) {
    HolderInfo soonest = null;
    for (HolderInfo h : d.getHoldersList()) {
      boolean sooner =
          soonest == null
              || (h.getRemainingMs() >= 0
                  && (soonest.getRemainingMs() < 0 || h.getRemainingMs() < soonest.getRemainingMs()));
      if (sooner) {
        soonest = h;
      }
    }
    if (soonest == null) {
      return new Acquired.NotGranted("", 0, Duration.ZERO, 0, 0);
    }
    return new Acquired.NotGranted(
        soonest.getHolder(),
        soonest.getFencingToken(),
        remaining(soonest.getRemainingMs()),
        d.getHoldersCount(),
        d.getLimit());
  }
}
