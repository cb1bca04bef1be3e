#!/usr/bin/env bash
# Lint monitoring/grafana-dashboard.json with Grafana's dashboard linter
# (github.com/grafana/dashboard-linter), strict: warnings fail too.
#
# Usage: scripts/dashboard-lint.sh [DASHBOARD.json]
#
#   The linter is built once from the Go module proxy by scripts/go-tool.sh
#   (pinned below, cached under ${XDG_CACHE_HOME:-~/.cache}/booking-expire/go-tools/).
#   DASHBOARD_LINTER=/path/to/dashboard-linter uses that binary instead (e.g. one
#   built from a checkout of the same commit where the module proxy is not
#   reachable). Its rule exclusions, each with the reason, are in
#   monitoring/.lint.
set -euo pipefail

readonly LINTER_MODULE=github.com/grafana/dashboard-linter
readonly LINTER_VERSION=v0.2.0

cd "$(dirname "$0")/.."
dashboard=${1:-monitoring/grafana-dashboard.json}
linter=${DASHBOARD_LINTER:-}
if [[ -z $linter ]]; then
    linter=$(scripts/go-tool.sh "$LINTER_MODULE" "$LINTER_VERSION")
fi
"$linter" lint --strict --config monitoring/.lint "$dashboard"
