#!/usr/bin/env bash
# The main job end to end on throwaway services: start PostgreSQL and Kafka, apply
# sql/, seed bookings, run one expiration cycle, relay the outbox to Kafka, and show
# what a consumer reads.
#
# Usage: scripts/demo.sh    (uses DATABASE_URL / KAFKA_BROKERS instead, if set: the
#                            database must be a scratch one, since the demo migrates
#                            and seeds it)
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

ensure_build_deps
echo "== building booking-expire" >&2
cargo build --locked --quiet
BIN=${CARGO_TARGET_DIR:-target}/debug/booking-expire

trap stop_services EXIT
start_postgres
start_kafka
TOPIC=pin.crm.booking-expired.v1
scripts/kafka-topic.sh "$KAFKA_BROKERS" "$TOPIC" 6 >/dev/null 2>&1
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

echo; echo "== booking-expire relay-outbox: outbox -> Kafka (acks=all, idempotent)"
"$BIN" relay-outbox --brokers "$KAFKA_BROKERS" 2>/dev/null
show "SELECT count(*) FILTER (WHERE published_at IS NOT NULL) AS published,
             count(*) FILTER (WHERE published_at IS NULL) AS pending FROM crm.outbox"

echo "== what a consumer of $TOPIC reads (partition | headers | key | value)"
scripts/kafka/run-class.sh org.apache.kafka.tools.consumer.ConsoleConsumer \
    --bootstrap-server "$KAFKA_BROKERS" --topic "$TOPIC" --from-beginning \
    --max-messages "$(psql "$DATABASE_URL" -X -A -t -c 'SELECT count(*) FROM crm.outbox')" --timeout-ms 20000 \
    --formatter-property print.partition=true --formatter-property print.headers=true \
    --formatter-property print.key=true --formatter-property key.separator=' | ' \
    --formatter-property headers.separator=' ' 2>/dev/null
