#!/usr/bin/env bash
# Offline checks of everything that deploys booking-expire:
#
#   1. cronjob.yaml and docs/runbooks/operator-jobs.yaml against the Kubernetes schemas
#      (kubernetes-validate from PyPI, which bundles them; strict: unknown fields are
#      errors), for the oldest Kubernetes the manifests need and the newest bundled;
#   2. their values, exactly, the Dockerfile's key properties, and that every alert
#      reads a pushed metric and links an existing runbook section
#      (scripts/deploy/check_deploy.py);
#   3. the image's runtime libraries: the binary runs, as user 65532, in a root file
#      system made of the Debian 12 packages distroless cc-debian12 consists of, plus
#      what the Dockerfile adds (no Docker engine needed);
#   4. the alert rules: promtool check rules, promtool test rules;
#   5. the Grafana dashboard: monitoring/grafana-dashboard.json is what its generator
#      writes (scripts/dashboard.sh --check);
#   6. the image itself: scripts/image-test.sh builds the Dockerfile with podman on a
#      local stand-in of its base and runs it as the CronJob does (see that script).
#
# Installs what it needs when run as root: Debian's prometheus (promtool),
# prometheus-pushgateway (for tests/it/metrics.rs), time and python3-venv; Python venvs
# with kubernetes-validate and Grafana's Foundation SDK under
# ${XDG_CACHE_HOME:-~/.cache}/booking-expire (not in the repository; python_venv in
# scripts/lib.sh). Prints PASS/FAIL lines and exits non-zero on any failure.
#
# Usage: scripts/check-deploy.sh
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

readonly KUBERNETES_VALIDATE=1.37.0
# timeZone is GA from 1.27 (podFailurePolicy beta, on by default, from 1.26); 1.37 is
# the newest kubernetes-validate bundles.
readonly KUBERNETES_VERSIONS=(1.27.0 1.37.0)
readonly CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/booking-expire
readonly MANIFESTS=(cronjob.yaml docs/runbooks/operator-jobs.yaml)

failures=0
pass() { echo "PASS  $*"; }
fail() { echo "FAIL  $*"; failures=$((failures + 1)); }

ensure_apt_packages prometheus prometheus-pushgateway time python3-venv

echo "== Kubernetes schemas (kubernetes-validate $KUBERNETES_VALIDATE, strict)" >&2
venv=$(python_venv "kubernetes-validate==$KUBERNETES_VALIDATE")
for version in "${KUBERNETES_VERSIONS[@]}"; do
    for manifest in "${MANIFESTS[@]}"; do
        if out=$("$venv/bin/kubernetes-validate" --strict --quiet -k "$version" "$manifest" 2>&1); then
            pass "$manifest is valid for Kubernetes $version (strict)"
        else
            fail "$manifest for Kubernetes $version: $out"
        fi
    done
done

echo "== deployment values and the Dockerfile" >&2
"$venv/bin/python" scripts/deploy/check_deploy.py . || failures=$((failures + 1))

echo "== the image's runtime libraries (distroless cc-debian12's packages)" >&2
# github.com/GoogleContainerTools/distroless: base/config.bzl (debian12: libc6,
# libssl3) and cc/config.bzl (libgomp1, libstdc++6, libgcc-s1, gcc-12-base).
readonly DISTROLESS_CC_DEBIAN12=(libc6 libssl3 libgomp1 libstdc++6 libgcc-s1 gcc-12-base)
# BOOKING_EXPIRE_BIN: a binary built already (scripts/test.sh passes the tests'), which
# is then checked as it is: a `cargo build` here would replace the tests' binary while
# they run it (their build has the dev-dependencies' features, so it is another build's
# file at the same path), and a test starting it at that moment would find no file.
if [[ -n ${BOOKING_EXPIRE_BIN:-} ]]; then
    bin=$BOOKING_EXPIRE_BIN
else
    cargo build --locked --quiet
    bin=${CARGO_TARGET_DIR:-target}/debug/booking-expire
fi
if [[ $(id -u) -ne 0 ]]; then
    fail "runtime libraries: chroot needs root"
else
    if ! apt-cache show libc6 >/dev/null 2>&1; then apt-get update >/dev/null; fi
    debs=$CACHE/distroless-cc-debian12
    mkdir -p "$debs"
    missing=()
    for pkg in "${DISTROLESS_CC_DEBIAN12[@]}"; do
        compgen -G "$debs/${pkg}_*.deb" >/dev/null || missing+=("$pkg")
    done
    if ((${#missing[@]} > 0)); then
        (cd "$debs" && apt-get download "${missing[@]}" >/dev/null 2>&1) ||
            fail "runtime libraries: apt-get download ${missing[*]}"
    fi
    rootfs=$(mktemp -d)
    trap 'rm -rf "$rootfs"' EXIT
    for pkg in "${DISTROLESS_CC_DEBIAN12[@]}"; do
        # The newest downloaded version of each package.
        deb=$(find "$debs" -maxdepth 1 -name "${pkg}_*.deb" | sort -V | tail -n 1)
        [[ -n $deb ]] && dpkg-deb -x "$deb" "$rootfs"
    done
    install -D -m 0755 "$bin" "$rootfs/usr/local/bin/booking-expire"
    run_in_image() { chroot --userspec=65532:65532 "$rootfs" /usr/local/bin/booking-expire --version 2>&1; }
    if out=$(run_in_image); then
        fail "runtime libraries: the binary runs without the Dockerfile's libz.so.1; drop that step ($out)"
    elif [[ $out == *"libz.so.1"* ]]; then
        pass "runtime libraries: without the Dockerfile's step, only libz.so.1 is missing"
    else
        fail "runtime libraries: $out"
    fi
    # What the Dockerfile adds: Debian 12's libz.so.1 at the loader's multiarch path.
    multiarch=$(gcc -print-multiarch)
    install -D -m 0644 "$(readlink -f "/usr/lib/$multiarch/libz.so.1")" "$rootfs/usr/lib/$multiarch/libz.so.1"
    if out=$(run_in_image) && [[ $out == "booking-expire "* ]]; then
        pass "runtime libraries: the binary runs as 65532 on distroless cc-debian12 + libz.so.1 ($out)"
    else
        fail "runtime libraries: $out"
    fi
fi

echo "== alert rules (promtool)" >&2
if out=$(promtool check rules monitoring/booking-expiration.rules.yml 2>&1); then
    pass "promtool check rules: $(echo "$out" | grep -o '[0-9]* rules found')"
else
    fail "promtool check rules: $out"
fi
if out=$(cd monitoring && promtool test rules booking-expiration.rules.test.yml 2>&1); then
    pass "promtool test rules: monitoring/booking-expiration.rules.test.yml"
else
    fail "promtool test rules: $out"
fi

echo "== Grafana dashboard (scripts/dashboard.sh --check)" >&2
# The metrics its panels read are checked in tests/it/dashboard.rs, its queries against a
# real Prometheus in tests/it/prometheus.rs.
if out=$(scripts/dashboard.sh --check 2>&1); then
    pass "$out"
else
    fail "monitoring/grafana-dashboard.json is not what its generator writes:
$out"
fi

echo "== the image, built and run (scripts/image-test.sh)" >&2
scripts/image-test.sh || failures=$((failures + 1))

if ((failures > 0)); then
    echo "check-deploy: $failures check(s) failed" >&2
    exit 1
fi
echo "check-deploy: all passed" >&2
