//! The reference documentation stays true by itself: the generated CLI reference and
//! man pages match what the code renders now, the exit codes page matches `exit.rs`,
//! the completion scripts work, and every relative link in the Markdown resolves.
//! Regenerate the generated files with `UPDATE_REFERENCE=1 cargo test --test it reference::`.

use crate::common;
use crate::postgres;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use booking_expire::testing::cli::reference::{self, CLI_MARKDOWN_PATH, MAN_DIR, REGENERATE};
use booking_expire::testing::exit::{EXIT_CODES_HELP, Failure};

use common::{BIN, TestDb};

fn root() -> PathBuf {
    crate::common::repo()
}

fn updating() -> bool {
    std::env::var_os("UPDATE_REFERENCE").is_some_and(|v| v == "1")
}

/// Compares a committed generated file with what the code renders now, or rewrites it
/// under `UPDATE_REFERENCE=1`. Returns a complaint for a stale file.
fn check_generated(path: &Path, rendered: &[u8]) -> Option<String> {
    let committed = fs::read(path).unwrap_or_default();
    if committed == rendered {
        return None;
    }
    if updating() {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, rendered).unwrap();
        return None;
    }
    let committed = String::from_utf8_lossy(&committed);
    let rendered = String::from_utf8_lossy(rendered);
    let first = committed
        .lines()
        .zip(rendered.lines())
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| committed.lines().count().min(rendered.lines().count()));
    Some(format!(
        "{} is not what the code generates (first difference at line {}: committed {:?}, \
         generated {:?})",
        path.display(),
        first + 1,
        committed.lines().nth(first).unwrap_or("<end of file>"),
        rendered.lines().nth(first).unwrap_or("<end of file>"),
    ))
}

fn fail_on(complaints: Vec<String>) {
    assert!(
        complaints.is_empty(),
        "{}\nthe reference is generated from src/cli/: regenerate it with `{REGENERATE}` \
         and commit the result",
        complaints.join("\n")
    );
}

#[test]
fn the_cli_reference_is_what_the_code_generates() {
    let path = root().join(CLI_MARKDOWN_PATH);
    fail_on(
        check_generated(&path, reference::cli_markdown().as_bytes())
            .into_iter()
            .collect(),
    );
}

#[test]
fn the_man_pages_are_what_the_code_generates() {
    let dir = root().join(MAN_DIR);
    let pages = reference::man_pages();
    let mut complaints: Vec<String> = pages
        .iter()
        .filter_map(|(name, text)| check_generated(&dir.join(name), text))
        .collect();
    let expected: BTreeSet<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
    for entry in fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !expected.contains(name.as_str()) {
            if updating() {
                fs::remove_file(&path).unwrap();
            } else {
                complaints.push(format!(
                    "{} is no command's man page any more",
                    path.display()
                ));
            }
        }
    }
    assert!(expected.contains("booking-expire.1"));
    assert!(expected.contains("booking-expire-run-once.1"));
    fail_on(complaints);
}

#[test]
fn the_cli_reference_names_every_subcommand_and_flag_of_help() {
    // Independent of the renderer: what `--help` lists is in the committed file.
    let md = fs::read_to_string(root().join(CLI_MARKDOWN_PATH)).unwrap();
    let help = |args: &[&str]| {
        let out = Command::new(BIN).args(args).env_clear().output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let top = help(&["--help"]);
    let commands: Vec<String> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        // A wrapped description goes on deeper indented.
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .filter(|c| c != "help")
        .collect();
    assert!(commands.contains(&"run-once".to_owned()), "{top}");
    assert!(commands.contains(&"completions".to_owned()), "{top}");
    for command in &commands {
        assert!(
            md.contains(&format!("## `booking-expire {command}`")),
            "{command} missing from {CLI_MARKDOWN_PATH}"
        );
        for line in help(&[command, "--help"]).lines() {
            // An option's own line is indented at most 6; its description deeper.
            let indent = line.len() - line.trim_start().len();
            let names = line.trim_start().split(' ').next().unwrap_or("");
            if !(2..=6).contains(&indent) || !names.starts_with('-') {
                continue;
            }
            let flag = if names.starts_with("--") {
                names
            } else {
                line.trim_start().split(' ').nth(1).unwrap_or("")
            };
            if flag.starts_with("--") && flag != "--help" && flag != "--version" {
                let named = md.contains(&format!("{flag} <")) || md.contains(&format!("{flag}`"));
                assert!(named, "{command} {flag} missing");
            }
        }
    }
}

#[test]
fn completions_bash_passes_bash_n_and_completes_run_once() {
    let out = Command::new(BIN)
        .args(["completions", "bash"])
        .env_clear()
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let script = std::env::temp_dir().join(format!("booking-expire-{}.bash", std::process::id()));
    fs::write(&script, &out.stdout).unwrap();
    let syntax = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        syntax.status.success(),
        "bash -n: {}",
        String::from_utf8_lossy(&syntax.stderr)
    );
    // What bash does on TAB after `booking-expire run`: the function `complete -F`
    // registered, called with the words typed.
    let complete = |words: &str, cword: usize, cur: &str, prev: &str| {
        let body = format!(
            "source {script}; fn=$(complete -p booking-expire | sed -E 's/.*-F ([^ ]+).*/\\1/'); \
             COMP_WORDS=({words}); COMP_CWORD={cword}; COMP_LINE='{words}'; COMP_POINT=${{#COMP_LINE}}; \
             \"$fn\" booking-expire '{cur}' '{prev}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script = script.display()
        );
        let out = Command::new("bash").arg("-c").arg(body).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let replies = complete("booking-expire run", 1, "run", "booking-expire");
    assert_eq!(
        replies.lines().collect::<Vec<_>>(),
        ["run-once"],
        "{replies}"
    );
    let replies = complete("booking-expire run-once --max-b", 2, "--max-b", "run-once");
    assert_eq!(
        replies.lines().collect::<Vec<_>>(),
        ["--max-batches"],
        "{replies}"
    );
    let replies = complete("booking-expire pause ''", 2, "", "pause");
    assert!(replies.lines().any(|l| l == "relay-outbox"), "{replies}");
    fs::remove_file(&script).unwrap();
}

#[test]
fn completions_zsh_and_fish_know_the_subcommands() {
    for shell in ["zsh", "fish"] {
        let out = Command::new(BIN)
            .args(["completions", shell])
            .env_clear()
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let script = String::from_utf8(out.stdout).unwrap();
        for name in ["run-once", "relay-outbox", "explain", "--batch-size"] {
            let name = if shell == "fish" {
                name.trim_start_matches("--")
            } else {
                name
            };
            assert!(script.contains(name), "{shell} script lacks {name}");
        }
    }
    let refused = Command::new(BIN)
        .args(["completions", "tcsh"])
        .env_clear()
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(64));
}

/// The codes `exit.rs` can end the process with, besides 0.
fn codes_of_exit_rs() -> BTreeSet<u8> {
    let failures = [
        Failure::Threshold,
        Failure::Missing,
        Failure::Usage,
        Failure::Unavailable,
        Failure::Temporary,
        Failure::Config,
        Failure::Interrupted(2),
        Failure::Interrupted(15),
        Failure::Internal,
    ];
    for f in failures {
        // A new kind of failure fails to compile here until it is listed above.
        match f {
            Failure::Threshold
            | Failure::Missing
            | Failure::Usage
            | Failure::Unavailable
            | Failure::Temporary
            | Failure::Config
            | Failure::Interrupted(_)
            | Failure::Internal => {}
        }
    }
    std::iter::once(0)
        .chain(failures.map(Failure::code))
        .collect()
}

#[test]
fn the_exit_codes_page_and_help_list_exactly_the_codes_of_exit_rs() {
    let page = fs::read_to_string(root().join("docs/reference/exit-codes.md")).unwrap();
    let mut in_page = BTreeSet::new();
    for line in page.lines().filter(|l| l.starts_with("| ")) {
        let first = line.split('|').nth(1).unwrap().trim();
        for code in first.split('/').map(str::trim) {
            if let Ok(code) = code.parse::<u8>() {
                assert!(in_page.insert(code), "{code} twice in exit-codes.md");
            }
        }
    }
    assert_eq!(in_page, codes_of_exit_rs(), "docs/reference/exit-codes.md");
    let in_help: BTreeSet<u8> = EXIT_CODES_HELP
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    assert_eq!(in_help, codes_of_exit_rs(), "exit::EXIT_CODES_HELP");
}

/// Every Markdown file of the repository, but for build output and dependencies.
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy();
        if name.starts_with('.') || name == "target" || name == "node_modules" {
            continue;
        }
        if path.is_dir() {
            markdown_files(&path, out);
        } else if name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// GitHub's anchors of a Markdown file's headings.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let heading = line.trim_start_matches('#').trim();
        let slug: String = heading
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        anchors.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    anchors
}

/// The targets of the inline links `[text](target)` outside code.
fn links(text: &str) -> Vec<String> {
    let mut links = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Code spans may hold `](` that is no link.
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join("");
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            if let Some(end) = rest.find(')') {
                links.push(rest[..end].to_owned());
                rest = &rest[end..];
            }
        }
    }
    links
}

#[test]
fn every_relative_link_in_the_markdown_resolves() {
    let root = root();
    let mut files = Vec::new();
    markdown_files(&root, &mut files);
    assert!(files.iter().any(|f| f.ends_with("README.md")));
    let mut broken = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file).unwrap();
        for link in links(&text) {
            let link = link.split_whitespace().next().unwrap_or("").to_owned();
            if link.is_empty() || link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match link.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (link.as_str(), None),
            };
            let target = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            let shown = format!("{}: ({link})", file.strip_prefix(&root).unwrap().display());
            if !target.exists() {
                broken.push(format!("{shown}: no such file"));
                continue;
            }
            if let Some(anchor) = anchor
                && target.extension().is_some_and(|e| e == "md")
                && !anchors(&fs::read_to_string(&target).unwrap()).contains(anchor)
            {
                broken.push(format!("{shown}: no heading with that anchor"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_link_check_finds_what_it_should() {
    let text =
        "# A `b` c\n## A b c\n```\n[x](nowhere.md)\n```\nsee [y](other.md#a-b-c-1) and `[z](q)`\n";
    assert_eq!(
        anchors(text),
        BTreeSet::from(["a-b-c".to_owned(), "a-b-c-1".to_owned()])
    );
    assert_eq!(links(text), ["other.md#a-b-c-1"]);
}

/// Environment variable names quoted in the code, by the prefixes the job reads.
fn env_names_in_code(dir: &Path, out: &mut BTreeSet<String>) {
    const PREFIXES: [&str; 9] = [
        "BOOKING_EXPIRATION_",
        "BOOKING_EXPIRE_",
        "OUTBOX_",
        "PUSHGATEWAY_",
        "KAFKA_",
        "OTEL_",
        "DATABASE_",
        "PG",
        "LOG_",
    ];
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            env_names_in_code(&path, out);
            continue;
        }
        let text = fs::read_to_string(&path).unwrap();
        // Unit tests quote misspelt and foreign names on purpose.
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for quoted in code.split('"').skip(1).step_by(2) {
            // A name ending in `_` is a prefix (the unknown-variable warning's), not a
            // variable.
            let is_name = quoted.len() > 3
                && !quoted.ends_with('_')
                && quoted
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                && PREFIXES.iter().any(|p| quoted.starts_with(p));
            if is_name {
                out.insert(quoted.to_owned());
            }
        }
    }
}

#[test]
fn every_environment_variable_the_code_reads_is_in_the_cli_reference() {
    let md = fs::read_to_string(root().join(CLI_MARKDOWN_PATH)).unwrap();
    let mut names = BTreeSet::new();
    env_names_in_code(&root().join("src"), &mut names);
    assert!(names.contains("OTEL_SERVICE_NAME"), "{names:?}");
    // Test hooks, not settings.
    names.retain(|n| !n.starts_with("BOOKING_EXPIRE_TEST_"));
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !md.contains(&format!("| `{n}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "read by the code but not in {CLI_MARKDOWN_PATH}: {missing:?}; add them to \
         reference::OTHER_ENVIRONMENT (or to a flag's env) and run `{REGENERATE}`"
    );
}

const METRIC_PREFIX: &str = "crm_booking_expiration_";

/// The metric family names the code defines (string literals of `src/obs/`, its tests
/// left out).
fn metric_names_in_code() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for entry in fs::read_dir(root().join("src/obs")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            continue; // a room's tests (obs/fields/tests.rs)
        }
        let text = fs::read_to_string(path).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap();
        for quoted in code.split('"').skip(1).step_by(2) {
            if quoted.starts_with(METRIC_PREFIX)
                && quoted.chars().all(|c| c.is_ascii_lowercase() || c == '_')
            {
                names.insert(quoted.to_owned());
            }
        }
    }
    names
}

#[test]
fn the_metrics_reference_names_exactly_the_families_the_code_defines() {
    let page = fs::read_to_string(root().join("docs/reference/metrics.md")).unwrap();
    let in_page: BTreeSet<String> = page
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.starts_with(METRIC_PREFIX))
        .map(|s| s.split('{').next().unwrap().to_owned())
        .collect();
    let in_code = metric_names_in_code();
    assert!(
        in_code.contains("crm_booking_expiration_items"),
        "{in_code:?}"
    );
    assert!(in_code.contains("crm_booking_expiration_xmin_horizon_holders"));
    let undocumented: Vec<_> = in_code.difference(&in_page).collect();
    let unknown: Vec<_> = in_page.difference(&in_code).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "docs/reference/metrics.md: not documented {undocumented:?}; no such family in \
         src/obs {unknown:?}"
    );
}

#[test]
fn the_fields_of_a_json_log_line_are_in_the_log_fields_reference() {
    // A run refused before it connects still logs its failure line, with the fields
    // every line has.
    let out = Command::new(BIN)
        .args(["run-once", "--log-format", "json"])
        .env_clear()
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78));
    let page = fs::read_to_string(root().join("docs/reference/metrics.md")).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    let mut seen = 0;
    for line in stderr.lines() {
        let Ok(serde_json::Value::Object(fields)) = serde_json::from_str(line) else {
            continue;
        };
        seen += 1;
        for key in fields.keys() {
            assert!(
                page.contains(&format!("`{key}`")),
                "log field {key} undocumented: {line}"
            );
        }
    }
    assert!(seen > 0, "no JSON line on stderr: {stderr}");
}

/// The metric families a text exposition declares (`# TYPE name kind`).
fn declared_families(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn what_backlog_exports_is_in_the_metrics_reference_under_backlog() {
    let db = TestDb::new();
    // A row that waits: the per-topic families have a series only then.
    backing_off(&mut db.client());
    let run = db.run(&["backlog", "--format", "prometheus"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let exported = declared_families(&run.stdout);
    assert!(
        exported.contains("crm_booking_expiration_backlog"),
        "{}",
        run.stdout
    );
    let page = fs::read_to_string(root().join("docs/reference/metrics.md")).unwrap();
    let section = page
        .split("## `backlog --format prometheus`")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("a section on backlog's gauges in docs/reference/metrics.md");
    let listed: BTreeSet<String> = section
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.starts_with(METRIC_PREFIX))
        .map(|s| s.split('{').next().unwrap().to_owned())
        .collect();
    assert_eq!(
        listed, exported,
        "docs/reference/metrics.md's backlog section against `backlog --format prometheus`"
    );
}

/// A pending row backing off for an hour, alone under its key.
fn backing_off(c: &mut postgres::Client) {
    c.execute(
        "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload,
                                 last_error, failures, next_attempt_at)
         VALUES (gen_random_uuid(), 'Booking', gen_random_uuid()::text,
                 'pin.crm.booking-expired', 'backing-off', '{}', 'refused', 1,
                 now() + interval '1 hour')",
        &[],
    )
    .unwrap();
}

/// The families the "Pushed metrics" table of docs/reference/metrics.md gives `step`
/// (or both steps).
fn pushed_in_page(step: &str) -> BTreeSet<String> {
    let page = fs::read_to_string(root().join("docs/reference/metrics.md")).unwrap();
    let section = page
        .split("## Pushed metrics")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("a section on pushed metrics in docs/reference/metrics.md");
    let mut names = BTreeSet::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split(" | ").collect();
        let steps = cells.get(1).map(|c| c.trim()).unwrap_or("");
        if steps != step && steps != "both" {
            continue;
        }
        for name in cells[0].split('`').skip(1).step_by(2) {
            if name.starts_with(METRIC_PREFIX) {
                names.insert(name.split('{').next().unwrap().to_owned());
            }
        }
    }
    names
}

#[test]
fn what_run_once_pushes_is_in_the_metrics_reference() {
    let gateway = common::pushgateway::Pushgateway::start();
    let db = TestDb::new();
    let run = db.run(&["run-once", "--pushgateway-url", &gateway.url()]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let pushed: BTreeSet<String> = declared_families(&gateway.exposition())
        .into_iter()
        .filter(|f| f.starts_with(METRIC_PREFIX))
        .collect();
    assert!(
        pushed.contains("crm_booking_expiration_items"),
        "{pushed:?}"
    );
    assert_eq!(
        pushed_in_page("run-once"),
        pushed,
        "docs/reference/metrics.md's pushed metrics (step run-once or both) against what \
         run-once pushed"
    );
}

#[test]
fn what_relay_outbox_pushes_is_in_the_metrics_reference() {
    use common::kafka::{create_topic, shared_brokers, unique_topic};
    let gateway = common::pushgateway::Pushgateway::start();
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let db = TestDb::new();
    let mut c = db.client();
    common::seed(&mut c, &[common::Seed::reserved(-60)]);
    db.run_once(&[]);
    c.execute("UPDATE crm.outbox SET topic = $1", &[&topic])
        .unwrap();
    backing_off(&mut c);
    let run = db.run(&[
        "relay-outbox",
        "--brokers",
        &brokers,
        "--pushgateway-url",
        &gateway.url(),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let pushed: BTreeSet<String> = declared_families(&gateway.exposition())
        .into_iter()
        .filter(|f| f.starts_with(METRIC_PREFIX))
        .collect();
    assert!(
        pushed.contains("crm_booking_expiration_relay_published"),
        "{pushed:?}"
    );
    assert_eq!(
        pushed_in_page("relay-outbox"),
        pushed,
        "docs/reference/metrics.md's pushed metrics (step relay-outbox or both) against what \
         relay-outbox pushed"
    );
}
