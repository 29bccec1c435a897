package leased.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.BindableService;
import io.grpc.ManagedChannel;
import io.grpc.Server;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.inprocess.InProcessChannelBuilder;
import io.grpc.inprocess.InProcessServerBuilder;
import io.grpc.stub.StreamObserver;
import java.time.Duration;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import lease.v1.Lease.AcquireRequest;
import lease.v1.Lease.AcquireResponse;
import lease.v1.Lease.Granted;
import lease.v1.Lease.ReleaseRequest;
import lease.v1.Lease.ReleaseResponse;
import lease.v1.Lease.RenewRequest;
import lease.v1.Lease.RenewResponse;
import lease.v1.Lease.Renewed;
import lease.v1.LeaseServiceGrpc;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.parallel.Isolated;

/**
 * The guard against a fake LeaseService that misbehaves on purpose (over gRPC in process): a
 * renewal answered after the trust ended, and renewals refused right after a long wait.
 */
// Alone, while no other test class runs (test.sh runs the others concurrently): its bounds are on timers.
@Isolated
class GuardTimingTest {

  /**
   * Grants every Acquire after {@code grantAfterMs}, with the caller's own lease id; renews as
   * told; records releases.
   */
  static final class FakeLeaseService extends LeaseServiceGrpc.LeaseServiceImplBase {
    final long grantAfterMs;
    final long firstRenewalLateMs; // < 0: every Renew call fails
    final List<String> leaseIds = new CopyOnWriteArrayList<>(); // of the Acquires
    final List<String> released = new CopyOnWriteArrayList<>();
    private final AtomicInteger tokens = new AtomicInteger();
    private final AtomicInteger renewStreams = new AtomicInteger();

    FakeLeaseService(long grantAfterMs, long firstRenewalLateMs) {
      this.grantAfterMs = grantAfterMs;
      this.firstRenewalLateMs = firstRenewalLateMs;
    }

    @Override
    public void acquire(AcquireRequest request, StreamObserver<AcquireResponse> replies) {
      leaseIds.add(request.getLeaseId());
      int token = tokens.incrementAndGet();
      Granted granted =
          Granted.newBuilder()
              .setName(request.getName())
              .setLeaseId(request.getLeaseId())
              .setFencingToken(token)
              .setTtlMs(request.getTtlMs())
              .build();
      new Thread(
              () -> {
                if (grantAfterMs > 0) {
                  replies.onNext(
                      AcquireResponse.newBuilder()
                          .setWaiting(lease.v1.Lease.Waiting.newBuilder().setPosition(1))
                          .build());
                  sleep(grantAfterMs);
                }
                replies.onNext(AcquireResponse.newBuilder().setGranted(granted).build());
                replies.onCompleted();
              })
          .start();
    }

    @Override
    public StreamObserver<RenewRequest> renew(StreamObserver<RenewResponse> replies) {
      if (firstRenewalLateMs < 0) {
        replies.onError(Status.UNAVAILABLE.withDescription("renewals refused").asRuntimeException());
        return new Ignore<>();
      }
      boolean first = renewStreams.getAndIncrement() == 0;
      return new StreamObserver<>() {
        private boolean late = first;

        @Override
        public synchronized void onNext(RenewRequest request) {
          // One at a time, in order, as leased answers.
          if (late) {
            late = false;
            sleep(firstRenewalLateMs);
          }
          replies.onNext(
              RenewResponse.newBuilder()
                  .setName(request.getName())
                  .setRenewed(Renewed.newBuilder().setTtlMs(1_000))
                  .build());
        }

        @Override
        public void onError(Throwable t) {}

        @Override
        public void onCompleted() {
          replies.onCompleted();
        }
      };
    }

    @Override
    public void release(ReleaseRequest request, StreamObserver<ReleaseResponse> replies) {
      released.add(request.getLeaseId());
      replies.onNext(ReleaseResponse.newBuilder().setReleased(true).build());
      replies.onCompleted();
    }
  }

  static final class Ignore<T> implements StreamObserver<T> {
    @Override
    public void onNext(T value) {}

    @Override
    public void onError(Throwable t) {}

    @Override
    public void onCompleted() {}
  }

  static void sleep(long ms) {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  /** A client on an in-process server running {@code service}. */
  static final class Faked implements AutoCloseable {
    final Server server;
    final ManagedChannel channel;
    final LeaseClient client;

    Faked(BindableService service) throws Exception {
      String name = InProcessServerBuilder.generateName();
      server = InProcessServerBuilder.forName(name).addService(service).build().start();
      channel = InProcessChannelBuilder.forName(name).build();
      client = LeaseClient.on(channel);
    }

    @Override
    public void close() {
      client.close();
      channel.shutdownNow();
      server.shutdownNow();
    }
  }

  /**
   * TTL 1 s: trust until 950 ms after the Acquire was sent. The first renewal (sent at ~333 ms)
   * is answered at ~1,233 ms, and every later one at once: the loss is still reported at 950 ms,
   * never in a longer trust.
   */
  @Test
  void aRenewalAnsweredAfterTheTrustEndedEndsInALoss() throws Exception {
    try (Faked faked = new Faked(new FakeLeaseService(0, 900))) {
      long start = System.nanoTime();
      Acquired acquired =
          faked.client.acquire("late", AcquireOptions.ttl(Duration.ofSeconds(1))).get();
      LeaseGuard lease = assertInstanceOf(Acquired.Granted.class, acquired).lease();
      LostReason reason = lease.lost().get(5, TimeUnit.SECONDS);
      long lostAfterMs = (System.nanoTime() - start) / 1_000_000;
      System.out.printf("a late renewal: loss reported %d ms after the Acquire (TTL 1 s)%n", lostAfterMs);
      assertEquals(LostReason.Kind.UNREACHABLE, reason.kind());
      assertTrue(lostAfterMs >= 950 && lostAfterMs < 1_300, lostAfterMs + " ms");
    }
  }

  /**
   * A grant after a long wait (600 ms of a 900 ms TTL) is confirmed by a renewal; when that
   * fails, acquire fails with the error and the lease is released, not left held by nobody (by
   * the guard, and again by the failed acquisition, which releases its id before it fails).
   */
  @Test
  void aGrantWhoseConfirmingRenewalFailsIsReleased() throws Exception {
    FakeLeaseService service = new FakeLeaseService(600, -1);
    try (Faked faked = new Faked(service)) {
      AcquireOptions options =
          AcquireOptions.ttl(Duration.ofMillis(900)).waitFor(Duration.ofSeconds(10));
      ExecutionException failure =
          assertThrows(
              ExecutionException.class, () -> faked.client.acquire("confirm", options).get());
      StatusRuntimeException status =
          assertInstanceOf(StatusRuntimeException.class, failure.getCause());
      assertEquals(Status.Code.UNAVAILABLE, status.getStatus().getCode());
      assertEquals(1, service.leaseIds.size());
      assertFalse(service.released.isEmpty(), "not released");
      assertEquals(Set.copyOf(service.leaseIds), Set.copyOf(service.released));
    }
  }
}
