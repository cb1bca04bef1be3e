#!/usr/bin/env bash
# Start a throwaway Jaeger (all-in-one, in-memory storage) for the trace tests.
#
# Usage: scripts/jaeger-start.sh STATE_DIR
#
#   STATE_DIR must exist (e.g. from `mktemp -d`). On success Jaeger runs in the
#   background on free ports of 127.0.0.1 and its endpoints are printed on
#   stdout, one "NAME=VALUE" a line, and written to STATE_DIR/endpoints:
#
#     OTLP_HTTP=http://127.0.0.1:P    (OTEL_EXPORTER_OTLP_ENDPOINT, http/protobuf)
#     OTLP_GRPC=127.0.0.1:Q
#     QUERY=http://127.0.0.1:R        (the query API: /api/services, /api/traces?service=…)
#
#   Stop it with scripts/jaeger-stop.sh STATE_DIR.
#
# Files in STATE_DIR: config.yaml, jaeger.log, jaeger.pid, endpoints.
#
# The binary is Jaeger v2 (module github.com/jaegertracing/jaeger, version
# JAEGER_VERSION, default v1.76.0), built once from the Go module proxy by
# scripts/go-tool.sh and cached under ${XDG_CACHE_HOME:-~/.cache}/booking-expire/
# (the first build takes about 5 minutes on 2 cores and 2.3 GB of memory).
#
# Environment (optional): JAEGER_VERSION; JAEGER_START_TIMEOUT seconds to wait
# until it answers (default 60).
set -euo pipefail

die() { echo "jaeger-start: $*" >&2; exit 1; }
[[ $# -eq 1 && -d $1 ]] || die "usage: $(basename "$0") STATE_DIR  (an existing directory, e.g. from mktemp -d)"
dir=$(cd "$1" && pwd)
scripts=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
version=${JAEGER_VERSION:-v1.76.0}
timeout=${JAEGER_START_TIMEOUT:-60}

bin=$("$scripts/go-tool.sh" github.com/jaegertracing/jaeger/cmd/jaeger "$version")

# shellcheck source=scripts/lib.sh
source "$scripts/lib.sh"
# The all-in-one configuration with OTLP only, every listener on a port of ours
# and Jaeger's own metrics off (they would take a fixed port).
write_config() {
cat >"$dir/config.yaml" <<YAML
service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    resource:
      service.name: jaeger
    metrics:
      level: none
    logs:
      level: info
extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:$query
    grpc:
      endpoint: 127.0.0.1:$query_grpc
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:$health
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:$grpc
      http:
        endpoint: 127.0.0.1:$http
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
YAML
}

# Starts Jaeger on the ports of write_config and waits until it answers. Returns 2 when
# it exits during startup on a port taken meanwhile (the kernel picked the ports free a
# moment before; another process, e.g. a test's server or an outgoing connection, may
# bind one first), so the caller tries other ports.
start_jaeger() {
    "$bin" --config "$dir/config.yaml" >"$dir/jaeger.log" 2>&1 &
    pid=$!
    echo "$pid" >"$dir/jaeger.pid"
    local deadline=$((SECONDS + timeout))
    until curl -fsS -o /dev/null "http://127.0.0.1:$query/api/services" 2>/dev/null &&
        (exec 3<>"/dev/tcp/127.0.0.1/$http") 2>/dev/null; do
        if ! kill -0 "$pid" 2>/dev/null; then
            if grep -q 'address already in use' "$dir/jaeger.log"; then
                return 2
            fi
            tail -n 30 "$dir/jaeger.log" >&2
            die "jaeger exited during startup (log: $dir/jaeger.log)"
        fi
        if ((SECONDS >= deadline)); then
            tail -n 30 "$dir/jaeger.log" >&2
            die "jaeger did not answer within ${timeout}s (log: $dir/jaeger.log)"
        fi
        sleep 0.2
    done
}

for attempt in 1 2 3 4 5; do
    read -r http grpc query query_grpc health <<<"$(free_ports 5)"
    write_config
    rc=0
    start_jaeger || rc=$?
    ((rc == 2)) || break
    echo "jaeger-start: attempt $attempt: a port was taken before jaeger bound it, retrying with new ports" >&2
done
((rc == 0)) || die "jaeger could not bind its ports in 5 attempts (log: $dir/jaeger.log)"

{
    echo "OTLP_HTTP=http://127.0.0.1:$http"
    echo "OTLP_GRPC=127.0.0.1:$grpc"
    echo "QUERY=http://127.0.0.1:$query"
} | tee "$dir/endpoints"
