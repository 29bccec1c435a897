// Watch and CheckToken against a real leased on a real redis-server, and the leader-election
// example (two candidate processes, the leader stopped with SIGTERM) as the package installs it.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { Lease } from 'leased-client';
import { stackWithClient, waitFor } from './stack.js';

const example = fileURLToPath(new URL('node_modules/leased-client/examples/leader-election.js', import.meta.url));

const fixture = stackWithClient();

/** The next event of `events`, or a failure after 5 s. */
async function next(events) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error('no watch event within 5 s')), 5000);
  });
  try {
    const { value, done } = await Promise.race([events.next(), timeout]);
    assert.equal(done, false, 'the watch ended');
    return value;
  } finally {
    clearTimeout(timer);
  }
}

test('watch: a snapshot, then grants, revokes and releases in order; abort ends it quietly', { timeout: 30_000 }, async () => {
  const { client } = fixture;
  const name = 'node-watch';
  const stop = new AbortController();
  const events = client.watch(name, { signal: stop.signal });

  const snapshot = await next(events);
  assert.deepEqual([snapshot.name, snapshot.cause, snapshot.held, snapshot.holders], [name, 'snapshot', false, []]);

  const first = await client.acquire(name, { ttlMs: 1500, holder: 'first' });
  assert.ok(first instanceof Lease);
  const granted = await next(events);
  assert.deepEqual([granted.cause, granted.holder, granted.fencingToken], ['granted', 'first', first.fencingToken]);
  assert.equal(granted.holders[0].holder, 'first');
  assert.ok(granted.expiresAt instanceof Date);
  assert.deepEqual(await client.checkToken(name, first.fencingToken), {
    current: true,
    currentToken: first.fencingToken,
    held: true,
  });

  await client.revoke(name, 'wedged');
  const revoked = await next(events);
  assert.deepEqual([revoked.cause, revoked.reason, revoked.held], ['revoked', 'wedged', false]);
  await once(first, 'lost');
  assert.equal((await client.checkToken(name, first.fencingToken)).current, false);

  const second = await client.acquire(name, { ttlMs: 5000, holder: 'second' });
  assert.ok(second instanceof Lease);
  const regranted = await next(events);
  assert.equal(regranted.cause, 'granted');
  assert.ok(regranted.fencingToken > first.fencingToken, 'tokens of GRANTED events increase');
  await second.release();
  const released = await next(events);
  assert.deepEqual([released.cause, released.holder, released.held], ['released', 'second', false]);

  stop.abort();
  assert.deepEqual(await events.next(), { value: undefined, done: true });
});

test('the leader-election example: a follower leads at once when the leader is stopped', { timeout: 60_000 }, async () => {
  const candidate = (id) => {
    const child = spawn(process.execPath, [example, '--target', fixture.stack.target, '--election', 'node-leader', '--id', id]);
    child.output = '';
    child.stdout.on('data', (data) => (child.output += data));
    child.stderr.on('data', (data) => (child.output += data));
    return child;
  };
  const one = candidate('candidate-1');
  const two = candidate('candidate-2');
  try {
    await waitFor(() => /leading as/.test(one.output + two.output), 20_000, 'a leader');
    const [leader, follower] = /leading as/.test(one.output) ? [one, two] : [two, one];
    const firstToken = BigInt(leader.output.match(/leading as \S+ with fencing token (\d+)/)[1]);
    const leaderId = leader === one ? 'candidate-1' : 'candidate-2';
    await waitFor(() => follower.output.includes(`leader "${leaderId}"`), 10_000, 'the follower to see the leader');

    const exited = once(leader, 'exit');
    leader.kill('SIGTERM');
    assert.deepEqual(await exited, [0, null], leader.output);
    assert.match(leader.output, /stepped down: stopping/);
    // The stopped leader released the lease: the follower leads at once, with a larger token.
    await waitFor(() => /leading as/.test(follower.output), 10_000, `the follower to lead:\n${follower.output}`);
    const secondToken = BigInt(follower.output.match(/leading as \S+ with fencing token (\d+)/)[1]);
    assert.ok(secondToken > firstToken);
    assert.match(follower.output, /\[released\] no leader/);
  } finally {
    one.kill('SIGTERM');
    two.kill('SIGTERM');
  }
});
