# shellcheck shell=bash
# (j) What the relay's wake-up costs the CRM's other writers of crm.outbox: pgbench,
# NOTIFY_CLIENTS clients inserting another producer's rows (type
# 'pin.crm.booking-created') with durable commits, while a relay-like session LISTENs on
# crm_outbox, under each of three triggers:
#
#   0.1.0  migration 6's statement trigger: every inserting transaction NOTIFYs, and a
#          transaction with a pending notification takes, at its commit, a lock that
#          every other notifying commit waits for until its WAL flush is done
#   013    migration 13's row trigger for the job's own type: these inserts never NOTIFY
#   none   no trigger at all: what the CRM's writers do without the job installed
#
# Sourced by scripts/bench.sh (BENCH_ONLY=notify selects it; it needs no broker and no
# binary: BENCH_BIN=/bin/true skips the release build). It uses bench.sh's admin, sql,
# copy, progress, ratio, verdict and table. The server is switched to durable commits
# for this part (ALTER SYSTEM: fsync, synchronous_commit, full_page_writes on, which
# needs a superuser; scripts/pg-start.sh runs without them) and switched back after.
#
# Environment (optional): BENCH_NOTIFY_RUNS=3 rounds (each runs the three triggers in
# turn), BENCH_NOTIFY_SECONDS=10 per pgbench run.

NOTIFY_CLIENTS=32
NOTIFY_RUNS=${BENCH_NOTIFY_RUNS:-3}
NOTIFY_SECONDS=${BENCH_NOTIFY_SECONDS:-10}
NOTIFY_TRIGGERS=(0.1.0 013 none)

# notify_durable on|reset — durable commits for this part, or the server's own settings.
notify_durable() {
    local s
    for s in fsync synchronous_commit full_page_writes; do
        if [[ $1 == on ]]; then admin -c "ALTER SYSTEM SET $s = on"; else admin -c "ALTER SYSTEM RESET $s"; fi
    done
    admin -c "SELECT pg_reload_conf()" >/dev/null
}

# notify_trigger DB 0.1.0|013|none — the outbox's NOTIFY trigger as that release has it.
# The template is migrated through 013; 0.1.0's trigger is migration 6's statement.
notify_trigger() {
    case $2 in
        0.1.0) sql "$1" -f sql/006_outbox_notify.sql >/dev/null ;;
        013) sql "$1" -f sql/013_outbox_notify_own_rows.sql >/dev/null ;;
        none) sql "$1" -c "DROP TRIGGER IF EXISTS outbox_notify ON crm.outbox" >/dev/null ;;
    esac
}

# notify_listen — starts the relay-like session on bench_run: LISTEN, then a statement
# every 50 ms, after each of which psql takes (and prints) the notifications that came;
# returns once it listens. Its pid goes in RELAY_PID (bench.sh's trap ends it).
notify_listen() {
    ( echo "LISTEN crm_outbox;"; while :; do echo "SELECT 1;"; sleep 0.05; done ) \
        | PGAPPNAME=bench-listener psql -X -q -At -d "$(db_url bench_run)" >"$WORK/notify-listener" 2>&1 &
    RELAY_PID=$!
    local i
    for ((i = 0; i < 100; i++)); do
        [[ $(sql bench_run -c "SELECT count(*) FROM pg_stat_activity
                                WHERE application_name = 'bench-listener' AND query <> ''") == 1 ]] && return 0
        sleep 0.1
    done
    die "the listening session did not start"
}

notify_unlisten() {
    kill "$RELAY_PID" 2>/dev/null || true
    wait "$RELAY_PID" 2>/dev/null || true
    RELAY_PID=""
}

bench_notify() {
    local i t out tps lat notes
    notify_durable on
    admin -c "DROP DATABASE IF EXISTS bench_notify" -c "CREATE DATABASE bench_notify"
    # Each statement on its own, as booking-expire migrate sends them (psql without -1).
    for f in sql/*.sql; do sql bench_notify -f "$f" >/dev/null; done
    cat >"$WORK/notify.pgbench" <<'EOF'
INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload)
VALUES (gen_random_uuid(), 'Booking', gen_random_uuid()::text, 'pin.crm.booking-created',
        'pin.crm.booking-created.v1', '{"BookingId": "another producer", "Status": "Reserved"}');
EOF
    progress "(j) notify: $NOTIFY_RUNS × (${NOTIFY_TRIGGERS[*]}), pgbench $NOTIFY_CLIENTS clients × ${NOTIFY_SECONDS}s, durable commits, a session listening"
    for ((i = 1; i <= NOTIFY_RUNS; i++)); do
        for t in "${NOTIFY_TRIGGERS[@]}"; do
            copy bench_notify
            notify_trigger bench_run "$t"
            notify_listen
            out=$(pgbench -n -M prepared -c "$NOTIFY_CLIENTS" -j 2 -T "$NOTIFY_SECONDS" \
                      -f "$WORK/notify.pgbench" "$(db_url bench_run)" 2>&1) \
                || { echo "$out" >&2; die "pgbench failed ($t)"; }
            sleep 0.2 # the last notifications taken
            notify_unlisten
            tps=$(awk '/^tps = / { printf "%.0f", $3; exit }' <<<"$out")
            lat=$(awk '/^latency average = / { printf "%.2f", $4; exit }' <<<"$out")
            notes=$(grep -c 'Asynchronous notification' "$WORK/notify-listener" || true)
            [[ -n $tps && -n $lat ]] || { echo "$out" >&2; die "cannot read pgbench's output ($t)"; }
            echo "$tps" >>"$WORK/res/notify_$t.tps"
            echo "$lat" >>"$WORK/res/notify_$t.lat"
            echo "$notes" >>"$WORK/res/notify_$t.notes"
            progress "notify run $i, trigger $t: $tps commits/s, $lat ms, $notes notifications"
        done
    done
    local durable
    durable=$(sql bench_run -c "SELECT string_agg(name || '=' || setting, ', ' ORDER BY name) FROM pg_settings
                                 WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes')")
    notify_durable reset
    local none own old
    none=$(summary notify_none.tps median); own=$(summary notify_013.tps median); old=$(summary notify_0.1.0.tps median)
    {
        echo "(j) Other producers' inserts into crm.outbox (type pin.crm.booking-created, one row per"
        echo "    transaction): pgbench, $NOTIFY_CLIENTS clients, ${NOTIFY_SECONDS} s per run, durable commits"
        echo "    ($durable),"
        echo "    a session LISTENing on crm_outbox (notifications: what it received); median"
        echo "    [min–max] of $NOTIFY_RUNS runs per trigger, interleaved"
        echo
        printf '%-19s %-22s %-20s %-14s %s\n' "trigger" "commits/s" "latency avg ms" "notifications" "vs none"
        for t in "${NOTIFY_TRIGGERS[@]}"; do
            printf '%-19s %-22s %-20s %-14s %s\n' \
                "$t$([[ $t == 0.1.0 ]] && echo ' (statement)')$([[ $t == 013 ]] && echo ' (own rows)')" \
                "$(summary "notify_$t.tps" median) [$(summary "notify_$t.tps" min)-$(summary "notify_$t.tps" max)]" \
                "$(summary "notify_$t.lat" median) [$(summary "notify_$t.lat" min)-$(summary "notify_$t.lat" max)]" \
                "$(summary "notify_$t.notes" median)" \
                "$(ratio "$(summary "notify_$t.tps" median)" "$none")"
        done
        echo
        echo "013 / none: $(ratio "$own" "$none"), target ≥ 0.90: $(verdict "$(ratio "$own" "$none")" '>=' 0.90);" \
             "0.1.0 / none: $(ratio "$old" "$none"); 013 / 0.1.0: $(ratio "$own" "$old")"
        echo
    } | table
}
