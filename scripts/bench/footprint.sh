# shellcheck shell=bash
# (m) The relay's footprint on the CRM's database, a part of scripts/bench.sh
# (BENCH_ONLY=footprint), sourced by it: it uses bench.sh's helpers (admin, sql, db_url,
# copy, progress, die, table, ratio, verdict, cpu_s, server_pids, ensure_topic,
# topic_end, $WORK, $BIN).
#
# What relaying an event costs the database it shares with the CRM: the relay's mark
# (its delivery record) and, a retention later, its purge. Only the shipped CLI is used,
# so any build can be measured, whatever it keeps where:
#
#   1. events: each build migrates its own database and makes N pending events with
#      its own run-once over overdue bookings (scripts/bench/seed.sql, N/2 per phase),
#      then the database is vacuumed (FREEZE, ANALYZE) and autovacuum is turned off on
#      each of its tables, as a template that every run copies;
#   2. mark: one relay-outbox run with the shipped CronJob's flags (cronjob.yaml), its
#      --follow replaced by --deadline 10m so that the run relays all and exits; checked:
#      Published = N and the topic grew by N;
#   3. purge: relay-outbox runs with the same flags and --retention 7d (the default),
#      their clock (libfaketime, the relay's only: the database's is the real one) set
#      7 days and 1 hour on, as the relay runs a week later, until they purged N rows.
#      The purge spends at most about a second per run, so a run purges part of it;
#      every run counts.
#
# Each step is measured from a CHECKPOINT taken just before it (so the first change of
# each page after it writes a full-page image: full_page_writes is on for this part),
# to the moment the relay's sessions have ended (their statistics are flushed when
# they end):
#
#   WAL        pg_current_wal_lsn() after minus before, in bytes (the whole server's:
#              nothing else runs on it), and the full-page images in it (pg_stat_wal)
#   dead       n_dead_tup added over every table of the database (pg_stat_user_tables;
#              they are the crm schema's), and the rows inserted, updated, deleted
#   probes     idx_scan added over every index of those tables (pg_stat_user_indexes):
#              each index search a statement started
#   PG CPU     utime + stime of the postmaster and all its children, reaped or running
#              (/proc/PID/stat), after minus before
#   relay CPU  user + system of the relay processes (/usr/bin/time), and their peak RSS
#
# With a baseline build (BENCH_BASELINE_BIN, or BENCH_BASELINE_COMMIT built once), both
# builds run in the same invocation on fresh copies of identically seeded databases,
# interleaved (baseline, candidate, baseline …), and the table gives new/baseline per
# row with the targets: WAL per event ≤ 0.40 × the baseline's, PostgreSQL CPU per 100k
# ≤ 0.50 ×, and index probes ≤ 0.1 per event.
#
# Environment (optional):
#   BENCH_FOOTPRINT_EVENTS="100000"   pending events per size, e.g. "10000 100000 1000000"
#                                     for the scale runs (even numbers, ≥ 2)
#   BENCH_FOOTPRINT_RUNS=3            runs per build and size
#   BENCH_FOOTPRINT_BACKLOG=0         N > 0: also drain one backlog of N events per build
#                                     with the shipped flags as they are (--follow=28s),
#                                     run after run, as the CronJob would: runs, wall
#                                     time, peak RSS, and the same footprint figures
#   BENCH_FOOTPRINT_CANDIDATE_ENV="BOOKING_EXPIRATION_LEGACY_MARKS=off"
#                                     settings of the candidate's relay runs alone (the
#                                     baseline's stay as shipped): by default the relay
#                                     without the marks kept for release 0.1.0, the state
#                                     the footprint targets are for; "" = as shipped
#   BENCH_BASELINE_BIN                the baseline's binary
#   BENCH_BASELINE_COMMIT             or a commit whose release build is the baseline,
#                                     built once and cached in
#                                     ${XDG_CACHE_HOME:-~/.cache}/booking-expire/bench/COMMIT/

FOOTPRINT_EVENTS=${BENCH_FOOTPRINT_EVENTS:-100000}
FOOTPRINT_RUNS=${BENCH_FOOTPRINT_RUNS:-3}
FOOTPRINT_BACKLOG=${BENCH_FOOTPRINT_BACKLOG:-0}
FOOTPRINT_CANDIDATE_ENV=${BENCH_FOOTPRINT_CANDIDATE_ENV-BOOKING_EXPIRATION_LEGACY_MARKS=off}

# footprint_env WHO — the settings of WHO's relay runs, one per line (for env).
footprint_env() {
    [[ $1 == candidate ]] || return 0
    local setting
    for setting in $FOOTPRINT_CANDIDATE_ENV; do echo "$setting"; done
}
FOOTPRINT_RETENTION=7d   # relay-outbox's default --retention; the CronJob sets none
FOOTPRINT_LATER=+169h    # the purge runs' clock: the retention and an hour on
FOOTPRINT_FIELDS="wal fpi dead ins upd hot del probes ckpt"

# The shipped CronJob's relay-outbox flags, as cronjob.yaml lists them.
shipped_relay_flags() {
    awk '/^ *- relay-outbox$/ { on = 1; next } on && /envFrom/ { on = 0 }
         on && /^ *- --/ { sub(/^ *- /, ""); sub(/ +#.*$/, ""); print }' cronjob.yaml
}

# footprint_build_commit REV — the path of REV's release binary, built once (git archive
# of the commit, its own temporary target directory, removed after) and cached.
footprint_build_commit() {
    local commit cache tmp log t0=$SECONDS
    commit=$(git rev-parse --verify --quiet "$1^{commit}") || die "BENCH_BASELINE_COMMIT=$1: no such commit"
    cache=${XDG_CACHE_HOME:-$HOME/.cache}/booking-expire/bench
    if [[ ! -x $cache/$commit/booking-expire ]]; then
        mkdir -p "$cache"
        exec 8>"$cache/.lock"
        flock 8
        if [[ ! -x $cache/$commit/booking-expire ]]; then
            tmp=$(mktemp -d "$cache/.build-$commit.XXXXXX")
            log=$cache/$commit.build.log
            progress "building the baseline $commit (release) once; cached in $cache/$commit"
            mkdir -p "$tmp/src" "$tmp/out"
            git archive --format=tar "$commit" | tar -x -C "$tmp/src"
            if ! (cd "$tmp/src" && BOOKING_EXPIRE_COMMIT=$commit CARGO_TARGET_DIR=$tmp/target \
                    cargo build --release --locked --quiet --bin booking-expire) >"$log" 2>&1; then
                tail -n 30 "$log" >&2
                rm -rf "$tmp"
                die "building $commit failed (log: $log)"
            fi
            cp "$tmp/target/release/booking-expire" "$tmp/out/booking-expire"
            rm -rf "${cache:?}/$commit"
            mv -T "$tmp/out" "$cache/$commit"
            rm -rf "$tmp"
            progress "baseline built in $((SECONDS - t0)) s"
        fi
        exec 8>&-
    fi
    echo "$cache/$commit/booking-expire"
}

# footprint_template NAME BIN N — a database migrated by BIN, holding N pending events
# that BIN's run-once made, frozen, analyzed, autovacuum off on each table.
footprint_template() {
    local name=$1 bin=$2 n=$3 t0=$SECONDS got
    admin -c "DROP DATABASE IF EXISTS $name" -c "CREATE DATABASE $name"
    RUST_LOG=warn "$bin" migrate --database-url "$(db_url "$name")" >/dev/null
    sql "$name" -v history=10000 -v active=10000 -v overdue=$((n / 2)) -f scripts/bench/seed.sql >/dev/null
    env DATABASE_URL="$(db_url "$name")" RUST_LOG=warn "$bin" run-once --batch-size 1000 \
        --max-batches 100000 --deadline 10m >"$WORK/fp-out" 2>"$WORK/fp-err" \
        || { tail -n 5 "$WORK/fp-err" >&2; die "$name: run-once failed"; }
    grep -q "\"ReserveExpiredCount\":$((n / 2)),.*\"BookingExpiredCount\":$((n / 2))[,}]" "$WORK/fp-out" \
        || die "$name: run-once expired other than $((n / 2)) per phase: $(cat "$WORK/fp-out")"
    sql "$name" >/dev/null <<'EOF'
DO $$
DECLARE t regclass;
BEGIN
    FOR t IN SELECT relid FROM pg_stat_user_tables LOOP
        EXECUTE format('ALTER TABLE %s SET (autovacuum_enabled = false)', t);
    END LOOP;
END $$;
VACUUM (FREEZE, ANALYZE);
EOF
    got=$(sql "$name" -c "SELECT count(*) FROM crm.outbox")
    [[ $got == "$n" ]] || die "$name: $got outbox rows, expected $n"
    progress "template $name ($n pending events, $("$bin" --version)) in $((SECONDS - t0)) s"
}

# The server's figures that the steps subtract, in FOOTPRINT_FIELDS' order: WAL
# position (bytes), full-page images, n_dead_tup, rows inserted, updated (HOT
# included), HOT-updated, deleted, index searches, checkpoints.
footprint_figures() {
    local fpi=0 ckpt="(SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter)"
    [[ $PG_VERSION_NUM -lt 140000 ]] || fpi="(SELECT wal_fpi FROM pg_stat_wal)"
    [[ $PG_VERSION_NUM -lt 170000 ]] || ckpt="(SELECT num_timed + num_requested FROM pg_stat_checkpointer)"
    sql bench_run -F ' ' -c "
        SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint, $fpi,
               coalesce(sum(n_dead_tup), 0), coalesce(sum(n_tup_ins), 0), coalesce(sum(n_tup_upd), 0),
               coalesce(sum(n_tup_hot_upd), 0), coalesce(sum(n_tup_del), 0),
               (SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_indexes), $ckpt
          FROM pg_stat_user_tables"
}

# idx_scan of each index, by name (for join).
footprint_index_scans() {
    sql bench_run -F ' ' -c "SELECT schemaname || '.' || indexrelname, idx_scan FROM pg_stat_user_indexes" | LC_ALL=C sort
}

# Waits until no session but this one is left on bench_run: the relay's have ended, and
# with them flushed their statistics.
footprint_quiet() {
    local i
    for ((i = 0; i < 200; i++)); do
        [[ $(sql bench_run -c "SELECT count(*) FROM pg_stat_activity
                                WHERE datname = current_database() AND pid <> pg_backend_pid()") == 0 ]] && return 0
        sleep 0.05
    done
    die "sessions left on bench_run 10 s after the relay's exit"
}

# footprint_begin / footprint_end — the step's figures from a CHECKPOINT on; the end
# prints the differences in FOOTPRINT_FIELDS' order, then the PostgreSQL CPU seconds.
FP_BEFORE="" FP_PG0=""
footprint_begin() {
    admin -c "CHECKPOINT"
    FP_BEFORE=$(footprint_figures)
    footprint_index_scans >"$WORK/fp-idx0"
    FP_PG0=$(cpu_s "$PG_PID")
}
footprint_end() {
    local pg1
    footprint_quiet
    pg1=$(cpu_s "$PG_PID")
    footprint_index_scans >"$WORK/fp-idx1"
    # Index searches per index: those of the step that added any (for the table's notes).
    join "$WORK/fp-idx0" "$WORK/fp-idx1" | awk '$3 > $2 { print $1, $3 - $2 }' >"$WORK/fp-idx"
    awk -v a="$FP_BEFORE" -v b="$(footprint_figures)" -v p0="${FP_PG0:-0}" -v p1="${pg1:-0}" 'BEGIN {
        n = split(a, x, " "); split(b, y, " ")
        for (i = 1; i <= n; i++) printf "%d ", y[i] - x[i]
        printf "%.2f\n", p1 - p0 }'
}

# footprint_relay OUT CMD… — one relay process: its JSON result in OUT, its CPU seconds
# (user + system) and peak RSS (KiB) appended to $WORK/fp-proc, wall µs too.
footprint_relay() {
    local out=$1 t0 t1; shift
    t0=$EPOCHREALTIME
    if ! /usr/bin/time -f '%M %U %S' -o "$WORK/fp-time" "$@" >"$out" 2>"$WORK/fp-err"; then
        tail -n 5 "$WORK/fp-err" >&2
        die "'$*' failed"
    fi
    t1=$EPOCHREALTIME
    tail -n 1 "$WORK/fp-time" | awk -v us=$(( ${t1//[.,]/} - ${t0//[.,]/} )) \
        '{ printf "%.2f %d %d\n", $2 + $3, $1, us }' >>"$WORK/fp-proc"
}
# The sums of $WORK/fp-proc since it was emptied: CPU s, peak RSS KiB (max), wall µs, runs.
footprint_proc() {
    awk '{ c += $1; if ($2 > m) m = $2; w += $3 } END { printf "%.2f %d %d %d\n", c, m, w, NR }' "$WORK/fp-proc"
}

json_field() { grep -o "\"$1\":[0-9]*" "$2" | head -n 1 | cut -d: -f2; }

# footprint_mark_purge WHO BIN N RUN — one run of steps 2 and 3 on a fresh copy of WHO's
# template; appends a line to $WORK/fp-results: WHO N RUN, then per step (mark, purge)
# FOOTPRINT_FIELDS, PG CPU, relay CPU, RSS, wall µs, runs.
footprint_mark_purge() {
    local who=$1 bin=$2 n=$3 run=$4 before got mark purge runs
    local url flags=() settings=()
    mapfile -t flags < <(footprint_flags)
    mapfile -t settings < <(footprint_env "$who")
    copy "bench_fp_${who}_$n"
    url=$(db_url bench_run)
    progress "footprint $who, $n events, run $run: relay-outbox ${flags[*]}"
    before=$(topic_end)
    : >"$WORK/fp-proc"
    footprint_begin
    footprint_relay "$WORK/fp-out" env DATABASE_URL="$url" "${settings[@]}" "$bin" relay-outbox --brokers "$KAFKA_BROKERS" \
        "${flags[@]}" --retention "$FOOTPRINT_RETENTION"
    mark="$(footprint_end) $(footprint_proc)"
    cp "$WORK/fp-idx" "$WORK/fp-idx-$who-$n-mark"
    got=$(json_field Published "$WORK/fp-out")
    [[ $got == "$n" ]] || die "footprint $who: relay-outbox published ${got:-?} of $n: $(cat "$WORK/fp-out")"
    [[ $(( $(topic_end) - before )) -eq $n ]] || die "footprint $who: the topic did not grow by $n"

    progress "footprint $who, $n events, run $run: the purge, the relay's clock $FOOTPRINT_LATER"
    : >"$WORK/fp-proc"
    footprint_begin
    local idle=0
    got=0 runs=0
    while ((got < n)); do
        footprint_relay "$WORK/fp-out" env DATABASE_URL="$url" "${settings[@]}" LD_PRELOAD="$FAKETIME_LIB" \
            FAKETIME="$FOOTPRINT_LATER" FAKETIME_DONT_FAKE_MONOTONIC=1 \
            "$bin" relay-outbox --brokers "$KAFKA_BROKERS" "${flags[@]}" --retention "$FOOTPRINT_RETENTION"
        purge=$(json_field Purged "$WORK/fp-out")
        # A relay whose floor moves only at a run's start (once every transaction that
        # could hold a lower seq has ended: builds before the floor moved at a run's end
        # too) may purge nothing in the first run after the one that relayed: three such
        # runs in a row is a purge that does not work (one that reads the database's
        # clock, say).
        if [[ ${purge:-0} -gt 0 ]]; then idle=0; else idle=$((idle + 1)); fi
        ((idle < 3)) || die "footprint $who: three relay-outbox runs a retention later purged nothing ($got of $n purged so far): $(cat "$WORK/fp-out")"
        got=$((got + ${purge:-0})) runs=$((runs + 1))
        ((runs <= n / 100 + 10)) || die "footprint $who: the purge did not end"
    done
    [[ $got == "$n" ]] || die "footprint $who: purged $got of $n"
    purge="$(footprint_end) $(footprint_proc)"
    cp "$WORK/fp-idx" "$WORK/fp-idx-$who-$n-purge"
    echo "$who $n $run $mark $purge" >>"$WORK/fp-results"
}

# The relay's flags for the footprint: the shipped ones, --follow replaced by
# --deadline 10m (one run relays the whole backlog, then exits).
footprint_flags() {
    shipped_relay_flags | sed -e 's/^--follow[= ].*/--deadline=10m/'
}

# Columns of a line of $WORK/fp-results, for awk.
FP_COLUMNS="who n run"
for fp_step in m p; do
    for fp_f in $FOOTPRINT_FIELDS pg cpu rss us runs; do FP_COLUMNS+=" ${fp_f}_$fp_step"; done
done
unset fp_step fp_f

# footprint_stat WHO N EXPR [median|min|max] — EXPR (awk, over FP_COLUMNS' names) per run
# of WHO at size N, summarized; "-" when there is none.
footprint_stat() {
    local prelude="" c i=0
    for c in $FP_COLUMNS; do i=$((i + 1)); prelude+="$c = \$$i; "; done
    awk -v W="$1" -v N="$2" '$1 == W && $2 == N { '"$prelude"' printf "%.6f\n", ('"$3"') }' "$WORK/fp-results" \
        | sort -g | awk -v what="${4:-median}" '{ v[NR] = $1 }
            END { if (NR == 0) { print "-"; exit }
                  if (what == "min") print v[1]; else if (what == "max") print v[NR]
                  else print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}

# What the table shows: LABEL|EXPR|FORMAT|TARGET (TARGET: a bound of new/baseline
# "r<=0.40", a bound of the candidate's own figure "a<=0.1", or nothing).
FP_ROWS=(
    "WAL bytes per event, mark|wal_m / n|%.0f|"
    "WAL bytes per event, purge|wal_p / n|%.0f|"
    "WAL bytes per event, mark + purge|(wal_m + wal_p) / n|%.0f|r<=0.40"
    "  of which full-page images per event|(fpi_m + fpi_p) / n|%.3f|"
    "dead tuples per event, mark + purge|(dead_m + dead_p) / n|%.2f|"
    "rows written per event (ins+upd+del)|(ins_m + upd_m + del_m + ins_p + upd_p + del_p) / n|%.2f|"
    "  of which HOT updates per event|(hot_m + hot_p) / n|%.2f|"
    "index probes per event, mark|probes_m / n|%.3f|"
    "index probes per event, purge|probes_p / n|%.3f|"
    "index probes per event, mark + purge|(probes_m + probes_p) / n|%.3f|a<=0.1"
    "PostgreSQL CPU s per 100k, mark|pg_m * 100000 / n|%.2f|"
    "PostgreSQL CPU s per 100k, purge|pg_p * 100000 / n|%.2f|"
    "PostgreSQL CPU s per 100k, mark + purge|(pg_m + pg_p) * 100000 / n|%.2f|r<=0.50"
    "relay CPU s per 100k, mark + purge|(cpu_m + cpu_p) * 100000 / n|%.2f|"
    "relay wall s, mark|us_m / 1e6|%.2f|"
    "relay wall s, purge (all its runs)|us_p / 1e6|%.2f|"
    "purge runs|runs_p|%d|"
    "relay peak RSS MiB|(rss_m > rss_p ? rss_m : rss_p) / 1024|%.1f|"
    "checkpoints during the steps|ckpt_m + ckpt_p|%d|"
)

fp_fmt() { [[ $2 == - ]] && { echo -; return; }; awk -v v="$2" -v f="$1" 'BEGIN { printf f, v }'; }
# fp_cell WHO N EXPR FORMAT — "median [min-max]" (just the median with one run).
fp_cell() {
    local m
    m=$(fp_fmt "$4" "$(footprint_stat "$1" "$2" "$3")")
    if [[ $FOOTPRINT_RUNS -gt 1 && $m != - ]]; then
        m+=" [$(fp_fmt "$4" "$(footprint_stat "$1" "$2" "$3" min)")-$(fp_fmt "$4" "$(footprint_stat "$1" "$2" "$3" max)")]"
    fi
    echo "$m"
}

footprint_table() {
    local n=$1 row label expr fmt target c b r v who step
    {
        echo "(m) Footprint on the CRM's database: $n pending events made by run-once, relayed by one"
        echo "    relay-outbox run (the CronJob's flags, --follow → --deadline=10m), then purged by"
        echo "    relay-outbox runs a retention later (--retention $FOOTPRINT_RETENTION, their clock $FOOTPRINT_LATER); each step"
        echo "    candidate's relay runs with: ${FOOTPRINT_CANDIDATE_ENV:-the shipped settings}; the baseline's as shipped;"
        echo "    from a CHECKPOINT, full_page_writes on, autovacuum off on the tables; all tables and"
        echo "    indexes of the database (schema crm); \"mark\" is the whole relay run (its fetches too);"
        echo "    median [min-max] of $FOOTPRINT_RUNS runs per build;"
        echo "    load average $FP_LOAD0 before the part, $(cut -d' ' -f1-3 /proc/loadavg) now"
        echo
        if [[ -n $BASELINE ]]; then
            printf '%-40s %-26s %-26s %-9s %s\n' "per event relayed" "baseline" "candidate" "new/base" "target"
        else
            printf '%-40s %-26s %s\n' "per event relayed" "candidate" "target"
        fi
        for row in "${FP_ROWS[@]}"; do
            IFS='|' read -r label expr fmt target <<<"$row"
            c=$(fp_cell candidate "$n" "$expr" "$fmt")
            v=""
            case $target in
                a*) v="≤ ${target#a<=}: $(verdict "$(footprint_stat candidate "$n" "$expr")" '<=' "${target#a<=}")" ;;
            esac
            if [[ -n $BASELINE ]]; then
                b=$(fp_cell baseline "$n" "$expr" "$fmt")
                r=$(awk -v a="$(footprint_stat candidate "$n" "$expr")" -v b="$(footprint_stat baseline "$n" "$expr")" \
                        'BEGIN { if (b + 0 == 0) print "-"; else printf "%.2f", a / b }')
                [[ $target != r* || $r == - ]] || v="≤ ${target#r<=} × baseline: $(verdict "$r" '<=' "${target#r<=}")"
                printf '%-40s %-26s %-26s %-9s %s\n' "$label" "$b" "$c" "$r" "$v"
            else
                [[ $target != r* ]] || v="≤ ${target#r<=} × a baseline (BENCH_BASELINE_BIN)"
                printf '%-40s %-26s %s\n' "$label" "$c" "$v"
            fi
        done
        echo
        echo "    index probes per event, by index (the last run; the others had none):"
        for who in baseline candidate; do
            [[ $who == candidate || -n $BASELINE ]] || continue
            for step in mark purge; do
                echo "      $who, $step: $(LC_ALL=C sort -k2,2nr "$WORK/fp-idx-$who-$n-$step" \
                    | awk -v n="$n" '{ printf "%s%s %.3f", (NR > 1 ? ", " : ""), $1, $2 / n }')"
            done
        done
        echo
    } | fp_table
}

# The scale runs: per-event figures by size, and their growth from the smallest size to
# the largest.
footprint_scale_table() {
    local sizes=() who n first last g expr r
    read -r -a sizes <<<"$FOOTPRINT_EVENTS"
    [[ ${#sizes[@]} -gt 1 ]] || return 0
    first=${sizes[0]} last=${sizes[-1]}
    {
        echo "(m) Scale: per event relayed (mark + purge), medians, by pending events"
        echo
        printf '%-10s %-10s %-10s %-8s %-8s %-12s %-12s %s\n' "build" "events" "WAL B" "dead" "probes" "PG CPU/100k" "relay/100k" "mark events/s"
        for who in baseline candidate; do
            [[ $who == candidate || -n $BASELINE ]] || continue
            for n in "${sizes[@]}"; do
                printf '%-10s %-10s %-10s %-8s %-8s %-12s %-12s %s\n' "$who" "$n" \
                    "$(fp_fmt %.0f "$(footprint_stat "$who" "$n" "(wal_m + wal_p) / n")")" \
                    "$(fp_fmt %.2f "$(footprint_stat "$who" "$n" "(dead_m + dead_p) / n")")" \
                    "$(fp_fmt %.3f "$(footprint_stat "$who" "$n" "(probes_m + probes_p) / n")")" \
                    "$(fp_fmt %.2f "$(footprint_stat "$who" "$n" "(pg_m + pg_p) * 100000 / n")")" \
                    "$(fp_fmt %.2f "$(footprint_stat "$who" "$n" "(cpu_m + cpu_p) * 100000 / n")")" \
                    "$(fp_fmt %.0f "$(footprint_stat "$who" "$n" "n / (us_m / 1e6)")")"
            done
            g=""
            for expr in "(wal_m + wal_p) / n:WAL" "(pg_m + pg_p) / n:PG CPU" "(cpu_m + cpu_p) / n:relay CPU"; do
                r=$(ratio "$(footprint_stat "$who" "$last" "${expr%:*}")" "$(footprint_stat "$who" "$first" "${expr%:*}")")
                g+="${expr##*:} ×$r $(verdict "$r" '<=' 1.2), "
            done
            echo "  $who, per event at $last vs $first: ${g%, } (flat: ≤ 1.2)"
        done
        echo
    } | fp_table
}

# footprint_backlog WHO BIN N — one backlog of N events drained by relay-outbox with the
# shipped flags as they are, run after run until all are published.
footprint_backlog() {
    local who=$1 bin=$2 n=$3 flags=() settings=() got=0 runs=0 p fig proc url before
    mapfile -t flags < <(shipped_relay_flags)
    mapfile -t settings < <(footprint_env "$who")
    [[ -n $(admin -At -c "SELECT 1 FROM pg_database WHERE datname = 'bench_fp_${who}_$n'") ]] \
        || footprint_template "bench_fp_${who}_$n" "$bin" "$n"
    copy "bench_fp_${who}_$n"
    url=$(db_url bench_run)
    progress "backlog $who: $n pending, relay-outbox ${flags[*]} run after run"
    before=$(topic_end)
    : >"$WORK/fp-proc"
    : >"$WORK/fp-backlog-$who"
    footprint_begin
    while ((got < n)); do
        footprint_relay "$WORK/fp-out" env DATABASE_URL="$url" "${settings[@]}" "$bin" relay-outbox --brokers "$KAFKA_BROKERS" "${flags[@]}"
        p=$(json_field Published "$WORK/fp-out")
        [[ ${p:-0} -gt 0 ]] || die "backlog $who: a run published nothing ($got of $n so far): $(cat "$WORK/fp-out")"
        got=$((got + p)) runs=$((runs + 1))
        echo "$runs $p $(tail -n 1 "$WORK/fp-proc")" >>"$WORK/fp-backlog-$who"
        ((runs <= 100)) || die "backlog $who: not drained in 100 runs"
    done
    fig=$(footprint_end)
    proc=$(footprint_proc)
    [[ $got == "$n" && $(( $(topic_end) - before )) -eq $n ]] || die "backlog $who: published $got, expected $n"
    # runs, wall s, events/s, peak RSS MiB, WAL B/event, dead/event, probes/event, PG CPU/100k, relay CPU/100k
    read -r wal _ dead _ _ _ _ probes _ pg <<<"$fig"
    read -r cpu rss us _ <<<"$proc"
    awk -v who="$who" -v n="$n" -v runs="$runs" -v us="$us" -v rss="$rss" -v wal="$wal" -v dead="$dead" \
        -v probes="$probes" -v pg="$pg" -v cpu="$cpu" 'BEGIN {
        printf "%-10s %-6s %-9.1f %-10.0f %-9.1f %-8.0f %-7.2f %-8.3f %-12.2f %.2f\n", who, runs, us / 1e6,
            n / (us / 1e6), rss / 1024, wal / n, dead / n, probes / n, pg * 100000 / n, cpu * 100000 / n }' >>"$WORK/fp-backlog"
}

bench_footprint() {
    local n i who flags=()
    BASELINE=""
    FP_LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
    if [[ -n ${BENCH_BASELINE_BIN:-} ]]; then
        BASELINE=$BENCH_BASELINE_BIN
    elif [[ -n ${BENCH_BASELINE_COMMIT:-} ]]; then
        BASELINE=$(footprint_build_commit "$BENCH_BASELINE_COMMIT")
    fi
    [[ -z $BASELINE || -x $BASELINE ]] || die "no baseline binary at $BASELINE"
    for n in $FOOTPRINT_EVENTS $FOOTPRINT_BACKLOG; do
        [[ $n =~ ^[0-9]+$ && $((n % 2)) == 0 ]] || die "BENCH_FOOTPRINT_EVENTS/BACKLOG: $n is not an even number"
    done
    ensure_apt_packages faketime
    FAKETIME_LIB=$(dpkg -L libfaketime 2>/dev/null | grep -m1 '/libfaketime\.so\.1$' || true)
    [[ -r $FAKETIME_LIB ]] || die "libfaketime.so.1 not found (apt-get install faketime)"
    mapfile -t flags < <(footprint_flags)
    [[ ${#flags[@]} -gt 0 ]] || die "no relay-outbox flags found in cronjob.yaml"
    ensure_topic
    server_pids
    [[ -n $PG_PID ]] || progress "footprint: the PostgreSQL does not run on this machine: no PG CPU figures"
    PG_VERSION_NUM=$(admin -At -c "SHOW server_version_num")
    # Full-page images as a production server writes them (pg-start.sh turns them off).
    local fpw
    fpw=$(admin -At -c "SHOW full_page_writes")
    if [[ $fpw != on ]]; then
        admin -c "ALTER SYSTEM SET full_page_writes = on" -c "SELECT pg_reload_conf()" >/dev/null \
            || die "cannot turn full_page_writes on (needs a superuser)"
        sleep 0.5
        [[ $(admin -At -c "SHOW full_page_writes") == on ]] || die "full_page_writes is still off"
    fi
    local whos=(candidate)
    [[ -z $BASELINE ]] || whos=(baseline candidate)
    : >"$WORK/fp-results"
    for n in $FOOTPRINT_EVENTS; do
        for who in "${whos[@]}"; do
            footprint_template "bench_fp_${who}_$n" "$(fp_bin "$who")" "$n"
        done
        for ((i = 1; i <= FOOTPRINT_RUNS; i++)); do
            for who in "${whos[@]}"; do footprint_mark_purge "$who" "$(fp_bin "$who")" "$n" "$i"; done
        done
        footprint_table "$n"
    done
    footprint_scale_table
    if [[ $FOOTPRINT_BACKLOG -gt 0 ]]; then
        : >"$WORK/fp-backlog"
        for who in "${whos[@]}"; do footprint_backlog "$who" "$(fp_bin "$who")" "$FOOTPRINT_BACKLOG"; done
        {
            echo "(m) Backlog: $FOOTPRINT_BACKLOG pending events drained by relay-outbox with the CronJob's flags as"
            echo "    they are ($(shipped_relay_flags | paste -sd ' ')), one run after another until all"
            echo "    are published; a run's window bounds it, so a run is a CronJob minute; per event relayed"
            echo "    (the mark only: no purge here), from a CHECKPOINT, full_page_writes on"
            echo
            printf '%-10s %-6s %-9s %-10s %-9s %-8s %-7s %-8s %-12s %s\n' build runs "wall s" "events/s" "RSS MiB" \
                "WAL B" dead probes "PG CPU/100k" "relay/100k"
            cat "$WORK/fp-backlog"
            echo
            for who in "${whos[@]}"; do
                echo "  $who, published per run: $(awk '{ print $2 }' "$WORK/fp-backlog-$who" | paste -sd ' ')"
            done
            echo
        } | fp_table
    fi
    [[ $fpw == on ]] || admin -c "ALTER SYSTEM RESET full_page_writes" -c "SELECT pg_reload_conf()" >/dev/null
    for n in $FOOTPRINT_EVENTS $FOOTPRINT_BACKLOG; do
        for who in "${whos[@]}"; do admin -c "DROP DATABASE IF EXISTS bench_fp_${who}_$n" >/dev/null; done
    done
}

# A table of this part goes to stderr as well, as soon as it is made.
fp_table() { local t; t=$(cat); printf '%s\n\n' "$t" >&2; printf '%s\n\n' "$t" | table; }

fp_bin() { if [[ $1 == baseline ]]; then echo "$BASELINE"; else echo "$BIN"; fi; }
