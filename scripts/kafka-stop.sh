#!/usr/bin/env bash
# Stop a broker started by scripts/kafka-start.sh. STATE_DIR (config, data,
# log) is kept, so kafka-start.sh can restart the same broker from it.
#
# Usage: scripts/kafka-stop.sh STATE_DIR [--kill]
#
#   It runs `testbed stop STATE_DIR [--kill]` (crates/testbed, built as
#   kafka-start.sh builds it).
#
#   STATE_DIR of a cluster (KAFKA_NODES=3) stops every node, all at once;
#   STATE_DIR/nodeN stops that node only.
#
#   default  SIGTERM (clean shutdown), then SIGKILL after KAFKA_STOP_TIMEOUT
#            seconds (default 30)
#   --kill   SIGKILL at once: a crash, for tests of unclean broker loss
#
# Exits 0 when the broker is stopped, also if it was not running.
set -euo pipefail

# shellcheck source=SCRIPTDIR/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=SCRIPTDIR/kafka/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/kafka/lib.sh"

usage() { die "usage: $(basename "$0") STATE_DIR [--kill]"; }

main() {
  local bin
  case $# in
    1) ;;
    2) [[ "$2" == --kill ]] || usage ;;
    *) usage ;;
  esac
  [[ -d "$1" ]] || die "STATE_DIR '$1' is not a directory"
  bin="$(cd "$SCRIPTS_DIR/.." && testbed_bin)" \
    || die "could not build the testbed (cargo build -p booking-expire-testbed)"
  BOOKING_EXPIRE_SCRIPTS="$SCRIPTS_DIR" exec "$bin" stop "$@"
}

main "$@"
