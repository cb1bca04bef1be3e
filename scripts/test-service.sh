#!/usr/bin/env bash
# A throwaway PostgreSQL or Kafka broker that lives as long as the process that
# asked for it: the integration tests' harness (tests/it/common/services.rs) runs this
# when DATABASE_URL / KAFKA_BROKERS are not set.
#
# Usage: scripts/test-service.sh postgres|kafka
#
# Starts the service in a new temporary directory (scripts/pg-start.sh,
# scripts/kafka-start.sh; their environment applies, e.g. PG_FLAVOR, KAFKA_VERSION),
# prints its address (the URL, or host:port) as the only stdout line, then waits until
# stdin reaches end of file: the caller exited, however it ended (its end of the pipe
# closes with it). Then it stops the service and removes the directory. Start-up
# progress goes to a log in that directory, printed to stderr when the start fails.
# Run it in a process group of its own, so that an interrupt of the caller (Ctrl-C)
# reaches the caller alone and this script still cleans up after it.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly SCRIPT_DIR

kind=${1:-}
case $kind in
    postgres | kafka) ;;
    *)
        echo "usage: $(basename "$0") postgres|kafka" >&2
        exit 2
        ;;
esac

dir=$(mktemp -d "${TMPDIR:-/tmp}/be-it-$kind.XXXXXX")
# pg-start.sh runs the server as the postgres user when we are root: it must reach
# the directory.
chmod 755 "$dir"
state=$dir/$kind
log=$dir/start.log

stop() {
    case $kind in
        postgres) "$SCRIPT_DIR/pg-stop.sh" "$state" ;;
        kafka) "$SCRIPT_DIR/kafka-stop.sh" "$state" ;;
    esac >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap stop EXIT
# An interrupt of the terminal's process group, should it reach us, does not cut the
# clean-up short.
trap '' INT

case $kind in
    postgres) start=("$SCRIPT_DIR/pg-start.sh" "$state") ;;
    kafka)
        mkdir "$state"
        start=("$SCRIPT_DIR/kafka-start.sh" "$state")
        ;;
esac
if ! address=$("${start[@]}" 2>"$log"); then
    echo "$(basename "${start[0]}") failed:" >&2
    tail -n 40 "$log" >&2
    exit 1
fi
echo "$address"
# Until the caller's end of stdin closes.
cat >/dev/null
