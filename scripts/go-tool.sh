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

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cache=${XDG_CACHE_HOME:-$HOME/.cache}/booking-expire/go-tools/$name-$version
if ! all_executable "$cache" "$name"; then
    require_go go-tool "$pkg"
fi

# In a throwaway module: replace directives of the tool's own module do not matter.
go_build() { # OUT NAME
    go mod init booking-expire-tool &&
        go get -tool "$pkg@$version" &&
        CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$1/$2" "$pkg"
}

build_once go-tool "$cache" "$pkg@$version" go_build "$name" || exit 1
echo "$cache/$name"
