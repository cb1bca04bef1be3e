# shellcheck shell=bash
# (k) Migration at scale, a part of scripts/bench.sh (BENCH_ONLY=migrate), sourced by it:
# it uses bench.sh's helpers (admin, sql, db_url, copy, progress, die, table, $WORK,
# $BIN).
#
# The day the job is installed on the CRM's database: crm.bookings already holds
# BENCH_MIGRATE_ROWS bookings (only the CRM's table, made with the DDL of the previous
# release's sql/001, none of the job's indexes), a CRM writer updates one random
# booking every 10 ms through the whole migration (pgbench -R 100, per-transaction log),
# and the migration runs:
#
#   - 0.1.0's way: psql --single-transaction per file of the previous release's sql/
#     (scripts/release-before.sh builds or finds it), as its scripts/migrate.sh did;
#   - `booking-expire migrate` of the binary measured ($BIN), when it has the command.
#
# Each run gets a fresh copy of the same data; the contenders alternate. The writer's
# latency of an update is pgbench's: from its scheduled start to its commit (so an
# update queued behind a blocked one counts its wait too). Reported over the updates
# that overlapped the migration: p99 and the worst, the target being worst < 250 ms.
#
# Environment (optional):
#   BENCH_MIGRATE_ROWS=3000000   bookings in crm.bookings
#   BENCH_MIGRATE_RUNS=3         runs per contender

MIGRATE_ROWS=${BENCH_MIGRATE_ROWS:-3000000}
MIGRATE_RUNS=${BENCH_MIGRATE_RUNS:-3}
MIGRATE_WRITERS=4   # pgbench sessions sharing the 100 updates/s, as a CRM's pool would
MIGRATE_TARGET_MS=250

# The CRM's crm.bookings as a release's sql/001 declares it: its CREATE SCHEMA and
# CREATE TABLE statements, nothing else (no index of the job).
migrate_crm_ddl() {
    awk '/^CREATE SCHEMA/ { print; next }
         /^CREATE TABLE/ { on = 1 }
         on { print } on && /^\);/ { exit }' "$1"
}

migrate_template() {
    local ddl=$1 t0=$SECONDS from to chunk=1000000
    admin -c "DROP DATABASE IF EXISTS bench_migrate" -c "CREATE DATABASE bench_migrate"
    sql bench_migrate <<<"$ddl"
    # A CRM's years: mostly finished bookings, a tenth still active with deadlines ahead.
    for ((from = 1; from <= MIGRATE_ROWS; from += chunk)); do
        to=$((from + chunk - 1 < MIGRATE_ROWS ? from + chunk - 1 : MIGRATE_ROWS))
        sql bench_migrate -c "
            INSERT INTO crm.bookings
            SELECT md5('booking' || i)::uuid, md5('tenant' || i % 50)::uuid,
                   md5('deal' || i / 2)::uuid, md5('object' || i % 200000)::uuid,
                   s.status,
                   CASE WHEN s.active THEN now() + interval '1 day' + (i % 10000) * interval '1 minute'
                        ELSE now() - interval '900 days' + i * interval '25 seconds' END,
                   CASE WHEN s.status = 'Booked' THEN now() + interval '3 days' + (i % 10000) * interval '1 minute'
                        WHEN s.active THEN NULL
                        ELSE now() - interval '890 days' + i * interval '25 seconds' END,
                   CASE WHEN s.status LIKE '%Expired' THEN now() - interval '890 days' + i * interval '25 seconds' END,
                   now() - interval '910 days' + i * interval '25 seconds',
                   now() - interval '890 days' + i * interval '25 seconds',
                   CASE WHEN s.active THEN 1 ELSE 3 END
              FROM generate_series($from, $to) i
             CROSS JOIN LATERAL (
                   SELECT CASE WHEN i % 100 < 55 THEN 'Completed'
                               WHEN i % 100 < 75 THEN 'Cancelled'
                               WHEN i % 100 < 83 THEN 'ReserveExpired'
                               WHEN i % 100 < 90 THEN 'BookingExpired'
                               WHEN i % 100 < 94 THEN 'Reserved'
                               WHEN i % 100 < 96 THEN 'AwaitingPayment'
                               ELSE 'Booked' END AS status,
                          i % 100 >= 90 AS active) s" >/dev/null
    done
    sql bench_migrate -c "VACUUM (FREEZE, ANALYZE) crm.bookings"
    progress "template bench_migrate ($MIGRATE_ROWS bookings, $(sql bench_migrate -c \
        "SELECT pg_size_pretty(pg_total_relation_size('crm.bookings'))")) in $((SECONDS - t0))s"
}

# 0.1.0's way: each file of the directory in one transaction, in byte order.
migrate_old_way() {
    local url=$1 dir=$2 file
    while IFS= read -r file; do
        psql -X -q -v ON_ERROR_STOP=1 --single-transaction -d "$url" -f "$file" >/dev/null || return 1
    done < <(find "$dir" -maxdepth 1 -name '*.sql' | LC_ALL=C sort)
}

# migrate_run KEY CMD… — one run of a contender on a fresh copy with the writer
# running; appends "migration_ms writes p99_ms worst_ms idle_worst_ms" to $WORK/res/KEY.
migrate_run() {
    local key=$1; shift
    local url writer t0 t1
    copy bench_migrate
    url=$(db_url bench_run)
    rm -f "$WORK"/writer.*
    pgbench -n -f "$WORK/crm-writer.sql" -D rows="$MIGRATE_ROWS" -c "$MIGRATE_WRITERS" -j 1 -R 100 \
        -T 3600 -l --log-prefix="$WORK/writer" "$url" >"$WORK/writer.out" 2>&1 &
    writer=$!
    sleep 3 # connected and at its rate: the "idle" part of the log
    kill -0 "$writer" 2>/dev/null || { cat "$WORK/writer.out" >&2; die "the writer (pgbench) exited"; }
    t0=$EPOCHREALTIME
    if ! "$@" >"$WORK/out" 2>"$WORK/err"; then
        tail -n 20 "$WORK/err" >&2
        kill "$writer" 2>/dev/null || true
        die "$key: '$*' failed"
    fi
    t1=$EPOCHREALTIME
    sleep 1
    # pgbench writes its log when its sessions end: end them from the server's side.
    admin -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
               WHERE datname = 'bench_run' AND application_name = 'pgbench'" >/dev/null
    wait "$writer" 2>/dev/null || true
    [[ -n $(find "$WORK" -maxdepth 1 -name 'writer.[0-9]*') ]] \
        || { cat "$WORK/writer.out" >&2; die "$key: pgbench wrote no log"; }
    [[ $(sql bench_run -c "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                             WHERE c.relname IN ('ix_bookings_reserve_expires_at', 'ix_bookings_booking_expires_at')
                               AND i.indisvalid") == 2 ]] || die "$key: the job's indexes on crm.bookings are missing"
    # pgbench's log: client, transaction, latency µs (from the scheduled start, with -R),
    # script, end (epoch s, µs), schedule lag µs.
    find "$WORK" -maxdepth 1 -name 'writer.[0-9]*' -exec cat {} + | awk -v t0="${t0//[,]/.}" -v t1="${t1//[,]/.}" '
        { end = $5 + $6 / 1e6; start = end - $3 / 1e6; ms = $3 / 1000
          if (end >= t0 && start <= t1) print "in", ms; else if (end < t0) print "idle", ms }' >"$WORK/writer.lat"
    local n p99 worst idle
    n=$(grep -c '^in ' "$WORK/writer.lat" || true)
    [[ $n -gt 0 ]] || die "$key: no update overlapped the migration"
    p99=$(awk '$1 == "in" { print $2 }' "$WORK/writer.lat" | sort -n \
        | awk '{ v[NR] = $1 } END { i = int(NR * 0.99 + 0.999); if (i < 1) i = 1; printf "%.1f", v[i] }')
    worst=$(awk '$1 == "in" && $2 > m { m = $2 } END { printf "%.1f", m }' "$WORK/writer.lat")
    idle=$(awk '$1 == "idle" && $2 > m { m = $2 } END { printf "%.1f", m }' "$WORK/writer.lat")
    echo "$(awk -v a="${t0//[,]/.}" -v b="${t1//[,]/.}" 'BEGIN { printf "%.0f", (b - a) * 1000 }') $n $p99 $worst $idle" \
        >>"$WORK/res/$key"
    progress "$key: migration $(tail -n 1 "$WORK/res/$key" | awk '{ printf "%.1f s, %d updates meanwhile, p99 %s ms, worst %s ms", $1 / 1000, $2, $3, $4 }')"
}

# col KEY N — median [min–max] of column N of a contender's runs.
migrate_col() {
    awk -v c="$2" '{ print $c }' "$WORK/res/$1" | sort -n | awk '{ v[NR] = $1 }
        END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
              printf "%s [%s-%s]", m, v[1], v[NR] }'
}

bench_migrate() {
    local previous release_sql i who has_runner=1 contenders=(old)
    command -v pgbench >/dev/null || die "pgbench not found (Debian: postgresql-client)"
    progress "migrate: the previous release (scripts/release-before.sh)"
    previous=$(scripts/release-before.sh) || die "scripts/release-before.sh failed"
    release_sql=$(dirname "$previous")/sql
    if "$BIN" migrate --help >/dev/null 2>&1; then contenders+=(runner); else has_runner=0; fi
    cat >"$WORK/crm-writer.sql" <<'EOF'
\set i random(1, :rows)
UPDATE crm.bookings SET updated_at = now(), version = version + 1 WHERE id = md5('booking' || :i)::uuid;
EOF
    migrate_template "$(migrate_crm_ddl "$release_sql/001_bookings.sql")"
    : >"$WORK/res/migrate_old"; : >"$WORK/res/migrate_runner"
    progress "migrate: $MIGRATE_RUNS × (${contenders[*]}) beside a writer at 100 updates/s"
    for ((i = 1; i <= MIGRATE_RUNS; i++)); do
        for who in "${contenders[@]}"; do
            if [[ $who == old ]]; then
                migrate_run migrate_old migrate_old_way "$(db_url bench_run)" "$release_sql"
            else
                migrate_run migrate_runner env DATABASE_URL="$(db_url bench_run)" "$BIN" migrate
            fi
        done
    done
    local fmt='%-44s %-22s %-10s %-24s %-24s %s\n' key label worst
    {
        echo "(k) Migration at scale: crm.bookings of $MIGRATE_ROWS CRM bookings (only the CRM's table, as before"
        echo "    the job is installed: 90 % finished, 10 % active), a CRM writer updating one random booking"
        echo "    every 10 ms ($MIGRATE_WRITERS pgbench sessions, -R 100) through the whole migration; each"
        echo "    update's latency from its scheduled start to its commit, over the updates that overlapped"
        echo "    the migration; median [min–max] of $MIGRATE_RUNS runs on fresh copies"
        echo
        # shellcheck disable=SC2059 # the format is ours
        printf "$fmt" "contender" "migration s" "updates" "p99 ms" "worst ms" "worst < $MIGRATE_TARGET_MS ms"
        for key in "migrate_old:0.1.0: psql --single-transaction per file" "migrate_runner:booking-expire migrate"; do
            [[ -s $WORK/res/${key%%:*} ]] || continue
            label=${key#*:}
            worst=$(awk '{ print $4 }' "$WORK/res/${key%%:*}" | sort -n | tail -n 1)
            # shellcheck disable=SC2059
            printf "$fmt" "$label" \
                "$(awk '{ print $1 / 1000 }' "$WORK/res/${key%%:*}" | sort -n | awk '{ v[NR] = $1 }
                    END { printf "%.1f [%.1f-%.1f]", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, v[1], v[NR] }')" \
                "$(awk '{ print $2 }' "$WORK/res/${key%%:*}" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')" \
                "$(migrate_col "${key%%:*}" 3)" "$(migrate_col "${key%%:*}" 4)" \
                "$(verdict "$worst" '<' "$MIGRATE_TARGET_MS") (worst of all runs $worst)"
        done
        echo
        echo "the writer alone (the 3 s before each migration): worst $(cat "$WORK"/res/migrate_old "$WORK"/res/migrate_runner \
            | awk '$5 > m { m = $5 } END { print m + 0 }') ms"
        [[ $has_runner == 1 ]] || echo "booking-expire migrate: not measured ($BIN has no migrate command)"
        echo
    } | table
}
