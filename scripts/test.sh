#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit tests and the integration tests that
# run the real binary against a real PostgreSQL and a real Apache Kafka broker.
#
# Usage: scripts/test.sh [--dry-run] [extra cargo test arguments]
#
# It checks its prerequisites first and stops at once naming everything missing and how
# to get it (as root it installs the missing Debian packages, in one go, first). Then it
# runs its stages, stopping at the first that fails; at the end (also after a failure)
# it prints each stage's time and result and one verdict line:
#
#   == verdict: PASS (10 stages, 1234 s)
#   == verdict: FAIL at clippy (2 of 6 stages passed, 210 s)
#
# --dry-run: checks the prerequisites (installing nothing, saying what it would install),
# then goes through the stages without running them, and prints the table and the
# verdict; TEST_DRY_RUN_FAIL=STAGE makes that stage fail, to see a failing verdict.
#
# Starts a throwaway PostgreSQL and a throwaway Kafka (and stops them afterwards)
# unless DATABASE_URL / KAFKA_BROKERS are set: then the tests create and drop their
# own databases on that server and their own topics on that broker. Some relay tests
# start brokers of their own, to stop and kill them.
set -euo pipefail
shopt -s globstar

cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh
test_second_pass || true # TEST_SECOND_PASS is checked before the long first pass

DRY_RUN=0
if [[ ${1:-} == --dry-run ]]; then
    DRY_RUN=1
    shift
fi

# CI starts from a fresh clone each time: keep Cargo's build cache outside it.
if [[ -n ${CI:-} && -z ${CARGO_TARGET_DIR:-} ]]; then
    export CARGO_TARGET_DIR=/var/tmp/booking-expire-target
fi

# libtest's threads for both passes (a `--test-threads` given after `--` wins): the
# tests wait for what they assert, never for time, and share nothing but the suite's
# server and broker, so 8 threads on 2 cores keep the cores busy while tests wait on
# servers; docs/guides/development.md ("At any thread count") has the runs.
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-8}

# The commit --version names, for every build of the run: the tests' build, clippy's and
# scripts/check-deploy.sh's (whose image build passes it, as a release build does) then
# see the same value and none rebuilds the binary the others built (build.rs reads the
# same commit from git when it is unset, but an unset and a set variable are two builds).
BOOKING_EXPIRE_COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
export BOOKING_EXPIRE_COMMIT

# Where the test processes' throwaway servers keep their files: a RAM-backed directory
# when the machine has one with room (scripts/lib.sh servers_tmpdir), else TMPDIR.
SERVERS_TMPDIR=$(servers_tmpdir)
readonly SERVERS_TMPDIR
if [[ -n $SERVERS_TMPDIR ]]; then
    echo "== the test servers' files go to $SERVERS_TMPDIR (RAM; a failed test's are kept there for a day)" >&2
fi
# with_servers_tmpdir CMD... — runs CMD with TMPDIR at SERVERS_TMPDIR, if there is one.
with_servers_tmpdir() {
    if [[ -n $SERVERS_TMPDIR ]]; then
        TMPDIR=$SERVERS_TMPDIR "$@"
    else
        "$@"
    fi
}

readonly JAEGER_VERSION=v1.76.0
readonly RUST_MIN_MINOR=85 # edition 2024
readonly GO_MIN_MINOR=24   # `go get -tool`, scripts/go-tool.sh

# --- the stages' record, the time table and the verdict ------------------------------

STARTED=$SECONDS
# Every stage, in the order of the table; those not reached are listed as not run.
PLANNED=(prerequisites fmt build-tests clippy check-deploy light-checks jaeger previous-release first-pass)
test_second_pass && PLANNED+=(second-pass)
(($#)) || PLANNED+=(long-tests) # split_first_pass below
STAGE_NAMES=()
STAGE_RESULTS=()
STAGE_SECONDS=()
# Background stages: name -> PID, and the file their status goes to.
declare -A BG_PID=() BG_STATUS=() BG_LOG=()
LOGS=$(mktemp -d)

record() { # record NAME RESULT SECONDS
    STAGE_NAMES+=("$1")
    STAGE_RESULTS+=("$2")
    STAGE_SECONDS+=("$3")
}

report() { # the time table and the verdict line; $1 the exit status
    local rc=$1 i passed=0 failed="" total=$((SECONDS - STARTED))
    local pid
    for pid in "${BG_PID[@]}"; do
        # Ours, not yet joined, in a process group of its own (its builds with it).
        [[ -z $pid ]] || kill -- "-$pid" 2>/dev/null || true
    done
    echo "== stages (seconds of wall time; clippy, jaeger, previous-release, light-checks, check-deploy and long-tests run beside the others)" >&2
    for i in "${!STAGE_NAMES[@]}"; do
        printf '   %-18s %-4s %6s\n' "${STAGE_NAMES[$i]}" "${STAGE_RESULTS[$i]}" "${STAGE_SECONDS[$i]}" >&2
        case ${STAGE_RESULTS[$i]} in
            PASS) passed=$((passed + 1)) ;;
            FAIL) [[ -n $failed ]] || failed=${STAGE_NAMES[$i]} ;;
        esac
    done
    local name ran
    for name in "${PLANNED[@]}"; do
        ran=0
        for i in "${!STAGE_NAMES[@]}"; do [[ ${STAGE_NAMES[$i]} != "$name" ]] || ran=1; done
        ((ran)) || printf '   %-18s %-7s\n' "$name" "not run" >&2
    done
    if [[ $rc -eq 0 && -z $failed ]]; then
        echo "== verdict: PASS (${#STAGE_NAMES[@]} stages, $total s)" >&2
    else
        echo "== verdict: FAIL at ${failed:-an unnamed step (exit $rc)} ($passed of ${#PLANNED[@]} stages passed, $total s)" >&2
    fi
    rm -rf "$LOGS"
}
trap 'rc=$?; trap - EXIT; report "$rc"; exit "$rc"' EXIT
# Interrupted: the table, the verdict and the background stages' end all the same.
trap 'exit 130' INT
trap 'exit 143' TERM

dry_fails() { [[ ${TEST_DRY_RUN_FAIL:-} == "$1" ]]; }

# stage NAME WHAT COMMAND... — runs COMMAND in the foreground and records it under NAME
# (WHAT says what it is); the first stage that fails ends the run (the trap prints the
# table and the verdict). ALWAYS=1: run it in a dry run too.
stage() {
    local name=$1 t0=$SECONDS rc=0
    echo "== $name: $2" >&2
    shift 2
    if ((DRY_RUN)) && [[ ${ALWAYS:-0} != 1 ]]; then
        echo "   (dry run) $*" >&2
        dry_fails "$name" && rc=1
    else
        "$@" || rc=$?
    fi
    if ((rc)); then
        record "$name" FAIL $((SECONDS - t0))
        exit "$rc"
    fi
    record "$name" PASS $((SECONDS - t0))
}

# stage_bg NAME WHAT COMMAND... — starts COMMAND in the background (beside the next
# stages); its output goes to a log printed when it is joined, unless BG_LIVE=1, when it
# prints as it comes (the long builds, whose progress is worth seeing).
stage_bg() {
    local name=$1 status log
    echo "== $name: $2 (in the background)" >&2
    shift 2
    status=$LOGS/$name.status
    log=$LOGS/$name.log
    if ((DRY_RUN)); then
        echo "   (dry run) $*" >&2
        if dry_fails "$name"; then echo "1 0" >"$status"; else echo "0 0" >"$status"; fi
        : >"$log"
        BG_PID[$name]=""
    else
        # A process group of its own (job control on for the start): stopped whole if
        # the run ends before it is joined.
        set -m
        (
            t0=$SECONDS rc=0
            # BG_NICE=N: this stage and all it starts at niceness N (below the tests).
            if [[ -n ${BG_NICE:-} ]]; then renice -n "$BG_NICE" -p "$BASHPID" >/dev/null; fi
            if [[ ${BG_LIVE:-0} == 1 ]]; then "$@" || rc=$?; else "$@" >"$log" 2>&1 || rc=$?; fi
            echo "$rc $((SECONDS - t0))" >"$status"
        ) &
        BG_PID[$name]=$!
        set +m
    fi
    BG_STATUS[$name]=$status
    BG_LOG[$name]=$log
}

# join NAME — waits for a background stage, prints its log and records it.
join() {
    local name=$1 rc secs
    echo "== waiting for: $name" >&2
    [[ -z ${BG_PID[$name]} ]] || wait "${BG_PID[$name]}" || true
    unset 'BG_PID[$name]'
    [[ -s ${BG_LOG[$name]} ]] && cat "${BG_LOG[$name]}" >&2
    read -r rc secs <"${BG_STATUS[$name]}" 2>/dev/null || { rc=1 secs=0; }
    if ((rc)); then
        record "$name" FAIL "$secs"
        echo "$name failed (its output is above)" >&2
        exit 1
    fi
    record "$name" PASS "$secs"
}

# --- prerequisites ----------------------------------------------------------------

# The Debian packages the scripts install when missing (as root) or name (otherwise).
debian_packages() {
    # scripts/lib.sh ensure_build_deps: the build, psql, certificates, faketime, PgBouncer.
    echo pkg-config libssl-dev zlib1g-dev make gcc g++ postgresql-client openssl faketime pgbouncer
    # scripts/pg-start.sh: the throwaway PostgreSQL (15 on Debian 12) with contrib.
    echo postgresql postgresql-contrib
    # scripts/check-deploy.sh: promtool and the Pushgateway (tests/it/metrics.rs,
    # prometheus.rs), time, venvs (kubernetes-validate, squawk, the second pass's
    # PostgreSQL 18); scripts/image-test.sh: the image built and run with podman.
    echo prometheus prometheus-pushgateway time python3-venv podman runc
    # The script linter over scripts/ (below); git for
    # the release before and the changelog check.
    echo shellcheck git
    # scripts/kafka-start.sh: Java 17 and Maven, unless there are others.
    [[ -n $(java17) ]] || echo openjdk-17-jre-headless
    command -v mvn >/dev/null || echo maven
    # scripts/contract-check.sh: node and npm, unless there are others.
    { command -v node >/dev/null && command -v npm >/dev/null; } || echo nodejs npm
}

java17() { # a java of major version 17 or newer, as scripts/kafka/lib.sh looks for one
    # shellcheck source=scripts/kafka/lib.sh
    (source scripts/kafka/lib.sh 2>/dev/null && for java in "${JAVA_HOME:+$JAVA_HOME/bin/java}" \
        "$(command -v java || true)" "$(debian_java17)"; do
        java_ok "$java" && { echo "$java"; exit 0; }
    done) || true
}

minor_of() { # minor_of "1.85.0" -> 85; "go1.24.2" -> 24
    sed -n 's/^[a-z]*1\.\([0-9]*\).*/\1/p' <<<"$1"
}

prerequisites() {
    local missing=() packages=() pkg v go="" release commit
    # Rust: not from Debian (its 1.63 is too old).
    if ! command -v cargo >/dev/null; then
        missing+=("Rust (stable, 1.$RUST_MIN_MINOR or newer, for edition 2024): install it with rustup, then open a new shell")
    else
        v=$(rustc --version 2>/dev/null | awk '{ print $2 }')
        if [[ $(minor_of "$v") -lt $RUST_MIN_MINOR ]] 2>/dev/null; then
            missing+=("Rust 1.$RUST_MIN_MINOR or newer (found ${v:-none}): rustup update stable")
        fi
        if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
            if command -v rustup >/dev/null; then
                rustup component add rustfmt clippy >/dev/null 2>&1 ||
                    missing+=("rustfmt and clippy: rustup component add rustfmt clippy (it failed here)")
            else
                missing+=("rustfmt and clippy: rustup component add rustfmt clippy")
            fi
        fi
    fi
    # Go, for the Jaeger tests/it/trace.rs runs, unless it is built already.
    if [[ ! -x ${XDG_CACHE_HOME:-$HOME/.cache}/booking-expire/go-tools/jaeger-$JAEGER_VERSION/jaeger ]]; then
        go=$(go env GOVERSION 2>/dev/null || true)
        if [[ -z $go || $(minor_of "$go") -lt $GO_MIN_MINOR ]]; then
            missing+=("Go 1.$GO_MIN_MINOR or newer (found: ${go:-none}; Debian 12's golang-go is 1.19), to build Jaeger $JAEGER_VERSION for tests/it/trace.rs once: install Go from its release archive and put its bin/ on PATH")
        fi
    fi
    # The release before (tests/it/upgrade.rs, scripts/changelog-check.sh): its commit.
    release=$(grep -v '^#' scripts/releases.tsv | tail -n 1)
    commit=$(cut -f 2 <<<"$release")
    if [[ -n $commit ]] && command -v git >/dev/null && ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
        missing+=("the commit of release $(cut -f 1 <<<"$release") ($commit) in this clone: git fetch --unshallow (a shallow clone lacks it)")
    fi
    # Root: check-deploy.sh checks the runtime libraries in a chroot and runs the image
    # with rootful podman; the scripts install what is missing with apt-get.
    if [[ $(id -u) -ne 0 ]]; then
        missing+=("root: scripts/check-deploy.sh checks the image's runtime libraries in a chroot and builds and runs the image with rootful podman (run in a container or a CI machine as root)")
    fi
    # The Debian packages.
    read -r -a packages <<<"$(debian_packages | tr '\n' ' ')"
    local absent=()
    for pkg in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || absent+=("$pkg")
    done
    if ((${#absent[@]})); then
        if [[ $(id -u) -eq 0 ]]; then
            if ((DRY_RUN)); then
                echo "   would install the Debian packages: ${absent[*]}" >&2
            else
                echo "   installing the Debian packages: ${absent[*]}" >&2
                ensure_apt_packages "${absent[@]}" || missing+=("the Debian packages ${absent[*]}: apt-get install failed (its log is above)")
            fi
        else
            missing+=("the Debian packages ${absent[*]}: sudo apt-get install ${absent[*]}")
        fi
    fi
    if ((${#missing[@]})); then
        echo "scripts/test.sh cannot run here; missing:" >&2
        printf '  - %s\n' "${missing[@]}" >&2
        echo "(the first run also needs network access: crates, Debian packages, Maven Central, PyPI, npm, the Go module proxy; docs/guides/development.md, \"Prerequisites\")" >&2
        return 1
    fi
    echo "   all there: Rust $(rustc --version | awk '{ print $2 }'), ${go:+Go ${go#go}, }Java $(java_major "$(java17)" 2>/dev/null || true), node $(node --version), podman $(podman --version | awk '{ print $3 }'), promtool, shellcheck $(shellcheck --version | sed -n 's/^version: //p'), ${#packages[@]} Debian packages" >&2
}

# java_major, for the line above.
# shellcheck source=scripts/kafka/lib.sh
java_major() { (source scripts/kafka/lib.sh 2>/dev/null && java_major "$1"); }

# --- the stages ----------------------------------------------------------------------

# Its self-test first: a reference with a flag and a variable that CHANGELOG.md does not
# name must fail naming both; with a changelog that names them, neither is reported.
changelog_check() {
    local selftest
    selftest=$(mktemp -d)
    # shellcheck disable=SC2016 # backquotes of Markdown, not a command
    sed 's/^| `-v, --verbose` |/| `--changelog-selftest-flag <X>` | `CHANGELOG_SELFTEST_VARIABLE` |  | listed nowhere |\n&/' \
        docs/reference/cli.md >"$selftest/cli.md"
    grep -q -- '--changelog-selftest-flag' "$selftest/cli.md" || { echo "changelog self-test: cannot add a flag to docs/reference/cli.md's global options" >&2; return 1; }
    if scripts/changelog-check.sh --cli-md "$selftest/cli.md" 2>"$selftest/unlisted"; then
        echo "changelog self-test: an unlisted flag passed scripts/changelog-check.sh" >&2; return 1
    fi
    # shellcheck disable=SC2016 # backquotes of Markdown, not a command
    if ! grep -q -- '`--changelog-selftest-flag`' "$selftest/unlisted" ||
        ! grep -q '`CHANGELOG_SELFTEST_VARIABLE`' "$selftest/unlisted"; then
        cat "$selftest/unlisted" >&2
        echo "changelog self-test: the failure does not name the unlisted flag and variable" >&2
        return 1
    fi
    # shellcheck disable=SC2016 # backquotes of Markdown, not a command
    sed 's/^## \[Unreleased\].*/&\n\n- `--changelog-selftest-flag`, `CHANGELOG_SELFTEST_VARIABLE`/' CHANGELOG.md >"$selftest/CHANGELOG.md"
    scripts/changelog-check.sh --cli-md "$selftest/cli.md" --changelog "$selftest/CHANGELOG.md" 2>"$selftest/listed" || true
    if grep -q 'CHANGELOG_SELFTEST\|changelog-selftest' "$selftest/listed"; then
        cat "$selftest/listed" >&2; echo "changelog self-test: a listed flag was reported missing" >&2; return 1
    fi
    rm -rf "$selftest"
    scripts/changelog-check.sh
}

# The checks that need no build, one after the other, beside the build: light on the CPU
# (git, node, Python), so they cost the 2 cores of a small CI machine little.
light_checks() {
    local rc=0
    echo "-- scripts/contract-check.sh: AsyncAPI, generated schemas, compatibility with the released v1"
    scripts/contract-check.sh || rc=1
    echo "-- squawk over sql/*.sql: every migration online-safe, no findings"
    squawk_migrations sql/*.sql || rc=1
    echo "-- scripts/changelog-check.sh: what was added since the previous release is in CHANGELOG.md"
    changelog_check || rc=1
    echo "-- shellcheck over scripts/**/*.sh (its default level: no finding at all)"
    shellcheck scripts/**/*.sh || rc=1
    return "$rc"
}

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
    host_rows migrate shared_outbox waiting upgrade row_security watermark
)
second_pass() {
    (
        unset DATABASE_URL KAFKA_BROKERS
        export PG_FLAVOR=embedded KAFKA_VERSION=3.9.1
        # A filter "module::" selects that module's tests.
        with_servers_tmpdir cargo test --locked --test it -- "${second_pass_modules[@]/%/::}"
    )
}

# The modules whose tests are the longest (three-node clusters one after another, days
# simulated, servers of their own with TLS and ACLs): run by a test process of their own
# from the moment the tests are built, beside the checks, the rest of the first pass and
# the second pass, instead of last (libtest takes tests in name order, so these came at
# the end and the run waited for them alone). None needs Jaeger or the release before.
# Each process starts its own throwaway server and broker (or shares DATABASE_URL /
# KAFKA_BROKERS, whose runs never touch each other's objects). Per-test times
# measured at 8 threads: cluster 121 + 77 + 55 s (one cluster at a time), simulation
# 150 + 51 + 41 s, tls 4 x 40 s, acl 63 s; the other 300 tests about 930 s together.
# A thread for each of their 14 tests, so that each starts at once: the days simulated
# are the longest single test, and libtest took it eighth in name order. The cluster
# tests take turns on one cluster the process shares, so they wait for each other.
long_modules=(cluster simulation tls acl)
long_threads=16
# With extra cargo test arguments (a filter, say), the first pass runs as one process.
split_first_pass() { [[ $# -eq 0 ]]; }
long_tests() {
    with_servers_tmpdir cargo test --locked --test it -- --test-threads="$long_threads" "${long_modules[@]/%/::}"
}

# The tests that need Jaeger or the release before (tests/it/trace.rs, upgrade.rs) call
# scripts/go-tool.sh and scripts/release-before.sh themselves; while the background
# stage below still builds one, that call waits for it (both take a lock per cache) and
# then prints the cached binary. So the tests start once they are built.
first_pass() {
    if split_first_pass "$@"; then
        # The unit tests of every package, then every integration test the long process
        # does not run ("--skip NAME" leaves out the tests whose name contains NAME, as
        # a filter NAME selects them: the two are complements). tests/it is the one
        # integration test target (the suite is one binary: tests/it/main.rs).
        local skips=() module
        for module in "${long_modules[@]}"; do skips+=(--skip "$module::"); done
        with_servers_tmpdir cargo test --locked --workspace --lib --bins --benches --examples
        with_servers_tmpdir cargo test --locked --test it -- "${skips[@]}"
    else
        with_servers_tmpdir cargo test --locked --workspace --all-targets "$@"
    fi
}

ALWAYS=1 stage prerequisites "everything the suite needs, checked first (all that is missing, and how to get it)" \
    prerequisites

# Jaeger for tests/it/trace.rs: built once from the Go module proxy and cached by version
# (about 5 minutes on a fresh machine), beside Cargo; its errors print as they come.
# shellcheck disable=SC2016 # $1 is the inner shell's
BG_LIVE=1 stage_bg jaeger "Jaeger $JAEGER_VERSION for tests/it/trace.rs, built once and cached by version" \
    sh -c 'scripts/go-tool.sh github.com/jaegertracing/jaeger/cmd/jaeger "$1" >/dev/null' sh "$JAEGER_VERSION"
# The previous release's binary for tests/it/upgrade.rs (the newest line of
# scripts/releases.tsv): built once from its commit and cached by it (a debug build of
# its own, with the crates fetched: 91 s on 2 quiet cores, 4½ min on 2 cores at load 5).
# shellcheck disable=SC2016 # $1 is the inner shell's
BG_LIVE=1 stage_bg previous-release "the previous release for tests/it/upgrade.rs, built once and cached by commit" \
    sh -c 'scripts/release-before.sh >/dev/null'
# The checks beside the tests run at a lower priority (BG_NICE): the tests, whose
# longest are the run's path, get the cores first, and these take what is left.
BG_NICE=10 stage_bg light-checks "scripts/contract-check.sh, squawk over sql/, scripts/changelog-check.sh (and its self-test), shellcheck over scripts/" \
    light_checks

stage fmt "cargo fmt --check" cargo fmt --all -- --check
stage build-tests "cargo test --no-run: the tests' build" cargo test --locked --workspace --all-targets --no-run
if split_first_pass "$@"; then
    stage_bg long-tests "the first pass's longest modules (${long_modules[*]}), beside the rest" long_tests
fi
# Clippy beside the tests, in a target directory of its own: its checks of every crate
# (137 s on a cold machine) would hold the tests' directory's lock, and the first pass
# would wait for them.
BG_NICE=10 stage_bg clippy "cargo clippy -D warnings" \
    env CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/clippy" \
    cargo clippy --workspace --all-targets --locked -- -D warnings
# Its cargo build finds the binary the tests' build made (the same commit in the
# environment, see above), so it runs beside the tests without replacing theirs.
BG_NICE=10 stage_bg check-deploy "scripts/check-deploy.sh: manifests, Dockerfile, runtime libraries, alert rules, dashboard, the image" \
    scripts/check-deploy.sh

stage first-pass "cargo test: the unit tests and every integration test (PostgreSQL 15, Kafka 4.x)" first_pass "$@"
if test_second_pass; then
    stage second-pass "cargo test, second pass: the tests of SQL, plans and the Kafka protocol on PostgreSQL 18 and Kafka 3.9" \
        second_pass
else
    echo "== second pass left out (TEST_SECOND_PASS=0)" >&2
fi
join clippy
join light-checks
join jaeger
join previous-release
join check-deploy
if split_first_pass "$@"; then join long-tests; fi
