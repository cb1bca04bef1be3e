//! What the reports (`dry-run`, `backlog`) and the operator commands (`explain`,
//! `pause`, `republish`, …) print with: aligned plain-text tables, text fitted to 120
//! columns, moments, durations, short ids, and a stdout that tolerates `| head`. Both
//! import it; it imports neither. Text from outside the program is escaped on its way
//! out (`escape`): tables, fitted and wrapped text escape what they are given, and
//! [`print()`], [`Stdout::text`] and the error line escape again whatever was written
//! around them; JSON is written with [`json_line`].

mod escape;
mod stdout;
mod table;
mod text;
mod time;

pub use escape::is_control;
pub(crate) use escape::{escape, escape_lines, json_line, json_safe};
pub(crate) use stdout::{Stdout, print, print_json};
pub(crate) use table::{StreamTable, Table};
pub use text::width;
pub(crate) use text::{SCREEN_WIDTH, fit, note, wrap};
pub(crate) use time::{
    SHORT_ID_WIDTH, TIME_S_WIDTH, TIME_WIDTH, UUID_WIDTH, duration, seconds, seconds_since,
    short_id, since, time, time_s,
};
