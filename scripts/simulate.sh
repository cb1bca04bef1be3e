#!/usr/bin/env bash
# Months of minute cycles in minutes: the deterministic long-horizon simulation of
# tests/it/simulation.rs against a real PostgreSQL (a server of its own, restarted now
# and then) and a real Kafka broker, with a clock the simulation moves itself.
#
# Usage: scripts/simulate.sh [--days N] [--seed S]
#
#   --days N   simulated days, 1440 cycles each (default 3; CI runs 3 with a fresh seed)
#   --seed S   the workload's seed, a whole number (default: a fresh one, printed); a
#              failure prints the seed and the minute, and the same seed replays the
#              same workload
#
# Prints the seed first and a one-screen summary last: cycles, expiries, managers,
# faults injected, invariant checks, wall time. Exit 0 when every invariant held.
# Starts a throwaway Kafka unless KAFKA_BROKERS is set (PostgreSQL is always its own).
# Built with Cargo's release profile, as the job ships: the cycle's client side (payload
# encoding, the batch's arrays) runs several times faster than in the debug build the
# suite uses, and a burst's cycle is timed as production would see it. The first run
# compiles that build once (minutes); CI's 3 days run inside the suite, in debug.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

days=3
seed=""
while [[ $# -gt 0 ]]; do
    case $1 in
        --days)
            [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "simulate.sh: --days takes a whole number of days, at least 1 (got '${2:-}')" >&2; exit 64; }
            days=$2; shift 2 ;;
        --seed)
            [[ ${2:-} =~ ^[0-9]+$ ]] || { echo "simulate.sh: --seed takes a whole number (got '${2:-}')" >&2; exit 64; }
            seed=$2; shift 2 ;;
        -h|--help)
            sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *)
            echo "simulate.sh: unknown argument '$1' (use --days N, --seed S)" >&2; exit 64 ;;
    esac
done
if [[ -z $seed ]]; then
    seed=$(( (RANDOM << 30) ^ (RANDOM << 15) ^ RANDOM ))
fi

ensure_build_deps
if [[ -n ${CI:-} && -z ${CARGO_TARGET_DIR:-} ]]; then
    export CARGO_TARGET_DIR=/var/tmp/booking-expire-target
fi
trap stop_services EXIT
start_kafka

echo "== simulation: $days days, seed $seed" >&2
SIM_DAYS=$days SIM_SEED=$seed cargo test --release --locked --test it \
    simulation::months_of_minute_cycles_keep_every_invariant -- --exact --nocapture
