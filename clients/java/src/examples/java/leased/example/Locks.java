package leased.example;

import java.time.Duration;
import leased.client.AcquireOptions;
import leased.client.Acquired;
import leased.client.LeaseClient;
import leased.client.LeaseGuard;
import leased.client.LeaseReadWriteLock;
import leased.client.ReentrantLeaseLock;

/**
 * The reentrant lock and the read-write lock: a ledger posted under a lock that the posting code
 * takes again, and a catalog read under shared grants. The README shows this code.
 *
 * <p>Usage: {@code Locks [TARGET]}. Exit status 0 when every step held.
 */
public final class Locks {
  public static void main(String[] args) throws Exception {
    try (LeaseClient client = LeaseClient.forTarget(args.length > 0 ? args[0] : "127.0.0.1:50051")) {
      ReentrantLeaseLock lock =
          client.reentrantLock("ledger", AcquireOptions.ttl(Duration.ofSeconds(15)));
      if (lock.acquire() instanceof Acquired.Granted granted) {
        try (LeaseGuard lease = granted.lease()) {
          post(lock, lease.fencingToken()); // takes the lock again: same guard, no round trip
        } // the outermost close() releases
      }

      LeaseReadWriteLock catalog =
          client.readWriteLock(
              "catalog", AcquireOptions.ttl(Duration.ofSeconds(15)).waitFor(Duration.ofSeconds(30)));
      if (catalog.readLock().acquire() instanceof Acquired.Granted reading) {
        try (LeaseGuard lease = reading.lease()) {
          System.out.println("reading the catalog, shared: " + lease.shared());
        }
      }
    }
  }

  /** Posts to the ledger; callers may already hold the lock, or not. */
  static void post(ReentrantLeaseLock lock, long fencingToken) throws InterruptedException {
    if (lock.acquire() instanceof Acquired.Granted granted) {
      try (LeaseGuard lease = granted.lease()) {
        System.out.println(
            "posting with fencing token " + Long.toUnsignedString(fencingToken)
                + ", hold count " + lock.getHoldCount()
                + ", same lease: " + (lease.fencingToken() == fencingToken));
      }
    }
  }
}
