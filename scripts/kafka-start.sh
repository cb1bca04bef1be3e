#!/usr/bin/env bash
# Start a throwaway single-node Apache Kafka broker (KRaft, combined
# broker+controller) for tests and the demo: 4.x by default, 3.9 on request;
# or, with KAFKA_NODES=3, a three-node cluster as production runs one.
#
# Usage: scripts/kafka-start.sh STATE_DIR
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
#   STATE_DIR must exist (e.g. from `mktemp -d`). On success the broker runs in
#   the background and "127.0.0.1:PORT" is printed as the only stdout line and
#   written to STATE_DIR/kafka_brokers. Stop it with scripts/kafka-stop.sh.
#
#   Run again on a STATE_DIR that already holds a formatted broker, it restarts
#   that broker on the same ports with its data (no reformat). If the broker is
#   still running it just prints its address.
#
# Files in STATE_DIR: server.properties, log4j2.properties, data/ (log.dirs),
# kafka.log (broker stdout/stderr; kafka.log.1 of the run before), kafka.pid,
# kafka_brokers, kafka_version, classpath (the broker's jars).
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

readonly READY_LINE='Kafka Server started'

START_TIME="${EPOCHREALTIME/,/.}"
elapsed() { awk -v a="$START_TIME" -v b="${EPOCHREALTIME/,/.}" 'BEGIN { printf "%.1f", b - a }'; }

usage() { die "usage: $(basename "$0") STATE_DIR  (an existing directory, e.g. from mktemp -d)"; }

# --- ports ------------------------------------------------------------------

# Is something accepting connections on 127.0.0.1:$1?
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Read "broker controller" ports back from an existing server.properties.
configured_ports() {
  local listeners
  listeners="$(sed -n 's/^listeners=//p' "$1")"
  [[ "$listeners" =~ PLAINTEXT://[^,]*:([0-9]+) ]] || die "no PLAINTEXT listener in $1"
  local broker="${BASH_REMATCH[1]}"
  [[ "$listeners" =~ CONTROLLER://[^,]*:([0-9]+) ]] || die "no CONTROLLER listener in $1"
  printf '%s %s\n' "$broker" "${BASH_REMATCH[1]}"
}

# Ports of the TLS listeners (KAFKA_TLS_DIR) in an existing server.properties.
tls_ports() {
  sed -n 's/^listeners=//p' "$1" | tr ',' '\n' | sed -n 's/^\(SSL\|SASL_SSL\):\/\/.*:\([0-9]*\)$/\2/p'
}

require_free() {
  local port
  for port in "$@"; do
    ! port_in_use "$port" || die "port $port on 127.0.0.1 is already in use"
  done
}

# --- config -----------------------------------------------------------------

# server.properties for a single combined node. Besides what a broker needs,
# it trims everything that makes a throwaway broker slow to start or stop, or
# big in memory.
write_server_properties() {
  local dir="$1" broker="$2" controller="$3"
  # A cluster's node (start_cluster) sets these; a single node is its own quorum.
  local node_id="${NODE_ID:-1}" rf="${NODE_RF:-1}" min_isr="${NODE_MIN_ISR:-1}"
  local quorum="controller.quorum.bootstrap.servers=127.0.0.1:$controller"
  [[ -z "${NODE_VOTERS:-}" ]] || quorum="controller.quorum.voters=$NODE_VOTERS"
  local listeners="PLAINTEXT://127.0.0.1:$broker,CONTROLLER://127.0.0.1:$controller"
  local advertised="PLAINTEXT://127.0.0.1:$broker"
  local protocols="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
  if [[ -n "$TLS_PORT" ]]; then
    listeners+=",SSL://127.0.0.1:$TLS_PORT,SASL_SSL://127.0.0.1:$SASL_PORT"
    advertised+=",SSL://127.0.0.1:$TLS_PORT,SASL_SSL://127.0.0.1:$SASL_PORT"
    protocols+=",SSL:SSL,SASL_SSL:SASL_SSL"
  fi
  cat >"$dir/server.properties" <<EOF
# Generated by scripts/kafka-start.sh; reused as-is on restart.
process.roles=broker,controller
node.id=$node_id
# A single node: dynamic KRaft quorum (4.x), the storage formatted with
# --standalone, so this node is the sole voter. A cluster's node: a static quorum
# of the three. Either way the controller port is in the metadata log, so it
# must stay the same across restarts.
$quorum
controller.listener.names=CONTROLLER
listeners=$listeners
advertised.listeners=$advertised
listener.security.protocol.map=$protocols
inter.broker.listener.name=PLAINTEXT
log.dirs=$dir/data

# Topics are created explicitly (scripts/kafka-topic.sh); a typo in a topic
# name must fail instead of silently creating a new topic.
auto.create.topics.enable=false
num.partitions=6
default.replication.factor=$rf
min.insync.replicas=$min_isr
unclean.leader.election.enable=false

# Internal topics: one replica on each node, and one partition each (the
# defaults of 50 partitions make the first consumer group or transaction
# wait for 50 partition leaders).
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$min_isr
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$min_isr
share.coordinator.state.topic.num.partitions=1

# Consumer groups start consuming immediately instead of after 3 s.
group.initial.rebalance.delay.ms=0

# Fewer threads and a smaller log-cleaner buffer (default 128 MiB, allocated
# up front on the heap) keep the broker small; it is never under real load
# on a 2-core machine anyway.
num.network.threads=2
num.io.threads=2
background.threads=2
num.recovery.threads.per.data.dir=1
log.cleaner.threads=1
log.cleaner.dedupe.buffer.size=16777216

# Faster broker registration/unfencing on start and faster shutdown.
broker.heartbeat.interval.ms=200
broker.session.timeout.ms=3000
EOF
  if [[ -n "$TLS_PORT" ]]; then
    cat >>"$dir/server.properties" <<EOF

# KAFKA_TLS_DIR: the SSL and SASL_SSL listeners' key and certificate (copied
# into STATE_DIR, so a restart needs nothing else), and SCRAM-SHA-512 on
# SASL_SSL; the credential is in the metadata log (see format_storage).
ssl.keystore.type=PEM
ssl.keystore.location=$dir/tls/server.pem
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
EOF
  fi
  if [[ "${KAFKA_AUTHORIZER:-0}" == 1 ]]; then
    cat >>"$dir/server.properties" <<EOF

# KAFKA_AUTHORIZER=1: ACLs enforced (KRaft's own authorizer, ACLs in the metadata
# log). PLAINTEXT clients, the broker and the controller are User:ANONYMOUS.
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS
allow.everyone.if.no.acl.found=false
EOF
  fi
}

# Copy the key and certificate of KAFKA_TLS_DIR into STATE_DIR/tls and pick the
# SCRAM user's credentials (KAFKA_SASL_PASSWORD: letters, digits, - and _ only).
prepare_tls() {
  local dir="$1" f
  for f in server.crt server.key; do
    [[ -r "$KAFKA_TLS_DIR/$f" ]] || die "KAFKA_TLS_DIR=$KAFKA_TLS_DIR has no readable $f"
  done
  mkdir -p "$dir/tls"
  (umask 077 && cat "$KAFKA_TLS_DIR/server.key" "$KAFKA_TLS_DIR/server.crt" >"$dir/tls/server.pem")
  printf '%s\n' "${KAFKA_SASL_USER:-relay}" >"$dir/kafka_sasl_user"
  (umask 077 && printf '%s\n' "${KAFKA_SASL_PASSWORD:-$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')}" \
    >"$dir/kafka_sasl_password")
}

# Broker log4j2 config: INFO to stdout, which is redirected to kafka.log.
write_log4j_config() {
  cat >"$1/log4j2.properties" <<'EOF'
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.target = SYSTEM_OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
# Per-request and per-partition chatter that buries the interesting lines.
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
EOF
}

# A random KRaft cluster id: 16 random bytes, base64url without padding, like
# `kafka-storage.sh random-uuid` but without starting a JVM for it. Kafka
# rejects ids whose string form starts with '-', so avoid those.
random_cluster_id() {
  local id
  while :; do
    id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
    [[ "$id" == -* ]] || { printf '%s\n' "$id"; return; }
  done
}

format_storage() {
  local dir="$1" out
  local -a scram=()
  # The SCRAM credential lives in the metadata log, written at format time.
  if [[ -n "$TLS_PORT" ]]; then
    scram=(--add-scram "SCRAM-SHA-512=[name=$(cat "$dir/kafka_sasl_user"),password=$(cat "$dir/kafka_sasl_password")]")
    local user
    for user in ${KAFKA_SASL_EXTRA_USERS:-}; do
      [[ "$user" =~ ^([A-Za-z0-9_-]+):([A-Za-z0-9_-]+)$ ]] \
        || die "KAFKA_SASL_EXTRA_USERS: want name:password, got an entry of another form"
      scram+=(--add-scram "SCRAM-SHA-512=[name=${BASH_REMATCH[1]},password=${BASH_REMATCH[2]}]")
    done
  fi
  log "formatting KRaft storage in $dir/data"
  # A cluster's nodes share one id and a static quorum (no --standalone).
  local -a quorum=(--standalone)
  [[ -z "${NODE_VOTERS:-}" ]] || quorum=()
  if ! out="$(kafka_run_class kafka.tools.StorageTool format "${quorum[@]}" \
      --cluster-id "${NODE_CLUSTER_ID:-$(random_cluster_id)}" --config "$dir/server.properties" "${scram[@]}" 2>&1)"; then
    printf '%s\n' "$out" >&2
    die "formatting storage failed"
  fi
}

# --- process ----------------------------------------------------------------

# Pid of the broker of this STATE_DIR if it is running. Checks the command
# line too, so a recycled pid is not mistaken for our broker.
running_pid() {
  local dir="$1" pid
  [[ -f "$dir/kafka.pid" ]] || return 1
  pid="$(cat "$dir/kafka.pid")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF "kafka.Kafka $dir/server.properties" || return 1
  printf '%s\n' "$pid"
}

# Drop an AppCDS archive that an earlier broker JVM of this STATE_DIR was to
# write at exit but that kafka-stop.sh never published (crash, failed start).
discard_pending_cds() {
  local tmp final
  if [[ -f "$1/cds_pending" ]]; then
    read -r tmp final <"$1/cds_pending" || true
    cds_publish "${tmp:-}" "${final:-}" 0
    rm -f "$1/cds_pending"
  fi
}

launch() {
  local dir="$1" java="$2" cp="$3" pid
  printf '%s\n' "$cp" >"$dir/classpath"   # handy for tests running Kafka tools
  discard_pending_cds "$dir"
  # Without an archive yet, this broker writes one when it exits and
  # kafka-stop.sh publishes it after a clean stop (see cds_setup).
  cds_setup broker "$java" "$cp"
  [[ -z "$CDS_TMP" ]] || printf '%s %s\n' "$CDS_TMP" "$CDS_FINAL" >"$dir/cds_pending"
  # Keep the previous run's log for post-mortems; the ready check only reads
  # the new one.
  [[ ! -s "$dir/kafka.log" ]] || mv -f "$dir/kafka.log" "$dir/kafka.log.1"
  # SerialGC and a C1-only JIT start ~15% faster and use ~40 MB less than
  # the defaults (G1, C2) on 2 cores; the broker never sees production load.
  # A cluster's node keeps the smaller heap it was first started with.
  local heap="${KAFKA_HEAP_OPTS:--Xmx512m -Xms256m}"
  [[ ! -s "$dir/heap_opts" ]] || heap="$(cat "$dir/heap_opts")"
  # shellcheck disable=SC2086 # option lists are meant to split
  "$java" $heap \
    ${KAFKA_JVM_OPTS:--XX:+UseSerialGC -XX:TieredStopAtLevel=1} \
    "${CDS_FLAGS[@]}" \
    -XX:+ExitOnOutOfMemoryError -XX:-UsePerfData -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$dir/log4j2.properties" \
    -cp "$cp" kafka.Kafka "$dir/server.properties" \
    </dev/null >"$dir/kafka.log" 2>&1 &
  pid=$!
  printf '%s\n' "$pid" >"$dir/kafka.pid"
  log "broker pid $pid, log $dir/kafka.log"
}

# Wait until the broker logged that it started and accepts connections.
# Returns 1 if the process died, 2 on timeout.
wait_ready() {
  local dir="$1" port="$2" pid deadline
  pid="$(cat "$dir/kafka.pid")"
  deadline=$(( SECONDS + ${KAFKA_START_TIMEOUT:-90} ))
  while (( SECONDS < deadline )); do
    kill -0 "$pid" 2>/dev/null || return 1
    if grep -qF "$READY_LINE" "$dir/kafka.log" && port_in_use "$port"; then
      return 0
    fi
    sleep 0.1
  done
  return 2
}

fail_start() {
  local dir="$1" why="$2" pid
  log "---- last lines of $dir/kafka.log ----"
  tail -n 40 "$dir/kafka.log" >&2 || true
  log "--------------------------------------"
  # Do not leave a half-started broker behind.
  if pid="$(running_pid "$dir")"; then kill -9 "$pid" 2>/dev/null || true; fi
  rm -f "$dir/kafka.pid"
  discard_pending_cds "$dir"
  die "$why"
}

# --- main -------------------------------------------------------------------

# Ports of the broker being started, set by prepare_fresh/prepare_restart.
BROKER_PORT=""
CONTROLLER_PORT=""
# Ports of the SSL and SASL_SSL listeners, when there are any (KAFKA_TLS_DIR).
TLS_PORT=""
SASL_PORT=""

# Fresh broker: pick ports, write config, format.
prepare_fresh() {
  local dir="$1"
  rm -rf "$dir/data"
  local tls=0
  [[ -z "${KAFKA_TLS_DIR:-}" ]] || tls=2
  if [[ -n "${KAFKA_PORT:-}" ]]; then
    require_free "$KAFKA_PORT"
    BROKER_PORT="$KAFKA_PORT"
    read -r CONTROLLER_PORT TLS_PORT SASL_PORT <<<"$(free_ports $((1 + tls)))"
  else
    read -r BROKER_PORT CONTROLLER_PORT TLS_PORT SASL_PORT <<<"$(free_ports $((2 + tls)))"
  fi
  if (( tls )); then prepare_tls "$dir"; fi
  write_server_properties "$dir" "$BROKER_PORT" "$CONTROLLER_PORT"
  write_log4j_config "$dir"
  format_storage "$dir"
}

# Existing broker: keep config and data. KAFKA_PORT may move the broker
# listener (the controller port must stay, see write_server_properties).
prepare_restart() {
  local dir="$1"
  read -r BROKER_PORT CONTROLLER_PORT <<<"$(configured_ports "$dir/server.properties")"
  if [[ -n "${KAFKA_PORT:-}" && "$KAFKA_PORT" != "$BROKER_PORT" ]]; then
    log "moving broker listener from port $BROKER_PORT to $KAFKA_PORT"
    sed -i "s|PLAINTEXT://127.0.0.1:$BROKER_PORT|PLAINTEXT://127.0.0.1:$KAFKA_PORT|g" "$dir/server.properties"
    BROKER_PORT="$KAFKA_PORT"
  fi
  [[ -f "$dir/log4j2.properties" ]] || write_log4j_config "$dir"
  read -r TLS_PORT SASL_PORT <<<"$(tls_ports "$dir/server.properties" | tr '\n' ' ')"
  require_free "$BROKER_PORT" "$CONTROLLER_PORT" ${TLS_PORT:+"$TLS_PORT" "$SASL_PORT"}
}

# --- a three-node cluster (KAFKA_NODES=3) -----------------------------------

readonly CLUSTER_NODES=3

# Start every node of the cluster in $1 that is not running (all of them on a fresh
# directory), then wait for them together: a node is ready only once a majority
# of the quorum runs, so they cannot be started one after the other.
start_cluster() {
  local dir="$1" java="$2" cp="$3" i node rc
  local -a nodes=()
  for (( i = 1; i <= CLUSTER_NODES; i++ )); do nodes+=("$dir/node$i"); done
  if [[ ! -s "$dir/cluster_nodes" ]]; then
    local -a ports
    read -r -a ports <<<"$(free_ports $(( 2 * CLUSTER_NODES )))"
    local voters="" brokers=""
    for (( i = 1; i <= CLUSTER_NODES; i++ )); do
      voters+="${voters:+,}$i@127.0.0.1:${ports[2 * i - 1]}"
      brokers+="${brokers:+,}127.0.0.1:${ports[2 * i - 2]}"
    done
    local cluster_id
    cluster_id="$(random_cluster_id)"
    for (( i = 1; i <= CLUSTER_NODES; i++ )); do
      node="${nodes[i - 1]}"
      mkdir -p "$node"
      rm -rf "$node/data"
      printf '%s\n' "${KAFKA_HEAP_OPTS:--Xmx256m -Xms64m}" >"$node/heap_opts"
      NODE_ID=$i NODE_RF=$CLUSTER_NODES NODE_MIN_ISR=2 NODE_VOTERS="$voters" NODE_CLUSTER_ID="$cluster_id" \
        write_server_properties "$node" "${ports[2 * i - 2]}" "${ports[2 * i - 1]}"
      write_log4j_config "$node"
      NODE_VOTERS="$voters" NODE_CLUSTER_ID="$cluster_id" format_storage "$node"
      printf '127.0.0.1:%s\n' "${ports[2 * i - 2]}" >"$node/kafka_brokers"
      kafka_pom_version "$KAFKA_POM" >"$node/kafka_version"
    done
    printf '%s\n' "$brokers" >"$dir/kafka_brokers"
    kafka_pom_version "$KAFKA_POM" >"$dir/kafka_version"
    printf '%s\n' "${nodes[@]}" >"$dir/cluster_nodes"
  fi
  local -a started=()
  for node in "${nodes[@]}"; do
    if running_pid "$node" >/dev/null; then continue; fi
    read -r BROKER_PORT CONTROLLER_PORT <<<"$(configured_ports "$node/server.properties")"
    require_free "$BROKER_PORT" "$CONTROLLER_PORT"
    log "starting node $node on 127.0.0.1:$BROKER_PORT (controller 127.0.0.1:$CONTROLLER_PORT)"
    launch "$node" "$java" "$cp"
    started+=("$node")
  done
  for node in "${started[@]}"; do
    read -r BROKER_PORT CONTROLLER_PORT <<<"$(configured_ports "$node/server.properties")"
    rc=0
    wait_ready "$node" "$BROKER_PORT" || rc=$?
    (( rc == 0 )) || fail_start "$node" "cluster node $node did not become ready (exit or timeout: $rc)"
  done
  log "cluster ready in $(elapsed)s"
  cat "$dir/kafka_brokers"
}

main() {
  [[ $# -eq 1 ]] || usage
  [[ -d "$1" ]] || die "STATE_DIR '$1' is not a directory (create it first, e.g. with mktemp -d)"
  [[ -z "${KAFKA_PORT:-}" || "$KAFKA_PORT" =~ ^[0-9]+$ ]] || die "KAFKA_PORT must be a port number, got '$KAFKA_PORT'"
  local dir java cp pid attempt rc=1 fresh=0
  dir="$(cd "$1" && pwd -P)"

  if [[ -s "$dir/cluster_nodes" || ( "${KAFKA_NODES:-1}" == "$CLUSTER_NODES" && ! -f "$dir/server.properties" ) ]]; then
    [[ -z "${KAFKA_TLS_DIR:-}" && "${KAFKA_AUTHORIZER:-0}" == 0 ]] \
      || die "KAFKA_NODES=3 runs PLAINTEXT only (no KAFKA_TLS_DIR or KAFKA_AUTHORIZER)"
    kafka_use_version "${KAFKA_VERSION:-}"
    start_cluster "$dir" "$(kafka_java)" "$(kafka_classpath)"
    return
  fi
  [[ "${KAFKA_NODES:-1}" == 1 ]] || die "KAFKA_NODES must be 1 or 3, got '$KAFKA_NODES'"

  if pid="$(running_pid "$dir")" && [[ -s "$dir/kafka_brokers" ]]; then
    log "broker already running (pid $pid)"
    cat "$dir/kafka_brokers"
    return
  fi

  [[ -f "$dir/server.properties" && -f "$dir/data/meta.properties" ]] || fresh=1
  local version="${KAFKA_VERSION:-}"
  if (( ! fresh )) && [[ -s "$dir/kafka_version" ]]; then
    # The data of a broker is only read back by the version that wrote it.
    [[ -z "$version" || "$version" == "$(cat "$dir/kafka_version")" ]] \
      || die "KAFKA_VERSION=$version, but the broker in $dir was first started with $(cat "$dir/kafka_version"); a restart keeps its version"
    version="$(cat "$dir/kafka_version")"
  fi
  kafka_use_version "$version"
  java="$(kafka_java)"
  cp="$(kafka_classpath)"

  for attempt in 1 2 3; do
    if (( fresh )); then prepare_fresh "$dir"; else prepare_restart "$dir"; fi
    log "starting Kafka on 127.0.0.1:$BROKER_PORT (controller 127.0.0.1:$CONTROLLER_PORT)"
    launch "$dir" "$java" "$cp"
    rc=0
    wait_ready "$dir" "$BROKER_PORT" || rc=$?
    (( rc == 0 )) && break
    (( rc == 2 )) && fail_start "$dir" "broker not ready after ${KAFKA_START_TIMEOUT:-90}s"
    # Another process may have taken a port we picked between choosing it
    # and the broker binding it; a fresh broker can simply pick new ones.
    if (( fresh )) && [[ -z "${KAFKA_PORT:-}" ]] && grep -q 'Address already in use' "$dir/kafka.log"; then
      log "attempt $attempt: a port was taken before the broker bound it, retrying with new ports"
      continue
    fi
    fail_start "$dir" "broker exited during start-up"
  done
  (( rc == 0 )) || fail_start "$dir" "broker could not bind its ports"

  printf '127.0.0.1:%s\n' "$BROKER_PORT" >"$dir/kafka_brokers"
  kafka_pom_version "$KAFKA_POM" >"$dir/kafka_version"
  if [[ -n "$TLS_PORT" ]]; then
    printf '127.0.0.1:%s\n' "$TLS_PORT" >"$dir/kafka_ssl_brokers"
    printf '127.0.0.1:%s\n' "$SASL_PORT" >"$dir/kafka_sasl_ssl_brokers"
  fi
  log "ready in $(elapsed)s"
  cat "$dir/kafka_brokers"
}

main "$@"
