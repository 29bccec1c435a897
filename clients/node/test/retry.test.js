// Own lease ids against a real leased: each acquisition sends its own, an Acquire that ends
// UNAVAILABLE or unanswered is sent again with the same id (and is answered the same grant, or
// keeps its place in the queue), other errors are not retried, and a give-up releases that id.
// Faults come from interceptors that hide a grant from the client and from a TCP proxy whose
// connections the test cuts.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { after, before, test } from 'node:test';

import { ACQUIRE_RETRIES, Lease, LeaseClient, status } from 'leased-client';
import { loseTheFirstGrant, recordCalls, startProxy } from './faults.js';
import { startStack, waitFor } from './stack.js';

const LEASE_ID = /^[0-9a-f]{32}$/;
/** Each client its own connection, as separate processes would have. */
const channelOptions = { 'grpc.use_local_subchannel_pool': 1 };
let stack;
let other;

before(async () => {
  stack = await startStack();
  other = new LeaseClient(stack.target, { channelOptions });
});

after(async () => {
  await other?.close();
  await stack?.stop();
});

test('each acquisition sends a lease id of its own and holds the lease with it', { timeout: 30_000 }, async () => {
  const recorder = recordCalls();
  const client = new LeaseClient(stack.target, { channelOptions, interceptors: [recorder.interceptor] });
  try {
    const first = await client.acquire('node-own-id', { ttlMs: 5000 });
    await first.release();
    const second = await client.acquire('node-own-id', { ttlMs: 5000 });
    await second.release();
    const sent = recorder.of('Acquire').map((request) => request.leaseId);
    assert.equal(sent.length, 2);
    assert.match(sent[0], LEASE_ID);
    assert.match(sent[1], LEASE_ID);
    assert.notEqual(sent[0], sent[1], 'a new acquisition takes a new id');
    assert.deepEqual([first.leaseId, second.leaseId], sent);
  } finally {
    await client.close();
  }
});

for (const endWith of ['unavailable', 'silence']) {
  const how = endWith === 'unavailable' ? 'ends UNAVAILABLE' : 'ends without an answer';
  test(`a grant lost on its way (the call ${how}) is answered again to a retry with the id`, { timeout: 30_000 }, async () => {
    const name = `node-retry-${endWith}`;
    const recorder = recordCalls();
    const loser = loseTheFirstGrant({ endWith });
    const client = new LeaseClient(stack.target, {
      channelOptions,
      interceptors: [recorder.interceptor, loser.interceptor],
    });
    try {
      const lease = await client.acquire(name, { ttlMs: 10_000, holder: 'retried' });
      assert.ok(lease instanceof Lease);
      assert.ok(loser.lost.grant, 'the interceptor hid no grant');
      const acquires = recorder.of('Acquire');
      assert.equal(acquires.length, 2, 'one retry');
      assert.equal(acquires[1].leaseId, acquires[0].leaseId);
      // The server answered the grant it made to that id again: same id, token and expiry.
      const hidden = loser.lost.grant;
      console.log(`${name}: first answer token ${hidden.fencingToken}, retry's ${lease.fencingToken}`);
      assert.equal(lease.leaseId, acquires[0].leaseId);
      assert.equal(lease.fencingToken, BigInt(hidden.fencingToken));
      const { seconds, nanos } = hidden.expiresAt;
      assert.equal(lease.expiresAt.getTime(), Number(seconds) * 1000 + Math.floor(nanos / 1e6));
      const description = await other.describe(name);
      assert.deepEqual(
        description.holders.map((holder) => [holder.holder, holder.fencingToken]),
        [['retried', lease.fencingToken]],
      );
      assert.equal(await lease.release(), true);
    } finally {
      await client.close();
    }
  });
}

test('a waiter whose connection drops retries with the same id and keeps its place in the queue', { timeout: 60_000 }, async () => {
  const name = 'node-retry-queued';
  const proxy = await startProxy(stack.target);
  const recorder = recordCalls();
  const proxied = new LeaseClient(proxy.target, { channelOptions, interceptors: [recorder.interceptor] });
  const second = new LeaseClient(stack.target, { channelOptions });
  const holder = await other.acquire(name, { ttlMs: 30_000, holder: 'holder' });
  try {
    const firstSeen = [];
    const first = proxied.acquire(name, {
      ttlMs: 10_000,
      waitMs: 30_000,
      holder: 'first',
      onWaiting: (waiting) => firstSeen.push(waiting.position),
    });
    await waitFor(() => firstSeen.includes(1), 10_000, 'the first waiter to queue');
    const secondSeen = [];
    const secondWaiter = second.acquire(name, {
      ttlMs: 10_000,
      waitMs: 30_000,
      holder: 'second',
      onWaiting: (waiting) => secondSeen.push(waiting.position),
    });
    await waitFor(() => secondSeen.includes(2), 10_000, 'the second waiter to queue behind');

    const seenBeforeCut = firstSeen.length;
    assert.ok(proxy.cut() > 0, 'the proxy had no connection to cut');
    await waitFor(() => recorder.of('Acquire').length === 2, 10_000, 'the retry');
    await waitFor(() => firstSeen.length > seenBeforeCut, 10_000, 'the retried waiter to queue');
    const [sent, retried] = recorder.of('Acquire');
    assert.equal(retried.leaseId, sent.leaseId);
    assert.ok(retried.waitMs < sent.waitMs, `the retry waits what remains: ${retried.waitMs} ms`);
    console.log(`positions of the first waiter: ${firstSeen.join(', ')} (connection cut after ${seenBeforeCut})`);
    assert.equal(firstSeen.at(-1), 1, 'the retried waiter lost its place');

    await holder.release();
    const lease = await first;
    assert.ok(lease instanceof Lease, 'the first waiter was not granted');
    assert.equal(lease.leaseId, sent.leaseId);
    const description = await other.describe(name);
    assert.equal(description.holders[0]?.holder, 'first');
    assert.equal(description.waiters, 1, 'the second waiter waits on');
    await lease.release();
    const secondLease = await secondWaiter;
    assert.ok(secondLease instanceof Lease);
    await secondLease.release();
  } finally {
    await holder.release();
    await Promise.all([proxied.close(), second.close()]);
    await proxy.close();
  }
});

test('an error other than UNAVAILABLE is not retried, and a refusal needs no release', { timeout: 30_000 }, async () => {
  const recorder = recordCalls();
  const client = new LeaseClient(stack.target, { channelOptions, interceptors: [recorder.interceptor] });
  try {
    await assert.rejects(client.acquire('node-not-retried', { ttlMs: 1 }), { code: status.INVALID_ARGUMENT });
    await assert.rejects(client.acquire('node-not-retried', { ttlMs: 1000, limit: 3, shared: true }), (error) => {
      assert.equal(error.code, status.INVALID_ARGUMENT);
      assert.match(error.details, /shared/);
      return true;
    });
  } finally {
    await client.close();
  }
  assert.deepEqual(
    recorder.calls.map((call) => call.method),
    ['Acquire', 'Acquire'],
  );
});

test(`an unreachable server: ${ACQUIRE_RETRIES + 1} tries with one id, then a best-effort Release`, { timeout: 30_000 }, async () => {
  // A port that nothing listens on: every attempt fails UNAVAILABLE at once.
  const server = createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const target = `127.0.0.1:${server.address().port}`;
  server.close();
  await once(server, 'close');

  const recorder = recordCalls();
  const client = new LeaseClient(target, { interceptors: [recorder.interceptor], rpcTimeoutMs: 1000 });
  const abandoned = [];
  client.on('abandonedGrant', (event) => abandoned.push(event));
  const started = performance.now();
  await assert.rejects(client.acquire('node-unreachable-retry', { ttlMs: 5000, waitMs: 5000 }), {
    code: status.UNAVAILABLE,
  });
  const tookMs = performance.now() - started;
  await client.close(); // waits for the best-effort Release, which fails
  const acquires = recorder.of('Acquire');
  assert.equal(acquires.length, ACQUIRE_RETRIES + 1);
  assert.ok(acquires.every((request) => request.leaseId === acquires[0].leaseId));
  assert.ok(tookMs < 3000, `the retries took ${tookMs} ms`);
  assert.deepEqual(
    recorder.of('Release').map((request) => request.leaseId),
    [acquires[0].leaseId],
  );
  assert.equal(abandoned.length, 1);
  assert.equal(abandoned[0].released, false);
  assert.equal(abandoned[0].error.code, status.UNAVAILABLE);
});

test('a give-up cancels the Acquire, then releases its id, and leaves the holder alone', { timeout: 30_000 }, async () => {
  const name = 'node-give-up-release';
  const recorder = recordCalls();
  const client = new LeaseClient(stack.target, { channelOptions, interceptors: [recorder.interceptor] });
  const holder = await other.acquire(name, { ttlMs: 30_000, holder: 'holder' });
  try {
    const signal = AbortSignal.timeout(300);
    await assert.rejects(client.acquire(name, { ttlMs: 5000, waitMs: 20_000, signal }), { name: 'TimeoutError' });
    await client.close(); // waits for the Release that follows the give-up
    const [acquire] = recorder.of('Acquire');
    assert.deepEqual(
      recorder.calls.map((call) => call.method),
      ['Acquire', 'Release'],
    );
    assert.equal(recorder.of('Release')[0].leaseId, acquire.leaseId);
    const description = await other.describe(name);
    assert.equal(description.holders[0]?.holder, 'holder');
    assert.equal(description.waiters, 0);
    assert.equal(holder.lost, false);
  } finally {
    assert.equal(await holder.release(), true, 'the give-up released the holder');
  }
});
