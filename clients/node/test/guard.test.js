// The guard's keepalive over a scripted Renew stream (no server): when it renews, when it stops
// trusting the lease, and that a reply arriving after the trust ended is never credited.
// Real time, TTL 1.5 s: renewals every 500 ms, trust ends 1425 ms after a renewal's send.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import { Lease } from 'leased-client';

const TTL_MS = 1500;
const TRUST_MS = TTL_MS - TTL_MS / 20;
/** How late a timer may fire on a loaded 2-core machine without failing a test. */
const JITTER_MS = 60;

/** What the scripted server does with one renewal. */
const renewed = (delayMs = 0) => ({ renewed: true, delayMs });
const lostAnswer = (reason) => ({ lost: reason });
const error = { error: true };
const hang = { hang: true };

/** A lease on a scripted transport; records when each renewal was sent and each stream opened. */
function scriptedLease(script, requestedAt = performance.now()) {
  const sends = [];
  const streams = [];
  const transport = {
    openRenewStream() {
      const stream = {
        closed: false,
        renew() {
          sends.push(performance.now() - requestedAt);
          const step = script.shift() ?? hang;
          if (step.error) return Promise.reject(new Error('scripted failure'));
          if (step.lost) return Promise.resolve({ result: 'lost', lost: { reason: step.lost } });
          if (step.hang) return new Promise(() => {});
          const answer = { result: 'renewed', renewed: { ttlMs: String(TTL_MS), fencingToken: '7' } };
          return sleep(step.delayMs).then(() => answer);
        },
        close() {
          this.closed = true;
        },
      };
      streams.push(stream);
      return stream;
    },
    release: async () => true,
  };
  const grant = { name: 'scripted', leaseId: 'id', fencingToken: 7n, ttlMs: TTL_MS, expiresAt: null };
  const lease = new Lease(transport, grant, requestedAt, null);
  const lost = once(lease, 'lost').then(([reason]) => ({ reason, at: performance.now() - requestedAt }));
  return { lease, sends, streams, lost };
}

function assertNear(actual, expected, what) {
  assert.ok(
    actual >= expected - 5 && actual <= expected + JITTER_MS,
    `${what}: ${actual.toFixed(1)} ms, expected ${expected} ms`,
  );
}

test('renewals go out every third of the TTL, counted from each send', { timeout: 10_000 }, async () => {
  const { lease, sends } = scriptedLease([renewed(100), renewed(100), renewed(100)]);
  await sleep(1700);
  assert.equal(sends.length, 3);
  // The 100 ms answer delay does not shift the schedule.
  sends.forEach((sent, i) => assertNear(sent, 500 * (i + 1), `renewal ${i + 1}`));
  assert.equal(lease.lost, false);
  assert.equal(await lease.release(), true);
});

test('a lost answer is reported at once, with the server reason', { timeout: 10_000 }, async () => {
  const { lease, streams, lost } = scriptedLease([lostAnswer('held by another holder')]);
  const { reason, at } = await lost;
  assertNear(at, 500, 'loss');
  assert.equal(reason.kind, 'lost');
  assert.equal(reason.reason, 'held by another holder');
  assert.equal(lease.signal.reason, reason);
  assert.equal(streams[0].closed, true);
});

test('a renewal answered after the trust ended still ends in a loss, at the trust end', { timeout: 10_000 }, async () => {
  // Sent at 500 ms, answered "renewed" at 1700 ms: after the trust ended at 1425 ms.
  const { lease, sends, streams, lost } = scriptedLease([renewed(1200), renewed()]);
  const { reason, at } = await lost;
  assertNear(at, TRUST_MS, 'loss');
  assert.equal(reason.kind, 'unreachable');
  assert.equal(reason.reason, 'renewal timed out');
  // The stream is dropped, so its late reply can never answer a later request.
  assert.equal(streams[0].closed, true);
  await sleep(1000); // the late reply has come and gone
  assert.equal(lease.lost, true);
  assert.equal(lease.trustedForMs, 0);
  assert.equal(sends.length, 1, 'renewed after the loss');
});

test('errors are retried on a new stream, and trust counts from the send', { timeout: 10_000 }, async () => {
  // Fail at 500 and 575 ms; the third renewal is sent at 650 ms and answered at 850 ms.
  const { sends, streams, lost } = scriptedLease([error, error, renewed(200), hang]);
  const { reason, at } = await lost;
  assert.equal(streams.length, 3, 'a failed stream must not carry the next renewal');
  assertNear(sends[1] - sends[0], TTL_MS / 20, 'retry delay');
  assertNear(sends[2] - sends[1], TTL_MS / 20, 'retry delay');
  // Trust from the send: 650 + 1425; counting from the answer would give 200 ms more.
  assertNear(at - sends[2], TRUST_MS, 'loss after the last successful send');
  assert.equal(reason.reason, 'renewal timed out');
});

test('silence ends trust a TTL less a twentieth after the Acquire was sent', { timeout: 10_000 }, async () => {
  // The Acquire round trip took 300 ms: the server's TTL started before we heard of the grant.
  const requestedAt = performance.now() - 300;
  const { lost } = scriptedLease([hang], requestedAt);
  const { at } = await lost;
  assertNear(at, TRUST_MS, 'loss, counted from the Acquire request');
});

test('releasing mid-renewal stops the keepalive without a loss', { timeout: 10_000 }, async () => {
  const { lease, streams } = scriptedLease([hang]);
  let lostReason = null;
  lease.on('lost', (reason) => (lostReason = reason));
  await sleep(700); // the first renewal is in flight
  assert.equal(await lease.release(), true);
  assert.equal(await lease.release(), false);
  assert.equal(streams[0].closed, true);
  await sleep(1200); // past the trust end
  assert.equal(lostReason, null);
  assert.equal(lease.lost, false);
});
