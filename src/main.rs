//! booking-expire: parse, run, map the error to an exit code in one place.

use std::process::ExitCode;

use booking_expire::cli::{self, Cli, Command};
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
    match run(cli.command, run_id) {
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
        Command::RunOnce(args) => {
            let cfg = config::RunOnceConfig::from_args(&args)?;
            let result = cycle::run_once(&cfg, run_id)?;
            println!("{}", serde_json::to_string(&result)?);
            Ok(())
        }
        Command::RelayOutbox(args) => {
            let cfg = config::RelayConfig::from_args(&args)?;
            let result = relay::relay_outbox(&cfg, run_id)?;
            println!("{}", serde_json::to_string(&result)?);
            Ok(())
        }
        Command::DryRun(args) => report::dry_run(&args, run_id),
        Command::Backlog(args) => report::backlog(&args),
    }
}
