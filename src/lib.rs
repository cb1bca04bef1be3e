//! booking-expire: expires overdue CRM bookings and publishes one booking-expired event
//! per expiry through a transactional outbox. The program is [`main`]: parse → resolve →
//! run → report → exit, as ripgrep's `main` reads; everything else lives in the rooms
//! below, private to the crate. The integration tests (`tests/it`) reach what they
//! drive through one door, [`testing`], which lists it in one place.

// No unsafe code, and no item marked `pub` that nothing outside can reach (it is
// `pub(crate)`): the compiler holds both.
#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

use std::process::ExitCode;

use clap::Parser;
use uuid::Uuid;

use crate::cli::{Cli, LogFormat};
use crate::config::{Config, TraceConfig, env};
use crate::shutdown::Shutdown;

mod app;
mod cli;
mod clock;
mod config;
mod cycle;
use booking_expire_domain as domain;
mod exit;
mod kafka;
mod obs;
mod ops;
mod preflight;
mod relay;
mod render;
mod report;
mod shutdown;
use booking_expire_store as store;

/// The program: the command line parsed (`cli`), resolved into a validated
/// configuration (`config`), run (`app`), and its outcome turned into an exit code
/// (`exit`).
pub fn main() -> ExitCode {
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

/// The one door of the integration tests (`tests/it`): what they drive in process (a
/// cycle or a relay run with a clock of their own, a producer, the configuration from
/// flags) and what they check the program's words and references against. Nothing
/// else of the crate is reachable from outside; the store and the domain are crates of
/// their own, which the tests use directly.
#[doc(hidden)]
pub mod testing {
    pub mod cli {
        pub use crate::cli::{AsOf, Cli, Command, parse_as_of, parse_duration, reference};
    }
    pub mod clock {
        pub use crate::clock::{Ambient, Clock, ManualClock, SystemMonotonic, to_micros};
    }
    pub mod config {
        pub use crate::config::{
            DEFAULT_MAX_MESSAGE_BYTES, KafkaConfig, KafkaSecurity, RelayConfig, RunOnceConfig,
        };
    }
    pub mod cycle {
        pub use crate::cycle::{CycleResult, run_cycle, run_once};
    }
    pub mod exit {
        pub use crate::exit::{EXIT_CODES_HELP, Failure, failure_of};
    }
    pub mod kafka {
        pub use crate::kafka::{Delivery, KafkaProducer, OutMessage};
    }
    pub mod obs {
        pub use crate::obs::backlog_only;
    }
    pub mod relay {
        pub use crate::relay::{RelayResult, relay_outbox};
    }
    pub mod render {
        pub use crate::render::{is_control, width};
    }
    pub mod shutdown {
        pub use crate::shutdown::Shutdown;
    }
}
