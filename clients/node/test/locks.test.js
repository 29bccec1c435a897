// The reentrant lock and the read-write lock against a real leased on a real redis-server:
// nesting costs no call and only the outermost release ends the lease, a loss ends every level,
// readers share and writers wait in one queue with them, a handle holds one grant at a time.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import {
  Lease,
  LeaseClient,
  LeaseLostError,
  NotGranted,
  ReadWriteLock,
  ReentrantLock,
} from 'leased-client';
import { recordCalls } from './faults.js';
import { startStack, waitFor } from './stack.js';

const channelOptions = { 'grpc.use_local_subchannel_pool': 1 };
let stack;
/** `a` records its calls; `b` and `c` stand for other processes. */
let a, b, c, recorder;

before(async () => {
  stack = await startStack();
  recorder = recordCalls();
  a = new LeaseClient(stack.target, { channelOptions, interceptors: [recorder.interceptor] });
  b = new LeaseClient(stack.target, { channelOptions });
  c = new LeaseClient(stack.target, { channelOptions });
});

after(async () => {
  await Promise.all([a, b, c].map((client) => client?.close()));
  await stack?.stop();
});

/** Calls of `method` that `a` sent since `since` (an index into its recorded calls). */
function callsSince(since, method) {
  return recorder.calls.slice(since).filter((call) => call.method === method).length;
}

/** True while `promise` has not settled. */
async function pending(promise) {
  const marker = Symbol('pending');
  return (await Promise.race([promise, sleep(0, marker)])) === marker;
}

test('nesting gives the same lease at once, with no call; only the outermost release ends it', { timeout: 30_000 }, async () => {
  const name = 'node-reentrant';
  const since = recorder.calls.length;
  const lock = new ReentrantLock(a, name, { ttlMs: 5000, holder: 'reentrant' });
  const outer = await lock.acquire();
  assert.ok(outer instanceof Lease);
  const started = performance.now();
  const inner = await lock.acquire();
  const innermost = await lock.acquire();
  const nestedMs = performance.now() - started;
  assert.equal(inner, outer);
  assert.equal(innermost, outer);
  assert.equal(lock.holdCount, 3);
  assert.equal(callsSince(since, 'Acquire'), 1, 'a nested acquire called the server');
  assert.ok(nestedMs < 20, `two nested acquires took ${nestedMs} ms`);
  console.log(`two nested acquires took ${nestedMs.toFixed(2)} ms and no call`);

  for (const levelsLeft of [2, 1]) {
    assert.equal(await lock.release(), true);
    assert.equal(lock.holdCount, levelsLeft);
    const description = await b.describe(name);
    assert.equal(description.held, true, `released with ${levelsLeft} levels left`);
    assert.equal(description.holders[0].fencingToken, outer.fencingToken);
    assert.equal(callsSince(since, 'Release'), 0);
  }
  assert.equal(await lock.release(), true, 'the outermost release');
  assert.equal(lock.holdCount, 0);
  assert.equal(lock.lease, null);
  assert.equal(callsSince(since, 'Release'), 1);
  assert.equal((await b.describe(name)).held, false);
  assert.equal(outer.signal.aborted, true, 'the keepalive goes on after the outermost release');
  assert.equal(await lock.release(), false, 'one release too many');
});

test('acquires made while the outermost one waits become nested levels of it', { timeout: 30_000 }, async () => {
  const name = 'node-reentrant-joined';
  const since = recorder.calls.length;
  const holder = await b.acquire(name, { ttlMs: 10_000, holder: 'someone-else' });
  const lock = new ReentrantLock(a, name, { ttlMs: 5000, waitMs: 20_000 });
  const first = lock.acquire();
  const second = lock.acquire();
  await waitFor(async () => (await c.describe(name)).waiters === 1, 10_000, 'the lock to wait');
  assert.ok(await pending(second));
  await holder.release();
  const [outer, nested] = await Promise.all([first, second]);
  assert.ok(outer instanceof Lease);
  assert.equal(nested, outer);
  assert.equal(lock.holdCount, 2);
  assert.equal(callsSince(since, 'Acquire'), 1);
  await lock.release();
  assert.equal((await c.describe(name)).held, true);
  await lock.release();
  assert.equal((await c.describe(name)).held, false);
});

test('a loss ends every level at once, as the plain guard reports it', { timeout: 30_000 }, async () => {
  const name = 'node-reentrant-lost';
  const since = recorder.calls.length;
  const lock = new ReentrantLock(a, name, { ttlMs: 1500 });
  const outer = await lock.acquire();
  const inner = await lock.acquire();
  const lost = once(inner, 'lost');
  await c.revoke(name, 'node test', { fencingToken: outer.fencingToken });
  const [reason] = await lost;
  assert.ok(reason instanceof LeaseLostError);
  assert.match(reason.reason, /^revoked: .*node test/);
  assert.equal(outer.signal.reason, reason, 'every level sees the loss on the signal');
  assert.equal(lock.holdCount, 0);
  assert.equal(lock.lease, null);
  assert.equal(await lock.release(), false, 'the inner level holds nothing');
  assert.equal(await lock.release(), false, 'the outer level holds nothing');

  // The next acquire is a new acquisition, with a new id.
  const again = await lock.acquire();
  assert.ok(again instanceof Lease);
  assert.notEqual(again, outer);
  assert.ok(again.fencingToken > outer.fencingToken);
  const ids = recorder.calls
    .slice(since)
    .filter((call) => call.method === 'Acquire')
    .map((call) => call.request.leaseId);
  assert.equal(ids.length, 2);
  assert.notEqual(ids[0], ids[1]);
  assert.equal(await lock.release(), true);
});

test('readers share, a writer waits for them all, and a reader queued behind it follows it', { timeout: 60_000 }, async () => {
  const name = 'node-read-write';
  const options = { ttlMs: 10_000, waitMs: 30_000 };
  const reader1 = new ReadWriteLock(a, name, { ...options, holder: 'reader-1' });
  const reader2 = new ReadWriteLock(b, name, { ...options, holder: 'reader-2' });
  const writer = new ReadWriteLock(c, name, { ...options, holder: 'writer' });
  const reader3 = new ReadWriteLock(a, name, { ...options, holder: 'reader-3' });
  const reader4 = new ReadWriteLock(b, name, { ...options, holder: 'reader-4' });

  const read1 = await reader1.read();
  const read2 = await reader2.read();
  assert.ok(read1 instanceof Lease && read2 instanceof Lease);
  assert.equal(read1.shared, true);
  let description = await c.describe(name);
  assert.deepEqual(
    description.holders.map((holder) => [holder.holder, holder.shared]),
    [
      ['reader-1', true],
      ['reader-2', true],
    ],
  );

  const writerSeen = [];
  const writing = writer.write({ onWaiting: (waiting) => writerSeen.push(waiting) });
  await waitFor(() => writerSeen.length > 0, 10_000, 'the writer to wait');
  assert.equal(writerSeen[0].position, 1);
  assert.equal(writerSeen[0].held, 2);
  const reader3Seen = [];
  const reading3 = reader3.read({ onWaiting: (waiting) => reader3Seen.push(waiting) });
  await waitFor(() => reader3Seen.length > 0, 10_000, 'the reader behind the writer to wait');
  assert.equal(reader3Seen[0].position, 2);
  // Nobody jumps the waiting writer, not even a reader that only tries once.
  assert.ok((await reader4.read({ waitMs: 0 })) instanceof NotGranted);

  await read1.release();
  await sleep(300);
  assert.ok(await pending(writing), 'the writer was granted while a reader held');
  await read2.release();
  const write = await writing;
  assert.ok(write instanceof Lease);
  assert.equal(write.shared, false);
  assert.ok(write.fencingToken > read2.fencingToken);
  await sleep(300);
  assert.ok(await pending(reading3), 'a reader was granted beside the writer');
  description = await c.describe(name);
  assert.deepEqual(
    description.holders.map((holder) => [holder.holder, holder.shared]),
    [['writer', false]],
  );
  assert.equal(description.waiters, 1);

  await write.release();
  const read3 = await reading3;
  assert.ok(read3 instanceof Lease);
  assert.ok(read3.fencingToken > write.fencingToken, 'a read after a write carries a larger token');
  description = await c.describe(name);
  assert.deepEqual(
    description.holders.map((holder) => [holder.holder, holder.shared]),
    [['reader-3', true]],
  );
  await read3.release();
});

test('a read-write handle holds one grant at a time: no upgrade, downgrade or nesting', { timeout: 30_000 }, async () => {
  const lock = new ReadWriteLock(a, 'node-read-write-one', { ttlMs: 5000 });
  const reading = await lock.read();
  assert.ok(reading instanceof Lease);
  await assert.rejects(lock.write(), /release it first/);
  await assert.rejects(lock.read(), /release it first/);
  await reading.release();
  const writing = await lock.write();
  assert.ok(writing instanceof Lease);
  await assert.rejects(lock.read(), /release it first/);
  await writing.release();
  assert.equal((await b.describe('node-read-write-one')).held, false);
});
