package leased.client;

import java.io.File;
import java.io.IOException;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;

/** A redis-server and a leased serving from it, on loopback ports; both killed on close. */
final class Stack implements AutoCloseable {
  final String target;
  private final Process redis;
  final Process leased;
  private final Path dir;
  private final List<LeaseClient> clients = new java.util.ArrayList<>(); // guarded by itself

  private Stack(String target, Process redis, Process leased, Path dir) {
    this.target = target;
    this.redis = redis;
    this.leased = leased;
    this.dir = dir;
  }

  /**
   * Starts both on fresh ports, up to three times: a port the OS handed out free can be taken by
   * another process's connection before redis-server or leased binds it, and then that process
   * exits at once ("Address already in use"), which is a reason to try other ports, not to fail.
   */
  static Stack start() throws Exception {
    for (int attempt = 1; ; attempt++) {
      Path dir = Files.createTempDirectory("leased-java-");
      try {
        return startIn(dir);
      } catch (ExitedEarly exited) {
        if (attempt == 3) {
          throw new IllegalStateException(exited.getMessage());
        }
        System.err.println("retrying on other ports: " + exited.getMessage());
      }
    }
  }

  /** A process of the stack exited before it answered. */
  private static final class ExitedEarly extends Exception {
    private static final long serialVersionUID = 1L;

    ExitedEarly(String message) {
      super(message);
    }
  }

  private static Stack startIn(Path dir) throws Exception {
    int redisPort = freePort();
    Process redis = spawnRedis(dir, redisPort);
    awaitListening(redis, redisPort);
    int leasedPort = freePort();
    String leasedBin = System.getenv().getOrDefault("LEASED_BIN", "../../target/debug/leased");
    String target = "127.0.0.1:" + leasedPort;
    Process leased =
        spawn(
            dir.resolve("leased.log"),
            List.of(
                leasedBin, "serve", "--listen", target,
                "--redis-url", "redis://127.0.0.1:" + redisPort));
    Stack stack = new Stack(target, redis, leased, dir);
    // Describe answers only once leased is up and has reached Redis.
    try (LeaseClient probe = LeaseClient.forTarget(target)) {
      long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
      while (true) {
        try {
          probe.describe("java-ready");
          return stack;
        } catch (RuntimeException notYet) {
          boolean exited = !redis.isAlive() || !leased.isAlive();
          if (exited || System.nanoTime() > deadline) {
            String why =
                (exited ? "exited early" : "did not answer within 20 s")
                    + " ("
                    + notYet.getMessage()
                    + ")\n"
                    + stack.logs();
            stack.close();
            if (exited) {
              throw new ExitedEarly("the stack " + why);
            }
            throw new IllegalStateException("leased " + why, notYet);
          }
          Thread.sleep(50);
        }
      }
    }
  }

  /** Both logs, for a failure message: the directory is removed on close. */
  private String logs() {
    StringBuilder text = new StringBuilder();
    for (String name : List.of("redis.log", "leased.log")) {
      text.append("--- ").append(name).append('\n');
      try {
        text.append(Files.readString(dir.resolve(name)));
      } catch (IOException unreadable) {
        text.append(unreadable).append('\n');
      }
    }
    return text.toString();
  }

  /**
   * A redis-server without persistence on 127.0.0.1:{@code port}, its files and {@code redis.log}
   * in {@code dir}: leased's here, and the fencing tests' resource ({@link Scratch}).
   */
  static Process spawnRedis(Path dir, int port) throws IOException {
    return spawn(
        dir.resolve("redis.log"),
        List.of(
            "redis-server", "--bind", "127.0.0.1", "--port", String.valueOf(port),
            "--save", "", "--appendonly", "no", "--dir", dir.toString()));
  }

  private static Process spawn(Path log, List<String> command) throws IOException {
    return new ProcessBuilder(command)
        .redirectErrorStream(true)
        .redirectOutput(log.toFile())
        .start();
  }

  /**
   * Waits until redis-server accepts connections: a leased started before that was once seen to
   * answer UNAVAILABLE for the next 18 s and more (Redis came up 90 ms after it).
   */
  private static void awaitListening(Process redis, int port) throws Exception {
    long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
    while (true) {
      try (Socket probe = new Socket("127.0.0.1", port)) {
        return;
      } catch (IOException notYet) {
        if (!redis.isAlive() || System.nanoTime() > deadline) {
          return; // startIn's wait for leased reports it, with the logs
        }
        Thread.sleep(10);
      }
    }
  }

  static int freePort() throws IOException {
    try (ServerSocket socket = new ServerSocket(0)) {
      return socket.getLocalPort();
    }
  }

  /** A client of this leased, closed with the stack. */
  LeaseClient client() {
    LeaseClient client = LeaseClient.forTarget(target);
    synchronized (clients) {
      clients.add(client);
    }
    return client;
  }

  /** SIGKILL: the server disappears without a word, as on a crash. */
  void killLeased() throws InterruptedException {
    leased.destroyForcibly();
    leased.waitFor();
  }

  @Override
  public void close() {
    synchronized (clients) {
      clients.forEach(LeaseClient::close);
    }
    for (Process process : List.of(leased, redis)) {
      process.destroyForcibly();
      try {
        process.waitFor();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
    for (File file : dir.toFile().listFiles()) {
      file.delete();
    }
    dir.toFile().delete();
  }
}
