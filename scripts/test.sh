#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit tests and the integration tests that
# run the real binary against a real PostgreSQL and a real Apache Kafka broker.
#
# Usage: scripts/test.sh [--dry-run] [--stress N] [extra cargo test arguments]
#        scripts/test.sh --clean-caches [--dry-run]
#        scripts/test.sh --help
#
# usage() below is the whole reference (`scripts/test.sh --help` prints it); the
# stages, their times and the caches: docs/guides/development.md.
set -euo pipefail
shopt -s globstar

cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

usage() {
    cat <<'EOF'
Usage: scripts/test.sh [--dry-run] [--stress N] [cargo test arguments]
       scripts/test.sh --clean-caches [--dry-run]
       scripts/test.sh --help | -h

Runs the whole test suite: it checks its prerequisites first (as root it installs the
missing Debian packages; otherwise it names them), then runs its stages, stopping at
the first that fails. It ends with a table of the stages' times and one verdict line:
  == verdict: PASS (11 stages, 244 s)
  == verdict: FAIL at first-pass (7 of 11 stages passed, 412 s)
A failed run first repeats each failed test's name, the first screen of its message
and the command that runs it again alone.

Options:
  -h, --help        print this and exit; runs nothing
  --dry-run         check the prerequisites (per prerequisite: found, or missing and
                    how to get it; installing nothing, running no command it lacks),
                    list the stages without running them, and end with
                    "== verdict: DRY RUN (...)"
  --stress N        run N busy loops (sh -c 'while :; do :; done') beside the whole
                    run, stopped when it ends: the suite's verdict must not change
                    with load (docs/guides/development.md, "Under load")
  --clean-caches    remove the suite's caches (listed with their sizes; with
                    --dry-run only listed) and exit; runs no test. Not while a
                    run of the suite goes on: its servers' files are among them
  ARGS...           the rest goes to `cargo test` (a filter, or `-- --test-threads=4`):
                    then the first pass is one process and the long-tests stage is
                    left out

Stages (in the table's order; "beside" ones run in the background, each printing
a line at least once a minute while it runs):
  prerequisites     everything the suite needs, checked first
  fmt               cargo fmt --check
  build-tests       cargo test --no-run: the tests' build
  deny              cargo deny check bans, offline: which package may list which
                    (deny.toml; beside, from the start: cargo-deny built once and
                    cached by version, scripts/cargo-tool.sh)
  clippy            cargo clippy -D warnings (beside, its own target directory)
  check-deploy      scripts/check-deploy.sh: manifests, image, alert rules (beside)
  light-checks      contracts, squawk, changelog, shellcheck, this script's --help
                    and --dry-run (beside)
  jaeger            Jaeger for tests/it/trace.rs, built once and cached (beside)
  kube              etcd and the Kubernetes control plane for tests/it/kube.rs,
                    built once and cached (beside)
  previous-release  the release before for tests/it/upgrade.rs, built once (beside)
  first-pass        the unit tests and the integration tests (PostgreSQL 15, Kafka 4)
  second-pass       the tests of SQL, plans and the Kafka protocol on PostgreSQL 18
                    and Kafka 3.9
  long-tests        the longest modules (cluster, simulation, tls, acl, no_loss,
                    kube) (beside)

Environment:
  DATABASE_URL, KAFKA_BROKERS  use this server / broker instead of throwaway ones
  RUST_TEST_THREADS            libtest's threads for both passes (default 8)
  TEST_SECOND_PASS             1 (default) runs the second pass, 0 leaves it out
  TEST_TMPFS_MIN_GIB           the GiB /dev/shm needs free to hold the test servers'
                               files (default 8)
  TMPDIR                       where the test servers' files go (else /dev/shm)
  CARGO_TARGET_DIR             Cargo's target directory (CI: /var/tmp/booking-expire-target)
  CI                           set: a fresh clone each time (the target directory above)
  XDG_CACHE_HOME               the cache root (default ~/.cache): booking-expire/ in it
  TEST_DRY_RUN_FAIL=STAGE      with --dry-run: that stage fails, to see a failing run

Exit status:
  0   every stage passed (--dry-run: every prerequisite is there)
  1   a stage failed (the verdict names it), or --dry-run found a prerequisite missing
  2   a wrong option
  64  a wrong value in the environment (TEST_SECOND_PASS, TEST_TMPFS_MIN_GIB)
  130, 143  interrupted (SIGINT, SIGTERM): the table and the verdict all the same
EOF
}

DRY_RUN=0
STRESS=0
CLEAN_CACHES=0
while (($#)); do
    case $1 in
        -h | --help) usage; exit 0 ;;
        --dry-run) DRY_RUN=1; shift ;;
        --clean-caches) CLEAN_CACHES=1; shift ;;
        --stress | --stress=*)
            if [[ $1 == --stress=* ]]; then STRESS=${1#--stress=}; shift; else STRESS=${2:-}; shift $(($# > 1 ? 2 : 1)); fi
            [[ $STRESS =~ ^[0-9]+$ && $STRESS -le 64 ]] || {
                echo "scripts/test.sh: --stress wants a number of busy loops, 0 to 64 (got '${STRESS}'); see --help" >&2
                exit 2
            }
            ;;
        *) break ;; # the rest, a `--` with it, is cargo test's
    esac
done

test_second_pass || true # TEST_SECOND_PASS is checked before the long first pass

# The suite's caches: each directory, what is in it (docs/guides/development.md, "What
# the scripts install, and where"). The crates (~/.cargo/registry) and Maven's jars
# (~/.m2/repository) are shared with other projects: named, never removed.
cache_dirs() {
    local cache=${XDG_CACHE_HOME:-$HOME/.cache}/booking-expire
    printf '%s\t%s\n' \
        "$cache" "Jaeger (go-tools/), cargo-deny (cargo-tools/), the release before (releases/), the npm contract tooling, the Python venvs, Kafka's classpath and JVM archives" \
        /var/cache/booking-expire "the second pass's PostgreSQL 18 venv, when run as root" \
        "${CARGO_TARGET_DIR:-target}" "Cargo's build of the binary and the tests, and clippy's (clippy/)" \
        "/dev/shm/booking-expire-tests-$(id -u)" "the test servers' files a failed test kept (removed after a day anyway)"
    # CI's Cargo target directory (set below when CI is and CARGO_TARGET_DIR is not).
    if [[ -n ${CI:-} && -z ${CARGO_TARGET_DIR:-} ]]; then
        printf '%s\t%s\n' /var/tmp/booking-expire-target "CI's Cargo target directory (CI set)"
    fi
}

clean_caches() {
    local dir what size
    while IFS=$'\t' read -r dir what; do
        if [[ ! -e $dir ]]; then
            printf '   %-45s absent  (%s)\n' "$dir" "$what" >&2
            continue
        fi
        size=$(du -sh "$dir" 2>/dev/null | cut -f 1)
        if ((DRY_RUN)); then
            printf '   %-45s %6s  would remove (%s)\n' "$dir" "$size" "$what" >&2
        else
            printf '   %-45s %6s  removing (%s)\n' "$dir" "$size" "$what" >&2
            rm -rf "$dir"
        fi
    done < <(cache_dirs)
    echo "   kept, shared with other projects: ~/.cargo/registry (the crates: remove it, cargo fetches them again) and ~/.m2/repository (Kafka's jars: remove org/apache/kafka in it)" >&2
}

if ((CLEAN_CACHES)); then
    if ((DRY_RUN)); then echo "== the suite's caches (dry run: nothing removed)" >&2; else echo "== the suite's caches" >&2; fi
    clean_caches
    exit 0
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
readonly CARGO_DENY_VERSION=0.20.2
readonly RUST_MIN_MINOR=85 # edition 2024
readonly GO_MIN_MINOR=24   # `go get -tool`, scripts/go-tool.sh

# --- the stages' record, the time table and the verdict ------------------------------

STARTED=$SECONDS
# Every stage, in the order of the table; those not reached are listed as not run.
PLANNED=(prerequisites fmt build-tests deny clippy check-deploy light-checks jaeger kube previous-release first-pass)
test_second_pass && PLANNED+=(second-pass)
(($#)) || PLANNED+=(long-tests) # split_first_pass below
STAGE_NAMES=()
STAGE_RESULTS=()
STAGE_SECONDS=()
# Background stages: name -> PID, and the file their status goes to.
declare -A BG_PID=() BG_STATUS=() BG_LOG=()
LOGS=$(mktemp -d)
# Beside the stages: the busy loops of --stress and the progress lines (heartbeat).
STRESS_PIDS=()
HEARTBEAT_PID=""

record() { # record NAME RESULT SECONDS
    STAGE_NAMES+=("$1")
    STAGE_RESULTS+=("$2")
    STAGE_SECONDS+=("$3")
}

# failed_tests — for each test that failed in a cargo test stage's output: its name,
# the first 40 lines of its message (the harness puts the cause there: what differed,
# the program's error line, its last warnings; tests/it/common/failure.rs) and the
# command that runs it again alone.
failed_tests() {
    local log stage env_prefix
    for log in "$LOGS"/*.log; do
        [[ -e $log ]] || continue
        stage=$(basename "$log" .log)
        env_prefix=""
        [[ $stage != second-pass ]] || env_prefix="env -u DATABASE_URL -u KAFKA_BROKERS PG_FLAVOR=embedded KAFKA_VERSION=3.9.1 "
        awk -v env_prefix="$env_prefix" -v stage="$stage" '
            function rerun(name) {
                if (target ~ /^tests\/it/ || target == "") return "cargo test --locked --test it -- --exact " name
                return "cargo test --locked -p " package " " kind " -- --exact " name
            }
            function finish() {
                if (name == "") return
                if (lines > 40) print "   ... (" lines - 40 " lines more; the whole log is in the file it names)"
                print "   re-run it alone: " env_prefix rerun(name)
                name = ""
            }
            /^ *Running / {
                # "Running unittests src/lib.rs (target/debug/deps/booking_expire_kafka-0123abcd)"
                target = $2; if ($2 == "unittests") target = $3
                kind = (target ~ /main\.rs$/) ? "--bins" : "--lib"
                bin = $NF; gsub(/[()]/, "", bin); sub(/.*\//, "", bin); sub(/-[0-9a-f]+$/, "", bin)
                package = bin; gsub(/_/, "-", package)
                next
            }
            /^---- .* stdout ----$/ {
                finish()
                name = $2; lines = 0
                print "== failed in " stage ": " name
                next
            }
            /^failures:$/ || /^test result:/ { finish(); next }
            name != "" { lines++; if (lines <= 40) print "   " $0 }
            END { finish() }
        ' "$log"
    done
}

report() { # the time table and the verdict line; $1 the exit status
    local rc=$1 i passed=0 failed="" total=$((SECONDS - STARTED))
    local pid
    for pid in "${BG_PID[@]}" "${STRESS_PIDS[@]}" "$HEARTBEAT_PID"; do
        # Ours, not yet joined, in a process group of its own (its builds with it).
        [[ -z $pid ]] || kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
    done
    if ((rc)) && ! ((DRY_RUN)); then failed_tests >&2; fi
    local dry=""
    ((DRY_RUN)) && dry="; DRY: a dry run's, not run"
    echo "== stages (seconds of wall time; deny, clippy, jaeger, kube, previous-release, light-checks, check-deploy and long-tests run beside the others$dry)" >&2
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
    if ((DRY_RUN)); then
        # Nothing ran: never a PASS. What would stop a real run is said.
        local missing
        missing=$(cat "$LOGS/prerequisites.missing" 2>/dev/null || echo 0)
        echo "== verdict: DRY RUN (${#PLANNED[@]} stages planned, none run; prerequisites missing: $missing${failed:+; $failed made to fail by TEST_DRY_RUN_FAIL}; $total s)" >&2
    elif [[ $rc -eq 0 && -z $failed ]]; then
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

# doing LOG — what a stage is doing, from its output so far: the tests passed (and
# failed) so far, the crates compiled so far, or its last line.
doing() {
    local log=$1 ok failed crates last
    [[ -s $log ]] || { echo "started, no output yet"; return; }
    ok=$(grep -c -E '^test .* \.\.\. ok$' "$log" || true)
    failed=$(grep -c -E '^test .* \.\.\. FAILED$' "$log" || true)
    if ((failed)); then
        echo "$ok tests passed and $failed failed so far"
        return
    elif ((ok)); then
        echo "$ok tests passed so far"
        return
    fi
    crates=$(grep -c -E '^ *(Compiling|Checking) ' "$log" || true)
    last=$(grep -v '^[[:space:]]*$' "$log" | tail -n 1 | cut -c 1-100)
    if ((crates)); then
        echo "compiling: $crates crates so far (last: ${last#"${last%%[![:space:]]*}"})"
    else
        echo "${last#"${last%%[![:space:]]*}"}"
    fi
}

# heartbeat — every 50 s, a line per running stage (foreground or background): its
# name, time so far and what it is doing, so no minute passes without a line.
heartbeat() {
    local f name t0 what now
    while sleep 50; do
        now=$(date +%s)
        for f in "$LOGS"/*.running; do
            [[ -e $f ]] || continue
            name=$(basename "$f" .running)
            read -r t0 what <"$f" || continue
            echo "-- [$name, $(((now - t0) / 60))m$(((now - t0) % 60))s] $what: $(doing "$LOGS/$name.log")" >&2
        done
    done
}

# running NAME WHAT / ran NAME — a stage's start and end, for the heartbeat.
running() { echo "$(date +%s) $2" >"$LOGS/$1.running"; }
ran() { rm -f "$LOGS/$1.running"; }

# stage NAME WHAT COMMAND... — runs COMMAND in the foreground and records it under NAME
# (WHAT says what it is); the first stage that fails ends the run (the trap prints the
# table and the verdict). Its output is kept (LOGS/NAME.log) for the heartbeat and the
# failed tests' summary. ALWAYS=1: run it in a dry run too.
stage() {
    local name=$1 what=$2 t0=$SECONDS rc=0
    echo "== $name: $what" >&2
    shift 2
    if ((DRY_RUN)) && [[ ${ALWAYS:-0} != 1 ]]; then
        echo "   (dry run) $*" >&2
        dry_fails "$name" && rc=1
        ((rc)) || { record "$name" "DRY" 0; return 0; }
    else
        running "$name" "$what"
        set +e
        "$@" 2>&1 | tee -a "$LOGS/$name.log" >&2
        rc=${PIPESTATUS[0]}
        set -e
        ran "$name"
    fi
    if ((rc)); then
        record "$name" FAIL $((SECONDS - t0))
        exit "$rc"
    fi
    record "$name" PASS $((SECONDS - t0))
}

# stage_bg NAME WHAT COMMAND... — starts COMMAND in the background (beside the next
# stages); its output goes to a log printed when it is joined, unless BG_LIVE=1, when it
# prints as it comes (the long builds, whose progress is worth seeing). Either way the
# heartbeat says at least once a minute what it is doing.
stage_bg() {
    local name=$1 what=$2 status log
    echo "== $name: $what (in the background)" >&2
    shift 2
    status=$LOGS/$name.status
    log=$LOGS/$name.log
    if ((DRY_RUN)); then
        echo "   (dry run) $*" >&2
        if dry_fails "$name"; then echo "1 0" >"$status"; else echo "dry 0" >"$status"; fi
        BG_PID[$name]=""
    else
        running "$name" "$what"
        # A process group of its own (job control on for the start): stopped whole if
        # the run ends before it is joined.
        set -m
        (
            t0=$SECONDS rc=0
            # BG_NICE=N: this stage and all it starts at niceness N (below the tests).
            if [[ -n ${BG_NICE:-} ]]; then renice -n "$BG_NICE" -p "$BASHPID" >/dev/null; fi
            if [[ ${BG_LIVE:-0} == 1 ]]; then
                set +e
                "$@" 2>&1 | tee -a "$log" >&2
                rc=${PIPESTATUS[0]}
                set -e
                : >"$log.shown"
            else
                "$@" >"$log" 2>&1 || rc=$?
            fi
            echo "$rc $((SECONDS - t0))" >"$status"
            rm -f "$LOGS/$name.running"
        ) &
        BG_PID[$name]=$!
        set +m
    fi
    BG_STATUS[$name]=$status
    BG_LOG[$name]=$log
}

# join NAME — waits for a background stage, prints its log (unless it printed as it
# came) and records it.
join() {
    local name=$1 rc secs
    echo "== waiting for: $name" >&2
    [[ -z ${BG_PID[$name]} ]] || wait "${BG_PID[$name]}" || true
    unset 'BG_PID[$name]'
    if [[ -s ${BG_LOG[$name]} && ! -e ${BG_LOG[$name]}.shown ]]; then cat "${BG_LOG[$name]}" >&2; fi
    read -r rc secs <"${BG_STATUS[$name]}" 2>/dev/null || { rc=1 secs=0; }
    if [[ $rc == dry ]]; then
        record "$name" DRY 0
        return 0
    fi
    if ((rc)); then
        record "$name" FAIL "$secs"
        echo "$name failed (its output is above)" >&2
        exit 1
    fi
    record "$name" PASS "$secs"
}

if ! ((DRY_RUN)); then
    # A process group of its own: stopped with its sleep, which would otherwise hold
    # the run's output open for up to 50 s after its end.
    set -m
    heartbeat &
    HEARTBEAT_PID=$!
    set +m
    if ((STRESS)); then
        for ((i = 0; i < STRESS; i++)); do
            sh -c 'while :; do :; done' &
            STRESS_PIDS+=("$!")
        done
        echo "== stress: $STRESS busy loops beside the run (PIDs ${STRESS_PIDS[*]}), stopped when it ends" >&2
    fi
elif ((STRESS)); then
    echo "== stress: (dry run) would run $STRESS busy loops beside the run" >&2
fi

# --- prerequisites ----------------------------------------------------------------

# The Debian packages the scripts install when missing (as root) or name (otherwise).
debian_packages() {
    # scripts/lib.sh ensure_build_deps: the build (libclang for pg_query's bindgen),
    # psql, certificates, faketime, PgBouncer.
    echo pkg-config libssl-dev zlib1g-dev make gcc g++ libclang-dev postgresql-client openssl faketime pgbouncer
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

# prerequisites — says per prerequisite "found" or "missing" (and how to get it). A
# real run installs the missing Debian packages first (as root) and stops naming all
# that is still missing; a dry run installs nothing, runs no command it lacks, says
# what it would install, and goes on (the verdict counts what is missing).
prerequisites() {
    local missing=() packages=() pkg v go="" release commit absent=() cmd
    found() { echo "   found:   $*" >&2; }
    lacks() { echo "   missing: $*" >&2; missing+=("$*"); }
    # Rust: not from Debian (its 1.63 is too old).
    if ! command -v cargo >/dev/null || ! command -v rustc >/dev/null; then
        lacks "Rust (stable, 1.$RUST_MIN_MINOR or newer, for edition 2024): install it with rustup, then open a new shell"
    else
        v=$(rustc --version 2>/dev/null | awk '{ print $2 }')
        if [[ $(minor_of "$v") -lt $RUST_MIN_MINOR ]] 2>/dev/null; then
            lacks "Rust 1.$RUST_MIN_MINOR or newer (found ${v:-none}): rustup update stable"
        else
            found "Rust $v"
        fi
        if cargo fmt --version >/dev/null 2>&1 && cargo clippy --version >/dev/null 2>&1; then
            found "rustfmt and clippy"
        elif ((DRY_RUN)); then
            lacks "rustfmt and clippy: would run rustup component add rustfmt clippy"
        elif command -v rustup >/dev/null; then
            if rustup component add rustfmt clippy >/dev/null 2>&1; then
                found "rustfmt and clippy (added with rustup)"
            else
                lacks "rustfmt and clippy: rustup component add rustfmt clippy (it failed here)"
            fi
        else
            lacks "rustfmt and clippy: rustup component add rustfmt clippy"
        fi
    fi
    # Go, for the Jaeger tests/it/trace.rs runs and the control plane of
    # tests/it/kube.rs, unless both are built already (kube-build.sh prints the cached
    # paths at once and builds nothing then).
    local jaeger=${XDG_CACHE_HOME:-$HOME/.cache}/booking-expire/go-tools/jaeger-$JAEGER_VERSION/jaeger
    if [[ -x $jaeger ]] && scripts/kube-build.sh --cached >/dev/null 2>&1; then
        found "Jaeger $JAEGER_VERSION and the Kubernetes control plane, built before: Go not needed"
    else
        if command -v go >/dev/null; then go=$(go env GOVERSION 2>/dev/null || true); fi
        if [[ -z $go || $(minor_of "$go") -lt $GO_MIN_MINOR ]]; then
            lacks "Go 1.$GO_MIN_MINOR or newer (found: ${go:-none}; Debian 12's golang-go is 1.19), to build Jaeger $JAEGER_VERSION for tests/it/trace.rs and etcd and Kubernetes for tests/it/kube.rs once: install Go from its release archive and put its bin/ on PATH"
        else
            found "Go ${go#go}, to build Jaeger $JAEGER_VERSION and the Kubernetes control plane once"
        fi
    fi
    # The release before (tests/it/upgrade.rs, scripts/changelog-check.sh): its commit.
    release=$(grep -v '^#' scripts/releases.tsv | tail -n 1)
    commit=$(cut -f 2 <<<"$release")
    if [[ -n $commit ]] && command -v git >/dev/null; then
        if git cat-file -e "$commit^{commit}" 2>/dev/null; then
            found "the commit of release $(cut -f 1 <<<"$release") ($commit)"
        else
            lacks "the commit of release $(cut -f 1 <<<"$release") ($commit) in this clone: git fetch --unshallow (a shallow clone lacks it)"
        fi
    fi
    # Root: check-deploy.sh checks the runtime libraries in a chroot and runs the image
    # with rootful podman; the scripts install what is missing with apt-get.
    if [[ $(id -u) -ne 0 ]]; then
        lacks "root: scripts/check-deploy.sh checks the image's runtime libraries in a chroot and builds and runs the image with rootful podman (run in a container or a CI machine as root)"
    else
        found "root"
    fi
    # The Debian packages.
    read -r -a packages <<<"$(debian_packages | tr '\n' ' ')"
    for pkg in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || absent+=("$pkg")
    done
    if ((${#absent[@]} == 0)); then
        found "the ${#packages[@]} Debian packages"
    elif [[ $(id -u) -eq 0 ]] && ((DRY_RUN)); then
        lacks "the Debian packages ${absent[*]}: would install them (apt-get install, as root)"
    elif [[ $(id -u) -eq 0 ]]; then
        echo "   installing the Debian packages: ${absent[*]}" >&2
        if ensure_apt_packages "${absent[@]}"; then
            found "the Debian packages ${absent[*]} (installed now)"
            absent=()
        else
            lacks "the Debian packages ${absent[*]}: apt-get install failed (its log is above)"
        fi
    else
        lacks "the Debian packages ${absent[*]}: sudo apt-get install ${absent[*]}"
    fi
    # The commands the stages run, on PATH (a package installed is not enough: its
    # command must be found). Never run one that is missing.
    local -A package_of=([podman]=podman [runc]=runc [promtool]=prometheus [shellcheck]=shellcheck
        [git]=git [psql]=postgresql-client [openssl]=openssl [faketime]=faketime [mvn]=maven
        [node]=nodejs [npm]=npm)
    for cmd in podman runc promtool shellcheck git psql openssl faketime mvn node npm; do
        pkg=${package_of[$cmd]}
        if command -v "$cmd" >/dev/null; then
            found "$cmd ($(command -v "$cmd"))"
        elif [[ " ${absent[*]} " == *" $pkg "* ]]; then
            echo "   missing: $cmd (comes with the Debian package $pkg, above)" >&2
        else
            lacks "$cmd: not on PATH (its Debian package $pkg is installed: put its directory on PATH)"
        fi
    done
    if [[ -n $(java17) ]]; then
        found "Java $(java_major "$(java17)" 2>/dev/null || true) ($(java17))"
    elif [[ " ${absent[*]} " != *" openjdk-17-jre-headless "* ]]; then
        lacks "Java 17 or newer: openjdk-17-jre-headless, or JAVA_HOME naming one"
    fi
    echo "${#missing[@]}" >"$LOGS/prerequisites.missing"
    if ((${#missing[@]})); then
        if ((DRY_RUN)); then
            echo "   (dry run: ${#missing[@]} missing; a real run would stop here naming them)" >&2
            return 0
        fi
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

# Its own --help and --dry-run, as a newcomer meets them: --help prints the usage and
# runs nothing (a cargo on PATH that records its calls sees none); --dry-run on a PATH
# without podman says podman is missing, runs no command it lacks (no "command not
# found") and no cargo but version queries, and ends with a DRY RUN verdict, never PASS.
help_and_dry_run_check() {
    local dir rc=0 d f
    dir=$(mktemp -d)
    mkdir "$dir/bin" "$dir/trip"
    # The commands of PATH but podman, and a cargo that records its arguments.
    for d in ${PATH//:/ }; do
        for f in "$d"/*; do
            [[ -x $f && ! -d $f && ! -e $dir/bin/${f##*/} && ${f##*/} != podman ]] || continue
            ln -s "$f" "$dir/bin/${f##*/}"
        done
    done
    rm -f "$dir/bin/cargo"
    printf '#!/bin/sh\necho "$*" >>"%s"\nexec "%s" "$@"\n' "$dir/trip/cargo.calls" "$(command -v cargo)" >"$dir/bin/cargo"
    chmod +x "$dir/bin/cargo"
    local out=$dir/help.out
    for flag in --help -h; do
        if ! PATH=$dir/bin scripts/test.sh "$flag" >"$out" 2>&1; then
            echo "scripts/test.sh $flag exited non-zero:" >&2; cat "$out" >&2; rc=1
        fi
        for want in "Usage: scripts/test.sh" "Stages" "Environment:" "Exit status:" "--dry-run" "--stress N" "--clean-caches"; do
            grep -q -F -- "$want" "$out" || { echo "scripts/test.sh $flag does not print \"$want\"" >&2; rc=1; }
        done
        if [[ -s $dir/trip/cargo.calls ]]; then
            echo "scripts/test.sh $flag ran cargo: $(cat "$dir/trip/cargo.calls")" >&2; rc=1
        fi
        if grep -q -E '^== (stages|prerequisites)' "$out"; then echo "scripts/test.sh $flag went through the stages: it ran the suite" >&2; rc=1; fi
    done
    out=$dir/dry.out
    PATH=$dir/bin TEST_DRY_RUN_FAIL="" scripts/test.sh --dry-run >"$out" 2>&1 || true
    grep -q -E '^   missing: podman' "$out" || { echo "scripts/test.sh --dry-run without podman does not say it is missing" >&2; rc=1; }
    if grep -q -i 'command not found' "$out"; then echo "scripts/test.sh --dry-run ran a command it lacks" >&2; rc=1; fi
    if grep -q -E 'verdict: (PASS|FAIL)' "$out"; then echo "scripts/test.sh --dry-run gave a PASS or FAIL verdict" >&2; rc=1; fi
    tail -n 1 "$out" | grep -q '^== verdict: DRY RUN (' || { echo "scripts/test.sh --dry-run does not end with \"== verdict: DRY RUN (\"" >&2; rc=1; }
    if grep -v -E -- '--version$' "$dir/trip/cargo.calls" 2>/dev/null | grep -q .; then
        echo "scripts/test.sh --dry-run ran cargo: $(cat "$dir/trip/cargo.calls")" >&2; rc=1
    fi
    if ((rc)); then echo "the dry run's output:" >&2; cat "$out" >&2; fi
    rm -rf "$dir"
    return "$rc"
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
    echo "-- scripts/test.sh --help and --dry-run (on a PATH without podman): usage that runs nothing, a dry run that tells the truth"
    help_and_dry_run_check || rc=1
    return "$rc"
}

# The dependency rules of deny.toml: cargo-deny (built once, cached by version), then
# its bans check offline: no advisory database is read (the advisories check needs a
# network). The crates of the one target deny.toml reads are fetched first, as the
# build fetches them.
deny_check() {
    local deny
    deny=$(scripts/cargo-tool.sh cargo-deny "$CARGO_DENY_VERSION") || return 1
    cargo fetch --locked --quiet --target x86_64-unknown-linux-gnu || return 1
    "$deny" --offline --locked check bans
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
    host_rows migrate migrate_catalog migrate_compat migrate_notices migrate_partial
    migrate_refuse migrate_split shared_outbox waiting upgrade row_security watermark
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
# 150 + 51 + 41 s, tls 4 x 40 s, acl 63 s, no_loss (its seeded random run about 2 min,
# on a server of its own it restarts), kube (a control plane each; the CronJob's
# minutes bound them: 16 s to 241 s, 268 s the eight side by side); the other 300
# tests about 930 s together.
# A thread for each of their 30 tests, so that each starts at once: the days simulated
# are the longest single test, and libtest took it eighth in name order. The cluster
# tests take turns on one cluster the process shares, so they wait for each other.
long_modules=(cluster simulation tls acl no_loss kube)
long_threads=30
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
        # Both run, and either failing fails the stage (a stage's command runs where
        # set -e does not hold: the status of the last command alone would hide the
        # unit tests' failure).
        local skips=() module rc=0
        for module in "${long_modules[@]}"; do skips+=(--skip "$module::"); done
        with_servers_tmpdir cargo test --locked --workspace --lib --bins --benches --examples || rc=1
        with_servers_tmpdir cargo test --locked --test it -- "${skips[@]}" || rc=1
        return "$rc"
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
# etcd and the Kubernetes control plane for tests/it/kube.rs, the same way (versions
# pinned in the script; about 20 minutes on 2 loaded cores, once): the tests' own call
# waits for this build (a lock per cache directory) and then finds the binaries.
BG_LIVE=1 stage_bg kube "etcd and kube-apiserver/kube-controller-manager for tests/it/kube.rs, built once and cached by version" \
    sh -c 'scripts/kube-build.sh >/dev/null'
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

# Which package may list which (deny.toml), from the start: cargo-deny's one build (its
# own target directory) overlaps the tests' build, and it is joined before the tests.
BG_NICE=10 stage_bg deny "cargo deny check bans: which package may list which (deny.toml)" deny_check

stage fmt "cargo fmt --check" cargo fmt --all -- --check
stage build-tests "cargo test --no-run: the tests' build" cargo test --locked --workspace --all-targets --no-run
join deny
if split_first_pass "$@"; then
    stage_bg long-tests "the first pass's longest modules (${long_modules[*]}), beside the rest" long_tests
fi
# Clippy beside the tests, in a target directory of its own: its checks of every crate
# (137 s on a cold machine) would hold the tests' directory's lock, and the first pass
# would wait for them.
BG_NICE=10 stage_bg clippy "cargo clippy -D warnings" \
    env CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/clippy" \
    cargo clippy --workspace --all-targets --locked -- -D warnings
# It checks the binary the tests' build made (BOOKING_EXPIRE_BIN, which image-test.sh
# takes too) and builds none: a `cargo build` beside the tests replaced their binary at
# the same path while they ran it (their build has the dev-dependencies' features), and
# a test that started it then found no file.
BG_NICE=10 stage_bg check-deploy "scripts/check-deploy.sh: manifests, Dockerfile, runtime libraries, alert rules, dashboard, the image" \
    env BOOKING_EXPIRE_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/booking-expire" scripts/check-deploy.sh

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
join kube
join previous-release
join check-deploy
if split_first_pass "$@"; then join long-tests; fi
# A dry run ran nothing; it fails when a real run would stop at its prerequisites.
if ((DRY_RUN)) && [[ $(cat "$LOGS/prerequisites.missing" 2>/dev/null || echo 0) != 0 ]]; then exit 1; fi
