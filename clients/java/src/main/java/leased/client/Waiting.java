package leased.client;

import java.time.Duration;

/**
 * A {@code waiting} message of Acquire: the caller is in line behind {@code holder}.
 *
 * @param position 1 = next in line
 * @param remaining null if the holder's lease has no expiry
 */
public record Waiting(
    String holder, long fencingToken, Duration remaining, long position, int held, int limit) {}
