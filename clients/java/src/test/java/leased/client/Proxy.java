package leased.client;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * A TCP proxy on a loopback port to {@code upstream}: {@link #cut()} resets every connection
 * through it, as a network fault does, and it goes on accepting new ones.
 */
final class Proxy implements AutoCloseable {
  final String target;
  private final ServerSocket listener;
  private final String upstreamHost;
  private final int upstreamPort;
  private final List<Socket> sockets = new CopyOnWriteArrayList<>();

  Proxy(String upstream) throws IOException {
    int colon = upstream.lastIndexOf(':');
    this.upstreamHost = upstream.substring(0, colon);
    this.upstreamPort = Integer.parseInt(upstream.substring(colon + 1));
    this.listener = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
    this.target = "127.0.0.1:" + listener.getLocalPort();
    daemon(this::accept);
  }

  private void accept() {
    while (!listener.isClosed()) {
      try {
        Socket client = listener.accept();
        Socket server = new Socket(upstreamHost, upstreamPort);
        sockets.add(client);
        sockets.add(server);
        daemon(() -> pump(client, server));
        daemon(() -> pump(server, client));
      } catch (IOException closed) {
        return;
      }
    }
  }

  private static void pump(Socket from, Socket to) {
    byte[] buffer = new byte[16 * 1024];
    try (InputStream in = from.getInputStream(); OutputStream out = to.getOutputStream()) {
      for (int n; (n = in.read(buffer)) >= 0; ) {
        out.write(buffer, 0, n);
      }
    } catch (IOException cut) {
      // One side went away: the other is closed with it.
    }
    closeQuietly(from);
    closeQuietly(to);
  }

  /** Resets (RST, not FIN) every connection open through the proxy. */
  void cut() {
    for (Socket socket : sockets) {
      try {
        socket.setSoLinger(true, 0);
      } catch (IOException alreadyClosed) {
        // Nothing to reset.
      }
      closeQuietly(socket);
    }
    sockets.clear();
  }

  @Override
  public void close() {
    closeQuietly(listener);
    cut();
  }

  private static void closeQuietly(AutoCloseable closeable) {
    try {
      closeable.close();
    } catch (Exception ignored) {
      // Closing is all we wanted.
    }
  }

  private static void daemon(Runnable body) {
    Thread thread = new Thread(body, "proxy");
    thread.setDaemon(true);
    thread.start();
  }
}
