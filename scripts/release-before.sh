#!/usr/bin/env bash
# Prints the path of the previous release's binary, building it once if it is missing.
#
# Usage: scripts/release-before.sh
#
# "The previous release" is the newest line of scripts/releases.tsv (tab-separated:
# version, commit, schema version). Its binary is built from that commit's tree
# (`git archive`, so the clone's work tree does not matter) with
# `cargo build --locked --bin booking-expire` (debug, with the line tables only, as the
# workspace builds its own) and installed, with that commit's
# sql/ beside it (its migrations, to apply the way that release did), into
#
#   ${XDG_CACHE_HOME:-~/.cache}/booking-expire/releases/COMMIT/booking-expire
#   ${XDG_CACHE_HOME:-~/.cache}/booking-expire/releases/COMMIT/sql/
#
# keyed by commit and reused afterwards: a warm call prints the path at once. Each
# build gets a Cargo target directory of its own in a temporary directory beside the
# cache's (not the suite's; 1.3 GB for 0.1.0), removed when it ends, failed or not:
# never reused, since cargo would take another tree's artefacts for fresh (git archive
# dates the files by their commit, and the package's paths are the same). Concurrent
# calls wait for one build at a time (flock); the directory appears whole or not at all
# (built beside it, then renamed). Build output goes to
# releases/COMMIT.build.log; on failure its tail is shown on stderr. tests/it/upgrade.rs
# calls it for the binary; scripts/test.sh starts it in the background at the beginning,
# so the tests' call waits for that build (the lock) instead of making its own.
set -euo pipefail

die() { echo "release-before: $*" >&2; exit 1; }
[[ $# -eq 0 ]] || die "usage: $(basename "$0") (no arguments)"

root=$(cd "$(dirname "$0")/.." && pwd)
releases=$root/scripts/releases.tsv
[[ -r $releases ]] || die "$releases not found"
line=$(grep -v -e '^#' -e '^[[:space:]]*$' "$releases" | tail -n 1 || true)
[[ -n $line ]] || die "$releases names no release"
IFS=$'\t' read -r version commit schema _ <<<"$line"
[[ $commit =~ ^[0-9a-f]{40}$ ]] \
    || die "$releases: the newest line's commit must be 40 hex digits, got '$commit' (line: $line)"
[[ $schema =~ ^[0-9]+$ ]] || die "$releases: the newest line's schema version must be a number, got '$schema'"

cache=${XDG_CACHE_HOME:-$HOME/.cache}/booking-expire/releases
dest=$cache/$commit
bin=$dest/booking-expire
if [[ -x $bin && -d $dest/sql ]]; then
    echo "$bin"
    exit 0
fi

mkdir -p "$cache"
# One lock for every release: one build at a time on a machine.
exec 9>"$cache/.lock"
flock 9
if [[ -x $bin && -d $dest/sql ]]; then
    echo "$bin"
    exit 0
fi

if ! git -C "$root" cat-file -e "$commit^{commit}" 2>/dev/null; then
    if [[ $(git -C "$root" rev-parse --is-shallow-repository 2>/dev/null) == true ]]; then
        die "release $version's commit $commit is not in this clone: it is a shallow clone; run 'git fetch --unshallow' (or 'git fetch origin $commit') and try again"
    fi
    die "release $version's commit $commit is not in this clone (run 'git fetch origin' and check $releases)"
fi

rm -rf "$cache"/.build-* # what a killed build left: nobody else builds while we hold the lock
work=$(mktemp -d "$cache/.build-$commit.XXXXXX")
trap 'rm -rf "$work"' EXIT
log=$cache/$commit.build.log
start=$SECONDS
echo "release-before: building release $version ($commit) once; cached in $dest" >&2
mkdir -p "$work/src" "$work/out"
git -C "$root" archive --format=tar "$commit" | tar -x -C "$work/src"
if ! (
    cd "$work/src"
    # The tree has no .git: a release that reads its commit at build time gets it here.
    BOOKING_EXPIRE_COMMIT=$commit CARGO_TARGET_DIR=$work/target \
        "${CARGO:-cargo}" build --locked --bin booking-expire \
            --config 'profile.dev.debug="line-tables-only"' \
            --config 'profile.dev.package."*".debug=false'
) >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "building release $version ($commit) failed (log: $log)"
fi
cp "$work/target/debug/booking-expire" "$work/out/booking-expire"
cp -R "$work/src/sql" "$work/out/sql"
# The line of releases.tsv must describe that commit: its version and schema.
built=$("$work/out/booking-expire" --version)
[[ $built == "booking-expire $version" || $built == "booking-expire $version "* ]] \
    || die "$releases says $commit is release $version, but its binary says '$built'"
highest=$(find "$work/out/sql" -maxdepth 1 -name '[0-9]*.sql' -printf '%f\n' | LC_ALL=C sort | tail -n 1)
[[ $((10#${highest%%_*})) == "$schema" ]] \
    || die "$releases says release $version has schema $schema, but its newest migration is sql/$highest"
rm -rf "$dest" # a directory without the binary: not one this script made whole
mv -T "$work/out" "$dest"
echo "release-before: release $version built in $((SECONDS - start)) s" >&2
echo "$bin"
