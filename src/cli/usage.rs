//! Usage errors: clap's message, with notes on what clap does not say (which
//! environment variable a bad value came from, which input is not UTF-8, whose value a
//! negative number was meant to be), as text or as one JSON line. A function of the
//! arguments given, the environment's lookup and the error, so it is unit-tested.

use std::ffi::OsString;

use super::command::Cli;
use crate::exit::Failure;

/// What a usage error says besides clap's message, and how it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Usage {
    /// --help or --version: shown, not refused.
    pub shown: bool,
    /// Written as one JSON line (`--log-format json`, flag or variable).
    pub json: bool,
    /// What clap does not say, one note each.
    pub notes: Vec<String>,
}

/// The environment as the usage notes read it: a variable's value, if set.
pub(super) type Lookup<'a> = &'a dyn Fn(&str) -> Option<OsString>;

/// Prints a command-line error and says what it was: `Ok` for --help/--version (they
/// are shown, not refused), a usage failure otherwise; `exit::usage_code` names the
/// code. `args` is the command line clap was given; see [`explain`] for the notes.
pub(crate) fn usage_error(e: clap::Error, args: &[OsString]) -> Result<(), Failure> {
    let usage = explain(&e, args, &|name| std::env::var_os(name));
    if usage.shown {
        let _ = e.print();
        return Ok(());
    }
    // Written without eprintln!, which panics when stderr is closed.
    if usage.json {
        crate::exit::error_line(&usage_json(&e.render().to_string(), &usage.notes));
    } else {
        // clap's message quotes the value refused, which may carry control characters.
        crate::exit::error_line(e.render().to_string().trim_end());
        for note in &usage.notes {
            crate::exit::error_line(&format!("note: {note}"));
        }
    }
    Err(Failure::Usage)
}

/// What error `e` of the command line `args` (the program's name first) says besides
/// clap's message, with the environment read through `env`. When the bad value came
/// from an environment variable, says which, since clap's message only names the flag.
pub(super) fn explain(e: &clap::Error, args: &[OsString], env: Lookup) -> Usage {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let json = json_logging_asked(args, env);
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        return Usage {
            shown: true,
            json,
            notes: Vec::new(),
        };
    }
    let mut notes = Vec::new();
    if let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) {
        let flag = arg.split_whitespace().next().unwrap_or(arg);
        let typed = args.iter().skip(1).any(|a| {
            a.to_str()
                .is_some_and(|a| a == flag || a.starts_with(&format!("{flag}=")))
        });
        if let Some(var) = env_of(flag, args).filter(|var| !typed && env(var).is_some()) {
            notes.push(format!(
                "the value of {flag} came from the environment variable {var}"
            ));
        }
    }
    match e.kind() {
        // clap names neither the flag nor the variable whose value is not UTF-8.
        ErrorKind::InvalidUtf8 => {
            for input in non_utf8_inputs(args, env) {
                notes.push(format!("{input} is not valid UTF-8"));
            }
        }
        // `--batch-size -1`: clap reads `-1` as a flag of its own and does not say whose
        // value it was meant to be.
        ErrorKind::UnknownArgument => {
            if let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg)
                && let Some(flag) = flag_before_negative(arg, args)
            {
                notes.push(format!(
                    "{arg} was read as a flag, not as the value of {flag}, which takes no negative value"
                ));
            }
        }
        _ => {}
    }
    Usage {
        shown: false,
        json,
        notes,
    }
}

/// Whether the command line or the environment asks for JSON logs: read by hand, since
/// the command line that says so is the one clap refused.
fn json_logging_asked(args: &[OsString], env: Lookup) -> bool {
    let args: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().trim().to_owned())
        .collect();
    let from_args = args.iter().enumerate().rev().find_map(|(i, a)| {
        if let Some(v) = a.strip_prefix("--log-format=") {
            Some(v.trim().to_owned())
        } else if a == "--log-format" {
            args.get(i + 1).cloned()
        } else {
            None
        }
    });
    from_args
        .or_else(|| env("LOG_FORMAT").and_then(|v| v.into_string().ok()))
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("json"))
}

/// A usage error as one JSON line: clap's message (its lines joined), the usage line
/// apart, and the notes.
fn usage_json(rendered: &str, notes: &[String]) -> String {
    let mut message = Vec::new();
    let mut usage = None;
    for line in rendered.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(u) = line.strip_prefix("Usage: ") {
            usage = Some(u.to_owned());
        } else if !line.starts_with("For more information, try") {
            message.push(line.strip_prefix("error: ").unwrap_or(line).to_owned());
        }
    }
    let mut line = serde_json::Map::new();
    let now = crate::clock::Clock::now(&crate::clock::SystemClock)
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    line.insert("ts".into(), now.into());
    line.insert("level".into(), "ERROR".into());
    line.insert("msg".into(), "usage error".into());
    line.insert("error".into(), message.join("; ").into());
    if let Some(usage) = usage {
        line.insert("usage".into(), usage.into());
    }
    if !notes.is_empty() {
        line.insert("notes".into(), notes.to_vec().into());
    }
    line.insert("exit_code".into(), Failure::Usage.code().into());
    crate::render::json_safe(serde_json::Value::Object(line).to_string())
}

/// The flag typed right before `value` when `value` looks like a negative number.
fn flag_before_negative(value: &str, args: &[OsString]) -> Option<String> {
    let digits = value.strip_prefix('-')?;
    if !digits.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let at = args.iter().position(|a| a.to_str() == Some(value))?;
    args.get(at.checked_sub(1)?)?
        .to_str()
        .filter(|flag| flag.starts_with("--") && !flag.contains('='))
        .map(str::to_owned)
}

/// The command-line values and the environment variables of this program that are not
/// UTF-8, named as the user typed or set them.
fn non_utf8_inputs(args: &[OsString], env: Lookup) -> Vec<String> {
    use clap::CommandFactory;
    let mut inputs = Vec::new();
    for (i, arg) in args.iter().enumerate().skip(1) {
        if arg.to_str().is_some() {
            continue;
        }
        let shown = arg.to_string_lossy();
        let flag = match shown.split_once('=') {
            Some((flag, _)) if flag.starts_with("--") => Some(flag.to_owned()),
            _ => args[i - 1]
                .to_str()
                .filter(|prev| prev.starts_with("--") && !prev.contains('='))
                .map(str::to_owned),
        };
        inputs.push(match flag {
            Some(flag) => format!("the value of {flag}"),
            None => format!("argument {i} ({shown:?})"),
        });
    }
    let cmd = Cli::command();
    let mut vars: Vec<String> = std::iter::once(&cmd)
        .chain(cmd.get_subcommands())
        .flat_map(|c| c.get_arguments())
        .filter_map(|a| a.get_env())
        .map(|env| env.to_string_lossy().into_owned())
        .collect();
    vars.sort();
    vars.dedup();
    for var in vars {
        if env(&var).is_some_and(|v| v.to_str().is_none()) {
            inputs.push(format!("the environment variable {var}"));
        }
    }
    inputs
}

/// The environment variable behind a long flag of the subcommand typed (two
/// subcommands may read the same flag from different variables), or of any.
fn env_of(flag: &str, args: &[OsString]) -> Option<String> {
    use clap::CommandFactory;
    let long = flag.strip_prefix("--")?;
    let cmd = Cli::command();
    let typed = args
        .iter()
        .skip(1)
        .find_map(|a| cmd.find_subcommand(a).map(|s| s.get_name().to_owned()));
    let commands = std::iter::once(&cmd).chain(
        cmd.get_subcommands()
            .filter(|s| typed.as_deref().is_none_or(|t| t == s.get_name())),
    );
    commands
        .flat_map(|c| c.get_arguments())
        .find(|a| a.get_long() == Some(long))
        .and_then(|a| a.get_env())
        .map(|env| env.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_usage_error_under_json_logging_is_one_json_object() {
        let rendered = "error: invalid value 'abc' for '--statement-timeout <DURATION>': \
                        \"abc\": expected a whole number\n\nFor more information, try '--help'.\n";
        let line = usage_json(
            rendered,
            &["the value of --statement-timeout came from X".into()],
        );
        assert!(!line.contains('\n'), "{line}");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            v["error"],
            "invalid value 'abc' for '--statement-timeout <DURATION>': \"abc\": expected a whole number"
        );
        assert_eq!(v["level"], "ERROR");
        assert_eq!(v["exit_code"], 64);
        assert_eq!(
            v["notes"][0],
            "the value of --statement-timeout came from X"
        );
    }

    use std::os::unix::ffi::OsStringExt;

    use clap::Parser;

    fn argv(words: &[&str]) -> Vec<OsString> {
        std::iter::once("booking-expire")
            .chain(words.iter().copied())
            .map(OsString::from)
            .collect()
    }

    fn error_of(args: &[OsString]) -> clap::Error {
        Cli::try_parse_from(args).expect_err("a usage error")
    }

    /// An environment holding `vars` only.
    fn env_with(
        vars: &'static [(&'static str, &'static str)],
    ) -> impl Fn(&str) -> Option<OsString> {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn a_bad_value_not_typed_is_said_to_come_from_the_subcommands_variable() {
        let e = error_of(&argv(&["relay-outbox", "--batch-size", "abc"]));
        let env = env_with(&[("OUTBOX_RELAY_BATCH_SIZE", "abc")]);
        // As clap saw it from the environment: the flag is not on the command line.
        let from_env = explain(&e, &argv(&["relay-outbox"]), &env);
        assert_eq!(
            from_env.notes,
            [
                "the value of --batch-size came from the environment variable OUTBOX_RELAY_BATCH_SIZE"
            ]
        );
        assert!(!from_env.shown && !from_env.json);
        // Typed, the flag is the one named: no note.
        let typed = explain(&e, &argv(&["relay-outbox", "--batch-size", "abc"]), &env);
        assert_eq!(typed.notes, Vec::<String>::new());
        let joined = explain(&e, &argv(&["relay-outbox", "--batch-size=abc"]), &env);
        assert_eq!(joined.notes, Vec::<String>::new());
        // Not set in the environment either: no note.
        let unset = explain(&e, &argv(&["relay-outbox"]), &env_with(&[]));
        assert_eq!(unset.notes, Vec::<String>::new());
    }

    #[test]
    fn a_negative_number_is_named_as_the_value_meant_for_the_flag_before_it() {
        let args = argv(&["run-once", "--batch-size", "-1"]);
        let usage = explain(&error_of(&args), &args, &env_with(&[]));
        assert_eq!(
            usage.notes,
            [
                "-1 was read as a flag, not as the value of --batch-size, which takes no negative value"
            ]
        );
    }

    #[test]
    fn inputs_that_are_not_utf8_are_named() {
        let mut args = argv(&["run-once", "--database-url"]);
        args.push(OsString::from_vec(vec![b'p', 0xff]));
        let e = error_of(&args);
        let env = |name: &str| (name == "KAFKA_BROKERS").then(|| OsString::from_vec(vec![0xfe]));
        assert_eq!(
            explain(&e, &args, &env).notes,
            [
                "the value of --database-url is not valid UTF-8",
                "the environment variable KAFKA_BROKERS is not valid UTF-8"
            ]
        );
        let mut joined = argv(&["run-once"]);
        let mut arg = OsString::from("--topics=");
        arg.push(OsString::from_vec(vec![0xff]));
        joined.push(arg);
        assert_eq!(
            explain(&error_of(&joined), &joined, &env_with(&[])).notes,
            ["the value of --topics is not valid UTF-8"]
        );
    }

    #[test]
    fn json_is_asked_by_the_last_flag_or_else_the_variable() {
        let args = argv(&["run-once", "--batch-size", "x", "--log-format=json"]);
        let e = error_of(&args);
        assert!(explain(&e, &args, &env_with(&[])).json);
        let args = argv(&["--log-format", "json", "run-once", "--batch-size", "x"]);
        assert!(explain(&e, &args, &env_with(&[("LOG_FORMAT", "text")])).json);
        let args = argv(&["--log-format", "text", "run-once", "--batch-size", "x"]);
        assert!(!explain(&e, &args, &env_with(&[("LOG_FORMAT", "json")])).json);
        let args = argv(&["run-once", "--batch-size", "x"]);
        assert!(explain(&e, &args, &env_with(&[("LOG_FORMAT", " JSON ")])).json);
        assert!(!explain(&e, &args, &env_with(&[])).json);
    }

    #[test]
    fn help_and_version_are_shown_not_refused() {
        for words in [&["--help"][..], &["--version"], &["run-once", "-h"]] {
            let args = argv(words);
            let usage = explain(&error_of(&args), &args, &env_with(&[]));
            assert!(usage.shown, "{words:?}");
            assert_eq!(usage.notes, Vec::<String>::new());
        }
    }
}
