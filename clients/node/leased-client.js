// A small Node.js client for leased (`lease.v1.LeaseService` and `lease.v1.LeaseAdminService`).
//
//   const client = new LeaseClient('127.0.0.1:50051');
//   const result = await client.acquire('nightly-report', { ttlMs: 15_000, waitMs: 60_000 });
//   if (result instanceof NotGranted) {
//     console.log('busy, held by', result.holder);
//   } else {
//     try {
//       await work(result.fencingToken, result.signal); // result.signal aborts if the lease is lost
//     } finally {
//       await result.release();
//     }
//   }
//
// Reentrant and read-write locks over the same leases:
//
//   const lock = new ReentrantLock(client, 'ledger', { ttlMs: 15_000, waitMs: 60_000 });
//   const lease = await lock.acquire(); // again while held: the same lease at once, no RPC
//   try { ... } finally { await lock.release(); } // only the outermost release ends it
//
//   const rw = new ReadWriteLock(client, 'catalog', { ttlMs: 15_000, waitMs: 60_000 });
//   const reading = await rw.read(); // or rw.write(): a Lease (or NotGranted), as acquire gives
//
// Fencing: the token checked where the data lives (PostgreSQL, Redis, your own gRPC services),
// from ./fencing.js, re-exported here; a call to a fenced service carries the grant's metadata:
//
//   await fencePostgres(db, 'orders', lease.fencingToken); // in the writer's transaction
//   stub.put(request, lease.fencingMetadata(), callback);
//
// Leader election's followers watch who holds a lease:
//
//   for await (const event of client.watch('leader/scheduler', { signal })) {
//     console.log(event.cause, event.holders[0]?.holder ?? 'no leader');
//   }
//
// The stubs are built when this module is loaded, by @grpc/proto-loader from the package's own
// copy of the proto (./proto, copied from the repository's proto/ by `npm pack`'s prepack
// script): the repository's proto stays the one source of truth and no generated code is kept.

import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import { fileURLToPath } from 'node:url';
import { debuglog } from 'node:util';

import grpc from '@grpc/grpc-js';
import protoLoader from '@grpc/proto-loader';

import { fencingMetadata } from './fencing.js';

export * from './fencing.js';

export const { status } = grpc;

/** `NODE_DEBUG=leased node app.js` prints what the client does behind the caller's back. */
const debug = debuglog('leased');

/** How many times an Acquire that ended without an answer is sent again, with the same lease id. */
export const ACQUIRE_RETRIES = 3;

/** The pause before the first retry of an Acquire; it doubles before each next one. */
export const ACQUIRE_RETRY_DELAY_MS = 50;

/** Bounds the Release that follows a give-up: it is best effort, and the caller has left. */
export const GIVE_UP_RELEASE_TIMEOUT_MS = 2000;

/** The directory holding `lease/v1/lease.proto`: the package's own copy. */
export const PROTO_ROOT = fileURLToPath(new URL('./proto', import.meta.url));

// Each option below fixes something that otherwise fails quietly:
const LOADER_OPTIONS = {
  // Field names are camelCase in JS (`ttlMs`, `leaseId`, `fencingToken`). A key spelled the
  // other way (`ttl_ms` here, or `ttlMs` with keepCase: true) is silently dropped, and the
  // server answers INVALID_ARGUMENT "ttl_ms ... got 0".
  keepCase: false,
  // int64/uint64 fields arrive as decimal strings instead of `Long` objects. This module turns
  // fencing tokens into BigInt (they need not fit in a double) and milliseconds into Number.
  longs: String,
  enums: String,
  // Unset scalars read as 0 / '' / false, as in every other proto3 runtime.
  defaults: true,
  // Adds a virtual field naming the member of each oneof that is set:
  // `response.result` is 'granted', 'waiting' or 'notGranted'. Without it, you must probe.
  oneofs: true,
  includeDirs: [PROTO_ROOT],
};

const proto = grpc.loadPackageDefinition(
  protoLoader.loadSync('lease/v1/lease.proto', LOADER_OPTIONS),
).lease.v1;

/**
 * Codes with which the server refuses an Acquire before granting anything: after them, when no
 * earlier attempt of the same acquisition ended in doubt, there is nothing to release.
 */
const REFUSED_CODES = new Set([
  status.INVALID_ARGUMENT,
  status.FAILED_PRECONDITION,
  status.RESOURCE_EXHAUSTED,
  status.OUT_OF_RANGE,
  status.UNAUTHENTICATED,
  status.PERMISSION_DENIED,
]);

/**
 * A new lease id for one acquisition: 128 bits from the OS's CSPRNG as 32 hex digits. It is the
 * holder's secret (whoever knows it can renew or release the lease), so it must not be guessable.
 */
export function newLeaseId() {
  return randomBytes(16).toString('hex');
}

/** `hostname/pid`: enough for an operator to find the process that holds a lease. */
export function defaultHolder() {
  return `${hostname()}/${process.pid}`;
}

/**
 * Someone else holds the lease: what `acquire` returns when the lease stayed busy for the whole
 * wait. Contention is not an error.
 *
 * `holder`, `fencingToken` and `remainingMs` describe the holder of an exclusive lease, or the
 * permit that frees soonest of a counting lease; `held` and `limit` say how full the name is. An
 * empty holder with token 0n and remainingMs 0 means nobody holds it right now, but it is being
 * handed to a caller waiting ahead.
 */
export class NotGranted {
  /**
   * @param {{name: string, holder: string, fencingToken: bigint, remainingMs: number,
   *          held: number, limit: number}} fields
   */
  constructor({ name, holder, fencingToken, remainingMs, held, limit }) {
    /** @type {string} */ this.name = name;
    /** @type {string} */ this.holder = holder;
    /** @type {bigint} */ this.fencingToken = fencingToken;
    /** Until that holder's lease frees unless renewed, lock-delay included; -1: no expiry.
     *  @type {number} */
    this.remainingMs = remainingMs;
    /** @type {number} */ this.held = held;
    /** @type {number} */ this.limit = limit;
    Object.freeze(this);
  }
}

/**
 * Why a lease ended for its holder: the `lost` event's argument, `lease.lostReason`, and the
 * reason of `lease.signal`.
 *
 * `kind` is 'lost' when the server answered a renewal with `lost` (`reason` is the server's:
 * "expired or released", "held by another holder", "revoked: <operator's reason>"), or
 * 'unreachable' when no renewal was answered before the lease could expire on the server.
 */
export class LeaseLostError extends Error {
  /**
   * @param {string} name
   * @param {'lost' | 'unreachable'} kind
   * @param {string} reason
   */
  constructor(name, kind, reason) {
    super(`lease ${JSON.stringify(name)} lost (${kind}): ${reason}`);
    this.name = 'LeaseLostError';
    /** @type {string} */ this.lease = name;
    /** @type {'lost' | 'unreachable'} */ this.kind = kind;
    /** @type {string} */ this.reason = reason;
  }
}

/**
 * @typedef {object} Waiting  What `onWaiting` is told while the server waits for the lease.
 * @property {string} name
 * @property {string} holder          the current holder (may be empty)
 * @property {bigint} fencingToken    the current holder's token (0n if unknown)
 * @property {number} remainingMs     until the holder's lease frees unless renewed; -1: no expiry
 * @property {number} position        1 = next in line, across every replica
 * @property {number} held            permits taken now
 * @property {number} limit           the limit in force (0 when no permit is taken)
 */

/**
 * @typedef {object} HolderInfo  One holder (one permit of a counting lease); never a lease id.
 * @property {string} holder
 * @property {bigint} fencingToken
 * @property {number} remainingMs     lock-delay included; -1: no expiry
 * @property {Date | null} expiresAt  on the store's clock
 * @property {boolean} shared         a shared (read) grant; false for exclusive grants and permits
 */

/**
 * @typedef {object} LeaseDescription  What `describe` tells anyone about a lease.
 * @property {string} name
 * @property {boolean} held
 * @property {HolderInfo[]} holders   every permit taken, by increasing token (empty when free)
 * @property {number} limit           1 exclusive, N counting, 0 when free
 * @property {number} waiters         callers waiting, on every replica
 */

/**
 * @typedef {object} WatchEvent  What happened to a watched lease (`LeaseClient.watch`).
 * @property {string} name
 * @property {'snapshot' | 'granted' | 'released' | 'expired' | 'revoked' | 'unspecified'} cause
 *   'snapshot': the whole current state (the first event, and again whenever the server may have
 *   missed events): replace what you knew with it
 * @property {boolean} held           someone holds the lease after the event
 * @property {string} holder          of the grant the event is about ('' in a free snapshot)
 * @property {bigint} fencingToken    of that grant (0n in a free snapshot)
 * @property {Date | null} expiresAt  of that grant, on the store's clock, as last known
 * @property {number} limit           1 exclusive, N counting, 0 when free, after the event
 * @property {HolderInfo[]} holders   every holder after the event, by increasing token: in
 *                                    leader election `holders[0]` is the leader
 * @property {string} reason          for 'revoked': the operator's reason
 */

/**
 * @typedef {object} AcquireOptions
 * @property {number} ttlMs            how long the lease lasts without a renewal (10 ms and up)
 * @property {number} [waitMs]         how long to wait for a busy lease; 0 (default) tries once
 * @property {string} [holder]         shown to others by Describe; default `hostname/pid`
 * @property {number} [limit]          N > 1: one of N permits of a counting lease
 * @property {number} [lockDelayMs]    after an expiry, nobody gets the name for this long
 * @property {boolean} [shared]        a shared (read) grant, beside other shared grants; only with
 *                                     `limit` 0 or 1 (see ReadWriteLock)
 * @property {(waiting: Waiting) => void} [onWaiting]  called while the server waits for the lease
 * @property {AbortSignal} [signal]    gives the wait up (e.g. `AbortSignal.timeout(ms)`)
 */

/**
 * A connection to a leased server. Share one per process.
 *
 * Emits `abandonedGrant` ({name, fencingToken, released, error}) when the Release that follows a
 * give-up ended a grant (`released` true: the server granted just as the caller gave up;
 * `fencingToken` is null unless the grant reached the client), or failed (`error`: a grant, if
 * there was one, stays held until its TTL).
 */
export class LeaseClient extends EventEmitter {
  #service;
  #admin;
  #token;
  #rpcTimeoutMs;
  #releaseOnGiveUp;
  /** Given-up acquisitions still cancelling or releasing: `close` waits for them. */
  #settling = new Set();

  /**
   * @param {string} target  `host:port`
   * @param {object} [options]
   * @param {grpc.ChannelCredentials} [options.credentials]  default: plaintext
   * @param {string} [options.token]  bearer token, for servers started with --auth-tokens
   * @param {number} [options.rpcTimeoutMs]  bounds calls that should answer at once (Release,
   *   Describe, Revoke, a confirming renewal) and Acquire beyond its wait; default 5 s
   * @param {grpc.ChannelOptions} [options.channelOptions]
   * @param {grpc.Interceptor[]} [options.interceptors]  for LeaseService calls (tracing, tests)
   * @param {boolean} [options.releaseOnGiveUp]  default true; only tests turn it off, to show
   *   what the Release after a give-up is for
   */
  constructor(target, options = {}) {
    super();
    const credentials = options.credentials ?? grpc.credentials.createInsecure();
    this.#service = new proto.LeaseService(target, credentials, {
      ...options.channelOptions,
      interceptors: options.interceptors ?? [],
    });
    // The admin stub shares the connection.
    this.#admin = new proto.LeaseAdminService(target, credentials, {
      channelOverride: this.#service.getChannel(),
    });
    this.#token = options.token;
    this.#rpcTimeoutMs = options.rpcTimeoutMs ?? 5000;
    this.#releaseOnGiveUp = options.releaseOnGiveUp ?? true;
  }

  /**
   * Closes the connection, once the Releases that follow give-ups have been answered. Leases
   * still held are not released: release them before.
   */
  async close() {
    while (this.#settling.size > 0) await Promise.allSettled([...this.#settling]);
    this.#service.close();
  }

  /**
   * Asks for `name`, waiting up to `waitMs` if it is busy. Resolves to a `Lease` (kept alive
   * until released) or a `NotGranted` naming the holder. Rejects with the gRPC error for bad
   * input (`code` INVALID_ARGUMENT, the message names the field), a `limit` other than the one in
   * force (FAILED_PRECONDITION) or an unavailable server (UNAVAILABLE).
   *
   * Each acquisition sends a lease id of its own (`newLeaseId`). An Acquire that ends UNAVAILABLE
   * or without an answer (a dropped connection) is sent again with the same id, up to
   * `ACQUIRE_RETRIES` times with the wait that remains: the server answers a grant it already
   * made to that id again, and a waiter keeps its place in the queue.
   *
   * Giving up (aborting `signal`) rejects at once with the signal's reason, cancels the Acquire
   * call, and then releases the lease id in the background: the server may have granted just
   * before it heard of the cancellation, and that Release ends the grant whichever way the race
   * went. An acquisition that fails after a call was sent is released the same way. For a
   * deadline, pass `AbortSignal.timeout(ms)` rather than a gRPC deadline.
   *
   * @param {string} name
   * @param {AcquireOptions} options
   * @returns {Promise<Lease | NotGranted>}
   */
  acquire(name, options = {}) {
    const { signal } = options;
    if (signal?.aborted) return Promise.reject(signal.reason);
    const attempt = this.#acquire(name, options);
    if (!signal) return attempt;
    return new Promise((resolve, reject) => {
      const giveUp = () => {
        reject(signal.reason);
        this.#track(attempt); // it cancels its call and releases on its own
      };
      signal.addEventListener('abort', giveUp, { once: true });
      attempt.then(
        (result) => {
          signal.removeEventListener('abort', giveUp);
          // The caller left just as the lease came: it is nobody's unless we release it.
          if (signal.aborted && result instanceof Lease) {
            this.#abandoned(result.name, result.fencingToken, result.release());
          } else {
            resolve(result);
          }
        },
        (error) => {
          signal.removeEventListener('abort', giveUp);
          reject(error); // a no-op if the caller already gave up
        },
      );
    });
  }

  /** @param {string} name @param {AcquireOptions} options @returns {Promise<Lease | NotGranted>} */
  async #acquire(name, options) {
    const { ttlMs, waitMs = 0, holder = defaultHolder(), limit = 0, lockDelayMs = 0 } = options;
    const { shared = false, signal, onWaiting } = options;
    const leaseId = newLeaseId();
    let request = { name, holder, ttlMs, waitMs, limit, lockDelayMs, shared, leaseId };
    // The server grants no earlier than the first request, so the lease lasts at least a TTL
    // from here. Not from a retry's: a retry is answered with a grant made before it, if any.
    let requestedAt = performance.now();
    const waitEndsAt = requestedAt + Number(waitMs);
    let answer;
    let inDoubt = false;
    try {
      for (let retry = 0; ; retry += 1) {
        try {
          answer = await this.#callAcquire(request, onWaiting, signal);
          break;
        } catch (error) {
          if (signal?.aborted || error?.code !== status.UNAVAILABLE || retry === ACQUIRE_RETRIES) {
            throw error;
          }
          inDoubt = true;
          debug('Acquire of %s failed, retrying with the same lease id: %s', name, describeError(error));
          await sleepUnlessAborted(ACQUIRE_RETRY_DELAY_MS * 2 ** retry, signal);
          request = { ...request, waitMs: Math.max(0, Math.floor(waitEndsAt - performance.now())) };
        }
      }
    } catch (error) {
      // The server may hold a grant for our id that we never heard of: release it (a give-up
      // lands here too). Only a refusal of the first and only attempt granted nothing for sure.
      if (signal?.aborted || inDoubt || !REFUSED_CODES.has(error?.code)) {
        this.#releaseGivenUp(name, leaseId, null);
      }
      throw error;
    }
    if (answer instanceof NotGranted) return answer;
    answer.shared = shared;
    if (signal?.aborted) {
      this.#releaseGivenUp(name, leaseId, answer.fencingToken);
      throw signal.reason;
    }

    let stream = null;
    if (performance.now() - requestedAt > answer.ttlMs / 3) {
      // After a long wait, "a TTL after the request" may be nearly over although the grant is
      // fresh: the server granted it at some unknown moment of the wait. One renewal re-bases
      // the trust on a moment we know; its stream becomes the lease's Renew stream.
      requestedAt = performance.now();
      stream = new RenewStream(this.#service.Renew(this.#metadata()));
      let reply;
      try {
        reply = await withDeadline(
          stream.renew({ name: answer.name, leaseId: answer.leaseId, ttlMs: 0 }),
          requestedAt + trustWindowMs(answer.ttlMs),
        );
      } catch (error) {
        // Never leave a granted lease unguarded: give it back before reporting the error.
        stream.close();
        await this.release(answer.name, answer.leaseId).catch(() => {});
        throw error;
      }
      if (reply.result === 'lost') {
        stream.close();
        return notGrantedFromDescription(await this.describe(name));
      }
      if (signal?.aborted) {
        stream.close();
        this.#releaseGivenUp(name, leaseId, answer.fencingToken);
        throw signal.reason;
      }
    }
    const transport = {
      openRenewStream: () => new RenewStream(this.#service.Renew(this.#metadata())),
      release: (leaseName, id) => this.release(leaseName, id),
    };
    return new Lease(transport, answer, requestedAt, stream);
  }

  /**
   * One Acquire call: resolves to the granted lease's fields or a NotGranted. Once `signal`
   * aborts, the call is cancelled and the promise rejects with the signal's reason.
   */
  #callAcquire(request, onWaiting, signal) {
    return new Promise((resolve, reject) => {
      const deadline = Date.now() + Number(request.waitMs) + this.#rpcTimeoutMs;
      const call = this.#service.Acquire(request, this.#metadata(), { deadline });
      let settled = false;
      const settle = (callback, value) => {
        if (settled) return;
        settled = true;
        signal?.removeEventListener('abort', giveUp);
        callback(value);
      };
      const giveUp = () => {
        call.cancel();
        settle(reject, signal.reason);
      };
      call.on('data', (response) => {
        switch (response.result) {
          case 'waiting':
            if (!signal?.aborted && onWaiting) onWaiting(waitingFrom(request.name, response.waiting));
            break;
          case 'granted':
            settle(resolve, grantFrom(response.granted));
            break;
          case 'notGranted':
            settle(resolve, notGrantedFrom(request.name, response.notGranted));
            break;
          default:
            settle(reject, new Error(`Acquire sent an unknown message: ${JSON.stringify(response)}`));
            call.cancel();
        }
      });
      // After a terminal message the call ends on its own, with OK: it is not cancelled, which
      // the server could take for a waiter that gave up.
      call.on('error', (error) => settle(reject, error));
      call.on('end', () => {
        // Only a broken connection or server ends the stream unanswered: retried as UNAVAILABLE.
        const error = new Error('Acquire ended without granted or not_granted');
        error.code = status.UNAVAILABLE;
        settle(reject, error);
      });
      signal?.addEventListener('abort', giveUp, { once: true });
    });
  }

  /**
   * Releases `leaseId` for a caller that gave up or failed (best effort, in the background, after
   * the Acquire call was cancelled): it ends a grant the caller never heard of, or finds nothing.
   */
  #releaseGivenUp(name, leaseId, fencingToken) {
    if (!this.#releaseOnGiveUp) return;
    const releasing = this.#unary(this.#service, 'Release', { name, leaseId }, GIVE_UP_RELEASE_TIMEOUT_MS);
    this.#abandoned(name, fencingToken, releasing.then((answer) => answer.released));
  }

  /** Reports the release of a grant whose caller gave up as `abandonedGrant`, if it ended one. */
  #abandoned(name, fencingToken, releasing) {
    this.#track(releasing);
    releasing.then(
      (released) => {
        if (!released) return; // nothing was granted: the give-up won the race
        debug('released %s (token %s): it was granted as its caller gave up', name, fencingToken);
        this.emit('abandonedGrant', { name, fencingToken, released, error: null });
      },
      (error) => {
        debug('could not release %s after a give-up: %s', name, describeError(error));
        this.emit('abandonedGrant', { name, fencingToken, released: false, error });
      },
    );
  }

  /** Keeps `close` waiting until `promise` settles. */
  #track(promise) {
    const settled = promise.then(
      () => {},
      () => {},
    );
    this.#settling.add(settled);
    settled.then(() => this.#settling.delete(settled));
  }

  /**
   * Ends the lease `leaseId` holds on `name` now. True if this call ended it; false if that id
   * did not hold it (already released, expired, or taken over). Idempotent.
   *
   * @param {string} name @param {string} leaseId @returns {Promise<boolean>}
   */
  async release(name, leaseId) {
    const answer = await this.#unary(this.#service, 'Release', { name, leaseId });
    return answer.released;
  }

  /**
   * Who holds `name` now (every holder of a counting lease) and how many wait.
   *
   * @param {string} name @returns {Promise<LeaseDescription>}
   */
  async describe(name) {
    const answer = await this.#unary(this.#service, 'Describe', { name });
    const holders = answer.holders.map(holderFrom);
    // A server from before counting leases sends only the single-holder fields.
    if (answer.held && holders.length === 0) holders.push(holderFrom(answer));
    return { name, held: answer.held, holders, limit: answer.limit, waiters: answer.waiters };
  }

  /**
   * Follows who holds `name` (Watch), for leader election's followers and for dashboards: an
   * async iterable of `WatchEvent`s, a `snapshot` first, then one event per change of holder.
   *
   * The server never ends a watch on its own: iteration ends quietly when `signal` aborts or the
   * loop breaks (both cancel the call), and otherwise throws, with the gRPC error (UNAVAILABLE
   * when the server shuts down or cannot be reached) or an Error if the stream ended without
   * one. Watch again after an error: the new stream's snapshot restates the holder.
   *
   * @param {string} name @param {{signal?: AbortSignal}} [options]
   * @returns {AsyncGenerator<WatchEvent, void, undefined>}
   */
  async *watch(name, { signal } = {}) {
    if (signal?.aborted) return;
    const call = this.#service.Watch({ name }, this.#metadata());
    // The loop below hears every error; this listener only keeps the CANCELLED that follows a
    // break (after the loop stopped listening) from being an unhandled 'error' event.
    call.on('error', () => {});
    const cancel = () => call.cancel();
    signal?.addEventListener('abort', cancel, { once: true });
    try {
      for await (const event of call) yield watchEventFrom(event);
    } catch (error) {
      if (signal?.aborted && error?.code === status.CANCELLED) return;
      throw error;
    } finally {
      signal?.removeEventListener('abort', cancel);
      call.cancel();
    }
    // Silence must not pass for "no change": a stream that ends is a watch that stopped.
    if (!signal?.aborted) throw new Error(`the server ended the Watch stream of ${JSON.stringify(name)}`);
  }

  /**
   * Whether `fencingToken` is the token of a grant that holds `name` now (CheckToken), for a
   * resource that cannot keep the largest token it has seen. Stale as soon as it is answered.
   *
   * @param {string} name @param {bigint} fencingToken
   * @returns {Promise<{current: boolean, currentToken: bigint, held: boolean}>}
   */
  async checkToken(name, fencingToken) {
    const answer = await this.#unary(this.#service, 'CheckToken', {
      name,
      fencingToken: fencingToken.toString(),
    });
    return { current: answer.current, currentToken: BigInt(answer.currentToken), held: answer.held };
  }

  /**
   * Operators only (LeaseAdminService): ends the lease `name` whoever holds it, or only the grant
   * with `fencingToken` if given. Its holder's next renewal answers lost, "revoked: <reason>".
   *
   * @param {string} name @param {string} reason @param {{fencingToken?: bigint}} [options]
   * @returns {Promise<{revoked: boolean, fencingToken: bigint}>}
   */
  async revoke(name, reason, { fencingToken = 0n } = {}) {
    const answer = await this.#unary(this.#admin, 'Revoke', {
      name,
      reason,
      // 64-bit fields are sent as decimal strings: a Number would round tokens above 2^53.
      fencingToken: fencingToken.toString(),
    });
    return { revoked: answer.revoked, fencingToken: BigInt(answer.fencingToken) };
  }

  #unary(stub, method, request, timeoutMs = this.#rpcTimeoutMs) {
    return new Promise((resolve, reject) => {
      const options = { deadline: Date.now() + timeoutMs };
      stub[method](request, this.#metadata(), options, (error, answer) =>
        error ? reject(error) : resolve(answer),
      );
    });
  }

  #metadata() {
    const metadata = new grpc.Metadata();
    if (this.#token) metadata.set('authorization', `Bearer ${this.#token}`);
    return metadata;
  }
}

/**
 * A granted lease, kept alive on one Renew stream until released.
 *
 * Emits `lost` (a LeaseLostError) when the lease must no longer be used: a renewal answered
 * `lost`, or no renewal was answered before the lease could expire on the server. Trust is
 * counted from when each renewal was *sent*, so the event fires before the server-side expiry.
 * After a loss it stops renewing; `release()` is still safe to call.
 *
 * `signal` aborts at the same moment (and on release): pass it to the work the lease protects.
 */
export class Lease extends EventEmitter {
  #transport;
  #stream;
  #trustedUntil;
  /** Aborted on release or loss: wakes the keepalive wherever it waits. */
  #stop = new AbortController();
  /** What users see as `signal`. */
  #usable = new AbortController();
  #released = false;
  #lostReason = null;

  /** Made by `LeaseClient.acquire`; not for users to construct. */
  constructor(transport, grant, requestedAt, stream) {
    super();
    /** @type {string} */ this.name = grant.name;
    /** The holder's secret for renewing and releasing; never log it. @type {string} */
    this.leaseId = grant.leaseId;
    /** Pass it to the resource the lease protects. @type {bigint} */
    this.fencingToken = grant.fencingToken;
    /** @type {number} */ this.ttlMs = grant.ttlMs;
    /** A shared (read) grant. @type {boolean} */ this.shared = grant.shared ?? false;
    /** As granted, on the store's clock. @type {Date | null} */ this.expiresAt = grant.expiresAt;
    this.#transport = transport;
    this.#stream = stream;
    this.#trustedUntil = requestedAt + trustWindowMs(grant.ttlMs);
    this.#keepAlive(requestedAt).catch((error) => {
      // A bug in the keepalive must not leave the holder trusting a lease nobody renews.
      this.#lose('unreachable', `keepalive failed: ${error?.stack ?? error}`);
    });
  }

  /** Aborted once the lease must no longer be used: lost (reason: LeaseLostError), or released. */
  get signal() {
    return this.#usable.signal;
  }

  /** True once the lease is lost (not merely released). */
  get lost() {
    return this.#lostReason !== null;
  }

  /** @returns {LeaseLostError | null} */
  get lostReason() {
    return this.#lostReason;
  }

  /** How much longer the lease may be trusted without another renewal; 0 once lost or released. */
  get trustedForMs() {
    if (this.#stop.signal.aborted) return 0;
    return Math.max(0, this.#trustedUntil - performance.now());
  }

  /**
   * Stops the keepalive and releases the lease. True if this call ended it; false if it was
   * already gone (lost, or released before). Calling it again is a no-op resolving to false.
   *
   * @returns {Promise<boolean>}
   */
  async release() {
    if (this.#released) return false;
    this.#released = true;
    this.#stop.abort();
    this.#closeStream();
    if (!this.#usable.signal.aborted) {
      this.#usable.abort(new DOMException('the lease was released', 'AbortError'));
    }
    return this.#transport.release(this.name, this.leaseId);
  }

  /** Same as `release()`. */
  close() {
    return this.release();
  }

  /**
   * The metadata a call to a fenced service carries: `leased-lease-name` (this lease's name) and
   * `leased-fencing-token` (its token, in decimal), added to `metadata` if given, else to a new
   * grpc.Metadata. Pass it as the call's metadata: `stub.put(request, lease.fencingMetadata(), cb)`.
   *
   * @param {grpc.Metadata} [metadata]
   * @returns {grpc.Metadata}
   */
  fencingMetadata(metadata) {
    return fencingMetadata(this.name, this.fencingToken, metadata);
  }

  async #keepAlive(requestedAt) {
    let period = this.ttlMs / 3;
    let retryDelay = Math.max(this.ttlMs / 20, 20);
    let nextRenewal = requestedAt + period;
    let lastError = 'no renewal answered';
    const request = { name: this.name, leaseId: this.leaseId, ttlMs: 0 }; // 0: keep the TTL
    for (;;) {
      const wakeAt = Math.min(nextRenewal, this.#trustedUntil);
      await this.#sleepUntil(wakeAt);
      if (this.#stop.signal.aborted) return;
      // Timers may fire a little early by performance.now(): it is the timer that counts.
      if (wakeAt === this.#trustedUntil || performance.now() >= this.#trustedUntil) {
        this.#lose('unreachable', lastError);
        return;
      }
      const sentAt = performance.now();
      const answer = await this.#renew(request, this.#trustedUntil);
      if (this.#stop.signal.aborted) return;
      if (answer.timedOut) {
        // Whatever the answer will say, it comes after the moment we promised to stop trusting.
        this.#lose('unreachable', 'renewal timed out');
        return;
      }
      if (answer.error) {
        lastError = describeError(answer.error);
        debug('renewing %s failed, retrying: %s', this.name, lastError);
        this.#closeStream();
        nextRenewal = performance.now() + retryDelay;
      } else if (answer.response.result === 'lost') {
        this.#lose('lost', answer.response.lost.reason);
        return;
      } else {
        this.ttlMs = Number(answer.response.renewed.ttlMs);
        period = this.ttlMs / 3;
        retryDelay = Math.max(this.ttlMs / 20, 20);
        // The server moved the expiry a TTL past when it read the request, which is after we
        // sent it: counting from the send errs on the safe side.
        this.#trustedUntil = sentAt + trustWindowMs(this.ttlMs);
        nextRenewal = sentAt + period;
      }
    }
  }

  /** One renewal on the lease's stream (opened if needed), answered before `deadline` or not. */
  #renew(request, deadline) {
    this.#stream ??= this.#transport.openRenewStream();
    const renewal = this.#stream.renew(request);
    return new Promise((resolve) => {
      const done = (answer) => {
        clearTimeout(timer);
        this.#stop.signal.removeEventListener('abort', stopped);
        resolve(answer);
      };
      const stopped = () => done({ stopped: true });
      const timer = setTimeout(() => done({ timedOut: true }), msUntil(deadline));
      this.#stop.signal.addEventListener('abort', stopped, { once: true });
      renewal.then(
        // A reply read after the deadline is never credited, even if it was "about to arrive".
        (response) => done(performance.now() >= deadline ? { timedOut: true } : { response }),
        (error) => done({ error }),
      );
    });
  }

  #sleepUntil(at) {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.#stop.signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, msUntil(at));
      this.#stop.signal.addEventListener('abort', done, { once: true });
    });
  }

  #lose(kind, reason) {
    if (this.#stop.signal.aborted) return; // released (or lost) already
    this.#lostReason = new LeaseLostError(this.name, kind, reason);
    this.#stop.abort();
    // Dropping the stream also means a late reply can never be matched to a later request.
    this.#closeStream();
    debug('%s', this.#lostReason.message);
    this.#usable.abort(this.#lostReason);
    // As any event from a timer: a listener that throws is an uncaught exception, not ours.
    process.nextTick(() => this.emit('lost', this.#lostReason));
  }

  #closeStream() {
    this.#stream?.close();
    this.#stream = null;
  }
}

// Node 20 has no `await using` yet, but where Symbol.asyncDispose exists, support it.
if (Symbol.asyncDispose) Lease.prototype[Symbol.asyncDispose] = Lease.prototype.release;

/**
 * A lease that its owner may acquire again while holding it, as a reentrant mutex. The owner is
 * this handle (Node.js has no threads to own a lock): make one per owner (a job, a request) and
 * share it only with the code that acts for that owner.
 *
 * The first `acquire` asks the server; one made while the lease is held resolves at once to the
 * same `Lease`, without a call, one level deeper. Each `release` ends a level, and only the
 * outermost releases the lease (Release, and the keepalive stops). A loss ends every level at
 * once: all levels hold the same Lease, so each sees its `lost` event and aborted `signal`, and
 * the releases that follow resolve false. Release through the lock: the Lease's own `release()`
 * ends every level.
 */
export class ReentrantLock {
  #client;
  #options;
  /** The lease while held, and how many levels hold it. */
  #lease = null;
  #holdCount = 0;
  /** The outermost acquisition under way: an acquire meanwhile waits for it, then nests. */
  #acquiring = null;

  /**
   * @param {LeaseClient} client
   * @param {string} name
   * @param {AcquireOptions} options  for each outermost acquisition
   */
  constructor(client, name, options) {
    this.#client = client;
    /** @type {string} */ this.name = name;
    this.#options = options;
  }

  /** How many levels hold the lease now: 0 when it is not held. */
  get holdCount() {
    return this.#holdCount;
  }

  /** The lease while held, else null. @returns {Lease | null} */
  get lease() {
    return this.#lease;
  }

  /**
   * Resolves to the lease: at once if this handle holds it, else as `LeaseClient.acquire` does
   * (a `Lease`, or a `NotGranted` that adds no level).
   *
   * @param {Partial<AcquireOptions>} [options]  for this call, over the lock's (`waitMs`, `signal`)
   * @returns {Promise<Lease | NotGranted>}
   */
  async acquire(options = {}) {
    const { signal } = options;
    for (;;) {
      signal?.throwIfAborted();
      if (this.#lease) {
        this.#holdCount += 1;
        return this.#lease;
      }
      if (!this.#acquiring) break;
      await settledUnlessAborted(this.#acquiring, signal);
    }
    const acquiring = this.#client.acquire(this.name, { ...this.#options, ...options });
    this.#acquiring = acquiring;
    let result;
    try {
      result = await acquiring;
    } finally {
      this.#acquiring = null;
    }
    if (result instanceof Lease) {
      this.#lease = result;
      this.#holdCount = 1;
      result.signal.addEventListener('abort', () => this.#ended(result), { once: true });
    }
    return result;
  }

  /**
   * Ends one level; the outermost releases the lease. Resolves to true if a level was held (the
   * outermost: if its Release ended the lease), false if none was (lost, or released already).
   *
   * @returns {Promise<boolean>}
   */
  async release() {
    if (!this.#lease) return false;
    this.#holdCount -= 1;
    if (this.#holdCount > 0) return true;
    const lease = this.#lease;
    this.#lease = null;
    return lease.release();
  }

  /** The lease ended other than by our outermost release: lost, or released through the Lease. */
  #ended(lease) {
    if (this.#lease !== lease) return;
    this.#lease = null;
    this.#holdCount = 0;
    // No level will release it now. A lease lost for want of answers may still be held by the
    // server: releasing frees the name sooner if the server can be reached.
    if (lease.lost) lease.release().catch(() => {});
  }
}

/**
 * A read-write lock over one name: `read()` asks for a shared grant, which coexists with the
 * other shared grants of the name, and `write()` for an exclusive one. Each resolves as
 * `LeaseClient.acquire` does, to a `Lease` (with its keepalive, `lost` and `signal`) or a
 * `NotGranted`. Readers and writers wait in one queue, in order, and a waiting writer holds back
 * the readers that come after it.
 *
 * A handle stands for one owner and holds one grant at a time: no upgrade (read to write), no
 * downgrade, no nesting; release, then acquire again. `read()` or `write()` while the handle
 * holds or is acquiring a grant rejects at once, rather than queue behind a writer that waits
 * for this very handle. Make one handle per reader.
 */
export class ReadWriteLock {
  #client;
  #options;
  /** True from a read or write until its lease ends (or it ends without one). */
  #busy = false;

  /**
   * @param {LeaseClient} client
   * @param {string} name
   * @param {AcquireOptions} options  for every acquisition (`shared` is set by read and write)
   */
  constructor(client, name, options) {
    this.#client = client;
    /** @type {string} */ this.name = name;
    this.#options = options;
  }

  /** A shared grant. @param {Partial<AcquireOptions>} [options] @returns {Promise<Lease | NotGranted>} */
  read(options = {}) {
    return this.#acquire(true, options);
  }

  /** An exclusive grant. @param {Partial<AcquireOptions>} [options] @returns {Promise<Lease | NotGranted>} */
  write(options = {}) {
    return this.#acquire(false, options);
  }

  async #acquire(shared, options) {
    if (this.#busy) {
      throw new Error(
        `this handle already holds or is acquiring ${JSON.stringify(this.name)}: release it first ` +
          '(no upgrade, downgrade or nesting)',
      );
    }
    this.#busy = true;
    let result;
    try {
      result = await this.#client.acquire(this.name, { ...this.#options, ...options, shared });
    } catch (error) {
      this.#busy = false;
      throw error;
    }
    if (result instanceof Lease) {
      result.signal.addEventListener('abort', () => (this.#busy = false), { once: true });
    } else {
      this.#busy = false;
    }
    return result;
  }
}

/**
 * One bidi Renew call, one request in flight at a time: the server answers in order, so the next
 * message is the answer to the request just written. A stream that failed, or that the keepalive
 * gave up on, is closed and never reused.
 */
class RenewStream {
  #call;
  #pending = null;
  #failure = null;

  constructor(call) {
    this.#call = call;
    call.on('data', (response) => {
      const pending = this.#pending;
      this.#pending = null;
      if (pending) pending.resolve(response);
      else this.#fail(new Error('Renew sent an answer to no request'));
    });
    // Always listened to: an unheard 'error' (CANCELLED when we close it) would crash the process.
    call.on('error', (error) => this.#fail(error));
    call.on('end', () => this.#fail(new Error('the server ended the Renew stream')));
  }

  /** @returns {Promise<object>} the RenewResponse */
  renew(request) {
    if (this.#failure) return Promise.reject(this.#failure);
    if (this.#pending) return Promise.reject(new Error('a renewal is already in flight'));
    return new Promise((resolve, reject) => {
      this.#pending = { resolve, reject };
      this.#call.write(request);
    });
  }

  close() {
    this.#fail(new Error('the Renew stream was closed'));
    this.#call.cancel();
  }

  #fail(error) {
    this.#failure ??= error;
    const pending = this.#pending;
    this.#pending = null;
    pending?.reject(this.#failure);
  }
}

/** Trust ends a twentieth of the TTL early, for clocks that run at slightly different rates. */
function trustWindowMs(ttlMs) {
  return ttlMs - ttlMs / 20;
}

/** Rounded up: a timer must not fire before the moment it stands for. */
function msUntil(at) {
  return Math.max(0, Math.ceil(at - performance.now()));
}

/** Resolves after `ms`, or rejects with the signal's reason as soon as it aborts. */
function sleepUnlessAborted(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const aborted = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', aborted);
      resolve();
    }, ms);
    signal?.addEventListener('abort', aborted, { once: true });
  });
}

/** Resolves once `promise` settles, either way; rejects with the signal's reason if it aborts first. */
function settledUnlessAborted(promise, signal) {
  const settled = promise.then(
    () => {},
    () => {},
  );
  if (!signal) return settled;
  return new Promise((resolve, reject) => {
    const aborted = () => reject(signal.reason);
    signal.addEventListener('abort', aborted, { once: true });
    settled.then(() => {
      signal.removeEventListener('abort', aborted);
      resolve();
    });
  });
}

/** `promise`, or a DEADLINE_EXCEEDED error at `deadline` (a performance.now() instant). */
function withDeadline(promise, deadline) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      const error = new Error('no answer before the lease could expire');
      error.code = status.DEADLINE_EXCEEDED;
      reject(error);
    }, msUntil(deadline));
    promise.then(resolve, reject).finally(() => clearTimeout(timer));
  });
}

function describeError(error) {
  // A grpc-js error's message is "<code> <NAME>: <details>".
  return error?.message ?? String(error);
}

/** A `google.protobuf.Timestamp` ({seconds, nanos}; seconds an int64, so a string) as a Date. */
function dateFrom(timestamp) {
  if (!timestamp) return null;
  return new Date(Number(timestamp.seconds) * 1000 + Math.floor(timestamp.nanos / 1e6));
}

function grantFrom(granted) {
  return {
    name: granted.name,
    leaseId: granted.leaseId,
    fencingToken: BigInt(granted.fencingToken),
    ttlMs: Number(granted.ttlMs),
    expiresAt: dateFrom(granted.expiresAt),
  };
}

/** @returns {Waiting} */
function waitingFrom(name, waiting) {
  return Object.freeze({
    name,
    holder: waiting.holder,
    fencingToken: BigInt(waiting.fencingToken),
    remainingMs: Number(waiting.remainingMs),
    position: waiting.position,
    held: waiting.held,
    limit: waiting.limit,
  });
}

function notGrantedFrom(name, busy) {
  return new NotGranted({
    name,
    holder: busy.holder,
    fencingToken: BigInt(busy.fencingToken),
    remainingMs: Number(busy.remainingMs),
    held: busy.held,
    limit: busy.limit,
  });
}

/** @returns {HolderInfo} */
function holderFrom(info) {
  return {
    holder: info.holder,
    fencingToken: BigInt(info.fencingToken),
    remainingMs: Number(info.remainingMs),
    expiresAt: dateFrom(info.expiresAt),
    // Absent from the single-holder fields of a server from before counting leases.
    shared: info.shared ?? false,
  };
}

/** @returns {WatchEvent} */
function watchEventFrom(event) {
  return {
    name: event.name,
    // 'CAUSE_GRANTED' -> 'granted'; a cause newer than this client reads as 'unspecified'.
    cause: /^CAUSE_[A-Z]+$/.test(event.cause) ? event.cause.slice(6).toLowerCase() : 'unspecified',
    held: event.held,
    holder: event.holder,
    fencingToken: BigInt(event.fencingToken),
    expiresAt: dateFrom(event.expiresAt),
    limit: event.limit,
    holders: event.holders.map(holderFrom),
    reason: event.reason,
  };
}

/** The NotGranted a waiter would have been told: the permit that frees soonest. */
function notGrantedFromDescription(description) {
  const untilFree = (holder) => (holder.remainingMs < 0 ? Infinity : holder.remainingMs);
  const soonest = description.holders.reduce(
    (best, holder) => (best === null || untilFree(holder) < untilFree(best) ? holder : best),
    null,
  );
  return new NotGranted({
    name: description.name,
    holder: soonest?.holder ?? '',
    fencingToken: soonest?.fencingToken ?? 0n,
    remainingMs: soonest?.remainingMs ?? 0,
    held: description.holders.length,
    limit: description.limit,
  });
}
