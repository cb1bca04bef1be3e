#!/usr/bin/env bash
# Install a cargo-installed tool once and print the path of the cached binary.
#
# Usage: scripts/cargo-tool.sh CRATE VERSION [BINARY]
#
#   e.g. scripts/cargo-tool.sh cargo-deny 0.20.2
#
#   The crate is installed with `cargo install --locked --version VERSION` (its own
#   Cargo.lock, a target directory of its own that is removed afterwards) into
#   ${XDG_CACHE_HOME:-~/.cache}/booking-expire/cargo-tools/CRATE-VERSION/bin/BINARY
#   (BINARY defaults to CRATE) and reused from there afterwards: a warm call prints the
#   path at once. Concurrent calls wait for one install (flock). Build output goes to
#   CRATE-VERSION/install.log; on failure its tail is shown on stderr.
set -euo pipefail

die() { echo "cargo-tool: $*" >&2; exit 1; }
[[ $# -eq 2 || $# -eq 3 ]] || die "usage: $(basename "$0") CRATE VERSION [BINARY]"
crate=$1 version=$2 binary=${3:-$1}
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "VERSION must look like 1.2.3, got '$version'"

cache=${XDG_CACHE_HOME:-$HOME/.cache}/booking-expire/cargo-tools/$crate-$version
bin=$cache/bin/$binary
if [[ -x $bin ]]; then
    echo "$bin"
    exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [[ -x $bin ]]; then
    echo "$bin"
    exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
start=$SECONDS
echo "cargo-tool: installing $crate $version (once; cached in $cache)" >&2
# Its own target directory: the project's CARGO_TARGET_DIR holds the project's build.
if ! CARGO_TARGET_DIR=$work cargo install --locked --quiet --version "$version" \
    --root "$cache" "$crate" >"$cache/install.log" 2>&1; then
    tail -n 30 "$cache/install.log" >&2
    die "installing $crate $version failed (log: $cache/install.log)"
fi
[[ -x $bin ]] || die "$crate $version installed no $binary (log: $cache/install.log)"
echo "cargo-tool: installed $crate $version in $((SECONDS - start)) s" >&2
echo "$bin"
