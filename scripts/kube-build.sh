#!/usr/bin/env bash
# Build a Kubernetes control plane (etcd, kube-apiserver,
# kube-controller-manager) once from Go modules and print the binaries' paths.
#
# Usage: scripts/kube-build.sh [--kubectl | --cached]
#
#   Prints one line per binary, NAME=PATH, in this order:
#     etcd=…  kube-apiserver=…  kube-controller-manager=…  [kubectl=…]
#   (`--kubectl` also builds kubectl, for poking at a server by hand;
#   `--cached` builds nothing: it prints the paths if all is built, else
#   exits 1; scripts/test.sh asks it whether Go is needed.)
#
#   The versions are pinned below. Binaries are cached outside the clone in
#   ${XDG_CACHE_HOME:-~/.cache}/booking-expire/go-tools/:
#     etcd-$ETCD_VERSION/etcd
#     kubernetes-$KUBE_VERSION/{kube-apiserver,kube-controller-manager,kubectl}
#   A warm call prints the paths at once. Concurrent calls wait for one build
#   (flock on each directory). Build output goes to build.log in the
#   directory; on failure its tail is shown on stderr.
#
#   etcd: `go.etcd.io/etcd/server/v3` (its main package is etcd) is built in a
#   throwaway module, like scripts/go-tool.sh does.
#
#   Kubernetes: the module `k8s.io/kubernetes` cannot be built by `go install`
#   because its go.mod replaces each staging module (k8s.io/api,
#   k8s.io/client-go, …) by a directory of its own repository. The throwaway
#   module here requires k8s.io/kubernetes at $KUBE_VERSION and replaces each
#   of those staging modules (read from that go.mod) by its published
#   version v0.MINOR.PATCH, which is the same source. The version variables
#   of k8s.io/component-base/version are set so `/version` reports
#   $KUBE_VERSION.
#
#   Needs `go` 1.24 or newer (a newer toolchain a module asks for is fetched
#   by go itself through the module proxy).
set -euo pipefail

ETCD_VERSION=v3.6.17
KUBE_VERSION=v1.34.12

die() { echo "kube-build: $*" >&2; exit 1; }
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

want_kubectl=false
only_cached=false
case "${1:-}" in
"") ;;
--kubectl) want_kubectl=true ;;
--cached) only_cached=true ;;
*) die "usage: $(basename "$0") [--kubectl | --cached]" ;;
esac

root=${XDG_CACHE_HOME:-$HOME/.cache}/booking-expire/go-tools
etcd_dir=$root/etcd-$ETCD_VERSION
kube_dir=$root/kubernetes-$KUBE_VERSION
kube_cmds=(kube-apiserver kube-controller-manager)
$want_kubectl && kube_cmds+=(kubectl)

print_paths() {
    echo "etcd=$etcd_dir/etcd"
    local name
    for name in "${kube_cmds[@]}"; do echo "$name=$kube_dir/$name"; done
}

if all_executable "$etcd_dir" etcd && all_executable "$kube_dir" "${kube_cmds[@]}"; then
    print_paths
    exit 0
fi
$only_cached && exit 1

require_go kube-build "etcd and Kubernetes"

# The two builds below run where `set -e` does not stop them (build_once): each step
# returns on failure.
setup_etcd() { # OUT NAME
    local out=$1
    go mod init booking-expire-etcd || return 1
    go get -tool "go.etcd.io/etcd/server/v3@$ETCD_VERSION" || return 1
    CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$out/etcd" go.etcd.io/etcd/server/v3
}

setup_kube() { # OUT NAME…
    local out=$1 gomod staging m minor patch pkgs=() name
    shift
    gomod=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^\s*"GoMod": "\(.*\)",\?$/\1/p')
    [[ -f $gomod ]] || { echo "no go.mod for k8s.io/kubernetes@$KUBE_VERSION"; return 1; }
    staging=$(sed -n 's|^\s*\(k8s\.io/[a-z0-9-]*\) => \./staging/src/.*|\1|p' "$gomod")
    [[ -n $staging ]] || { echo "no staging replaces in $gomod"; return 1; }
    IFS=. read -r _ minor patch <<<"${KUBE_VERSION#v}"
    go mod init booking-expire-kube || return 1
    # Same language version and GODEBUG defaults as Kubernetes' own go.mod.
    go mod edit -go="$(sed -n 's/^go //p' "$gomod")" || return 1
    if grep -q '^godebug ' "$gomod"; then
        go mod edit -godebug="$(sed -n 's/^godebug //p' "$gomod")" || return 1
    fi
    for m in $staging; do
        go mod edit -replace="$m=$m@v0.$minor.$patch" || return 1
    done
    for name in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$name"); done
    go get "k8s.io/kubernetes@$KUBE_VERSION" "${pkgs[@]/%/@$KUBE_VERSION}" || return 1
    local v=k8s.io/component-base/version
    local ldflags="-s -w -X $v.gitVersion=$KUBE_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
    CGO_ENABLED=0 go build -trimpath -ldflags="$ldflags" -o "$out/" "${pkgs[@]}"
}

build_once kube-build "$etcd_dir" "etcd-$ETCD_VERSION" setup_etcd etcd || exit 1
build_once kube-build "$kube_dir" "kubernetes-$KUBE_VERSION" setup_kube "${kube_cmds[@]}" || exit 1
print_paths
