//! Reference material generated from the clap definitions of this room, so it cannot
//! drift from `--help`: the Markdown CLI reference (`docs/reference/cli.md`), the man
//! pages (`docs/reference/man/`) and the shell completion scripts (`completions`, which
//! `config` renders for the command). No other file of `cli` imports this one.
//! `tests/it/reference.rs` compares the committed files with what this renders.

use std::fmt::Write as _;

use clap::{Arg, ArgAction, CommandFactory};

use super::command::Cli;
use super::operate::Shell;
use crate::exit::EXIT_CODES_HELP;

/// The program's name as installed and completed.
pub const BIN: &str = "booking-expire";

/// The one command that regenerates every generated reference file.
pub const REGENERATE: &str = "UPDATE_REFERENCE=1 cargo test --test it reference::";

/// Where the generated files live, relative to the repository's root.
pub const CLI_MARKDOWN_PATH: &str = "docs/reference/cli.md";
pub const MAN_DIR: &str = "docs/reference/man";

/// The whole command line definition, built (subcommands know their full names).
pub fn command() -> clap::Command {
    let mut cmd = Cli::command().bin_name(BIN).disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// The completion script for `shell`.
pub fn completions(shell: Shell) -> Vec<u8> {
    let mut cmd = command();
    let shell = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, BIN, &mut script);
    if shell == clap_complete::Shell::Bash {
        // clap_complete's bash script names a subcommand's state `booking__expire__subcmd__x`
        // where it sets it but `booking__subcmd__expire__subcmd__x` where it matches it, for
        // any hyphenated program name (clap-rs/clap#6421): no flag of a subcommand would
        // complete. Spell the matches the way the state is set.
        let text =
            String::from_utf8_lossy(&script).replace("booking__subcmd__expire", "booking__expire");
        script = text.into_bytes();
    }
    script
}

/// The man pages, as (file name, roff text): `booking-expire.1` and one
/// `booking-expire-<subcommand>.1` per subcommand, as git and cargo ship theirs.
pub fn man_pages() -> Vec<(String, Vec<u8>)> {
    let root = command();
    let mut pages = Vec::new();
    for cmd in std::iter::once(&root).chain(visible_subcommands(&root)) {
        // The version alone: the commit in `--version` changes with every commit, and the
        // committed pages must not.
        let page = cmd.clone().version(env!("CARGO_PKG_VERSION"));
        let man = clap_mangen::Man::new(page).manual("booking-expire manual");
        let mut text = Vec::new();
        man.render(&mut text)
            .expect("rendering into memory does not fail");
        pages.push((man.get_filename(), text));
    }
    pages
}

fn visible_subcommands(cmd: &clap::Command) -> impl Iterator<Item = &clap::Command> {
    cmd.get_subcommands().filter(|s| !s.is_hide_set())
}

/// The Markdown CLI reference: every subcommand with its description, usage and a
/// table of its options (flag, environment variable, default, meaning), then every
/// environment variable a flag reads.
pub fn cli_markdown() -> String {
    let root = command();
    let mut md = String::new();
    let _ = writeln!(
        md,
        "<!-- Generated from src/cli/ by `{REGENERATE}`; do not edit by hand: change the \
         help texts in src/cli/ and run that command. -->"
    );
    md.push_str("\n# Command-line reference\n\n");
    let _ = writeln!(
        md,
        "Generated from the command line's definition, so it says what `{BIN} --help` says. \
         Regenerate it with `{REGENERATE}` (the same test fails when it is out of date). \
         The man pages in [man/](man/) come from the same definition. Every flag that \
         names an environment variable may be set through it; the flag wins. Durations are \
         written `500ms`, `5s`, `2m`, `7d`. Exit codes: [exit-codes.md](exit-codes.md).\n"
    );
    md.push_str("| command | what it does |\n|---|---|\n");
    for sub in visible_subcommands(&root) {
        let _ = writeln!(
            md,
            "| [`{}`](#{}) | {} |",
            sub.get_name(),
            anchor(&format!("{BIN} {}", sub.get_name())),
            cell(&text(sub.get_about()))
        );
    }
    md.push_str("\n## Global options\n\nAccepted by every command.\n\n");
    options_table(&mut md, root.get_arguments().filter(|a| !skip(a)));
    for sub in visible_subcommands(&root) {
        let _ = writeln!(md, "\n## `{BIN} {}`\n", sub.get_name());
        let about = sub.get_long_about().or(sub.get_about());
        let _ = writeln!(md, "{}\n", paragraphs(&text(about)));
        let usage = sub.clone().render_usage().to_string();
        let usage = usage.strip_prefix("Usage: ").unwrap_or(&usage);
        let _ = writeln!(md, "```\n{usage}\n```\n");
        let args: Vec<&Arg> = sub
            .get_arguments()
            .filter(|a| !skip(a) && !a.is_global_set())
            .collect();
        if args.is_empty() {
            md.push_str("No options besides the global ones.\n");
        } else {
            options_table(&mut md, args.into_iter());
        }
        // What `--help` prints after the options (examples, notes), as it prints it;
        // the exit codes are said once, in exit-codes.md.
        let after = [sub.get_after_long_help(), sub.get_after_help()];
        let mut shown = Vec::new();
        for text in after.into_iter().flatten().map(|t| t.to_string()) {
            if text.trim() != EXIT_CODES_HELP.trim() && !shown.contains(&text) {
                let _ = writeln!(md, "\n```text\n{}\n```", text.trim_end());
                shown.push(text);
            }
        }
    }
    md.push_str("\n## Environment variables read by flags\n\n");
    md.push_str("| variable | flag | commands |\n|---|---|---|\n");
    let mut envs: Vec<(String, String, Vec<String>)> = Vec::new();
    let commands = std::iter::once(&root).chain(visible_subcommands(&root));
    for cmd in commands {
        for arg in cmd.get_arguments().filter(|a| !skip(a)) {
            let Some(env) = arg.get_env() else { continue };
            let env = env.to_string_lossy().into_owned();
            let flag = flag_name(arg);
            let user = if arg.is_global_set() {
                "all".to_owned()
            } else {
                cmd.get_name().to_owned()
            };
            match envs.iter_mut().find(|(e, f, _)| *e == env && *f == flag) {
                Some((_, _, users)) => {
                    if !users.contains(&user) {
                        users.push(user)
                    }
                }
                None => envs.push((env, flag, vec![user])),
            }
        }
    }
    envs.sort();
    for (env, flag, users) in envs {
        let _ = writeln!(md, "| `{env}` | `{flag}` | {} |", users.join(", "));
    }
    md.push_str("\n## Other environment variables\n\n");
    md.push_str("| variable | meaning |\n|---|---|\n");
    for (env, meaning) in OTHER_ENVIRONMENT {
        let _ = writeln!(md, "| `{env}` | {} |", cell(meaning));
    }
    md
}

/// The environment variables read besides the flags' own, with what they do.
pub const OTHER_ENVIRONMENT: &[(&str, &str)] = &[
    (
        "RUST_LOG",
        "the log filter; default `warn,booking_expire=info` (`warn` for `dry-run` and `backlog` without `-v`)",
    ),
    (
        "LOG_STYLE",
        "colours in text logs: `never` (default), `auto`, `always`",
    ),
    (
        "BOOKING_EXPIRE_COMMIT",
        "read when the binary is built, not when it runs: the commit `--version` names (the image's build argument; else `git rev-parse HEAD`, else `unknown`)",
    ),
];

/// The built-in `--help`/`--version` flags are said once, not per command.
fn skip(arg: &Arg) -> bool {
    arg.is_hide_set() || matches!(arg.get_action(), ArgAction::Help | ArgAction::Version)
}

fn options_table<'a>(md: &mut String, args: impl Iterator<Item = &'a Arg>) {
    md.push_str("| option | environment | default | meaning |\n|---|---|---|---|\n");
    for arg in args {
        let env = arg
            .get_env()
            .map(|e| format!("`{}`", e.to_string_lossy()))
            .unwrap_or_default();
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| format!("`{}`", v.to_string_lossy()))
            .collect();
        let takes_value = matches!(arg.get_action(), ArgAction::Set | ArgAction::Append);
        let default = if !defaults.is_empty() && takes_value {
            defaults.join(", ")
        } else if arg.is_required_set() {
            "(required)".to_owned()
        } else {
            String::new()
        };
        let mut meaning = text(arg.get_long_help().or(arg.get_help()));
        let values: Vec<String> = arg
            .get_possible_values()
            .iter()
            .filter(|v| !v.is_hide_set())
            .map(|v| match v.get_help() {
                Some(help) => format!("`{}` ({})", v.get_name(), help),
                None => format!("`{}`", v.get_name()),
            })
            .collect();
        if takes_value && !values.is_empty() {
            let _ = write!(meaning, ". Values: {}", values.join(", "));
        }
        let _ = writeln!(
            md,
            "| `{}` | {env} | {default} | {} |",
            usage_of(arg),
            cell(&meaning)
        );
    }
}

/// How an argument is typed: `-v, --verbose`, `--batch-size <N>`, `<BOOKING_ID>`.
fn usage_of(arg: &Arg) -> String {
    let value = arg
        .get_value_names()
        .map(|names| {
            names
                .iter()
                .map(|n| format!("<{n}>"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| format!("<{}>", arg.get_id().as_str().to_uppercase()));
    if arg.is_positional() {
        return value;
    }
    let mut names = Vec::new();
    if let Some(short) = arg.get_short() {
        names.push(format!("-{short}"));
    }
    if let Some(long) = arg.get_long() {
        names.push(format!("--{long}"));
    }
    let mut usage = names.join(", ");
    if matches!(arg.get_action(), ArgAction::Set | ArgAction::Append) {
        usage.push(' ');
        usage.push_str(&value);
    }
    usage
}

fn flag_name(arg: &Arg) -> String {
    match arg.get_long() {
        Some(long) => format!("--{long}"),
        None => usage_of(arg),
    }
}

fn text(s: Option<&clap::builder::StyledStr>) -> String {
    s.map(|s| s.to_string()).unwrap_or_default()
}

/// A help text as Markdown paragraphs: clap keeps the blank lines between them.
fn paragraphs(s: &str) -> String {
    s.split("\n\n")
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// A help text in one table cell: one line, pipes escaped.
fn cell(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// GitHub's anchor for a heading: lower case, spaces to hyphens, punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}
