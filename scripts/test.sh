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
test_second_pass || true # TEST_SECOND_PASS is checked before the long first pass

ensure_build_deps
# CI starts from a fresh clone each time: keep Cargo's build cache outside it.
if [[ -n ${CI:-} && -z ${CARGO_TARGET_DIR:-} ]]; then
    export CARGO_TARGET_DIR=/var/tmp/booking-expire-target
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

# Jaeger for tests/it/trace.rs: built once from the Go module proxy and cached by version
# (about 5 minutes on a fresh machine), in the background while Cargo compiles; the
# tests wait for it below, and its errors print as they come.
echo "== Jaeger for tests/it/trace.rs: building in the background (cached by version)" >&2
scripts/go-tool.sh github.com/jaegertracing/jaeger/cmd/jaeger v1.76.0 >/dev/null &
jaeger_build=$!
# The previous release's binary for tests/it/upgrade.rs (the newest line of
# scripts/releases.tsv): built once from its commit and cached by it (a debug build of
# its own, with the crates fetched: 91 s on 2 quiet cores, 4½ min on 2 cores at load 5),
# in the background as well.
echo "== the previous release for tests/it/upgrade.rs: building in the background (cached by commit)" >&2
previous_release=$(mktemp)
scripts/release-before.sh >"$previous_release" &
previous_build=$!

echo "== cargo fmt --check" >&2
cargo fmt --all -- --check
echo "== cargo clippy" >&2
cargo clippy --all-targets --locked -- -D warnings
echo "== scripts/check-deploy.sh: manifests, Dockerfile, runtime libraries, alert rules, the generated dashboard" >&2
scripts/check-deploy.sh
echo "== scripts/contract-check.sh: AsyncAPI, generated schemas, compatibility with the released v1" >&2
scripts/contract-check.sh
echo "== squawk over sql/*.sql: every migration online-safe, no findings" >&2
squawk_migrations sql/*.sql
echo "== scripts/changelog-check.sh: what was added since the previous release is in CHANGELOG.md" >&2
# Its self-test first: a reference with a flag and a variable that CHANGELOG.md does not
# name must fail naming both; with a changelog that names them, neither is reported.
selftest=$(mktemp -d)
sed 's/^| `-v, --verbose` |/| `--changelog-selftest-flag <X>` | `CHANGELOG_SELFTEST_VARIABLE` |  | listed nowhere |\n&/' \
    docs/reference/cli.md >"$selftest/cli.md"
grep -q -- '--changelog-selftest-flag' "$selftest/cli.md" || { echo "changelog self-test: cannot add a flag to docs/reference/cli.md's global options" >&2; exit 1; }
if scripts/changelog-check.sh --cli-md "$selftest/cli.md" 2>"$selftest/unlisted"; then
    echo "changelog self-test: an unlisted flag passed scripts/changelog-check.sh" >&2; exit 1
fi
grep -q -- '`--changelog-selftest-flag`' "$selftest/unlisted" && grep -q '`CHANGELOG_SELFTEST_VARIABLE`' "$selftest/unlisted" \
    || { cat "$selftest/unlisted" >&2; echo "changelog self-test: the failure does not name the unlisted flag and variable" >&2; exit 1; }
sed 's/^## \[Unreleased\].*/&\n\n- `--changelog-selftest-flag`, `CHANGELOG_SELFTEST_VARIABLE`/' CHANGELOG.md >"$selftest/CHANGELOG.md"
scripts/changelog-check.sh --cli-md "$selftest/cli.md" --changelog "$selftest/CHANGELOG.md" 2>"$selftest/listed" || true
if grep -q 'CHANGELOG_SELFTEST\|changelog-selftest' "$selftest/listed"; then
    cat "$selftest/listed" >&2; echo "changelog self-test: a listed flag was reported missing" >&2; exit 1
fi
rm -rf "$selftest"
scripts/changelog-check.sh

echo "== cargo test --no-run (while Jaeger builds)" >&2
cargo test --locked --all-targets --no-run
echo "== waiting for the Jaeger build" >&2
wait "$jaeger_build" || { echo "building Jaeger failed (its log is above)" >&2; exit 1; }
echo "== waiting for the previous release's build" >&2
wait "$previous_build" || { echo "building the previous release failed (its log is above)" >&2; exit 1; }
BOOKING_EXPIRE_PREVIOUS_BIN=$(cat "$previous_release")
rm -f "$previous_release"
export BOOKING_EXPIRE_PREVIOUS_BIN

echo "== cargo test" >&2
cargo test --locked --all-targets "$@"

# Second pass: the versions users run besides the first pass's (PostgreSQL 15 from
# Debian 12, Kafka 4.x): the tests of SQL, plans and the Kafka protocol again, on
# PostgreSQL 18 (PG_FLAVOR=embedded) and Kafka 3.9 the harness starts for it, whatever
# DATABASE_URL / KAFKA_BROKERS say; a server one of these tests starts itself is of
# those versions too. Which modules and why: docs/guides/development.md, "Versions
# tested". Tests that start servers of their own or need OpenSSL live in other modules
# (relay_own_broker, faults, signals, acl, tls, ...), but for the statement count of
# design, which starts a PostgreSQL 18 of its own.
second_pass_modules=(
    run_once relay design poison_and_races relay_isolation relay_pipeline golden
    explain republish pause backlog dry_run roles exit_codes pooler delivery_faults
    host_rows migrate shared_outbox waiting upgrade watermark
)
if test_second_pass; then
    echo "== cargo test, second pass: PostgreSQL 18 and Kafka 3.9" >&2
    (
        unset DATABASE_URL KAFKA_BROKERS
        export PG_FLAVOR=embedded KAFKA_VERSION=3.9.1
        # A filter "module::" selects that module's tests.
        cargo test --locked --test it -- "${second_pass_modules[@]/%/::}"
    )
else
    echo "== second pass left out (TEST_SECOND_PASS=0)" >&2
fi
