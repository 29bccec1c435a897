// A consumer's TypeScript, type-checked by types.test.js with `tsc --noEmit --strict` against the
// installed package (never run): the main API as a user would write it. An edit of
// leased-client.d.ts that breaks this breaks users' builds.

import grpc from '@grpc/grpc-js';
import pg from 'pg';
import { createClient } from 'redis';

import {
  type AcquireOptions,
  type FenceMarks,
  FENCING_TOKEN_METADATA,
  FencingInputError,
  InProcessMarks,
  LEASE_NAME_METADATA,
  MAX_FENCING_TOKEN,
  PostgresMarks,
  RedisFencing,
  RedisMarks,
  StaleTokenError,
  fencePostgres,
  fencingInterceptor,
  fencingMetadata,
  postgresFencingError,
  toFencingToken,
  type HolderInfo,
  Lease,
  LeaseClient,
  LeaseLostError,
  NotGranted,
  ReadWriteLock,
  ReentrantLock,
  type ServiceError,
  status,
  type WatchEvent,
} from 'leased-client';

declare function work(fencingToken: bigint, signal: AbortSignal): Promise<void>;

const client = new LeaseClient('127.0.0.1:50051', { token: 'secret', rpcTimeoutMs: 2000 });
client.on('abandonedGrant', ({ name, fencingToken, released, error }) => {
  const token: bigint | null = fencingToken;
  console.log(name, token, released, error?.message);
});

// Acquire and guard.
export async function guard(): Promise<bigint | null> {
  const options: AcquireOptions = {
    ttlMs: 15_000,
    waitMs: 60_000,
    signal: AbortSignal.timeout(30_000),
    onWaiting: (w) => console.log(`#${w.position} behind ${w.holder}`),
  };
  let result: Lease | NotGranted;
  try {
    result = await client.acquire('nightly-report', options);
  } catch (error) {
    // Errors: a gRPC ServiceError with a status code.
    const code = (error as ServiceError).code;
    if (code === status.UNAVAILABLE || code === status.DEADLINE_EXCEEDED) return null;
    throw error;
  }
  if (result instanceof NotGranted) {
    const holder: string = result.holder;
    console.log('busy:', holder, result.fencingToken + 1n, result.remainingMs);
    return null;
  }
  const lease: Lease = result;
  lease.on('lost', (why) => {
    const error: LeaseLostError = why;
    const kind: 'lost' | 'unreachable' = error.kind;
    console.error(kind, error.reason, error.lease);
  });
  try {
    await work(lease.fencingToken, lease.signal);
    if (lease.lost) console.log(lease.lostReason?.message, lease.trustedForMs);
  } finally {
    const released: boolean = await lease.release();
    console.log(released);
  }
  return lease.fencingToken;
}

// Reentrant and read-write locks.
export async function locks(): Promise<void> {
  const ledger = new ReentrantLock(client, 'ledger', { ttlMs: 15_000, waitMs: 60_000 });
  const outer = await ledger.acquire();
  const inner = await ledger.acquire({ signal: AbortSignal.timeout(1000) });
  if (outer instanceof Lease && inner === outer) console.log(ledger.holdCount, ledger.lease?.name);
  await ledger.release();
  await ledger.release();

  const catalog = new ReadWriteLock(client, 'catalog', { ttlMs: 15_000 });
  const reading = await catalog.read({ waitMs: 1000 });
  if (reading instanceof Lease) {
    const shared: boolean = reading.shared;
    console.log(shared);
    await reading.release();
  }
  const writing = await catalog.write();
  if (!(writing instanceof NotGranted)) await writing.close();
}

// Leader election's followers: Watch.
export async function follow(stop: AbortSignal): Promise<string[]> {
  const leaders: string[] = [];
  for await (const event of client.watch('leader/scheduler', { signal: stop })) {
    const e: WatchEvent = event;
    const leader: HolderInfo | undefined = e.holders[0];
    if (e.cause === 'snapshot' || e.cause === 'granted') leaders.push(leader?.holder ?? '');
    if (e.cause === 'revoked') console.log(e.reason, e.fencingToken, e.expiresAt?.getTime());
  }
  const check = await client.checkToken('leader/scheduler', 42n);
  console.log(check.current, check.currentToken, check.held);
  const description = await client.describe('leader/scheduler');
  console.log(description.waiters, description.holders.map((h) => h.fencingToken));
  const revoked = await client.revoke('leader/scheduler', 'wedged', { fencingToken: 42n });
  console.log(revoked.revoked, revoked.fencingToken);
  await client.close();
  return leaders;
}

// Fencing: the user's own pg and node-redis clients, a grpc-js server and the guard's metadata.
export async function fence(lease: Lease): Promise<bigint> {
  const db = new pg.Client();
  await db.connect();
  await db.query('BEGIN');
  let mark: bigint;
  try {
    mark = await fencePostgres(db, 'orders', lease.fencingToken);
    await db.query('COMMIT');
  } catch (error) {
    await db.query('ROLLBACK');
    const mapped = postgresFencingError(error);
    if (mapped instanceof StaleTokenError) {
      const seen: bigint | null = mapped.mark;
      console.log(mapped.token, seen, mapped.resource);
    }
    if (error instanceof FencingInputError) console.log(error.argument);
    throw mapped;
  }
  const pool = new pg.Pool();
  const redis = createClient();
  const fencing = new RedisFencing((args) => redis.sendCommand(args));
  await fencing.set('fence:{o}', '{o}:a', '1800000000000000', 'v', 'PX', '5000');
  const added: number = await fencing.hset('fence:{o}', '{o}:h', 5, { field: 'value' });
  const removed: number = await fencing.del('fence:{o}', ['{o}:a'], MAX_FENCING_TOKEN);
  console.log(added, removed, await fencing.fence('fence:{o}', toFencingToken('7')));
  const stores: FenceMarks[] = [
    new InProcessMarks(),
    new PostgresMarks(pool, { keyPrefix: 'svc:' }),
    new RedisMarks((args) => redis.sendCommand(args)),
  ];
  const server = new grpc.Server({ interceptors: [fencingInterceptor({ marks: stores[1], required: false })] });
  const metadata: grpc.Metadata = lease.fencingMetadata(fencingMetadata('other', 5n));
  console.log(server, metadata.get(LEASE_NAME_METADATA), metadata.get(FENCING_TOKEN_METADATA));
  return mark;
}
