//! A migration file split into its statements by PostgreSQL's own scanner and grammar
//! (libpg_query, through the `pg_query` crate: the server's `scan.l` and `gram.y`,
//! PostgreSQL 18), not by a lexer of our own. What may hide a `;` (comments, nested
//! `/* */`, string constants of every kind, quoted identifiers, dollar-quoted bodies, a
//! SQL-standard routine body `BEGIN ATOMIC … END`, a rule's `( …; … )`) is whatever the
//! server says it is. Each statement is returned from its first token to its last (the
//! comments before and after it are not part of it), without its `;`; a file's trailing
//! comments are no statement. A comment or string the file does not close is an error
//! naming the line it opens on (psql exits 3 there), never the rest of the file dropped;
//! a statement the grammar refuses is an error naming the line it starts on, before any
//! statement of the file runs.

use pg_query::protobuf::{ScanToken, Token};

/// Why a file cannot be split into statements: nothing of it may run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SplitError {
    /// A comment, string, quoted identifier or dollar-quoted body that the file does
    /// not close: psql would refuse it (exit 3), so does the runner, naming where it
    /// opens. `what`: "comment /*", "string '", "quoted identifier \"", "$tag$ body", …
    Unterminated { what: String, line: usize },
    /// A statement PostgreSQL's grammar refuses (the scanner's or the parser's message,
    /// as the server words it), and the line it starts on.
    Invalid { message: String, line: usize },
}

impl SplitError {
    /// The line the error names, from 1 (the tests' only: the message names it).
    #[cfg(any(test, feature = "testing"))]
    pub fn line(&self) -> usize {
        match self {
            SplitError::Unterminated { line, .. } | SplitError::Invalid { line, .. } => *line,
        }
    }
}

impl std::fmt::Display for SplitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SplitError::Unterminated { what, line } => write!(
                f,
                "unterminated {what} opened on line {line}: the rest of the file would be part of it"
            ),
            SplitError::Invalid { message, line } => write!(
                f,
                "the statement on line {line} is not SQL PostgreSQL's grammar accepts: {message}"
            ),
        }
    }
}

impl std::error::Error for SplitError {}

/// The statements of `sql`, in order, as PostgreSQL's grammar splits them; an error for
/// an unterminated comment, string, quoted identifier or dollar-quoted body, or a
/// statement the grammar refuses.
pub fn statements(sql: &str) -> Result<Vec<&str>, SplitError> {
    let tokens = scan(sql)?;
    let parsed = pg_query::parse(sql, pg_query::ParserOptions::DEFAULT)
        .map_err(|e| invalid(sql, &tokens, e))?;
    let mut out = Vec::new();
    for raw in &parsed.protobuf.stmts {
        let start = usize::try_from(raw.stmt_location).unwrap_or_default();
        // The last statement of a file without a final `;` has no length: it runs to
        // the end.
        let end = match usize::try_from(raw.stmt_len) {
            Ok(0) | Err(_) => sql.len(),
            Ok(len) => (start + len).min(sql.len()),
        };
        if let Some((from, to)) = trimmed(&tokens, start, end) {
            // Tokens end at characters' ends; were one not to, the statement is refused,
            // never dropped.
            let statement = sql.get(from..to).ok_or_else(|| SplitError::Invalid {
                message: "the scanner's token bounds cut a character".into(),
                line: line_of(sql, from),
            })?;
            out.push(statement);
        }
    }
    Ok(out)
}

/// The bytes of `start..end` from its first token to its last, comments left out;
/// `None` when it holds no token.
fn trimmed(tokens: &[ScanToken], start: usize, end: usize) -> Option<(usize, usize)> {
    let mut inside = tokens.iter().filter(|t| {
        !is_comment(t) && offset(t.start) >= start && offset(t.end) <= end && t.end > t.start
    });
    let first = inside.next()?;
    let last = inside.next_back().unwrap_or(first);
    Some((offset(first.start), offset(last.end)))
}

fn is_comment(t: &ScanToken) -> bool {
    t.token == Token::SqlComment as i32 || t.token == Token::CComment as i32
}

fn offset(at: i32) -> usize {
    usize::try_from(at).unwrap_or_default()
}

/// The line of byte `at` of `sql`, from 1.
fn line_of(sql: &str, at: usize) -> usize {
    let at = at.min(sql.len());
    sql.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1
}

/// Every token of `sql`, comments among them, by PostgreSQL's scanner; an error naming
/// the line of what the scanner refuses.
fn scan(sql: &str) -> Result<Vec<ScanToken>, SplitError> {
    match pg_query::scan(sql) {
        Ok(result) => Ok(result.tokens),
        Err(pg_query::Error::Scan(message)) => Err(refused_by_scanner(sql, &message)),
        Err(e) => Err(SplitError::Invalid {
            message: e.to_string(),
            line: 1,
        }),
    }
}

/// What the scanner's `message` (the server's words: "unterminated /* comment", …)
/// means, and the line it is about. The crate gives the message without the position,
/// so the position is found by the scanner too: a construct that runs to the end of the
/// file is closed by what closes it, and the scanner says where the last token (that
/// construct) begins.
fn refused_by_scanner(sql: &str, message: &str) -> SplitError {
    let unterminated = |what: String, closers: Vec<String>| {
        let line = closers
            .iter()
            .find_map(|closer| opening_of_last_token(sql, closer))
            .map_or_else(|| line_of_failure(sql), |at| line_of(sql, at));
        SplitError::Unterminated { what, line }
    };
    // The server's words, without where ("… at or near \"…\"", "… at end of input").
    let words = message
        .split(" at or near ")
        .next()
        .and_then(|m| m.split(" at end of input").next())
        .unwrap_or(message);
    match words {
        "unterminated /* comment" => {
            // Closed once per level it is nested to.
            let closers = (1..=64).map(|depth| format!("\n{}", "*/".repeat(depth)));
            unterminated("comment /*".into(), closers.collect())
        }
        "unterminated quoted string" => unterminated("string '".into(), vec!["\n'".into()]),
        "unterminated quoted identifier" => {
            unterminated("quoted identifier \"".into(), vec!["\n\"".into()])
        }
        "unterminated bit string literal" => unterminated("bit string B'".into(), vec!["'".into()]),
        "unterminated hexadecimal string literal" => {
            unterminated("hexadecimal string X'".into(), vec!["'".into()])
        }
        "unterminated dollar-quoted string" => {
            // Only its own tag closes it: each tag the file spells, tried.
            let tags = dollar_tags(sql);
            let line = tags.iter().find_map(|tag| {
                opening_of_last_token(sql, &format!("\n{tag}")).map(|at| (tag, at))
            });
            match line {
                Some((tag, at)) => SplitError::Unterminated {
                    what: format!("{tag} body"),
                    line: line_of(sql, at),
                },
                None => SplitError::Unterminated {
                    what: "dollar-quoted body".into(),
                    line: line_of_failure(sql),
                },
            }
        }
        _ => SplitError::Invalid {
            message: message.to_owned(),
            line: line_of_failure(sql),
        },
    }
}

/// Where the last token of `sql` followed by `closer` begins, when the scanner takes
/// that text whole and its last token runs to its end (the closer closed it).
fn opening_of_last_token(sql: &str, closer: &str) -> Option<usize> {
    let closed = format!("{sql}{closer}");
    let last = pg_query::scan(&closed).ok()?.tokens.pop()?;
    (offset(last.end) == closed.len() && offset(last.start) < sql.len()).then(|| offset(last.start))
}

/// Every dollar-quote tag the file spells (`$$`, `$body$`), each once, in order.
fn dollar_tags(sql: &str) -> Vec<&str> {
    let b = sql.as_bytes();
    let mut tags: Vec<&str> = Vec::new();
    for (i, _) in sql.match_indices('$') {
        let mut j = i + 1;
        while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_' || b[j] >= 0x80) {
            j += 1;
        }
        if b.get(j) == Some(&b'$')
            && !b.get(i + 1).is_some_and(u8::is_ascii_digit)
            && let Some(tag) = sql.get(i..=j)
            && !tags.contains(&tag)
        {
            tags.push(tag);
        }
    }
    tags
}

/// The line from which on the scanner refuses every longer part of the file: the line
/// after the longest run of whole lines it takes.
fn line_of_failure(sql: &str) -> usize {
    let ends: Vec<usize> = sql.match_indices('\n').map(|(i, _)| i + 1).collect();
    let taken = ends
        .iter()
        .rposition(|&end| pg_query::scan(&sql[..end]).is_ok())
        .map_or(0, |k| k + 1);
    taken + 1
}

/// A parse error of `sql` (which the scanner took whole): the statement the grammar
/// refuses, found by parsing each statement the scanner splits alone.
fn invalid(sql: &str, tokens: &[ScanToken], error: pg_query::Error) -> SplitError {
    let message = match error {
        pg_query::Error::Parse(m) => m,
        other => other.to_string(),
    };
    let base = sql.as_ptr() as usize;
    let line = pg_query::split_with_scanner(sql)
        .ok()
        .and_then(|parts| {
            parts.into_iter().find_map(|part| {
                let start = (part.as_ptr() as usize).saturating_sub(base);
                let (first, _) = trimmed(tokens, start, start + part.len())?;
                pg_query::parse(part, pg_query::ParserOptions::DEFAULT)
                    .is_err()
                    .then(|| line_of(sql, first))
            })
        })
        .unwrap_or(1);
    SplitError::Invalid { message, line }
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
        assert!(statements("").unwrap().is_empty());
    }

    #[test]
    fn statements_around_characters_of_more_than_one_byte_are_cut_whole() {
        let sql = "-- déjà vu;\nSELECT 'ü;é' AS \"naïve;\";\n/* ß; */ SELECT '日本;語'";
        assert_eq!(
            statements(sql).unwrap(),
            ["SELECT 'ü;é' AS \"naïve;\"", "SELECT '日本;語'"]
        );
        assert_eq!(
            statements("SELECT 'é';\nSELECT 'ü").unwrap_err(),
            SplitError::Unterminated {
                what: "string '".into(),
                line: 2
            }
        );
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

    /// The statements the hand-written lexer this splitter replaced made of each file
    /// shipped then, 001 to 017 (75 in all): their first three words, per file.
    #[rustfmt::skip]
    const SHIPPED: &[(&str, &[&str])] = &[
        ("001_bookings.sql", &["CREATE SCHEMA IF", "CREATE TABLE IF", "CREATE INDEX CONCURRENTLY", "CREATE INDEX CONCURRENTLY"]),
        ("002_outbox.sql", &["CREATE TABLE IF", "CREATE UNIQUE INDEX", "CREATE INDEX CONCURRENTLY", "CREATE INDEX CONCURRENTLY"]),
        ("003_audit_and_timeline.sql", &["CREATE TABLE IF", "CREATE INDEX CONCURRENTLY", "CREATE TABLE IF", "CREATE INDEX CONCURRENTLY"]),
        ("004_expiration_poison.sql", &["CREATE TABLE IF"]),
        ("005_outbox_failed_index.sql", &["CREATE INDEX CONCURRENTLY"]),
        ("006_outbox_notify.sql", &["CREATE OR REPLACE", "CREATE OR REPLACE"]),
        ("007_roles.sql", &["DO $$ DECLARE", "GRANT USAGE ON", "GRANT SELECT (id,", "GRANT UPDATE (status,", "GRANT INSERT (booking_id,", "GRANT INSERT (deal_id,", "GRANT INSERT (id,", "GRANT SELECT, INSERT,", "GRANT SELECT, DELETE", "GRANT UPDATE (published_at,", "GRANT SELECT ON"]),
        ("008_retries.sql", &["ALTER TABLE crm.booking_expiration_poison", "ALTER TABLE crm.outbox", "CREATE INDEX CONCURRENTLY", "GRANT UPDATE (next_attempt_at,"]),
        ("009_operations.sql", &["CREATE TABLE IF", "CREATE TABLE IF", "CREATE INDEX CONCURRENTLY", "ALTER TABLE crm.outbox", "ALTER TABLE crm.outbox", "DO $$ BEGIN", "GRANT USAGE ON", "GRANT SELECT ON", "GRANT UPDATE (delivered_partition,", "GRANT SELECT ON", "GRANT SELECT, INSERT,", "GRANT SELECT, INSERT", "GRANT SELECT ON", "GRANT UPDATE (published_at,", "CREATE INDEX CONCURRENTLY"]),
        ("010_backlog_hygiene.sql", &[]),
        ("011_xmin_holders_function.sql", &["CREATE OR REPLACE", "REVOKE ALL ON", "GRANT EXECUTE ON", "DO $$ BEGIN"]),
        ("012_phase_failures.sql", &["CREATE TABLE IF", "GRANT SELECT, INSERT,", "GRANT SELECT ON"]),
        ("013_outbox_notify_own_rows.sql", &["CREATE OR REPLACE"]),
        ("014_outbox_topic_waits.sql", &["CREATE TABLE IF", "GRANT SELECT, INSERT,", "GRANT SELECT ON"]),
        ("015_outbox_row_security.sql", &["CREATE TABLE IF", "INSERT INTO crm.booking_expiration_outbox_type", "GRANT SELECT ON", "DO $$ BEGIN", "DO $$ BEGIN", "DO $$ BEGIN"]),
        ("016_relay_receipts.sql", &["CREATE TABLE IF", "CREATE TABLE IF", "CREATE TABLE IF", "GRANT SELECT, INSERT,", "GRANT SELECT, INSERT,", "GRANT SELECT, DELETE", "GRANT SELECT ON", "GRANT SELECT ON"]),
        ("017_outbox_inserted_xid.sql", &["ALTER TABLE crm.outbox", "ALTER TABLE crm.outbox", "CREATE INDEX CONCURRENTLY", "ALTER TABLE crm.booking_expiration_relay_state"]),
    ];

    /// The sha256 of those 75 statements' text, joined by "\n;\n".
    const SHIPPED_SHA256: &str = "573dc2eb62c0862a06163959c3409622aafba4b2566b3940828e877931af2426";

    #[test]
    fn every_shipped_file_splits_into_the_statements_it_always_did() {
        use sha2::{Digest, Sha256};
        let files = super::super::embedded::MIGRATIONS;
        assert!(files.len() >= SHIPPED.len());
        let mut all = Vec::new();
        for (m, (file, heads)) in files.iter().zip(SHIPPED) {
            assert_eq!(m.file, *file);
            let got = statements(m.sql).unwrap();
            let got_heads: Vec<String> = got
                .iter()
                .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
                .collect();
            assert_eq!(got_heads, *heads, "{file}");
            all.extend(got);
        }
        let digest = Sha256::digest(all.join("\n;\n").as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, SHIPPED_SHA256, "the statements' text changed");
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
    fn a_rules_parenthesised_actions_are_one_statement() {
        let sql = "CREATE RULE r AS ON INSERT TO t DO ALSO (SELECT 1; SELECT 2);\nSELECT 3";
        assert_eq!(
            statements(sql).unwrap(),
            [
                "CREATE RULE r AS ON INSERT TO t DO ALSO (SELECT 1; SELECT 2)",
                "SELECT 3"
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
            ("/* a\n/* b\n/* c */\n*/ x", "comment /*", 1),
            ("SELECT 1; /* a\n b */ SELECT 'x\n y", "string '", 2),
            ("SELECT 1;\n\nSELECT B'0101", "bit string B'", 3),
            ("SELECT U&'d\\0061t", "string '", 1),
        ];
        for (sql, what, line) in cases {
            assert_eq!(
                statements(sql),
                Err(SplitError::Unterminated {
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
    fn a_statement_the_grammar_refuses_is_an_error_naming_its_line() {
        let err = statements("SELECT 1;\n-- why\nCREATE TABEL t (a int);\nSELECT 2;").unwrap_err();
        assert_eq!(
            err,
            SplitError::Invalid {
                message: "syntax error at or near \"TABEL\"".into(),
                line: 3
            }
        );
        assert_eq!(
            err.to_string(),
            "the statement on line 3 is not SQL PostgreSQL's grammar accepts: syntax error at \
             or near \"TABEL\""
        );
        // The scanner's own refusals: a number run into a word (PostgreSQL 15 on).
        assert_eq!(
            statements("SELECT 1;\nSELECT 123abc;").unwrap_err().line(),
            2
        );
    }

    #[test]
    fn a_first_line_is_cut_at_100_characters() {
        assert_eq!(first_line("CREATE INDEX x\n  ON t (a)"), "CREATE INDEX x");
        let long = "x".repeat(120);
        assert_eq!(first_line(&long).chars().count(), 101);
    }
}
