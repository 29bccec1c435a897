// The two scenarios every fencing adapter is put through, with real processes:
//
// kleppmann(): holder 1 (fencing-holder.js, a process of its own) acquires a 500 ms lease and is
// stopped with SIGSTOP before its write; holder 2 is granted the lease once it expired (a larger
// token) and writes; holder 1 is resumed and writes. Fenced, its write must be refused and the
// resource keep holder 2's data; with fencing off, its write lands over holder 2's.
//
// concurrentWriters(): a few holders write in a loop for a few seconds while the test stops
// them at random right after they are granted, for longer than the TTL; afterwards the resource's
// history of accepted tokens must only increase, with no stale write accepted.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';

import { Lease, LeaseClient } from 'leased-client';
import { openWriter } from './fencing-stack.js';

const HOLDER = fileURLToPath(new URL('./fencing-holder.js', import.meta.url));
/** Holder 1's lease, short so that the scenario is quick. */
const KLEPPMANN_TTL_MS = 500;
/** How long after holder 1 was stopped holder 2 writes, at the earliest: well past the TTL. */
const PAST_TTL_MS = 3 * KLEPPMANN_TTL_MS;
/** Bounds each holder process's life, whatever happens. */
const HOLDER_TIMEOUT_MS = 30_000;

/** A fencing-holder.js process, its JSON events read in order by `next(event)`. */
function startHolder(config) {
  const child = spawn(process.execPath, [HOLDER, JSON.stringify(config)], { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (data) => (stderr += data));
  const events = [];
  const waiters = [];
  const exited = once(child, 'exit');
  const wake = () => waiters.splice(0).forEach((resolve) => resolve());
  createInterface({ input: child.stdout }).on('line', (line) => {
    events.push(JSON.parse(line));
    wake();
  });
  exited.then(wake);
  const killer = setTimeout(() => {
    child.kill('SIGCONT');
    child.kill('SIGKILL');
  }, HOLDER_TIMEOUT_MS);
  exited.then(() => clearTimeout(killer));
  return {
    child,
    events,
    /** The next event named `name` (events before it are skipped). */
    async next(name) {
      for (;;) {
        const index = events.findIndex((event) => event.event === name);
        if (index >= 0) return events.splice(0, index + 1).pop();
        if (child.exitCode !== null || child.signalCode !== null) {
          throw new Error(`the holder exited (${child.exitCode ?? child.signalCode}) before "${name}":\n${stderr}`);
        }
        await new Promise((resolve) => waiters.push(resolve));
      }
    },
    /** Resolves once the process exited; fails unless it exited 0. */
    async done() {
      const [code, signal] = child.exitCode !== null || child.signalCode !== null ? [child.exitCode, child.signalCode] : await exited;
      assert.equal(code, 0, `the holder exited ${code ?? signal}:\n${stderr}`);
    },
    kill() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGCONT');
      child.kill('SIGKILL');
    },
  };
}

/**
 * Kleppmann's scenario on one adapter. `writer` is the config of fencing-stack.js's openWriter
 * (its `resource` a name of its own), `read()` what the resource holds afterwards. Resolves to
 * what happened, for the caller to assert.
 */
export async function kleppmann({ target, lease, writer, read }) {
  const holder1 = startHolder({ target, lease, ttlMs: KLEPPMANN_TTL_MS, writer, mode: 'once', value: 'holder-1' });
  const client2 = new LeaseClient(target, { channelOptions: { 'grpc.use_local_subchannel_pool': 1 } });
  try {
    const token1 = BigInt((await holder1.next('acquired')).token);
    holder1.child.kill('SIGSTOP'); // paused before its write: its keepalive stops with it
    const stoppedAt = performance.now();

    const lease2 = await client2.acquire(lease, { ttlMs: 10_000, waitMs: 15_000, holder: 'holder-2' });
    assert.ok(lease2 instanceof Lease, 'holder 2 was not granted the lease after holder 1 stopped');
    assert.ok(lease2.fencingToken > token1, `holder 2's token ${lease2.fencingToken} is not above ${token1}`);
    await sleep(Math.max(0, stoppedAt + PAST_TTL_MS - performance.now()));
    const writer2 = await openWriter(writer);
    let wrote2;
    try {
      wrote2 = await writer2.write(lease2, 'holder-2');
    } finally {
      await writer2.close();
    }
    assert.equal(wrote2.accepted, true, "holder 2's write was refused");

    holder1.child.stdin.end('write\n');
    holder1.child.kill('SIGCONT');
    const wrote1 = await holder1.next('wrote');
    await holder1.done();
    await lease2.release();
    const state = await read();
    return {
      token1,
      token2: lease2.fencingToken,
      accepted1: wrote1.accepted,
      mark: wrote1.mark === undefined ? null : BigInt(wrote1.mark),
      value: state.value,
    };
  } finally {
    holder1.kill();
    await client2.close();
  }
}

/** Asserts the outcome of kleppmann() for fencing on or off, and says it in the test's output. */
export function assertKleppmann(t, adapter, fenced, outcome) {
  const { token1, token2, accepted1, mark, value } = outcome;
  if (fenced) {
    assert.equal(accepted1, false, `${adapter}: the paused holder's write with token ${token1} was accepted`);
    assert.equal(mark, token2, 'the refusal names holder 2 token as the highest seen');
    assert.equal(value, 'holder-2', `${adapter}: the resource does not hold holder 2's data`);
    t.diagnostic(
      `${adapter}, fenced: holder 1's write (token ${token1}) refused, the highest seen is ${mark}; ` +
        `the resource holds "${value}"`,
    );
  } else {
    assert.equal(accepted1, true, `${adapter}: without fencing, holder 1's write should land`);
    assert.equal(value, 'holder-1', `${adapter}: without fencing, holder 1 should overwrite holder 2`);
    t.diagnostic(
      `${adapter}, fencing off: holder 1's write (token ${token1}) landed after holder 2's ` +
        `(token ${token2}); the resource holds "${value}": overwritten`,
    );
  }
}

/** How many writer processes, and for how long, in concurrentWriters(). */
const WRITERS = 3;
const WRITING_MS = 2500;
const WRITERS_TTL_MS = 300;

/**
 * Writer processes that acquire, work a random while, write and release, in a loop for a few
 * seconds, while the test stops about half of them right after their grant for longer than the
 * TTL (another is granted the lease and writes meanwhile). Resolves to every write's outcome.
 */
export async function concurrentWriters({ target, lease, writer }) {
  const holders = Array.from({ length: WRITERS }, (_, i) =>
    startHolder({
      target,
      lease,
      ttlMs: WRITERS_TTL_MS,
      writer,
      mode: 'loop',
      value: `writer-${i}`,
      durationMs: WRITING_MS,
      workMs: 60,
    }),
  );
  const writes = [];
  let stops = 0;
  try {
    await Promise.all(
      holders.map(async (holder) => {
        for (;;) {
          const event = await holder.next('acquired').catch(() => null);
          if (!event) break; // the process exited: its loop is over
          if (Math.random() < 0.5) {
            // Stopped between grant and write for 1.5 to 2.5 TTLs: its lease expires meanwhile.
            holder.child.kill('SIGSTOP');
            stops += 1;
            await sleep(WRITERS_TTL_MS * (1.5 + Math.random()));
            holder.child.kill('SIGCONT');
          }
          writes.push(await holder.next('wrote').catch(() => null));
        }
        await holder.done();
      }),
    );
  } finally {
    holders.forEach((holder) => holder.kill());
  }
  return {
    writes: writes.filter(Boolean).map((w) => ({ ...w, token: BigInt(w.token) })),
    stops,
  };
}

/**
 * Asserts that `history` (the accepted tokens in the order they landed) only increases, and that
 * it is exactly the writes the writers saw accepted; says the counts in the test's output.
 */
export function assertOnlyIncreasing(t, adapter, { writes, stops }, history) {
  const accepted = writes.filter((w) => w.accepted).map((w) => w.token);
  const refused = writes.filter((w) => !w.accepted);
  let staleAccepted = 0;
  for (let i = 1; i < history.length; i += 1) if (history[i] <= history[i - 1]) staleAccepted += 1;
  t.diagnostic(
    `${adapter}: ${writes.length} writes by ${WRITERS} writers (${stops} pauses past the TTL): ` +
      `${accepted.length} accepted, ${refused.length} refused as stale, ${staleAccepted} stale accepted`,
  );
  assert.equal(staleAccepted, 0, `the history of accepted tokens went down: ${history.join(', ')}`);
  assert.deepEqual(
    [...history].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)),
    [...accepted].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)),
    'the resource took other writes than those its writers saw accepted',
  );
  assert.ok(accepted.length >= 3, `only ${accepted.length} writes accepted`);
  // Every refusal named a mark above the refused token.
  for (const w of refused) assert.ok(BigInt(w.mark) > w.token, `refused ${w.token} with mark ${w.mark}`);
}
