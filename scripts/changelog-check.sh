#!/usr/bin/env bash
# Fails when the operator-facing surface grew since the previous release without a line
# of CHANGELOG.md saying so. The previous release is the newest line of
# scripts/releases.tsv (version, commit, schema version); its files are read with
# `git show COMMIT:PATH`, so this runs offline, in well under a second. Added since
# then, each must be named in backquotes in CHANGELOG.md's [Unreleased] section:
#
#   - every migration file of sql/ (`013_outbox_notify_own_rows.sql`, or with sql/);
#   - every command, flag and environment variable of docs/reference/cli.md (generated
#     from the CLI): a flag new to a command counts, even if another command had it;
#   - every exit code of docs/reference/exit-codes.md;
#   - every metric of docs/reference/metrics.md (its tables before "Log fields").
#
# When migrations were added, the section must also say whether a rollback across them
# is safe (the word "rollback"). Every missing item is named, one line each; exit 1.
#
# Usage: scripts/changelog-check.sh [--cli-md FILE] [--exit-codes-md FILE]
#            [--metrics-md FILE] [--changelog FILE] [--sql-dir DIR] [--releases FILE]
# The options stand in for the tree's files (the self-test in scripts/test.sh feeds a
# reference with a flag the changelog does not name, and expects a failure naming it).
set -euo pipefail

cd "$(dirname "$0")/.."
cli_md=docs/reference/cli.md exit_md=docs/reference/exit-codes.md
metrics_md=docs/reference/metrics.md changelog=CHANGELOG.md sql_dir=sql
releases=scripts/releases.tsv
usage() { echo "usage: $0 [--cli-md FILE] [--exit-codes-md FILE] [--metrics-md FILE] [--changelog FILE] [--sql-dir DIR] [--releases FILE]" >&2; exit 64; }
while [[ $# -gt 0 ]]; do
    [[ $# -ge 2 ]] || usage
    case $1 in
        --cli-md) cli_md=$2 ;;
        --exit-codes-md) exit_md=$2 ;;
        --metrics-md) metrics_md=$2 ;;
        --changelog) changelog=$2 ;;
        --sql-dir) sql_dir=$2 ;;
        --releases) releases=$2 ;;
        *) usage ;;
    esac
    shift 2
done
for f in "$cli_md" "$exit_md" "$metrics_md" "$changelog" "$releases"; do
    [[ -f $f ]] || { echo "changelog-check: no file $f" >&2; exit 64; }
done
[[ -d $sql_dir ]] || { echo "changelog-check: no directory $sql_dir" >&2; exit 64; }

# The previous release: the newest (last) line of releases.tsv.
IFS=$'\t' read -r version commit _ < <(grep -v '^[[:space:]]*\(#\|$\)' "$releases" | tail -n 1) \
    || { echo "changelog-check: no release in $releases" >&2; exit 64; }
git cat-file -e "$commit^{commit}" 2>/dev/null \
    || { echo "changelog-check: commit $commit of release $version is not in this clone (fetch its history)" >&2; exit 64; }

old=$(mktemp -d)
trap 'rm -rf "$old"' EXIT
for f in docs/reference/cli.md docs/reference/exit-codes.md docs/reference/metrics.md; do
    mkdir -p "$old/$(dirname "$f")"
    git show "$commit:$f" >"$old/$f" 2>/dev/null || : >"$old/$f"
done
git ls-tree --name-only "$commit" sql/ | sed 's|^sql/||' >"$old/migrations"
find "$sql_dir" -maxdepth 1 -name '[0-9]*_*.sql' -printf '%f\n' | LC_ALL=C sort >"$old/migrations.new"

python3 - "$version" "$old" "$cli_md" "$exit_md" "$metrics_md" "$changelog" <<'EOF'
import re
import sys

version, old, cli_md, exit_md, metrics_md, changelog = sys.argv[1:]


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def cells(line):
    """The cells of a Markdown table row, or None for any other line."""
    line = line.strip()
    if not line.startswith("|") or re.fullmatch(r"\|[-|: ]*\|?", line):
        return None
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip("|"))]


def ticked(text):
    return re.findall(r"`([^`\n]+)`", text)


def cli(text):
    """Commands, (command, flag) pairs and environment variables of cli.md."""
    commands, flags, env = set(), set(), set()
    command = None
    for line in text.splitlines():
        m = re.match(r"## `booking-expire ([a-z][a-z -]*)`", line)
        if m:
            command = m.group(1).strip()
            commands.add(command)
            continue
        if line.startswith("## "):
            command = "(every command)" if line.startswith("## Global options") else None
            continue
        row = cells(line)
        if not row:
            continue
        for span in ticked(row[0]):
            if command and span.startswith("-"):
                for flag in re.findall(r"--[a-z0-9][a-z0-9-]*", span):
                    flags.add((command, flag))
            if re.fullmatch(r"[A-Z][A-Z0-9_]*", span):
                env.add(span)
        if command and len(row) > 1:
            env.update(s for s in ticked(row[1]) if re.fullmatch(r"[A-Z][A-Z0-9_]*", s))
    return commands, flags, env


def exit_codes(text):
    codes = set()
    for line in text.splitlines():
        row = cells(line)
        if row:
            codes.update(re.findall(r"\b\d{1,3}\b", row[0]) if re.fullmatch(r"[\d /,]+", row[0]) else [])
    return codes


def metrics(text):
    names = set()
    for line in text.split("\n## Log fields")[0].splitlines():
        row = cells(line)
        if row:
            for span in ticked(row[0]):
                m = re.match(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+", span)
                if m:
                    names.add(m.group(0))
    return names


def unreleased(text):
    m = re.search(r"^## \[Unreleased\][^\n]*\n(.*?)(?=^## \[|\Z)", text, re.M | re.S)
    if not m:
        sys.exit(f"changelog-check: {changelog} has no '## [Unreleased]' section")
    return m.group(1)


section = unreleased(read(changelog))
spans = ticked(section)


def named(pattern):
    return any(re.search(pattern, s) for s in spans)


def word(token, chars):
    return rf"(?<![{chars}]){re.escape(token)}(?![{chars}])"


missing = []
old_cmds, old_flags, old_env = cli(read(f"{old}/docs/reference/cli.md"))
new_cmds, new_flags, new_env = cli(read(cli_md))

old_migrations = set(read(f"{old}/migrations").split())
new_migrations = sorted(set(read(f"{old}/migrations.new").split()) - old_migrations)
for name in new_migrations:
    if not named(word(name, r"\w.-")):
        missing.append(f"the migration `{name}` (sql/)")
if new_migrations and "rollback" not in section.lower():
    missing.append(f"whether a rollback across {', '.join(new_migrations)} is safe")
for command in sorted(new_cmds - old_cmds):
    if not named(word(command, r"\w-")):
        missing.append(f"the command `{command}` ({cli_md})")
for command, flag in sorted(new_flags - old_flags):
    if not named(word(flag, r"\w-")):
        missing.append(f"the flag `{flag}` of `{command}` ({cli_md})")
for var in sorted(new_env - old_env):
    if not named(word(var, r"A-Za-z0-9_")):
        missing.append(f"the environment variable `{var}` ({cli_md})")
for code in sorted(exit_codes(read(exit_md)) - exit_codes(read(f"{old}/docs/reference/exit-codes.md")), key=int):
    if not named(word(code, r"0-9")):
        missing.append(f"the exit code `{code}` ({exit_md})")
for metric in sorted(metrics(read(metrics_md)) - metrics(read(f"{old}/docs/reference/metrics.md"))):
    if not named(word(metric, r"a-z0-9_")):
        missing.append(f"the metric `{metric}` ({metrics_md})")

if missing:
    for item in missing:
        print(f"changelog-check: added since {version}, not named in {changelog}'s [Unreleased]: {item}",
              file=sys.stderr)
    print(f"changelog-check: {len(missing)} missing: name each in backquotes under [Unreleased]",
          file=sys.stderr)
    sys.exit(1)
added = len(new_migrations) + len(new_cmds - old_cmds) + len(new_flags - old_flags) + len(new_env - old_env)
print(f"changelog-check: every addition since {version} is named in {changelog} "
      f"({len(new_migrations)} migrations, {added - len(new_migrations)} commands, flags and variables)",
      file=sys.stderr)
EOF
