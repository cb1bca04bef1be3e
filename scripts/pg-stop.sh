#!/usr/bin/env bash
# Stop a throwaway PostgreSQL server started by scripts/pg-start.sh.
#
# Usage: scripts/pg-stop.sh STATE_DIR
#
# Succeeds if the server is already stopped (or was never started). A standby
# (PG_STANDBY_OF) has its replication slot dropped on its primary, if that still runs,
# so that the primary stops keeping WAL for it.
# STATE_DIR itself is left in place: the caller deletes it.
set -euo pipefail

readonly STOP_TIMEOUT=${PG_STOP_TIMEOUT:-60}

STATE_DIR=""
PGDATA_DIR=""
BINDIR=""
RUN_AS=""   # OS user owning the cluster, when it differs from us

log() { printf 'pg-stop: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    printf 'usage: %s STATE_DIR\n' "$(basename "$0")" >&2
    exit 2
}

# Same lookup as pg-start.sh, used only if STATE_DIR/pg_bindir is missing.
find_bindir() {
    local dir
    if [[ -f $STATE_DIR/pg_bindir ]]; then
        dir=$(<"$STATE_DIR/pg_bindir")
        if [[ -x $dir/pg_ctl ]]; then printf '%s\n' "$dir"; return 0; fi
    fi
    if [[ -n ${PG_BINDIR:-} && -x $PG_BINDIR/pg_ctl ]]; then
        printf '%s\n' "$PG_BINDIR"; return 0
    fi
    if command -v pg_config >/dev/null 2>&1; then
        dir=$(pg_config --bindir 2>/dev/null || true)
        if [[ -n $dir && -x $dir/pg_ctl ]]; then printf '%s\n' "$dir"; return 0; fi
    fi
    while IFS= read -r dir; do
        if [[ -x $dir/pg_ctl ]]; then printf '%s\n' "$dir"; return 0; fi
    done < <(compgen -G '/usr/lib/postgresql/*/bin' | sort -rV)
    if command -v pg_ctl >/dev/null 2>&1; then
        dirname "$(command -v pg_ctl)"; return 0
    fi
    return 1
}

# PostgreSQL tools refuse to run as root; act as the cluster's owner instead.
pick_user() {
    local owner
    owner=$(stat -c %U "$PGDATA_DIR")
    if ((EUID == 0)) && [[ $owner != root ]]; then RUN_AS=$owner; fi
}

run_pg() {
    if [[ -z $RUN_AS ]]; then
        "$@"
    elif command -v runuser >/dev/null 2>&1; then
        runuser -u "$RUN_AS" -- "$@"
    else
        su "$RUN_AS" -s /bin/bash -c "$(printf '%q ' "$@")"
    fi
}

# pg-start.sh puts the socket in /tmp when STATE_DIR is too long; that dir is
# outside STATE_DIR, so remove it here. rmdir only: never delete files.
remove_tmp_socket_dir() {
    local marker=$STATE_DIR/tmp_socket_dir dir
    [[ -f $marker ]] || return 0
    dir=$(<"$marker")
    if [[ -d $dir ]] && ! rmdir -- "$dir" 2>/dev/null; then
        log "warning: could not remove socket dir $dir (not empty?)"
    fi
}

stop_server() {
    # pg_ctl status: 0 = running, 3 = not running, 4 = no/invalid data dir.
    local status=0
    run_pg "$BINDIR/pg_ctl" -D "$PGDATA_DIR" status >/dev/null 2>&1 || status=$?
    if ((status != 0)); then
        log "server in $PGDATA_DIR is not running"
        return 0
    fi
    log "stopping server in $PGDATA_DIR"
    if run_pg "$BINDIR/pg_ctl" -D "$PGDATA_DIR" -m fast -w -t "$STOP_TIMEOUT" -s stop >&2; then
        return 0
    fi
    # It may have exited on its own between the status check and the stop.
    status=0
    run_pg "$BINDIR/pg_ctl" -D "$PGDATA_DIR" status >/dev/null 2>&1 || status=$?
    if ((status != 0)); then return 0; fi
    if [[ -f $STATE_DIR/postgres.log ]]; then tail -n 20 "$STATE_DIR/postgres.log" >&2 || true; fi
    die "could not stop the server in $PGDATA_DIR"
}

# A standby's slot on its primary: dropped once the standby's WAL sender has gone
# (a slot in use cannot be dropped). A primary that is gone took the slot with it.
drop_replication_slot() {
    local slot primary port psql
    [[ -r $STATE_DIR/replication_slot && -r $STATE_DIR/primary_dir ]] || return 0
    slot=$(<"$STATE_DIR/replication_slot")
    primary=$(<"$STATE_DIR/primary_dir")
    [[ -r $primary/port && -f $primary/pgdata/postmaster.pid ]] || return 0
    port=$(<"$primary/port")
    psql=$BINDIR/psql
    [[ -x $psql ]] || { log "warning: no psql in $BINDIR; slot $slot stays on $primary"; return 0; }
    local attempt
    for ((attempt = 0; attempt < 50; attempt++)); do
        # Prints 'gone' once the slot no longer exists (dropped now or before).
        case $("$psql" -X -q -A -t -h 127.0.0.1 -p "$port" -U postgres -d postgres -c \
                "SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = '$slot') THEN 'gone'
                             WHEN EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = '$slot' AND NOT active)
                             THEN (SELECT 'gone' FROM pg_drop_replication_slot('$slot')) END" 2>/dev/null) in
            gone) return 0 ;;
        esac
        sleep 0.1
    done
    log "warning: could not drop replication slot $slot on 127.0.0.1:$port"
}

main() {
    [[ $# -eq 1 && -n $1 ]] || usage
    if [[ ! -d $1 ]]; then
        log "$1 does not exist; nothing to stop"
        return 0
    fi
    STATE_DIR=$(cd -- "$1" && pwd -P)
    PGDATA_DIR=$STATE_DIR/pgdata
    # The server user may not be allowed into the caller's cwd (e.g. /root).
    cd "$STATE_DIR"
    if [[ ! -f $PGDATA_DIR/postmaster.pid ]]; then
        log "no server running in $STATE_DIR"
        if BINDIR=$(find_bindir); then drop_replication_slot; fi
        remove_tmp_socket_dir
        return 0
    fi
    BINDIR=$(find_bindir) || die "pg_ctl not found (set PG_BINDIR to the PostgreSQL bin directory)"
    pick_user
    stop_server
    drop_replication_slot
    remove_tmp_socket_dir
}

main "$@"
