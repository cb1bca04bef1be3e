#!/usr/bin/env bash
# Run any Kafka tool main class on the classpath of scripts/kafka-start.sh,
# e.g. for tests and benchmarks:
#
#   scripts/kafka/run-class.sh org.apache.kafka.tools.ConsoleProducer \
#       --bootstrap-server 127.0.0.1:PORT --topic T
#   scripts/kafka/run-class.sh org.apache.kafka.tools.consumer.ConsoleConsumer \
#       --bootstrap-server 127.0.0.1:PORT --topic T --from-beginning --max-messages 1
#   KAFKA_TOOL_OPTS=-Xmx1g scripts/kafka/run-class.sh \
#       org.apache.kafka.tools.ProducerPerformance --bootstrap-server 127.0.0.1:PORT \
#       --topic T --num-records 100000 --record-size 200 --throughput -1 \
#       --command-property acks=all
#
# Tool logging (WARN and up) goes to stderr; stdout is the tool's own output.
# The jars are those of scripts/kafka-start.sh (also in STATE_DIR/classpath).
# KAFKA_TOOL_OPTS replaces the default start-up-friendly JVM flags
# (-Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1); benchmarks should set
# it so the JIT can reach full speed.
set -euo pipefail

# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

(( $# >= 1 )) || die "usage: $(basename "$0") MAIN_CLASS [ARGS...]"
kafka_run_class "$@"
