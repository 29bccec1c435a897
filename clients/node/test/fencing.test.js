// The fencing helpers for PostgreSQL (leased.fence in the writer's transaction, and the
// fencing_token row trigger) and for Redis as the resource (the leased_fencing library), against
// a real leased, a real PostgreSQL and a real redis-server: Kleppmann's scenario with a holder
// process stopped past its lease, with fencing on and off; concurrent writers paused at random;
// bad input; the 2^63 - 1 boundary; tokens above 2^53 kept exact.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import pg from 'pg';

import {
  FENCING_TOKEN_METADATA,
  FencingInputError,
  MAX_FENCING_TOKEN,
  RedisFencing,
  StaleTokenError,
  fencePostgres,
  fencingMetadata,
  postgresFencingError,
  toFencingToken,
} from 'leased-client';
import { fencingResources, readResource, redisClient } from './fencing-stack.js';
import { assertKleppmann, assertOnlyIncreasing, concurrentWriters, kleppmann } from './fencing-scenarios.js';

const resources = fencingResources();
const TWO_53 = 2n ** 53n;

/** A pg client for one test, ended after it. */
async function withPostgres(use) {
  const db = new pg.Client({ connectionString: resources.postgres.url });
  await db.connect();
  try {
    return await use(db);
  } finally {
    await db.end();
  }
}

/** A RedisFencing over a node-redis client for one test, and that client. */
async function withRedis(use) {
  const client = await redisClient(resources.redis.url);
  try {
    return await use(new RedisFencing((args) => client.sendCommand(args)), client);
  } finally {
    client.destroy();
  }
}

test('tokens: BigInt, decimal strings and safe integers; anything else refused, never rounded', () => {
  assert.equal(toFencingToken(1n), 1n);
  assert.equal(toFencingToken('1800000000000000'), 1_800_000_000_000_000n);
  assert.equal(toFencingToken(Number.MAX_SAFE_INTEGER), TWO_53 - 1n);
  assert.equal(toFencingToken('9223372036854775807'), MAX_FENCING_TOKEN);
  assert.equal(toFencingToken(TWO_53 + 1n), TWO_53 + 1n);
  assert.equal(toFencingToken('9007199254740993'), TWO_53 + 1n);
  for (const bad of [0, -5, 0n, -1n, 2n ** 63n, '0', '-5', '05', '12a', ' 5', '', '9223372036854775808',
    1.5, NaN, Infinity, null, undefined, {}]) {
    assert.throws(() => toFencingToken(bad), (error) => error instanceof FencingInputError && error.argument === 'token',
      `accepted ${String(bad)}`);
  }
  // 2^53 + 1 as a Number is already 2^53: refused, with the way out in the message.
  assert.throws(() => toFencingToken(2 ** 53 + 1), /may have been rounded: pass a BigInt or a decimal string/);
  assert.throws(() => toFencingToken('x'.repeat(100)), (error) => error.message.length < 150);
  // The metadata builder checks both entries too.
  assert.deepEqual(fencingMetadata('orders', TWO_53 + 1n).get(FENCING_TOKEN_METADATA), ['9007199254740993']);
  assert.throws(() => fencingMetadata('', 5n), (error) => error instanceof FencingInputError && error.argument === 'name');
  assert.throws(() => fencingMetadata('orders', 2 ** 53 + 1), FencingInputError);
});

// The scenarios use leases and resource keys of their own: they run side by side (a stopped holder
// waits for nothing but its own lease to expire), three at a time, so that the burst of holder
// processes starting does not starve the timing-sensitive tests of other files beside them.
describe("Kleppmann's scenario", { concurrency: 3 }, () => {
  for (const adapter of ['postgres-fence', 'postgres-row', 'redis']) {
    for (const fenced of [true, false]) {
      test(`${adapter}, fencing ${fenced ? 'on' : 'off'}`, { timeout: 60_000 }, async (t) => {
        const resource = `kleppmann-${adapter}-${fenced}`;
        const writer = {
          adapter,
          fenced,
          resource,
          postgresUrl: resources.postgres.url,
          redisUrl: resources.redis.url,
        };
        const outcome = await kleppmann({
          target: resources.stack.target,
          lease: resource,
          writer,
          read: () => readResource(writer),
        });
        assertKleppmann(t, adapter, fenced, outcome);
      });
    }
  }
});

describe('PostgreSQL', () => {
  test('fencePostgres records the mark, refuses a smaller token with StaleTokenError, passes an equal one', () =>
    withPostgres(async (db) => {
      await db.query('BEGIN');
      assert.equal(await fencePostgres(db, 'pg-basic', 1_000n), 1_000n);
      await db.query('COMMIT');
      await db.query('BEGIN');
      assert.equal(await fencePostgres(db, 'pg-basic', '1000'), 1_000n); // equal passes
      await db.query('COMMIT');
      await db.query('BEGIN');
      const error = await fencePostgres(db, 'pg-basic', 999).catch((e) => e);
      await db.query('ROLLBACK');
      assert.ok(error instanceof StaleTokenError, String(error));
      assert.deepEqual([error.token, error.mark, error.resource], [999n, 1_000n, 'pg-basic']);
      assert.equal(error.cause.code, 'LF001');
      assert.match(error.message, /stale fencing token 999 for "pg-basic": the highest seen is 1000/);
    }));

  test('bad input: refused before sending, or 22023 from the server, as FencingInputError', () =>
    withPostgres(async (db) => {
      for (const bad of [0, -1n, '05', 2n ** 63n, 2 ** 53 + 1]) {
        const error = await fencePostgres(db, 'pg-bad', bad).catch((e) => e);
        assert.ok(error instanceof FencingInputError && error.argument === 'token', `${bad}: ${error}`);
      }
      for (const [resource, why] of [['', /non-empty/], ['r'.repeat(1025), /at most 1024 bytes/]]) {
        const error = await fencePostgres(db, resource, 5n).catch((e) => e);
        assert.ok(error instanceof FencingInputError, String(error));
        assert.equal(error.argument, 'resource');
        assert.equal(error.cause.code, '22023');
        assert.match(error.message, why);
      }
      // The row trigger: a token of 0 is 22023 naming the column.
      const zero = await db
        .query("INSERT INTO rows_fenced (key, value, fencing_token) VALUES ('pg-bad', 'v', 0)")
        .catch((e) => postgresFencingError(e));
      assert.ok(zero instanceof FencingInputError && zero.argument === 'fencing_token', String(zero));
    }));

  test('the boundary: 2^63 - 1 accepted and kept; tokens above 2^53 compared exactly', () =>
    withPostgres(async (db) => {
      assert.equal(await fencePostgres(db, 'pg-max', MAX_FENCING_TOKEN), MAX_FENCING_TOKEN);
      const below = await fencePostgres(db, 'pg-max', MAX_FENCING_TOKEN - 1n).catch((e) => e);
      assert.ok(below instanceof StaleTokenError);
      assert.equal(below.mark, MAX_FENCING_TOKEN);
      // 2^53 + 1 and 2^53 are one double apart: as doubles they would be equal and pass.
      assert.equal(await fencePostgres(db, 'pg-2^53', TWO_53 + 1n), TWO_53 + 1n);
      const error = await fencePostgres(db, 'pg-2^53', TWO_53).catch((e) => e);
      assert.ok(error instanceof StaleTokenError, String(error));
      assert.deepEqual([error.token, error.mark], [TWO_53, TWO_53 + 1n]);
    }));

  test('the row trigger refuses an UPDATE with a smaller token (LF001 as StaleTokenError)', () =>
    withPostgres(async (db) => {
      const upsert = (token, value) =>
        db.query(
          `INSERT INTO rows_fenced (key, value, fencing_token) VALUES ('pg-row', $1, $2::bigint)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value, fencing_token = excluded.fencing_token`,
          [value, token.toString()],
        );
      await upsert(TWO_53 + 1n, 'newer');
      const error = await upsert(TWO_53, 'older').catch((e) => postgresFencingError(e));
      assert.ok(error instanceof StaleTokenError, String(error));
      assert.deepEqual([error.token, error.mark, error.resource], [TWO_53, TWO_53 + 1n, 'a row of rows_fenced']);
      const { rows } = await db.query("SELECT value, fencing_token FROM rows_fenced WHERE key = 'pg-row'");
      assert.deepEqual(rows, [{ value: 'newer', fencing_token: String(TWO_53 + 1n) }]);
    }));

  for (const adapter of ['postgres-fence', 'postgres-row']) {
    test(`concurrent writers paused at random, ${adapter}: accepted tokens only increase`, { timeout: 60_000 }, async (t) => {
      const resource = `concurrent-${adapter}`;
      const writer = { adapter, fenced: true, resource, postgresUrl: resources.postgres.url };
      const outcome = await concurrentWriters({ target: resources.stack.target, lease: resource, writer });
      const { history } = await readResource(writer);
      assertOnlyIncreasing(t, adapter, outcome, history);
    });
  }
});

describe('Redis as the resource', () => {
  test('fenced set, hset, del and fence: a smaller token is refused and writes nothing', () =>
    withRedis(async (fencing, client) => {
      assert.equal(await fencing.set('fence:{r}', '{r}:a', 10n, 'ten'), 'OK');
      assert.equal(await fencing.hset('fence:{r}', '{r}:h', '10', { f: '1', g: '2' }), 2);
      assert.equal(await fencing.fence('fence:{r}', 11), 11n);
      const stale = await fencing.set('fence:{r}', '{r}:a', 10n, 'late').catch((e) => e);
      assert.ok(stale instanceof StaleTokenError, String(stale));
      assert.deepEqual([stale.token, stale.mark, stale.resource], [10n, 11n, 'fence:{r}']);
      assert.match(stale.cause.message, /^STALETOKEN /);
      assert.equal(await client.sendCommand(['GET', '{r}:a']), 'ten');
      assert.ok((await fencing.hset('fence:{r}', '{r}:h', 9n, ['f', 'x']).catch((e) => e)) instanceof StaleTokenError);
      assert.ok((await fencing.del('fence:{r}', ['{r}:a'], 9n).catch((e) => e)) instanceof StaleTokenError);
      assert.equal(await client.sendCommand(['HGET', '{r}:h', 'f']), '1');
      assert.equal(await fencing.del('fence:{r}', ['{r}:a', '{r}:h'], 11n), 2);
      assert.equal(await client.sendCommand(['EXISTS', '{r}:a', '{r}:h']), 0);
    }));

  test('bad input: refused before sending; the library answers BADTOKEN to a raw bad token', () =>
    withRedis(async (fencing, client) => {
      for (const bad of [0, -5, '05', 2n ** 63n, 2 ** 53 + 1]) {
        const error = await fencing.set('fence:{bad}', '{bad}:a', bad, 'v').catch((e) => e);
        assert.ok(error instanceof FencingInputError && error.argument === 'token', `${bad}: ${error}`);
      }
      assert.ok((await fencing.hset('fence:{bad}', '{bad}:h', 1n, ['odd']).catch((e) => e)) instanceof FencingInputError);
      assert.ok((await fencing.del('fence:{bad}', [], 1n).catch((e) => e)) instanceof FencingInputError);
      const raw = await client.sendCommand(['FCALL', 'leased_fence', '1', 'fence:{bad}', '9223372036854775808']).catch((e) => e);
      assert.match(raw.message, /^BADTOKEN token must be a fencing token from 1 to 9223372036854775807/);
      assert.equal(await client.sendCommand(['EXISTS', 'fence:{bad}', '{bad}:a']), 0);
    }));

  test('the boundary: 2^63 - 1 accepted; tokens above 2^53 compared exactly', () =>
    withRedis(async (fencing) => {
      assert.equal(await fencing.fence('fence:{max}', MAX_FENCING_TOKEN), MAX_FENCING_TOKEN);
      assert.ok((await fencing.fence('fence:{max}', MAX_FENCING_TOKEN - 1n).catch((e) => e)) instanceof StaleTokenError);
      assert.equal(await fencing.set('fence:{53}', '{53}:a', TWO_53 + 1n, 'newer'), 'OK');
      const error = await fencing.set('fence:{53}', '{53}:a', String(TWO_53), 'older').catch((e) => e);
      assert.ok(error instanceof StaleTokenError, String(error));
      assert.deepEqual([error.token, error.mark], [TWO_53, TWO_53 + 1n]);
    }));

  test('concurrent writers paused at random, redis: accepted tokens only increase', { timeout: 60_000 }, async (t) => {
    const resource = 'concurrent-redis';
    const writer = { adapter: 'redis', fenced: true, resource, redisUrl: resources.redis.url };
    const outcome = await concurrentWriters({ target: resources.stack.target, lease: resource, writer });
    // Each accepted SET answered the value it replaced ("<token>:<value>"): following those links
    // from the first write gives the order in which the writes landed.
    const after = new Map(
      outcome.writes.filter((w) => w.accepted).map((w) => [w.previous === null ? 'none' : w.previous.split(':')[0], w.token]),
    );
    const history = [];
    for (let at = after.get('none'); at !== undefined && history.length <= after.size; at = after.get(String(at))) {
      history.push(at);
    }
    assertOnlyIncreasing(t, 'redis', outcome, history);
  });
});

test('the fencing example writes to all three with its token, and reports stale refusals', { timeout: 60_000 }, async (t) => {
  const example = fileURLToPath(new URL('node_modules/leased-client/examples/fencing.js', import.meta.url));
  const name = 'fencing-example';
  const run = () =>
    promisify(execFile)(
      process.execPath,
      [example, '--target', resources.stack.target, '--name', name,
        '--postgres', resources.postgres.url, '--redis', resources.redis.url],
      { timeout: 30_000 },
    ).then(({ stdout }) => ({ code: 0, stdout }), (error) => ({ code: error.code, stdout: error.stdout, stderr: error.stderr }));

  const first = await run();
  assert.equal(first.code, 0, `${first.stdout}${first.stderr}`);
  const token = BigInt(/postgres: written with fencing token ([0-9]+)/.exec(first.stdout)[1]);
  assert.match(first.stdout, new RegExp(`redis: written with fencing token ${token}`));
  assert.match(first.stdout, new RegExp(`grpc: a call with the older token ${token - 1n}: FAILED_PRECONDITION: ` +
    `stale fencing token ${token - 1n} for lease "${name}": the highest seen is ${token}`));
  assert.match(first.stdout, new RegExp(`grpc: written with fencing token ${token}`));

  // A newer holder (here: the largest token there is) wrote to PostgreSQL and Redis meanwhile.
  await withPostgres((db) => fencePostgres(db, `report:${name}`, MAX_FENCING_TOKEN));
  await withRedis((fencing) => fencing.fence(`fence:{${name}}`, MAX_FENCING_TOKEN));
  const second = await run();
  assert.equal(second.code, 1, `${second.stdout}${second.stderr}`);
  assert.match(second.stdout, /postgres: refused, stale fencing token [0-9]+ for "report:fencing-example": the highest seen is 9223372036854775807/);
  assert.match(second.stdout, /redis: refused, stale fencing token [0-9]+ for "fence:\{fencing-example\}": the highest seen is 9223372036854775807/);
  t.diagnostic(second.stdout.trim().split('\n').join(' | '));
});
