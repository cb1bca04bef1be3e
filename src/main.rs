//! booking-expire: parse, run, map the error to an exit code in one place.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use booking_expire::cli::{self, Cli, Command, MetricsArgs};
use booking_expire::clock::SystemClock;
use booking_expire::config::DbConfig;
use booking_expire::obs::metrics::{self, Pushgateway};
use booking_expire::{config, cycle, exit, obs, relay, report, shutdown};
use clap::Parser;
use uuid::Uuid;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return cli::usage_error(e),
    };
    let run_id = Uuid::new_v4();
    obs::init_logging(cli.log_format, run_id);
    exit::install_panic_hook(matches!(cli.log_format, obs::LogFormat::Json));
    // Lets the tests prove that a panic ends the run with 70 and one line.
    if std::env::var_os("BOOKING_EXPIRE_TEST_PANIC").is_some() {
        panic!("panic requested by BOOKING_EXPIRE_TEST_PANIC");
    }
    let tracing = match &cli.command {
        Command::RunOnce(_) => obs::trace::init(run_id, "run-once"),
        Command::RelayOutbox(_) => obs::trace::init(run_id, "relay-outbox"),
        _ => obs::trace::init_off(),
    };
    let outcome = run(cli.command, run_id);
    tracing.finish();
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let code = exit::exit_code(&e);
            // Once, on stderr: a JSON line for log collectors, else plain text.
            match cli.log_format {
                obs::LogFormat::Json => log::error!(error:% = format!("{e:#}"); "failed"),
                obs::LogFormat::Text => eprintln!("booking-expire: error: {e:#}"),
            }
            code
        }
    }
}

fn run(command: Command, run_id: Uuid) -> anyhow::Result<()> {
    shutdown::install()?;
    match command {
        Command::RunOnce(args) => run_pushed(
            &args.metrics,
            cycle::CycleResult {
                run_id,
                ..Default::default()
            },
            |result| match config::RunOnceConfig::from_args(&args) {
                Ok(cfg) => (
                    Some(cfg.db.clone()),
                    cycle::run_once(&cfg, &SystemClock, result),
                ),
                Err(e) => (None, Err(e)),
            },
            metrics::push_cycle,
        ),
        Command::RelayOutbox(args) => run_pushed(
            &args.metrics,
            relay::RelayResult {
                run_id,
                ..Default::default()
            },
            |result| match config::RelayConfig::from_args(&args) {
                Ok(cfg) => (
                    Some(cfg.db.clone()),
                    relay::relay_outbox(&cfg, &SystemClock, result),
                ),
                Err(e) => (None, Err(e)),
            },
            metrics::push_relay,
        ),
        Command::DryRun(args) => report::dry_run(&args, run_id),
        Command::Backlog(args) => report::backlog(&args),
    }
}

/// Runs a command that reports metrics, pushes them (success or failure, never
/// changing the outcome), then prints the result as one JSON line.
fn run_pushed<R: serde::Serialize>(
    metrics: &MetricsArgs,
    mut result: R,
    work: impl FnOnce(&mut R) -> (Option<DbConfig>, anyhow::Result<()>),
    push: impl FnOnce(&Pushgateway, Option<&DbConfig>, &R, &anyhow::Result<()>, Duration),
) -> anyhow::Result<()> {
    let pushgateway = Pushgateway::from_args(metrics)?;
    let started = Instant::now();
    let (db, outcome) = work(&mut result);
    if let Some(gateway) = &pushgateway {
        push(gateway, db.as_ref(), &result, &outcome, started.elapsed());
    }
    outcome?;
    println!("{}", serde_json::to_string(&result)?);
    Ok(())
}
