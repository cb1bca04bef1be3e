#!/usr/bin/env bash
# Create a topic with Kafka's own TopicCommand (the classpath of
# scripts/kafka-start.sh). Idempotent: an existing topic is left as it is,
# even if its partitions or configs differ.
#
# Usage: scripts/kafka-topic.sh BROKERS TOPIC PARTITIONS [TopicCommand args...]
#   e.g. scripts/kafka-topic.sh 127.0.0.1:9092 pin.crm.booking-expired.v1 6 \
#          --config retention.ms=604800000 --config cleanup.policy=delete
#
# Replication factor is 1 (single-node test broker).
set -euo pipefail

# shellcheck source=SCRIPTDIR/kafka/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/kafka/lib.sh"

main() {
  (( $# >= 3 )) || die "usage: $(basename "$0") BROKERS TOPIC PARTITIONS [--config k=v ...]"
  local brokers="$1" topic="$2" partitions="$3"
  shift 3
  [[ "$partitions" =~ ^[1-9][0-9]*$ ]] || die "PARTITIONS must be a positive number, got '$partitions'"
  kafka_run_class org.apache.kafka.tools.TopicCommand \
    --bootstrap-server "$brokers" --create --if-not-exists \
    --topic "$topic" --partitions "$partitions" --replication-factor 1 "$@"
}

main "$@"
