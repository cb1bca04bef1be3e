//! A failing test's first screen: the panic hook that puts what differed and the
//! program's own error line first, then the path of a file holding the whole message
//! (the program's whole log, TRACE and DEBUG included), then at most the last 40 lines
//! of the program's log at WARN and above. A message of 40 lines or fewer is left as
//! it is.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The most lines of the program's log the first screen shows.
pub const LOG_LINES: usize = 40;

/// Messages up to this many lines are printed as they are.
const SHORT: usize = 40;

/// The most lines of the message's own text (not the program's log) kept on the
/// first screen; the rest is in the file.
const TEXT_LINES: usize = 20;

/// Installs the hook, once per test process: the harness calls it wherever the binary
/// runs ([`super::Run::of`], [`super::Background::start`], [`super::spawn`]), so every
/// message that can quote a program's log goes through it.
pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied());
            let thread = std::thread::current();
            let name = thread.name().unwrap_or("<unnamed>");
            let Some(screen) = message.and_then(|m| first_screen(m, &failure_file(name))) else {
                return default(info);
            };
            let at = info
                .location()
                .map(|l| format!(" at {}:{}:{}", l.file(), l.line(), l.column()))
                .unwrap_or_default();
            // Through the test's captured output, as the default hook writes.
            eprintln!("thread '{name}' panicked{at}:\n{screen}");
        }));
    });
}

/// Where the whole message of a failure of test `name` goes: a file of its own in
/// the temporary directory (the test servers' RAM directory under scripts/test.sh).
fn failure_file(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let safe: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    std::env::temp_dir().join(format!(
        "be-failure-{safe}-{}-{}.log",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// The level of a line of the program's log (its text format, `TIMESTAMP LEVEL
/// RunId=… message`, or its JSON lines), and where in `line` the log line starts: an
/// assertion's message often runs on into the log's first line.
fn log_line(line: &str) -> Option<(usize, &'static str)> {
    const LEVELS: [&str; 5] = ["ERROR", "WARN", "INFO", "DEBUG", "TRACE"];
    if let Some(at) = line.find("{\"ts\":\"") {
        let level = LEVELS
            .into_iter()
            .find(|l| line[at..].contains(&format!("\"level\":\"{l}\"")))?;
        return Some((at, level));
    }
    // 2026-12-03T12:44:48.123Z WARN  RunId=…
    let bytes = line.as_bytes();
    let mut from = 0;
    while let Some(i) = line[from..].find('T').map(|i| from + i) {
        from = i + 1;
        let Some(start) = i.checked_sub(10) else {
            continue;
        };
        let date = &bytes[start..i];
        let is_date = date.iter().enumerate().all(|(k, b)| match k {
            4 | 7 => *b == b'-',
            _ => b.is_ascii_digit(),
        });
        if !is_date {
            continue;
        }
        let Some(space) = line[i..].find(' ').map(|s| i + s) else {
            continue;
        };
        if !line[i..space].ends_with('Z') {
            continue;
        }
        let rest = &line[space + 1..];
        if let Some(level) = LEVELS.into_iter().find(|l| rest.starts_with(l)) {
            return Some((start, level));
        }
    }
    None
}

/// The first screen of a long failure message, its whole text written to `file`;
/// `None` for a message short enough to print as it is (or when the file cannot be
/// written: then the message is printed whole, as before).
pub fn first_screen(message: &str, file: &Path) -> Option<String> {
    let total = message.lines().count();
    if total <= SHORT {
        return None;
    }
    let mut text = Vec::new();
    let mut errors = Vec::new();
    let mut differed = Vec::new();
    let mut warnings = Vec::new();
    let mut log_total = 0;
    for line in message.lines() {
        let (own, log) = match log_line(line) {
            Some((at, level)) => (&line[..at], Some((&line[at..], level))),
            None => (line, None),
        };
        let own = own.trim_end();
        if !own.is_empty() {
            if own.contains("booking-expire: error:") {
                errors.push(own);
            } else if own.starts_with("  left: ") || own.starts_with(" right: ") {
                differed.push(own);
            } else {
                text.push(own);
            }
        }
        if let Some((log, level)) = log {
            log_total += 1;
            if matches!(level, "WARN" | "ERROR") {
                warnings.push(log);
            }
        }
    }
    let mut out = String::new();
    // What differed: the assertion's own first line, then its left and right.
    let mut text = text.into_iter();
    if let Some(first) = text.next() {
        out.push_str(first);
        out.push('\n');
    }
    for line in &differed {
        out.push_str(line);
        out.push('\n');
    }
    for line in &errors {
        out.push_str("the program's error: ");
        out.push_str(line);
        out.push('\n');
    }
    // Before the log: within the first lines however long the rest is.
    let mut f = std::fs::File::create(file).ok()?;
    f.write_all(message.as_bytes()).ok()?;
    out.push_str(&format!(
        "the whole message, the program's whole log with it ({total} lines): {}\n",
        file.display()
    ));
    let rest: Vec<&str> = text.collect();
    for line in rest.iter().take(TEXT_LINES) {
        out.push_str(line);
        out.push('\n');
    }
    if rest.len() > TEXT_LINES {
        out.push_str(&format!(
            "({} more lines of the message's own text in the file below)\n",
            rest.len() - TEXT_LINES
        ));
    }
    if log_total > 0 {
        let shown = &warnings[warnings.len().saturating_sub(LOG_LINES)..];
        out.push_str(&format!(
            "the program's log at WARN and above, its last {} of {} (of {log_total} log lines at every level):\n",
            shown.len(),
            warnings.len()
        ));
        for line in shown {
            out.push_str("  ");
            out.push_str(line);
            out.push('\n');
        }
    }
    Some(out.trim_end().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::Run;

    /// What a run of the relay that failed on a loaded host printed: 700 lines of
    /// TRACE and DEBUG (SQL text, librdkafka's internals), a few warnings, and the
    /// one line that matters last.
    fn a_chatty_failed_run() -> Run {
        let mut stderr = String::new();
        let ts = "2026-12-03T12:44:48.123Z";
        for i in 0..700 {
            let level = if i % 2 == 0 { "TRACE" } else { "DEBUG" };
            stderr.push_str(&format!(
                "{ts} {level} RunId=0 librdkafka: BROKER [thrd:sasl_ssl://127.0.0.1:13172/bootstrap]: line {i}\n"
            ));
        }
        for i in 0..45 {
            stderr.push_str(&format!(
                "{ts} WARN  RunId=0 librdkafka: FAIL [thrd:sasl_ssl://127.0.0.1:13172/bootstrap]: warning {i}\n"
            ));
        }
        stderr.push_str(&format!(
            "{ts} INFO  RunId=0 the relay stopped early\n\
             booking-expire: error: cannot reach Kafka at 127.0.0.1:13172 within 5s: \
             SaslAuthenticateRequest failed: Local: Broker transport failure\n"
        ));
        Run {
            code: 69,
            stdout: String::new(),
            stderr,
        }
    }

    /// A deliberately failing assertion of the usual shape (`assert_eq!(run.code, 78,
    /// "{}", run.stderr)`), caught: its first screen has the cause in its first 40
    /// lines (what differed, the program's error line, the file), the last 40 warnings
    /// and no TRACE or DEBUG line, and the file it names has the whole message.
    #[test]
    fn a_failing_assertion_shows_its_cause_in_the_first_screen() {
        let run = a_chatty_failed_run();
        let caught = std::panic::catch_unwind(|| {
            assert_eq!(run.code, 78, "{}", run.stderr);
        })
        .expect_err("the assertion fails");
        let message = caught
            .downcast_ref::<String>()
            .expect("a formatted message");
        assert!(message.lines().count() > 700, "the whole log is in it");
        let file = failure_file("common::failure::tests::a_failing_assertion");
        let screen = first_screen(message, &file).expect("a long message is cut");
        let lines: Vec<&str> = screen.lines().collect();
        let head = &lines[..40.min(lines.len())];
        assert!(
            head[0].starts_with("assertion `left == right` failed"),
            "{screen}"
        );
        assert_eq!(head[1], "  left: 69", "{screen}");
        assert_eq!(head[2], " right: 78", "{screen}");
        assert_eq!(
            head[3],
            "the program's error: booking-expire: error: cannot reach Kafka at \
             127.0.0.1:13172 within 5s: SaslAuthenticateRequest failed: Local: Broker \
             transport failure",
            "{screen}"
        );
        assert!(
            !screen.contains("TRACE") && !screen.contains("DEBUG"),
            "{screen}"
        );
        let warnings: Vec<&&str> = lines
            .iter()
            .filter(|l| l.starts_with("  ") && l.contains(" WARN "))
            .collect();
        assert_eq!(warnings.len(), LOG_LINES, "{screen}");
        assert!(warnings[0].ends_with("warning 5") && warnings[39].ends_with("warning 44"));
        assert_eq!(
            head[4],
            format!(
                "the whole message, the program's whole log with it ({} lines): {}",
                message.lines().count(),
                file.display()
            ),
            "{screen}"
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), *message);
        std::fs::remove_file(&file).unwrap();
    }

    /// The hook is the one the harness installs: a test run by the test binary itself
    /// (this very test with the panic left in, below) prints the first screen, not
    /// the 750 lines, through libtest's captured output.
    #[test]
    fn the_hook_prints_the_first_screen_of_a_failed_test() {
        if std::env::var_os("BE_DELIBERATE_FAILURE").is_some() {
            install();
            let run = a_chatty_failed_run();
            assert_eq!(run.code, 78, "{}", run.stderr);
            return;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "common::failure::tests::the_hook_prints_the_first_screen_of_a_failed_test",
                "--test-threads=1",
            ])
            .env("BE_DELIBERATE_FAILURE", "1")
            .env("TMPDIR", std::env::temp_dir())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            !out.status.success(),
            "the deliberate failure fails: {stdout}"
        );
        // libtest's report: the test's captured output, then the failures' list.
        let report = stdout
            .split("---- common::failure::tests::the_hook_prints_the_first_screen_of_a_failed_test stdout ----\n")
            .nth(1)
            .unwrap_or_else(|| panic!("no captured output in:\n{stdout}"));
        let first: Vec<&str> = report.lines().take(40).collect();
        let first = first.join("\n");
        for want in [
            "panicked at ",
            "assertion `left == right` failed",
            "  left: 69",
            " right: 78",
            "the program's error: booking-expire: error: cannot reach Kafka at 127.0.0.1:13172",
            "the whole message, the program's whole log with it (",
        ] {
            assert!(
                first.contains(want),
                "{want:?} not in the first 40 lines:\n{first}"
            );
        }
        assert!(!report.contains("TRACE"), "{report}");
        let (lines, path) = report
            .lines()
            .find_map(|l| {
                l.split_once("the whole message, the program's whole log with it (")?
                    .1
                    .split_once(" lines): ")
            })
            .unwrap_or_else(|| panic!("no file named in:\n{report}"));
        let whole = std::fs::read_to_string(path).unwrap();
        assert_eq!(whole.lines().count().to_string(), lines);
        assert!(whole.lines().count() > 700, "{whole}");
        std::fs::remove_file(path).unwrap();
    }
}
