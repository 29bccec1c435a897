package leased.client;

import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientInterceptors;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.MethodDescriptor;
import io.grpc.Server;
import io.grpc.ServerInterceptors;
import io.grpc.ServerServiceDefinition;
import io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.ClientCalls;
import io.grpc.stub.ServerCalls;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;

/**
 * A gRPC service to fence in the tests: {@code leased.test.Store/Put} takes a string and keeps it
 * as the stored value, appending it to the history of accepted writes. Served on loopback TCP,
 * behind a {@link FencingInterceptor} or (fencing off) without one. Its messages are plain UTF-8
 * strings (no proto). A value "pause MS ..." makes the handler pause MS milliseconds before it
 * stores the value: a service paused mid-call.
 */
final class FencedStore implements AutoCloseable {
  static final MethodDescriptor<String, String> PUT =
      MethodDescriptor.<String, String>newBuilder()
          .setType(MethodDescriptor.MethodType.UNARY)
          .setFullMethodName("leased.test.Store/Put")
          .setRequestMarshaller(Utf8.INSTANCE)
          .setResponseMarshaller(Utf8.INSTANCE)
          .build();

  private final Server server;
  private final List<String> accepted = new ArrayList<>(); // guarded by itself

  /** Released each time a handler starts. */
  final Semaphore handlersStarted = new Semaphore(0);

  /** Serves the store fenced by {@code fencing}, or unfenced when it is null. */
  FencedStore(FencingInterceptor fencing) throws IOException {
    ServerServiceDefinition service =
        ServerServiceDefinition.builder("leased.test.Store")
            .addMethod(
                PUT,
                ServerCalls.asyncUnaryCall(
                    (value, reply) -> {
                      handlersStarted.release();
                      pauseFor(value);
                      synchronized (accepted) {
                        accepted.add(value);
                      }
                      reply.onNext("stored");
                      reply.onCompleted();
                    }))
            .build();
    server =
        NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0))
            .addService(fencing == null ? service : ServerInterceptors.intercept(service, fencing))
            .build()
            .start();
  }

  private static void pauseFor(String value) {
    if (value.startsWith("pause ")) {
      try {
        Thread.sleep(Long.parseLong(value.split(" ")[1]));
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }

  String target() {
    return "127.0.0.1:" + server.getPort();
  }

  /** The accepted values, oldest first. */
  List<String> accepted() {
    synchronized (accepted) {
      return List.copyOf(accepted);
    }
  }

  /** The stored value: the last one accepted, or null. */
  String value() {
    List<String> all = accepted();
    return all.isEmpty() ? null : all.get(all.size() - 1);
  }

  /** Put over {@code channel}, with the fencing metadata of {@code lease} unless it is null. */
  static String put(Channel channel, LeaseGuard lease, String value) {
    Channel fenced =
        lease == null ? channel : ClientInterceptors.intercept(channel, lease.fencingInterceptor());
    return ClientCalls.blockingUnaryCall(
        fenced, PUT, CallOptions.DEFAULT.withDeadlineAfter(10, TimeUnit.SECONDS), value);
  }

  static ManagedChannel channel(String target) {
    return ManagedChannelBuilder.forTarget(target).usePlaintext().build();
  }

  @Override
  public void close() throws InterruptedException {
    server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
  }

  /** A message that is a UTF-8 string. */
  enum Utf8 implements MethodDescriptor.Marshaller<String> {
    INSTANCE;

    @Override
    public InputStream stream(String value) {
      return new ByteArrayInputStream(value.getBytes(StandardCharsets.UTF_8));
    }

    @Override
    public String parse(InputStream stream) {
      try {
        return new String(stream.readAllBytes(), StandardCharsets.UTF_8);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }
  }
}
