#!/usr/bin/env bash
# Stop a throwaway PostgreSQL server started by scripts/pg-start.sh.
#
# Usage: scripts/pg-stop.sh STATE_DIR
#
# It runs `testbed stop STATE_DIR` (crates/testbed, built as pg-start.sh builds it):
# a fast shutdown (pg_ctl stop -m fast, PG_STOP_TIMEOUT seconds, default 60), as the
# OS user that owns the data when run as root.
# Succeeds if the server is already stopped (or was never started). A standby
# (PG_STANDBY_OF) has its replication slot dropped on its primary, if that still runs,
# so that the primary stops keeping WAL for it.
# STATE_DIR itself is left in place, its data too: pg-start.sh STATE_DIR starts the
# same server again; the caller deletes it.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/lib.sh
source "$SCRIPT_DIR/lib.sh"
readonly SCRIPT_DIR

log() { printf 'pg-stop: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    printf 'usage: %s STATE_DIR\n' "$(basename "$0")" >&2
    exit 2
}

main() {
    local bin
    [[ $# -eq 1 && -n $1 ]] || usage
    # Nothing of PostgreSQL's to stop: no need for the testbed.
    if [[ ! -d $1/pgdata ]]; then
        log "no server in $1; nothing to stop"
        return 0
    fi
    bin=$(cd "$SCRIPT_DIR/.." && testbed_bin) \
        || die "could not build the testbed (cargo build -p booking-expire-testbed)"
    BOOKING_EXPIRE_SCRIPTS=$SCRIPT_DIR exec "$bin" stop "$1"
}

main "$@"
