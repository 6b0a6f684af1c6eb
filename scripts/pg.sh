#!/usr/bin/env bash
# A private PostgreSQL server for the tests and benchmarks of the shared store (issue 15) and
# for trying `awf serve --store postgres://…` by hand:
#
#   scripts/pg.sh start   installs Debian's `postgresql` if missing (apt, as root), creates a
#                         data directory under .cache/pg/<port> (trust auth, loopback only),
#                         starts the server on $AWF_PG_PORT (default 55432) and prints its URL
#   scripts/pg.sh stop    stops it (fast shutdown) and removes the data directory
#   scripts/pg.sh url     prints the URL: postgresql://postgres@127.0.0.1:<port>/postgres
#
# As root the server runs as the `postgres` user (`runuser -u postgres`): PostgreSQL refuses to
# run as root. Nothing outside .cache/pg is touched, and no system cluster is started.
#
# Exit status: 0 on success; 1 when the server cannot be installed or started (the log is
# printed).
set -euo pipefail
cd "$(dirname "$0")/.."

port="${AWF_PG_PORT:-55432}"
base="$PWD/.cache/pg"
dir="$base/$port"
url="postgresql://postgres@127.0.0.1:$port/postgres"

bindir() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/pg_ctl" ] && { echo "$d"; return 0; }
  done
  return 1
}

as_pg() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

install() {
  bindir >/dev/null && return 0
  echo "installing postgresql (Debian)" >&2
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get install -y -q --no-install-recommends postgresql >/dev/null ||
    { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q --no-install-recommends postgresql >/dev/null; }
  bindir >/dev/null
}

start() {
  install || { echo "pg.sh: cannot install postgresql" >&2; exit 1; }
  local bin
  bin="$(bindir)"
  if [ -f "$dir/data/postmaster.pid" ] && as_pg "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
    echo "$url"
    return 0
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  [ "$(id -u)" = 0 ] && chown postgres "$dir"
  as_pg "$bin/initdb" -D "$dir/data" -A trust -U postgres --no-sync >"$dir/initdb.log" 2>&1 ||
    { cat "$dir/initdb.log" >&2; exit 1; }
  # Many test databases at once; fsync off: the data is thrown away.
  as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=400 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
    start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
  echo "$url"
}

stop() {
  local bin
  bin="$(bindir)" || return 0
  if [ -d "$dir/data" ]; then
    as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  url) echo "$url" ;;
  *) echo "usage: scripts/pg.sh start|stop|url" >&2; exit 2 ;;
esac
