// A server that stops answering: the guard must report the loss before the lease could expire
// on the server, i.e. within a TTL of the last renewal it *sent*. This file kills its own leased.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import { Lease } from 'leased-client';
import { kill, stackWithClient } from './stack.js';

const TTL_MS = 3000;
const fixture = stackWithClient();

test('a killed server is reported as a loss before the lease could expire', { timeout: 30_000 }, async () => {
  const lease = await fixture.client.acquire('node-unreachable', { ttlMs: TTL_MS });
  assert.ok(lease instanceof Lease);
  const lost = once(lease, 'lost');
  // Past the first renewal (at a third of the TTL), halfway to the second.
  await sleep(1500);
  assert.equal(lease.lost, false);

  // How long the guard may still trust the lease, read just before the kill, tells when the
  // last successful renewal was sent: trust ends ttl - ttl/20 after that send.
  const trustedForMs = lease.trustedForMs;
  const killedAt = performance.now();
  const lastRenewalSentAt = killedAt + trustedForMs - (TTL_MS - TTL_MS / 20);
  await kill(fixture.stack.leased, 'SIGKILL');

  const [reason] = await lost;
  const lostAt = performance.now();
  const afterStop = Math.round(lostAt - killedAt);
  const afterLastRenewal = Math.round(lostAt - lastRenewalSentAt);
  console.log(
    `loss reported ${afterStop} ms after SIGKILL of leased, ${afterLastRenewal} ms after the ` +
      `last renewal was sent (TTL ${TTL_MS} ms): ${reason.message}`,
  );
  assert.equal(reason.kind, 'unreachable');
  assert.ok(afterLastRenewal <= TTL_MS, `trusted ${afterLastRenewal} ms after the last renewal, past the TTL`);
  assert.ok(afterStop <= TTL_MS, `loss reported ${afterStop} ms after the stop`);
  assert.equal(lease.signal.aborted, true);
  assert.equal(lease.trustedForMs, 0);
  // The server is gone: releasing fails, but the keepalive has stopped all the same.
  await assert.rejects(lease.release());
});
