package leased.client;

import java.io.IOException;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

/**
 * The fencing tests' resources, one of each per test JVM, started on first use and stopped when
 * the JVM exits: a leased on its redis-server (a {@link Stack}) with a client, a PostgreSQL (scripts/postgres-scratch.sh) with fencing/postgres/leased_fencing.sql
 * applied, and a redis-server (the resource, apart from the one leased uses) with the
 * leased_fencing library loaded. Tests keep apart by their own tables, resources and keys.
 */
final class Scratch {
  private Scratch() {}

  /** The repository's root: test.sh runs the tests in clients/java. */
  static final Path REPO = Path.of("../..").toAbsolutePath().normalize();

  private static String postgresUrl;
  private static Integer redisPort;
  private static Stack leased;
  private static LeaseClient client;

  /** The scratch leased (and its own redis-server). */
  static synchronized Stack leased() throws Exception {
    if (leased == null) {
      Stack started = Stack.start();
      Runtime.getRuntime().addShutdownHook(new Thread(started::close));
      leased = started;
    }
    return leased;
  }

  /** A client of the scratch leased, shared by the fencing tests. */
  static synchronized LeaseClient client() throws Exception {
    if (client == null) {
      client = leased().client();
    }
    return client;
  }

  /** The JDBC URL of the scratch PostgreSQL (user postgres, trust authentication). */
  static synchronized String postgres() throws Exception {
    if (postgresUrl == null) {
      postgresUrl = startPostgres();
    }
    return postgresUrl;
  }

  static Connection connect() throws Exception {
    return DriverManager.getConnection(postgres());
  }

  /** The port of the scratch redis-server on 127.0.0.1. */
  static synchronized int redis() throws Exception {
    if (redisPort == null) {
      redisPort = startRedis();
    }
    return redisPort;
  }

  private static String startPostgres() throws Exception {
    for (int attempt = 1; ; attempt++) {
      // Open to the postgres user, whom the script hands DIR to when run as root.
      Path scratch =
          Files.createTempDirectory(
              "leased-java-pg-",
              PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwxr-xr-x")));
      Path dir = scratch.resolve("postgres"); // handed to the postgres user by the script
      int port = Stack.freePort();
      Process postgres =
          new ProcessBuilder(
                  REPO.resolve("scripts/postgres-scratch.sh").toString(),
                  dir.toString(),
                  String.valueOf(port))
              .redirectErrorStream(true)
              .redirectOutput(scratch.resolve("postgres.log").toFile())
              .start();
      stopAtExit(postgres, "-INT", scratch);
      String url = "jdbc:postgresql://127.0.0.1:" + port + "/postgres?user=postgres";
      long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
      while (true) {
        try (Connection connection = DriverManager.getConnection(url);
            Statement apply = connection.createStatement()) {
          apply.execute(
              Files.readString(REPO.resolve("fencing/postgres/leased_fencing.sql")));
          return url;
        } catch (SQLException notYet) {
          if (!postgres.isAlive() && attempt < 3) {
            break; // the port was taken meanwhile: another one
          }
          if (!postgres.isAlive() || System.nanoTime() > deadline) {
            throw new IllegalStateException(
                "the scratch PostgreSQL did not start: "
                    + Files.readString(scratch.resolve("postgres.log")),
                notYet);
          }
          Thread.sleep(100);
        }
      }
    }
  }

  private static int startRedis() throws Exception {
    for (int attempt = 1; ; attempt++) {
      Path dir = Files.createTempDirectory("leased-java-redis-");
      int port = Stack.freePort();
      Process redis = Stack.spawnRedis(dir, port);
      stopAtExit(redis, "-KILL", dir);
      long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
      while (redis.isAlive() && System.nanoTime() < deadline) {
        try (Socket probe = new Socket("127.0.0.1", port);
            Resp resp = new Resp(port)) {
          resp.call(
              "FUNCTION", "LOAD", "REPLACE",
              Files.readString(REPO.resolve("fencing/redis/leased_fencing.lua")));
          return port;
        } catch (IOException notYet) {
          Thread.sleep(10);
        }
      }
      if (attempt == 3) {
        throw new IllegalStateException(
            "the scratch redis-server did not start: " + Files.readString(dir.resolve("redis.log")));
      }
    }
  }

  /** Signals the server when the JVM exits, waits for it, and removes its directory. */
  private static void stopAtExit(Process server, String signal, Path dir) {
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  try {
                    if (server.isAlive()) {
                      new ProcessBuilder("kill", signal, String.valueOf(server.pid())).start().waitFor();
                    }
                    if (!server.waitFor(10, TimeUnit.SECONDS)) {
                      server.destroyForcibly().waitFor();
                    }
                    new ProcessBuilder("rm", "-rf", dir.toString()).start().waitFor();
                  } catch (IOException | InterruptedException e) {
                    server.destroyForcibly();
                  }
                }));
  }

  /** kill -SIGNAL pid: SIGSTOP and SIGCONT for the paused holder, SIGINT for PostgreSQL. */
  static void signal(Process process, String signal) throws IOException, InterruptedException {
    int status =
        new ProcessBuilder("kill", signal, String.valueOf(process.pid())).inheritIO().start().waitFor();
    if (status != 0) {
      throw new IllegalStateException("kill " + signal + " " + process.pid() + " failed");
    }
  }
}
