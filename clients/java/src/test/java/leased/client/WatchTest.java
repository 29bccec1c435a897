package leased.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import lease.v1.Lease.CheckTokenResponse;
import lease.v1.Lease.WatchEvent;
import lease.v1.Lease.WatchEvent.Cause;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** Watch, CheckToken and the leader-election example against a real leased on Redis. */
class WatchTest {
  private static Stack stack;
  private static LeaseClient client;

  @BeforeAll
  static void start() throws Exception {
    stack = Stack.start();
    client = LeaseClient.forTarget(stack.target);
  }

  @AfterAll
  static void stop() {
    if (client != null) {
      client.close();
    }
    if (stack != null) {
      stack.close();
    }
  }

  /** A snapshot, then one event per change of holder, in order; close() ends it normally. */
  @Test
  void aWatchSeesTheSnapshotThenEachChangeOfHolder() throws Exception {
    BlockingQueue<WatchEvent> events = new LinkedBlockingQueue<>();
    Watch watch = client.watch("java-watched", events::add);
    WatchEvent snapshot = next(events);
    assertEquals(Cause.CAUSE_SNAPSHOT, snapshot.getCause());
    assertFalse(snapshot.getHeld());

    LeaseGuard lease =
        LeaseClientTest.mustHold(
            client, "java-watched", AcquireOptions.ttl(Duration.ofSeconds(10)).holder("watched"));
    WatchEvent granted = next(events);
    assertEquals(Cause.CAUSE_GRANTED, granted.getCause());
    assertEquals("watched", granted.getHolder());
    assertEquals(lease.fencingToken(), granted.getFencingToken());

    assertTrue(lease.release());
    WatchEvent released = next(events);
    assertEquals(Cause.CAUSE_RELEASED, released.getCause());
    assertEquals(lease.fencingToken(), released.getFencingToken());
    assertFalse(released.getHeld());

    watch.close();
    watch.ended().get(10, TimeUnit.SECONDS); // normally, not with the cancellation
  }

  /** A bad name ends the watch with INVALID_ARGUMENT, on ended(). */
  @Test
  void aBadNameEndsTheWatchWithInvalidArgument() {
    Watch watch = client.watch("", event -> {});
    ExecutionException failed =
        assertThrows(
            ExecutionException.class, () -> watch.ended().get(10, TimeUnit.SECONDS));
    StatusRuntimeException status = assertInstanceOf(StatusRuntimeException.class, failed.getCause());
    assertEquals(Status.Code.INVALID_ARGUMENT, status.getStatus().getCode());
  }

  /** CheckToken: current while held with that token, not once released. */
  @Test
  void checkTokenIsCurrentOnlyWhileTheGrantHolds() throws Exception {
    LeaseGuard lease =
        LeaseClientTest.mustHold(client, "java-checked", AcquireOptions.ttl(Duration.ofSeconds(10)));
    CheckTokenResponse held = client.checkToken("java-checked", lease.fencingToken());
    assertTrue(held.getCurrent());
    assertEquals(lease.fencingToken(), held.getCurrentToken());
    assertFalse(client.checkToken("java-checked", lease.fencingToken() + 1).getCurrent());
    assertTrue(lease.release());
    CheckTokenResponse free = client.checkToken("java-checked", lease.fencingToken());
    assertFalse(free.getCurrent());
    assertFalse(free.getHeld());
    assertEquals(0, free.getCurrentToken());
  }

  /**
   * The leader-election example, three candidates: one leads; killed with SIGKILL, another leads
   * once its lease expires, with a larger token; stopped with SIGTERM, that one releases (the
   * watchers see RELEASED, not EXPIRED) and the last candidate leads, with a larger token still.
   */
  @Test
  void theLeaderElectionExampleHandsOverOnKillAndOnStop() throws Exception {
    List<Candidate> candidates = new ArrayList<>();
    List<Candidate> everyone = new ArrayList<>();
    try {
      for (int i = 1; i <= 3; i++) {
        candidates.add(new Candidate("candidate-" + i));
      }
      everyone.addAll(candidates);
      Candidate first = leader(candidates);
      long firstToken = first.leadingToken;
      // Every candidate follows the election before the leader dies: a watch that starts later
      // (a JVM slow to start) sees the next leader in its snapshot, and no EXPIRED.
      for (Candidate candidate : candidates) {
        candidate.await(line -> line.contains("leader \"" + first.id + "\""));
      }

      first.process.destroyForcibly(); // SIGKILL: no release, the lease expires
      candidates.remove(first);
      Candidate second = leader(candidates);
      assertTrue(Long.compareUnsigned(second.leadingToken, firstToken) > 0);
      Candidate third = candidates.get(candidates.indexOf(second) == 0 ? 1 : 0);
      third.await(line -> line.startsWith("[EXPIRED]"));

      // SIGTERM: steps down and releases. With kill(1): Process.destroy() would close the pipe
      // its output comes through, before the lines wanted here.
      assertEquals(0, new ProcessBuilder("kill", "-TERM", "" + second.process.pid()).start().waitFor());
      second.await(line -> line.equals("stepped down: stopping"));
      // 128 + SIGTERM: how the JVM exits on that signal, once its shutdown hooks have run.
      assertEquals(143, second.process.waitFor(), "the stopped leader's exit status");
      third.await(line -> line.startsWith("[RELEASED]"));
      candidates.remove(second);
      assertEquals(third, leader(candidates));
      assertTrue(Long.compareUnsigned(third.leadingToken, second.leadingToken) > 0);
    } catch (AssertionError failed) {
      throw new AssertionError(failed.getMessage() + "\nevery candidate's output: " + everyone, failed);
    } finally {
      for (Candidate candidate : candidates) {
        candidate.process.destroyForcibly();
      }
    }
  }

  /** The candidate that leads now, among those given (each has printed "leading as"). */
  private static Candidate leader(List<Candidate> candidates) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    while (System.nanoTime() < deadline) {
      for (Candidate candidate : candidates) {
        if (candidate.leadingToken != 0 && !candidate.steppedDown) {
          return candidate;
        }
      }
      Thread.sleep(20);
    }
    throw new AssertionError("no candidate leads: " + candidates);
  }

  private static final Pattern LEADING = Pattern.compile("leading as (\\S+) with fencing token (\\d+)");

  /** One LeaderElection process, its output read line by line as it comes. */
  private static final class Candidate {
    final String id;
    final Process process;
    final List<String> lines = new ArrayList<>();
    volatile long leadingToken;
    volatile boolean steppedDown;

    Candidate(String id) throws Exception {
      this.id = id;
      process =
          new ProcessBuilder(
                  LeaseClientTest.java(), "-cp", Installed.examplesClasspath(),
                  "leased.example.LeaderElection", "--target", stack.target,
                  "--election", "java-leader", "--id", id, "--ttl-ms", "1500")
              .redirectErrorStream(true)
              .start();
      Thread reader = new Thread(this::read, id + "-output");
      reader.setDaemon(true);
      reader.start();
    }

    private void read() {
      try (BufferedReader out =
          new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
        for (String line; (line = out.readLine()) != null; ) {
          Matcher leading = LEADING.matcher(line);
          if (leading.matches()) {
            assertEquals(id, leading.group(1));
            leadingToken = Long.parseUnsignedLong(leading.group(2));
            steppedDown = false;
          } else if (line.startsWith("stepped down")) {
            steppedDown = true;
          }
          synchronized (lines) {
            lines.add(line);
            lines.notifyAll();
          }
        }
      } catch (Exception closed) {
        // The process was killed.
      }
    }

    /** Waits (up to 30 s) until a line printed so far matches. */
    void await(Predicate<String> wanted) throws InterruptedException {
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
      synchronized (lines) {
        while (lines.stream().noneMatch(wanted)) {
          long left = TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
          if (left <= 0) {
            throw new AssertionError(
                id + " never printed the line wanted (alive: " + process.isAlive() + "): " + lines);
          }
          lines.wait(left);
        }
      }
    }

    @Override
    public String toString() {
      synchronized (lines) {
        return id + " " + lines;
      }
    }
  }

  private static WatchEvent next(BlockingQueue<WatchEvent> events) throws InterruptedException {
    WatchEvent event = events.poll(10, TimeUnit.SECONDS);
    assertNotEquals(null, event, "no event within 10 s");
    return event;
  }
}
