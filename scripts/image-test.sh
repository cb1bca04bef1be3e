#!/usr/bin/env bash
# The container image, built from the shipped Dockerfile and run as the CronJob runs it.
#
#   1. builds a local stand-in for the Dockerfile's base, gcr.io/distroless/cc-debian12:
#      nonroot, from the Debian 12 packages that image is made of (scripts/image/base.sh;
#      nothing is pulled), cached under ${XDG_CACHE_HOME:-~/.cache}/booking-expire;
#   2. builds the Dockerfile with podman (--pull=never), its runtime stage fed the binary
#      built on this host (--build-arg BINARY=prebuilt: the build stage's Rust image
#      cannot be pulled here), and tags it localhost/booking-expire:test;
#   3. checks the image (user, entrypoint, no shell, the time zone database) and runs it
#      with the CronJob's security context (--read-only, --user 65532, --cap-drop ALL,
#      no-new-privileges) on the host network against a throwaway PostgreSQL and Kafka:
#      --version (the commit passed as the build argument), migrate (the image migrates
#      the database itself), dry-run, backlog, run-once, relay-outbox (read back from the
#      topic), and verify-full TLS to PostgreSQL with the CA mounted read-only.
#
# Installs what it needs when run as root (podman, runc); needs root (rootful podman).
# Running containers needs runc (crun refuses some kernels' cgroups) and explicit
# rlimits (some VMs cannot raise them): a containers.conf given through CONTAINERS_CONF
# carries both. The binary is $CARGO_TARGET_DIR/debug/booking-expire (`cargo build
# --locked`), or BOOKING_EXPIRE_BIN if set (e.g. a release build, for the real size).
# Always starts its own PostgreSQL and Kafka (it migrates and seeds the database).
# Prints PASS/FAIL lines and exits non-zero on any failure.
#
# Usage: scripts/image-test.sh
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

readonly IMAGE=localhost/booking-expire:test
readonly BASE=gcr.io/distroless/cc-debian12:nonroot
readonly TOPIC=pin.crm.booking-expired.v1
readonly IMAGE_USER=65532
# What the CronJob's pod and container securityContext amount to.
readonly SECURITY=(--read-only --cap-drop ALL --security-opt no-new-privileges --network host)
readonly CRONJOB=(--user "$IMAGE_USER" "${SECURITY[@]}")

failures=0
pass() { echo "PASS  $*"; }
fail() { echo "FAIL  $*"; failures=$((failures + 1)); }
finish() {
    if ((failures > 0)); then
        echo "image-test: $failures check(s) failed" >&2
        exit 1
    fi
    echo "image-test: all passed" >&2
}
elapsed() { echo "$((SECONDS - $1))s"; }

if [[ $(id -u) -ne 0 ]]; then
    fail "image test: needs root (rootful podman, package installs)"
    finish
fi
ensure_build_deps
ensure_apt_packages podman runc

work=$(mktemp -d)
tls_state=""
cleanup() {
    podman rm -f -t 0 be-image-test-uid >/dev/null 2>&1 || true
    if [[ -n $tls_state ]]; then
        scripts/pg-stop.sh "$tls_state" >/dev/null 2>&1 || true
        rm -rf "$tls_state"
    fi
    stop_services
    rm -rf "$work"
}
trap cleanup EXIT

cat >"$work/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]

[engine]
runtime = "runc"
EOF
export CONTAINERS_CONF=$work/containers.conf

echo "== the image: stand-in base, podman build of the Dockerfile" >&2
# The commit --version names: the image's build argument, as a release build passes it
# (the build context has no .git); the binary built here gets it the same way.
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
if [[ -n ${BOOKING_EXPIRE_BIN:-} ]]; then
    bin=$BOOKING_EXPIRE_BIN
else
    BOOKING_EXPIRE_COMMIT=$commit cargo build --locked --quiet
    bin=${CARGO_TARGET_DIR:-target}/debug/booking-expire
fi

start=$SECONDS
if key=$(scripts/image/base.sh); then
    pass "stand-in base $BASE ($key) in $(elapsed "$start")"
else
    fail "stand-in base $BASE"
    finish
fi

scripts/image/prebuilt-context.sh "$bin" "$work/context"
# Untagged images made from a stand-in base (earlier bases and test images) are this
# script's leftovers.
podman images --quiet --filter dangling=true --filter label=booking-expire.base-stand-in |
    xargs -r podman rmi >/dev/null 2>&1 || true
dangling_before=$(podman images --quiet --filter dangling=true | sort)
start=$SECONDS
# --network none: no step of the runtime stage needs the network.
rc=0
out=$(podman build --pull=never --network none --build-arg BINARY=prebuilt \
    --build-arg BOOKING_EXPIRE_COMMIT="$commit" -f "$PWD/Dockerfile" -t "$IMAGE" "$work/context" 2>&1) || rc=$?
# The prebuilt stage's image, a failed build's layers and the previous test image are
# left untagged: remove what this build left so.
comm -13 <(echo "$dangling_before") <(podman images --quiet --filter dangling=true | sort) |
    xargs -r podman rmi >/dev/null 2>&1 || true
if ((rc == 0)); then
    pass "podman build --pull=never of the Dockerfile (BINARY=prebuilt) in $(elapsed "$start")"
else
    fail "podman build of the Dockerfile: $(grep -m 1 -i error <<<"$out" || tail -n 1 <<<"$out")"
    tail -n 15 <<<"$out" >&2
    finish
fi

size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
base_size=$(podman image inspect --format '{{.Size}}' "$BASE")
bin_size=$(stat -c %s "$bin")
mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1e6 }'; }
echo "INFO  image size $(mb "$size"): base $(mb "$base_size"), binary $(mb "$bin_size") ($bin)"

echo "== the image's configuration and files" >&2
user=$(podman image inspect --format '{{.Config.User}}' "$IMAGE")
if [[ $user == "$IMAGE_USER:$IMAGE_USER" ]]; then
    pass "image user is $user"
else
    fail "image user: '$user', want $IMAGE_USER:$IMAGE_USER"
fi
entrypoint=$(podman image inspect --format '{{json .Config.Entrypoint}}' "$IMAGE")
if [[ $entrypoint == '["/usr/local/bin/booking-expire"]' ]]; then
    pass "entrypoint $entrypoint"
else
    fail "entrypoint: $entrypoint"
fi

cid=$(podman create "$IMAGE")
podman export "$cid" | tar -t | sed 's|^\./||; s|/$||' | sort >"$work/files"
podman rm "$cid" >/dev/null
if shells=$(grep -E '(^|/)(s?bin)/(sh|bash|dash|ash|busybox)$' "$work/files"); then
    fail "the image has a shell: $shells"
else
    pass "no shell in the image's files (/bin/sh, bash, dash, busybox)"
fi
if out=$(podman run --rm "${CRONJOB[@]}" --entrypoint /bin/sh "$IMAGE" -c true 2>&1); then
    fail "/bin/sh ran in the image"
elif [[ $out == *"/bin/sh"*"no such file or directory"* ]]; then
    pass "/bin/sh cannot be run: it is absent"
else
    fail "/bin/sh: unexpected failure: $out"
fi
zones=(usr/share/zoneinfo/Etc/UTC usr/share/zoneinfo/Europe/Moscow usr/share/zoneinfo/America/New_York)
missing=()
for zone in "${zones[@]}"; do grep -qx "$zone" "$work/files" || missing+=("$zone"); done
if ((${#missing[@]} == 0)); then
    pass "time zone database present (${zones[*]})"
else
    fail "time zone database: missing ${missing[*]}"
fi
# The man pages generated into docs/reference/man/, one per command.
want_man=$(cd docs/reference/man && printf '%s\n' *.1 | sed 's|^|usr/share/man/man1/|' | sort)
got_man=$(grep -E '^usr/share/man/man1/booking-expire.*\.1$' "$work/files" || true)
if [[ -n $want_man && $got_man == "$want_man" ]]; then
    pass "man pages in /usr/share/man/man1 ($(wc -l <<<"$got_man"))"
else
    fail "man pages: the image has '$got_man', want '$want_man'"
fi

echo "== the image run as the CronJob runs it" >&2
# booking-expire RELEASE (commit 12 HEX, schema N): N the highest migration of sql/;
# RELEASE Cargo.toml's version on its release's commit (or before scripts/releases.tsv
# names it), else the next minor version unreleased, VERSION-dev+COMMIT (build.rs).
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
schema=$(find sql -maxdepth 1 -name '[0-9]*_*.sql' -printf '%f\n' | sed 's/_.*//' | sort -n | tail -n 1)
schema=$((10#$schema))
release_of() { # COMMIT12 -> what build.rs calls that build
    local released
    released=$(awk -F'\t' -v v="$version" '$1 == v { print $2 }' scripts/releases.tsv)
    if [[ -z $released || ( $1 != unknown && $released == "$1"* ) ]]; then
        echo "$version"
    else
        local major=${version%%.*} rest=${version#*.}
        echo "$major.$(( ${rest%%.*} + 1 )).0-dev+$1"
    fi
}
want_version="booking-expire $(release_of "${commit:0:12}") (commit ${commit:0:12}, schema $schema)"
if [[ -n ${BOOKING_EXPIRE_BIN:-} ]]; then
    # A binary built elsewhere names its own commit.
    want_version="booking-expire $(release_of '<its own>') (commit <its own>, schema $schema)"
fi
out=$(podman run --rm "${CRONJOB[@]}" "$IMAGE" --version 2>&1) || true
own=$(sed -n 's/.*(commit \([0-9a-f]\{12\}\|unknown\), schema.*/\1/p' <<<"$out")
if [[ $out == "$want_version" ]] ||
    { [[ -n ${BOOKING_EXPIRE_BIN:-} && -n $own ]] &&
        [[ $out == "booking-expire $(release_of "$own") (commit $own, schema $schema)" ]]; }; then
    pass "--version: $out"
else
    fail "--version: '$out', want '$want_version'"
fi

# Always throwaway services: the test migrates and seeds the database.
unset DATABASE_URL KAFKA_BROKERS
start=$SECONDS
start_postgres
start_kafka
echo "services up in $(elapsed "$start")" >&2
scripts/kafka-topic.sh "$KAFKA_BROKERS" "$TOPIC" 6 >/dev/null 2>&1
# The configuration reaches the container as the CronJob's Secret does: environment.
be() { podman run --rm "${CRONJOB[@]}" -e DATABASE_URL -e KAFKA_BROKERS "$IMAGE" "$@"; }
# The image migrates the database itself, as a deploy's migration Job does.
if out=$(be migrate 2>"$work/err") && [[ $out == *"\"SchemaVersion\":$schema,"* ]]; then
    pass "migrate: the image applies its migrations: $out"
else
    fail "migrate: exit $?: $out $(tail -n 3 "$work/err")"
    finish
fi
psql "$DATABASE_URL" -X -q -v ON_ERROR_STOP=1 -f scripts/demo-seed.sql
sql() { psql "$DATABASE_URL" -X -A -t -v ON_ERROR_STOP=1 -c "$1"; }
overdue_sql="SELECT count(*) FROM crm.bookings WHERE status IN ('Reserved', 'AwaitingPayment', 'Booked')
   AND coalesce(CASE WHEN status = 'Booked' THEN booking_expires_at ELSE reserve_expires_at END,
                'infinity') < now()"
overdue=$(sql "$overdue_sql")

if out=$(be dry-run --as-of now --json 2>"$work/err"); then
    candidates=$(grep -c '"BookingId"' <<<"$out" || true)
    if ((overdue > 0 && candidates == overdue)); then
        pass "dry-run --as-of now lists the $overdue overdue bookings"
    else
        fail "dry-run --as-of now: $candidates candidates listed, $overdue overdue: $out"
    fi
else
    fail "dry-run --as-of now: exit $?: $(cat "$work/err")"
fi
if out=$(be dry-run --as-of now 2>"$work/err") && [[ -n $out ]]; then
    pass "dry-run --as-of now prints its table ($(wc -l <<<"$out") lines)"
else
    fail "dry-run --as-of now (table): $out $(cat "$work/err")"
fi
# 2030-06-01 03:00 at +03:00 is midnight UTC.
if out=$(be dry-run --as-of 2030-06-01T03:00:00+03:00 --json 2>"$work/err") &&
    grep -q '"AsOf":"2030-06-01T00:00:00\(\.0*\)\?Z"' <<<"$(tail -n 1 <<<"$out")"; then
    pass "dry-run --as-of 2030-06-01T03:00:00+03:00 evaluates 2030-06-01T00:00:00Z"
else
    fail "dry-run --as-of with a +03:00 offset: $(tail -n 1 <<<"$out") $(cat "$work/err")"
fi
if out=$(be backlog --format prometheus 2>"$work/err") && grep -q '^crm_booking_expiration_' <<<"$out"; then
    pass "backlog --format prometheus prints $(grep -c '^crm_booking_expiration_' <<<"$out") samples"
else
    fail "backlog --format prometheus: $out $(cat "$work/err")"
fi

if be run-once --log-format=json >/dev/null 2>"$work/err"; then
    left=$(sql "$overdue_sql")
    events=$(sql "SELECT count(*) FROM crm.outbox WHERE published_at IS NULL")
    if ((left == 0 && events == overdue)); then
        pass "run-once expired the $overdue overdue bookings ($events events in the outbox)"
    else
        fail "run-once: $left still overdue, $events outbox events, want 0 and $overdue"
    fi
else
    fail "run-once: $(tail -n 5 "$work/err")"
fi

if be relay-outbox --log-format=json >/dev/null 2>"$work/err"; then
    pending=$(sql "SELECT count(*) FROM crm.outbox WHERE published_at IS NULL")
    if ((pending == 0)); then
        pass "relay-outbox marked every outbox event published"
    else
        fail "relay-outbox: $pending events still pending"
    fi
else
    fail "relay-outbox: $(tail -n 5 "$work/err")"
fi
want_keys=$(sql "SELECT aggregateid FROM crm.outbox ORDER BY 1")
got_keys=$(scripts/kafka/run-class.sh org.apache.kafka.tools.consumer.ConsoleConsumer \
    --bootstrap-server "$KAFKA_BROKERS" --topic "$TOPIC" --from-beginning \
    --max-messages "$overdue" --timeout-ms 20000 \
    --formatter-property print.key=true --formatter-property print.value=false 2>/dev/null | sort || true)
if [[ -n $want_keys && $got_keys == "$want_keys" ]]; then
    pass "the topic holds the $overdue events, keyed by their bookings"
else
    fail "topic $TOPIC: read keys [$got_keys], want [$want_keys]"
fi

# Without --user the image's own user runs the process.
if podman run -d --name be-image-test-uid "${SECURITY[@]}" \
    -e DATABASE_URL -e KAFKA_BROKERS "$IMAGE" relay-outbox --follow=30s >/dev/null; then
    uid=""
    for _ in $(seq 1 50); do
        uid=$(podman top be-image-test-uid huser 2>/dev/null | tail -n +2 | tr -d ' ' | head -n 1 || true)
        [[ -n $uid ]] && break
        sleep 0.2
    done
    if [[ $uid == "$IMAGE_USER" ]]; then
        pass "without --user the process runs as $uid"
    else
        fail "without --user the process runs as '$uid'"
    fi
    podman rm -f -t 0 be-image-test-uid >/dev/null 2>&1 || true
else
    fail "run without --user"
fi

echo "== verify-full TLS to PostgreSQL, the CA mounted read-only" >&2
certs=$work/tls
mkdir -p "$certs"
(
    cd "$certs"
    printf '%s\n' "[req]" "distinguished_name = dn" "prompt = no" "[dn]" "CN = booking-expire image test CA" \
        "[v3_ca]" "basicConstraints = critical, CA:TRUE" "keyUsage = critical, keyCertSign, cRLSign" \
        "subjectKeyIdentifier = hash" >ca.cnf
    printf '%s\n' "basicConstraints = CA:FALSE" "keyUsage = critical, digitalSignature, keyEncipherment" \
        "extendedKeyUsage = serverAuth" "subjectAltName = DNS:localhost, IP:127.0.0.1" >server.ext
    for name in ca other-ca; do
        openssl req -x509 -newkey rsa:2048 -nodes -days 2 -config ca.cnf -extensions v3_ca \
            -keyout "$name.key" -out "$name.crt"
    done
    openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout server.key -out server.csr
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
        -extfile server.ext -out server.crt
    chmod 0644 ca.crt other-ca.crt
) >/dev/null 2>&1
tls_state=$(mktemp -d)
tls_url=$(PG_SSL_CERT_DIR=$certs scripts/pg-start.sh "$tls_state" 2>/dev/null)
port=${tls_url##*:}
port=${port%%/*}
verify_full="postgres://postgres@localhost:$port/postgres?sslmode=verify-full&sslrootcert=/etc/booking-expire/ca.crt"
podman run --rm "${CRONJOB[@]}" -v "$certs/ca.crt:/etc/booking-expire/ca.crt:ro" \
    -e DATABASE_URL="$verify_full" "$IMAGE" migrate >/dev/null 2>&1 ||
    fail "migrate over verify-full TLS with the image"
tls_backlog() {
    podman run --rm "${CRONJOB[@]}" -v "$1:/etc/booking-expire/ca.crt:ro" \
        -e DATABASE_URL="$verify_full" "$IMAGE" backlog --format prometheus
}
if out=$(tls_backlog "$certs/ca.crt" 2>&1); then
    pass "sslmode=verify-full with the server's CA mounted: connects"
else
    fail "sslmode=verify-full with the server's CA: exit $?: $(tail -n 3 <<<"$out")"
fi
rc=0
out=$(tls_backlog "$certs/other-ca.crt" 2>&1) || rc=$?
if ((rc == 78)) && [[ $out == *certificate* ]]; then
    pass "sslmode=verify-full with a wrong CA: exit 78 ($(grep -o 'certificate verify failed[^"]*' <<<"$out" | head -n 1))"
else
    fail "sslmode=verify-full with a wrong CA: exit $rc, want 78: $(tail -n 3 <<<"$out")"
fi

finish
