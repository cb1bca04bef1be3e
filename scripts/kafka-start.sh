#!/usr/bin/env bash
# Start a throwaway single-node Apache Kafka broker (KRaft, combined
# broker+controller) for tests and the demo: 4.x by default, 3.9 on request;
# or, with KAFKA_NODES=3, a three-node cluster as production runs one.
#
# Usage: scripts/kafka-start.sh STATE_DIR
#
#   It runs `testbed start kafka STATE_DIR` (crates/testbed, built with cargo as
#   scripts/lib.sh's testbed_bin does; the same code the tests start their
#   brokers with), which reads the environment below as its defaults.
#
#   KAFKA_NODES=3: three combined nodes (one JVM each) in STATE_DIR/node1..3,
#   each a broker and a voter of a static three-voter quorum, with replication
#   factor 3 and min.insync.replicas=2 for every topic; the three addresses are
#   printed comma-separated (and written to STATE_DIR/kafka_brokers). One node is
#   stopped, killed or restarted with the same scripts on its own directory
#   (kafka-stop.sh STATE_DIR/node2 [--kill]; kafka-start.sh STATE_DIR/node2);
#   kafka-stop.sh STATE_DIR stops them all, kafka-start.sh STATE_DIR starts those
#   not running. Each node's heap defaults to -Xmx256m -Xms64m (three JVMs on
#   two cores).
#
#   STATE_DIR must exist (e.g. from `mktemp -d`). On success the broker runs
#   detached (a session of its own: it outlives this script and the shell) and
#   "127.0.0.1:PORT" is printed as the only stdout line and written to
#   STATE_DIR/kafka_brokers; progress goes to stderr. Stop it with
#   scripts/kafka-stop.sh.
#
#   Run again on a STATE_DIR that already holds a formatted broker, it restarts
#   that broker on the same ports with its data (no reformat; KAFKA_PORT may move
#   its PLAINTEXT listener, the controller's port stays). If the broker is still
#   running it just prints its address.
#
# Files in STATE_DIR: server.properties, log4j2.properties, data/ (log.dirs),
# kafka.log (broker stdout/stderr; kafka.log.1 of the run before), kafka_brokers,
# classpath (the broker's jars), testbed.json (the testbed's state, JSON: the
# broker's pid, its Kafka version, a cluster node's heap, the AppCDS archive the
# JVM is to write at exit until kafka-stop.sh publishes it); with KAFKA_TLS_DIR
# also tls/server.pem (the key and certificate, 0600); a cluster's STATE_DIR
# holds node1..3, kafka_brokers and testbed.json (its nodes' directories, the
# addresses, the version).
#
# Environment (all optional):
#   KAFKA_VERSION        which Kafka the broker runs: a version pinned by a pom in
#                        scripts/kafka/ — pom.xml's (4.4.0, the default) or
#                        pom-3.9.xml's (3.9.1). Anything else is refused with the
#                        list. A restart keeps the version of the first start.
#   KAFKA_PORT           broker port to use instead of a free one
#   KAFKA_START_TIMEOUT  seconds to wait for the broker (default 90)
#   KAFKA_HEAP_OPTS      default "-Xmx512m -Xms256m"
#   KAFKA_JVM_OPTS       default "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
#   KAFKA_CDS=0          no AppCDS archive (see scripts/kafka/lib.sh)
#   KAFKA_TLS_DIR        directory with server.crt (PEM, chain allowed) and
#                        server.key (PEM, PKCS#8, unencrypted): a fresh broker
#                        gets two more listeners, SSL://127.0.0.1:P and
#                        SASL_SSL://127.0.0.1:Q (SCRAM-SHA-512), written to
#                        STATE_DIR/kafka_ssl_brokers and kafka_sasl_ssl_brokers;
#                        the PLAINTEXT listener stays. The SCRAM user is
#                        KAFKA_SASL_USER (default relay) with KAFKA_SASL_PASSWORD
#                        (default: random), written to STATE_DIR/kafka_sasl_user
#                        and kafka_sasl_password (mode 0600). A restart reuses
#                        what the first start configured.
#   KAFKA_NODES          1 (the default) or 3: see above
#   KAFKA_SASL_EXTRA_USERS  with KAFKA_TLS_DIR: more SCRAM-SHA-512 users for the
#                        SASL_SSL listener, "name:password" separated by spaces
#                        (names and passwords: letters, digits, - and _ only),
#                        e.g. one per application for ACL tests.
#   KAFKA_AUTHORIZER=1   a fresh broker gets KRaft's StandardAuthorizer: a
#                        principal may do only what an ACL allows it (no ACL
#                        found = denied). The PLAINTEXT listener's principal,
#                        User:ANONYMOUS, is a super user: the broker and its
#                        controller talk over PLAINTEXT, and tests administer
#                        the broker (topics, ACLs) through it. Off by default.
#
# Jars come from Maven Central via scripts/kafka/pom.xml; the resolved
# classpath is cached under ${XDG_CACHE_HOME:-~/.cache}/booking-expire/, so a
# warm start does not run Maven. java 17 and maven are installed with apt-get
# when missing (root only).
set -euo pipefail

# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=SCRIPTDIR/kafka/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/kafka/lib.sh"

usage() { die "usage: $(basename "$0") STATE_DIR  (an existing directory, e.g. from mktemp -d)"; }

main() {
  local bin
  [[ $# -eq 1 && -n "$1" ]] || usage
  bin="$(cd "$SCRIPTS_DIR/.." && testbed_bin)" \
    || die "could not build the testbed (cargo build -p booking-expire-testbed)"
  # The testbed reads KAFKA_* itself, as `testbed serve kafka` does.
  BOOKING_EXPIRE_SCRIPTS="$SCRIPTS_DIR" exec "$bin" start kafka "$1"
}

main "$@"
