#!/usr/bin/env bash
# Benchmarks booking-expire against the best alternatives: the same cycle as
# set-based SQL run by psql (what a DBA would schedule with pg_cron), a `psql | kcat`
# pipeline and Kafka's own producer perf tool for the relay. Not part of CI's pass/fail.
#
# Usage: scripts/bench.sh                     # the default parts (all but footprint)
#        BENCH_ONLY="cycle rss" scripts/bench.sh
#
# Tables go to stdout, progress to stderr. Every contender runs on its own copy of the
# same data (CREATE DATABASE … TEMPLATE), runs are interleaved (ours, peer, ours, peer
# …), and the tables show medians with the range. docs/performance.md has the latest
# figures and what they mean.
#
# Environment (all optional):
#   BENCH_RUNS=7                runs per contender of the cycle bench (a, b)
#   BENCH_DRAIN_RUNS=5          runs per contender of the drain and relay benches (c, d)
#   BENCH_HISTORY="10000 100000 1000000"   historical rows of the cycle bench (b)
#   BENCH_CATCHUP_OVERDUE=500000  overdue rows per phase of the catch-up bench (f), with
#                               1M historical rows besides
#   BENCH_SCALEOUT_OVERDUE=500000  overdue rows per phase of the scale-out bench, with
#                               1M historical rows besides
#   BENCH_SCALEOUT_PROCS="1 2 4"   how many run-once processes drain it at once, per run
#   BENCH_FOLLOW_RUNS=3         runs of the follow-burst bench (i)
#   BENCH_NOTIFY_RUNS=3, BENCH_NOTIFY_SECONDS=10  rounds and pgbench seconds of the notify
#                               bench (j): scripts/bench/notify.sh
#   BENCH_MIGRATE_ROWS, BENCH_MIGRATE_RUNS   the migration bench (k): scripts/bench/migrate.sh
#   BENCH_ONLY="cycle drain relay relay-stale latency rss catchup scaleout follow-burst notify migrate topic-wait"   which parts to run
#                               (the default); besides them: footprint (m), the relay's
#                               footprint on the database: scripts/bench/footprint.sh
#   BENCH_FOOTPRINT_EVENTS, BENCH_FOOTPRINT_RUNS, BENCH_FOOTPRINT_BACKLOG,
#   BENCH_BASELINE_BIN, BENCH_BASELINE_COMMIT   the footprint part (m), see its file
#   BENCH_BIN                   the binary to measure (default: cargo build --release)
#   BENCH_RELAY_BASELINE        another build's binary whose relay-outbox (d) runs too,
#                               interleaved with ours on the same data (before/after)
#   DATABASE_URL, KAFKA_BROKERS use these servers instead of throwaway ones; the bench
#                               creates and drops databases named bench_* there, and
#                               creates topic pin.crm.booking-expired.v1 if missing
set -euo pipefail

[[ -z ${BENCH_BIN:-} ]] || BENCH_BIN=$(realpath "$BENCH_BIN")
[[ -z ${BENCH_BASELINE_BIN:-} ]] || BENCH_BASELINE_BIN=$(realpath "$BENCH_BASELINE_BIN")
[[ -z ${CARGO_TARGET_DIR:-} ]] || CARGO_TARGET_DIR=$(realpath -m "$CARGO_TARGET_DIR")
[[ -z ${BENCH_RELAY_BASELINE:-} ]] || BENCH_RELAY_BASELINE=$(realpath "$BENCH_RELAY_BASELINE")
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

RUNS=${BENCH_RUNS:-7}
DRAIN_RUNS=${BENCH_DRAIN_RUNS:-5}
HISTORY=${BENCH_HISTORY:-10000 100000 1000000}
ONLY=${BENCH_ONLY:-cycle drain relay relay-stale latency rss catchup scaleout follow-burst notify migrate topic-wait}
CATCHUP_OVERDUE=${BENCH_CATCHUP_OVERDUE:-500000}
CATCHUP_HISTORY=1000000
SCALEOUT_OVERDUE=${BENCH_SCALEOUT_OVERDUE:-500000}
SCALEOUT_PROCS=${BENCH_SCALEOUT_PROCS:-1 2 4}
ACTIVE=10000          # active bookings with future deadlines, beside the history
BATCH=200             # rows per batch and phase, ours and the peer's
DRAIN_OVERDUE=50000   # overdue rows per phase for the drain bench (100k in all)
RELAY_ROWS=100000     # pending outbox rows for the relay bench
LATENCY_CYCLES=8      # run-once cycles of the latency bench, 25 + 25 events each
FOLLOW_BURST=100000   # overdue bookings run-once expires while relay-outbox --follows (i)
FOLLOW_RUNS=${BENCH_FOLLOW_RUNS:-3}
TOPIC=pin.crm.booking-expired.v1

progress() { printf '[bench %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { printf '[bench] error: %s\n' "$*" >&2; exit 1; }
wants() { [[ " $ONLY " == *" $1 "* ]]; }

WORK=$(mktemp -d)
RELAY_PID=""
cleanup() {
    local rc=$?
    [[ -z $RELAY_PID ]] || kill "$RELAY_PID" 2>/dev/null || true
    if [[ -n ${DATABASE_URL:-} ]]; then
        for db in $(psql -X -At -d "$DATABASE_URL" -c \
                "SELECT datname FROM pg_database WHERE datname LIKE 'bench\_%'" 2>/dev/null); do
            psql -X -q -d "$DATABASE_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
        done
    fi
    stop_services
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT

# ---------------------------------------------------------------- setup

STARTED=$SECONDS
ensure_build_deps
ensure_apt_packages time kcat
if [[ -n ${BENCH_BIN:-} ]]; then
    BIN=$BENCH_BIN
else
    progress "cargo build --release"
    cargo build --release --locked --quiet
    BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/booking-expire
fi
[[ -x $BIN ]] || die "no binary at $BIN"

start_postgres
# The broker with a full JIT (kafka-start.sh's default stops at C1 to start faster).
if [[ -z ${KAFKA_BROKERS:-} ]]; then export KAFKA_JVM_OPTS=${KAFKA_JVM_OPTS:--XX:+UseSerialGC}; fi
if wants relay || wants relay-stale || wants latency || wants follow-burst || wants topic-wait \
        || wants footprint; then start_kafka; fi
export PGOPTIONS="-c client_min_messages=warning"

# URL of database $1 on the server of DATABASE_URL (as tests/it/common does).
db_url() {
    local base=${DATABASE_URL%%\?*} query=""
    [[ $DATABASE_URL != *\?* ]] || query="?${DATABASE_URL#*\?}"
    local scheme=${base%%://*} rest=${base#*://}
    printf '%s://%s/%s%s\n' "$scheme" "${rest%%/*}" "$1" "$query"
}
admin() { psql -X -q -v ON_ERROR_STOP=1 -d "$DATABASE_URL" "$@"; }
sql() { local db=$1; shift; psql -X -q -At -v ON_ERROR_STOP=1 -d "$(db_url "$db")" "$@"; }

# template NAME SEED_FILE VAR=VALUE… — a migrated database filled by a seed file, frozen
# and analyzed, to copy for each run.
template() {
    local name=$1 seed=$2; shift 2
    local vars=() v
    for v in "$@"; do vars+=(-v "$v"); done
    local t0=$SECONDS
    admin -c "DROP DATABASE IF EXISTS $name" -c "CREATE DATABASE $name"
    RUST_LOG=warn "$BIN" migrate --database-url "$(db_url "$name")" >/dev/null
    sql "$name" "${vars[@]}" -f "$seed" >/dev/null
    progress "template $name ($*) in $((SECONDS - t0))s"
}

# copy TEMPLATE — a fresh copy named bench_run, with its catalog caches warm (a first
# connection builds them), as a database that a CronJob uses every minute has.
copy() {
    admin -c "DROP DATABASE IF EXISTS bench_run" \
          -c "CREATE DATABASE bench_run TEMPLATE $1 STRATEGY FILE_COPY" \
          -c "CHECKPOINT"
    sql bench_run -c "SELECT 1" >/dev/null
}

# measure KEY CMD… — runs CMD (stdout in $WORK/out, stderr in $WORK/err), records its
# wall time (µs) in $WORK/res/KEY.us, its peak RSS (KiB) in $WORK/res/KEY.rss, and the
# CPU seconds of its processes in $WORK/res/KEY.user and KEY.sys.
mkdir -p "$WORK/res"
measure() {
    local key=$1; shift
    local t0=$EPOCHREALTIME t1
    if ! /usr/bin/time -f '%M %U %S' -o "$WORK/rss" "$@" >"$WORK/out" 2>"$WORK/err"; then
        tail -n 20 "$WORK/err" >&2
        die "$key: '$*' failed"
    fi
    t1=$EPOCHREALTIME
    echo $(( ${t1//[.,]/} - ${t0//[.,]/} )) >>"$WORK/res/$key.us"
    tail -n 1 "$WORK/rss" | awk -v r="$WORK/res/$key" '{ print $1 >>(r ".rss"); print $2 >>(r ".user"); print $3 >>(r ".sys") }'
}

# CPU seconds spent so far by a server's processes, for the CPU split of the relay
# bench: the PostgreSQL of DATABASE_URL (its postmaster with every backend, reaped or
# running) and the broker of KAFKA_BROKERS (its JVM), when they run on this machine;
# empty otherwise.
PG_PID="" BROKER_PID=""
server_pids() {
    local checkpointer port
    checkpointer=$(admin -At -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'" 2>/dev/null || true)
    [[ -n $checkpointer && -r /proc/$checkpointer/stat ]] \
        && PG_PID=$(awk '{ print $4 }' "/proc/$checkpointer/stat")
    port=${KAFKA_BROKERS%%,*}; port=${port##*:}
    BROKER_PID=$(ss -ltnpH "sport = :$port" 2>/dev/null | grep -o 'pid=[0-9]*' | head -n 1 | cut -d= -f2 || true)
}
cpu_s() { # cpu_s PID — user + system seconds of PID, its threads and its children
    [[ -n $1 && -r /proc/$1/stat ]] || { echo ""; return; }
    local ticks c kids=()
    ticks=$(awk '{ print $14 + $15 + $16 + $17 }' "/proc/$1/stat")
    # Each thread's children file holds PIDs separated by spaces.
    read -r -a kids < <(cat /proc/"$1"/task/*/children 2>/dev/null | tr '\n' ' ')
    for c in "${kids[@]}"; do
        ticks=$((ticks + $(awk '{ print $14 + $15 }' "/proc/$c/stat" 2>/dev/null || echo 0)))
    done
    awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", t / hz }'
}
# servers_cpu KEY CMD… — measure KEY CMD…, also recording the CPU seconds the
# PostgreSQL and the broker spent meanwhile in $WORK/res/KEY.pg and KEY.broker.
servers_cpu() {
    local key=$1 pg0 br0
    pg0=$(cpu_s "$PG_PID"); br0=$(cpu_s "$BROKER_PID")
    measure "$@"
    sleep 0.2 # the exited backends reaped
    [[ -z $pg0 ]] || awk -v a="$pg0" -v b="$(cpu_s "$PG_PID")" 'BEGIN { printf "%.2f\n", b - a }' >>"$WORK/res/$key.pg"
    [[ -z $br0 ]] || awk -v a="$br0" -v b="$(cpu_s "$BROKER_PID")" 'BEGIN { printf "%.2f\n", b - a }' >>"$WORK/res/$key.broker"
}

# summary KEY.EXT min|median|max
summary() {
    sort -n "$WORK/res/$1" | awk -v what="$2" '{ v[NR] = $1 }
        END { if (what == "min") print v[1]; else if (what == "max") print v[NR];
              else print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}
ms() { awk -v us="$(summary "$1.us" "${2:-median}")" 'BEGIN { printf "%.1f", us / 1000 }'; }
per_s() { awk -v n="$2" -v us="$(summary "$1.us" "${3:-median}")" 'BEGIN { printf "%.0f", n / (us / 1e6) }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
verdict() { if awk -v v="$1" -v t="$3" "BEGIN { exit !(v $2 t) }"; then echo "met"; else echo "MISSED"; fi; }
mib() { awk -v kb="$(summary "$1.rss" max)" 'BEGIN { printf "%.1f", kb / 1024 }'; }

expect_result() { # expect_result FIELD VALUE — in ours' JSON result on stdout
    grep -q "\"$1\":$2[,}]" "$WORK/out" || die "expected $1=$2, got: $(cat "$WORK/out")"
}
expect_rows() { # expect_rows DB N — outbox, audit and timeline each got N rows
    local got
    got=$(sql "$1" -c "SELECT (SELECT count(*) FROM crm.outbox) || ' ' || (SELECT count(*) FROM crm.booking_audit) || ' ' || (SELECT count(*) FROM crm.deal_timeline)")
    [[ $got == "$2 $2 $2" ]] || die "expected $2 outbox, audit and timeline rows, got $got"
}

RESULTS=$WORK/tables
: >"$RESULTS"
table() { cat >>"$RESULTS"; }

# ---------------------------------------------------------------- (a), (b) one cycle

bench_cycle() {
    local h i who
    for h in $HISTORY; do
        template "bench_cycle_$h" scripts/bench/seed.sql history="$h" active=$ACTIVE overdue=$BATCH
    done
    for h in $HISTORY; do
        progress "cycle, $h historical rows: $RUNS × (run-once, peer)"
        for ((i = 1; i <= RUNS; i++)); do
            for who in ours peer; do
                copy "bench_cycle_$h"
                if [[ $who == ours ]]; then
                    measure "cycle_${h}_ours" env DATABASE_URL="$(db_url bench_run)" "$BIN" run-once --batch-size $BATCH
                    expect_result ReserveExpiredCount $BATCH
                    expect_result BookingExpiredCount $BATCH
                else
                    measure "cycle_${h}_peer" psql -X -q -v batch_size=$BATCH -d "$(db_url bench_run)" -f scripts/bench/peer.sql
                fi
                expect_rows bench_run $((2 * BATCH))
            done
        done
    done
    local first=${HISTORY%% *} last=${HISTORY##* } o p
    {
        echo "(a, b) One cycle: the whole run-once process (start, connect, both phases, $BATCH rows each)"
        echo "       against the peer's psql process (one set-based statement per phase), $ACTIVE active"
        echo "       future bookings besides the history; wall time in ms, median [min–max] of $RUNS runs"
        echo
        printf '%-12s %-22s %-22s %-10s %s\n' "history" "run-once" "peer (psql)" "ours/peer" "target (a) ≤ 1.0"
        for h in $HISTORY; do
            o=$(ms "cycle_${h}_ours"); p=$(ms "cycle_${h}_peer")
            printf '%-12s %-22s %-22s %-10s %s\n' "$h" \
                "$o [$(ms "cycle_${h}_ours" min)-$(ms "cycle_${h}_ours" max)]" \
                "$p [$(ms "cycle_${h}_peer" min)-$(ms "cycle_${h}_peer" max)]" \
                "$(ratio "$o" "$p")" "$(verdict "$(ratio "$o" "$p")" '<=' 1.0)"
        done
        echo
        if [[ $first != "$last" ]]; then
            o=$(ratio "$(ms "cycle_${last}_ours")" "$(ms "cycle_${first}_ours")")
            p=$(ratio "$(ms "cycle_${last}_peer")" "$(ms "cycle_${first}_peer")")
            echo "(b) growth with history, $last vs $first rows: run-once ×$o, peer ×$p;" \
                 "target ≤ 1.2: $(verdict "$o" '<=' 1.2)"
            echo
        fi
    } | table
}

# ---------------------------------------------------------------- (c) drain a backlog

bench_drain() {
    local i who total=$((2 * DRAIN_OVERDUE))
    template bench_drain scripts/bench/seed.sql history=10000 active=$ACTIVE overdue=$DRAIN_OVERDUE
    progress "drain $total overdue rows: $DRAIN_RUNS × (run-once --max-batches 1000, peer loop)"
    for ((i = 1; i <= DRAIN_RUNS; i++)); do
        for who in ours peer; do
            copy bench_drain
            if [[ $who == ours ]]; then
                measure drain_ours env DATABASE_URL="$(db_url bench_run)" "$BIN" run-once \
                    --batch-size $BATCH --max-batches 1000 --deadline 10m
                expect_result ReserveExpiredCount $DRAIN_OVERDUE
                expect_result BookingExpiredCount $DRAIN_OVERDUE
            else
                measure drain_peer psql -X -q -v batch_size=$BATCH -d "$(db_url bench_run)" -f scripts/bench/peer-drain.sql
            fi
            expect_rows bench_run $total
        done
    done
    local o p
    o=$(per_s drain_ours $total); p=$(per_s drain_peer $total)
    {
        echo "(c) Drain: $total overdue bookings, batches of $BATCH, each batch its own transaction;"
        echo "    expiries/s of the whole process, median [slowest–fastest] of $DRAIN_RUNS runs"
        echo
        printf '%-34s %-26s %s\n' "contender" "expiries/s" "s"
        printf '%-34s %-26s %s\n' "run-once --max-batches 1000" \
            "$o [$(per_s drain_ours $total max)-$(per_s drain_ours $total min)]" "$(ms drain_ours | awk '{ printf "%.1f", $1 / 1000 }')"
        printf '%-34s %-26s %s\n' "peer (DO loop, COMMIT per batch)" \
            "$p [$(per_s drain_peer $total max)-$(per_s drain_peer $total min)]" "$(ms drain_peer | awk '{ printf "%.1f", $1 / 1000 }')"
        echo
        echo "ours/peer throughput $(ratio "$o" "$p"); target (c) ≥ 1.0: $(verdict "$(ratio "$o" "$p")" '>=' 1.0)"
        echo
    } | table
}

# ---------------------------------------------------------------- (d) relay

topic_end() { # the sum of the topic's end offsets
    local args=() p
    for p in 0 1 2 3 4 5; do args+=(-t "$TOPIC:$p:-1"); done
    kcat -Q -b "$KAFKA_BROKERS" "${args[@]}" | awk '{ s += $NF } END { print s + 0 }'
}

ensure_topic() {
    # LogAppendTime: a consumer reads when each event reached the topic (latency).
    scripts/kafka-topic.sh "$KAFKA_BROKERS" "$TOPIC" 6 \
        --config message.timestamp.type=LogAppendTime >/dev/null 2>&1 \
        || die "cannot create topic $TOPIC at $KAFKA_BROKERS"
}

# The relay's producer settings, as KafkaProducer::new sets them (librdkafka's defaults
# where it sets none), for Kafka's own ProducerPerformance: acks=all, idempotent,
# 5 ms of lingering, batches of up to 1 MB, no compression, 5 requests in flight per broker.
RELAY_PRODUCER=(acks=all enable.idempotence=true linger.ms=5 batch.size=1000000
                compression.type=none max.in.flight.requests.per.connection=5)

bench_relay() {
    local i before size perf_line p
    ensure_topic
    server_pids
    template bench_outbox scripts/bench/outbox-seed.sql rows=$RELAY_ROWS
    size=$(sql bench_outbox -c "SELECT round(avg(octet_length(payload::text))) FROM crm.outbox")
    # ProducerPerformance sends the relay's payloads (one per line: jsonb's text has no
    # newline), each record one of them.
    sql bench_outbox -c "SELECT payload::text FROM crm.outbox ORDER BY seq" >"$WORK/payloads"
    local props=()
    for p in "${RELAY_PRODUCER[@]}"; do props+=(--command-property "$p"); done
    local select="SELECT aggregateid || '|' || payload::text FROM crm.outbox
                   WHERE published_at IS NULL AND failed_at IS NULL ORDER BY seq"
    progress "relay $RELAY_ROWS pending rows: $DRAIN_RUNS × (relay-outbox, psql | kcat, ProducerPerformance, database floor)"
    : >"$WORK/perf-rates"
    : >"$WORK/relay-ratios"
    for ((i = 1; i <= DRAIN_RUNS; i++)); do
        copy bench_outbox
        before=$(topic_end)
        servers_cpu relay_ours env DATABASE_URL="$(db_url bench_run)" "$BIN" relay-outbox \
            --brokers "$KAFKA_BROKERS" --deadline 10m
        expect_result Published $RELAY_ROWS
        [[ $(( $(topic_end) - before )) -eq $RELAY_ROWS ]] || die "relay-outbox: topic did not grow by $RELAY_ROWS"

        if [[ -n ${BENCH_RELAY_BASELINE:-} ]]; then
            copy bench_outbox
            before=$(topic_end)
            servers_cpu relay_base env DATABASE_URL="$(db_url bench_run)" "$BENCH_RELAY_BASELINE" \
                relay-outbox --brokers "$KAFKA_BROKERS" --deadline 10m
            expect_result Published $RELAY_ROWS
            [[ $(( $(topic_end) - before )) -eq $RELAY_ROWS ]] || die "baseline relay-outbox: topic did not grow by $RELAY_ROWS"
        fi

        copy bench_outbox
        before=$(topic_end)
        # shellcheck disable=SC2016 # the inner bash expands its own arguments
        measure relay_pipe bash -o pipefail -c 'psql -X -At -d "$1" -c "$2" \
            | kcat -P -b "$3" -t "$4" -K "|" -X enable.idempotence=true -X acks=all \
                   -X partitioner=murmur2_random' _ "$(db_url bench_run)" "$select" "$KAFKA_BROKERS" "$TOPIC"
        [[ $(( $(topic_end) - before )) -eq $RELAY_ROWS ]] || die "psql | kcat: topic did not grow by $RELAY_ROWS"

        # (b) the broker's side: Kafka's own producer, the relay's payloads and settings.
        servers_cpu relay_perf env KAFKA_TOOL_OPTS="-Xmx1g" scripts/kafka/run-class.sh \
            org.apache.kafka.tools.ProducerPerformance --bootstrap-server "$KAFKA_BROKERS" \
            --topic "$TOPIC" --num-records $RELAY_ROWS --payload-file "$WORK/payloads" \
            --throughput -1 "${props[@]}"
        cp "$WORK/out" "$WORK/relay-perf.out"
        # (a) what at-least-once costs the database at the least: every pending row read
        # and marked published, each in one statement (the relay does it per batch).
        copy bench_outbox
        # shellcheck disable=SC2016 # the inner bash expands its own arguments
        servers_cpu relay_floor bash -o pipefail -c 'psql -X -At -d "$1" -c "$2" >/dev/null \
            && psql -X -q -d "$1" -c "UPDATE crm.outbox SET published_at = now(), attempts = attempts + 1,
                                             last_error = NULL
                                       WHERE published_at IS NULL AND failed_at IS NULL"' \
            _ "$(db_url bench_run)" "SELECT id, aggregateid, topic, payload::text, headers FROM crm.outbox
                                      WHERE published_at IS NULL AND failed_at IS NULL ORDER BY seq"

        perf_line=$(grep "records sent" "$WORK/relay-perf.out" | tail -n 1)
        [[ $perf_line == "$RELAY_ROWS records sent"* ]] || die "ProducerPerformance: $perf_line"
        awk '{ print $4 }' <<<"$perf_line" >>"$WORK/perf-rates"
        # This run's ratios: the database floor's wall time plus the time ProducerPerformance
        # reports for its sends (JVM start left out), over the relay's whole process; and
        # that time of ProducerPerformance's alone over the relay's.
        awk -v n=$RELAY_ROWS -v rate="$(awk '{ print $4 }' <<<"$perf_line")" \
            -v a="$(tail -n 1 "$WORK/res/relay_floor.us")" -v r="$(tail -n 1 "$WORK/res/relay_ours.us")" \
            'BEGIN { b = n / rate * 1e6; printf "%.0f %.3f %.3f\n", b, (a + b) / r, b / r }' >>"$WORK/relay-ratios"
    done
    awk '{ print $1 }' "$WORK/relay-ratios" >"$WORK/res/relay_sends.us"
    awk '{ print $2 }' "$WORK/relay-ratios" >"$WORK/res/relay_ratio"
    awk '{ print $3 }' "$WORK/relay-ratios" >"$WORK/res/relay_perf_ratio"
    local o p c f r rp
    o=$(per_s relay_ours $RELAY_ROWS); p=$(per_s relay_pipe $RELAY_ROWS)
    c=$(sort -n "$WORK/perf-rates" | awk '{ v[NR] = $1 } END { printf "%.0f", v[int((NR + 1) / 2)] }')
    r=$(summary relay_ratio median); rp=$(summary relay_perf_ratio median)
    s() { awk -v us="$(summary "$1.us" "${2:-median}")" 'BEGIN { printf "%.2f", us / 1e6 }'; }
    cpu() { # cpu KEY EXT — median [min–max] CPU seconds, or "-" when not measured
        [[ -s $WORK/res/$1.$2 ]] || { echo "-"; return; }
        echo "$(summary "$1.$2" median) [$(summary "$1.$2" min)-$(summary "$1.$2" max)]"
    }
    {
        echo "(d) Relay: $RELAY_ROWS pending outbox rows to a 6-partition topic, acks=all, idempotent"
        echo "    producer, murmur2 partitioning; events/s of the whole process, median [slowest–fastest]"
        echo "    of $DRAIN_RUNS runs; payload $size bytes on average"
        echo
        printf '%-50s %s\n' "contender" "events/s"
        printf '%-50s %s\n' "relay-outbox (headers, marks rows published)" \
            "$o [$(per_s relay_ours $RELAY_ROWS max)-$(per_s relay_ours $RELAY_ROWS min)]"
        if [[ -n ${BENCH_RELAY_BASELINE:-} ]]; then
            printf '%-50s %s\n' "relay-outbox, baseline build" \
                "$(per_s relay_base $RELAY_ROWS) [$(per_s relay_base $RELAY_ROWS max)-$(per_s relay_base $RELAY_ROWS min)]"
        fi
        printf '%-50s %s\n' "psql | kcat (no headers, marks nothing)" \
            "$p [$(per_s relay_pipe $RELAY_ROWS max)-$(per_s relay_pipe $RELAY_ROWS min)]"
        printf '%-50s %s\n' "ProducerPerformance, JVM start included" \
            "$(per_s relay_perf $RELAY_ROWS) [$(per_s relay_perf $RELAY_ROWS max)-$(per_s relay_perf $RELAY_ROWS min)]"
        printf '%-50s %s\n' "ProducerPerformance, as it reports (ceiling)" "$c"
        printf '%-50s %s\n' "database floor: read + mark, one statement each" \
            "$(per_s relay_floor $RELAY_ROWS) [$(per_s relay_floor $RELAY_ROWS max)-$(per_s relay_floor $RELAY_ROWS min)]"
        echo
        echo "ours/pipeline $(ratio "$o" "$p"), ours/ceiling $(ratio "$o" "$c");" \
             "target (d) ≥ 0.5 × pipeline: $(verdict "$(ratio "$o" "$p")" '>=' 0.5)"
        f=$(per_s relay_floor $RELAY_ROWS)
        echo "ours/database floor $(ratio "$o" "$f"): target ≥ 0.8 × the floor:" \
             "$(verdict "$(ratio "$o" "$f")" '>=' 0.8)"
        echo
        echo "    The relay against doing its two halves one after the other: (a) the database"
        echo "    floor above (wall time of both psql statements) plus (b) ProducerPerformance"
        echo "    sending the relay's payloads with its producer settings (${RELAY_PRODUCER[*]}),"
        echo "    for the time it reports; per run (a + b) / the relay's wall time, seconds are medians"
        echo
        printf '%-26s %-26s %-26s %s\n' "relay-outbox s" "(a) database floor s" "(b) ProducerPerformance s" "ours/(a+b)"
        printf '%-26s %-26s %-26s %s\n' "$(s relay_ours) [$(s relay_ours min)-$(s relay_ours max)]" \
            "$(s relay_floor) [$(s relay_floor min)-$(s relay_floor max)]" \
            "$(s relay_sends) [$(s relay_sends min)-$(s relay_sends max)]" \
            "$r [$(summary relay_ratio min)-$(summary relay_ratio max)]"
        echo
        echo "ours/(a+b) $r; target ≥ 1.0 (the relay overlaps the database and the broker instead of adding them): $(verdict "$r" '>=' 1.0)"
        echo "ours/(b) $rp [$(summary relay_perf_ratio min)-$(summary relay_perf_ratio max)] (per run (b)'s reported time / the relay's wall time);" \
             "target ≥ 0.45 × ProducerPerformance alone: $(verdict "$rp" '>=' 0.45)"
        if [[ -n ${BENCH_RELAY_BASELINE:-} ]]; then
            echo "ours/baseline build $(ratio "$o" "$(per_s relay_base $RELAY_ROWS)") (events/s, medians)"
        fi
        echo
        echo "    CPU seconds per run, median [min–max]: the measured process (user, system), what"
        echo "    PostgreSQL (every backend) and the broker spent meanwhile, and the medians' sum"
        echo "    (all three contenders' CPU, against 2 × the wall time the machine's two cores allow)"
        echo
        printf '%-28s %-18s %-18s %-18s %-18s %s\n' "run" "user" "system" "PostgreSQL" "broker" "sum"
        local runs=(relay_ours:relay-outbox)
        [[ -z ${BENCH_RELAY_BASELINE:-} ]] || runs+=(relay_base:"relay-outbox, baseline")
        runs+=(relay_floor:"(a) database floor" relay_perf:"(b) ProducerPerformance")
        for key in "${runs[@]}"; do
            local k=${key%%:*} sum=0 e
            for e in user sys pg broker; do
                [[ ! -s $WORK/res/$k.$e ]] || sum=$(awk -v a="$sum" -v b="$(summary "$k.$e" median)" 'BEGIN { printf "%.2f", a + b }')
            done
            printf '%-28s %-18s %-18s %-18s %-18s %s\n' "${key#*:}" "$(cpu "$k" user)" \
                "$(cpu "$k" sys)" "$(cpu "$k" pg)" "$(cpu "$k" broker)" "$sum"
        done
        echo
    } | table
}

# ---------------------------------------------------------------- (d) latency

bench_latency() {
    local i start_ms events=$((LATENCY_CYCLES * 50))
    ensure_topic
    [[ -n $(admin -At -c "SELECT 1 FROM pg_database WHERE datname = 'bench_cycle_10000'") ]] \
        || template bench_cycle_10000 scripts/bench/seed.sql history=10000 active=$ACTIVE overdue=$BATCH
    copy bench_cycle_10000
    progress "latency: relay-outbox --follow, $LATENCY_CYCLES run-once cycles of 25 + 25 expiries, 0.5 s apart"
    # The shipped mode: a relay following the outbox beside the CronJob's run-once.
    DATABASE_URL=$(db_url bench_run) "$BIN" relay-outbox --brokers "$KAFKA_BROKERS" --follow 60s \
        >"$WORK/follow-out" 2>"$WORK/follow-err" &
    RELAY_PID=$!
    sleep 2
    kill -0 "$RELAY_PID" 2>/dev/null || { cat "$WORK/follow-err" >&2; die "relay-outbox --follow exited"; }
    start_ms=$(( ${EPOCHREALTIME//[.,]/} / 1000 ))
    for ((i = 1; i <= LATENCY_CYCLES; i++)); do
        measure latency_cycle env DATABASE_URL="$(db_url bench_run)" "$BIN" run-once --batch-size 25
        sleep 0.5
    done
    # Each event's LogAppendTime (when it reached the topic) and its payload's ExpiredAt
    # (the cycle's AsOf, a little before its commit).
    timeout 60 kcat -C -b "$KAFKA_BROKERS" -t "$TOPIC" -o "s@$start_ms" -c "$events" \
        -q -f '%T\t%s\n' >"$WORK/arrivals" || die "the consumer did not read $events events within 60 s"
    awk '/^VmHWM/ { print $2 }' "/proc/$RELAY_PID/status" >>"$WORK/res/relay_follow.rss"
    kill -TERM "$RELAY_PID" 2>/dev/null || true
    wait "$RELAY_PID" 2>/dev/null || true
    RELAY_PID=""
    local stats
    stats=$(admin -At -F ' ' <<EOF
CREATE TEMP TABLE arrival (appended_ms bigint, payload text);
\copy arrival FROM '$WORK/arrivals'
SELECT count(*),
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY l)),
       round(percentile_cont(0.99) WITHIN GROUP (ORDER BY l)),
       round(max(l))
  FROM (SELECT appended_ms - extract(epoch FROM (payload::jsonb ->> 'ExpiredAt')::timestamptz) * 1000 AS l
          FROM arrival) x;
EOF
)
    local n p50 p99 max
    read -r n p50 p99 max <<<"$stats"
    {
        echo "(d) Latency in the shipped mode: relay-outbox --follow beside $LATENCY_CYCLES run-once cycles"
        echo "    (25 + 25 expiries each, 0.5 s apart); from the cycle's AsOf (before its commit) to the"
        echo "    event's LogAppendTime on the topic, over $n events"
        echo
        echo "p50 ${p50} ms, p99 ${p99} ms, max ${max} ms; target (d) p99 ≤ 2000 ms: $(verdict "$p99" '<=' 2000)"
        echo
    } | table
}

# ---------------------------------------------------------------- (e) peak RSS

bench_rss() {
    local i
    [[ -n $(admin -At -c "SELECT 1 FROM pg_database WHERE datname = 'bench_drain'") ]] \
        || template bench_drain scripts/bench/seed.sql history=10000 active=$ACTIVE overdue=$DRAIN_OVERDUE
    progress "peak RSS of backlog and dry-run on $((2 * DRAIN_OVERDUE)) overdue rows"
    copy bench_drain
    for ((i = 1; i <= 3; i++)); do
        measure rss_backlog env DATABASE_URL="$(db_url bench_run)" "$BIN" backlog --json
        measure rss_dry_run env DATABASE_URL="$(db_url bench_run)" "$BIN" dry-run --as-of now --json
        measure rss_dry_run_all env DATABASE_URL="$(db_url bench_run)" "$BIN" dry-run --as-of now --all --json
    done
    local rows=() key label
    for key in "cycle_${HISTORY##* }_ours:run-once, one cycle (${HISTORY##* } history)" \
               "drain_ours:run-once, drain of $((2 * DRAIN_OVERDUE))" \
               "relay_ours:relay-outbox, $RELAY_ROWS rows" \
               "relay_follow:relay-outbox --follow (latency bench)" \
               "rss_backlog:backlog --json ($((2 * DRAIN_OVERDUE)) overdue)" \
               "rss_dry_run:dry-run --as-of now --json" \
               "rss_dry_run_all:dry-run --all --json ($((2 * DRAIN_OVERDUE)) candidates)"; do
        [[ -s $WORK/res/${key%%:*}.rss ]] && rows+=("$key")
    done
    {
        echo "(e) Peak RSS (max of the runs above), target < 50 MiB"
        echo
        printf '%-52s %-10s %s\n' "subcommand" "MiB" "target"
        for key in "${rows[@]}"; do
            label=${key#*:}
            printf '%-52s %-10s %s\n' "$label" "$(mib "${key%%:*}")" "$(verdict "$(mib "${key%%:*}")" '<' 50)"
        done
        echo
    } | table
}

# ---------------------------------------------------------------- (g) relay, stale statistics

# relay-outbox through a burst on an outbox whose statistics predate it (the state
# after an outage, before autovacuum catches up): the plans must not depend on them.
bench_relay_stale() {
    local i before
    ensure_topic
    template bench_outbox_stale scripts/bench/outbox-seed.sql rows=$RELAY_ROWS stale=1
    progress "relay $RELAY_ROWS pending rows never analyzed: $DRAIN_RUNS × relay-outbox"
    for ((i = 1; i <= DRAIN_RUNS; i++)); do
        copy bench_outbox_stale
        before=$(topic_end)
        measure relay_stale env DATABASE_URL="$(db_url bench_run)" "$BIN" relay-outbox \
            --brokers "$KAFKA_BROKERS" --deadline 10m
        expect_result Published $RELAY_ROWS
        [[ $(( $(topic_end) - before )) -eq $RELAY_ROWS ]] || die "relay-outbox (stale): topic did not grow by $RELAY_ROWS"
        # The same outbox once ANALYZE has seen the burst, interleaved.
        copy bench_outbox_stale
        sql bench_run -c "ANALYZE crm.outbox"
        before=$(topic_end)
        measure relay_analyzed env DATABASE_URL="$(db_url bench_run)" "$BIN" relay-outbox \
            --brokers "$KAFKA_BROKERS" --deadline 10m
        expect_result Published $RELAY_ROWS
        [[ $(( $(topic_end) - before )) -eq $RELAY_ROWS ]] || die "relay-outbox (analyzed): topic did not grow by $RELAY_ROWS"
    done
    {
        echo "(g) Relay on stale statistics: $RELAY_ROWS pending rows written after the outbox's last"
        echo "    ANALYZE (1000 published rows then), never analyzed since, autovacuum off;"
        echo "    events/s of the whole process, median [slowest–fastest] of $DRAIN_RUNS runs"
        echo
        printf '%-50s %s\n' "relay-outbox, stale statistics" \
            "$(per_s relay_stale $RELAY_ROWS) [$(per_s relay_stale $RELAY_ROWS max)-$(per_s relay_stale $RELAY_ROWS min)]"
        printf '%-50s %s\n' "relay-outbox, the same outbox after ANALYZE" \
            "$(per_s relay_analyzed $RELAY_ROWS) [$(per_s relay_analyzed $RELAY_ROWS max)-$(per_s relay_analyzed $RELAY_ROWS min)]"
        echo
        echo "stale/analyzed $(ratio "$(per_s relay_stale $RELAY_ROWS)" "$(per_s relay_analyzed $RELAY_ROWS)");" \
             "plans independent of the statistics: target ≥ 0.8: $(verdict "$(ratio "$(per_s relay_stale $RELAY_ROWS)" "$(per_s relay_analyzed $RELAY_ROWS)")" '>=' 0.8)"
        echo
    } | table
}

# ---------------------------------------------------------------- (f) catch-up

# The run-once flags of the shipped CronJob, as cronjob.yaml lists them.
shipped_run_once_flags() {
    awk '/^ *- run-once$/ { on = 1; next } on && /envFrom/ { on = 0 }
         on && /^ *- --/ { sub(/^ *- /, ""); print }' cronjob.yaml
}

bench_catchup() {
    local total=$((2 * CATCHUP_OVERDUE)) flags=() n left r b d sum_ms=0 line
    mapfile -t flags < <(shipped_run_once_flags)
    [[ ${#flags[@]} -gt 0 ]] || die "no run-once flags found in cronjob.yaml"
    template bench_catchup scripts/bench/seed.sql history="$CATCHUP_HISTORY" active="$ACTIVE" overdue="$CATCHUP_OVERDUE"
    copy bench_catchup
    progress "catch-up: $total overdue ($CATCHUP_OVERDUE per phase, $CATCHUP_HISTORY history), run-once ${flags[*]} until none is left"
    local overdue_sql="SELECT count(*) FROM crm.bookings
                        WHERE (status IN ('Reserved', 'AwaitingPayment') AND reserve_expires_at < now())
                           OR (status = 'Booked' AND booking_expires_at < now())"
    : >"$WORK/catchup"
    for ((n = 1; n <= 10; n++)); do
        progress "catch-up cycle $n"
        measure catchup_cycle env DATABASE_URL="$(db_url bench_run)" "$BIN" run-once "${flags[@]}"
        r=$(grep -o '"ReserveExpiredCount":[0-9]*' "$WORK/out" | cut -d: -f2)
        b=$(grep -o '"BookingExpiredCount":[0-9]*' "$WORK/out" | cut -d: -f2)
        d=$(grep -o '"DurationMs":[0-9]*' "$WORK/out" | cut -d: -f2)
        # A cycle that drains the rest logs no left line: grep finds nothing, not a failure.
        line=$( { grep -o '"[A-Za-z]*Left":"[0-9a-z+]*"' "$WORK/err" || true; } | sort -r | tr -d '"' | paste -sd ' ')
        left=$(sql bench_run -c "$overdue_sql")
        sum_ms=$((sum_ms + d))
        printf '%-7s %-12s %-12s %-10s %-14s %s\n' "$n" "$r" "$b" \
            "$(awk -v ms="$d" 'BEGIN { printf "%.1f", ms / 1000 }')" "$left" "$line" >>"$WORK/catchup"
        [[ $left -gt 0 ]] || break
    done
    # Drained: every expiry written once. Not drained after 10 cycles: the table says so.
    if [[ $left -eq 0 ]]; then expect_rows bench_run $total; else n=">$((n - 1))"; fi
    {
        echo "(f) Catch-up after an outage: $total overdue bookings ($CATCHUP_OVERDUE per phase) beside"
        echo "    $CATCHUP_HISTORY historical and $ACTIVE future ones, template vacuumed and analyzed before"
        echo "    the outage; the shipped CronJob's run-once (${flags[*]}) run back to back until"
        echo "    nothing is overdue; each row of the table is one cycle (one minute of the CronJob)"
        echo
        printf '%-7s %-12s %-12s %-10s %-14s %s\n' "cycle" "Reserve" "Booking" "s" "overdue after" "the cycle's log: left"
        cat "$WORK/catchup"
        echo
        echo "$total overdue drained in $n cycles of the shipped configuration," \
             "$(awk -v ms="$sum_ms" 'BEGIN { printf "%.1f", ms / 1000 }') s of cycle time" \
             "($n minutes of the CronJob); $(awk -v n="$total" -v ms="$sum_ms" 'BEGIN { printf "%.0f", n / (ms / 1000) }') expiries/s;" \
             "target ≤ 3 cycles: $(if [[ $n == ">"* ]]; then echo MISSED; else verdict "$n" '<=' 3; fi)"
        echo
    } | table
}

# ---------------------------------------------------------------- (h) scale-out

# scaleout_worker URL LOG FLAGS… — one CronJob's run-once, cycle after cycle, until a
# cycle expires nothing (the backlog is gone, or what is left is held by the others).
scaleout_worker() {
    local url=$1 log=$2; shift 2
    local out
    while :; do
        out=$(DATABASE_URL=$url "$BIN" run-once "$@" 2>>"$log.err") || { echo "run-once failed: $out" >>"$log"; return 1; }
        echo "$out" >>"$log"
        [[ $out == *'"ReserveExpiredCount":0,'*'"BookingExpiredCount":0,'* ]] && return 0
    done
}

bench_scaleout() {
    local total=$((2 * SCALEOUT_OVERDUE)) flags=() n k pids t0 t1 us got sampler
    mapfile -t flags < <(shipped_run_once_flags)
    [[ ${#flags[@]} -gt 0 ]] || die "no run-once flags found in cronjob.yaml"
    local tpl=bench_scaleout_$SCALEOUT_OVERDUE
    [[ $SCALEOUT_OVERDUE == "$CATCHUP_OVERDUE" ]] && tpl=bench_catchup
    [[ -n $(admin -At -c "SELECT 1 FROM pg_database WHERE datname = '$tpl'") ]] \
        || template "$tpl" scripts/bench/seed.sql history="$CATCHUP_HISTORY" active="$ACTIVE" overdue="$SCALEOUT_OVERDUE"
    : >"$WORK/scaleout"
    for n in $SCALEOUT_PROCS; do
        copy "$tpl"
        progress "scale-out: $total overdue ($SCALEOUT_OVERDUE per phase), $n run-once processes (${flags[*]}) at once"
        # Lock waits of the run-once sessions, sampled every 100 ms while they run.
        # shellcheck disable=SC2016 # psql expands its own variables
        (while :; do
             psql -X -At -F ' ' -d "$(db_url bench_run)" -c "
                 SELECT (SELECT count(*) FROM pg_stat_activity
                          WHERE datname = 'bench_run' AND application_name = 'booking-expire'),
                        (SELECT count(*) FROM pg_stat_activity
                          WHERE datname = 'bench_run' AND wait_event_type = 'Lock'),
                        (SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
                          WHERE d.datname = 'bench_run' AND NOT l.granted)" 2>/dev/null || true
             sleep 0.1
         done) >"$WORK/scaleout-samples" &
        sampler=$!
        pids=()
        t0=$EPOCHREALTIME
        for ((k = 1; k <= n; k++)); do
            scaleout_worker "$(db_url bench_run)" "$WORK/scaleout-$n-$k" "${flags[@]}" &
            pids+=($!)
        done
        for k in "${pids[@]}"; do wait "$k" || { kill "$sampler"; die "scale-out, $n processes: a run-once failed (see $WORK/scaleout-$n-*)"; }; done
        t1=$EPOCHREALTIME
        kill "$sampler" 2>/dev/null || true
        wait "$sampler" 2>/dev/null || true
        us=$(( ${t1//[.,]/} - ${t0//[.,]/} ))
        echo "$us" >>"$WORK/res/scaleout_$n.us"
        # Each row expired exactly once: one outbox, audit and timeline row per
        # booking, none twice, nothing overdue left.
        got=$(sql bench_run -c "
            SELECT (SELECT count(*) FROM crm.outbox) || ' ' || (SELECT count(DISTINCT aggregateid) FROM crm.outbox)
                || ' ' || (SELECT count(*) FROM crm.booking_audit) || ' ' || (SELECT count(DISTINCT booking_id) FROM crm.booking_audit)
                || ' ' || (SELECT count(*) FROM crm.deal_timeline) || ' ' || (SELECT count(DISTINCT booking_id) FROM crm.deal_timeline)
                || ' ' || (SELECT count(*) FROM crm.bookings
                            WHERE (status IN ('Reserved', 'AwaitingPayment') AND reserve_expires_at < now())
                               OR (status = 'Booked' AND booking_expires_at < now()))")
        [[ $got == "$total $total $total $total $total $total 0" ]] \
            || die "scale-out, $n processes: expected $total rows once each in outbox, audit and timeline and none overdue, got $got"
        local cycles samples waits max_waits
        # The cycles' results only (stdout); their logs (.err) name the run id too.
        cycles=$(for f in "$WORK"/scaleout-"$n"-*; do [[ $f == *.err ]] || cat "$f"; done | grep -c '"RunId"')
        samples=$(awk 'NF == 3 && $1 > 0' "$WORK/scaleout-samples" | wc -l)
        waits=$(awk 'NF == 3 && $1 > 0 && ($2 > 0 || $3 > 0)' "$WORK/scaleout-samples" | wc -l)
        max_waits=$(awk 'NF == 3 { if ($2 > m) m = $2; if ($3 > g) g = $3 } END { print m + 0 "/" g + 0 }' "$WORK/scaleout-samples")
        printf '%-11s %-12s %-12s %-8s %-24s %s\n' "$n" \
            "$(awk -v us="$us" 'BEGIN { printf "%.1f", us / 1e6 }')" "$(per_s "scaleout_$n" $total)" \
            "$cycles" "$waits of $samples" "$max_waits" >>"$WORK/scaleout"
    done
    local first=${SCALEOUT_PROCS%% *} last=${SCALEOUT_PROCS##* } r
    r=$(ratio "$(per_s "scaleout_$last" $total)" "$(per_s "scaleout_$first" $total)")
    {
        echo "(h) Scale-out: $total overdue bookings ($SCALEOUT_OVERDUE per phase) beside $CATCHUP_HISTORY historical"
        echo "    and $ACTIVE future ones, drained by N run-once processes at once, each running the"
        echo "    shipped CronJob's cycle (${flags[*]}) back to back until a cycle expires nothing;"
        echo "    checked: every overdue booking expired exactly once (one outbox, audit and timeline"
        echo "    row each, none twice), nothing overdue left. Lock waits: samples every 100 ms of the"
        echo "    run-once sessions waiting on a lock (pg_stat_activity) or an ungranted pg_locks entry"
        echo
        printf '%-11s %-12s %-12s %-8s %-24s %s\n' "processes" "s" "expiries/s" "cycles" "samples with lock waits" "max waiting/ungranted"
        cat "$WORK/scaleout"
        echo
        echo "$last processes / $first: aggregate throughput ×$r; target ≥ 1.0 (not slower in total): $(verdict "$r" '>=' 1.0)"
        echo
    } | table
}

# ---------------------------------------------------------------- (l) a topic that does not exist

# relay-outbox over $RELAY_ROWS pending rows of a topic that does not exist (a contract
# migration's v2 rows before the v2 topic exists), three runs on one database: what
# each run writes into crm.outbox (row updates, dead tuples, WAL) and how long it takes.
# Between runs a row's wait of 30 s (the per-row mark of releases before) is taken as
# passed, so such a relay works every run as it does a minute apart.
bench_topic_wait() {
    local i code t0 t1 before after w0 d0 l0 w1 d1 l1
    template bench_outbox_wait scripts/bench/outbox-seed.sql rows=$RELAY_ROWS
    sql bench_outbox_wait -c "UPDATE crm.outbox SET topic = 'pin.crm.booking-expired.v99'" \
        -c "VACUUM ANALYZE crm.outbox"
    copy bench_outbox_wait
    # Row updates and deletes of crm.outbox, its dead tuples, the WAL position.
    figures() {
        sql bench_run -F ' ' -c "SELECT coalesce(sum(n_tup_upd + n_tup_del), 0), coalesce(sum(n_dead_tup), 0),
                                        pg_current_wal_lsn()
                                   FROM pg_stat_user_tables WHERE relid = 'crm.outbox'::regclass"
    }
    progress "relay over $RELAY_ROWS rows waiting for a missing topic: 3 runs"
    {
        echo "(l) A topic that does not exist: $RELAY_ROWS pending rows of pin.crm.booking-expired.v99,"
        echo "    three relay-outbox runs on one database; what each run wrote into crm.outbox"
        echo
        printf '%-8s %-6s %-10s %-16s %-16s %s\n' run exit "wall s" "rows written" "dead tuples +" "WAL bytes"
    } | table
    for ((i = 1; i <= 3; i++)); do
        sql bench_run -c "UPDATE crm.outbox SET next_attempt_at = now() WHERE next_attempt_at > now()"
        before=$(figures)
        t0=$EPOCHREALTIME
        code=0
        env DATABASE_URL="$(db_url bench_run)" "$BIN" relay-outbox --brokers "$KAFKA_BROKERS" \
            >"$WORK/out" 2>"$WORK/err" || code=$?
        t1=$EPOCHREALTIME
        [[ $code -eq 78 ]] || die "relay-outbox over a missing topic: exit $code, expected 78: $(tail -n 3 "$WORK/err")"
        expect_result WaitingForTopic $RELAY_ROWS
        sleep 0.5 # the relay's sessions report their counts as they end
        after=$(figures)
        read -r w0 d0 l0 <<<"$before"
        read -r w1 d1 l1 <<<"$after"
        printf '%-8s %-6s %-10s %-16s %-16s %s\n' "$i" "$code" \
            "$(awk -v a="${t0/,/.}" -v b="${t1/,/.}" 'BEGIN { printf "%.2f", b - a }')" \
            $((w1 - w0)) $((d1 - d0)) "$(sql bench_run -c "SELECT pg_wal_lsn_diff('$l1', '$l0')::bigint")" | table
    done
    echo | table
}

# ---------------------------------------------------------------- (i) follow-burst

# relay-outbox --follow through the burst after an outage: run-once expires
# $FOLLOW_BURST overdue bookings in one run while the relay follows the outbox, whose
# statistics are those of before the burst (1000 published rows, analyzed, autovacuum
# off). Each outbox row gets the time it was written (a column of this bench only, a
# clock_timestamp() default, within the batch's short transaction, just before its
# commit); the latency is LogAppendTime minus that, per event, joined by the receipt
# (partition, offset) the relay marked.
bench_follow_burst() {
    local i start_ms writer_us
    ensure_topic
    template bench_follow scripts/bench/seed.sql history=10000 active=$ACTIVE overdue=$((FOLLOW_BURST / 2))
    sql bench_follow >/dev/null <<'EOF'
ALTER TABLE crm.outbox SET (autovacuum_enabled = false);
ALTER TABLE crm.outbox ADD COLUMN bench_written_at timestamptz DEFAULT clock_timestamp();
INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload, occurred_at, published_at)
SELECT gen_random_uuid(), 'Booking', gen_random_uuid()::text, 'pin.crm.booking-expired',
       'pin.crm.booking-expired.v1', '{}', now() - interval '1 day', now() - interval '1 day'
  FROM generate_series(1, 1000);
VACUUM ANALYZE crm.outbox;
EOF
    progress "follow-burst: $FOLLOW_RUNS × (relay-outbox --follow beside run-once expiring $FOLLOW_BURST)"
    : >"$WORK/follow-burst"
    for ((i = 1; i <= FOLLOW_RUNS; i++)); do
        copy bench_follow
        DATABASE_URL=$(db_url bench_run) "$BIN" relay-outbox --brokers "$KAFKA_BROKERS" --follow 120s \
            >"$WORK/follow-out" 2>"$WORK/follow-err" &
        RELAY_PID=$!
        sleep 2
        kill -0 "$RELAY_PID" 2>/dev/null || { cat "$WORK/follow-err" >&2; die "relay-outbox --follow exited"; }
        start_ms=$(( ${EPOCHREALTIME//[.,]/} / 1000 ))
        measure follow_writer env DATABASE_URL="$(db_url bench_run)" "$BIN" run-once \
            --batch-size $BATCH --max-batches 10000 --deadline 10m
        writer_us=$(tail -n 1 "$WORK/res/follow_writer.us")
        timeout 120 kcat -C -b "$KAFKA_BROKERS" -t "$TOPIC" -o "s@$start_ms" -c "$FOLLOW_BURST" \
            -q -f '%p\t%o\t%T\n' >"$WORK/arrivals" \
            || die "the consumer did not read $FOLLOW_BURST events within 120 s"
        kill -TERM "$RELAY_PID" 2>/dev/null || true
        wait "$RELAY_PID" 2>/dev/null || true
        RELAY_PID=""
        [[ $(sql bench_run -c "SELECT count(*) FROM crm.outbox WHERE published_at IS NULL") == 0 ]] \
            || die "follow-burst: rows left pending"
        # events, relay events/s (first to last append), p50/p99/max ms, run-once's wall s,
        # the last event's append after run-once's exit (ms; negative: before it)
        sql bench_run -F ' ' >>"$WORK/follow-burst" <<EOF
CREATE TEMP TABLE arrival (p int, o bigint, appended_ms bigint);
\copy arrival FROM '$WORK/arrivals'
SELECT count(*),
       round(count(*) / nullif((max(appended_ms) - min(appended_ms)) / 1000.0, 0)),
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY l)),
       round(percentile_cont(0.99) WITHIN GROUP (ORDER BY l)),
       round(max(l)),
       round($writer_us / 1e6, 1),
       round(max(appended_ms) - ($start_ms + $writer_us / 1000.0))
  FROM (SELECT a.appended_ms, a.appended_ms - extract(epoch FROM b.bench_written_at) * 1000 AS l
          FROM arrival a JOIN crm.outbox b ON b.delivered_partition = a.p AND b.delivered_offset = a.o
         WHERE b.bench_written_at IS NOT NULL) x;
EOF
    done
    local median_rate median_p99
    median_rate=$(awk '{ print $2 }' "$WORK/follow-burst" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
    median_p99=$(awk '{ print $4 }' "$WORK/follow-burst" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
    {
        echo "(i) relay-outbox --follow through a burst: run-once (--batch-size $BATCH --max-batches 10000)"
        echo "    expires $FOLLOW_BURST overdue bookings in one run while the relay follows; the outbox was"
        echo "    analyzed before the burst (1000 published rows), never since, autovacuum off. events/s of"
        echo "    the relay from the first to the last event's LogAppendTime; latency from each row's write"
        echo "    (clock_timestamp() in the batch's transaction) to its LogAppendTime; the last event's"
        echo "    append after run-once's exit (how far the relay trails the writer); one line per run"
        echo
        printf '%-4s %-8s %-10s %-8s %-8s %-8s %-11s %s\n' "run" "events" "events/s" "p50 ms" "p99 ms" "max ms" "run-once s" "last after exit ms"
        awk '{ printf "%-4s %-8s %-10s %-8s %-8s %-8s %-11s %s\n", NR, $1, $2, $3, $4, $5, $6, $7 }' "$WORK/follow-burst"
        echo
        echo "median: ${median_rate} events/s, target ≥ 30000: $(verdict "$median_rate" '>=' 30000);" \
             "p99 ${median_p99} ms, target < 2000: $(verdict "$median_p99" '<' 2000)"
        echo
    } | table
}

wants cycle && bench_cycle
wants drain && bench_drain
wants relay && bench_relay
wants relay-stale && bench_relay_stale
wants latency && bench_latency
wants rss && bench_rss
wants catchup && bench_catchup
wants scaleout && bench_scaleout
wants follow-burst && bench_follow_burst
# shellcheck source=scripts/bench/notify.sh
wants notify && source scripts/bench/notify.sh && bench_notify
# shellcheck source=scripts/bench/migrate.sh
wants migrate && source scripts/bench/migrate.sh && bench_migrate
wants topic-wait && bench_topic_wait
# shellcheck source=scripts/bench/footprint.sh
wants footprint && source scripts/bench/footprint.sh && bench_footprint

{
    echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'))," \
         "$(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo);" \
         "PostgreSQL $(admin -At -c 'SHOW server_version' | cut -d' ' -f1);" \
         "kcat $(dpkg-query -W -f='${Version}' kcat 2>/dev/null || echo '?');" \
         "bench took $((SECONDS - STARTED)) s"
} | table
cat "$RESULTS"
