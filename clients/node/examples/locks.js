#!/usr/bin/env node
// The reentrant and read-write locks, as a small ledger and catalog would use them.
//
//   node node_modules/leased-client/examples/locks.js --target 127.0.0.1:50051
//
// transfer() holds the 'ledger' lock and calls post(), which takes the same lock again: the
// inner acquire nests without a call to the server, and only the outer release ends the lease.
// Then two readers hold 'catalog' together, and a writer has it alone after them.

import { parseArgs } from 'node:util';

import { LeaseClient, NotGranted, ReadWriteLock, ReentrantLock } from 'leased-client';

const { values: args } = parseArgs({
  options: { target: { type: 'string', default: '127.0.0.1:50051' } },
});
const client = new LeaseClient(args.target);

const ledger = new ReentrantLock(client, 'ledger', { ttlMs: 15_000, waitMs: 60_000 });

async function post(account, amount) {
  const lease = await ledger.acquire(); // inside transfer(): the same lease, no call
  if (lease instanceof NotGranted) throw new Error(`ledger busy: ${lease.holder}`);
  try {
    // Here: the write, carrying lease.fencingToken.
    console.log(`post ${amount} to ${account}, token ${lease.fencingToken}, level ${ledger.holdCount}`);
  } finally {
    await ledger.release(); // only the outermost level releases
  }
}

async function transfer(from, to, amount) {
  const lease = await ledger.acquire();
  if (lease instanceof NotGranted) throw new Error(`ledger busy: ${lease.holder}`);
  try {
    await post(from, -amount);
    await post(to, amount);
  } finally {
    await ledger.release();
  }
}

await transfer('alice', 'bob', 10);

// One handle per reader: a handle holds one grant at a time.
const options = { ttlMs: 15_000, waitMs: 60_000 };
const readers = [new ReadWriteLock(client, 'catalog', options), new ReadWriteLock(client, 'catalog', options)];
const readings = await Promise.all(readers.map((reader) => reader.read())); // beside each other
if (readings.some((reading) => reading instanceof NotGranted)) throw new Error('catalog busy');
const holders = (await client.describe('catalog')).holders;
console.log(`readers: ${holders.length}, all shared: ${holders.every((holder) => holder.shared)}`);
await Promise.all(readings.map((reading) => reading.release()));

const writing = await new ReadWriteLock(client, 'catalog', options).write(); // alone
if (writing instanceof NotGranted) throw new Error(`catalog busy: ${writing.holder}`);
try {
  console.log(`writer alone with token ${writing.fencingToken}`);
} finally {
  await writing.release();
}
await client.close();
