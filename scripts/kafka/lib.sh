# shellcheck shell=bash
# Shared helpers for scripts/kafka-*.sh. Sourced, never executed: it only
# defines functions and a few variables, so callers keep their own
# `set -euo pipefail` and argument handling.
#
# Environment knobs (all optional):
#   JAVA_HOME            use $JAVA_HOME/bin/java instead of `java` on PATH
#   XDG_CACHE_HOME       cache root (default ~/.cache); we use booking-expire/
#   KAFKA_TOOL_OPTS      JVM options for CLI tools (default: fast-start flags)
# (KAFKA_VERSION, which Kafka a broker runs, is read by the testbed that
# kafka-start.sh runs, crates/testbed.)

# Let failures inside $(...) abort the caller too (bash leaves errexit off in
# command substitutions by default).
shopt -s inherit_errexit

KAFKA_LIB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The jars: pom.xml pins the default Kafka (4.x); pom-*.xml pin others that a broker
# may run instead (kafka_use_version). Tools always run on pom.xml's.
KAFKA_POM="$KAFKA_LIB_DIR/pom.xml"
KAFKA_CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/booking-expire"
KAFKA_MIN_JAVA=17

# Progress and errors go to stderr: stdout of kafka-start.sh is reserved for
# the single "host:port" line that callers capture.
log() { printf '[kafka] %s\n' "$*" >&2; }
die() { printf '[kafka] error: %s\n' "$*" >&2; exit 1; }

# Run a command while holding an exclusive lock in the cache dir, so two
# brokers started at the same time do not run apt-get or resolve the
# classpath into the same files concurrently.
with_cache_lock() {
  mkdir -p "$KAFKA_CACHE_DIR"
  (
    flock -w 900 9 || die "timed out waiting for lock $KAFKA_CACHE_DIR/kafka.lock"
    "$@"
  ) 9>"$KAFKA_CACHE_DIR/kafka.lock"
}

# Install Debian packages, but only as root: a developer without root gets a
# clear message instead of a sudo prompt in the middle of a test run.
apt_install() {
  if [[ "$(id -u)" -ne 0 ]]; then
    die "missing $*; install them first, e.g.: sudo apt-get install -y $*"
  fi
  command -v apt-get >/dev/null || die "missing $* and no apt-get to install them with"
  log "installing $* (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2 || die "apt-get update failed"
  apt-get install -y -qq "$@" >&2 || die "apt-get install $* failed"
}

# Major version of a java binary: "17.0.15" -> 17, "1.8.0_392" -> 8.
java_major() {
  local v
  v="$("$1" -version 2>&1 | sed -n 's/.* version "\([^"]*\)".*/\1/p' | head -n1)"
  v="${v#1.}"
  printf '%s\n' "${v%%[.+-]*}"
}

# Does $1 run and report major version >= 17?
java_ok() {
  local major
  [[ -x "$1" ]] || return 1
  major="$(java_major "$1" || true)"
  [[ "$major" =~ ^[0-9]+$ ]] && (( major >= KAFKA_MIN_JAVA ))
}

# Debian's OpenJDK 17, if installed (whatever update-alternatives says).
debian_java17() {
  local java
  for java in /usr/lib/jvm/java-17-openjdk-*/bin/java; do
    [[ -x "$java" ]] && { printf '%s\n' "$java"; return; }
  done
}

# Print the java to use (>= 17; Kafka 4.x brokers and tools need it),
# installing OpenJDK 17 from Debian when there is none.
kafka_java() {
  local java
  for java in "${JAVA_HOME:+$JAVA_HOME/bin/java}" "$(command -v java || true)" "$(debian_java17)"; do
    java_ok "$java" && { printf '%s\n' "$java"; return; }
  done
  with_cache_lock apt_install openjdk-17-jre-headless
  java="$(debian_java17)"
  java_ok "$java" || die "installed openjdk-17-jre-headless but found no java 17 under /usr/lib/jvm"
  printf '%s\n' "$java"
}

# Is every entry of a ':'-separated classpath an existing file? A cached
# classpath goes stale when ~/.m2 is wiped.
classpath_complete() {
  local jar
  local -a jars
  IFS=: read -r -a jars <<<"$1"
  (( ${#jars[@]} > 0 )) || return 1
  for jar in "${jars[@]}"; do
    [[ -f "$jar" ]] || return 1
  done
}

# The kafka.version a pom pins.
kafka_pom_version() {
  sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$1" | head -n 1
}

# Make KAFKA_POM the pom that pins Kafka $1 (empty: the default, pom.xml), or fail
# naming the versions there are.
kafka_use_version() {
  local want="$1" pom version
  local -a known=()
  [[ -n "$want" ]] || return 0
  for pom in "$KAFKA_LIB_DIR/pom.xml" "$KAFKA_LIB_DIR"/pom-*.xml; do
    version="$(kafka_pom_version "$pom")"
    if [[ "$version" == "$want" ]]; then
      KAFKA_POM="$pom"
      return 0
    fi
    known+=("$version")
  done
  die "KAFKA_VERSION=$want is not a Kafka version this project pins; use one of: ${known[*]} (the first is the default; each is pinned in a pom of scripts/kafka/)"
}

# Resolve the pom's runtime classpath with Maven into $1. Maven's output is
# kept out of the way unless it fails (it is long and colour-coded).
resolve_classpath() {
  local out="$1" tmp mvn_log
  command -v mvn >/dev/null || apt_install maven
  tmp="$(mktemp "$out.XXXXXX")"
  mvn_log="$(mktemp)"
  log "resolving the Kafka classpath with Maven (first run downloads ~70 MB)"
  if ! mvn -B -q -f "$KAFKA_POM" dependency:build-classpath \
      -Dmdep.outputFile="$tmp" -Dmdep.includeScope=runtime >"$mvn_log" 2>&1; then
    cat "$mvn_log" >&2
    rm -f "$tmp" "$mvn_log"
    die "maven could not resolve $KAFKA_POM (see its output above)"
  fi
  rm -f "$mvn_log"
  classpath_complete "$(cat "$tmp")" || { rm -f "$tmp"; die "maven produced an incomplete classpath"; }
  mv -f "$tmp" "$out"   # atomic: readers never see a half-written file
}

# Path of the cached classpath file for the current pom. Keyed by the pom's
# hash, so editing the pom (e.g. a Kafka bump) resolves afresh.
kafka_classpath_file() {
  local key
  key="$(sha256sum "$KAFKA_POM" | cut -c1-16)"
  printf '%s/kafka-classpath-%s.txt\n' "$KAFKA_CACHE_DIR" "$key"
}

# Re-checked under the lock: another start may have resolved it meanwhile.
ensure_classpath_file() {
  if [[ ! -f "$1" ]] || ! classpath_complete "$(cat "$1")"; then
    resolve_classpath "$1"
  fi
}

# Print the classpath, resolving it only when the cache is missing or stale.
# A warm call costs a sha256sum and a few stat()s; Maven does not run.
kafka_classpath() {
  local file
  file="$(kafka_classpath_file)"
  if [[ ! -f "$file" ]] || ! classpath_complete "$(cat "$file")"; then
    with_cache_lock ensure_classpath_file "$file"
  fi
  cat "$file"
}

# log4j2 config for CLI tools: warnings only, on stderr, so stdout of e.g.
# ConsoleConsumer carries nothing but records. Without a config, log4j2's
# default would print errors to stdout.
kafka_tools_log4j() {
  local file="$KAFKA_CACHE_DIR/kafka-tools-log4j2.properties" tmp
  mkdir -p "$KAFKA_CACHE_DIR"
  tmp="$file.$$"
  cat >"$tmp" <<'EOF'
status = warn
# Tools are short-lived; log4j's hook only warns when it starts during exit.
shutdownHook = disable
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = err
EOF
  # Replace only when changed, so concurrent tools never read a partial file.
  if cmp -s "$tmp" "$file"; then rm -f "$tmp"; else mv -f "$tmp" "$file"; fi
  printf '%s\n' "$file"
}

# --- class-data sharing (AppCDS) ---------------------------------------------
# A JVM spends most of its start-up loading and verifying classes. Java 17 can
# dump the classes an app loaded into an archive when it exits
# (-XX:ArchiveClassesAtExit) and map that archive on later starts
# (-XX:SharedArchiveFile). Measured on 2 cores: a broker restart goes from
# ~2.2 s to ~1.1 s and its RSS drops by ~35 MB; TopicCommand from ~0.8 s to
# ~0.35 s. Archives live in the cache dir, one per main class, keyed by the
# java build and the exact jars (the JVM ignores an archive made from other
# ones). KAFKA_CDS=0 turns this off.

# Set by cds_setup: the JVM flags, the file the JVM is to write at exit (empty
# when an archive already exists) and where that file is published.
CDS_FLAGS=()
CDS_TMP=""
CDS_FINAL=""

cds_setup() {
  local name="$1" java="$2" cp="$3" key
  local -a jars
  CDS_FLAGS=() CDS_TMP="" CDS_FINAL=""
  [[ "${KAFKA_CDS:-1}" != 0 ]] || return 0
  # Only for the default jars (pom.xml). A Kafka 3.9 broker took ~30 s on 2 busy cores
  # to write its archive at exit, longer than kafka-stop.sh waits, and brokers of two
  # versions would take turns replacing each other's archive.
  [[ "$KAFKA_POM" == "$KAFKA_LIB_DIR/pom.xml" ]] || return 0
  IFS=: read -r -a jars <<<"$cp"
  key="$( { readlink -f "$java"; stat -L -c '%n %s %Y' "$java" "${jars[@]}"; } | sha256sum | cut -c1-16)"
  CDS_FINAL="$KAFKA_CACHE_DIR/cds-$name-$key.jsa"
  # The JVM's CDS warnings (classes it cannot archive) are only noise.
  CDS_FLAGS=(-Xlog:cds=off -Xlog:cds+dynamic=off)
  if [[ -s "$CDS_FINAL" ]]; then
    CDS_FLAGS+=("-XX:SharedArchiveFile=$CDS_FINAL")
  else
    # A private file per JVM: concurrent first runs must not share one.
    mkdir -p "$KAFKA_CACHE_DIR"
    # Brokers killed behind kafka-stop.sh's back leave theirs unpublished.
    find "$KAFKA_CACHE_DIR" -maxdepth 1 -name 'cds-*.jsa.tmp-*' -mmin +60 -delete 2>/dev/null || true
    CDS_TMP="$CDS_FINAL.tmp-$$-$RANDOM"
    CDS_FLAGS+=("-XX:ArchiveClassesAtExit=$CDS_TMP")
  fi
}

# Publish the archive a JVM wrote at exit (tmp -> final) if it exited
# cleanly ($3 = 1); otherwise drop it (a SIGKILL can leave half a file).
cds_publish() {
  local tmp="$1" final="$2" clean="$3"
  [[ -n "$tmp" ]] || return 0
  if [[ "$clean" == 1 && -s "$tmp" ]]; then
    mv -f "$tmp" "$final"   # atomic; if two raced, either archive is fine
    # Archives of this name for other jars or another java are dead weight.
    local old
    for old in "${final%-*}"-*.jsa; do
      [[ "$old" == "$final" ]] || rm -f "$old"
    done
  else
    rm -f "$tmp"
  fi
}

# --- tools ------------------------------------------------------------------

# Run a Kafka tool main class (TopicCommand, ConsoleProducer, ...) on the
# broker's classpath. Default JVM flags favour start-up time over peak speed;
# benchmarks should set KAFKA_TOOL_OPTS (e.g. "-Xmx1g") to get the C2 JIT.
kafka_run_class() {
  local java cp log4j rc=0 child
  java="$(kafka_java)"
  cp="$(kafka_classpath)"
  log4j="$(kafka_tools_log4j)"
  cds_setup "${1##*.}" "$java" "$cp"
  # shellcheck disable=SC2206 # KAFKA_TOOL_OPTS is a list of JVM flags
  local -a cmd=("$java" ${KAFKA_TOOL_OPTS:--Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1}
    "${CDS_FLAGS[@]}" -Djava.awt.headless=true "-Dlog4j2.configurationFile=$log4j"
    -cp "$cp" "$@")
  # Usual case: become the JVM, so signals and exit status are the tool's own.
  [[ -n "$CDS_TMP" ]] || exec "${cmd[@]}"
  # First run of this tool: stay around to publish its archive when the JVM
  # exits, forwarding signals so that stopping us still stops the tool. stdin
  # is passed on explicitly (a background job would get /dev/null).
  "${cmd[@]}" <&0 &
  child=$!
  trap 'kill -TERM "$child" 2>/dev/null' TERM INT HUP
  while :; do
    wait "$child" && rc=0 || rc=$?
    kill -0 "$child" 2>/dev/null || break   # still alive: a signal woke us
  done
  trap - TERM INT HUP
  cds_publish "$CDS_TMP" "$CDS_FINAL" "$(( rc != 137 ))"
  return "$rc"
}
