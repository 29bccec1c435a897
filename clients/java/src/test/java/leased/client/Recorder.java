package leased.client;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ForwardingClientCall;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.MethodDescriptor;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import lease.v1.Lease.AcquireRequest;

/** Records every AcquireRequest a client sends: how many round trips, and with which ids. */
final class Recorder implements ClientInterceptor {
  final List<AcquireRequest> acquires = new CopyOnWriteArrayList<>();

  /** A plaintext channel to {@code target} that records through this. */
  ManagedChannel channel(String target) {
    return ManagedChannelBuilder.forTarget(target).usePlaintext().intercept(this).build();
  }

  @Override
  public <Q, R> ClientCall<Q, R> interceptCall(
      MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
    return new ForwardingClientCall.SimpleForwardingClientCall<>(next.newCall(method, options)) {
      @Override
      public void sendMessage(Q message) {
        if (message instanceof AcquireRequest acquire) {
          acquires.add(acquire);
        }
        super.sendMessage(message);
      }
    };
  }
}
