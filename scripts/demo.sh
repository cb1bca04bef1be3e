#!/usr/bin/env bash
# The main job end to end on throwaway services: start PostgreSQL, apply sql/, seed
# bookings, run one expiration cycle, and show what changed and what the outbox holds.
#
# Usage: scripts/demo.sh    (uses DATABASE_URL instead, if set: it must be a scratch
#                            database, since the demo migrates and seeds it)
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

ensure_build_deps
echo "== building booking-expire" >&2
cargo build --locked --quiet
BIN=${CARGO_TARGET_DIR:-target}/debug/booking-expire

trap stop_postgres EXIT
start_postgres
scripts/migrate.sh "$DATABASE_URL"
psql "$DATABASE_URL" -X -q -v ON_ERROR_STOP=1 -f scripts/demo-seed.sql

show() { psql "$DATABASE_URL" -X -q -P pager=off -c "$1"; }

echo; echo "== bookings before the cycle"
show "SELECT status, count(*) AS bookings,
             count(*) FILTER (WHERE coalesce(CASE WHEN status = 'Booked' THEN booking_expires_at
                                                  ELSE reserve_expires_at END, 'infinity') < now()) AS overdue
        FROM crm.bookings GROUP BY status ORDER BY status"

echo "== booking-expire run-once (result on stdout, logs on stderr)"
"$BIN" run-once

echo; echo "== bookings after the cycle"
show "SELECT status, count(*) AS bookings FROM crm.bookings GROUP BY status ORDER BY status"
echo "== outbox: one pending event per expiry"
show "SELECT seq, aggregateid AS key, payload->>'Phase' AS phase, payload->>'ExpiredAt' AS expired_at,
             published_at IS NULL AS pending
        FROM crm.outbox ORDER BY seq"
echo "== one event's payload and headers"
show "SELECT jsonb_pretty(payload) AS payload, jsonb_pretty(headers) AS headers FROM crm.outbox ORDER BY seq LIMIT 1"

echo "== a second cycle finds nothing more to do"
"$BIN" run-once 2>/dev/null
