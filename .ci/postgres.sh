#!/usr/bin/env bash
# Start a throwaway PostgreSQL server on loopback for the tests, and print its URL.
#
#   export AUTOTUNE_TEST_POSTGRES_URL=$(bash .ci/postgres.sh start)
#   bash .ci/postgres.sh stop
#
# Installs Debian's `postgresql` package when no server binaries are present. The
# cluster lives in a temporary folder owned by the `postgres` user (the server
# refuses to run as root), listens on 127.0.0.1 only, trusts local connections,
# and is thrown away by `stop`. Running `start` again replaces an earlier one.
set -euo pipefail

DIR=${AUTOTUNE_CI_PGDIR:-/tmp/autotune-ci-postgres}
log() { echo "postgres.sh: $*" >&2; }

pgbin() {
    ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

stop() {
    local bin
    bin=$(pgbin)
    if [ -n "$bin" ] && [ -f "$DIR/data/postmaster.pid" ]; then
        runuser -u postgres -- "$bin/pg_ctl" -D "$DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$DIR"
}

start() {
    if [ -z "$(pgbin)" ]; then
        log "installing PostgreSQL from the OS packages"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >&2
        apt-get install -y -qq postgresql >&2
    fi
    local bin port
    bin=$(pgbin)
    if [ -z "$bin" ]; then
        log "no PostgreSQL server binaries under /usr/lib/postgresql after installing"
        exit 1
    fi
    id -u postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    stop
    mkdir -p "$DIR"
    chown postgres "$DIR"
    # A free port on loopback, so a server already running elsewhere on this machine is left alone.
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    runuser -u postgres -- "$bin/initdb" -D "$DIR/data" -U autotune --auth=trust -E UTF8 >"$DIR/initdb.log" 2>&1 \
        || { cat "$DIR/initdb.log" >&2; exit 1; }
    runuser -u postgres -- "$bin/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$DIR -c max_connections=200 -c fsync=off" \
        start >/dev/null || { cat "$DIR/server.log" >&2; exit 1; }
    "$bin/createdb" -h 127.0.0.1 -p "$port" -U autotune autotune_test
    log "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port, data in $DIR"
    echo "postgresql://autotune@127.0.0.1:$port/autotune_test"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
