#!/usr/bin/env node
// Fencing: one lease, and a write to each kind of fenced resource with its token, so that each
// refuses the write if a newer holder of the lease has written since (the holder was paused past
// its lease, say). PostgreSQL checks the token in the writer's transaction, Redis in the same
// atomic call as the write, and a gRPC service in a server interceptor before the handler runs.
//
//   node node_modules/leased-client/examples/fencing.js --target 127.0.0.1:50051 \
//     --postgres postgresql://localhost/app --redis redis://127.0.0.1:6379
//
// Needs the `pg` and `redis` packages beside leased-client (npm install pg redis), the
// repository's fencing/postgres/leased_fencing.sql applied to the database, and its
// fencing/redis/leased_fencing.lua loaded into Redis. Exit status: 0 every write landed, 1 one
// was refused as stale, 2 not granted.

import { parseArgs } from 'node:util';

import grpc from '@grpc/grpc-js';
import pg from 'pg';
import { createClient } from 'redis';

import {
  LeaseClient,
  NotGranted,
  RedisFencing,
  StaleTokenError,
  fencePostgres,
  fencingInterceptor,
  fencingMetadata,
} from 'leased-client';

const { values: args } = parseArgs({
  options: {
    target: { type: 'string', default: '127.0.0.1:50051' },
    name: { type: 'string', default: 'nightly-report' },
    postgres: { type: 'string', default: 'postgresql://localhost/postgres' },
    redis: { type: 'string', default: 'redis://127.0.0.1:6379' },
  },
});

// A gRPC service of your own, made a fenced resource by the interceptor: here a Reports service
// with JSON messages (no proto to compile), served and called by this same program.
const json = { serialize: (value) => Buffer.from(JSON.stringify(value)), deserialize: (data) => JSON.parse(data) };
const REPORTS = {
  put: {
    path: '/example.Reports/Put',
    requestStream: false,
    responseStream: false,
    requestSerialize: json.serialize,
    requestDeserialize: json.deserialize,
    responseSerialize: json.serialize,
    responseDeserialize: json.deserialize,
  },
};

const client = new LeaseClient(args.target);
try {
  process.exitCode = await writeEverywhere();
} finally {
  await client.close();
}

async function writeEverywhere() {
  const lease = await client.acquire(args.name, { ttlMs: 15_000, waitMs: 60_000 });
  if (lease instanceof NotGranted) {
    console.log(`${args.name} is busy: held by ${lease.holder}`);
    return 2;
  }
  let refused = false;
  try {
    for (const [resource, write] of [
      ['postgres', writePostgres],
      ['redis', writeRedis],
      ['grpc', callFencedService],
    ]) {
      try {
        await write(lease, `report by token ${lease.fencingToken}`);
        console.log(`${resource}: written with fencing token ${lease.fencingToken}`);
      } catch (error) {
        if (!(error instanceof StaleTokenError)) throw error;
        // A newer holder wrote: this one lost the lease. Stop; never retry with this token.
        console.log(`${resource}: refused, ${error.message}`);
        refused = true;
      }
    }
  } finally {
    await lease.release();
  }
  return refused ? 1 : 0;
}

async function writePostgres(lease, body) {
  const db = new pg.Client({ connectionString: args.postgres });
  await db.connect();
  try {
    await db.query('CREATE TABLE IF NOT EXISTS fencing_example (name text PRIMARY KEY, body text NOT NULL)');
    await db.query('BEGIN');
    try {
      // Refuses a token below the largest seen for this resource key, and holds the key's lock
      // until COMMIT: the check and the write commit or fail together.
      await fencePostgres(db, `report:${lease.name}`, lease.fencingToken);
      await db.query(
        'INSERT INTO fencing_example (name, body) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET body = $2',
        [lease.name, body],
      );
      await db.query('COMMIT');
    } catch (error) {
      await db.query('ROLLBACK');
      throw error;
    }
  } finally {
    await db.end();
  }
}

async function writeRedis(lease, body) {
  const redis = createClient({ url: args.redis });
  await redis.connect();
  try {
    // Any client works: RedisFencing only needs a function that sends one command.
    const fencing = new RedisFencing((command) => redis.sendCommand(command));
    // The mark key and the data share a hash tag: one slot in a Cluster.
    await fencing.set(`fence:{${lease.name}}`, `{${lease.name}}:report`, lease.fencingToken, body);
  } finally {
    redis.destroy();
  }
}

async function callFencedService(lease, body) {
  // The service: the interceptor refuses a call whose token is below the largest seen for its
  // lease name (marks kept in this process by default; PostgresMarks or RedisMarks to share them).
  const server = new grpc.Server({ interceptors: [fencingInterceptor()] });
  server.addService(REPORTS, { put: (call, callback) => callback(null, { stored: call.request.body }) });
  const port = await new Promise((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))),
  );
  const Reports = grpc.makeGenericClientConstructor(REPORTS, 'Reports');
  const reports = new Reports(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const put = (metadata) =>
    new Promise((resolve, reject) => reports.put({ body }, metadata, (e, reply) => (e ? reject(e) : resolve(reply))));
  try {
    // The caller: the lease's name and token ride in the call's metadata.
    await put(lease.fencingMetadata());
    // An older token for the same lease is refused, and the handler does not run.
    const older = lease.fencingToken - 1n;
    const answer = await put(fencingMetadata(lease.name, older)).then(
      () => 'accepted',
      (error) => `${grpc.status[error.code]}: ${error.details}`,
    );
    console.log(`grpc: a call with the older token ${older}: ${answer}`);
  } finally {
    reports.close();
    server.forceShutdown();
  }
}
