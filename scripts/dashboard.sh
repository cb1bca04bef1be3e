#!/usr/bin/env bash
# Write the Grafana dashboard, monitoring/grafana-dashboard.json, from its code:
# monitoring/dashboard/generate.py, built with Grafana's Foundation SDK
# (grafana-foundation-sdk from PyPI, Apache-2.0), in a venv made once outside the
# repository (python_venv in scripts/lib.sh). Change the dashboard there, run this,
# and commit both files.
#
# Usage: scripts/dashboard.sh [--check]
#
#   --check   write nothing; show the difference and exit 1 when the committed JSON is
#             not what the generator writes (scripts/check-deploy.sh runs this)
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

# PyPI versions of the SDK are EPOCH!GRAFANA-VERSION (types for that Grafana, here
# 11.6): pip would pick the highest epoch, whatever the Grafana version, so pin exactly.
readonly GRAFANA_FOUNDATION_SDK='1769699379!11.6.0'

ensure_apt_packages python3-venv
venv=$(python_venv "grafana-foundation-sdk==$GRAFANA_FOUNDATION_SDK")
exec "$venv/bin/python" monitoring/dashboard/generate.py "$@"
