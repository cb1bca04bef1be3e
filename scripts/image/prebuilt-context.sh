#!/usr/bin/env bash
# A build context for the Dockerfile's runtime stage alone (--build-arg BINARY=prebuilt):
# DIR/prebuilt/ gets what the build stage puts in /out, from this host, which must be
# Debian 12 like the build stage (the binary links its glibc and OpenSSL 3):
#
#   usr/local/bin/booking-expire       the given binary
#   usr/share/man/man1/*.1             the man pages, docs/reference/man/ of this clone
#   usr/lib/<multiarch>/libz.so.1      the host's zlib (librdkafka links it; distroless
#                                      cc-debian12 lacks it), as the build stage copies
#                                      the Rust image's
#
# Usage: scripts/image/prebuilt-context.sh BINARY DIR
#   then: docker build --build-arg BINARY=prebuilt -f Dockerfile -t IMAGE DIR
set -euo pipefail

if [[ $# -ne 2 ]]; then
    echo "usage: $(basename "$0") BINARY DIR" >&2
    exit 2
fi
bin=$1 dir=$2
[[ -x $bin ]] || { echo "prebuilt-context: $bin is not an executable file" >&2; exit 1; }
multiarch=$(gcc -print-multiarch)
zlib=$(readlink -f "/usr/lib/$multiarch/libz.so.1")
[[ -f $zlib ]] || { echo "prebuilt-context: no /usr/lib/$multiarch/libz.so.1 (zlib1g)" >&2; exit 1; }
rm -rf "$dir/prebuilt"
install -D -m 0755 "$bin" "$dir/prebuilt/usr/local/bin/booking-expire"
install -D -m 0644 "$zlib" "$dir/prebuilt/usr/lib/$multiarch/libz.so.1"
man=$(cd "$(dirname "$0")/../.." && pwd)/docs/reference/man
install -D -m 0644 -t "$dir/prebuilt/usr/share/man/man1" "$man"/*.1
