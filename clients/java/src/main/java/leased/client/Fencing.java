package leased.client;

import io.grpc.Metadata;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Fencing: a lease's token checked where the data lives. A token protects nothing until the
 * resource refuses a smaller one than the largest it has seen; this class holds the token rules,
 * the gRPC metadata convention and the PostgreSQL helper. Redis as the resource: {@link
 * RedisFencing}. Your own gRPC services: {@link FencingInterceptor}, and on the calling side
 * {@link LeaseGuard#fencingMetadata()} or {@link LeaseGuard#fencingInterceptor()}.
 *
 * <p>Tokens are 1 to {@link #MAX_TOKEN}, the largest signed 64-bit integer (PostgreSQL's {@code
 * bigint}, Redis's integers): a {@code long} above 0. The wire's uint64 tokens from 2^63 up are
 * negative {@code long}s, and refused here before anything is sent. leased's tokens are floored
 * at the grant's Unix time in microseconds (about 1.8e15 in 2026), far below either bound.
 */
public final class Fencing {
  private Fencing() {}

  /** The largest fencing token an adapter accepts: 2^63 - 1. */
  public static final long MAX_TOKEN = Long.MAX_VALUE;

  /** The metadata entry (HTTP header) carrying the lease's name, as granted. */
  public static final Metadata.Key<String> LEASE_NAME =
      Metadata.Key.of("leased-lease-name", Metadata.ASCII_STRING_MARSHALLER);

  /** The metadata entry carrying the grant's fencing token in decimal, 1 to {@link #MAX_TOKEN}. */
  public static final Metadata.Key<String> FENCING_TOKEN =
      Metadata.Key.of("leased-fencing-token", Metadata.ASCII_STRING_MARSHALLER);

  /** The SQLSTATE of {@code leased.fence} and the row guard refusing a stale token. */
  public static final String SQLSTATE_STALE_TOKEN = "LF001";

  /** invalid_parameter_value: a token of 0 or below, an empty or over-long resource key. */
  public static final String SQLSTATE_INVALID_PARAMETER = "22023";

  private static final Pattern CANONICAL_TOKEN = Pattern.compile("[1-9][0-9]{0,18}");

  /** The start of every adapter's stale-token message (PostgreSQL's, Redis's). */
  private static final Pattern STALE_MESSAGE =
      Pattern.compile("stale fencing token (\\d+) for (.*?): the highest seen is (\\d+)");

  /**
   * Returns {@code token} if an adapter can store it, 1 to {@link #MAX_TOKEN}; else throws {@link
   * IllegalArgumentException} naming it (read as the wire's uint64: 0, or 2^63 and above).
   */
  public static long checkToken(long token) {
    if (token <= 0) {
      throw new IllegalArgumentException(
          "token must be a fencing token from 1 to "
              + MAX_TOKEN
              + ", not "
              + Long.toUnsignedString(token));
    }
    return token;
  }

  /**
   * Parses a token as the metadata convention carries it: canonical decimal (digits only, no
   * sign, no leading zero) from 1 to {@link #MAX_TOKEN}; else {@link IllegalArgumentException}
   * "must be a fencing token from 1 to 9223372036854775807, not "TEXT"" (TEXT escaped, cut to 40
   * characters), for the caller to prefix with the field's name.
   */
  public static long parseToken(String text) {
    if (text != null && CANONICAL_TOKEN.matcher(text).matches()) {
      try {
        return Long.parseLong(text);
      } catch (NumberFormatException aboveMax) {
        // 19 digits above 9223372036854775807: refused below.
      }
    }
    throw new IllegalArgumentException(
        "must be a fencing token from 1 to " + MAX_TOKEN + ", not " + quoted(text));
  }

  /**
   * Checks {@code token} against the resource's mark in the caller's transaction and records it:
   * {@code SELECT leased.fence(resource, token)} ({@code fencing/postgres/leased_fencing.sql},
   * applied once per database). Then write, and commit: the check and the write commit or fail
   * together, and the mark's row lock, held until the transaction ends, makes the fenced
   * transactions of one resource commit in token order.
   *
   * @return the mark, now {@code token}
   * @throws StaleTokenException SQLSTATE {@code LF001}: a larger token was recorded for the
   *     resource (roll back; the transaction is aborted)
   * @throws IllegalArgumentException a token outside 1 to {@link #MAX_TOKEN} (before anything is
   *     sent), or SQLSTATE {@code 22023}: an empty resource key or one over 1024 bytes
   * @throws IllegalStateException the connection is in autocommit mode: the check would commit
   *     alone, and the write after it would not be fenced
   * @throws SQLException any other database error
   */
  public static long fence(Connection connection, String resource, long token)
      throws SQLException {
    checkToken(token);
    if (connection.getAutoCommit()) {
      throw new IllegalStateException(
          "Fencing.fence needs a transaction (setAutoCommit(false)): in autocommit mode the check"
              + " commits alone and the write after it is not fenced");
    }
    try (PreparedStatement fence = connection.prepareStatement("SELECT leased.fence(?, ?)")) {
      fence.setString(1, resource);
      fence.setLong(2, token);
      try (ResultSet mark = fence.executeQuery()) {
        mark.next();
        return mark.getLong(1);
      }
    } catch (SQLException e) {
      throwIfFencingError(e);
      throw e;
    }
  }

  /**
   * Throws {@link StaleTokenException} for SQLSTATE {@code LF001} and {@link
   * IllegalArgumentException} for {@code 22023} (the fencing functions' bad input); returns for
   * any other error, which the caller rethrows. For the row-level form, whose trigger refuses the
   * caller's own UPDATE:
   *
   * <pre>{@code
   * try {
   *   update.executeUpdate(); // SET ..., fencing_token = ?
   * } catch (SQLException e) {
   *   Fencing.throwIfFencingError(e);
   *   throw e;
   * }
   * }</pre>
   */
  public static void throwIfFencingError(SQLException error) {
    for (SQLException e = error; e != null; e = e.getNextException()) {
      String message = String.valueOf(e.getMessage());
      if (SQLSTATE_STALE_TOKEN.equals(e.getSQLState())) {
        throw staleToken(message, e);
      }
      if (SQLSTATE_INVALID_PARAMETER.equals(e.getSQLState())) {
        throw new IllegalArgumentException(message, e);
      }
    }
  }

  /**
   * The stale-token message of any adapter ("stale fencing token T for R: the highest seen is
   * M") as an exception; an unreadable one still refuses (token and mark then 0).
   */
  static StaleTokenException staleToken(String message, Throwable cause) {
    Matcher stale = STALE_MESSAGE.matcher(message);
    if (stale.find()) {
      try {
        return new StaleTokenException(
            stale.group(2),
            Long.parseLong(stale.group(1)),
            Long.parseLong(stale.group(3)),
            message,
            cause);
      } catch (NumberFormatException unreadable) {
        // Not a token we sent: report the message as it is.
      }
    }
    return new StaleTokenException("", 0, 0, message, cause);
  }

  /** {@code text} in double quotes with escapes, cut to its first 40 characters ("…" then). */
  static String quoted(String text) {
    if (text == null) {
      return "nothing";
    }
    final int shown = 40;
    StringBuilder quoted = new StringBuilder("\"");
    int[] characters = text.codePoints().toArray();
    for (int i = 0; i < Math.min(shown, characters.length); i++) {
      int c = characters[i];
      switch (c) {
        case '"' -> quoted.append("\\\"");
        case '\\' -> quoted.append("\\\\");
        case '\n' -> quoted.append("\\n");
        case '\r' -> quoted.append("\\r");
        case '\t' -> quoted.append("\\t");
        default -> {
          if (Character.isISOControl(c) || !Character.isDefined(c)) {
            quoted.append("\\u{").append(Integer.toHexString(c)).append('}');
          } else {
            quoted.appendCodePoint(c);
          }
        }
      }
    }
    quoted.append('"');
    if (characters.length > shown) {
      quoted.append('…');
    }
    return quoted.toString();
  }
}
