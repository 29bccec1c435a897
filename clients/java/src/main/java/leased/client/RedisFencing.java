package leased.client;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

/**
 * Fenced writes to Redis as the resource, over the {@code leased_fencing} Functions library
 * ({@code fencing/redis/leased_fencing.lua}, loaded once per Redis 7: {@code redis-cli -x
 * FUNCTION LOAD REPLACE < leased_fencing.lua}).
 *
 * <p>Each write names a mark key first: a string holding the largest token accepted for the
 * resource it guards (one mark per resource, e.g. {@code fence:{orders}} for the keys {@code
 * {orders}:*}; in a Cluster, give the mark and the keys one hash tag). A token below the mark is
 * refused ({@link StaleTokenException}) and nothing is written; otherwise the token becomes the
 * mark (an equal one passes) and the write is done, in one atomic call. Tokens travel as decimal
 * strings and are compared exactly, for every token up to 2^63 - 1. The marks are as durable as
 * that Redis's data.
 *
 * <p>Errors: {@link StaleTokenException} ({@code STALETOKEN}), {@link IllegalArgumentException}
 * (a token outside 1 to 2^63 - 1, refused before sending, or {@code BADTOKEN}); whatever the
 * Redis client throws otherwise.
 */
public final class RedisFencing {
  private final RedisFunctionCall redis;

  public RedisFencing(RedisFunctionCall redis) {
    this.redis = redis;
  }

  /** Checks and records {@code token} against {@code markKey} only: {@code leased_fence}. */
  public long fence(String markKey, long token) {
    return Long.parseLong(text(call("leased_fence", List.of(markKey), List.of(decimal(token)))));
  }

  /**
   * {@code SET key value [options]}, fenced by {@code markKey}: {@code leased_set}. The options are
   * SET's ({@code "PX", "5000"}, {@code "GET"}, ...). Returns SET's reply as the client gives it
   * ("OK", the old value with GET, or null).
   */
  public Object set(String markKey, String key, long token, String value, String... setOptions) {
    List<String> args = new ArrayList<>(List.of(decimal(token), value));
    args.addAll(Arrays.asList(setOptions));
    return call("leased_set", List.of(markKey, key), args);
  }

  /** {@code HSET key field value ...}, fenced by {@code markKey}: the number of fields added. */
  public long hset(String markKey, String key, long token, Map<String, String> fields) {
    if (fields.isEmpty()) {
      throw new IllegalArgumentException("fields must hold at least one field");
    }
    List<String> args = new ArrayList<>(List.of(decimal(token)));
    fields.forEach(
        (field, value) -> {
          args.add(field);
          args.add(value);
        });
    return ((Number) call("leased_hset", List.of(markKey, key), args)).longValue();
  }

  /** {@code DEL key...}, fenced by {@code markKey}: the number of keys removed. */
  public long del(String markKey, long token, String... keys) {
    if (keys.length == 0) {
      throw new IllegalArgumentException("keys must name at least one key");
    }
    List<String> allKeys = new ArrayList<>(List.of(markKey));
    allKeys.addAll(Arrays.asList(keys));
    return ((Number) call("leased_del", allKeys, List.of(decimal(token)))).longValue();
  }

  private static String decimal(long token) {
    return Long.toString(Fencing.checkToken(token));
  }

  private Object call(String function, List<String> keys, List<String> args) {
    try {
      return redis.fcall(function, keys, args);
    } catch (RuntimeException e) {
      throw fencingError(e);
    }
  }

  /**
   * A {@code STALETOKEN} or {@code BADTOKEN} reply (in the exception's message or a cause's) as
   * {@link StaleTokenException} or {@link IllegalArgumentException}; any other error as it is.
   */
  static RuntimeException fencingError(RuntimeException error) {
    for (Throwable e = error; e != null; e = e.getCause()) {
      String message = String.valueOf(e.getMessage());
      if (message.contains("STALETOKEN ")) {
        return Fencing.staleToken(message, error);
      }
      if (message.contains("BADTOKEN ")) {
        return new IllegalArgumentException(message, error);
      }
    }
    return error;
  }

  /** A bulk string reply, as a String whichever way the client gives it. */
  private static String text(Object reply) {
    return reply instanceof byte[] bytes
        ? new String(bytes, StandardCharsets.UTF_8)
        : String.valueOf(reply);
  }
}
