package leased.client;

import io.grpc.ClientInterceptor;
import io.grpc.Metadata;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import io.grpc.stub.MetadataUtils;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import lease.v1.Lease.Granted;
import lease.v1.Lease.RenewRequest;
import lease.v1.Lease.RenewResponse;

/**
 * One held lease, renewed in the background over one Renew stream a third of its TTL after each
 * renewal was sent. {@link #lost()} completes when a renewal answers {@code lost}, or at the
 * moment the lease could expire on the server because no renewal was answered in time: {@code
 * TTL - TTL/20} after sending the last renewal the server answered (the Acquire, at first). A
 * reply that comes later is never credited, and its stream is dropped so that it cannot be read
 * as the answer to a later request. {@link #close()} stops renewing and releases.
 *
 * <p>The guard of a {@link ReentrantLeaseLock} stands for every level its thread took: each
 * {@link #close()} ends one level, the outermost stops renewing and releases, and a loss ends
 * them all ({@link #lost()} is the same for every level).
 */
public final class LeaseGuard implements AutoCloseable {
  private final LeaseClient client;
  private final String name;
  private final String leaseId;
  private final long fencingToken;
  private final Duration ttl;
  private final boolean shared;
  private final RenewRequest renewal;
  private final CompletableFuture<LostReason> lost = new CompletableFuture<>();

  // Guarded by `this`: the keepalive's state, touched by timers and gRPC callbacks.
  private long trustedUntil; // System.nanoTime()
  private RenewStream stream;
  private ScheduledFuture<?> trustTimer;
  private ScheduledFuture<?> renewTimer;
  private String lastError = "no renewal answered";
  private boolean stopped; // released, closed or lost
  private boolean released;
  private int holds = 1; // levels of a reentrant lock not yet released

  private LeaseGuard(
      LeaseClient client, Granted granted, boolean shared, long trustFrom, RenewStream stream) {
    this.client = client;
    this.name = granted.getName();
    this.leaseId = granted.getLeaseId();
    this.fencingToken = granted.getFencingToken();
    this.ttl = Duration.ofMillis(granted.getTtlMs());
    this.shared = shared;
    this.renewal = RenewRequest.newBuilder().setName(name).setLeaseId(leaseId).build();
    this.stream = stream;
    this.trustedUntil = trustFrom + trustWindow(ttl);
  }

  /**
   * Starts guarding a fresh grant; {@code requestedAt} is when the Acquire was sent. After a long
   * wait (more than a third of the TTL), "a TTL after the request" may be nearly over although the
   * grant is fresh: one renewal first, and the trust counts from it. If that renewal finds the
   * lease gone, the answer is NotGranted for whoever holds it now; if it fails, the lease is
   * released and the failure returned: a grant is never left unguarded and unreleased.
   */
  static CompletableFuture<Acquired> start(
      LeaseClient client, Granted granted, long requestedAt, boolean shared) {
    Duration ttl = Duration.ofMillis(granted.getTtlMs());
    if (System.nanoTime() - requestedAt <= ttl.toNanos() / 3) {
      return CompletableFuture.completedFuture(
          new Acquired.Granted(
              new LeaseGuard(client, granted, shared, requestedAt, null).keepAlive()));
    }
    RenewRequest confirm =
        RenewRequest.newBuilder()
            .setName(granted.getName())
            .setLeaseId(granted.getLeaseId())
            .build();
    RenewStream stream = new RenewStream(client);
    long sentAt = System.nanoTime();
    CompletableFuture<RenewResponse> reply =
        stream
            .renew(confirm)
            .orTimeout(trustWindow(ttl) / 1_000_000, TimeUnit.MILLISECONDS);
    return reply.handle(
            (answer, error) -> {
              if (error == null && answer.hasRenewed()) {
                LeaseGuard guard = new LeaseGuard(client, granted, shared, sentAt, stream);
                return CompletableFuture.<Acquired>completedFuture(
                    new Acquired.Granted(guard.keepAlive()));
              }
              stream.close();
              if (error == null && answer.hasLost()) {
                return CompletableFuture.supplyAsync(
                    () -> (Acquired) Convert.notGranted(client.describe(granted.getName())));
              }
              client.releaseUntaken(granted.getName(), granted.getLeaseId());
              return CompletableFuture.<Acquired>failedFuture(
                  error != null ? error : new IllegalStateException("empty RenewResponse"));
            })
        .thenCompose(answer -> answer);
  }

  /** Trust lasts a TTL minus a twentieth, for clocks that run at slightly different rates. */
  static long trustWindow(Duration ttl) {
    return ttl.toNanos() - ttl.toNanos() / 20;
  }

  public String name() {
    return name;
  }

  /**
   * The fencing token: pass it with every write to the protected resource. A uint64 on the wire:
   * compare tokens with {@link Long#compareUnsigned}, print them with {@link
   * Long#toUnsignedString(long)}.
   */
  public long fencingToken() {
    return fencingToken;
  }

  /**
   * The fencing metadata of this grant, for a call to a service fenced by a {@link
   * FencingInterceptor} (or any service that follows the convention): {@code leased-lease-name}
   * and {@code leased-fencing-token} in decimal. Attach it with {@link #fencingInterceptor()}, or
   * {@code MetadataUtils.newAttachHeadersInterceptor(lease.fencingMetadata())}.
   */
  public Metadata fencingMetadata() {
    Metadata metadata = new Metadata();
    metadata.put(Fencing.LEASE_NAME, name);
    metadata.put(Fencing.FENCING_TOKEN, Long.toUnsignedString(fencingToken));
    return metadata;
  }

  /**
   * A client interceptor that attaches {@link #fencingMetadata()} to every call: {@code
   * stub.withInterceptors(lease.fencingInterceptor())} for the calls this lease protects.
   */
  public ClientInterceptor fencingInterceptor() {
    return MetadataUtils.newAttachHeadersInterceptor(fencingMetadata());
  }

  /** The lease's secret id (for handing it to another process); never log it. */
  public String leaseId() {
    return leaseId;
  }

  public Duration ttl() {
    return ttl;
  }

  /** True for a shared (read) grant, false for an exclusive one. */
  public boolean shared() {
    return shared;
  }

  /** Completes when the lease must no longer be trusted; never, once released. */
  public CompletableFuture<LostReason> lost() {
    return lost.copy();
  }

  public boolean isLost() {
    return lost.isDone();
  }

  /**
   * Stops renewing and releases; false if the lease was no longer ours. Idempotent. For a
   * reentrant lock's guard, a nested level only ends that level (true, and the lease stays held)
   * unless the lease was lost.
   */
  public boolean release() {
    synchronized (this) {
      if (released) {
        return false;
      }
      if (holds > 1 && !stopped) {
        holds--;
        return true;
      }
      released = true;
      holds = 0;
      stopLocked();
    }
    return client.release(name, leaseId);
  }

  /** A nested level of a reentrant lock; false once the lease is released or lost. */
  synchronized boolean holdAgain() {
    if (stopped) {
      return false;
    }
    holds++;
    return true;
  }

  /** The levels not yet released, 0 once the lease is released or lost. */
  synchronized int holdCount() {
    return stopped ? 0 : holds;
  }

  /** Stops renewing and releases in the background: for a grant whose caller left. */
  void abandon() {
    synchronized (this) {
      if (released) {
        return;
      }
      released = true;
      stopLocked();
    }
    client.releaseUntaken(name, leaseId);
  }

  /** {@link #release()}, with a failure ignored (the lease then expires at its TTL). */
  @Override
  public void close() {
    try {
      release();
    } catch (RuntimeException e) {
      // Unreachable server: the lease expires at its TTL.
    }
  }

  /** Arms the trust timer and the first renewal. */
  private synchronized LeaseGuard keepAlive() {
    armTrustTimerLocked();
    long firstRenewal = trustedUntil - trustWindow(ttl) + ttl.toNanos() / 3;
    scheduleRenewalLocked(firstRenewal - System.nanoTime());
    return this;
  }

  private void armTrustTimerLocked() {
    if (trustTimer != null) {
      trustTimer.cancel(false);
    }
    long deadline = trustedUntil;
    trustTimer =
        client.timers.schedule(
            () -> trustEnded(deadline),
            Math.max(0, deadline - System.nanoTime()),
            TimeUnit.NANOSECONDS);
  }

  private void scheduleRenewalLocked(long delayNanos) {
    renewTimer =
        client.timers.schedule(this::renew, Math.max(0, delayNanos), TimeUnit.NANOSECONDS);
  }

  /** The trust timer: if no renewal moved the deadline meanwhile, the lease is lost now. */
  private synchronized void trustEnded(long deadline) {
    if (!stopped && trustedUntil == deadline) {
      loseLocked(new LostReason(LostReason.Kind.UNREACHABLE, lastError));
    }
  }

  private synchronized void renew() {
    if (stopped) {
      return;
    }
    if (stream == null) {
      stream = new RenewStream(client);
    }
    RenewStream sentOn = stream;
    long sentAt = System.nanoTime();
    sentOn.renew(renewal).whenComplete((answer, error) -> answered(sentOn, sentAt, answer, error));
  }

  private synchronized void answered(
      RenewStream sentOn, long sentAt, RenewResponse answer, Throwable error) {
    if (stopped || sentOn != stream) {
      return; // released, lost, or a reply on a stream already dropped
    }
    if (System.nanoTime() - trustedUntil >= 0) {
      // Too late to count, whatever it says: the trust timer reports (or reported) the loss.
      dropStreamLocked();
      return;
    }
    if (error != null || !(answer.hasRenewed() || answer.hasLost())) {
      lastError = error != null ? String.valueOf(error.getMessage()) : "empty RenewResponse";
      dropStreamLocked(); // a stream that failed once is not trusted with the next request
      long retry = Math.max(ttl.toNanos() / 20, TimeUnit.MILLISECONDS.toNanos(20));
      scheduleRenewalLocked(retry);
      return;
    }
    if (answer.hasLost()) {
      loseLocked(new LostReason(LostReason.Kind.LOST, answer.getLost().getReason()));
      return;
    }
    Duration renewedFor = Duration.ofMillis(answer.getRenewed().getTtlMs());
    trustedUntil = sentAt + trustWindow(renewedFor);
    armTrustTimerLocked();
    scheduleRenewalLocked(sentAt + ttl.toNanos() / 3 - System.nanoTime());
  }

  private void loseLocked(LostReason reason) {
    stopLocked();
    lost.complete(reason);
  }

  private void stopLocked() {
    stopped = true;
    if (trustTimer != null) {
      trustTimer.cancel(false);
    }
    if (renewTimer != null) {
      renewTimer.cancel(false);
    }
    dropStreamLocked();
  }

  private void dropStreamLocked() {
    RenewStream dropped = stream;
    stream = null; // first: closing fails its awaited reply, whose callback must see it dropped
    if (dropped != null) {
      dropped.close();
    }
  }

  @Override
  public String toString() {
    return "LeaseGuard{"
        + name
        + ", token "
        + Long.toUnsignedString(fencingToken)
        + (shared ? ", shared" : "")
        + "}";
  }

  /**
   * One Renew stream: each request's reply is the next response, in order. Closing it fails the
   * replies still awaited and cancels the call. Replies are completed outside this object's lock:
   * completing one runs the guard's callback, which takes the guard's lock.
   */
  static final class RenewStream implements ClientResponseObserver<RenewRequest, RenewResponse> {
    private final ArrayDeque<CompletableFuture<RenewResponse>> awaited = new ArrayDeque<>();
    private final io.grpc.stub.StreamObserver<RenewRequest> requests;
    private ClientCallStreamObserver<RenewRequest> call;
    private Throwable failure;

    RenewStream(LeaseClient client) {
      this.requests = client.leases().renew(this);
    }

    @Override
    public void beforeStart(ClientCallStreamObserver<RenewRequest> call) {
      this.call = call;
    }

    CompletableFuture<RenewResponse> renew(RenewRequest request) {
      CompletableFuture<RenewResponse> reply = new CompletableFuture<>();
      Throwable failed;
      synchronized (this) {
        failed = failure;
        if (failed == null) {
          awaited.add(reply);
          requests.onNext(request);
        }
      }
      if (failed != null) {
        reply.completeExceptionally(failed);
      }
      return reply;
    }

    @Override
    public void onNext(RenewResponse response) {
      CompletableFuture<RenewResponse> reply;
      synchronized (this) {
        reply = awaited.poll();
      }
      if (reply != null) {
        reply.complete(response);
      }
    }

    @Override
    public void onError(Throwable error) {
      fail(error);
    }

    @Override
    public void onCompleted() {
      fail(new IllegalStateException("Renew stream ended"));
    }

    void close() {
      if (fail(new IllegalStateException("Renew stream closed"))) {
        call.cancel("closed by the client", null);
      }
    }

    /** Fails the awaited replies; false if the stream had failed already. */
    private boolean fail(Throwable error) {
      CompletableFuture<?>[] failing;
      synchronized (this) {
        if (failure != null) {
          return false;
        }
        failure = error;
        failing = awaited.toArray(CompletableFuture[]::new);
        awaited.clear();
      }
      for (CompletableFuture<?> reply : failing) {
        reply.completeExceptionally(error);
      }
      return true;
    }
  }
}
