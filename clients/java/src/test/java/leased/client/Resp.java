package leased.client;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * A minimal Redis client (RESP2 over one loopback socket), for the tests only: Debian packages no
 * Java Redis client, and the library depends on none ({@link RedisFunctionCall}). An error reply
 * is thrown as {@link ErrorReply}, whose message is the reply's text, as Jedis and Lettuce do.
 * Thread-safe: one command at a time.
 */
final class Resp implements AutoCloseable {
  private final Socket socket;
  private final InputStream in;
  private final OutputStream out;

  /** An error reply: the message is its text ("STALETOKEN stale fencing token ..."). */
  static final class ErrorReply extends RuntimeException {
    private static final long serialVersionUID = 1L;

    ErrorReply(String message) {
      super(message);
    }
  }

  Resp(int port) throws IOException {
    socket = new Socket("127.0.0.1", port);
    socket.setSoTimeout(10_000);
    in = new BufferedInputStream(socket.getInputStream());
    out = new BufferedOutputStream(socket.getOutputStream());
  }

  /** Sends one command; its reply: String (simple or bulk), Long, List, or null. */
  synchronized Object call(Object... command) {
    try {
      out.write(("*" + command.length + "\r\n").getBytes(StandardCharsets.US_ASCII));
      for (Object part : command) {
        byte[] bytes = String.valueOf(part).getBytes(StandardCharsets.UTF_8);
        out.write(("$" + bytes.length + "\r\n").getBytes(StandardCharsets.US_ASCII));
        out.write(bytes);
        out.write("\r\n".getBytes(StandardCharsets.US_ASCII));
      }
      out.flush();
      return reply();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** This connection as the library's FCALL: {@code new RedisFencing(resp::fcall)}. */
  Object fcall(String function, List<String> keys, List<String> args) {
    List<Object> command = new ArrayList<>(List.of("FCALL", function, keys.size()));
    command.addAll(keys);
    command.addAll(args);
    return call(command.toArray());
  }

  private Object reply() throws IOException {
    String line = line();
    String rest = line.substring(1);
    switch (line.charAt(0)) {
      case '+':
        return rest;
      case '-':
        throw new ErrorReply(rest);
      case ':':
        return Long.parseLong(rest);
      case '$':
        int length = Integer.parseInt(rest);
        if (length < 0) {
          return null;
        }
        byte[] bulk = in.readNBytes(length + 2);
        return new String(bulk, 0, length, StandardCharsets.UTF_8);
      case '*':
        int count = Integer.parseInt(rest);
        if (count < 0) {
          return null;
        }
        List<Object> items = new ArrayList<>();
        for (int i = 0; i < count; i++) {
          items.add(reply());
        }
        return items;
      default:
        throw new IOException("not a RESP reply: " + line);
    }
  }

  private String line() throws IOException {
    StringBuilder line = new StringBuilder();
    int c;
    while ((c = in.read()) != '\n') {
      if (c < 0) {
        throw new IOException("connection closed");
      }
      if (c != '\r') {
        line.append((char) c);
      }
    }
    return line.toString();
  }

  @Override
  public void close() throws IOException {
    socket.close();
  }
}
