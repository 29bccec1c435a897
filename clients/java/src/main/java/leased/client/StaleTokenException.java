package leased.client;

/**
 * A fenced resource refused a fencing token because it has seen a larger one: a newer holder of
 * the lease wrote, so this holder lost its lease (perhaps without noticing, paused past its TTL).
 * Nothing was written. Do not retry with the same token: acquire the lease again for a new one.
 *
 * <p>Thrown by {@link Fencing#fence} and {@link Fencing#throwIfFencingError} (PostgreSQL's
 * SQLSTATE {@code LF001}), by {@link RedisFencing} (Redis's {@code STALETOKEN}) and by a {@link
 * FenceMarks} store. Unchecked, so that it passes through code written for either store; with
 * JDBC, roll the transaction back when it is thrown (the caller's usual {@code catch}).
 */
public final class StaleTokenException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final long token;
  private final long mark;
  private final String resource;

  /**
   * @param resource what refused the token: a resource key, a Redis mark key, a lease name, or
   *     (for the row-level form) "a row of TABLE"
   * @param token the refused token
   * @param mark the largest token the resource has seen
   * @param message the store's message (it names both tokens)
   */
  public StaleTokenException(
      String resource, long token, long mark, String message, Throwable cause) {
    super(message, cause);
    this.resource = resource;
    this.token = token;
    this.mark = mark;
  }

  /** The refused token. */
  public long token() {
    return token;
  }

  /** The largest token the resource has seen, larger than {@link #token()}. */
  public long mark() {
    return mark;
  }

  /** What refused it: the resource key, mark key or lease name the token was checked against. */
  public String resource() {
    return resource;
  }
}
