#!/usr/bin/env bash
# The main job end to end on throwaway services: start PostgreSQL and Kafka, migrate
# (booking-expire migrate), seed bookings (scripts/demo-seed.sql: fixed ids, deadlines relative to now),
# run one expiration cycle, relay the outbox to Kafka, read the topic back with a real
# consumer, and sum up what happened.
#
# Usage: scripts/demo.sh    (uses DATABASE_URL / KAFKA_BROKERS instead, if set: the
#                            database must be a scratch one, since the demo migrates
#                            and seeds it)
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

ensure_build_deps
BIN=${CARGO_TARGET_DIR:-target}/debug/booking-expire
if [[ -x $BIN ]]; then
    echo "== building booking-expire (cargo build; seconds when nothing changed)" >&2
else
    echo "== building booking-expire: the first build takes minutes (193 s of CPU, 12 min" \
         "of wall time measured on 2 cores under a heavy load): librdkafka, Kafka's C" \
         "client, is compiled from source; cargo's progress follows" >&2
fi
cargo build --locked

echo "== starting a throwaway PostgreSQL and Kafka (the first run also fetches Kafka's jars)" >&2
WORK=$(mktemp -d)
trap 'stop_services; rm -rf "$WORK"' EXIT
start_postgres
start_kafka
TOPIC=pin.crm.booking-expired.v1
scripts/kafka-topic.sh "$KAFKA_BROKERS" "$TOPIC" 6 >/dev/null 2>&1
RUST_LOG=warn "$BIN" migrate --database-url "$DATABASE_URL" >/dev/null
psql "$DATABASE_URL" -X -q -v ON_ERROR_STOP=1 -f scripts/demo-seed.sql

show() { psql "$DATABASE_URL" -X -q -P pager=off -c "$1"; }
# shorten: cuts lines longer than the screen, marking the cut with "…".
shorten() { awk '{ print (length($0) > 118 ? substr($0, 1, 117) "…" : $0) }'; }
value() { psql "$DATABASE_URL" -X -q -A -t -c "$1"; }

echo; echo "== bookings before the cycle (the deadline of each booking's current phase)"
show "SELECT b.id AS booking_id, b.status,
             CASE WHEN d.at IS NULL THEN '-'
                  WHEN d.at < now() THEN w.span || ' ago' ELSE 'in ' || w.span END AS deadline,
             CASE WHEN d.at IS NULL THEN 'never expires (terminal status)'
                  WHEN d.at < now() THEN 'overdue: expires now'
                  ELSE 'stays active until then' END AS this_cycle
        FROM crm.bookings b
       CROSS JOIN LATERAL (SELECT CASE WHEN b.status = 'Booked' THEN b.booking_expires_at
                                       WHEN b.status IN ('Reserved', 'AwaitingPayment')
                                       THEN b.reserve_expires_at END AS at) d
       CROSS JOIN LATERAL (SELECT round(abs(extract(epoch FROM now() - d.at)) / 60)::int AS m) x
       CROSS JOIN LATERAL (SELECT CASE WHEN x.m >= 2880 THEN x.m / 1440 || ' d'
                                       WHEN x.m >= 60 THEN x.m / 60 || ' h'
                                       ELSE x.m || ' min' END AS span) w
       ORDER BY b.tenant_id, b.id"

# run_quiet LOG COMMAND...: runs COMMAND with its log lines (stderr) in LOG; shows the
# log and fails when the command fails.
run_quiet() {
    local log=$1
    shift
    "$@" 2>"$log" || { cat "$log" >&2; echo "demo: failed: $*" >&2; return 1; }
}

echo "== booking-expire run-once: its result on stdout (its log lines go to stderr; some below)"
run_quiet "$WORK/run-once.log" "$BIN" run-once
echo "   log: $(wc -l <"$WORK/run-once.log") lines, e.g."
for message in "cycle started" "booking expired" "cycle completed"; do
    grep -m 1 "$message" "$WORK/run-once.log" |
        sed -E 's/^[^ ]+ +([A-Z]+) +RunId=[^ ]+ /   \1 /' | shorten
done

echo; echo "== bookings after the cycle"
show "SELECT status, count(*) AS bookings FROM crm.bookings GROUP BY status ORDER BY status"
echo "== outbox: one pending event per expiry, keyed by the booking id"
show "SELECT seq, aggregateid AS key, payload->>'Phase' AS phase, published_at IS NULL AS pending
        FROM crm.outbox ORDER BY seq"
echo "== the first event's payload (the Kafka value) and headers (CloudEvents, binary mode)"
show "SELECT jsonb_pretty(payload) AS payload, jsonb_pretty(headers) AS headers FROM crm.outbox ORDER BY seq LIMIT 1"

echo "== a second cycle finds nothing more to do"
run_quiet "$WORK/run-once-2.log" "$BIN" run-once

echo; echo "== booking-expire relay-outbox: outbox -> Kafka (acks=all, idempotent producer)"
run_quiet "$WORK/relay.log" "$BIN" relay-outbox --brokers "$KAFKA_BROKERS"

EVENTS=$(value "SELECT count(*) FROM crm.outbox")
scripts/kafka/run-class.sh org.apache.kafka.tools.consumer.ConsoleConsumer \
    --bootstrap-server "$KAFKA_BROKERS" --topic "$TOPIC" --from-beginning \
    --max-messages "$EVENTS" --timeout-ms 20000 \
    --formatter-property print.partition=true --formatter-property print.key=true \
    --formatter-property key.separator=' ' >"$WORK/consumed" 2>/dev/null || true
echo; echo "== what a consumer of $TOPIC reads: $(wc -l <"$WORK/consumed") messages, the first 3 (partition, key, value)"
head -n 3 "$WORK/consumed" | sed 's/^/   /' | shorten

echo; echo "== summary"
value "SELECT '   expired:   ' || count(*) FILTER (WHERE payload->>'Phase' = 'Reserve') || ' in the Reserve phase, '
                   || count(*) FILTER (WHERE payload->>'Phase' = 'Booking') || ' in the Booking phase (one event each)'
         FROM crm.outbox"
value "SELECT '   published: ' || count(*) FILTER (WHERE published_at IS NOT NULL) || ' of '
                   || count(*) || ' events to $TOPIC; a consumer read ' || $(wc -l <"$WORK/consumed")
         FROM crm.outbox"
value "SELECT '   untouched: ' || count(*) FILTER (WHERE status IN ('Reserved', 'AwaitingPayment', 'Booked'))
                   || ' not yet due, ' || count(*) FILTER (WHERE status IN ('Cancelled', 'Completed'))
                   || ' terminal (Cancelled, Completed: never expire)'
         FROM crm.bookings"
cat <<EOF
   next:
     the binary      $BIN   (--help: subcommands, flags, exit codes)
     step by step    docs/guides/operating.md, "A worked example": the same seed, with these bookings
                     b1000004-0000-4000-8000-000000000000  Booked, overdue (made inconsistent there)
                     b1000005-0000-4000-8000-000000000000  Reserved, due in an hour
                     b2000005-0000-4000-8000-000000000000  Reserved, due in an hour
     the tests       scripts/test.sh
EOF
