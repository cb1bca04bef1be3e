#!/usr/bin/env bash
# The Kafka ACLs of topic pin.crm.booking-expired.v1, as code: the relay writes it,
# the three consumer teams read it, nobody else does either. Applied with Kafka's own
# AclCommand (the jars of scripts/kafka-start.sh, resolved with Maven and cached).
#
# Usage: scripts/kafka-acls.sh --bootstrap-server HOST:PORT [options]
#
#   --command-config FILE   client properties of an admin principal allowed to
#                           alter ACLs (security.protocol, sasl.*, ssl.*)
#   --topic NAME            default pin.crm.booking-expired.v1
#   --relay PRINCIPAL       the principal booking-expire relay-outbox runs as
#                           (default User:booking-expire)
#   --consumer PRINCIPAL=GROUP
#                           a consumer principal and its consumer group; repeat it.
#                           Default: User:chessboard=chessboard,
#                           User:messenger=messenger, User:notifications=notifications
#                           (the first --consumer replaces the whole default list)
#   --dry-run               print the AclCommand invocations, change nothing
#
# What it grants (Allow, any host), and nothing else:
#   relay     Write and Describe on the topic. The relay's producer is idempotent
#             (not transactional): since Kafka 3.0 Write on a topic implies the
#             cluster's IdempotentWrite, and no transactional id is used.
#   consumer  Read on the topic (Read implies Describe) and Read on its own group.
# With an authorizer that denies what no ACL allows (KRaft's StandardAuthorizer,
# allow.everyone.if.no.acl.found=false), every other principal can neither read nor
# write the topic. Adding an ACL that exists is a no-op, so the script can be rerun.
# It adds and never removes: a principal taken off this list keeps its ACLs until
# they are removed with AclCommand --remove. It ends by listing the topic's ACLs.
set -euo pipefail

# shellcheck source=scripts/kafka/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/kafka/lib.sh"

bootstrap=""
command_config=""
topic="pin.crm.booking-expired.v1"
relay="User:booking-expire"
consumers=("User:chessboard=chessboard" "User:messenger=messenger" "User:notifications=notifications")
custom_consumers=0
dry_run=0

while (( $# )); do
  case "$1" in
    --bootstrap-server) bootstrap="${2:?--bootstrap-server needs a value}"; shift 2 ;;
    --command-config) command_config="${2:?--command-config needs a value}"; shift 2 ;;
    --topic) topic="${2:?--topic needs a value}"; shift 2 ;;
    --relay) relay="${2:?--relay needs a value}"; shift 2 ;;
    --consumer)
      (( custom_consumers )) || consumers=()
      custom_consumers=1
      consumers+=("${2:?--consumer needs PRINCIPAL=GROUP}"); shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
[[ -n "$bootstrap" ]] || die "--bootstrap-server is required (see --help)"

principal_ok() { [[ "$1" =~ ^User:[^=[:space:]]+$ ]]; }
principal_ok "$relay" || die "--relay: want User:NAME, got $relay"

acl() {
  local -a cmd=(org.apache.kafka.tools.AclCommand --bootstrap-server "$bootstrap")
  [[ -z "$command_config" ]] || cmd+=(--command-config "$command_config")
  cmd+=("$@")
  if (( dry_run )); then
    printf 'AclCommand'
    printf ' %q' "${cmd[@]:1}"
    printf '\n'
  elif [[ "$1" == --list ]]; then
    (kafka_run_class "${cmd[@]}")
  else
    # A subshell: kafka_run_class may exec the JVM.
    (kafka_run_class "${cmd[@]}") >/dev/null
  fi
}

log "relay $relay: Write, Describe on topic $topic"
acl --add --allow-principal "$relay" --operation Write --operation Describe --topic "$topic"

for entry in "${consumers[@]}"; do
  principal="${entry%%=*}"
  group="${entry#*=}"
  if ! principal_ok "$principal" || [[ "$entry" != *=* || -z "$group" ]]; then
    die "--consumer: want User:NAME=GROUP, got $entry"
  fi
  log "consumer $principal: Read on topic $topic and on group $group"
  acl --add --allow-principal "$principal" --operation Read --topic "$topic" --group "$group"
done

acl --list --topic "$topic"
