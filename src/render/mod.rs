//! What the reports (`dry-run`, `backlog`) and the operator commands (`explain`,
//! `pause`, `republish`, …) print with: aligned plain-text tables, text fitted to 120
//! columns, moments, durations, short ids, and a stdout that tolerates `| head`. Both
//! import it; it imports neither.

mod stdout;
mod table;
mod text;
mod time;

pub use stdout::{Stdout, print, write_error};
pub use table::{StreamTable, Table};
pub use text::{SCREEN_WIDTH, fit, note, wrap};
pub use time::{
    SHORT_ID_WIDTH, TIME_S_WIDTH, TIME_WIDTH, UUID_WIDTH, duration, seconds, seconds_since,
    short_id, since, time, time_s,
};
