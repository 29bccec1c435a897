package leased.client;

import java.util.List;

/**
 * One {@code FCALL function numkeys keys... args...} on the Redis client of your choice, for
 * {@link RedisFencing} and {@link FenceMarks#redis}: the library depends on no Redis client.
 * Jedis's {@code jedis::fcall} has this shape; with Lettuce, {@code (function, keys, args) ->
 * commands.fcall(function, ScriptOutputType.VALUE, keys.toArray(String[]::new),
 * args.toArray(String[]::new))}.
 *
 * <p>An error reply must come out as an exception whose message (or a cause's) is the reply's
 * text, as Jedis's and Lettuce's exceptions are: {@link RedisFencing} reads {@code STALETOKEN} and
 * {@code BADTOKEN} from it.
 */
@FunctionalInterface
public interface RedisFunctionCall {
  /** The function's reply: a String or byte[] (bulk string), a Long (integer), a List (array). */
  Object fcall(String function, List<String> keys, List<String> args);
}
