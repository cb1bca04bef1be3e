//! booking-expire: parse → resolve → run → report → exit, as ripgrep's `main.rs` reads.
//! The command line is parsed (`cli`), resolved into a validated configuration
//! (`config`), run (`app`), and its outcome turned into an exit code (`exit`).

// No unsafe code: the compiler holds it.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use booking_expire::cli::{self, Cli, LogFormat};
use booking_expire::config::{Config, TraceConfig, env};
use booking_expire::shutdown::Shutdown;
use booking_expire::{app, exit, obs};
use clap::Parser;
use uuid::Uuid;

fn main() -> ExitCode {
    // Whitespace around a value, from a flag or the environment, is no part of it:
    // every value parser of `cli` is `trimmed`.
    let args: Vec<_> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => return exit::usage_code(cli::usage_error(e, &args)),
    };
    let run_id = Uuid::new_v4();
    let json = cli.log_format == LogFormat::Json;
    obs::init_logging(cli.log_format.into(), cli.default_log_filter(), run_id);
    exit::install_panic_hook(json);
    env::warn_unknown();
    // Lets the tests prove that a panic ends the run with 70 and one line.
    if env::test_panic_asked() {
        panic!("panic requested by BOOKING_EXPIRE_TEST_PANIC");
    }
    let tracing = match TraceConfig::of(&cli.command) {
        Some((cfg, command)) => obs::trace::init(run_id, command, &cfg),
        None => obs::trace::init_off(),
    };
    let shutdown = Shutdown::new();
    let outcome = match Config::resolve(cli.command) {
        Ok(config) => app::run(config, run_id, &shutdown),
        Err(refused) => Err(app::refused(refused, run_id)),
    };
    tracing.finish();
    exit::report(outcome, json, shutdown.requested())
}
