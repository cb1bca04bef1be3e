#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit tests and the integration tests that
# run the real binary against a real PostgreSQL and a real Apache Kafka broker.
#
# Usage: scripts/test.sh [extra cargo test arguments]
#
# Starts a throwaway PostgreSQL and a throwaway Kafka (and stops them afterwards)
# unless DATABASE_URL / KAFKA_BROKERS are set: then the tests create and drop their
# own databases on that server and their own topics on that broker. Some relay tests
# start brokers of their own, to stop and kill them.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

ensure_build_deps
# CI starts from a fresh clone each time: keep Cargo's build cache outside it.
if [[ -n ${CI:-} && -z ${CARGO_TARGET_DIR:-} ]]; then
    export CARGO_TARGET_DIR=/var/tmp/booking-expire-target
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

# Jaeger for tests/trace.rs: built once from the Go module proxy and cached by version
# (about 5 minutes on a fresh machine), in the background while Cargo compiles; the
# tests wait for it below, and its errors print as they come.
echo "== Jaeger for tests/trace.rs: building in the background (cached by version)" >&2
scripts/go-tool.sh github.com/jaegertracing/jaeger/cmd/jaeger v1.76.0 >/dev/null &
jaeger_build=$!

echo "== cargo fmt --check" >&2
cargo fmt --all -- --check
echo "== cargo clippy" >&2
cargo clippy --all-targets --locked -- -D warnings
echo "== scripts/check-deploy.sh: manifests, Dockerfile, runtime libraries, alert rules" >&2
scripts/check-deploy.sh
echo "== scripts/contract-check.sh: AsyncAPI, generated schemas, compatibility with the released v1" >&2
scripts/contract-check.sh

trap stop_services EXIT
start_postgres
start_kafka

echo "== cargo test --no-run (while Jaeger builds)" >&2
cargo test --locked --all-targets --no-run
echo "== waiting for the Jaeger build" >&2
wait "$jaeger_build" || { echo "building Jaeger failed (its log is above)" >&2; exit 1; }

echo "== cargo test" >&2
cargo test --locked --all-targets "$@"
