// TypeScript declarations of leased-client.js, written by hand: keep them in step with the
// module (test/types.test.js fails when the declared exports and the module's differ, and
// type-checks a consumer's use of them with `tsc --strict`). The prose is in leased-client.js.

import { EventEmitter } from 'node:events';

import type { ChannelCredentials, ChannelOptions, Interceptor, Metadata, ServerInterceptor, ServiceError } from '@grpc/grpc-js';

/** grpc-js's status codes: compare them with a rejection's `code`. */
export { status } from '@grpc/grpc-js';
/** What a call rejects with when the server refuses it or cannot be reached (`code`, `details`). */
export type { ServiceError } from '@grpc/grpc-js';

/** How many times an Acquire that ended without an answer is sent again, with the same lease id. */
export const ACQUIRE_RETRIES: number;
/** The pause before the first retry of an Acquire, in ms; it doubles before each next one. */
export const ACQUIRE_RETRY_DELAY_MS: number;
/** Bounds the Release that follows a give-up, in ms. */
export const GIVE_UP_RELEASE_TIMEOUT_MS: number;
/** The directory holding `lease/v1/lease.proto`: the package's own copy. */
export const PROTO_ROOT: string;

/** A new lease id: 128 bits from the OS's CSPRNG as 32 hex digits. */
export function newLeaseId(): string;
/** `hostname/pid`, the default `holder`. */
export function defaultHolder(): string;

/** One holder (one permit of a counting lease); never a lease id. */
export interface HolderInfo {
  readonly holder: string;
  readonly fencingToken: bigint;
  /** Lock-delay included; -1: no expiry. */
  readonly remainingMs: number;
  /** On the store's clock. */
  readonly expiresAt: Date | null;
  /** A shared (read) grant; false for exclusive grants and permits. */
  readonly shared: boolean;
}

/** What `onWaiting` is told while the server waits for the lease. */
export interface Waiting {
  readonly name: string;
  /** The current holder (may be empty). */
  readonly holder: string;
  /** The current holder's token (0n if unknown). */
  readonly fencingToken: bigint;
  /** Until the holder's lease frees unless renewed; -1: no expiry. */
  readonly remainingMs: number;
  /** 1 = next in line, across every replica. */
  readonly position: number;
  readonly held: number;
  readonly limit: number;
}

/** What `describe` tells anyone about a lease. */
export interface LeaseDescription {
  readonly name: string;
  readonly held: boolean;
  /** Every permit taken, by increasing token (empty when free). */
  readonly holders: HolderInfo[];
  /** 1 exclusive, N counting, 0 when free. */
  readonly limit: number;
  /** Callers waiting, on every replica. */
  readonly waiters: number;
}

/** What happened to a watched lease (`LeaseClient.watch`). */
export interface WatchEvent {
  readonly name: string;
  /** 'snapshot': the whole current state (first, and after events may have been missed). */
  readonly cause: 'snapshot' | 'granted' | 'released' | 'expired' | 'revoked' | 'unspecified';
  readonly held: boolean;
  /** Of the grant the event is about ('' in a snapshot of a free lease). */
  readonly holder: string;
  readonly fencingToken: bigint;
  readonly expiresAt: Date | null;
  readonly limit: number;
  /** Every holder after the event, by increasing token: in leader election, [0] leads. */
  readonly holders: HolderInfo[];
  /** For 'revoked': the operator's reason. */
  readonly reason: string;
}

/** `checkToken`'s answer, true when sent. */
export interface TokenCheck {
  readonly current: boolean;
  readonly currentToken: bigint;
  readonly held: boolean;
}

export interface AcquireOptions {
  /** How long the lease lasts without a renewal (10 ms and up). */
  ttlMs: number;
  /** How long to wait for a busy lease; 0 (default) tries once. */
  waitMs?: number;
  /** Shown to others by Describe; default `hostname/pid`. */
  holder?: string;
  /** N > 1: one of N permits of a counting lease. */
  limit?: number;
  /** After an expiry, nobody gets the name for this long. */
  lockDelayMs?: number;
  /** A shared (read) grant, beside other shared grants (see ReadWriteLock). */
  shared?: boolean;
  /** Called while the server waits for the lease. */
  onWaiting?: (waiting: Waiting) => void;
  /** Gives the wait up (e.g. `AbortSignal.timeout(ms)`): rejects at once with its reason. */
  signal?: AbortSignal;
}

export interface LeaseClientOptions {
  /** Default: plaintext. */
  credentials?: ChannelCredentials;
  /** Bearer token, for servers started with --auth-tokens. */
  token?: string;
  /** Bounds calls that should answer at once; default 5000. */
  rpcTimeoutMs?: number;
  channelOptions?: ChannelOptions;
  /** For LeaseService calls (tracing, tests). */
  interceptors?: Interceptor[];
  /** Default true; only tests turn it off. */
  releaseOnGiveUp?: boolean;
}

/** The `abandonedGrant` event's argument. */
export interface AbandonedGrant {
  readonly name: string;
  /** Null unless the grant reached the client. */
  readonly fencingToken: bigint | null;
  /** True: the Release ended a grant made as its caller gave up. */
  readonly released: boolean;
  /** The Release failed: a grant, if there was one, stays held until its TTL. */
  readonly error: Error | null;
}

/** Someone else holds the lease for the whole wait: not an error. */
export class NotGranted {
  private constructor();
  readonly name: string;
  readonly holder: string;
  readonly fencingToken: bigint;
  /** Until that holder's lease frees unless renewed, lock-delay included; -1: no expiry. */
  readonly remainingMs: number;
  readonly held: number;
  readonly limit: number;
}

/** Why a lease ended for its holder: `lost`'s argument, `lostReason`, `signal.reason`. */
export class LeaseLostError extends Error {
  constructor(name: string, kind: 'lost' | 'unreachable', reason: string);
  readonly name: 'LeaseLostError';
  /** The lease's name. */
  readonly lease: string;
  /** 'lost': the server answered a renewal with lost; 'unreachable': no answer in time. */
  readonly kind: 'lost' | 'unreachable';
  /** The server's reason ("expired or released", "revoked: ...") or the last error. */
  readonly reason: string;
}

/** A connection to a leased server. Share one per process. */
export class LeaseClient extends EventEmitter {
  /** @param target `host:port` */
  constructor(target: string, options?: LeaseClientOptions);
  /** Closes the connection, once the Releases that follow give-ups are answered. */
  close(): Promise<void>;
  /** A Lease (kept alive until released) or a NotGranted; rejects with a ServiceError. */
  acquire(name: string, options: AcquireOptions): Promise<Lease | NotGranted>;
  /** True if this call ended the lease that `leaseId` held. */
  release(name: string, leaseId: string): Promise<boolean>;
  describe(name: string): Promise<LeaseDescription>;
  /** A snapshot, then each change of holder; ends quietly when `signal` aborts. */
  watch(name: string, options?: { signal?: AbortSignal }): AsyncGenerator<WatchEvent, void, undefined>;
  checkToken(name: string, fencingToken: bigint): Promise<TokenCheck>;
  /** Operators only: ends the lease whoever holds it (only the grant with `fencingToken`). */
  revoke(
    name: string,
    reason: string,
    options?: { fencingToken?: bigint },
  ): Promise<{ revoked: boolean; fencingToken: bigint }>;

  on(event: 'abandonedGrant', listener: (grant: AbandonedGrant) => void): this;
  on(event: string | symbol, listener: (...args: any[]) => void): this;
  once(event: 'abandonedGrant', listener: (grant: AbandonedGrant) => void): this;
  once(event: string | symbol, listener: (...args: any[]) => void): this;
}

/** A granted lease, kept alive on one Renew stream until released. Made by `acquire`. */
export class Lease extends EventEmitter {
  private constructor();
  readonly name: string;
  /** The holder's secret for renewing and releasing; never log it. */
  readonly leaseId: string;
  /** Pass it to the resource the lease protects. */
  readonly fencingToken: bigint;
  /** The TTL in force (a renewal may change it). */
  readonly ttlMs: number;
  readonly shared: boolean;
  /** As granted, on the store's clock. */
  readonly expiresAt: Date | null;
  /** Aborted once the lease must no longer be used: lost (reason: LeaseLostError), or released. */
  readonly signal: AbortSignal;
  /** True once the lease is lost (not merely released). */
  readonly lost: boolean;
  readonly lostReason: LeaseLostError | null;
  /** How much longer the lease may be trusted without another renewal; 0 once lost or released. */
  readonly trustedForMs: number;
  /** Stops the keepalive and releases; true if this call ended the lease. */
  release(): Promise<boolean>;
  /** Same as `release()`. */
  close(): Promise<boolean>;
  /**
   * `leased-lease-name` and `leased-fencing-token` of this grant, for a call to a fenced service:
   * added to `metadata` if given, else to a new Metadata.
   */
  fencingMetadata(metadata?: Metadata): Metadata;

  on(event: 'lost', listener: (reason: LeaseLostError) => void): this;
  on(event: string | symbol, listener: (...args: any[]) => void): this;
  once(event: 'lost', listener: (reason: LeaseLostError) => void): this;
  once(event: string | symbol, listener: (...args: any[]) => void): this;
}

/** A lease its owner (this handle) may acquire again while holding it. */
export class ReentrantLock {
  constructor(client: LeaseClient, name: string, options: AcquireOptions);
  readonly name: string;
  /** Levels holding the lease now: 0 when not held. */
  readonly holdCount: number;
  /** The lease while held, else null. */
  readonly lease: Lease | null;
  /** At once if this handle holds the lease (one level deeper), else as `LeaseClient.acquire`. */
  acquire(options?: Partial<AcquireOptions>): Promise<Lease | NotGranted>;
  /** Ends one level; the outermost releases the lease. */
  release(): Promise<boolean>;
}

/** Shared `read()` and exclusive `write()` grants of one name; one grant per handle. */
export class ReadWriteLock {
  constructor(client: LeaseClient, name: string, options: AcquireOptions);
  readonly name: string;
  read(options?: Partial<AcquireOptions>): Promise<Lease | NotGranted>;
  write(options?: Partial<AcquireOptions>): Promise<Lease | NotGranted>;
}

// Fencing (fencing.js): the token checked where the data lives.

/** A fencing token as the helpers take it: a BigInt, a decimal string, or a safe-integer Number. */
export type FencingTokenInput = bigint | string | number;

/** The metadata entry that carries the lease's name. */
export const LEASE_NAME_METADATA: 'leased-lease-name';
/** The metadata entry that carries the grant's fencing token, in decimal. */
export const FENCING_TOKEN_METADATA: 'leased-fencing-token';
/** 2^63 - 1, the largest token a fenced resource accepts. */
export const MAX_FENCING_TOKEN: bigint;
/** The SQLSTATE of a stale token in PostgreSQL (leased.fence and the row trigger): 'LF001'. */
export const POSTGRES_STALE_TOKEN: 'LF001';

/** The resource has seen a larger token: a newer holder wrote; stop writing with this one. */
export class StaleTokenError extends Error {
  constructor(token: bigint, mark: bigint | null, resource: string, options?: { cause?: unknown });
  readonly name: 'StaleTokenError';
  /** The refused token. */
  readonly token: bigint;
  /** The largest token the resource has seen (null if it did not say). */
  readonly mark: bigint | null;
  /** The resource key, the Redis mark key, or the lease name. */
  readonly resource: string;
}

/** Bad input to a fencing helper or a fenced resource; nothing was written. */
export class FencingInputError extends Error {
  constructor(argument: string, message: string, options?: { cause?: unknown });
  readonly name: 'FencingInputError';
  /** What was wrong: 'token', 'resource', 'fields', 'keys', a metadata entry... */
  readonly argument: string;
}

/** `value` as a token from 1 to 2^63 - 1; a Number above 2^53 - 1 is refused, never rounded. */
export function toFencingToken(value: FencingTokenInput, argument?: string): bigint;

/** What the PostgreSQL helpers need of a `pg` Client, PoolClient or Pool. */
export interface PostgresQueryable {
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
}

/** `SELECT leased.fence(resource, token)` in the caller's transaction; resolves to the mark. */
export function fencePostgres(client: PostgresQueryable, resource: string, token: FencingTokenInput): Promise<bigint>;
/** The StaleTokenError (LF001) or FencingInputError (22023) a `pg` error stands for, else the error. */
export function postgresFencingError(error: unknown, resource?: string, token?: bigint): unknown;

/** Sends one Redis command (an array of strings), resolving to its reply. */
export type RedisSendCommand = (args: string[]) => Promise<unknown>;

/** Fenced writes to Redis through the leased_fencing Functions library. */
export class RedisFencing {
  constructor(sendCommand: RedisSendCommand);
  /** FCALL leased_fence: check and record only; resolves to the mark. */
  fence(markKey: string, token: FencingTokenInput): Promise<bigint>;
  /** FCALL leased_set: SET's reply. */
  set(markKey: string, key: string, token: FencingTokenInput, value: string, ...setOptions: string[]): Promise<unknown>;
  /** FCALL leased_hset: the number of fields added. */
  hset(markKey: string, key: string, token: FencingTokenInput, fields: Record<string, string> | string[]): Promise<number>;
  /** FCALL leased_del: the number of keys removed. */
  del(markKey: string, keys: string[], token: FencingTokenInput): Promise<number>;
}

/** Where the gRPC middleware keeps the largest token accepted per lease name. */
export interface FenceMarks {
  /** Rejects with a StaleTokenError below the mark; else records `token` and resolves to it. */
  fence(name: string, token: bigint): Promise<bigint>;
}

/** The default: marks in this process, only as durable as the process. */
export class InProcessMarks implements FenceMarks {
  fence(name: string, token: bigint): Promise<bigint>;
}

/** Marks in PostgreSQL: `leased.fence(keyPrefix + name, token)`, each in its own transaction. */
export class PostgresMarks implements FenceMarks {
  constructor(db: PostgresQueryable, options?: { keyPrefix?: string });
  fence(name: string, token: bigint): Promise<bigint>;
}

/** Marks in Redis: `FCALL leased_fence 1 <keyPrefix><name> <token>`. */
export class RedisMarks implements FenceMarks {
  constructor(sendCommand: RedisSendCommand, options?: { keyPrefix?: string });
  fence(name: string, token: bigint): Promise<bigint>;
}

export interface FencingInterceptorOptions {
  /** Default: an InProcessMarks of the interceptor's own. */
  marks?: FenceMarks;
  /** Default true: a call without the fencing metadata is INVALID_ARGUMENT; false lets it pass. */
  required?: boolean;
}

/** A server interceptor that makes every method of a grpc-js Server a fenced resource. */
export function fencingInterceptor(options?: FencingInterceptorOptions): ServerInterceptor;

/** `leased-lease-name` and `leased-fencing-token`, added to `metadata` (or a new Metadata). */
export function fencingMetadata(name: string, token: FencingTokenInput, metadata?: Metadata): Metadata;
