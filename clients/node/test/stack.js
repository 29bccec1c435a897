// Starts a real redis-server and a real leased on free loopback ports, for the tests.
//
// The leased binary is $LEASED_BIN (test.sh sets it, and builds the binary if missing): these
// files run from a consumer project outside the repository, where no relative path leads to it. Both processes log into a temporary directory, shown when one of them dies early.

import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createWriteStream, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import { LeaseClient } from 'leased-client';

const STARTUP_TIMEOUT_MS = 20_000;

export function leasedBinary() {
  const binary = process.env.LEASED_BIN;
  if (!binary) throw new Error('LEASED_BIN is not set: run the tests with clients/node/test.sh');
  return binary;
}

/** A free loopback port (the OS picks it; a race with other processes is unlikely). */
export async function freePort() {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address();
  server.close();
  await once(server, 'close');
  return port;
}

/** Polls `check` until it resolves; fails if `child` exits first or after the timeout. */
export async function waitUntilReady(child, logPath, what, check) {
  const deadline = performance.now() + STARTUP_TIMEOUT_MS;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`${what} exited early:\n${readFileSync(logPath, 'utf8')}`);
    }
    try {
      await check();
      return;
    } catch (error) {
      if (performance.now() > deadline) {
        throw new Error(`${what} did not answer within ${STARTUP_TIMEOUT_MS} ms: ${error.message}`);
      }
    }
    await sleep(50);
  }
}

function redisPing(port) {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    socket.setTimeout(1000, () => socket.destroy(new Error('redis PING timed out')));
    socket.on('error', reject);
    socket.on('connect', () => socket.write('PING\r\n'));
    socket.on('data', (data) => {
      socket.end();
      if (data.toString().startsWith('+PONG')) resolve();
      else reject(new Error(`redis answered ${data}`));
    });
  });
}

export function startProcess(command, args, logPath) {
  const log = createWriteStream(logPath);
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout.pipe(log);
  child.stderr.pipe(log);
  return child;
}

/** Kills `child` with `signal` and waits for it to exit. */
export async function kill(child, signal = 'SIGTERM') {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill(signal);
  const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
  await exited;
  clearTimeout(timer);
}

/**
 * A redis-server of its own on a free loopback port, without persistence, logging into `dir`.
 *
 * @param {string} dir
 * @returns {Promise<{port: number, url: string, process: import('node:child_process').ChildProcess}>}
 */
export async function startRedis(dir) {
  const port = await freePort();
  const log = join(dir, `redis-${port}.log`);
  const redis = startProcess(
    'redis-server',
    ['--bind', '127.0.0.1', '--port', String(port), '--save', '', '--appendonly', 'no', '--dir', dir],
    log,
  );
  try {
    await waitUntilReady(redis, log, 'redis-server', () => redisPing(port));
  } catch (error) {
    await kill(redis);
    throw error;
  }
  return { port, url: `redis://127.0.0.1:${port}`, process: redis };
}

/**
 * A running redis-server and leased. `stop()` ends both and removes the temporary directory.
 *
 * @returns {Promise<{target: string, leased: import('node:child_process').ChildProcess,
 *                    stop: () => Promise<void>}>}
 */
export async function startStack() {
  const dir = mkdtempSync(join(tmpdir(), 'leased-node-'));
  let redis = null;
  let leased = null;
  const stop = async () => {
    if (leased) await kill(leased);
    if (redis) await kill(redis.process);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    redis = await startRedis(dir);
    const target = `127.0.0.1:${await freePort()}`;
    const leasedLog = join(dir, 'leased.log');
    leased = startProcess(leasedBinary(), ['serve', '--listen', target, '--redis-url', redis.url], leasedLog);
    const probe = new LeaseClient(target, { rpcTimeoutMs: 1000 });
    try {
      await waitUntilReady(leased, leasedLog, 'leased', () => probe.describe('node-ready'));
    } finally {
      await probe.close();
    }
    return { target, leased, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/**
 * For a test file that needs one stack and one client of it: starts both before the file's
 * tests and stops both after them. `stack` and `client` of the returned object are set once the
 * tests run.
 *
 * @returns {{stack: Awaited<ReturnType<typeof startStack>> | null, client: LeaseClient | null}}
 */
export function stackWithClient() {
  const fixture = { stack: null, client: null };
  before(async () => {
    fixture.stack = await startStack();
    fixture.client = new LeaseClient(fixture.stack.target);
  });
  after(async () => {
    await fixture.client?.close();
    await fixture.stack?.stop();
  });
  return fixture;
}

/** Polls `condition` every 20 ms until it is true; throws after `timeoutMs`. */
export async function waitFor(condition, timeoutMs, what) {
  const deadline = performance.now() + timeoutMs;
  while (!(await condition())) {
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(20);
  }
}
