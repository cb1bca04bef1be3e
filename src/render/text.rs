//! Text fitted to the screen: cut to one line, or wrapped at words. Widths are
//! terminal columns as unicode-width counts them (`→` is one, a CJK character two),
//! here, in tables and in wrapping alike.

use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

use super::escape;

/// The width the default layout of a table fits in, in terminal columns ([`width`]).
/// `--wide` layouts may exceed it; they cut nothing.
pub(crate) const SCREEN_WIDTH: usize = 120;

/// How many terminal columns `text` takes: `→` one, `予` two (unicode-width).
pub fn width(text: &str) -> usize {
    text.width()
}

/// `text` on one line of at most `width` columns: line breaks and tabs become
/// spaces, other control characters visible escapes ([`escape`]), and a longer text is
/// cut with `…` as its last character.
pub(crate) fn fit(text: &str, width: usize) -> String {
    let flat = flat(text);
    if flat.width() <= width {
        return flat;
    }
    let room = width.saturating_sub(1);
    let mut cut = String::new();
    let mut used = 0;
    for c in flat.chars() {
        let w = c.width().unwrap_or(0);
        if used + w > room {
            break;
        }
        used += w;
        cut.push(c);
    }
    cut.truncate(cut.trim_end().len());
    cut.push('…');
    cut
}

/// A note under a table's row ([`Table::note`](crate::render::Table::note)): `  ↳ text`, cut to [`SCREEN_WIDTH`].
pub(crate) fn note(text: &str) -> String {
    format!("  {}", fit(&format!("↳ {text}"), SCREEN_WIDTH - 2))
}

/// `text` as lines of at most [`SCREEN_WIDTH`] columns, each ending in `\n`: words
/// (split at whitespace, line breaks included, never at a hyphen) filled after `first` on the first line
/// and after `rest` on the others, first fit; a word longer than a whole line is cut
/// across lines, its first piece filling the line it starts on. For prose too long for
/// one line (`explain`'s reasons), where cutting would lose it. Control characters are
/// escaped ([`escape`]) as in [`fit`]. Widths are terminal
/// columns (`→` is one, a CJK character two).
pub(crate) fn wrap(text: &str, first: &str, rest: &str) -> String {
    let flat = flat(text);
    let options = textwrap::Options::new(SCREEN_WIDTH)
        .initial_indent(first)
        .subsequent_indent(rest)
        .word_separator(textwrap::WordSeparator::AsciiSpace)
        .word_splitter(textwrap::WordSplitter::NoHyphenation)
        .wrap_algorithm(textwrap::WrapAlgorithm::FirstFit)
        .break_words(true);
    let mut out = String::new();
    for line in textwrap::wrap(&flat, options) {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `text`'s words one space apart, control characters escaped.
fn flat(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    escape(&flat).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_texts_are_cut_to_fit() {
        assert_eq!(fit("short", 5), "short");
        assert_eq!(fit("line one\n  line two", 40), "line one line two");
        assert_eq!(fit("abcdef", 5), "abcd…");
        assert_eq!(fit("ab   cdef", 4), "ab…");
        let long = note(&"é".repeat(500));
        assert_eq!(long.chars().count(), SCREEN_WIDTH);
        assert!(long.ends_with("é…"), "{long}");
        // CJK characters take two columns each: cut by columns, not characters.
        assert_eq!(width("予約 → x"), 8);
        assert_eq!(fit("予約予約予約", 6), "予約…");
        assert_eq!(fit("予約予約予約", 7), "予約予…");
        let long = note(&"予".repeat(200));
        assert_eq!(width(&long), SCREEN_WIDTH - 1, "{long}");
        assert!(long.ends_with("予…"), "{long}");
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
        assert_eq!(wrap("", "  ", "    "), "\n");
        // First fit: each line takes every word that fits, `→` counting one column.
        let words = "w→rd ".repeat(30);
        let out = wrap(&words, "  - ", "    ");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], format!("  - {}", "w→rd ".repeat(23).trim_end()));
        assert_eq!(lines[1], format!("    {}", "w→rd ".repeat(7).trim_end()));
        assert_eq!(lines.len(), 2);
        // Never broken at a hyphen: ids and topic names stay whole.
        let id = "01a231f0-13f1-7611-8bf6-b2e7b96ccd3c";
        let out = wrap(&format!("{} {id}", "x".repeat(100)), "", "");
        assert_eq!(out, format!("{}\n{id}\n", "x".repeat(100)));
    }
}
