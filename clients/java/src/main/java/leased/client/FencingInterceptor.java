package leased.client;

import io.grpc.ForwardingServerCall.SimpleForwardingServerCall;
import io.grpc.ForwardingServerCallListener.SimpleForwardingServerCallListener;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor.MethodType;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import io.grpc.Status;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Makes a gRPC service a fenced resource: each call carries {@code leased-lease-name} and {@code
 * leased-fencing-token} ({@link LeaseGuard#fencingMetadata()}), and a call whose token is below
 * the largest this service has seen for that lease name is refused before its handler runs.
 *
 * <pre>{@code
 * Server server = ServerBuilder.forPort(port)
 *     .addService(ServerInterceptors.intercept(new OrdersService(), new FencingInterceptor()))
 *     .build();
 * }</pre>
 *
 * <ul>
 *   <li>Neither entry: {@code INVALID_ARGUMENT} (the service is fenced), unless the interceptor
 *       is {@link #optional()}: then the call passes unchecked.
 *   <li>One entry without the other, an empty name, a token that is not canonical decimal from 1
 *       to 9223372036854775807, an entry given twice: {@code INVALID_ARGUMENT} naming the entry.
 *   <li>A token below the name's mark: {@code FAILED_PRECONDITION} "stale fencing token T for
 *       lease "NAME": the highest seen is M". Otherwise the mark becomes the token (an equal one
 *       passes) and the handler runs.
 *   <li>The mark store failed: {@code UNAVAILABLE}, and the handler does not run.
 * </ul>
 *
 * <p>The marks live in a {@link FenceMarks}: in this process by default (only as durable as the
 * process: a restarted service accepts any token until it sees a newer one), or in PostgreSQL or
 * Redis, shared by the replicas. With the in-process store, the unary calls of one lease name run
 * their handlers one at a time (check and handler under one lock per name, held until the call
 * closes), so that a handler's writes for a name land in token order even if the service pauses
 * mid-call; a call waits for the lock on the server's executor, so do not serve fenced methods on
 * {@code directExecutor()}. Streaming calls are checked once, when they start.
 */
public final class FencingInterceptor implements ServerInterceptor {
  private final FenceMarks marks;
  private final boolean required;
  private final Map<String, NameLock> locks; // guarded by itself; a name's entry while in use

  /** Fencing with marks in this process, the metadata required. */
  public FencingInterceptor() {
    this(FenceMarks.inProcess());
  }

  /** Fencing with marks in {@code marks}, the metadata required. */
  public FencingInterceptor(FenceMarks marks) {
    this(marks, true, new HashMap<>());
  }

  private FencingInterceptor(FenceMarks marks, boolean required, Map<String, NameLock> locks) {
    this.marks = marks;
    this.required = required;
    this.locks = locks;
  }

  /**
   * The same fencing (same marks), except that a call with neither entry passes unchecked: for a
   * service that some callers reach without a lease. A call with a token is still checked.
   */
  public FencingInterceptor optional() {
    return new FencingInterceptor(marks, false, locks);
  }

  @Override
  public <Q, A> ServerCall.Listener<Q> interceptCall(
      ServerCall<Q, A> call, Metadata headers, ServerCallHandler<Q, A> next) {
    List<String> names = values(headers, Fencing.LEASE_NAME);
    List<String> tokens = values(headers, Fencing.FENCING_TOKEN);
    if (names.isEmpty() && tokens.isEmpty()) {
      if (!required) {
        return next.startCall(call, headers);
      }
      return refuse(
          call,
          Status.INVALID_ARGUMENT.withDescription(
              "this service is fenced: the call needs leased-lease-name and leased-fencing-token"
                  + " metadata (the lease's name and fencing token, e.g."
                  + " LeaseGuard.fencingMetadata())"));
    }
    String invalid = invalidEntries(names, tokens);
    if (invalid != null) {
      return refuse(call, Status.INVALID_ARGUMENT.withDescription(invalid));
    }
    String name = names.get(0);
    long token;
    try {
      token = Fencing.parseToken(tokens.get(0));
    } catch (IllegalArgumentException bad) {
      return refuse(
          call,
          Status.INVALID_ARGUMENT.withDescription(
              Fencing.FENCING_TOKEN.originalName() + " " + bad.getMessage()));
    }
    boolean inTurn =
        marks instanceof FenceMarks.InProcess
            && call.getMethodDescriptor().getType() == MethodType.UNARY;
    NameLock lock = inTurn ? enter(name) : null;
    AtomicBoolean left = new AtomicBoolean(lock == null);
    Runnable leave =
        () -> {
          if (left.compareAndSet(false, true)) {
            leave(name, lock);
          }
        };
    Status refusal = check(name, token);
    if (refusal != null) {
      leave.run();
      return refuse(call, refusal);
    }
    if (lock == null) {
      return next.startCall(call, headers);
    }
    try {
      ServerCall<Q, A> leavingOnClose =
          new SimpleForwardingServerCall<>(call) {
            @Override
            public void close(Status status, Metadata trailers) {
              try {
                super.close(status, trailers);
              } finally {
                leave.run();
              }
            }
          };
      return new SimpleForwardingServerCallListener<>(next.startCall(leavingOnClose, headers)) {
        @Override
        public void onCancel() {
          try {
            super.onCancel();
          } finally {
            leave.run();
          }
        }

        @Override
        public void onComplete() {
          try {
            super.onComplete();
          } finally {
            leave.run();
          }
        }
      };
    } catch (RuntimeException e) {
      leave.run();
      throw e;
    }
  }

  /** The status refusing the call, or null when the token is at or above the name's mark. */
  private Status check(String name, long token) {
    try {
      marks.fence(name, token);
      return null;
    } catch (StaleTokenException stale) {
      return Status.FAILED_PRECONDITION.withDescription(
          "stale fencing token "
              + token
              + " for lease "
              + Fencing.quoted(name)
              + ": the highest seen is "
              + stale.mark());
    } catch (IllegalArgumentException bad) {
      return Status.INVALID_ARGUMENT.withDescription(bad.getMessage());
    } catch (RuntimeException failed) {
      return Status.UNAVAILABLE
          .withDescription("the fencing mark store failed: " + failed.getMessage())
          .withCause(failed);
    }
  }

  /** What is wrong with the entries other than the token's form, or null. */
  private static String invalidEntries(List<String> names, List<String> tokens) {
    String name = Fencing.LEASE_NAME.originalName();
    String token = Fencing.FENCING_TOKEN.originalName();
    if (names.isEmpty()) {
      return name + " is missing: a fenced call carries it with " + token;
    }
    if (tokens.isEmpty()) {
      return token + " is missing: a fenced call carries it with " + name;
    }
    if (names.size() > 1) {
      return name + " must be given once, not " + names.size() + " times";
    }
    if (tokens.size() > 1) {
      return token + " must be given once, not " + tokens.size() + " times";
    }
    if (names.get(0).isEmpty()) {
      return name + " must be a lease name, not empty";
    }
    return null;
  }

  private static List<String> values(Metadata headers, Metadata.Key<String> key) {
    Iterable<String> all = headers.getAll(key);
    if (all == null) {
      return List.of();
    }
    List<String> values = new ArrayList<>();
    all.forEach(values::add);
    return values;
  }

  private static <Q, A> ServerCall.Listener<Q> refuse(ServerCall<Q, A> call, Status status) {
    call.close(status, new Metadata());
    return new ServerCall.Listener<>() {};
  }

  /** One lease name's turn: a permit, and how many calls hold or wait for it. */
  private static final class NameLock {
    final Semaphore turn = new Semaphore(1);
    int users; // guarded by the locks map
  }

  private NameLock enter(String name) {
    NameLock lock;
    synchronized (locks) {
      lock = locks.computeIfAbsent(name, unused -> new NameLock());
      lock.users++;
    }
    lock.turn.acquireUninterruptibly();
    return lock;
  }

  private void leave(String name, NameLock lock) {
    lock.turn.release();
    synchronized (locks) {
      if (--lock.users == 0) {
        locks.remove(name);
      }
    }
  }
}
