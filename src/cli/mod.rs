//! The command line as typed: clap definitions with their environment fallbacks, the
//! first of the two stages (`config` resolves and validates what is typed here). Every
//! environment variable the program reads is an argument here, so `--help` and the
//! generated reference show it. The rooms: the subcommands and their help (`command`),
//! the shared connection flags (`connect`), the jobs' and reports' flags (`work`), the
//! operator commands' (`operate`), the migration runner's (`migrate`), value parsers
//! (`values`), usage errors (`usage`), and the reference generated from them
//! (`reference`: the CLI reference, the man pages, the completion scripts).

mod command;
mod connect;
mod migrate;
mod operate;
pub mod reference;
mod usage;
mod values;
mod work;

pub use self::command::{Cli, Command, LogFormat, VERSION_LINE};
pub use self::connect::*;
pub use self::migrate::*;
pub use self::operate::*;
pub use self::usage::usage_error;
pub use self::values::{IdArg, parse_as_of};
pub use self::work::*;
pub use crate::domain::AsOf;
pub use crate::store::duration::{parse_duration, show_duration};
