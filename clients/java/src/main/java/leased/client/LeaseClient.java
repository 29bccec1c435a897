package leased.client;

import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Status;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import io.grpc.stub.StreamObserver;
import java.net.InetAddress;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;
import lease.v1.Lease.AcquireRequest;
import lease.v1.Lease.AcquireResponse;
import lease.v1.Lease.CheckTokenRequest;
import lease.v1.Lease.CheckTokenResponse;
import lease.v1.Lease.DescribeRequest;
import lease.v1.Lease.DescribeResponse;
import lease.v1.Lease.ReleaseRequest;
import lease.v1.Lease.ReleaseResponse;
import lease.v1.Lease.RevokeRequest;
import lease.v1.Lease.RevokeResponse;
import lease.v1.Lease.WatchEvent;
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
   * How many times an Acquire that ended {@code UNAVAILABLE}, or whose stream ended without an
   * answer (a connection reset), is sent again with the same lease id: after {@link
   * #RETRY_BACKOFF}, then twice and four times as long.
   */
  public static final int ACQUIRE_RETRIES = 3;

  public static final Duration RETRY_BACKOFF = Duration.ofMillis(100);

  /**
   * The deadline of the Release that follows a give-up: short, since nobody waits for it but
   * {@link #close}. If it fails, a grant that raced the give-up stays held until its TTL.
   */
  public static final Duration GIVE_UP_RELEASE_TIMEOUT = Duration.ofSeconds(2);

  /** The OS's generator (NativePRNG, /dev/urandom, on Linux): lease ids are secrets. */
  private static final SecureRandom LEASE_IDS = new SecureRandom();

  private final ManagedChannel ownedChannel;
  private final LeaseServiceGrpc.LeaseServiceStub leases;
  private final LeaseAdminServiceGrpc.LeaseAdminServiceStub admin;
  final ScheduledExecutorService timers;
  final Duration rpcTimeout;
  private final List<CompletableFuture<?>> pendingReleases = new ArrayList<>();

  /**
   * Grants ended by a Release the client sent on its own, for a grant nobody took: a caller that
   * gave up or an acquisition that failed (a Release that answered {@code released}), a grant
   * whose confirming renewal failed.
   */
  final AtomicInteger untakenGrantsReleased = new AtomicInteger();

  /** A plaintext connection to {@code host:port}, closed with this client. */
  public static LeaseClient forTarget(String target) {
    return new LeaseClient(
        ManagedChannelBuilder.forTarget(target).usePlaintext().build(),
        true,
        Duration.ofSeconds(5));
  }

  /**
   * A client on a channel the caller owns (TLS, tokens, ...); closing the client leaves it open.
   */
  public static LeaseClient on(ManagedChannel channel) {
    return new LeaseClient(channel, false, Duration.ofSeconds(5));
  }

  private LeaseClient(ManagedChannel channel, boolean owned, Duration rpcTimeout) {
    this.ownedChannel = owned ? channel : null;
    this.leases = LeaseServiceGrpc.newStub(channel);
    this.admin = LeaseAdminServiceGrpc.newStub(channel);
    this.rpcTimeout = rpcTimeout;
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
   * force ({@code FAILED_PRECONDITION}) or an unavailable server ({@code UNAVAILABLE}, once the
   * retries are spent).
   *
   * <p>Each acquisition sends its own lease id (128 bits from the OS's generator, 32 hex digits),
   * which makes it safe to retry and to give up. An Acquire that ended {@code UNAVAILABLE}, or
   * whose stream ended without an answer, is sent again with the same id ({@link
   * #ACQUIRE_RETRIES} times at most, {@link #RETRY_BACKOFF} doubling) and the wait that is left
   * (none once it is spent: the retry then tries once, which still picks up a grant an earlier
   * try got). The server answers a retry with the grant the id already holds, and a retried
   * waiter keeps its place in the queue.
   *
   * <p>To give up the wait, cancel the future or let {@code orTimeout} / {@code completeOnTimeout}
   * end it: the caller is answered at once, the call is cancelled and then {@code Release(name,
   * id)} is sent, which ends a grant that raced the give-up whichever way the race went. The
   * future fails only after the same Release when the acquisition fails. Do not put a gRPC
   * deadline on the call yourself: that cancels it at the transport without the Release.
   */
  public CompletableFuture<Acquired> acquire(String name, AcquireOptions options) {
    Acquisition acquisition = new Acquisition(name, options, newLeaseId());
    acquisition.answer.whenComplete((result, error) -> acquisition.answered());
    acquisition.send();
    return acquisition.answer;
  }

  /**
   * A lock on {@code name} that the thread holding it may take again, like {@link
   * java.util.concurrent.locks.ReentrantLock}: only its outermost release ends the lease.
   */
  public ReentrantLeaseLock reentrantLock(String name, AcquireOptions options) {
    return new ReentrantLeaseLock(this, name, options.copy());
  }

  /**
   * A read-write lock on {@code name}, like {@link java.util.concurrent.locks.ReadWriteLock}: its
   * {@code readLock()} takes shared grants, its {@code writeLock()} exclusive ones.
   */
  public LeaseReadWriteLock readWriteLock(String name, AcquireOptions options) {
    return new LeaseReadWriteLock(this, name, options);
  }

  /** A new acquisition's own lease id: 128 random bits as 32 lowercase hex digits. */
  static String newLeaseId() {
    byte[] id = new byte[16];
    LEASE_IDS.nextBytes(id);
    return HexFormat.of().formatHex(id);
  }

  /** Releases a lease by its id; false if it was no longer held by that id. */
  public boolean release(String name, String leaseId) {
    return join(releaseAsync(name, leaseId));
  }

  CompletableFuture<Boolean> releaseAsync(String name, String leaseId) {
    return releaseAsync(name, leaseId, rpcTimeout);
  }

  private CompletableFuture<Boolean> releaseAsync(String name, String leaseId, Duration timeout) {
    ReleaseRequest request = ReleaseRequest.newBuilder().setName(name).setLeaseId(leaseId).build();
    CompletableFuture<ReleaseResponse> reply = new CompletableFuture<>();
    leases.withDeadlineAfter(timeout.toMillis(), TimeUnit.MILLISECONDS)
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
   * Follows {@code name}: {@code onEvent} gets a {@code SNAPSHOT} (who holds it now), then one
   * event per change of holder ({@code GRANTED}, {@code RELEASED}, {@code EXPIRED}, {@code
   * REVOKED}; renewals are not events), and a fresh {@code SNAPSHOT} whenever events may have been
   * missed. Events arrive one at a time, in order, on a gRPC thread: do not block in {@code
   * onEvent}. Close the returned {@link Watch} to stop; watch its {@link Watch#ended} to learn
   * that the stream broke (then watch again).
   */
  public Watch watch(String name, Consumer<WatchEvent> onEvent) {
    return Watch.start(this, name, onEvent);
  }

  /**
   * Whether {@code name} is held with exactly {@code fencingToken} now ({@code getCurrent()}),
   * and the token that holds it ({@code getCurrentToken()}, 0 when free). Stale as soon as it is
   * answered: a resource that must refuse old holders compares tokens on every write instead.
   */
  public CheckTokenResponse checkToken(String name, long fencingToken) {
    CheckTokenRequest request =
        CheckTokenRequest.newBuilder().setName(name).setFencingToken(fencingToken).build();
    CompletableFuture<CheckTokenResponse> reply = new CompletableFuture<>();
    leases.withDeadlineAfter(rpcTimeout.toMillis(), TimeUnit.MILLISECONDS)
        .checkToken(request, completing(reply));
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
   * Waits (up to {@link #GIVE_UP_RELEASE_TIMEOUT}) for the Releases the client sent on its own
   * for grants nobody took, then closes the channel if this client opened it. Leases still held
   * stop renewing and expire at their TTL.
   */
  @Override
  public void close() {
    List<CompletableFuture<?>> pending;
    synchronized (pendingReleases) {
      pending = new ArrayList<>(pendingReleases);
    }
    try {
      CompletableFuture.allOf(pending.toArray(CompletableFuture[]::new))
          .get(GIVE_UP_RELEASE_TIMEOUT.toMillis() + 500, TimeUnit.MILLISECONDS);
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

  /**
   * Releases, in the background, a grant that nobody took (or may have been made for an id that
   * nobody will use): best effort, never a failure. {@link #close} waits for it.
   */
  CompletableFuture<Boolean> releaseUntaken(String name, String leaseId) {
    CompletableFuture<Boolean> releasing =
        releaseAsync(name, leaseId, GIVE_UP_RELEASE_TIMEOUT)
            .exceptionally(error -> false) // a grant it missed expires at its TTL
            .thenApply(
                released -> {
                  if (released) {
                    untakenGrantsReleased.incrementAndGet();
                  }
                  return released;
                });
    synchronized (pendingReleases) {
      pendingReleases.removeIf(CompletableFuture::isDone);
      pendingReleases.add(releasing);
    }
    return releasing;
  }

  /**
   * One acquisition: its lease id, and the Acquire calls that carry it (the first, and retries).
   * The answer goes to the caller's future. Whatever completes that future first wins: if the
   * caller did (gave up), the call in flight is cancelled and the id released, which ends a grant
   * that arrived meanwhile or was about to.
   */
  private final class Acquisition {
    private final String name;
    private final String leaseId;
    private final AcquireRequest.Builder request;
    private final Consumer<Waiting> onWaiting;
    private final boolean shared;
    /**
     * When the first Acquire was sent: the server grants no earlier, and answers a retry with the
     * grant an earlier try may have got (same expiry), so the lease lasts a TTL from here.
     */
    private final long requestedAt = System.nanoTime();
    private final long waitEndsAt;
    final CompletableFuture<Acquired> answer = new CompletableFuture<>();
    /** The outcome is on its way to {@code answer} from the calls, not from the caller. */
    private volatile boolean answering;

    // Guarded by `this`: the give-up and the start of a retry exclude each other, so that no call
    // starts after the give-up's cancellation.
    private ClientCallStreamObserver<AcquireRequest> call; // the one in flight
    private boolean gaveUp;
    private int retries;

    Acquisition(String name, AcquireOptions options, String leaseId) {
      this.name = name;
      this.leaseId = leaseId;
      this.onWaiting = options.onWaiting;
      this.shared = options.shared;
      this.waitEndsAt = requestedAt + options.wait.toNanos();
      this.request =
          AcquireRequest.newBuilder()
              .setName(name)
              .setHolder(options.holder)
              .setTtlMs(options.ttl.toMillis())
              .setWaitMs(options.wait.toMillis())
              .setLimit(options.limit)
              .setLockDelayMs(options.lockDelay.toMillis())
              .setShared(shared)
              .setLeaseId(leaseId);
    }

    /** Sends the Acquire (again, on a retry: with the wait that is left). */
    synchronized void send() {
      if (gaveUp) {
        return;
      }
      if (retries > 0) {
        request.setWaitMs(Math.max(0, (waitEndsAt - System.nanoTime()) / 1_000_000));
      }
      // A backstop against a server that stops answering; the caller gives up with the future.
      long deadlineMs = request.getWaitMs() + rpcTimeout.toMillis();
      leases
          .withDeadlineAfter(deadlineMs, TimeUnit.MILLISECONDS)
          .acquire(request.build(), new Call());
    }

    /** The caller's future is complete. If the caller completed it, give up. */
    void answered() {
      if (answering) {
        return; // the calls answered: nothing is left in flight
      }
      ClientCallStreamObserver<AcquireRequest> inFlight;
      synchronized (this) {
        gaveUp = true;
        inFlight = call;
      }
      if (inFlight != null) {
        inFlight.cancel("the caller gave up", null);
      }
      // After the cancellation, on the same connection: the server has then stopped the wait, or
      // granted, and either way the id holds nothing once this is done.
      releaseUntaken(name, leaseId);
    }

    /** A call ended without its terminal message: retry it, or fail. */
    void ended(Throwable error) {
      boolean retryable =
          error == null || Status.fromThrowable(error).getCode() == Status.Code.UNAVAILABLE;
      synchronized (this) {
        if (gaveUp) {
          return; // the cancellation's own error; the give-up released
        }
        if (retryable && retries < ACQUIRE_RETRIES) {
          long backoffMs = RETRY_BACKOFF.toMillis() << retries;
          retries++;
          try {
            timers.schedule(this::send, backoffMs, TimeUnit.MILLISECONDS);
            return;
          } catch (RejectedExecutionException closed) {
            // The client is closing: no more calls.
          }
        }
      }
      fail(
          error != null
              ? error
              : new IllegalStateException("Acquire ended without granted or not_granted"));
    }

    /**
     * The acquisition failed: release the id first (a try that failed may have been granted),
     * then tell the caller, so that a failed acquire leaves nothing held.
     */
    void fail(Throwable error) {
      answering = true;
      releaseUntaken(name, leaseId)
          .whenComplete((released, ignored) -> answer.completeExceptionally(error));
    }

    /** The answer goes to the caller, unless the caller left: then a lease is let go at once. */
    void deliver(Acquired acquired) {
      answering = true;
      if (!answer.complete(acquired) && acquired instanceof Acquired.Granted granted) {
        granted.lease().abandon();
      }
    }

    /** One Acquire call. Its messages arrive on a gRPC thread, one at a time. */
    private final class Call implements ClientResponseObserver<AcquireRequest, AcquireResponse> {
      private ClientCallStreamObserver<AcquireRequest> self;
      private boolean terminal; // granted or not_granted was read

      @Override
      public void beforeStart(ClientCallStreamObserver<AcquireRequest> started) {
        self = started;
        call = started; // in send(), under the acquisition's lock
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
            if (!answer.isDone()) { // else the give-up's Release ends it
              LeaseGuard.start(LeaseClient.this, response.getGranted(), requestedAt, shared)
                  .whenComplete(this::handOver);
            }
          }
          case NOT_GRANTED -> {
            terminal = true;
            deliver(Convert.notGranted(response.getNotGranted()));
          }
          default -> {
            terminal = true;
            self.cancel("Acquire sent an empty message", null);
            fail(new IllegalStateException("Acquire sent an empty message"));
          }
        }
      }

      /** The guarded lease (or why there is none) goes to the caller, if the caller still waits. */
      private void handOver(Acquired acquired, Throwable error) {
        if (error != null) {
          fail(error instanceof ExecutionException ? error.getCause() : error);
        } else {
          deliver(acquired);
        }
      }

      @Override
      public void onError(Throwable error) {
        if (!terminal) {
          ended(error);
        }
      }

      @Override
      public void onCompleted() {
        if (!terminal) {
          ended(null);
        }
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
      throw unwrap(e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted", e);
    }
  }

  /**
   * An acquisition's answer, waited for in the calling thread: an interrupt gives it up (as a
   * cancelled future does), a failure is thrown unwrapped.
   */
  static Acquired await(CompletableFuture<Acquired> acquiring) throws InterruptedException {
    try {
      return acquiring.get();
    } catch (InterruptedException e) {
      acquiring.cancel(true);
      throw e;
    } catch (ExecutionException e) {
      throw unwrap(e);
    }
  }

  private static RuntimeException unwrap(ExecutionException e) {
    return e.getCause() instanceof RuntimeException runtime
        ? runtime
        : new IllegalStateException(e.getCause());
  }
}
