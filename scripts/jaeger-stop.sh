#!/usr/bin/env bash
# Stop the Jaeger that scripts/jaeger-start.sh STATE_DIR started (SIGTERM, then
# SIGKILL after 10 s). Does nothing when it is not running.
#
# Usage: scripts/jaeger-stop.sh STATE_DIR
set -euo pipefail

[[ $# -eq 1 ]] || { echo "usage: $(basename "$0") STATE_DIR" >&2; exit 1; }
dir=$(cd "$1" && pwd)
[[ -f $dir/jaeger.pid ]] || exit 0
pid=$(cat "$dir/jaeger.pid")
rm -f "$dir/jaeger.pid"
# Only the process started with this directory's configuration, never a pid
# that was recycled meanwhile.
[[ $pid =~ ^[0-9]+$ ]] || exit 0
tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "--config $dir/config.yaml" || exit 0
kill -TERM "$pid" 2>/dev/null || exit 0
for _ in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || exit 0
    sleep 0.1
done
kill -KILL "$pid" 2>/dev/null || true
