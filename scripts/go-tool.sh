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
#   Needs `go` 1.24 or newer (it fetches a newer toolchain the tool asks for
#   through the module proxy).
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

# `go get -tool` needs go 1.24 (Debian 12's golang-go is 1.19); a newer toolchain
# the tool's module asks for is fetched by go itself (GOTOOLCHAIN).
go_minor=$(go env GOVERSION 2>/dev/null | sed -n 's/^go1\.\([0-9]*\).*/\1/p' || true)
if [[ -z $go_minor ]] || ((go_minor < 24)); then
    die "go 1.24 or newer is needed to build $pkg (found: $(go env GOVERSION 2>/dev/null || echo none)); install Go 1.24 or newer first"
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
