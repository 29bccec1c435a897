// fencingInterceptor: a @grpc/grpc-js server interceptor that makes a gRPC service a fenced
// resource, over real gRPC on loopback, with each mark store (in process, PostgreSQL, Redis):
// Kleppmann's scenario with a holder process stopped past its lease (fenced, and the same
// service without the interceptor), concurrent writers paused at random, bad metadata, the
// 2^63 - 1 boundary and tokens above 2^53, a failing store, and the per-name order of unary calls.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import grpc from '@grpc/grpc-js';
import pg from 'pg';

import {
  FENCING_TOKEN_METADATA,
  InProcessMarks,
  LEASE_NAME_METADATA,
  Lease,
  LeaseClient,
  PostgresMarks,
  RedisMarks,
  fencingInterceptor,
  fencingMetadata,
} from 'leased-client';
import { StoreClient, fencingResources, readResource, redisClient, startStoreService } from './fencing-stack.js';
import { assertKleppmann, assertOnlyIncreasing, concurrentWriters, kleppmann } from './fencing-scenarios.js';

/**
 * Services, clients and pools made by the tests, closed after them. Registered before
 * fencingResources() registers its own `after`: node:test runs `after` hooks in the order they
 * were registered, so the pools end before PostgreSQL stops (an idle pool connection that the
 * server ends raises an error after the test).
 */
const cleanups = [];
after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});
const resources = fencingResources();
/**
 * A pg Pool emits 'error' when the server ends one of its idle connections (the scratch server
 * stopping with a pool not yet ended, on a loaded machine); pg's documentation asks every pool to
 * handle it, or the process fails. Queries report their own errors: nothing a test asserts on is
 * hidden by this.
 */
function ignoreIdleClientError() {}
const TWO_53 = 2n ** 53n;

async function service(options) {
  const store = await startStoreService(options);
  const client = new StoreClient(store.target, grpc.credentials.createInsecure());
  cleanups.push(() => store.stop(), () => client.close());
  return { store, client };
}

/** Put over `client` with raw metadata entries ([key, value] pairs): {error, reply}. */
function put(client, resource, value, entries) {
  const metadata = new grpc.Metadata();
  for (const [key, val] of entries) metadata.add(key, val);
  return new Promise((resolve) =>
    client.put({ resource, value }, metadata, { deadline: Date.now() + 10_000 }, (error, reply) =>
      resolve({ error, reply }),
    ),
  );
}

const fenced = (name, token) => [
  [LEASE_NAME_METADATA, name],
  [FENCING_TOKEN_METADATA, String(token)],
];

describe('the interceptor, in process', () => {
  let store, client;
  before(async () => ({ store, client } = await service({ interceptors: [fencingInterceptor()] })));

  test('a smaller token is FAILED_PRECONDITION naming both tokens, and the handler does not run', async () => {
    assert.equal((await put(client, 'mw-stale', 'a', fenced('mw-stale', 7))).error, null);
    assert.equal((await put(client, 'mw-stale', 'b', fenced('mw-stale', 7))).error, null, 'an equal token passes');
    const { error } = await put(client, 'mw-stale', 'late', fenced('mw-stale', 6));
    assert.equal(error?.code, grpc.status.FAILED_PRECONDITION);
    assert.equal(error.details, 'stale fencing token 6 for lease "mw-stale": the highest seen is 7');
    assert.equal(store.value('mw-stale'), 'b');
    assert.deepEqual(store.history('mw-stale'), [7n, 7n]);
  });

  test('bad metadata is INVALID_ARGUMENT naming the entry, never a silent accept', async () => {
    const cases = [
      [[], /this service is fenced: the call needs leased-lease-name and leased-fencing-token metadata/],
      [[[FENCING_TOKEN_METADATA, '5']], /^leased-lease-name is missing/],
      [[[LEASE_NAME_METADATA, 'mw-bad']], /^leased-fencing-token is missing/],
      [[[LEASE_NAME_METADATA, ''], [FENCING_TOKEN_METADATA, '5']], /^leased-lease-name must be a lease name/],
      ...['0', '-5', '05', '12a', '+5', '5 x', '9223372036854775808', '99999999999999999999'].map((token) => [
        fenced('mw-bad', token),
        `leased-fencing-token must be a fencing token from 1 to 9223372036854775807, not ${JSON.stringify(token)}`,
      ]),
      [fenced('mw-bad', 'x'.repeat(100)), /not "x{40}"…$/],
    ];
    for (const [entries, details] of cases) {
      const { error } = await put(client, 'mw-bad', 'v', entries);
      assert.equal(error?.code, grpc.status.INVALID_ARGUMENT, JSON.stringify(entries));
      if (typeof details === 'string') assert.equal(error.details, details);
      else assert.match(error.details, details);
    }
    assert.equal(store.value('mw-bad'), undefined, 'a refused call reached the handler');
  });

  test('the boundary: 2^63 - 1 accepted; tokens above 2^53 compared exactly', async () => {
    assert.equal((await put(client, 'mw-max', 'v', fenced('mw-max', '9223372036854775807'))).error, null);
    const below = await put(client, 'mw-max', 'v', fenced('mw-max', '9223372036854775806'));
    assert.equal(below.error?.code, grpc.status.FAILED_PRECONDITION);
    // 2^53 + 1 and 2^53 are the same double: compared as doubles, the second would pass.
    assert.equal((await put(client, 'mw-53', 'v', fenced('mw-53', TWO_53 + 1n))).error, null);
    const { error } = await put(client, 'mw-53', 'v', fenced('mw-53', TWO_53));
    assert.equal(error?.code, grpc.status.FAILED_PRECONDITION);
    assert.equal(error.details, `stale fencing token ${TWO_53} for lease "mw-53": the highest seen is ${TWO_53 + 1n}`);
  });

  test('a streaming call is checked when it starts', async () => {
    await put(client, 'mw-stream', 'v', fenced('mw-stream', 10));
    const read = (token) =>
      new Promise((resolve) => {
        const metadata = fencingMetadata('mw-stream', token);
        const call = client.read({ resource: 'mw-stream' }, metadata);
        const values = [];
        call.on('data', (message) => values.push(message.value));
        call.on('error', (error) => resolve({ error }));
        call.on('end', () => resolve({ values }));
      });
    assert.deepEqual(await read(10n), { values: ['v'] });
    assert.equal((await read(9n)).error?.code, grpc.status.FAILED_PRECONDITION);
  });

  test("the guard's fencingMetadata carries the lease's name and token", async () => {
    const leases = new LeaseClient(resources.stack.target);
    cleanups.push(() => leases.close());
    const lease = await leases.acquire('mw-guard', { ttlMs: 5000 });
    assert.ok(lease instanceof Lease);
    try {
      const metadata = lease.fencingMetadata();
      assert.deepEqual(metadata.get(LEASE_NAME_METADATA), ['mw-guard']);
      assert.deepEqual(metadata.get(FENCING_TOKEN_METADATA), [String(lease.fencingToken)]);
      // Added to the caller's own metadata when given.
      const own = new grpc.Metadata();
      own.set('x-request-id', 'r1');
      assert.equal(lease.fencingMetadata(own), own);
      assert.deepEqual(own.get('x-request-id'), ['r1']);
      assert.equal((await put(client, 'mw-guard', 'v', Object.entries(metadata.getMap()))).error, null);
      assert.deepEqual(store.history('mw-guard'), [lease.fencingToken]);
    } finally {
      await lease.release();
    }
  });

  test("unary calls of one name run one at a time: a paused handler's write lands before a newer one's", async () => {
    // The handler of token 5 pauses mid-call; token 6's call arrives meanwhile and must wait for
    // it, so the writes land 5 then 6. Without the per-name lock they would land 6 then 5.
    let paused = false;
    const { store: ordered, client: orderedClient } = await service({
      interceptors: [fencingInterceptor()],
      beforeWrite: async ({ value }) => {
        if (value === 'slow') {
          paused = true;
          await sleep(1000);
        }
      },
    });
    let slowDone = false;
    const slow = put(orderedClient, 'mw-order', 'slow', fenced('mw-order', 5)).finally(() => (slowDone = true));
    while (!paused) await sleep(5);
    const fast = put(orderedClient, 'mw-order', 'fast', fenced('mw-order', 6));
    const other = await put(orderedClient, 'mw-other', 'x', fenced('mw-other', 1));
    assert.equal(other.error, null);
    assert.equal(slowDone, false, "another name's call waited for the paused one");
    assert.deepEqual([(await slow).error, (await fast).error], [null, null]);
    assert.deepEqual(ordered.history('mw-order'), [5n, 6n]);
    assert.equal(ordered.value('mw-order'), 'fast');
  });

  test('with required off, a call without the metadata passes unchecked; bad metadata is still refused', async () => {
    const { store: open, client: openClient } = await service({
      interceptors: [fencingInterceptor({ required: false })],
    });
    assert.equal((await put(openClient, 'mw-open', 'v', [])).error, null);
    assert.equal(open.value('mw-open'), 'v');
    assert.equal((await put(openClient, 'mw-open', 'w', fenced('mw-open', '0'))).error?.code, grpc.status.INVALID_ARGUMENT);
  });
});

describe('the interceptor with marks in PostgreSQL and Redis', () => {
  test('both stores refuse a smaller token, keep the mark under the prefix', async () => {
    const pool = new pg.Pool({ connectionString: resources.postgres.url, max: 4 });
    pool.on('error', ignoreIdleClientError);
    const redis = await redisClient(resources.redis.url);
    cleanups.push(() => pool.end(), async () => redis.destroy());
    const stores = {
      postgres: new PostgresMarks(pool, { keyPrefix: 'grpc:' }),
      redis: new RedisMarks((args) => redis.sendCommand(args), { keyPrefix: 'grpc:' }),
    };
    for (const [kind, marks] of Object.entries(stores)) {
      const { store, client } = await service({ interceptors: [fencingInterceptor({ marks })] });
      assert.equal((await put(client, 'r', 'a', fenced('mw-store', TWO_53 + 1n))).error, null);
      const { error } = await put(client, 'r', 'b', fenced('mw-store', TWO_53));
      assert.equal(error?.code, grpc.status.FAILED_PRECONDITION, kind);
      assert.equal(error.details, `stale fencing token ${TWO_53} for lease "mw-store": the highest seen is ${TWO_53 + 1n}`);
      assert.equal(store.value('r'), 'a');
    }
    const { rows } = await pool.query("SELECT token FROM leased.fence_marks WHERE resource = 'grpc:mw-store'");
    assert.deepEqual(rows, [{ token: String(TWO_53 + 1n) }]);
    assert.equal(await redis.sendCommand(['GET', 'grpc:mw-store']), String(TWO_53 + 1n));
  });

  test('a store that fails makes the call UNAVAILABLE, and the handler does not run', async () => {
    // Nothing listens on port 1 of loopback; and a Redis key that holds no token.
    const unreachable = new pg.Pool({ connectionString: 'postgresql://postgres@127.0.0.1:1/postgres', max: 1 });
    unreachable.on('error', ignoreIdleClientError);
    const redis = await redisClient(resources.redis.url);
    cleanups.push(() => unreachable.end(), async () => redis.destroy());
    await redis.sendCommand(['SET', 'broken:mw-fail', 'not a token']);
    for (const marks of [
      new PostgresMarks(unreachable),
      new RedisMarks((args) => redis.sendCommand(args), { keyPrefix: 'broken:' }),
    ]) {
      const { store, client } = await service({ interceptors: [fencingInterceptor({ marks })] });
      const { error } = await put(client, 'r', 'v', fenced('mw-fail', 5));
      assert.equal(error?.code, grpc.status.UNAVAILABLE, String(error));
      assert.match(error.details, /^the fencing mark store failed: /);
      assert.equal(store.value('r'), undefined);
    }
  });
});

describe("the interceptor, Kleppmann's scenario", { concurrency: 2 }, () => {
  const markStores = {
    'in-process': () => new InProcessMarks(),
    postgres: () => {
      const pool = new pg.Pool({ connectionString: resources.postgres.url, max: 2 });
      pool.on('error', ignoreIdleClientError);
      cleanups.push(() => pool.end());
      return new PostgresMarks(pool, { keyPrefix: 'k:' });
    },
    redis: () => new RedisMarks((args) => redisForMarks.sendCommand(args), { keyPrefix: 'k:' }),
  };
  let redisForMarks;
  before(async () => {
    redisForMarks = await redisClient(resources.redis.url);
    cleanups.push(async () => redisForMarks.destroy());
  });

  for (const [kind, marks] of Object.entries(markStores)) {
    test(`gRPC middleware (marks ${kind}), fencing on`, { timeout: 60_000 }, async (t) => {
      const { store } = await service({ interceptors: [fencingInterceptor({ marks: marks() })] });
      const resource = `kleppmann-grpc-${kind}`;
      const writer = { adapter: 'grpc', fenced: true, resource, storeTarget: store.target };
      const outcome = await kleppmann({
        target: resources.stack.target,
        lease: resource,
        writer,
        read: () => readResource({ ...writer, store }),
      });
      assertKleppmann(t, `grpc middleware (marks ${kind})`, true, outcome);
    });
  }

  test('a gRPC service without the middleware, fencing off', { timeout: 60_000 }, async (t) => {
    const { store } = await service({});
    const resource = 'kleppmann-grpc-off';
    const writer = { adapter: 'grpc', fenced: false, resource, storeTarget: store.target };
    const outcome = await kleppmann({
      target: resources.stack.target,
      lease: resource,
      writer,
      read: () => readResource({ ...writer, store }),
    });
    assertKleppmann(t, 'grpc middleware', false, outcome);
  });

});

describe('the interceptor, concurrent writers', () => {
  test('paused at random, gRPC middleware: accepted tokens only increase', { timeout: 60_000 }, async (t) => {
    const { store } = await service({ interceptors: [fencingInterceptor()] });
    const resource = 'concurrent-grpc';
    const writer = { adapter: 'grpc', fenced: true, resource, storeTarget: store.target };
    const outcome = await concurrentWriters({ target: resources.stack.target, lease: resource, writer });
    assertOnlyIncreasing(t, 'grpc middleware', outcome, store.history(resource));
  });
});
