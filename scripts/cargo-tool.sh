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
#   CRATE-VERSION/bin/build.log; on failure its tail is shown on stderr.
set -euo pipefail

die() { echo "cargo-tool: $*" >&2; exit 1; }
[[ $# -eq 2 || $# -eq 3 ]] || die "usage: $(basename "$0") CRATE VERSION [BINARY]"
crate=$1 version=$2 binary=${3:-$1}
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "VERSION must look like 1.2.3, got '$version'"

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cache=${XDG_CACHE_HOME:-$HOME/.cache}/booking-expire/cargo-tools/$crate-$version

# Its own target directory (in the scratch directory): the project's CARGO_TARGET_DIR
# holds the project's build.
cargo_install() { # OUT BINARY
    CARGO_TARGET_DIR=$PWD/target cargo install --locked --quiet --version "$version" \
        --root "$PWD/root" "$crate" &&
        mv "root/bin/$2" "$1/"
}

build_once cargo-tool "$cache/bin" "$crate $version" cargo_install "$binary" || exit 1
echo "$cache/bin/$binary"
