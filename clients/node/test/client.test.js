// The Node.js client against a real leased on a real redis-server: grant and keepalive,
// contention, handover to a waiter, loss told by the server (revoke, release by another client),
// bad input, the example program (alone, two readers at once, interrupted), the locks example,
// and that the README's code is the examples' code.

import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { readFileSync } from 'node:fs';
import { promisify } from 'node:util';

import { Lease, LeaseClient, LeaseLostError, NotGranted, status } from 'leased-client';
import { startStack, waitFor } from './stack.js';

/** A file of the package as installed (this file runs in a consumer project). */
const installed = (path) => fileURLToPath(new URL(`node_modules/leased-client/${path}`, import.meta.url));
const example = installed('examples/guard.js');

let stack;
/** Three clients, as three processes of a fleet would have; each its own connection. */
let a, b, c;

before(async () => {
  stack = await startStack();
  // Without a local pool, grpc-js shares one connection among clients of the same target.
  const options = { channelOptions: { 'grpc.use_local_subchannel_pool': 1 } };
  [a, b, c] = [0, 1, 2].map(() => new LeaseClient(stack.target, options));
});

after(async () => {
  await Promise.all([a, b, c].map((client) => client?.close()));
  await stack?.stop();
});

test('a grant is kept alive beyond several TTLs, then released once', { timeout: 30_000 }, async () => {
  const lease = await a.acquire('node-keepalive', { ttlMs: 600, waitMs: 5000, holder: 'node-holder' });
  assert.ok(lease instanceof Lease);
  assert.equal(typeof lease.fencingToken, 'bigint');
  assert.ok(lease.fencingToken > 0n);
  assert.equal(lease.ttlMs, 600);
  assert.ok(lease.expiresAt instanceof Date && lease.expiresAt > new Date(Date.now() - 60_000));
  let lost = null;
  lease.on('lost', (reason) => (lost = reason));
  try {
    // Five TTLs: only the keepalive can keep the lease that long.
    const until = performance.now() + 3000;
    while (performance.now() < until) {
      const description = await b.describe('node-keepalive');
      assert.equal(description.held, true);
      assert.equal(description.holders[0].holder, 'node-holder');
      assert.equal(description.holders[0].fencingToken, lease.fencingToken);
      assert.equal(lost, null);
      await sleep(200);
    }
  } finally {
    assert.equal(await lease.release(), true);
  }
  assert.equal(await lease.release(), false, 'a second release is a no-op');
  assert.equal((await b.describe('node-keepalive')).held, false);
  assert.equal(lease.signal.aborted, true, 'the signal tells the work to stop after a release');
  await sleep(700);
  assert.equal(lost, null, 'a release is not a loss');
  assert.equal(lease.lost, false);
});

test('a busy lease is not granted, and names its holder and token', { timeout: 30_000 }, async () => {
  const first = await a.acquire('node-contended', { ttlMs: 10_000, holder: 'first' });
  try {
    const busy = await b.acquire('node-contended', { ttlMs: 10_000, holder: 'second' });
    assert.ok(busy instanceof NotGranted);
    assert.equal(busy.holder, 'first');
    assert.equal(busy.fencingToken, first.fencingToken);
    assert.equal(busy.held, 1);
    assert.equal(busy.limit, 1);
    assert.ok(busy.remainingMs > 0 && busy.remainingMs <= 10_000, `remainingMs ${busy.remainingMs}`);
  } finally {
    await first.release();
  }
});

test('a waiter is told it waits, and gets the lease with a larger token on release', { timeout: 30_000 }, async () => {
  const name = 'node-handover';
  const first = await a.acquire(name, { ttlMs: 10_000, holder: 'first' });
  const seen = [];
  // The waiter's TTL is much shorter than its wait: the client cannot count its trust from the
  // request and must confirm the grant with a renewal before the keepalive takes over.
  const waiting = b.acquire(name, {
    ttlMs: 600,
    waitMs: 20_000,
    holder: 'waiter',
    onWaiting: (progress) => seen.push(progress),
  });
  await waitFor(() => seen.length > 0, 10_000, 'the first waiting message');
  assert.equal(seen[0].holder, 'first');
  assert.equal(seen[0].fencingToken, first.fencingToken);
  assert.equal(seen[0].position, 1);
  assert.ok(seen[0].remainingMs > 0);
  await sleep(1000);
  assert.equal(await first.release(), true);
  const waiter = await waiting;
  assert.ok(waiter instanceof Lease);
  assert.ok(waiter.fencingToken > first.fencingToken, `${waiter.fencingToken} > ${first.fencingToken}`);
  try {
    await sleep(1500); // beyond its TTL: held only thanks to the keepalive
    assert.equal(waiter.lost, false, String(waiter.lostReason));
    const description = await c.describe(name);
    assert.equal(description.holders[0]?.holder, 'waiter');
    assert.equal(description.holders[0]?.fencingToken, waiter.fencingToken);
  } finally {
    await waiter.release();
  }
});

test('a revoke reaches the holder as a loss carrying the operator reason', { timeout: 30_000 }, async () => {
  const lease = await a.acquire('node-revoked', { ttlMs: 1500, holder: 'wedged' });
  const lost = once(lease, 'lost');
  const revoked = await c.revoke('node-revoked', 'node test', { fencingToken: lease.fencingToken });
  assert.deepEqual(revoked, { revoked: true, fencingToken: lease.fencingToken });
  const [reason] = await lost; // at the next renewal, within a third of the TTL
  assert.ok(reason instanceof LeaseLostError);
  assert.equal(reason.kind, 'lost');
  assert.match(reason.reason, /^revoked: .*node test/);
  assert.equal(lease.lost, true);
  assert.equal(lease.signal.aborted, true);
  assert.equal(lease.signal.reason, reason);
  assert.equal(await lease.release(), false, 'the revoked holder holds nothing');
});

test('a release by lease id from another client is a loss for the holder', { timeout: 30_000 }, async () => {
  const lease = await a.acquire('node-released-elsewhere', { ttlMs: 1500 });
  const lost = once(lease, 'lost');
  assert.equal(await b.release('node-released-elsewhere', lease.leaseId), true);
  const [reason] = await lost;
  assert.equal(reason.kind, 'lost');
  assert.equal(reason.reason, 'expired or released');
  assert.equal(await lease.release(), false);
});

test('bad input is a gRPC error with INVALID_ARGUMENT naming the field', { timeout: 30_000 }, async () => {
  await assert.rejects(a.acquire('node-bad-ttl', { ttlMs: 1 }), (error) => {
    assert.equal(error.code, status.INVALID_ARGUMENT);
    assert.match(error.details, /ttl_ms/);
    return true;
  });
  await assert.rejects(a.acquire('has a space', { ttlMs: 1000 }), (error) => {
    assert.equal(error.code, status.INVALID_ARGUMENT);
    assert.match(error.details, /name/);
    return true;
  });
  await assert.rejects(a.describe(''), { code: status.INVALID_ARGUMENT });
});

test('a caller that times out its wait is told at once and leaves the queue', { timeout: 30_000 }, async () => {
  const name = 'node-timeout';
  const holder = await a.acquire(name, { ttlMs: 10_000 });
  try {
    const started = performance.now();
    await assert.rejects(
      b.acquire(name, { ttlMs: 10_000, waitMs: 30_000, signal: AbortSignal.timeout(500) }),
      { name: 'TimeoutError' },
    );
    const waited = performance.now() - started;
    assert.ok(waited < 1000, `the caller waited ${waited} ms, not the 500 ms it asked for`);
    // The give-up cancels the call at once, and the server drops the waiter.
    await waitFor(async () => (await c.describe(name)).waiters === 0, 5000, 'the waiter to leave');
  } finally {
    await holder.release();
  }
  assert.equal((await c.describe(name)).held, false);
});

test('the example program acquires, works and releases', { timeout: 60_000 }, async () => {
  const { stdout } = await promisify(execFile)(
    process.execPath,
    [example, '--target', stack.target, '--name', 'node-example', '--work-ms', '1500', '--ttl-ms', '900'],
    { timeout: 30_000 },
  );
  assert.match(stdout, /acquired node-example with fencing token \d+/);
  assert.match(stdout, /done; released/);
  assert.equal((await a.describe('node-example')).held, false);
});

test('two example programs with --read hold the lease together', { timeout: 60_000 }, async () => {
  const args = [example, '--target', stack.target, '--name', 'node-example-read', '--read'];
  // Try once (--wait-ms 0) while the other works for 2 s: only a shared grant lets both in.
  const run = () =>
    promisify(execFile)(process.execPath, [...args, '--wait-ms', '0', '--work-ms', '2000'], { timeout: 30_000 });
  const outputs = await Promise.all([run(), run()]);
  for (const { stdout } of outputs) {
    assert.match(stdout, /acquired node-example-read \(shared\) with fencing token \d+/);
    assert.match(stdout, /done; released/);
  }
  assert.equal((await a.describe('node-example-read')).held, false);
});

test('the example program gives its wait up on Ctrl-C', { timeout: 60_000 }, async () => {
  const name = 'node-example-interrupted';
  const holder = await a.acquire(name, { ttlMs: 10_000, holder: 'someone-else' });
  try {
    const child = spawn(process.execPath, [example, '--target', stack.target, '--name', name]);
    let stdout = '';
    child.stdout.on('data', (data) => (stdout += data));
    const exited = once(child, 'exit');
    await waitFor(() => stdout.includes('waiting (#1) for someone-else'), 20_000, 'the example to wait');
    child.kill('SIGINT');
    const [code] = await exited;
    assert.equal(code, 130, stdout);
    assert.match(stdout, /gave up waiting/);
    const description = await c.describe(name);
    assert.equal(description.holders[0]?.holder, 'someone-else');
    assert.equal(description.waiters, 0);
  } finally {
    await holder.release();
  }
});

test('the locks example nests the reentrant lock and shares the read lock', { timeout: 60_000 }, async () => {
  const { stdout } = await promisify(execFile)(process.execPath, [installed('examples/locks.js'), '--target', stack.target], {
    timeout: 30_000,
  });
  assert.match(stdout, /post -10 to alice, token (\d+), level 2\npost 10 to bob, token \1, level 2\n/);
  assert.match(stdout, /readers: 2, all shared: true/);
  assert.match(stdout, /writer alone with token \d+/);
  assert.equal((await a.describe('ledger')).held, false);
  assert.equal((await a.describe('catalog')).held, false);
});

test("the README's code blocks are excerpts of the examples, which the tests run", () => {
  // A block that starts `// examples/<file>.js` shows lines of that file, unchanged.
  const readme = readFileSync(installed('README.md'), 'utf8');
  const blocks = [...readme.matchAll(/```js\n\/\/ (examples\/[\w-]+\.js)\n([^]*?)```/g)];
  const shown = new Set(blocks.map(([, file]) => file));
  assert.deepEqual([...shown].sort(), [
    'examples/fencing.js',
    'examples/guard.js',
    'examples/leader-election.js',
    'examples/locks.js',
  ]);
  for (const [, file, code] of blocks) {
    assert.ok(readFileSync(installed(file), 'utf8').includes(code), `the README shows ${file} otherwise:\n${code}`);
  }
});
