//! Aligned plain-text tables: no colour, so they paste into an incident channel as
//! they are.

use std::borrow::Cow;

use super::{escape, width};

/// A plain-text table: columns padded to their widest cell in terminal columns
/// ([`width`]: a CJK character takes two), two spaces apart, no trailing blanks.
pub(crate) struct Table {
    headers: Vec<&'static str>,
    /// Each row with the lines of text under it (see [`Table::note`]).
    rows: Vec<(Vec<String>, Vec<String>)>,
}

impl Table {
    pub(crate) fn new(headers: &[&'static str]) -> Self {
        Table {
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.headers.len());
        self.rows.push((cells, Vec::new()));
    }

    /// A line of text under the last row, indented and outside the columns: for a cell
    /// too long to share a line with the others (an error message). It is printed as
    /// given; [`note`](crate::render::note) makes one that fits the screen.
    pub(crate) fn note(&mut self, line: String) {
        if let Some((_, notes)) = self.rows.last_mut() {
            notes.push(line);
        }
    }

    /// The table, its cells and notes escaped ([`escape`]) and aligned as escaped.
    pub(crate) fn render(&self, out: &mut String) {
        let rows: Vec<Vec<Cow<str>>> = self
            .rows
            .iter()
            .map(|(row, _)| row.iter().map(|c| escape(c)).collect())
            .collect();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| width(h)).collect();
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(width(cell));
            }
        }
        push_line(out, &self.headers, &widths);
        for (row, (_, notes)) in rows.iter().zip(&self.rows) {
            push_line(out, row, &widths);
            for note in notes {
                out.push_str(&escape(note));
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
pub(crate) struct StreamTable {
    headers: Vec<&'static str>,
    widths: Vec<usize>,
}

impl StreamTable {
    /// `columns`: each header with the width its cells take at most.
    pub(crate) fn new(columns: &[(&'static str, usize)]) -> Self {
        StreamTable {
            headers: columns.iter().map(|(h, _)| *h).collect(),
            widths: columns.iter().map(|(h, w)| width(h).max(*w)).collect(),
        }
    }

    pub(crate) fn header(&self, out: &mut String) {
        push_line(out, &self.headers, &self.widths);
    }

    /// One row, its cells escaped ([`escape`]).
    pub(crate) fn row(&self, cells: &[String], out: &mut String) {
        debug_assert_eq!(cells.len(), self.widths.len());
        let cells: Vec<Cow<str>> = cells.iter().map(|c| escape(c)).collect();
        push_line(out, &cells, &self.widths);
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
        out.extend(std::iter::repeat_n(' ', w.saturating_sub(width(cell))));
    }
    let end = start + out[start..].trim_end().len();
    out.truncate(end);
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_go_under_their_row() {
        let mut t = Table::new(&["A", "B"]);
        t.row(vec!["x".into(), "y".into()]);
        t.note(super::super::note("reason: why"));
        t.row(vec!["long".into(), "z".into()]);
        let mut out = String::new();
        t.render(&mut out);
        assert_eq!(out, "A     B\nx     y\n  ↳ reason: why\nlong  z\n");
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

    #[test]
    fn cjk_text_aligns_by_terminal_columns() {
        let mut t = Table::new(&["Actor", "Reason"]);
        t.row(vec!["山田太郎".into(), "予約の確認".into()]);
        t.row(vec!["bob".into(), "x".into()]);
        let mut out = String::new();
        t.render(&mut out);
        assert_eq!(
            out,
            "Actor     Reason\n\
             山田太郎  予約の確認\n\
             bob       x\n"
        );
        let s = StreamTable::new(&[("名前", 0), ("B", 0)]);
        let mut out = String::new();
        s.header(&mut out);
        s.row(&["ab".into(), "c".into()], &mut out);
        assert_eq!(out, "名前  B\nab    c\n");
    }

    #[test]
    fn cells_and_notes_are_escaped_and_aligned_as_escaped() {
        let mut t = Table::new(&["Actor", "Reason"]);
        t.row(vec!["ev\u{1b}]0;x\u{7}".into(), "a\nb".into()]);
        t.note("  ↳ \u{9b}2J".into());
        t.row(vec!["bob".into(), "\u{202e}gpj".into()]);
        let mut out = String::new();
        t.render(&mut out);
        assert_eq!(
            out,
            "Actor              Reason\n\
             ev\\u{1b}]0;x\\u{7}  a\\nb\n  \
             ↳ \\u{9b}2J\n\
             bob                \\u{202e}gpj\n"
        );
        let s = StreamTable::new(&[("A", 3), ("B", 0)]);
        let mut out = String::new();
        s.row(&["\u{1b}".into(), "\u{7f}".into()], &mut out);
        assert_eq!(out, "\\u{1b}  \\u{7f}\n");
    }
}
