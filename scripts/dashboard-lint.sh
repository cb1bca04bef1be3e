#!/usr/bin/env bash
# Lint a Grafana dashboard (default monitoring/grafana-dashboard.json) with the rules of
# tests/dashboard.rs: those of Grafana's dashboard linter that apply to this dashboard
# (data source and job variables, every panel and query on the data source variable,
# every query parsed by promtool, rate ranges of $__rate_interval, job matchers, units,
# titles and descriptions, unique panel ids). `scripts/test.sh` runs the same test on
# the shipped dashboard, with copies broken on purpose to show each rule fails.
#
# Usage: scripts/dashboard-lint.sh [DASHBOARD.json]
#
#   Needs promtool (Debian's prometheus). Grafana's own linter
#   (github.com/grafana/dashboard-linter) is not used: its module cannot be built from
#   the Go module proxy this project builds from (docs/design.md, Observability).
set -euo pipefail

cd "$(dirname "$0")/.."
dashboard=${1:-monitoring/grafana-dashboard.json}
[[ -r $dashboard ]] || { echo "dashboard-lint: cannot read $dashboard" >&2; exit 64; }
DASHBOARD=$(realpath "$dashboard") exec cargo test --locked --quiet --test dashboard -- \
    --exact the_dashboard_passes_every_rule
