//! A migration file split into its statements by a small lexer that knows what may
//! hide a `;`: comments (`--` to the end of the line, `/* */`, nested), string
//! constants (`'…'` with `''`, `E'…'` with backslash escapes), quoted identifiers
//! (`"…"` with `""`) and dollar-quoted bodies (`$$…$$`, `$tag$…$tag$`). Each statement
//! is returned from its first token to its last (the comments before it and after
//! it are not part of it), without its `;`; a file's trailing comments are no
//! statement. As psql: a SQL-standard routine body (`BEGIN ATOMIC … END`) is one
//! statement, and a comment or string the file does not close is an error naming its
//! line (psql exits 3), never the rest of the file dropped.

/// A comment, string, quoted identifier or dollar-quoted body that the file does not
/// close: psql would refuse it (exit 3), so does the runner, naming where it opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unterminated {
    /// What is not closed: "comment /*", "string '", "quoted identifier \"", "$tag$ body".
    pub what: String,
    /// The line it opens on, from 1.
    pub line: usize,
}

impl std::fmt::Display for Unterminated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unterminated {} opened on line {}: the rest of the file would be part of it",
            self.what, self.line
        )
    }
}

/// The statements of `sql`, in order; an error for an unterminated comment, string,
/// quoted identifier or dollar-quoted body.
///
/// As psql, a `;` inside the body of `CREATE [OR REPLACE] FUNCTION|PROCEDURE … BEGIN
/// ATOMIC … END` (SQL-standard bodies) ends no statement: in such a statement `BEGIN`
/// and `CASE` open a level that `END` closes, and only a `;` at level 0 ends it.
pub fn statements(sql: &str) -> Result<Vec<&str>, Unterminated> {
    let b = sql.as_bytes();
    let line_of = |at: usize| sql[..at].matches('\n').count() + 1;
    let unterminated = |what: &str, at: usize| Unterminated {
        what: what.to_owned(),
        line: line_of(at),
    };
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    let mut end = 0;
    // The statement's first words (upper-cased, up to four), and its BEGIN/CASE depth.
    let mut head: Vec<String> = Vec::new();
    let mut depth = 0usize;
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
                i = block_comment_end(b, i).ok_or_else(|| unterminated("comment /*", i))?;
                continue;
            }
            b';' if depth == 0 => {
                if let Some(s) = start.take() {
                    out.push(&sql[s..end]);
                }
                head.clear();
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
            b'\'' => quoted_end(b, i, b'\'', escapes_before(b, i))
                .ok_or_else(|| unterminated("string '", i))?,
            b'"' => quoted_end(b, i, b'"', false)
                .ok_or_else(|| unterminated("quoted identifier \"", i))?,
            b'$' => match dollar_end(sql, i) {
                None => i + 1,
                Some(Ok(end)) => end,
                Some(Err(tag)) => return Err(unterminated(&format!("{tag} body"), i)),
            },
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
                let word = sql[i..j].to_ascii_uppercase();
                if routine(&head) {
                    match word.as_str() {
                        "BEGIN" | "CASE" => depth += 1,
                        "END" => depth = depth.saturating_sub(1),
                        _ => {}
                    }
                }
                if head.len() < 4 {
                    head.push(word);
                }
                j
            }
            _ => {
                if head.len() < 4 {
                    head.push(String::new());
                }
                i + 1
            }
        };
        start.get_or_insert(token);
        end = i.min(b.len());
    }
    if let Some(s) = start {
        out.push(&sql[s..end]);
    }
    Ok(out)
}

/// Whether a statement opening with `head` makes a function or procedure, whose
/// SQL-standard body (`BEGIN ATOMIC … END`) holds `;`s.
fn routine(head: &[String]) -> bool {
    let words: Vec<&str> = head.iter().map(String::as_str).collect();
    matches!(
        words.as_slice(),
        ["CREATE", "FUNCTION" | "PROCEDURE", ..]
            | ["CREATE", "OR", "REPLACE", "FUNCTION" | "PROCEDURE", ..]
    )
}

/// Whether the string constant opening at `i` is an escape string (`E'…'`, `e'…'`).
fn escapes_before(b: &[u8], i: usize) -> bool {
    i > 0
        && matches!(b[i - 1], b'E' | b'e')
        && (i < 2 || !(b[i - 2].is_ascii_alphanumeric() || b[i - 2] == b'_'))
}

/// Just past the closing `quote` of the constant or identifier opening at `i`; a
/// doubled quote is one character of it, and so is `\'` in an escape string. `None`
/// when the file ends first.
fn quoted_end(b: &[u8], i: usize, quote: u8, backslash: bool) -> Option<usize> {
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
            return Some(j + 1);
        }
        j += 1;
    }
    None
}

/// Just past the end of the (nested) block comment opening at `i`; `None` when the
/// file ends first.
fn block_comment_end(b: &[u8], i: usize) -> Option<usize> {
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
                    return Some(j);
                }
            }
            _ => j += 1,
        }
    }
    None
}

/// Just past the closing tag of the dollar-quoted string opening at `i` (`Err(tag)`
/// when the file ends first); `None` when `$` does not open one here (a parameter such
/// as `$1`).
fn dollar_end(sql: &str, i: usize) -> Option<Result<usize, String>> {
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
            .map(|p| j + 1 + p + tag.len())
            .ok_or_else(|| tag.to_owned()),
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
            statements(sql).unwrap(),
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
        assert_eq!(statements(sql).unwrap(), ["SELECT 1"]);
        assert!(statements("-- nothing\n").unwrap().is_empty());
    }

    #[test]
    fn a_plain_string_keeps_its_backslashes_and_an_identifier_may_end_in_e() {
        // 'a\' is a whole string under standard_conforming_strings; "type'" is not E'.
        let sql = "SELECT 'a\\'; SELECT type'x;' FROM t;";
        assert_eq!(
            statements(sql).unwrap(),
            ["SELECT 'a\\'", "SELECT type'x;' FROM t"]
        );
    }

    #[test]
    fn every_shipped_file_splits_into_statements_that_start_with_a_keyword() {
        for m in super::super::embedded::MIGRATIONS {
            for s in statements(m.sql).unwrap() {
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
    fn a_begin_atomic_body_is_one_statement_and_case_end_inside_it_too() {
        let sql = "CREATE OR REPLACE FUNCTION f(a int) RETURNS int LANGUAGE sql\n\
                   BEGIN ATOMIC\n  SELECT 1;\n  SELECT CASE WHEN a > 0 THEN 1 ELSE 2 END;\nEND;\n\
                   CREATE PROCEDURE p() BEGIN ATOMIC INSERT INTO t VALUES (1); END;\n\
                   SELECT CASE WHEN true THEN 1 END; SELECT 2;";
        assert_eq!(
            statements(sql).unwrap(),
            [
                "CREATE OR REPLACE FUNCTION f(a int) RETURNS int LANGUAGE sql\nBEGIN ATOMIC\n  \
                 SELECT 1;\n  SELECT CASE WHEN a > 0 THEN 1 ELSE 2 END;\nEND",
                "CREATE PROCEDURE p() BEGIN ATOMIC INSERT INTO t VALUES (1); END",
                "SELECT CASE WHEN true THEN 1 END",
                "SELECT 2",
            ]
        );
    }

    #[test]
    fn an_unterminated_comment_string_identifier_or_body_is_an_error_naming_its_line() {
        let cases = [
            ("SELECT 1;\n/* never closed;\nSELECT 2;", "comment /*", 2),
            ("SELECT 1;\nSELECT 2;\nSELECT 'open;\n", "string '", 3),
            ("SELECT E'\\';", "string '", 1),
            ("SELECT \"x;", "quoted identifier \"", 1),
            ("SELECT 1;\nDO $body$ BEGIN END $$;", "$body$ body", 2),
            ("/* /* nested */ still open", "comment /*", 1),
        ];
        for (sql, what, line) in cases {
            assert_eq!(
                statements(sql),
                Err(Unterminated {
                    what: what.into(),
                    line
                }),
                "{sql}"
            );
        }
        assert_eq!(
            statements("SELECT 1;\n/* x").unwrap_err().to_string(),
            "unterminated comment /* opened on line 2: the rest of the file would be part of it"
        );
    }

    #[test]
    fn a_first_line_is_cut_at_100_characters() {
        assert_eq!(first_line("CREATE INDEX x\n  ON t (a)"), "CREATE INDEX x");
        let long = "x".repeat(120);
        assert_eq!(first_line(&long).chars().count(), 101);
    }
}
