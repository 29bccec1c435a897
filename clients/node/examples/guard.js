#!/usr/bin/env node
// Holds a lease while doing some work, the way a job that must not run twice would:
// acquire (waiting if busy), work until done or until the lease is lost, release.
//
//   node node_modules/leased-client/examples/guard.js --target 127.0.0.1:50051 \
//     --name nightly-report --work-ms 5000
//
// Ctrl-C while waiting gives the wait up (the call is cancelled and its lease id released, so a
// grant made meanwhile does not outlive us); Ctrl-C while working stops the work and releases.
// --read takes a shared (read) lease beside other readers. Exit status: 0 done, 1 lost, 2 not
// granted, 130 interrupted.

import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';

import { LeaseClient, NotGranted } from 'leased-client';

const { values: args } = parseArgs({
  options: {
    target: { type: 'string', default: '127.0.0.1:50051' },
    name: { type: 'string', default: 'nightly-report' },
    'ttl-ms': { type: 'string', default: '15000' },
    'wait-ms': { type: 'string', default: '60000' },
    'work-ms': { type: 'string', default: '5000' },
    read: { type: 'boolean', default: false },
  },
});

const client = new LeaseClient(args.target);
const interrupted = new AbortController();
process.once('SIGINT', () => interrupted.abort(new Error('interrupted')));
try {
  process.exitCode = await holdWhileWorking();
} finally {
  // Waits for the Release that follows a give-up, so that a late grant is released before we exit.
  await client.close();
}

async function holdWhileWorking() {
  let lease;
  try {
    lease = await client.acquire(args.name, {
      ttlMs: Number(args['ttl-ms']),
      waitMs: Number(args['wait-ms']),
      shared: args.read,
      signal: interrupted.signal,
      onWaiting: ({ holder, fencingToken, position, remainingMs }) =>
        console.log(`waiting (#${position}) for ${holder || 'nobody'} (token ${fencingToken}), frees in ${remainingMs} ms`),
    });
  } catch (error) {
    if (!interrupted.signal.aborted) throw error;
    console.log('gave up waiting');
    return 130;
  }
  if (lease instanceof NotGranted) {
    console.log(`${args.name} is busy: held by ${lease.holder} with token ${lease.fencingToken}`);
    return 2;
  }

  const mode = lease.shared ? ' (shared)' : '';
  console.log(`acquired ${lease.name}${mode} with fencing token ${lease.fencingToken}`);
  lease.on('lost', (reason) => console.error(`${reason.message}; stopping`));
  // One signal for both reasons to stop early: the lease is lost, or the user pressed Ctrl-C.
  const stop = AbortSignal.any?.([lease.signal, interrupted.signal]) ?? lease.signal;
  try {
    await doTheWork(lease.fencingToken, Number(args['work-ms']), stop);
  } catch (error) {
    if (!stop.aborted) throw error;
  } finally {
    // A lease lost because the server is unreachable cannot be released either.
    const released = await lease.release().catch((error) => `failed: ${error.message}`);
    console.log(lease.lost ? 'lost; nothing to release' : `done; released (${released})`);
  }
  if (lease.lost) return 1;
  return interrupted.signal.aborted ? 130 : 0;
}

/**
 * Stands for the real work: each step would be a write that carries the fencing token, so that
 * the storage can reject it if a newer holder has written since.
 */
async function doTheWork(fencingToken, workMs, signal) {
  for (let done = 0; done < workMs; done += 500) {
    console.log(`working with token ${fencingToken}: ${done} of ${workMs} ms`);
    await sleep(Math.min(500, workMs - done), undefined, { signal });
  }
}
