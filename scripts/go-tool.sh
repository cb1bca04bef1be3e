#!/usr/bin/env bash
# Build a Go command once and print the path of the cached binary.
#
# Usage: scripts/go-tool.sh PACKAGE VERSION
#
#   e.g. scripts/go-tool.sh github.com/jaegertracing/jaeger/cmd/jaeger v1.76.0
#
#   The binary is built from the Go module proxy (`go get -tool`, then
#   `go build`, in a throwaway module, so replace directives of the tool's own
#   module do not matter) into
#   ${XDG_CACHE_HOME:-~/.cache}/booking-expire/go-tools/NAME-VERSION/NAME
#   and reused from there afterwards: a warm call prints the path at once.
#   Concurrent calls wait for one build (flock). Build output goes to
#   NAME-VERSION/build.log; on failure its tail is shown on stderr.
#
#   Needs `go` (1.24 or newer, for `go get -tool`); installs golang-go with
#   apt-get when missing and running as root.
set -euo pipefail

die() { echo "go-tool: $*" >&2; exit 1; }
[[ $# -eq 2 ]] || die "usage: $(basename "$0") PACKAGE VERSION"
pkg=$1 version=$2
name=${pkg##*/}
[[ $version =~ ^v[0-9A-Za-z.+-]+$ ]] || die "VERSION must look like v1.2.3, got '$version'"

cache=${XDG_CACHE_HOME:-$HOME/.cache}/booking-expire/go-tools/$name-$version
bin=$cache/$name
if [[ -x $bin ]]; then
    echo "$bin"
    exit 0
fi

if ! command -v go >/dev/null 2>&1; then
    # shellcheck source=SCRIPTDIR/lib.sh
    source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
    ensure_apt_packages golang-go || die "go is needed to build $pkg"
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
echo "go-tool: building $pkg@$version (once; cached in $cache)" >&2
if ! (
    cd "$work"
    go mod init booking-expire-tool >/dev/null 2>&1
    go get -tool "$pkg@$version"
    CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$work/$name" "$pkg"
) >"$cache/build.log" 2>&1; then
    tail -n 30 "$cache/build.log" >&2
    die "building $pkg@$version failed (log: $cache/build.log)"
fi
mv "$work/$name" "$bin"
echo "go-tool: built $name $version in $((SECONDS - start)) s" >&2
echo "$bin"
