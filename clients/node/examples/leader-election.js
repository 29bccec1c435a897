#!/usr/bin/env node
// Leader election on a leased lease.
//
//   node node_modules/leased-client/examples/leader-election.js --target 127.0.0.1:50051 \
//     --id candidate-1
//
// Every copy of this program is a candidate: it campaigns with a waiting Acquire, leads while its
// lease holds, and steps down (then campaigns again) the moment the lease is lost. Every
// candidate follows the election with Watch and prints who leads. A leader that dies is replaced
// one TTL later, with a larger fencing token; one stopped with Ctrl-C or SIGTERM releases the
// lease and is replaced at once.

import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';

import { LeaseClient, NotGranted } from 'leased-client';

/** How long one campaign waits in line before asking again (the server's --max-wait is 10 min). */
const CAMPAIGN_WAIT_MS = 60_000;
/** Pause before retrying a campaign or a watch that failed (server unreachable, say). */
const RETRY_DELAY_MS = 1000;

const { values: args } = parseArgs({
  options: {
    target: { type: 'string', default: '127.0.0.1:50051' },
    election: { type: 'string', default: 'leader/demo' },
    id: { type: 'string', default: `${hostname()}/pid-${process.pid}` },
    'ttl-ms': { type: 'string', default: '5000' },
  },
});

const client = new LeaseClient(args.target);
const stopping = new AbortController();
for (const signal of ['SIGINT', 'SIGTERM']) process.once(signal, () => stopping.abort());
// Every candidate follows the election, the leader too: one view of who leads, for all.
const following = follow(args.election, stopping.signal);
await campaign(stopping.signal);
await following;
await client.close();

/** Campaigns until stopped: wait in line for the lease, lead while it holds, campaign again. */
async function campaign(stop) {
  while (!stop.aborted) {
    let lease;
    try {
      lease = await client.acquire(args.election, {
        ttlMs: Number(args['ttl-ms']),
        waitMs: CAMPAIGN_WAIT_MS,
        holder: args.id,
        signal: stop, // stopping gives the wait up, and releases a grant made meanwhile
      });
    } catch (error) {
      if (stop.aborted) return;
      console.error(`campaign failed: ${error.message}; retrying`);
      await sleep(RETRY_DELAY_MS);
      continue;
    }
    if (lease instanceof NotGranted) continue; // someone led for the whole wait: queue again
    console.log(`leading as ${args.id} with fencing token ${lease.fencingToken}`);
    // Lead until the lease is lost or we are stopped; then step down before anyone else can be
    // granted the lease.
    await lead(lease.fencingToken, AbortSignal.any([lease.signal, stop]));
    await lease.release().catch(() => {}); // a lost lease may be unreachable to release too
    console.log(stop.aborted ? 'stepped down: stopping' : `stepped down: ${lease.lostReason?.message}`);
  }
}

/**
 * The leader's work, until `signal` aborts. Every write it makes would carry the fencing token,
 * so that a resource can refuse a leader that was replaced without noticing.
 */
async function lead(fencingToken, signal) {
  while (!signal.aborted) {
    // Here: one round of the leader's work (run the scheduler once, say), with fencingToken.
    await sleep(1000, undefined, { signal }).catch(() => {});
  }
}

/**
 * Prints who leads, from the election's Watch: a snapshot first, then each change. A watch that
 * fails (the server restarts, say) is opened again; its snapshot restates the leader.
 */
async function follow(election, stop) {
  while (!stop.aborted) {
    try {
      for await (const event of client.watch(election, { signal: stop })) {
        const leader = event.holders[0];
        // JSON.stringify escapes characters a terminal would act on.
        const who = leader
          ? `leader ${JSON.stringify(leader.holder)}, fencing token ${leader.fencingToken}`
          : 'no leader';
        console.log(`[${event.cause}] ${who}`);
      }
    } catch (error) {
      console.error(`watch ended: ${error.message}; watching again`);
      await sleep(RETRY_DELAY_MS, undefined, { signal: stop }).catch(() => {});
    }
  }
}
