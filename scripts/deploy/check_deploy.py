#!/usr/bin/env python3
"""The deployment's values, checked exactly: cronjob.yaml, the operator Jobs and the
Dockerfile. The Kubernetes schemas themselves are checked by kubernetes-validate
(scripts/check-deploy.sh); this checks what the schemas cannot: the schedule, the
timing arithmetic, the pod's settings beyond Pod Security "restricted" (the image's
user, a read-only root file system, no token), the resources, the Secret; and that
every alert reads a metric the code pushes and links a runbook section that exists.
The "restricted" profile itself (non-root, no privilege escalation, capabilities
dropped, RuntimeDefault seccomp, no host namespaces) is the API server's admission's to
check: tests/it/kube.rs applies the manifests into a namespace that enforces and warns
about it, on a real kube-apiserver, and fails on any warning.

Usage: check_deploy.py REPO_DIR   (needs PyYAML: the venv of scripts/check-deploy.sh)
Prints one PASS/FAIL line per check and a summary; exits 1 on any failure.
"""

import json
import re
import sys
from pathlib import Path

import yaml

IMAGE_USER = 65532
SECRET = "booking-expire"
OPERATOR_SECRET = "booking-expire-operator"
MIGRATE_SECRET = "booking-expire-migrate"  # the migrating login's, never the operators'


# The timing the CronJob is built on (cronjob.yaml's header explains each number).
CONTROLLER_LAG = 2  # the CronJob controller creates the Job at most this late
POD_START = 5  # the pod's containers start at most this long after the Job
# Every wait after a command's own work, as the code bounds it (cronjob.yaml's budget).
BACKLOG_READ = 4  # the backlog read for the push: connect <= 2 s, then <= 2 s
PUSH = 2  # the metrics push, in all
TRACE_FLUSH = 2  # the trace flush at exit
DELIVERY_MARGIN = 2  # the last batch's reports: --message-timeout + this
MARKS_AND_PURGE = 2  # the last marks, and the purge (no purge batch after 1 s)
CANCEL = 1  # run-once's statement in flight, cancelled at --deadline
LISTEN_PAST_CYCLE = 3  # the relay listens this long past run-once's last commit

passed = 0
failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"PASS  {name}")
    else:
        failed += 1
        print(f"FAIL  {name}" + (f": {detail}" if detail else ""))


def equal(name, got, want):
    check(name, got == want, f"got {got!r}, want {want!r}")


def dig(doc, *path):
    for key in path:
        if isinstance(doc, dict):
            doc = doc.get(key)
        elif isinstance(doc, list) and isinstance(key, int) and key < len(doc):
            doc = doc[key]
        else:
            return None
    return doc


def seconds(value):
    """`40s`, `2m`, `500ms` -> seconds (the binary's duration syntax)."""
    m = re.fullmatch(r"(\d+)(ms|s|m|h)", value or "")
    if not m:
        return None
    n, unit = int(m.group(1)), m.group(2)
    return n * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]


def flags(container):
    """A container's `--name=value` args as a dict (the subcommand is args[0])."""
    out = {}
    for arg in (container.get("args") or [])[1:]:
        name, _, value = arg.partition("=")
        out[name] = value
    return out


def check_pod(what, pod, secret):
    """What "restricted" does not ask (the user, read-only root, no token, no volumes),
    the Secret, the resources."""
    equal(f"{what}: restartPolicy", pod.get("restartPolicy"), "Never")
    equal(f"{what}: no service-account token", pod.get("automountServiceAccountToken"), False)
    equal(f"{what}: no service links in the environment", pod.get("enableServiceLinks"), False)
    equal(f"{what}: no volumes (nothing shared but the Secret)", pod.get("volumes"), None)
    sc = pod.get("securityContext") or {}
    equal(f"{what}: pod runAsUser (numeric, the image's nonroot)", sc.get("runAsUser"), IMAGE_USER)
    equal(f"{what}: pod runAsGroup", sc.get("runAsGroup"), IMAGE_USER)
    images = set()
    for c in pod.get("containers") or []:
        name = f"{what}/{c.get('name')}"
        images.add(c.get("image"))
        csc = c.get("securityContext") or {}
        equal(f"{name}: readOnlyRootFilesystem", csc.get("readOnlyRootFilesystem"), True)
        check(f"{name}: runs as the pod's user", "runAsUser" not in csc or csc["runAsUser"] == IMAGE_USER)
        equal(f"{name}: no command (the image's exec-form ENTRYPOINT)", c.get("command"), None)
        equal(f"{name}: configuration from the Secret", c.get("envFrom"), [{"secretRef": {"name": secret}}])
        for env in c.get("env") or []:
            check(
                f"{name}: env {env.get('name')} holds no secret",
                not re.search(r"URL|PASSWORD|USER|BROKERS", env.get("name", "")),
                "connection settings and credentials belong in the Secret",
            )
        res = c.get("resources") or {}
        for kind in ("requests", "limits"):
            for r in ("cpu", "memory"):
                check(f"{name}: resources.{kind}.{r}", bool(dig(res, kind, r)), f"{res!r}")
        check(
            f"{name}: memory request <= limit",
            mebibytes(dig(res, "requests", "memory")) <= mebibytes(dig(res, "limits", "memory")),
            f"{res!r}",
        )
    equal(f"{what}: one image for every container", len(images), 1)
    return images


def mebibytes(q):
    m = re.fullmatch(r"(\d+)(Mi|Gi)", q or "")
    if not m:
        return float("inf")
    return int(m.group(1)) * (1024 if m.group(2) == "Gi" else 1)


def check_cronjob(path):
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    equal("cronjob.yaml: one document", len(docs), 1)
    cj = docs[0]
    equal("CronJob: apiVersion/kind", (cj.get("apiVersion"), cj.get("kind")), ("batch/v1", "CronJob"))
    spec = cj.get("spec") or {}
    equal("CronJob: every minute", spec.get("schedule"), "* * * * *")
    equal("CronJob: timeZone", spec.get("timeZone"), "Etc/UTC")
    equal("CronJob: concurrencyPolicy", spec.get("concurrencyPolicy"), "Forbid")
    equal("CronJob: startingDeadlineSeconds", spec.get("startingDeadlineSeconds"), 30)
    check(
        "CronJob: a late start is tried within the minute, and the controller sees it (10 <= d < 60)",
        10 <= (spec.get("startingDeadlineSeconds") or 0) < 60,
    )
    equal("CronJob: successfulJobsHistoryLimit", spec.get("successfulJobsHistoryLimit"), 3)
    equal("CronJob: failedJobsHistoryLimit", spec.get("failedJobsHistoryLimit"), 5)
    job = dig(spec, "jobTemplate", "spec") or {}
    equal("Job: backoffLimit (the next minute is the retry)", job.get("backoffLimit"), 0)
    equal("Job: activeDeadlineSeconds", job.get("activeDeadlineSeconds"), 55)
    equal("Job: ttlSecondsAfterFinished", job.get("ttlSecondsAfterFinished"), 3600)
    equal(
        "Job: podFailurePolicy ignores disruptions",
        job.get("podFailurePolicy"),
        {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]},
    )
    pod = dig(job, "template", "spec") or {}
    equal("pod: terminationGracePeriodSeconds", pod.get("terminationGracePeriodSeconds"), 3)
    containers = {c.get("name"): c for c in pod.get("containers") or []}
    equal("pod: containers", list(containers), ["run-once", "relay-outbox"])
    images = check_pod("CronJob pod", pod, SECRET)
    run_once = containers.get("run-once") or {}
    relay = containers.get("relay-outbox") or {}
    equal("run-once: subcommand", (run_once.get("args") or [None])[0], "run-once")
    equal("relay-outbox: subcommand", (relay.get("args") or [None])[0], "relay-outbox")
    ro, rl = flags(run_once), flags(relay)
    equal("run-once: flags", ro, {"--log-format": "json", "--batch-size": "200", "--max-batches": "2000", "--deadline": "25s"})
    equal("relay-outbox: flags", rl, {"--log-format": "json", "--follow": "28s", "--message-timeout": "5s", "--max-message-bytes": "1000000", "--batch-size": "2000"})
    for name, c, memory in (("run-once", run_once, ("32Mi", "64Mi")), ("relay-outbox", relay, ("64Mi", "128Mi"))):
        equal(
            f"{name}: memory request/limit (from the measured peaks)",
            (dig(c, "resources", "requests", "memory"), dig(c, "resources", "limits", "memory")),
            memory,
        )

    # The arithmetic of cronjob.yaml's header.
    deadline = job.get("activeDeadlineSeconds") or 0
    grace = pod.get("terminationGracePeriodSeconds") or 0
    cycle = seconds(ro.get("--deadline"))
    follow = seconds(rl.get("--follow"))
    message = seconds(rl.get("--message-timeout"))
    check(
        "timing: a hung run and its grace end before the next minute "
        f"(lag {CONTROLLER_LAG} + deadline {deadline} + grace {grace} <= 60)",
        CONTROLLER_LAG + deadline + grace <= 60,
    )
    check(
        f"timing: the relay listens past run-once's last commit by >= {LISTEN_PAST_CYCLE} s "
        f"(follow {follow} >= deadline {cycle} + {LISTEN_PAST_CYCLE})",
        None not in (follow, cycle) and follow >= cycle + LISTEN_PAST_CYCLE,
    )
    after = BACKLOG_READ + PUSH + TRACE_FLUSH
    if None not in (follow, message):
        relay_budget = follow + message + message + DELIVERY_MARGIN + MARKS_AND_PURGE + after
        check(
            "timing: the relay exits within activeDeadlineSeconds - pod start whatever hangs "
            f"(follow {follow} + topic check {message} + delivery {message + DELIVERY_MARGIN} "
            f"+ marks/purge {MARKS_AND_PURGE} + read/push/flush {after} = {relay_budget} <= {deadline} - {POD_START})",
            relay_budget <= deadline - POD_START,
        )
    else:
        check("timing: the relay's --follow and --message-timeout are set", False)
    if cycle is not None:
        cycle_budget = cycle + CANCEL + after
        check(
            "timing: run-once exits within activeDeadlineSeconds - pod start whatever hangs "
            f"(deadline {cycle} + cancel {CANCEL} + read/push/flush {after} = {cycle_budget} <= {deadline} - {POD_START})",
            cycle_budget <= deadline - POD_START,
        )
    check(
        f"timing: run-once's budget is below the cycle's 30 s limit (--deadline {cycle})",
        cycle is not None and cycle < 30,
    )
    return images


def check_operator_jobs(path):
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    jobs = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "Job"}
    equal(
        "operator Jobs",
        sorted(jobs),
        ["booking-expire-audit", "booking-expire-backlog", "booking-expire-dry-run", "booking-expire-migrate"],
    )
    images = set()
    for name, component, command, secret in (
        ("booking-expire-backlog", "backlog", "backlog", OPERATOR_SECRET),
        ("booking-expire-dry-run", "dry-run", "dry-run", OPERATOR_SECRET),
        ("booking-expire-audit", "audit", "audit", OPERATOR_SECRET),
        ("booking-expire-migrate", "migrate", "migrate", MIGRATE_SECRET),
    ):
        job = jobs.get(name) or {}
        spec = job.get("spec") or {}
        equal(f"{name}: apiVersion", job.get("apiVersion"), "batch/v1")
        equal(f"{name}: selectable by its component label", dig(job, "metadata", "labels", "app.kubernetes.io/component"), component)
        equal(f"{name}: backoffLimit", spec.get("backoffLimit"), 0)
        check(f"{name}: activeDeadlineSeconds set", (spec.get("activeDeadlineSeconds") or 0) > 0)
        check(f"{name}: ttlSecondsAfterFinished set", (spec.get("ttlSecondsAfterFinished") or 0) > 0)
        pod = dig(spec, "template", "spec") or {}
        images |= check_pod(name, pod, secret)
        equal(f"{name}: subcommand", dig(pod, "containers", 0, "args", 0), command)
    dry = dig(jobs.get("booking-expire-dry-run") or {}, "spec", "template", "spec", "containers", 0) or {}
    equal("dry-run: --as-of from AS_OF", dry.get("args"), ["dry-run", "--as-of=$(AS_OF)", "--all"])
    equal("dry-run: AS_OF defaults to now", dry.get("env"), [{"name": "AS_OF", "value": "now"}])
    audit = dig(jobs.get("booking-expire-audit") or {}, "spec", "template", "spec", "containers", 0) or {}
    equal("audit: the window from SINCE and UNTIL, no --repair", audit.get("args"), ["audit", "--since=$(SINCE)", "--until=$(UNTIL)"])
    migrate = dig(jobs.get("booking-expire-migrate") or {}, "spec", "template", "spec", "containers", 0) or {}
    equal("migrate: the runner's own defaults, no flags", migrate.get("args"), ["migrate"])
    return images


def check_dockerfile(path):
    text = path.read_text()
    # Instructions, with continuation lines joined and comments dropped.
    lines = []
    for raw in re.sub(r"\\\n", " ", text).splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            lines.append(line)
    froms = [l for l in lines if l.upper().startswith("FROM ")]
    # build (the Rust image compiles), prebuilt (a binary built outside, for
    # scripts/image-test.sh), binary (whichever BINARY names), the runtime.
    equal(
        "Dockerfile: stages build, prebuilt, binary, runtime",
        [f.split()[-1] if re.search(r"\sAS\s", f, re.I) else "runtime" for f in froms],
        ["build", "prebuilt", "binary", "runtime"],
    )
    equal("Dockerfile: BINARY defaults to the build stage", re.findall(r"^ARG BINARY=(\S*)$", text, re.M), ["build"])
    check(
        "Dockerfile: the prebuilt stage is the context's prebuilt/ as /out",
        "FROM scratch AS prebuilt" in lines and "COPY prebuilt/ /out/" in lines,
    )
    check("Dockerfile: the binary stage is the one BINARY names", "FROM ${BINARY} AS binary" in lines)
    build = re.fullmatch(r"FROM\s+(\S+)\s+AS\s+build", froms[0], re.I) if froms else None
    check("Dockerfile: the build stage is named build", build is not None, froms[:1])
    builder = build.group(1) if build else ""
    check(
        "Dockerfile: builder is the official Rust image on Debian 12 (bookworm)",
        re.fullmatch(r"(docker\.io/library/)?rust:\$\{RUST_VERSION\}-bookworm", builder) is not None,
        builder,
    )
    build_stage = lines[lines.index(froms[0]) : lines.index(froms[1])] if len(froms) > 1 else []
    check(
        "Dockerfile: the build stage takes the commit --version names (ARG BOOKING_EXPIRE_COMMIT)",
        any(re.fullmatch(r"ARG BOOKING_EXPIRE_COMMIT(=\S*)?", l) for l in build_stage),
    )
    version = re.search(r"^ARG RUST_VERSION=(\d+)\.(\d+)$", text, re.M)
    check(
        "Dockerfile: RUST_VERSION pinned, >= 1.85 (edition 2024)",
        version is not None and (int(version.group(1)), int(version.group(2))) >= (1, 85),
    )
    runtime = froms[-1].split()[1] if froms else ""
    equal("Dockerfile: runtime is distroless cc on Debian 12, nonroot", runtime, "gcr.io/distroless/cc-debian12:nonroot")
    check(
        "Dockerfile: cargo build --release --locked",
        any(re.search(r"cargo build --release --locked\b", l) for l in lines),
    )
    final = lines[lines.index(froms[-1]):] if froms else []
    equal(
        "Dockerfile: the runtime copies /out of the binary stage, nothing else",
        [l for l in final if l.upper().startswith(("COPY ", "ADD "))],
        ["COPY --from=binary /out/ /"],
    )
    users = [l.split()[1] for l in final if l.upper().startswith("USER ")]
    check(
        f"Dockerfile: numeric non-root USER {IMAGE_USER}",
        bool(users) and re.fullmatch(rf"{IMAGE_USER}(:{IMAGE_USER})?", users[-1]) is not None,
        users,
    )
    entry = [l for l in final if l.upper().startswith("ENTRYPOINT ")]
    try:
        entrypoint = json.loads(entry[-1].split(None, 1)[1]) if entry else None
    except json.JSONDecodeError:
        entrypoint = "shell form"
    equal("Dockerfile: exec-form ENTRYPOINT", entrypoint, ["/usr/local/bin/booking-expire"])
    check(
        "Dockerfile: the runtime stage runs the binary once at build time (missing libraries fail the build)",
        '["/usr/local/bin/booking-expire", "--version"]' in text,
    )
    check(
        "Dockerfile: brings libz.so.1, which cc-debian12 lacks",
        re.search(r"install -D -m 0644 .*libz\.so\.1", " ".join(lines)) is not None,
    )
    check(
        "Dockerfile: the build stage installs the generated man pages into /out/usr/share/man/man1",
        re.search(r"install -D -m 0644 -t /out/usr/share/man/man1 docs/reference/man/\*\.1", " ".join(lines))
        is not None,
    )
    ignored = (path.parent / ".dockerignore").read_text().split()
    check(
        ".dockerignore keeps docs/reference/man/ in the build context (the image ships the man pages)",
        "!docs/reference/man/" in ignored and ignored.index("!docs/reference/man/") > ignored.index("docs/"),
        ignored,
    )
    check(
        "docs/reference/man/booking-expire.1 exists (generated by tests/it/reference.rs)",
        (path.parent / "docs/reference/man/booking-expire.1").is_file(),
    )


def anchor(heading):
    """GitHub's anchor of a Markdown heading."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def check_runbook_links(root):
    """Every alert links a runbook section that exists."""
    rules = yaml.safe_load((root / "monitoring/booking-expiration.rules.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            url = dig(rule, "annotations", "runbook_url") or ""
            path, _, section = url.partition("#")
            doc = root / path
            headings = (
                {anchor(l.lstrip("#")) for l in doc.read_text().splitlines() if l.startswith("#")}
                if path and doc.is_file()
                else set()
            )
            check(
                f"{rule['alert']}: runbook {url}",
                bool(headings) and (not section or section in headings),
                "no such file or section",
            )


def check_rule_metrics(root):
    """Every metric an alert reads is one the code pushes (a rename would silence it)."""
    pushed = set(re.findall(r'"(crm_booking_expiration_\w+)"', (root / "src/obs/metrics.rs").read_text()))
    rules = yaml.safe_load((root / "monitoring/booking-expiration.rules.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            for name in sorted(set(re.findall(r"crm_booking_expiration_\w+", rule["expr"]))):
                if name == "crm_booking_expiration":  # the job label's value
                    continue
                # A histogram's series are its family's name plus _bucket, _sum, _count.
                family = re.sub(r"_(bucket|sum|count)$", "", name)
                check(f"{rule['alert']}: reads {name}, which is pushed", name in pushed or family in pushed)


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    images = check_cronjob(root / "cronjob.yaml")
    images |= check_operator_jobs(root / "docs/runbooks/operator-jobs.yaml")
    equal("the CronJob and the operator Jobs run one image", len(images), 1)
    check_dockerfile(root / "Dockerfile")
    check_runbook_links(root)
    check_rule_metrics(root)
    print(f"deploy values: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
