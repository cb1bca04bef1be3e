//! What both reports print with: aligned plain-text tables (no colour, so they paste
//! into an incident channel as they are), times, durations, and stdout.

use std::io::{self, BufWriter, StdoutLock, Write};

use anyhow::Result;
use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};

use crate::domain::Timestamp;

/// A plain-text table: columns padded to their widest cell, two spaces apart, no
/// trailing blanks.
pub struct Table {
    headers: Vec<&'static str>,
    /// Each row with the lines of text under it (see [`Table::note`]).
    rows: Vec<(Vec<String>, Vec<String>)>,
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
        self.rows.push((cells, Vec::new()));
    }

    /// A line of text under the last row, indented and outside the columns: for a cell
    /// too long to share a line with the others (an error message). It is printed as
    /// given; [`note`] makes one that fits the screen.
    pub fn note(&mut self, line: String) {
        if let Some((_, notes)) = self.rows.last_mut() {
            notes.push(line);
        }
    }

    pub fn render(&self, out: &mut String) {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for (row, _) in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        push_line(out, &self.headers, &widths);
        for (row, notes) in &self.rows {
            push_line(out, row, &widths);
            for note in notes {
                out.push_str(note);
                out.push('\n');
            }
        }
    }
}

/// A table written row by row, for listings too long to hold: each column is as wide as
/// its header or the width given up front, whichever is wider, so a row is printed as it
/// comes and the layout does not depend on the other rows. A longer cell is never cut;
/// it shifts the rest of its row. Like [`Table`]: two spaces apart, no trailing blanks
/// (so the last column's width does not matter).
pub struct StreamTable {
    headers: Vec<&'static str>,
    widths: Vec<usize>,
}

impl StreamTable {
    /// `columns`: each header with the width its cells take at most.
    pub fn new(columns: &[(&'static str, usize)]) -> Self {
        StreamTable {
            headers: columns.iter().map(|(h, _)| *h).collect(),
            widths: columns
                .iter()
                .map(|(h, w)| h.chars().count().max(*w))
                .collect(),
        }
    }

    pub fn header(&self, out: &mut String) {
        push_line(out, &self.headers, &self.widths);
    }

    pub fn row(&self, cells: &[String], out: &mut String) {
        debug_assert_eq!(cells.len(), self.widths.len());
        push_line(out, cells, &self.widths);
    }
}

/// One table line: cells padded to their column's width, two spaces apart, no
/// trailing blanks.
fn push_line(out: &mut String, cells: &[impl AsRef<str>], widths: &[usize]) {
    let start = out.len();
    for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
        let cell = cell.as_ref();
        if i > 0 {
            out.push_str("  ");
        }
        out.push_str(cell);
        out.extend(std::iter::repeat_n(
            ' ',
            w.saturating_sub(cell.chars().count()),
        ));
    }
    let end = start + out[start..].trim_end().len();
    out.truncate(end);
    out.push('\n');
}

/// The width the default layout of a table fits in, in columns (characters: `→` is one).
/// `--wide` layouts may exceed it; they cut nothing.
pub const SCREEN_WIDTH: usize = 120;

/// `text` on one line of at most `width` characters: line breaks and tabs become
/// spaces, and a longer text is cut with `…` as its last character.
pub fn fit(text: &str, width: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= width {
        return flat;
    }
    let mut cut: String = flat.chars().take(width.saturating_sub(1)).collect();
    cut.truncate(cut.trim_end().len());
    cut.push('…');
    cut
}

/// A note under a table's row ([`Table::note`]): `  ↳ text`, cut to [`SCREEN_WIDTH`].
pub fn note(text: &str) -> String {
    format!("  {}", fit(&format!("↳ {text}"), SCREEN_WIDTH - 2))
}

/// `text` as lines of at most [`SCREEN_WIDTH`] characters, each ending in `\n`: words
/// (split at whitespace, line breaks included) filled after `first` on the first line
/// and after `rest` on the others; a word longer than a whole line is cut across lines.
/// For prose too long for one line (`explain`'s reasons), where cutting would lose it.
pub fn wrap(text: &str, first: &str, rest: &str) -> String {
    let mut out = String::new();
    let mut line = first.to_owned();
    let mut indent = first.chars().count();
    let mut len = indent;
    for word in text.split_whitespace() {
        let mut word: Vec<char> = word.chars().collect();
        loop {
            let gap = usize::from(len > indent);
            if len + gap + word.len() <= SCREEN_WIDTH {
                if gap == 1 {
                    line.push(' ');
                }
                line.extend(&word);
                len += gap + word.len();
                break;
            }
            if len > indent {
                out.push_str(&line);
                out.push('\n');
                line = rest.to_owned();
                indent = rest.chars().count();
                len = indent;
                continue;
            }
            // Longer than a whole line: as much as fits, the rest on the next.
            let room = SCREEN_WIDTH.saturating_sub(len).max(1);
            line.extend(&word[..room]);
            word.drain(..room);
            out.push_str(&line);
            out.push('\n');
            line = rest.to_owned();
            indent = rest.chars().count();
            len = indent;
        }
    }
    out.push_str(line.trim_end());
    out.push('\n');
    out
}

/// The widest [`time`] of a PostgreSQL timestamp (microseconds), years 1–9999.
pub const TIME_WIDTH: usize = "2026-11-29T18:00:00.000000Z".len();

/// The width of a UUID as it is printed (hyphenated).
pub const UUID_WIDTH: usize = uuid::fmt::Hyphenated::LENGTH;

/// The width of an id as a table shows it by default ([`short_id`]).
pub const SHORT_ID_WIDTH: usize = 8;

/// The first eight characters of an id, as `git log --oneline` shortens hashes: enough
/// to tell rows apart on screen and to find the row (`id::text LIKE 'b1000004%'`).
pub fn short_id(id: uuid::Uuid) -> String {
    let mut s = id.to_string();
    s.truncate(SHORT_ID_WIDTH);
    s
}

/// A moment for people: UTC, fractions of a second only when there are any; a stored
/// moment that is not finite as PostgreSQL writes it (`infinity`, `-infinity`).
pub fn time(at: impl Into<Timestamp>) -> String {
    let at = at.into();
    at.finite().map_or_else(
        || at.to_string(),
        |at| at.to_rfc3339_opts(SecondsFormat::AutoSi, true),
    )
}

/// The width of [`time_s`], years 1–9999.
pub const TIME_S_WIDTH: usize = "2026-11-29T18:00:00Z".len();

/// A moment at whole seconds (the fraction cut, not rounded), UTC: what a table's
/// default layout shows; `--wide` and JSON keep [`time`] / microseconds.
pub fn time_s(at: impl Into<Timestamp>) -> String {
    let at = at.into();
    at.finite().map_or_else(
        || at.to_string(),
        |at| at.to_rfc3339_opts(SecondsFormat::Secs, true),
    )
}

/// How long `as_of` is after the stored moment `at`, for people: [`duration`], or
/// `infinite` after `-infinity` (`-infinite` before `infinity`).
pub fn since(as_of: DateTime<Utc>, at: Timestamp) -> String {
    match at.until(as_of) {
        Some(d) => duration(d),
        None if at == Timestamp::NEG_INFINITY => "infinite".to_owned(),
        None => "-infinite".to_owned(),
    }
}

/// [`since`] in seconds: `±∞` for the infinities (JSON shows them as `null`).
pub fn seconds_since(as_of: DateTime<Utc>, at: Timestamp) -> f64 {
    at.seconds_until(as_of)
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

pub use crate::clock::seconds;

/// Writes the report to stdout at once. A reader that went away (`| head`) is not an
/// error of the report.
pub fn print(text: &str) -> Result<()> {
    let mut out = Stdout::new();
    out.text(text)?;
    out.finish()
}

/// The report's stdout, locked and buffered, for a report written as it is read. A
/// reader that went away (`| head`) is not an error of the report: writing then stops
/// quietly and [`Stdout::closed`] says so, so the report can stop reading too.
pub struct Stdout {
    out: BufWriter<StdoutLock<'static>>,
    closed: bool,
}

impl Stdout {
    pub fn new() -> Self {
        Stdout {
            out: BufWriter::with_capacity(64 * 1024, io::stdout().lock()),
            closed: false,
        }
    }

    /// Whether the reader went away: nothing more will be written.
    pub fn closed(&self) -> bool {
        self.closed
    }

    pub fn text(&mut self, text: &str) -> Result<()> {
        self.write_all(text.as_bytes()).map_err(write_error)
    }

    /// Flushes what is buffered; the end of the report.
    pub fn finish(mut self) -> Result<()> {
        self.flush().map_err(write_error)
    }

    fn tolerate<T>(&mut self, result: io::Result<T>, closed: T) -> io::Result<T> {
        match result {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(closed)
            }
            other => other,
        }
    }
}

impl Default for Stdout {
    fn default() -> Self {
        Self::new()
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.closed {
            return Ok(buf.len());
        }
        let written = self.out.write(buf);
        self.tolerate(written, buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.closed {
            return Ok(());
        }
        let flushed = self.out.flush();
        self.tolerate(flushed, ())
    }
}

pub fn write_error(e: io::Error) -> anyhow::Error {
    anyhow::Error::new(e).context("cannot write the report to stdout")
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

    #[test]
    fn notes_go_under_their_row_and_long_texts_are_cut_to_fit() {
        let mut t = Table::new(&["A", "B"]);
        t.row(vec!["x".into(), "y".into()]);
        t.note(note("reason: why"));
        t.row(vec!["long".into(), "z".into()]);
        let mut out = String::new();
        t.render(&mut out);
        assert_eq!(out, "A     B\nx     y\n  ↳ reason: why\nlong  z\n");

        assert_eq!(fit("short", 5), "short");
        assert_eq!(fit("line one\n  line two", 40), "line one line two");
        assert_eq!(fit("abcdef", 5), "abcd…");
        assert_eq!(fit("ab   cdef", 4), "ab…");
        let long = note(&"é".repeat(500));
        assert_eq!(long.chars().count(), SCREEN_WIDTH);
        assert!(long.ends_with("é…"), "{long}");
    }

    #[test]
    fn prose_wraps_at_words_within_the_screen() {
        let text = format!("{} {}", "word ".repeat(40), "x".repeat(300));
        let out = wrap(&text, "  - ", "    ");
        let lines: Vec<&str> = out.lines().collect();
        assert!(out.ends_with('\n'));
        for line in &lines {
            assert!(line.chars().count() <= SCREEN_WIDTH, "{line}");
        }
        assert!(lines[0].starts_with("  - word word "));
        assert!(lines[1..].iter().all(|l| l.starts_with("    ")));
        assert_eq!(out.replace(['\n', ' ', '-'], ""), text.replace(' ', ""));
        assert_eq!(wrap("short", "  ", "    "), "  short\n");
    }

    #[test]
    fn seconds_times_cut_the_fraction() {
        let at = DateTime::parse_from_rfc3339("2026-11-30T19:17:30.999999Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(time_s(at), "2026-11-30T19:17:30Z");
        assert_eq!(time_s(at).len(), TIME_S_WIDTH);
        assert_eq!(time(at), "2026-11-30T19:17:30.999999Z");
    }

    #[test]
    fn streamed_tables_align_to_the_widths_given_up_front() {
        let t = StreamTable::new(&[("A", 4), ("Status", 3), ("C", 0)]);
        let mut out = String::new();
        t.header(&mut out);
        t.row(&["x".into(), "Reserved".into(), "".into()], &mut out);
        t.row(&["long".into(), "y".into(), "z".into()], &mut out);
        assert_eq!(
            out,
            "A     Status  C\n\
             x     Reserved\n\
             long  y       z\n"
        );
    }
}
