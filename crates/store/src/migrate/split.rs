//! A migration file split into its statements by a small lexer that knows what may
//! hide a `;`: comments (`--` to the end of the line, `/* */`, nested), string
//! constants (`'…'` with `''`, `E'…'` with backslash escapes), quoted identifiers
//! (`"…"` with `""`) and dollar-quoted bodies (`$$…$$`, `$tag$…$tag$`). Each statement
//! is returned from its first token to its last (the comments before it and after
//! it are not part of it), without its `;`; a file's trailing comments are no
//! statement.

/// The statements of `sql`, in order.
pub fn statements(sql: &str) -> Vec<&str> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    let mut end = 0;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        match c {
            b'-' if next == Some(b'-') => {
                i = b[i..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(b.len(), |p| i + p + 1);
                continue;
            }
            b'/' if next == Some(b'*') => {
                i = block_comment_end(b, i);
                continue;
            }
            b';' => {
                if let Some(s) = start.take() {
                    out.push(&sql[s..end]);
                }
                i += 1;
                continue;
            }
            c if c.is_ascii_whitespace() => {
                i += 1;
                continue;
            }
            _ => {}
        }
        let token = i;
        i = match c {
            b'\'' => quoted_end(b, i, b'\'', escapes_before(b, i)),
            b'"' => quoted_end(b, i, b'"', false),
            b'$' => dollar_end(sql, i).unwrap_or(i + 1),
            c if c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80 => {
                // A word (E'…' is one word and its string); a `$` may continue one.
                let mut j = i;
                while j < b.len()
                    && (b[j].is_ascii_alphanumeric()
                        || b[j] == b'_'
                        || b[j] == b'$'
                        || b[j] >= 0x80)
                {
                    j += 1;
                }
                j
            }
            _ => i + 1,
        };
        start.get_or_insert(token);
        end = i.min(b.len());
    }
    if let Some(s) = start {
        out.push(&sql[s..end]);
    }
    out
}

/// Whether the string constant opening at `i` is an escape string (`E'…'`, `e'…'`).
fn escapes_before(b: &[u8], i: usize) -> bool {
    i > 0
        && matches!(b[i - 1], b'E' | b'e')
        && (i < 2 || !(b[i - 2].is_ascii_alphanumeric() || b[i - 2] == b'_'))
}

/// Just past the closing `quote` of the constant or identifier opening at `i`; a
/// doubled quote is one character of it, and so is `\'` in an escape string.
fn quoted_end(b: &[u8], i: usize, quote: u8, backslash: bool) -> usize {
    let mut j = i + 1;
    while j < b.len() {
        if backslash && b[j] == b'\\' {
            j += 2;
            continue;
        }
        if b[j] == quote {
            if b.get(j + 1) == Some(&quote) {
                j += 2;
                continue;
            }
            return j + 1;
        }
        j += 1;
    }
    b.len()
}

/// Just past the end of the (nested) block comment opening at `i`.
fn block_comment_end(b: &[u8], i: usize) -> usize {
    let mut depth = 0;
    let mut j = i;
    while j + 1 < b.len() {
        match (b[j], b[j + 1]) {
            (b'/', b'*') => {
                depth += 1;
                j += 2;
            }
            (b'*', b'/') => {
                depth -= 1;
                j += 2;
                if depth == 0 {
                    return j;
                }
            }
            _ => j += 1,
        }
    }
    b.len()
}

/// Just past the closing tag of the dollar-quoted string opening at `i`; `None` when
/// `$` does not open one here (a parameter such as `$1`).
fn dollar_end(sql: &str, i: usize) -> Option<usize> {
    let b = sql.as_bytes();
    let mut j = i + 1;
    while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_' || b[j] >= 0x80) {
        j += 1;
    }
    if b.get(j) != Some(&b'$') || b.get(i + 1).is_some_and(u8::is_ascii_digit) {
        return None;
    }
    let tag = &sql[i..=j];
    Some(
        sql[j + 1..]
            .find(tag)
            .map_or(b.len(), |p| j + 1 + p + tag.len()),
    )
}

/// The first line of a statement, for messages: at most 100 characters.
pub fn first_line(statement: &str) -> String {
    let line = statement.lines().next().unwrap_or_default().trim_end();
    match line.char_indices().nth(100) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_end_at_semicolons_outside_comments_strings_and_bodies() {
        let sql = "-- a comment; not a statement\n\
                   CREATE TABLE t (a text DEFAULT 'x;y''z;'); /* one; /* nested; */ still; */\n\
                   SELECT E'\\';', \"we;ird\"\"id;\" FROM t;\n\
                   CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $body$ SELECT 1; $$ $body$;\n\
                   DO $$ BEGIN PERFORM 1; END $$;\n\
                   SELECT $1, a$b FROM t\n\
                   -- trailing comment; still none\n";
        assert_eq!(
            statements(sql),
            [
                "CREATE TABLE t (a text DEFAULT 'x;y''z;')",
                "SELECT E'\\';', \"we;ird\"\"id;\" FROM t",
                "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $body$ SELECT 1; $$ $body$",
                "DO $$ BEGIN PERFORM 1; END $$",
                "SELECT $1, a$b FROM t",
            ]
        );
    }

    #[test]
    fn comments_between_statements_and_empty_statements_are_dropped() {
        let sql = ";;\n-- only\n/* comments */\nSELECT 1 -- here; too\n;\n  ;";
        assert_eq!(statements(sql), ["SELECT 1"]);
        assert!(statements("-- nothing\n").is_empty());
    }

    #[test]
    fn a_plain_string_keeps_its_backslashes_and_an_identifier_may_end_in_e() {
        // 'a\' is a whole string under standard_conforming_strings; "type'" is not E'.
        let sql = "SELECT 'a\\'; SELECT type'x;' FROM t;";
        assert_eq!(statements(sql), ["SELECT 'a\\'", "SELECT type'x;' FROM t"]);
    }

    #[test]
    fn every_shipped_file_splits_into_statements_that_start_with_a_keyword() {
        for m in super::super::embedded::MIGRATIONS {
            for s in statements(m.sql) {
                let word = s.split_whitespace().next().unwrap_or_default();
                assert!(
                    [
                        "CREATE", "ALTER", "GRANT", "REVOKE", "DO", "DROP", "COMMENT", "SELECT",
                        "INSERT"
                    ]
                    .contains(&word.to_ascii_uppercase().as_str()),
                    "{}: {s}",
                    m.file
                );
            }
        }
    }

    #[test]
    fn a_first_line_is_cut_at_100_characters() {
        assert_eq!(first_line("CREATE INDEX x\n  ON t (a)"), "CREATE INDEX x");
        let long = "x".repeat(120);
        assert_eq!(first_line(&long).chars().count(), 101);
    }
}
