//! Text that came from outside the program (the database: a pause's reason and actor,
//! an outbox row's `last_error`, a trigger's or a server's message; the environment:
//! `USER`) printed so that it cannot steer the terminal it is printed on: every
//! character a terminal could act on instead of showing is written as a visible escape.
//!
//! Escaped: the C0 controls (U+0000–U+001F, line breaks and tabs included in one-line
//! text), DEL (U+007F), the C1 controls (U+0080–U+009F: CSI, OSC, NEL as one
//! character), the bidirectional controls that reorder what a line shows (U+061C,
//! U+200E, U+200F, U+202A–U+202E, U+2066–U+2069) and the line and paragraph separators
//! (U+2028, U+2029). Each is written as Rust writes it in a string's `Debug`: `\n`,
//! `\r`, `\t`, else `\u{1b}` (lower-case hex). Nothing else changes, a backslash
//! included, so escaping twice changes nothing more.
//!
//! JSON output ([`json_line`]) keeps the values exact: serde_json escapes C0 already;
//! DEL, C1, the bidirectional controls and the separators are written as `\u007f`,
//! `\u009b`, `\u202e`, … (still one JSON value, the same string once parsed).
//! `backlog --format prometheus` is text for [`print`](super::print) like a table: a
//! control character in a label value (a topic name read from the outbox) shows as
//! `\u{1b}`, which Prometheus's text parser keeps as it is (an unknown escape).

use std::borrow::Cow;

use anyhow::Result;
use serde::Serialize;

/// Whether a terminal could act on `c` rather than show it.
pub fn is_control(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}'
        | '\u{7f}'..='\u{9f}'
        | '\u{61c}'
        | '\u{200e}'
        | '\u{200f}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}'
        | '\u{2028}'
        | '\u{2029}')
}

/// `text` for one line of output (a table's cell, a reason, an actor): every control
/// character as a visible escape, line breaks and tabs included.
pub(crate) fn escape(text: &str) -> Cow<'_, str> {
    escaped(text, |_| false)
}

/// `text` of one or more lines (an error message with its DETAIL line, a whole
/// report): as [`escape`], but line breaks and tabs are kept.
pub(crate) fn escape_lines(text: &str) -> Cow<'_, str> {
    escaped(text, |c| matches!(c, '\n' | '\t'))
}

fn escaped(text: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    if !text.chars().any(|c| is_control(c) && !keep(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if !is_control(c) || keep(c) {
            out.push(c);
            continue;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
        }
    }
    Cow::Owned(out)
}

/// `value` as one JSON line (ending in `\n`), its strings safe on a terminal as the
/// module says: DEL, C1, bidirectional controls and separators as `\uXXXX`.
pub(crate) fn json_line(value: &impl Serialize) -> Result<String> {
    let mut text = json_safe(serde_json::to_string(value)?);
    text.push('\n');
    Ok(text)
}

/// Serialized JSON with the characters serde_json leaves as they are (DEL, C1, the
/// bidirectional controls, the separators) as `\uXXXX` escapes. Outside strings, JSON
/// is ASCII without controls, so only strings change, and only in how they are written.
pub(crate) fn json_safe(json: String) -> String {
    if !json.chars().any(is_control) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if is_control(c) {
            // Every such character is in the Basic Multilingual Plane: one escape.
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_become_visible_escapes_and_nothing_else_changes() {
        assert_eq!(
            escape("evil\u{1b}]0;title\u{7}"),
            "evil\\u{1b}]0;title\\u{7}"
        );
        assert_eq!(escape("a\nb\tc\rd"), "a\\nb\\tc\\rd");
        assert_eq!(
            escape("del\u{7f} csi\u{9b} nel\u{85}"),
            "del\\u{7f} csi\\u{9b} nel\\u{85}"
        );
        assert_eq!(
            escape("\u{202e}txt.exe \u{2066}x\u{2069} \u{200f}\u{61c}\u{2028}"),
            "\\u{202e}txt.exe \\u{2066}x\\u{2069} \\u{200f}\\u{61c}\\u{2028}"
        );
        // Printable text stays as it is, borrowed: accents, CJK, arrows, a backslash.
        for text in ["Reserved → ReserveExpired", "予約 é \\u{1b} \\", ""] {
            assert!(
                matches!(escape(text), Cow::Borrowed(t) if t == text),
                "{text}"
            );
        }
        // Once is enough: the escapes are printable.
        let once = escape("x\u{1b}[2J\u{9b}\u{202e}").into_owned();
        assert_eq!(escape(&once), once);
        // The text log's quoted values are `Debug`'s, which escapes the same characters.
        assert_eq!(
            format!("{:?}", "\u{1b}\u{7f}\u{9b}\u{202e}\u{2028}"),
            "\"\\u{1b}\\u{7f}\\u{9b}\\u{202e}\\u{2028}\""
        );
        // Lines keep their breaks and tabs, nothing else.
        assert_eq!(
            escape_lines("ERROR: no\u{1b}[31m\nDETAIL:\tx\r"),
            "ERROR: no\\u{1b}[31m\nDETAIL:\tx\\r"
        );
    }

    #[test]
    fn json_stays_json_with_the_same_values() {
        let text = "e\u{1b}]0;t\u{7} \u{7f}\u{9b}\u{202e}\u{2029} 予約";
        let line = json_line(&serde_json::json!({ "Reason": text })).unwrap();
        assert_eq!(
            line,
            "{\"Reason\":\"e\\u001b]0;t\\u0007 \\u007f\\u009b\\u202e\\u2029 予約\"}\n"
        );
        assert!(!line.trim_end().chars().any(is_control), "{line}");
        let back: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back["Reason"], text);
    }
}
