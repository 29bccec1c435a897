// What the fencing tests write to, all real: a scratch PostgreSQL (the repository's
// scripts/postgres-scratch.sh) with leased_fencing.sql applied, a redis-server of its own as the
// resource with the leased_fencing Functions library loaded, and a small gRPC "Store" service
// (JSON over real gRPC, no proto) that a fencingInterceptor can guard. Plus the writers that
// write to each of them with a lease's token, shared by the tests and fencing-holder.js.

import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before } from 'node:test';

import grpc from '@grpc/grpc-js';
import pg from 'pg';
import { createClient } from 'redis';

import { RedisFencing, StaleTokenError, fencePostgres, postgresFencingError } from 'leased-client';
import { freePort, kill, startProcess, startRedis, startStack, waitUntilReady } from './stack.js';

export function repoPath(path) {
  const repo = process.env.LEASED_REPO;
  if (!repo) throw new Error('LEASED_REPO is not set: run the tests with clients/node/test.sh');
  return join(repo, path);
}

/** The tables the writers use; applied after leased_fencing.sql. */
const SCHEMA = `
  CREATE TABLE IF NOT EXISTS kv (key text PRIMARY KEY, value text NOT NULL);
  -- Every write that committed, in commit order (ids are taken under the fence's or the row's
  -- lock, so they follow the order in which the writes landed).
  CREATE TABLE IF NOT EXISTS writes (id bigserial PRIMARY KEY, resource text NOT NULL,
                                     token bigint NOT NULL, value text NOT NULL);
  -- The row-level form: the fencing_token column guarded by the trigger, and the same table
  -- without the trigger for the scenario with fencing off.
  CREATE TABLE IF NOT EXISTS rows_fenced (key text PRIMARY KEY, value text NOT NULL,
                                          fencing_token bigint NOT NULL);
  CREATE OR REPLACE TRIGGER rows_fenced_fencing BEFORE INSERT OR UPDATE ON rows_fenced
    FOR EACH ROW EXECUTE FUNCTION leased.fencing_token_guard();
  CREATE TABLE IF NOT EXISTS rows_plain (key text PRIMARY KEY, value text NOT NULL,
                                         fencing_token bigint NOT NULL);
`;

/** A scratch PostgreSQL with the fencing SQL and the tables applied. */
export async function startPostgres() {
  const dir = mkdtempSync(join(tmpdir(), 'leased-node-pg-'));
  const port = await freePort();
  const url = `postgresql://postgres@127.0.0.1:${port}/postgres`;
  const log = join(tmpdir(), `leased-node-pg-${port}.log`);
  const server = startProcess('bash', [repoPath('scripts/postgres-scratch.sh'), dir, String(port)], log);
  const stop = async () => {
    await kill(server, 'SIGINT'); // the script execs postgres: SIGINT is a fast shutdown
    rmSync(dir, { recursive: true, force: true });
    rmSync(log, { force: true });
  };
  try {
    await waitUntilReady(server, log, 'postgres', async () => {
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      await client.end();
    });
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await client.query(readFileSync(repoPath('fencing/postgres/leased_fencing.sql'), 'utf8'));
      await client.query(SCHEMA);
    } finally {
      await client.end();
    }
  } catch (error) {
    await stop();
    throw error;
  }
  return { url, stop };
}

/** A node-redis client of `url`, connected. */
export async function redisClient(url) {
  const client = createClient({ url });
  client.on('error', () => {}); // reported by the command that fails
  await client.connect();
  return client;
}

/** A redis-server of its own, as the resource, with the leased_fencing library loaded. */
export async function startResourceRedis() {
  const dir = mkdtempSync(join(tmpdir(), 'leased-node-resource-'));
  const redis = await startRedis(dir);
  const client = await redisClient(redis.url);
  try {
    const library = readFileSync(repoPath('fencing/redis/leased_fencing.lua'), 'utf8');
    await client.sendCommand(['FUNCTION', 'LOAD', 'REPLACE', library]);
  } finally {
    client.destroy();
  }
  return {
    url: redis.url,
    stop: async () => {
      await kill(redis.process);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * The resources of a fencing test file, started before its tests and stopped after them:
 * `leased` (the stack), `postgres` and `redis` (the resource), each {url|target, stop}.
 */
export function fencingResources() {
  const resources = { stack: null, postgres: null, redis: null };
  before(async () => {
    const started = await Promise.allSettled([startStack(), startPostgres(), startResourceRedis()]);
    // Keep what did start, so that `after` stops it even when another part failed.
    [resources.stack, resources.postgres, resources.redis] = started.map((result) => result.value ?? null);
    const failed = started.find((result) => result.status === 'rejected');
    if (failed) throw failed.reason;
  });
  after(async () => {
    await Promise.all([resources.stack?.stop(), resources.postgres?.stop(), resources.redis?.stop()]);
  });
  return resources;
}

// The Store service: Put({resource, value}) -> {previous}, and Read({resource}) -> a stream of
// {value}, to show that streams are checked when they start. JSON messages: a real gRPC service
// over TCP, without a proto to compile.
function jsonMethod(name, { responseStream }) {
  const serialize = (value) => Buffer.from(JSON.stringify(value));
  const deserialize = (buffer) => JSON.parse(buffer.toString());
  return {
    path: `/fencingtest.Store/${name}`,
    requestStream: false,
    responseStream,
    requestSerialize: serialize,
    requestDeserialize: deserialize,
    responseSerialize: serialize,
    responseDeserialize: deserialize,
  };
}
export const STORE_SERVICE = {
  put: jsonMethod('Put', { responseStream: false }),
  read: jsonMethod('Read', { responseStream: true }),
};
export const StoreClient = grpc.makeGenericClientConstructor(STORE_SERVICE, 'Store');

/**
 * A running Store service on a free loopback port, with `interceptors` (none: not fenced).
 * `history(resource)` is the tokens of the writes it accepted, in the order they landed;
 * `value(resource)` the current value. `beforeWrite(request)` may pause a handler mid-call.
 */
export async function startStoreService({ interceptors = [], beforeWrite = async () => {} } = {}) {
  const values = new Map();
  const histories = new Map();
  const server = new grpc.Server({ interceptors });
  server.addService(STORE_SERVICE, {
    put(call, callback) {
      (async () => {
        await beforeWrite(call.request);
        const { resource, value } = call.request;
        const token = call.metadata.get('leased-fencing-token')[0] ?? '0';
        const previous = values.get(resource) ?? null;
        values.set(resource, value);
        if (!histories.has(resource)) histories.set(resource, []);
        histories.get(resource).push(BigInt(token));
        return { previous };
      })().then(
        (reply) => callback(null, reply),
        (error) => callback(error),
      );
    },
    read(call) {
      call.write({ value: values.get(call.request.resource) ?? null });
      call.end();
    },
  });
  const port = await new Promise((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (error, bound) =>
      error ? reject(error) : resolve(bound),
    ),
  );
  return {
    target: `127.0.0.1:${port}`,
    history: (resource) => histories.get(resource) ?? [],
    value: (resource) => values.get(resource),
    stop: () => new Promise((resolve) => server.tryShutdown(() => resolve())),
  };
}

/**
 * A writer of one adapter: `write(lease, value)` writes `value` to `resource`, fenced with the
 * lease's token or (fenced false) plainly, and resolves to {accepted: true} or, when the resource
 * refused a stale token, {accepted: false, mark}. Other errors reject.
 *
 * adapter: 'postgres-fence' (leased.fence in the transaction), 'postgres-row' (the
 * fencing_token column and its trigger), 'redis' (leased_set), 'grpc' (a Store service call with
 * the lease's fencing metadata; `storeTarget` is a fenced service or, fenced false, a plain one).
 */
export async function openWriter({ adapter, fenced, resource, postgresUrl, redisUrl, storeTarget }) {
  if (adapter === 'postgres-fence' || adapter === 'postgres-row') {
    const db = new pg.Client({ connectionString: postgresUrl });
    await db.connect();
    const writeRow = async (lease, value) => {
      if (adapter === 'postgres-fence') {
        if (fenced) await fencePostgres(db, resource, lease.fencingToken);
        await db.query(
          'INSERT INTO kv (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value',
          [resource, value],
        );
      } else {
        const table = fenced ? 'rows_fenced' : 'rows_plain';
        await db.query(
          `INSERT INTO ${table} (key, value, fencing_token) VALUES ($1, $2, $3::bigint)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value, fencing_token = excluded.fencing_token`,
          [resource, value, lease.fencingToken.toString()],
        );
      }
      await db.query('INSERT INTO writes (resource, token, value) VALUES ($1, $2::bigint, $3)', [
        resource,
        lease.fencingToken.toString(),
        value,
      ]);
    };
    return {
      async write(lease, value) {
        await db.query('BEGIN');
        try {
          await writeRow(lease, value);
          await db.query('COMMIT');
          return { accepted: true };
        } catch (error) {
          await db.query('ROLLBACK');
          const fencingError = postgresFencingError(error);
          if (fencingError instanceof StaleTokenError) return { accepted: false, mark: fencingError.mark };
          throw fencingError;
        }
      },
      close: () => db.end(),
    };
  }
  if (adapter === 'redis') {
    const client = await redisClient(redisUrl);
    const fencing = new RedisFencing((args) => client.sendCommand(args));
    // The value carries its token, so that each write's GET (the value it replaced) tells the
    // order in which the writes landed.
    return {
      async write(lease, value) {
        const stored = `${lease.fencingToken}:${value}`;
        try {
          const previous = fenced
            ? await fencing.set(`fence:{${resource}}`, `{${resource}}:value`, lease.fencingToken, stored, 'GET')
            : await client.sendCommand(['SET', `{${resource}}:value`, stored, 'GET']);
          return { accepted: true, previous };
        } catch (error) {
          if (error instanceof StaleTokenError) return { accepted: false, mark: error.mark };
          throw error;
        }
      },
      close: async () => client.destroy(),
    };
  }
  if (adapter === 'grpc') {
    const store = new StoreClient(storeTarget, grpc.credentials.createInsecure(), {
      'grpc.use_local_subchannel_pool': 1,
    });
    return {
      write: (lease, value) =>
        new Promise((resolve, reject) => {
          store.put({ resource, value }, lease.fencingMetadata(), { deadline: Date.now() + 10_000 }, (error, reply) => {
            if (!error) resolve({ accepted: true, previous: reply.previous });
            else if (error.code === grpc.status.FAILED_PRECONDITION) {
              resolve({ accepted: false, mark: BigInt(/the highest seen is ([0-9]+)/.exec(error.details)[1]), details: error.details });
            } else reject(error);
          });
        }),
      close: async () => store.close(),
    };
  }
  throw new Error(`unknown adapter ${adapter}`);
}

/** What the resource holds for `resource` now: the value, and the tokens of the writes it took. */
export async function readResource({ adapter, fenced, resource, postgresUrl, redisUrl, store }) {
  if (adapter === 'grpc') {
    return { value: store.value(resource), history: store.history(resource) };
  }
  if (adapter === 'redis') {
    const client = await redisClient(redisUrl);
    try {
      const stored = await client.sendCommand(['GET', `{${resource}}:value`]);
      return { value: stored === null ? undefined : String(stored).replace(/^[0-9]+:/, '') };
    } finally {
      client.destroy();
    }
  }
  const db = new pg.Client({ connectionString: postgresUrl });
  await db.connect();
  try {
    const table = adapter === 'postgres-fence' ? 'kv' : fenced ? 'rows_fenced' : 'rows_plain';
    const { rows } = await db.query(`SELECT value FROM ${table} WHERE key = $1`, [resource]);
    const writes = await db.query('SELECT token FROM writes WHERE resource = $1 ORDER BY id', [resource]);
    return { value: rows[0]?.value, history: writes.rows.map((row) => BigInt(row.token)) };
  } finally {
    await db.end();
  }
}
