// Ways for the tests to see and break what goes between the client and a real leased: gRPC
// interceptors that record Acquire requests or lose a grant on its way back, and a TCP proxy
// whose connections can be cut.

import { once } from 'node:events';
import { createConnection, createServer } from 'node:net';

import grpc from '@grpc/grpc-js';

const ACQUIRE = '/lease.v1.LeaseService/Acquire';

/**
 * An interceptor that records every request the client sends on LeaseService, as
 * `{method, request}` ('Acquire', a copy of the request: leaseId, waitMs, shared...).
 * `of(method)` lists the requests of one method.
 */
export function recordCalls() {
  const calls = [];
  const interceptor = (options, nextCall) =>
    new grpc.InterceptingCall(nextCall(options), {
      sendMessage(message, next) {
        const method = options.method_definition.path.split('/').pop();
        calls.push({ method, request: { ...message } });
        next(message);
      },
    });
  const of = (method) => calls.filter((call) => call.method === method).map((call) => call.request);
  return { interceptor, calls, of };
}

/**
 * An interceptor that hides the first `granted` from the client, as if the connection broke just
 * after the server sent it: the call then ends UNAVAILABLE (`endWith: 'unavailable'`) or with
 * no terminal message at all (`endWith: 'silence'`). Later grants pass. `lost.grant` is the
 * hidden one.
 */
export function loseTheFirstGrant({ endWith }) {
  const lost = { grant: null };
  const interceptor = (options, nextCall) => {
    if (options.method_definition.path !== ACQUIRE) return new grpc.InterceptingCall(nextCall(options));
    let hid = false;
    return new grpc.InterceptingCall(nextCall(options), {
      start(metadata, listener, next) {
        // A listener whose methods take no `next` (grpc-js's InterceptingListener): one with
        // `next` holds the status back until the hidden message is passed on, i.e. forever.
        next(metadata, {
          onReceiveMetadata: (received) => listener.onReceiveMetadata(received),
          onReceiveMessage: (message) => {
            if (message.result === 'granted' && lost.grant === null) {
              lost.grant = message.granted;
              hid = true;
            } else {
              listener.onReceiveMessage(message);
            }
          },
          onReceiveStatus: (status) => {
            if (hid && endWith === 'unavailable') {
              listener.onReceiveStatus({ ...status, code: grpc.status.UNAVAILABLE, details: 'lost by the test' });
            } else {
              listener.onReceiveStatus(status);
            }
          },
        });
      },
    });
  };
  return { interceptor, lost };
}

/**
 * A TCP proxy on a free loopback port to `target`. `cut()` destroys every connection open now
 * (the client sees the connection drop); new connections are proxied as before.
 *
 * @returns {Promise<{target: string, cut: () => number, close: () => Promise<void>}>}
 */
export async function startProxy(target) {
  const separator = target.lastIndexOf(':');
  const host = target.slice(0, separator);
  const port = Number(target.slice(separator + 1));
  const sockets = new Set();
  const server = createServer((client) => {
    const upstream = createConnection({ host, port });
    for (const [socket, other] of [
      [client, upstream],
      [upstream, client],
    ]) {
      sockets.add(socket);
      socket.pipe(other);
      socket.on('error', () => other.destroy());
      socket.on('close', () => {
        sockets.delete(socket);
        other.destroy();
      });
    }
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    target: `127.0.0.1:${server.address().port}`,
    cut() {
      const count = sockets.size;
      for (const socket of sockets) socket.destroy();
      return count;
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      server.close();
      await once(server, 'close');
    },
  };
}
