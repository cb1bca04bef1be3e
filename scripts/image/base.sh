#!/usr/bin/env bash
# A local stand-in for the Dockerfile's runtime base, gcr.io/distroless/cc-debian12:nonroot,
# made from the Debian 12 packages that image consists of and imported into podman's
# local storage under that name, so `podman build --pull=never` finds it there and
# nothing is pulled from a registry.
#
# What distroless cc-debian12 is (github.com/GoogleContainerTools/distroless):
#   static: base-files, netbase, tzdata; the CA bundle of ca-certificates (only
#           /etc/ssl/certs/ca-certificates.crt, as update-ca-certificates would write
#           it); /etc/passwd and /etc/group with root, nobody and nonroot (65532);
#           /home/nonroot; /tmp 1777; /etc/nsswitch.conf
#   base:   libc6, libssl3 (debian12; zlib1g only joined in debian13)
#   cc:     libgcc-s1, libgomp1, libstdc++6, gcc-12-base
#   :nonroot: USER 65532, WORKDIR /home/nonroot
# No package's maintainer scripts run (distroless runs none either), no dpkg database,
# no shell.
#
# The packages come from the machine's own apt sources (`apt-get download`, the
# versions `apt-cache policy` names), so the machine must be Debian 12. The root file
# system is cached as a tarball under ${XDG_CACHE_HOME:-~/.cache}/booking-expire/image-base,
# keyed by the package versions and this script; the import is skipped when the
# local image already carries that key.
#
# Usage: scripts/image/base.sh     (root; podman installed; prints the key on stdout)
set -euo pipefail

readonly IMAGE=gcr.io/distroless/cc-debian12:nonroot
readonly PACKAGES=(
    base-files netbase tzdata ca-certificates
    libc6 libssl3
    libgcc-s1 libgomp1 libstdc++6 gcc-12-base
)
readonly CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/booking-expire/image-base
readonly KEY_LABEL=booking-expire.base-stand-in

log() { printf 'image-base: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# shellcheck source=/dev/null
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[[ $codename == bookworm ]] || die "the stand-in is made of this machine's Debian packages: needs Debian 12 (bookworm), found '${codename:-unknown}'"

# package=version of each package, from one apt-cache call (each takes a second or two).
candidates() {
    apt-cache policy "${PACKAGES[@]}" 2>/dev/null |
        awk '/^[^ ].*:$/ { pkg = substr($0, 1, length($0) - 1) }
             /^  Candidate: / && $2 != "(none)" { print pkg "=" $2 }'
}
mapfile -t versions < <(candidates)
if ((${#versions[@]} != ${#PACKAGES[@]})); then
    apt-get update >/dev/null
    mapfile -t versions < <(candidates)
fi
((${#versions[@]} == ${#PACKAGES[@]})) || die "not every one of ${PACKAGES[*]} has a candidate version: ${versions[*]}"
key=$({ printf '%s\n' "${versions[@]}" | LC_ALL=C sort; cat "${BASH_SOURCE[0]}"; } | sha256sum | cut -c1-16)

tarball=$CACHE/$key.tar
if [[ ! -s $tarball ]]; then
    log "building the root file system ($key): ${versions[*]}"
    mkdir -p "$CACHE"
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    (cd "$work" && apt-get download "${versions[@]}" >/dev/null 2>&1) || die "apt-get download ${versions[*]}"
    root=$work/root
    mkdir -p "$root"
    for pkg in "${PACKAGES[@]}"; do
        [[ $pkg == ca-certificates ]] && continue
        dpkg-deb -x "$work/${pkg}"_*.deb "$root"
    done

    # ca-certificates: only the bundle update-ca-certificates would make from the
    # Mozilla certificates the package ships (its postinst enables all of them), and
    # the package's copyright; not the tool itself, nor the per-certificate links.
    dpkg-deb -x "$work"/ca-certificates_*.deb "$work/ca"
    mkdir -p "$root/etc/ssl/certs" "$root/usr/share/doc/ca-certificates"
    find "$work/ca/usr/share/ca-certificates" -name '*.crt' -type f | LC_ALL=C sort |
        while IFS= read -r crt; do
            cat "$crt"
            # update-ca-certificates adds a newline a file lacks at its end.
            [[ -z $(tail -c 1 "$crt") ]] || echo
        done >"$root/etc/ssl/certs/ca-certificates.crt"
    [[ -s $root/etc/ssl/certs/ca-certificates.crt ]] || die "no certificates in ca-certificates"
    cp "$work/ca/usr/share/doc/ca-certificates/copyright" "$root/usr/share/doc/ca-certificates/"

    # The files distroless writes itself.
    cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
    cat >"$root/etc/group" <<'EOF'
root:x:0:
nobody:x:65534:
tty:x:5:
staff:x:50:
nonroot:x:65532:
EOF
    cat >"$root/etc/nsswitch.conf" <<'EOF'
passwd:         files
group:          files
shadow:         files
hosts:          files dns
networks:       files
protocols:      files
services:       files
ethers:         files
rpc:            files
EOF
    chmod 0644 "$root/etc/passwd" "$root/etc/group" "$root/etc/nsswitch.conf"
    install -d -m 0700 "$root/root"
    install -d -m 0700 -o 65532 -g 65532 "$root/home/nonroot"
    install -d -m 1777 "$root/tmp"

    tar --numeric-owner --sort=name -C "$root" -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    # Older keys' tarballs are of no further use.
    find "$CACHE" -maxdepth 1 -name '*.tar' ! -name "$key.tar" -delete
fi

if [[ $(podman image inspect --format "{{index .Config.Labels \"$KEY_LABEL\"}}" "$IMAGE" 2>/dev/null) != "$key" ]]; then
    log "importing it as $IMAGE"
    previous=$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
    podman import \
        --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
        --change "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt" \
        --change "USER 65532" \
        --change "WORKDIR /home/nonroot" \
        --change "LABEL $KEY_LABEL=$key" \
        --quiet "$tarball" "$IMAGE" >/dev/null
    # The stand-in it replaces, unless images built on it still hold it.
    if [[ -n $previous ]]; then podman rmi "$previous" >/dev/null 2>&1 || true; fi
fi
printf '%s\n' "$key"
