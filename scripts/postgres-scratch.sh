#!/usr/bin/env bash
# Runs a throwaway PostgreSQL for tests, in the foreground, until it is signalled:
#   scripts/postgres-scratch.sh DIR PORT
# DIR (made if missing) holds the cluster (DIR/data, made by initdb on first use) and the Unix
# socket; the server listens on 127.0.0.1:PORT only, as the superuser `postgres` with trust
# authentication and fsync off: postgresql://postgres@127.0.0.1:PORT/postgres. SIGTERM or SIGINT
# stops it (the last line of this script execs postgres, so the caller's pid is the server's).
#
# PostgreSQL refuses to run as root: as root, initdb and postgres run as the unprivileged user
# `postgres` that Debian's package creates (setpriv), and DIR is handed to that user. Installs
# Debian's `postgresql` when no server is found (scripts/test.sh does it first, so that parallel
# tests never race on apt).
set -euo pipefail

if (($# != 2)); then
  echo "usage: $0 DIR PORT" >&2
  exit 2
fi
dir=$1 port=$2

bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
if [[ -z "$(bindir)" ]]; then
  echo "installing postgresql from Debian" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
fi
bin=$(bindir)

as_postgres=()
mkdir -p "$dir"
if [[ $(id -u) == 0 ]]; then
  as_postgres=(setpriv --reuid=postgres --regid=postgres --init-groups --)
  chown postgres: "$dir"
  chmod 700 "$dir"
fi

if [[ ! -f "$dir/data/PG_VERSION" ]]; then
  "${as_postgres[@]}" "$bin/initdb" -D "$dir/data" -U postgres --auth=trust --no-sync \
    --encoding=UTF8 --locale=C >"$dir/initdb.log" 2>&1 ||
    { cat "$dir/initdb.log" >&2; exit 1; }
fi

exec "${as_postgres[@]}" "$bin/postgres" -D "$dir/data" -p "$port" -k "$dir" \
  -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off \
  -c full_page_writes=off -c max_connections=200 -c logging_collector=off
