package leased.client;

import java.io.File;
import java.io.IOException;
import java.net.ServerSocket;
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

  private Stack(String target, Process redis, Process leased, Path dir) {
    this.target = target;
    this.redis = redis;
    this.leased = leased;
    this.dir = dir;
  }

  static Stack start() throws Exception {
    Path dir = Files.createTempDirectory("leased-java-");
    int redisPort = freePort();
    int leasedPort = freePort();
    Process redis =
        spawn(
            dir.resolve("redis.log"),
            List.of(
                "redis-server", "--bind", "127.0.0.1", "--port", String.valueOf(redisPort),
                "--save", "", "--appendonly", "no", "--dir", dir.toString()));
    String leasedBin = System.getenv().getOrDefault("LEASED_BIN", "../../target/debug/leased");
    String target = "127.0.0.1:" + leasedPort;
    Process leased =
        spawn(
            dir.resolve("leased.log"),
            List.of(
                leasedBin, "serve", "--listen", target,
                "--redis-url", "redis://127.0.0.1:" + redisPort));
    Stack stack = new Stack(target, redis, leased, dir);
    try (LeaseClient probe = LeaseClient.forTarget(target)) {
      long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
      while (true) {
        try {
          probe.describe("java-ready");
          return stack;
        } catch (RuntimeException notYet) {
          if (!leased.isAlive() || System.nanoTime() > deadline) {
            stack.close();
            throw new IllegalStateException("leased did not answer: see " + dir, notYet);
          }
          Thread.sleep(50);
        }
      }
    }
  }

  private static Process spawn(Path log, List<String> command) throws IOException {
    return new ProcessBuilder(command)
        .redirectErrorStream(true)
        .redirectOutput(log.toFile())
        .start();
  }

  static int freePort() throws IOException {
    try (ServerSocket socket = new ServerSocket(0)) {
      return socket.getLocalPort();
    }
  }

  /** SIGKILL: the server disappears without a word, as on a crash. */
  void killLeased() throws InterruptedException {
    leased.destroyForcibly();
    leased.waitFor();
  }

  @Override
  public void close() {
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
