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

pub(crate) use self::command::LogFormat;
pub use self::command::{Cli, Command};
pub(crate) use self::connect::*;
pub(crate) use self::migrate::*;
pub(crate) use self::operate::*;
pub(crate) use self::usage::usage_error;
pub(crate) use self::values::IdArg;
pub use self::values::parse_as_of;
pub(crate) use self::work::*;
pub use crate::domain::AsOf;
pub use crate::store::duration::parse_duration;
