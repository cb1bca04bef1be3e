#!/usr/bin/env bash
# Apply the repository's SQL files to a database.
#
# Usage: scripts/migrate.sh DATABASE_URL
#
# Every sql/*.sql file is applied in lexical (byte) order, each in its own
# transaction, stopping at the first error. There is no bookkeeping of what
# was already applied: run it against a fresh database, or keep the SQL
# idempotent.
#
# Environment (optional):
#   SQL_DIR   directory of .sql files (default: sql/ next to this script's dir)
set -euo pipefail

log() { printf 'migrate: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    printf 'usage: %s DATABASE_URL\n' "$(basename "$0")" >&2
    exit 2
}

default_sql_dir() {
    local script_dir
    script_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
    printf '%s\n' "$script_dir/../sql"
}

# Prints the psql to use, installing the client as root if needed.
find_psql() {
    if command -v psql >/dev/null 2>&1; then command -v psql; return 0; fi
    local dir
    while IFS= read -r dir; do
        if [[ -x $dir/psql ]]; then printf '%s\n' "$dir/psql"; return 0; fi
    done < <(compgen -G '/usr/lib/postgresql/*/bin' | sort -rV)

    ((EUID == 0)) || die "psql not found; install the PostgreSQL client (e.g. 'sudo apt-get install postgresql-client')"
    command -v apt-get >/dev/null 2>&1 || die "psql not found and apt-get is unavailable; install the PostgreSQL client"
    # Same lock as pg-start.sh so parallel callers do not fight over dpkg.
    exec 9>/tmp/.booking-expire-pg-install.lock
    flock -w 900 9 || die "timed out waiting for another PostgreSQL install"
    if ! command -v psql >/dev/null 2>&1; then
        local install_log
        install_log=$(mktemp /tmp/psql-install.XXXXXX)
        log "psql not found; installing postgresql-client via apt-get"
        if ! { apt-get -q update \
                && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
                    -o DPkg::Lock::Timeout=300 postgresql-client; } >"$install_log" 2>&1; then
            tail -n 40 "$install_log" >&2 || true
            die "apt-get install postgresql-client failed (full log: $install_log)"
        fi
        rm -f -- "$install_log"
    fi
    exec 9>&-
    command -v psql || die "postgresql-client installed but psql still not on PATH"
}

# Prints the .sql files NUL-separated, in byte order whatever the locale.
list_sql_files() {
    local files=()
    shopt -s nullglob
    files=("$1"/*.sql)
    shopt -u nullglob
    ((${#files[@]} > 0)) || return 0
    printf '%s\0' "${files[@]}" | LC_ALL=C sort -z
}

main() {
    [[ $# -eq 1 && -n $1 ]] || usage
    local url=$1 sql_dir psql file count=0
    sql_dir=${SQL_DIR:-$(default_sql_dir)}
    [[ -d $sql_dir ]] || die "SQL directory not found: $sql_dir"
    psql=$(find_psql)

    # Files are UTF-8 whatever the caller's locale; NOTICEs such as
    # "already exists, skipping" would only drown the per-file lines.
    export PGCLIENTENCODING=${PGCLIENTENCODING:-UTF8}
    export PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=warning"

    # Fail early with a clear message rather than blaming the first file.
    "$psql" -X -q -d "$url" -c 'select 1' >/dev/null \
        || die "cannot connect to the database (is the server running? URL: $url)"

    while IFS= read -r -d '' file; do
        if ! "$psql" -X -q -v ON_ERROR_STOP=1 --single-transaction \
                -d "$url" -f "$file" >/dev/null; then
            die "failed applying $file (transaction rolled back; earlier files stay applied)"
        fi
        log "applied $(basename -- "$file")"
        count=$((count + 1))
    done < <(list_sql_files "$sql_dir")

    if ((count == 0)); then log "no .sql files in $sql_dir; nothing to do"; fi
}

main "$@"
