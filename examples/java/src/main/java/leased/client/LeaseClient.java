package leased.client;

import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import io.grpc.stub.StreamObserver;
import java.net.InetAddress;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;
import lease.v1.Lease.AcquireRequest;
import lease.v1.Lease.AcquireResponse;
import lease.v1.Lease.DescribeRequest;
import lease.v1.Lease.DescribeResponse;
import lease.v1.Lease.Granted;
import lease.v1.Lease.ReleaseRequest;
import lease.v1.Lease.ReleaseResponse;
import lease.v1.Lease.RevokeRequest;
import lease.v1.Lease.RevokeResponse;
import lease.v1.LeaseAdminServiceGrpc;
import lease.v1.LeaseServiceGrpc;

/**
 * A connection to a leased server. Thread-safe: share one per process.
 *
 * <pre>{@code
 * try (var client = LeaseClient.forTarget("127.0.0.1:50051")) {
 *   var options = AcquireOptions.ttl(Duration.ofSeconds(15)).waitFor(Duration.ofMinutes(1));
 *   if (client.acquire("nightly-report", options).get() instanceof Acquired.Granted granted) {
 *     try (var lease = granted.lease()) {
 *       work(lease.fencingToken(), lease.lost()); // stop when lost() completes
 *     }
 *   }
 * }
 * }</pre>
 */
public final class LeaseClient implements AutoCloseable {
  /**
   * How long an Acquire call is still read after its caller gave up the wait. A {@code granted}
   * that the server sent before the give-up reached it arrives within a round trip and is then
   * released, instead of staying held by nobody until its TTL.
   */
  public static final Duration GIVE_UP_GRACE = Duration.ofSeconds(1);

  private final ManagedChannel ownedChannel;
  private final LeaseServiceGrpc.LeaseServiceStub leases;
  private final LeaseAdminServiceGrpc.LeaseAdminServiceStub admin;
  final ScheduledExecutorService timers;
  final Duration rpcTimeout;
  final Duration giveUpGrace;
  private final List<CompletableFuture<?>> lateReleases = new ArrayList<>();
  /** Grants released because nobody took them (a caller that gave up, a failed confirmation). */
  final AtomicInteger untakenGrantsReleased = new AtomicInteger();

  /** A plaintext connection to {@code host:port}, closed with this client. */
  public static LeaseClient forTarget(String target) {
    return new LeaseClient(
        ManagedChannelBuilder.forTarget(target).usePlaintext().build(),
        true,
        Duration.ofSeconds(5),
        GIVE_UP_GRACE);
  }

  /** A client on a channel the caller owns (TLS, tokens, ...); closing the client leaves it open. */
  public static LeaseClient on(ManagedChannel channel) {
    return new LeaseClient(channel, false, Duration.ofSeconds(5), GIVE_UP_GRACE);
  }

  /** For tests that show what happens without the give-up grace ({@code Duration.ZERO}). */
  static LeaseClient withGiveUpGrace(String target, Duration giveUpGrace) {
    return new LeaseClient(
        ManagedChannelBuilder.forTarget(target).usePlaintext().build(),
        true,
        Duration.ofSeconds(5),
        giveUpGrace);
  }

  private LeaseClient(
      ManagedChannel channel, boolean owned, Duration rpcTimeout, Duration giveUpGrace) {
    this.ownedChannel = owned ? channel : null;
    this.leases = LeaseServiceGrpc.newStub(channel);
    this.admin = LeaseAdminServiceGrpc.newStub(channel);
    this.rpcTimeout = rpcTimeout;
    this.giveUpGrace = giveUpGrace;
    this.timers =
        Executors.newSingleThreadScheduledExecutor(
            runnable -> {
              Thread thread = new Thread(runnable, "leased-client-timers");
              thread.setDaemon(true);
              return thread;
            });
  }

  /**
   * Asks for {@code name}, waiting up to the options' wait if it is busy. The future completes
   * with {@link Acquired.Granted} (a lease kept alive until released or lost) or {@link
   * Acquired.NotGranted}; exceptionally with the server's {@code StatusRuntimeException} for bad
   * input ({@code INVALID_ARGUMENT}, the message names the field), a limit other than the one in
   * force ({@code FAILED_PRECONDITION}) or an unavailable server ({@code UNAVAILABLE}).
   *
   * <p>To give up the wait, cancel the future or let {@code orTimeout} / {@code completeOnTimeout}
   * end it: the caller is answered at once, while the call is read on for {@link #GIVE_UP_GRACE}
   * and a grant that arrives is released. Do not put a gRPC deadline on it yourself: that cancels
   * the call at the transport and loses a grant already on its way.
   */
  public CompletableFuture<Acquired> acquire(String name, AcquireOptions options) {
    AcquireRequest request =
        AcquireRequest.newBuilder()
            .setName(name)
            .setHolder(options.holder)
            .setTtlMs(options.ttl.toMillis())
            .setWaitMs(options.wait.toMillis())
            .setLimit(options.limit)
            .setLockDelayMs(options.lockDelay.toMillis())
            .build();
    CompletableFuture<Acquired> answer = new CompletableFuture<>();
    AcquireCall call = new AcquireCall(options.onWaiting, answer);
    // A backstop against a server that stops answering, beyond the wait and the grace.
    long deadlineMs =
        options.wait.toMillis() + giveUpGrace.toMillis() + rpcTimeout.toMillis();
    leases.withDeadlineAfter(deadlineMs, TimeUnit.MILLISECONDS).acquire(request, call);
    // Completed by anyone but the call (cancel, orTimeout, ...): the caller gave up.
    answer.whenComplete((result, error) -> call.callerLeft());
    return answer;
  }

  /** Releases a lease by its id; false if it was no longer held by that id. */
  public boolean release(String name, String leaseId) {
    return join(releaseAsync(name, leaseId));
  }

  CompletableFuture<Boolean> releaseAsync(String name, String leaseId) {
    ReleaseRequest request = ReleaseRequest.newBuilder().setName(name).setLeaseId(leaseId).build();
    CompletableFuture<ReleaseResponse> reply = new CompletableFuture<>();
    leases.withDeadlineAfter(rpcTimeout.toMillis(), TimeUnit.MILLISECONDS)
        .release(request, completing(reply));
    return reply.thenApply(ReleaseResponse::getReleased);
  }

  /** What Describe says about {@code name} (never a lease id). */
  public DescribeResponse describe(String name) {
    CompletableFuture<DescribeResponse> reply = new CompletableFuture<>();
    leases.withDeadlineAfter(rpcTimeout.toMillis(), TimeUnit.MILLISECONDS)
        .describe(DescribeRequest.newBuilder().setName(name).build(), completing(reply));
    return join(reply);
  }

  /**
   * Revokes {@code name} (only the grant with {@code fencingToken}, unless 0): an operator's call
   * (LeaseAdminService). Returns the token revoked, or 0 when nothing matched.
   */
  public long revoke(String name, String reason, long fencingToken) {
    RevokeRequest request =
        RevokeRequest.newBuilder()
            .setName(name)
            .setReason(reason)
            .setFencingToken(fencingToken)
            .build();
    CompletableFuture<RevokeResponse> reply = new CompletableFuture<>();
    admin.withDeadlineAfter(rpcTimeout.toMillis(), TimeUnit.MILLISECONDS)
        .revoke(request, completing(reply));
    RevokeResponse revoked = join(reply);
    return revoked.getRevoked() ? revoked.getFencingToken() : 0;
  }

  /**
   * Waits (up to the grace and a release) for the releases of grants that arrived after their
   * callers gave up, then closes the channel if this client opened it. Leases still held stop
   * renewing and expire at their TTL.
   */
  @Override
  public void close() {
    List<CompletableFuture<?>> pending;
    synchronized (lateReleases) {
      pending = new ArrayList<>(lateReleases);
    }
    try {
      CompletableFuture.allOf(pending.toArray(CompletableFuture[]::new))
          .get(giveUpGrace.plus(rpcTimeout).toMillis(), TimeUnit.MILLISECONDS);
    } catch (Exception ignored) {
      // Best effort: a grant we could not release expires at its TTL.
    }
    timers.shutdownNow();
    if (ownedChannel != null) {
      ownedChannel.shutdownNow();
    }
  }

  LeaseServiceGrpc.LeaseServiceStub leases() {
    return leases;
  }

  /** {@code hostname/pid}: enough for an operator to find the process that holds a lease. */
  public static String defaultHolder() {
    String host;
    try {
      host = InetAddress.getLocalHost().getHostName();
    } catch (Exception e) {
      host = "unknown-host";
    }
    return host + "/" + ProcessHandle.current().pid();
  }

  /** Releases a grant nobody took, in the background; {@link #close} waits for it. */
  void releaseUntaken(Granted granted) {
    untakenGrantsReleased.incrementAndGet();
    CompletableFuture<Boolean> releasing =
        releaseAsync(granted.getName(), granted.getLeaseId())
            .exceptionally(error -> false); // it expires at its TTL
    synchronized (lateReleases) {
      lateReleases.removeIf(CompletableFuture::isDone);
      lateReleases.add(releasing);
    }
  }

  /**
   * One Acquire call. Its messages arrive on a gRPC thread; the answer goes to the caller's
   * future. Whatever completes that future first wins: if the caller did (gave up), a grant that
   * comes later, or that the call could no longer hand over, is released.
   */
  private final class AcquireCall
      implements ClientResponseObserver<AcquireRequest, AcquireResponse> {
    private final Consumer<Waiting> onWaiting;
    private final CompletableFuture<Acquired> answer;
    private final long requestedAt = System.nanoTime();
    private ClientCallStreamObserver<AcquireRequest> call;
    private volatile boolean terminal; // granted or not_granted was read

    AcquireCall(Consumer<Waiting> onWaiting, CompletableFuture<Acquired> answer) {
      this.onWaiting = onWaiting;
      this.answer = answer;
    }

    @Override
    public void beforeStart(ClientCallStreamObserver<AcquireRequest> call) {
      this.call = call;
    }

    @Override
    public void onNext(AcquireResponse response) {
      switch (response.getResultCase()) {
        case WAITING -> {
          if (!answer.isDone()) {
            onWaiting.accept(Convert.waiting(response.getWaiting()));
          }
        }
        case GRANTED -> {
          terminal = true;
          Granted granted = response.getGranted();
          if (answer.isDone()) {
            releaseUntaken(granted); // the caller gave up before it came
          } else {
            LeaseGuard.start(LeaseClient.this, granted, requestedAt)
                .whenComplete(this::handOver);
          }
        }
        case NOT_GRANTED -> {
          terminal = true;
          answer.complete(Convert.notGranted(response.getNotGranted()));
        }
        default ->
            answer.completeExceptionally(
                new IllegalStateException("Acquire sent an empty message"));
      }
    }

    /** The guarded lease (or why there is none) goes to the caller, if the caller still waits. */
    private void handOver(Acquired acquired, Throwable error) {
      if (error != null) {
        answer.completeExceptionally(error instanceof ExecutionException ? error.getCause() : error);
      } else if (!answer.complete(acquired) && acquired instanceof Acquired.Granted granted) {
        granted.lease().close(); // the caller left meanwhile: stop renewing, release
      }
    }

    @Override
    public void onError(Throwable error) {
      answer.completeExceptionally(error);
    }

    @Override
    public void onCompleted() {
      if (!terminal) {
        answer.completeExceptionally(
            new IllegalStateException("Acquire ended without granted or not_granted"));
      }
    }

    /** The caller's future is complete. If the caller completed it, read on for the grace. */
    void callerLeft() {
      if (terminal) {
        return; // the call answered: it ends on its own
      }
      if (giveUpGrace.isZero()) {
        call.cancel("the caller gave up", null);
      } else {
        timers.schedule(
            () -> call.cancel("the caller gave up", null),
            giveUpGrace.toMillis(),
            TimeUnit.MILLISECONDS);
      }
    }
  }

  /** A StreamObserver that completes {@code future} with the one reply of a unary call. */
  static <T> StreamObserver<T> completing(CompletableFuture<T> future) {
    return new StreamObserver<>() {
      @Override
      public void onNext(T value) {
        future.complete(value);
      }

      @Override
      public void onError(Throwable error) {
        future.completeExceptionally(error);
      }

      @Override
      public void onCompleted() {}
    };
  }

  /** The future's value, or its failure unwrapped (a StatusRuntimeException stays one). */
  static <T> T join(CompletableFuture<T> future) {
    try {
      return future.get();
    } catch (ExecutionException e) {
      if (e.getCause() instanceof RuntimeException runtime) {
        throw runtime;
      }
      throw new IllegalStateException(e.getCause());
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted", e);
    }
  }
}
