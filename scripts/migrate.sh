#!/usr/bin/env bash
# Apply the migrations to a database: a thin caller of `booking-expire migrate`, which
# applies the migrations built into the binary (the files of sql/) with a history, a
# lock between migrators and the runner's lock and statement timeouts.
#
# Usage: scripts/migrate.sh DATABASE_URL [MIGRATE_FLAGS...]
#   e.g. scripts/migrate.sh "$DATABASE_URL" --dry-run
#
# Environment (optional):
#   MIGRATE_BIN   the binary to run (default: cargo build --locked, then
#                 ${CARGO_TARGET_DIR:-target}/debug/booking-expire)
set -euo pipefail

usage() {
    printf 'usage: %s DATABASE_URL [booking-expire migrate flags...]\n' "$(basename "$0")" >&2
    exit 2
}

[[ $# -ge 1 && -n $1 ]] || usage
url=$1
shift
cd "$(dirname "$0")/.."
bin=${MIGRATE_BIN:-}
if [[ -z $bin ]]; then
    cargo build --locked --quiet
    bin=${CARGO_TARGET_DIR:-target}/debug/booking-expire
fi
exec "$bin" migrate --database-url "$url" "$@"
