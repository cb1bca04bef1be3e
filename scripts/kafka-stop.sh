#!/usr/bin/env bash
# Stop a broker started by scripts/kafka-start.sh. STATE_DIR (config, data,
# log) is kept, so kafka-start.sh can restart the same broker from it.
#
# Usage: scripts/kafka-stop.sh STATE_DIR [--kill]
#
#   STATE_DIR of a cluster (KAFKA_NODES=3) stops every node; STATE_DIR/nodeN
#   stops that node only.
#
#   default  SIGTERM (clean shutdown), then SIGKILL after KAFKA_STOP_TIMEOUT
#            seconds (default 30)
#   --kill   SIGKILL at once: a crash, for tests of unclean broker loss
#
# Exits 0 when the broker is stopped, also if it was not running.
set -euo pipefail

# shellcheck source=SCRIPTDIR/kafka/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/kafka/lib.sh"

usage() { die "usage: $(basename "$0") STATE_DIR [--kill]"; }

# Pid of this STATE_DIR's broker if it runs. The command line is checked so
# that a stale kafka.pid whose pid was recycled never gets us to kill a
# stranger.
broker_pid() {
  local dir="$1" pid
  [[ -f "$dir/kafka.pid" ]] || return 1
  pid="$(cat "$dir/kafka.pid")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF "kafka.Kafka $dir/server.properties" || return 1
  printf '%s\n' "$pid"
}

# Gone, or a zombie whose parent has not reaped it yet (the broker is not our
# child, so `wait` cannot be used).
is_gone() {
  local state
  state="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null || true)"
  [[ -z "$state" || "$state" == Z ]]
}

# Poll for exit; 0 if it exited within $2 seconds.
wait_gone() {
  local pid="$1" deadline=$(( SECONDS + $2 ))
  while (( SECONDS < deadline )); do
    is_gone "$pid" && return 0
    sleep 0.1
  done
  is_gone "$pid"
}

START_TIME="${EPOCHREALTIME/,/.}"
elapsed() { awk -v a="$START_TIME" -v b="${EPOCHREALTIME/,/.}" 'BEGIN { printf "%.1f", b - a }'; }

# A broker that ran without an AppCDS archive wrote one as it exited (see
# cds_setup in lib.sh); keep it only if the broker exited cleanly.
publish_cds() {
  local dir="$1" clean="$2" tmp final
  [[ -f "$dir/cds_pending" ]] || return 0
  read -r tmp final <"$dir/cds_pending" || true
  cds_publish "${tmp:-}" "${final:-}" "$clean"
  rm -f "$dir/cds_pending"
}

main() {
  local kill_now=0 dir pid
  case $# in
    1) ;;
    2) [[ "$2" == --kill ]] || usage; kill_now=1 ;;
    *) usage ;;
  esac
  [[ -d "$1" ]] || die "STATE_DIR '$1' is not a directory"
  dir="$(cd "$1" && pwd -P)"

  # A cluster (KAFKA_NODES=3): every node, each as a broker of its own, all at
  # once (the last node left alone would wait for a quorum to shut down).
  if [[ -s "$dir/cluster_nodes" ]]; then
    local node rc=0
    local -a stops=()
    while read -r node; do
      "$0" "$node" "${@:2}" &
      stops+=("$!")
    done <"$dir/cluster_nodes"
    for pid in "${stops[@]}"; do wait "$pid" || rc=1; done
    return "$rc"
  fi

  if ! pid="$(broker_pid "$dir")"; then
    log "no broker running for $dir"
    rm -f "$dir/kafka.pid"
    publish_cds "$dir" 0
    return 0
  fi

  local clean=0
  if (( kill_now )); then
    log "killing broker pid $pid (SIGKILL)"
    kill -KILL "$pid" 2>/dev/null || true
    wait_gone "$pid" 10 || die "broker pid $pid survived SIGKILL"
  else
    local timeout="${KAFKA_STOP_TIMEOUT:-30}"
    log "stopping broker pid $pid (SIGTERM, up to ${timeout}s)"
    kill -TERM "$pid" 2>/dev/null || true
    if wait_gone "$pid" "$timeout"; then
      clean=1
    else
      log "broker did not stop within ${timeout}s, sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      wait_gone "$pid" 10 || die "broker pid $pid survived SIGKILL"
    fi
  fi
  rm -f "$dir/kafka.pid"
  publish_cds "$dir" "$clean"
  log "stopped in $(elapsed)s"
}

main "$@"
