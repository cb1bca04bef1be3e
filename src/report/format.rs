//! What both reports print with: aligned plain-text tables (no colour, so they paste
//! into an incident channel as they are), times, durations, and stdout.

use std::io::Write;

use anyhow::Result;
use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};

/// A plain-text table: columns padded to their widest cell, two spaces apart, no
/// trailing blanks.
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&'static str]) -> Self {
        Table {
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.headers.len());
        self.rows.push(cells);
    }

    pub fn render(&self, out: &mut String) {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let headers: Vec<String> = self.headers.iter().map(|h| h.to_string()).collect();
        for row in std::iter::once(&headers).chain(&self.rows) {
            let mut line = String::new();
            for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                line.push_str(cell);
                line.extend(std::iter::repeat_n(' ', w - cell.chars().count()));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
}

/// A moment for people: UTC, fractions of a second only when there are any.
pub fn time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// A duration for people: `2d 3h 0m 5s`, `4m 10s`, `45s`, `250ms`.
pub fn duration(d: TimeDelta) -> String {
    if d < TimeDelta::zero() {
        return format!("-{}", duration(-d));
    }
    let secs = d.num_seconds();
    if secs == 0 {
        return format!("{}ms", d.num_milliseconds());
    }
    let (days, hours, minutes, seconds) = (
        secs / 86_400,
        secs % 86_400 / 3_600,
        secs % 3_600 / 60,
        secs % 60,
    );
    let parts = [(days, "d"), (hours, "h"), (minutes, "m"), (seconds, "s")];
    let first = parts.iter().position(|(n, _)| *n > 0).unwrap_or(3);
    parts[first..]
        .iter()
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Seconds with microsecond precision, for JSON and metrics.
pub fn seconds(d: TimeDelta) -> f64 {
    d.num_microseconds()
        .map_or(d.num_seconds() as f64, |us| us as f64 / 1e6)
}

/// Writes the report to stdout at once. A reader that went away (`| head`) is not an
/// error of the report.
pub fn print(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::Error::new(e).context("cannot write the report to stdout"))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_an_operator_writes_them() {
        assert_eq!(duration(TimeDelta::milliseconds(250)), "250ms");
        assert_eq!(duration(TimeDelta::microseconds(1)), "0ms");
        assert_eq!(duration(TimeDelta::seconds(45)), "45s");
        assert_eq!(duration(TimeDelta::seconds(250)), "4m 10s");
        assert_eq!(duration(TimeDelta::seconds(7_200)), "2h 0m 0s");
        assert_eq!(
            duration(TimeDelta::seconds(2 * 86_400 + 3 * 3_600 + 5)),
            "2d 3h 0m 5s"
        );
        assert_eq!(duration(TimeDelta::seconds(-90)), "-1m 30s");
    }

    #[test]
    fn seconds_keep_microseconds() {
        assert_eq!(seconds(TimeDelta::microseconds(7_200_000_123)), 7200.000123);
    }

    #[test]
    fn tables_align_columns_without_trailing_blanks() {
        let mut t = Table::new(&["A", "Status", "C"]);
        t.row(vec![
            "x".into(),
            "Reserved → ReserveExpired".into(),
            "".into(),
        ]);
        t.row(vec!["long".into(), "y".into(), "z".into()]);
        let mut out = String::new();
        t.render(&mut out);
        assert_eq!(
            out,
            "A     Status                     C\n\
             x     Reserved → ReserveExpired\n\
             long  y                          z\n"
        );
    }
}
