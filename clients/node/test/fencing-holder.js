#!/usr/bin/env node
// A lease holder in a process of its own, which the fencing tests pause with SIGSTOP: it
// acquires a lease from the real leased and writes to a resource with the lease's token
// (fencing-stack.js's writers). One JSON object per line on stdout:
//   {"event":"acquired","token":"<t>"}, {"event":"wrote","token":"<t>","accepted":true|false,...}
//
//   node fencing-holder.js '<json config>'
// config: {target, lease, ttlMs, writer: {adapter, fenced, resource, ...}, mode, ...}
//   mode 'once': acquire, say so, wait for a line on stdin, then write once (Kleppmann's
//     holder 1: the test stops this process after "acquired", and writes the line and resumes it
//     once the lease went to someone else). The write ignores whether the lease is still held,
//     as a process paused mid-write would.
//   mode 'loop': until `durationMs` passed: acquire (waiting), say so, work `workMs` (random,
//     up to that), write, release. The test stops it at random moments.

import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { createInterface } from 'node:readline';

import { LeaseClient, NotGranted } from 'leased-client';
import { openWriter } from './fencing-stack.js';

const config = JSON.parse(process.argv[2]);
const say = (event) => process.stdout.write(`${JSON.stringify(event)}\n`);
const client = new LeaseClient(config.target, { channelOptions: { 'grpc.use_local_subchannel_pool': 1 } });
const writer = await openWriter(config.writer);

async function acquire(waitMs) {
  const lease = await client.acquire(config.lease, { ttlMs: config.ttlMs, waitMs, holder: config.value });
  if (lease instanceof NotGranted) return null;
  lease.on('lost', () => {}); // expected once paused: the write below goes ahead all the same
  say({ event: 'acquired', token: String(lease.fencingToken) });
  return lease;
}

async function write(lease, value) {
  const result = await writer.write(lease, value);
  say({
    event: 'wrote',
    token: String(lease.fencingToken),
    accepted: result.accepted,
    mark: result.mark === undefined ? undefined : String(result.mark),
    previous: result.previous, // null (nothing replaced) kept; undefined (not told) left out
  });
}

try {
  if (config.mode === 'once') {
    const lease = await acquire(0);
    if (!lease) throw new Error(`${config.lease} was not granted`);
    const stdin = createInterface({ input: process.stdin });
    await once(stdin, 'line'); // the test's go-ahead, read after SIGCONT
    stdin.close();
    process.stdin.destroy(); // or the open stdin keeps the process alive
    await write(lease, config.value);
    await lease.release().catch(() => {});
  } else {
    const until = performance.now() + config.durationMs;
    let n = 0;
    while (performance.now() < until) {
      const lease = await acquire(Math.max(1, Math.floor(until - performance.now())));
      if (!lease) break;
      await sleep(Math.random() * config.workMs); // the work before the write: a pause lands here
      n += 1;
      await write(lease, `${config.value}-${n}`);
      await lease.release().catch(() => {});
    }
  }
} finally {
  await writer.close();
  await client.close();
}
