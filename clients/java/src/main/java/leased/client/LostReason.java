package leased.client;

/** Why a {@link LeaseGuard} stopped trusting its lease. */
public record LostReason(Kind kind, String message) {

  public enum Kind {
    /** A renewal answered {@code lost}: expired, released by another path, revoked, taken over. */
    LOST,
    /**
     * No renewal was answered in time: the lease may expire on the server before we hear back,
     * so the holder must assume it is gone before anyone else can be granted it.
     */
    UNREACHABLE,
  }

  @Override
  public String toString() {
    return kind == Kind.LOST
        ? "lease lost: " + message
        : "could not renew before the lease could expire: " + message;
  }
}
