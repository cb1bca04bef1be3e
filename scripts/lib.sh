# shellcheck shell=bash
# Shared helpers for the project's scripts. Source it; it defines functions only.

SCRIPTS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# free_ports N — prints N distinct free TCP ports of 127.0.0.1 on one line. The kernel
# picks them (bind to port 0), which avoids collisions between services started at
# the same moment far better than guessing; another process may still take one
# before our server binds it, so callers retry. perl-base is Essential on Debian.
free_ports() {
    perl -MIO::Socket::INET -e '
      my @s = map {
        IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => 0,
                              Proto => "tcp", Listen => 1)
          or die "cannot bind a free port: $!\n"
      } 1 .. $ARGV[0];
      print join(" ", map { $_->sockport } @s), "\n";' "$1"
}

# ensure_apt_packages PACKAGE... — installs the Debian packages that are missing,
# when running as root (a fresh CI machine); otherwise says what to install.
ensure_apt_packages() {
    local missing=() pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0
    if [[ $(id -u) -ne 0 ]]; then
        echo "missing Debian packages: ${missing[*]} (install them, e.g. sudo apt-get install ${missing[*]})" >&2
        return 1
    fi
    echo "installing ${missing[*]}" >&2
    local log
    log=$(mktemp)
    if ! { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
        tail -n 30 "$log" >&2
        rm -f "$log"
        return 1
    fi
    rm -f "$log"
}

# ensure_build_deps — what `cargo build` needs besides Rust: OpenSSL and zlib headers
# (native-tls, librdkafka), a C toolchain and make (librdkafka and libpg_query are
# built from source), libclang (bindgen makes pg_query's bindings to libpg_query, the
# migration runner's SQL splitter), pkg-config to find them, psql for the migration
# script, openssl for the certificates the TLS tests make, faketime for the
# clock-guard test, and pgbouncer for the pooler-guard test (tests/it/pooler.rs).
ensure_build_deps() {
    ensure_apt_packages pkg-config libssl-dev zlib1g-dev make gcc g++ libclang-dev postgresql-client openssl faketime pgbouncer
}

# testbed_bin — builds the project's test services tool (crates/testbed, the same crate
# the tests start their servers with) and prints its path.
testbed_bin() {
    cargo build --locked --quiet -p booking-expire-testbed --bin testbed >&2 || return 1
    echo "${CARGO_TARGET_DIR:-$SCRIPTS_DIR/../target}/debug/testbed"
}

# serve_start VAR KIND [ARG...] — starts `testbed serve KIND ARG...` in the background
# and sets VAR to a new temporary directory of its own: its address (the only line it
# prints) is in DIR/address, its log in DIR/log. It serves until its stdin, a pipe only
# this shell holds open, closes (serve_stop DIR, or this shell's end, however it ends):
# then it stops the service and removes the service's files.
SERVE_FDS=()
serve_start() {
    local var=$1 kind=$2 bin dir fd pid address f
    shift 2
    bin=$(testbed_bin) || return 1
    dir=$(mktemp -d)
    mkfifo "$dir/hold" "$dir/out"
    # Without the write ends of the others' pipes: each ends when its own closes.
    (
        for f in "${SERVE_FDS[@]}"; do exec {f}>&-; done
        exec "$bin" serve "$kind" "$@"
    ) <"$dir/hold" >"$dir/out" 2>"$dir/log" &
    pid=$!
    # Opening the pipe's write end lets the server's stdin open; held until serve_stop.
    exec {fd}>"$dir/hold"
    SERVE_FDS+=("$fd")
    echo "$fd $pid" >"$dir/holder"
    printf -v "$var" '%s' "$dir"
    # The address, or end of file if it stopped first.
    if ! read -r address <"$dir/out" || [[ -z $address ]]; then
        echo "testbed serve $kind failed:" >&2
        tail -n 40 "$dir/log" >&2
        serve_stop "$dir"
        printf -v "$var" '%s' ""
        return 1
    fi
    echo "$address" >"$dir/address"
}

# serve_stop DIR — ends what serve_start started in DIR (closing its stdin), waits for
# it to stop, and removes DIR.
serve_stop() {
    local dir=$1 fd pid kept=() f
    if [[ -f $dir/holder ]]; then
        read -r fd pid <"$dir/holder"
        exec {fd}>&-
        for f in "${SERVE_FDS[@]}"; do [[ $f == "$fd" ]] || kept+=("$f"); done
        SERVE_FDS=("${kept[@]}")
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$dir"
}

# start_postgres — exports DATABASE_URL of a throwaway server (`testbed serve
# postgres`; PG_FLAVOR, PG_BINDIR as for the tests), unless the caller already set
# DATABASE_URL: then that server is used and nothing is started.
start_postgres() {
    PG_SERVED=""
    if [[ -n ${DATABASE_URL:-} ]]; then
        echo "using the PostgreSQL of DATABASE_URL" >&2
        return 0
    fi
    serve_start PG_SERVED postgres || return 1
    DATABASE_URL=$(cat "$PG_SERVED/address")
    export DATABASE_URL
}

# stop_postgres — stops and removes what start_postgres started, if anything.
stop_postgres() {
    if [[ -n ${PG_SERVED:-} ]]; then
        serve_stop "$PG_SERVED"
        PG_SERVED=""
    fi
}

# start_kafka — exports KAFKA_BROKERS of a throwaway Apache Kafka broker (`testbed
# serve kafka`: KRaft, one node; KAFKA_VERSION, KAFKA_HEAP_OPTS, KAFKA_JVM_OPTS as for
# the tests), unless the caller already set KAFKA_BROKERS: then that broker is used and
# nothing is started.
start_kafka() {
    KAFKA_SERVED=""
    if [[ -n ${KAFKA_BROKERS:-} ]]; then
        echo "using the Kafka of KAFKA_BROKERS" >&2
        return 0
    fi
    serve_start KAFKA_SERVED kafka || return 1
    KAFKA_BROKERS=$(cat "$KAFKA_SERVED/address")
    export KAFKA_BROKERS
}

# stop_kafka — stops and removes what start_kafka started, if anything.
stop_kafka() {
    if [[ -n ${KAFKA_SERVED:-} ]]; then
        serve_stop "$KAFKA_SERVED"
        KAFKA_SERVED=""
    fi
}

# stop_services — for an EXIT trap.
stop_services() {
    stop_kafka
    stop_postgres
}

# servers_tmpdir — prints a directory on a RAM-backed file system (tmpfs) for the
# throwaway servers' files, or nothing to keep TMPDIR. Each test creates and drops a
# database (hundreds of files each), and on a disk file system allocating their inodes
# took about a quarter of the suite's CPU. Nothing when TMPDIR is set (the user's
# choice), when /dev/shm is no tmpfs, or when it has less than TEST_TMPFS_MIN_GIB
# (default 8) GiB free: the servers of a run hold a few GiB at most. The directory is
# this user's own (booking-expire-tests-UID, mode 0755 so a server run as another user
# reaches its own directory inside). What a failed test kept there (its servers' logs
# and data) is removed a day later, by the next run: RAM is not a place to keep it.
servers_tmpdir() {
    [[ -z ${TMPDIR:-} ]] || return 0
    local shm=/dev/shm min=${TEST_TMPFS_MIN_GIB:-8} avail dir
    [[ $min =~ ^[0-9]+$ ]] || {
        echo "TEST_TMPFS_MIN_GIB=$min is not allowed: give a whole number of GiB (default 8)" >&2
        exit 64
    }
    [[ -d $shm && -w $shm && $(stat -f -c %T "$shm" 2>/dev/null) == tmpfs ]] || return 0
    avail=$(df -Pk "$shm" | awk 'NR == 2 {print $4}')
    ((avail >= min * 1024 * 1024)) || return 0
    dir=$shm/booking-expire-tests-$(id -u)
    [[ -d $dir ]] || mkdir -m 0755 "$dir" 2>/dev/null || return 0
    # Another user's directory of that name (/dev/shm is everyone's) is not used.
    [[ -O $dir && ! -L $dir ]] || return 0
    find "$dir" -mindepth 1 -maxdepth 1 -mtime +0 -exec rm -rf {} + 2>/dev/null || true
    echo "$dir"
}

# test_second_pass — whether scripts/test.sh runs its second pass (PostgreSQL 18 and
# Kafka 3.9): TEST_SECOND_PASS=1 (the default) yes, 0 no; any other value exits 64
# naming what is allowed.
test_second_pass() {
    case ${TEST_SECOND_PASS:-1} in
        1) return 0 ;;
        0) return 1 ;;
        *)
            echo "TEST_SECOND_PASS=$TEST_SECOND_PASS is not allowed: use 1 (the default: after the first pass, run the tests of SQL, plans and the Kafka protocol again on PostgreSQL 18 and Kafka 3.9) or 0 (leave that pass out)" >&2
            exit 64
            ;;
    esac
}

# python_venv NAME==VERSION — prints the path of a Python venv that holds exactly that
# PyPI package, made once with Debian's python3 (needs python3-venv) under
# ${XDG_CACHE_HOME:-~/.cache}/booking-expire/venvs/ (outside the repository) and reused
# while the version stays; a venv of another version of the same package is removed.
python_venv() {
    local requirement=$1 dir venv
    [[ $requirement == *==* ]] || { echo "python_venv: want NAME==VERSION, got '$requirement'" >&2; return 64; }
    dir=${XDG_CACHE_HOME:-$HOME/.cache}/booking-expire/venvs
    venv=$dir/${requirement//[^A-Za-z0-9._=-]/_}
    mkdir -p "$dir"
    (
        flock 9
        [[ -e $venv/.complete ]] && exit 0
        rm -rf "$dir/${requirement%%==*}=="*
        /usr/bin/python3 -m venv "$venv" >&2
        "$venv/bin/pip" install --quiet --disable-pip-version-check "$requirement" >&2
        touch "$venv/.complete"
    ) 9>"$dir/.lock" || { echo "python_venv: could not install $requirement into $venv" >&2; return 1; }
    echo "$venv"
}

# squawk_migrations FILE... — lints migrations with squawk (the PostgreSQL migration
# linter, SQUAWK_VERSION from PyPI, in a venv of python_venv) at its default level, and
# fails on any finding, one gcc-style line each (file:line:column, 0-based lines). A
# rule is silenced only inline, with the reason on the line: `-- squawk-ignore RULE --
# why` before the statement or column; the timeout rules once per file
# (docs/guides/development.md, "Migrations").
SQUAWK_VERSION=2.70.0
squawk_migrations() {
    local venv
    ensure_apt_packages python3-venv || return 1
    venv=$(python_venv "squawk-cli==$SQUAWK_VERSION") || return 1
    if ! "$venv/bin/squawk" --reporter gcc "$@"; then
        echo "squawk $SQUAWK_VERSION found problems in the migrations (above): make the statement online-safe, or silence the rule inline with the reason (-- squawk-ignore RULE -- why)" >&2
        return 1
    fi
}

# build_once TOOL DIR LABEL BUILD NAME… — makes each NAME an executable in DIR, built
# at most once however many callers run at the same moment (they wait on DIR/.lock):
# unless all are there, BUILD OUT NAME… runs in a scratch directory (its working
# directory; OUT beside it) and leaves each NAME in OUT, which then moves into DIR.
# BUILD's output goes to DIR/build.log; on failure its tail is shown and build_once
# returns 1. BUILD runs where `set -e` does not stop it: chain its steps with &&. TOOL names the caller in its messages (stderr).
build_once() {
    local tool=$1 dir=$2 label=$3 build=$4
    shift 4
    all_executable "$dir" "$@" && return 0
    mkdir -p "$dir"
    (
        exec 9>"$dir/.lock"
        flock 9
        all_executable "$dir" "$@" && exit 0
        scratch=$(mktemp -d)
        trap 'rm -rf "$scratch"' EXIT
        mkdir -p "$scratch/work" "$scratch/out"
        start=$SECONDS
        echo "$tool: building $label (once; cached in $dir)" >&2
        if ! (cd "$scratch/work" && "$build" "$scratch/out" "$@") >"$dir/build.log" 2>&1; then
            tail -n 30 "$dir/build.log" >&2
            echo "$tool: building $label failed (log: $dir/build.log)" >&2
            exit 1
        fi
        for name in "$@"; do mv "$scratch/out/$name" "$dir/$name"; done
        echo "$tool: built $label in $((SECONDS - start)) s" >&2
    )
}

# all_executable DIR NAME… — true when each NAME is an executable file in DIR.
all_executable() {
    local dir=$1 name
    shift
    for name in "$@"; do [[ -x $dir/$name ]] || return 1; done
}

# require_go TOOL WHAT — fails (exit 1, naming TOOL and WHAT) unless `go` is 1.24 or
# newer: `go get -tool` needs it (Debian 12's golang-go is 1.19). A newer toolchain a
# module asks for is fetched by go itself through the module proxy (GOTOOLCHAIN).
require_go() {
    local minor
    minor=$(go env GOVERSION 2>/dev/null | sed -n 's/^go1\.\([0-9]*\).*/\1/p' || true)
    if [[ -z $minor ]] || ((minor < 24)); then
        echo "$1: go 1.24 or newer is needed to build $2 (found: $(go env GOVERSION 2>/dev/null || echo none)); install Go 1.24 or newer first" >&2
        exit 1
    fi
}
