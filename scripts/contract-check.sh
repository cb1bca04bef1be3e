#!/usr/bin/env bash
# The event contract's checks (contracts/), for each major version: v1
# (asyncapi.yaml) and v2 (asyncapi-v2.yaml):
#   1. the documents and the released ones are valid AsyncAPI (the official
#      @asyncapi/parser);
#   2. each version's producer and consumer JSON Schemas are what its document
#      generates;
#   3. the documents' examples and the case tables (validation-cases.json,
#      validation-cases-v2.json) pass or fail each schema as the table says, formats
#      asserted (ajv + ajv-formats);
#   4. each document is compatible with the released document of its major version
#      (contracts/released/asyncapi-v1.yaml, asyncapi-v2.yaml), by @asyncapi/diff
#      with the evolution rules as overrides: a breaking change fails;
#   5. the compatibility rules themselves, on purpose-made edits, and v2 being a
#      breaking change of v1 (node --test).
#
# Usage: scripts/contract-check.sh [--write]
#   --write  regenerate the JSON Schemas from the documents instead of checking them
#
# The npm packages are pinned by contracts/tooling/package-lock.json and installed
# with `npm ci` into ${XDG_CACHE_HOME:-~/.cache}/booking-expire/npm-<hash of the lock
# file>, outside the clone: a warm run installs nothing. nodejs and npm come from
# Debian when missing (root only).
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

write=0
case "${1:-}" in
    "") ;;
    --write) write=1 ;;
    *) echo "usage: $0 [--write]" >&2; exit 2 ;;
esac

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    ensure_apt_packages nodejs npm
fi

TOOLING=contracts/tooling
key=$(cat "$TOOLING/package.json" "$TOOLING/package-lock.json" | sha256sum | cut -c1-16)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/booking-expire/npm-contract-$key"

install_tooling() {
    [[ -f "$cache/.installed" ]] && return 0
    echo "== npm ci (contract tooling) into $cache" >&2
    rm -rf "$cache"
    mkdir -p "$cache"
    cp "$TOOLING/package.json" "$TOOLING/package-lock.json" "$cache/"
    local log
    log=$(mktemp)
    # --ignore-scripts: nothing here needs an install script (one dependency's
    # only script is usage telemetry).
    if ! (cd "$cache" && npm ci --ignore-scripts --no-audit --no-fund) >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        rm -rf "$cache"
        echo "npm ci failed" >&2
        return 1
    fi
    rm -f "$log"
    touch "$cache/.installed"
}
mkdir -p "$(dirname "$cache")"
(
    flock -w 900 9 || { echo "timed out waiting for $cache.lock" >&2; exit 1; }
    install_tooling
) 9>"$cache.lock"

export NODE_PATH="$cache/node_modules"
contract() { node "$TOOLING/contract.cjs" "$@"; }

echo "== AsyncAPI documents" >&2
contract validate contracts/asyncapi.yaml contracts/asyncapi-v2.yaml contracts/released/*.yaml
echo "== JSON Schemas generated from contracts/asyncapi.yaml and asyncapi-v2.yaml" >&2
if (( write )); then contract generate; else contract generate --check; fi
echo "== examples and validation cases against both schemas" >&2
contract messages
echo "== compatibility with the released contracts" >&2
contract compat contracts/released/asyncapi-v1.yaml contracts/asyncapi.yaml
contract compat contracts/released/asyncapi-v2.yaml contracts/asyncapi-v2.yaml
echo "== the compatibility rules on purpose-made edits" >&2
node --test "$TOOLING/compat.test.cjs"
