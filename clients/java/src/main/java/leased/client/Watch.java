package leased.client;

import io.grpc.Status;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import java.util.concurrent.CompletableFuture;
import java.util.function.Consumer;
import lease.v1.Lease.WatchEvent;
import lease.v1.Lease.WatchRequest;

/**
 * A Watch stream on one lease, from {@link LeaseClient#watch}: the events go to the consumer
 * given there, in order, until {@link #close}. {@link #ended} tells why the stream stopped.
 */
public final class Watch implements AutoCloseable {
  private final CompletableFuture<Void> ended = new CompletableFuture<>();
  private volatile ClientCallStreamObserver<WatchRequest> call;
  private volatile boolean closed;

  private Watch() {}

  static Watch start(LeaseClient client, String name, Consumer<WatchEvent> onEvent) {
    Watch watch = new Watch();
    WatchRequest request = WatchRequest.newBuilder().setName(name).build();
    // No deadline: a watch lasts as long as its caller wants it.
    client
        .leases()
        .watch(
            request,
            new ClientResponseObserver<WatchRequest, WatchEvent>() {
              @Override
              public void beforeStart(ClientCallStreamObserver<WatchRequest> started) {
                watch.call = started;
              }

              @Override
              public void onNext(WatchEvent event) {
                onEvent.accept(event);
              }

              @Override
              public void onError(Throwable error) {
                if (watch.closed && Status.fromThrowable(error).getCode() == Status.Code.CANCELLED) {
                  watch.ended.complete(null); // our own close()
                } else {
                  watch.ended.completeExceptionally(error);
                }
              }

              @Override
              public void onCompleted() {
                watch.ended.complete(null);
              }
            });
    return watch;
  }

  /**
   * Completes when the stream stops: normally after {@link #close} (or if the server ended it),
   * exceptionally with the {@code StatusRuntimeException} that broke it ({@code UNAVAILABLE} when
   * the server went away, {@code INVALID_ARGUMENT} for a bad name). Events may have been missed
   * since: a new watch starts with a fresh {@code SNAPSHOT}.
   */
  public CompletableFuture<Void> ended() {
    return ended;
  }

  /** Stops the stream; {@link #ended} then completes normally. */
  @Override
  public void close() {
    closed = true;
    call.cancel("the watcher closed the watch", null);
  }
}
