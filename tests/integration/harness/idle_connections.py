"""Holds idle TCP connections open for the Rust harness (tests/integration/harness/flood.rs).

A test process may not hold as many sockets as a flood needs (its open-file limit), so the
harness splits a flood over children running this script.

Usage: python3 idle_connections.py HOST PORT COUNT FIRST_SOURCE
Opens COUNT connections to HOST:PORT that send nothing, from source addresses 127.0.0.N
rotating over ten addresses from N = FIRST_SOURCE, prints "opened K" (K connected), then
answers each line "closed" on stdin with the number the server has closed, and exits (closing
every connection) when stdin ends.
"""

import errno
import selectors
import socket
import sys
import time

# Connections set up at once, and how long each batch may take.
BATCH = 500
CONNECT_TIMEOUT = 3


def open_connections(host, port, count, first_source):
    """Connects in batches, without blocking on each connection: one at a time is slow."""
    connections = []
    for start in range(0, count, BATCH):
        pending = {}
        selector = selectors.DefaultSelector()
        for index in range(start, min(start + BATCH, count)):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                sock.bind((f"127.0.0.{first_source + index % 10}", 0))
                if sock.connect_ex((host, port)) not in (0, errno.EINPROGRESS):
                    raise OSError("connect failed")
            except OSError:
                sock.close()
                continue
            pending[sock.fileno()] = sock
            selector.register(sock, selectors.EVENT_WRITE)
        deadline = time.monotonic() + CONNECT_TIMEOUT
        while pending and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=0.1):
                sock = pending.pop(key.fd)
                selector.unregister(sock)
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    connections.append(sock)
                else:
                    sock.close()
        for sock in pending.values():
            sock.close()
        selector.close()
    return connections


def closed_by_server(sock):
    try:
        return sock.recv(64, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError as error:
        return error.errno != errno.EAGAIN


def main():
    host, port, count, first_source = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    connections = open_connections(host, port, count, first_source)
    print(f"opened {len(connections)}", flush=True)
    for line in sys.stdin:
        if line.strip() == "closed":
            print(sum(closed_by_server(sock) for sock in connections), flush=True)


if __name__ == "__main__":
    main()
