//! The runner's wait policy per statement, pure: which timeouts a statement runs
//! under, and how long to back off before it is tried again after giving up a lock.
//! A statement that queues for a lock holds up every later request for that lock (the
//! CRM's writes among them), so it waits at most `lock_timeout`, gives up, and tries
//! again later; a concurrent index build waits for older transactions instead, which
//! blocks nobody, and gets the patient policy.

use std::time::Duration;

/// The limits of a run, from the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// How long a statement may wait for a lock before it gives up (and is retried).
    pub lock_timeout: Duration,
    /// How long a statement may run.
    pub statement_timeout: Duration,
    /// Both limits of a `CONCURRENTLY` index build.
    pub index_timeout: Duration,
    /// How long to wait for another migrator's advisory lock.
    pub lock_wait: Duration,
    /// How long one statement is retried after giving up a lock.
    pub retry_for: Duration,
    /// The tests' hook: stop (as a signal would) after this many statements of this
    /// run. `None` outside the tests.
    pub stop_after: Option<usize>,
}

/// The first back-off, and the most any back-off is.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The back-off before try `attempt + 1` after `attempt` failed tries (1, 2, …): 1s,
/// 2s, 4s, … capped at 30s, of which a random part (`jitter` in 0..1) is left out so
/// that migrators and the CRM's retries do not fall into step: between half of it and
/// all of it. Never overflows, whatever `attempt`.
pub fn backoff(attempt: u32, jitter: f64) -> Duration {
    let doublings = attempt.saturating_sub(1).min(16);
    let full = FIRST_BACKOFF
        .checked_mul(1 << doublings)
        .unwrap_or(MAX_BACKOFF)
        .min(MAX_BACKOFF);
    let jitter = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.0
    };
    full / 2 + (full / 2).mul_f64(jitter)
}

/// A random number in 0..1 for [`backoff`].
pub fn jitter() -> f64 {
    let bits = u64::from_le_bytes(
        uuid::Uuid::new_v4().as_bytes()[..8]
            .try_into()
            .unwrap_or_default(),
    );
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// What kind of statement it is, for its policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// Anything that takes its locks in a queue: short lock_timeout, retried.
    Queued,
    /// `CREATE [UNIQUE] INDEX CONCURRENTLY [IF NOT EXISTS] name ON [ONLY] table`: the
    /// index (its schema: the table's, else `None` for the search path) is checked for
    /// an invalid leftover first.
    IndexBuild {
        schema: Option<String>,
        index: String,
    },
    /// Another `CONCURRENTLY` statement (DROP INDEX, REINDEX): patient, no check.
    Concurrent,
}

impl Kind {
    /// The limits a statement of this kind runs under: (lock_timeout, statement_timeout).
    pub fn timeouts(&self, policy: &Policy) -> (Duration, Duration) {
        match self {
            Kind::Queued => (policy.lock_timeout, policy.statement_timeout),
            Kind::IndexBuild { .. } | Kind::Concurrent => {
                (policy.index_timeout, policy.index_timeout)
            }
        }
    }
}

/// One token of a statement's head, for its kind: a word (an identifier or keyword,
/// upper-cased unless quoted) or a character of punctuation.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// A keyword or an unquoted identifier, as written.
    Word(String),
    /// A quoted identifier, as the catalog spells it (`""` made `"`).
    Quoted(String),
    Punct(char),
}

impl Token {
    fn is(&self, keyword: &str) -> bool {
        matches!(self, Token::Word(w) if w.eq_ignore_ascii_case(keyword))
    }

    /// The name the catalog has for this identifier: a quoted one as written, an
    /// unquoted one in lower case.
    fn name(&self) -> Option<String> {
        match self {
            Token::Word(w) => Some(w.to_ascii_lowercase()),
            Token::Quoted(q) => Some(q.clone()),
            Token::Punct(_) => None,
        }
    }
}

/// The first `limit` tokens of a statement, comments (`--`, nested `/* */`) skipped,
/// strings skipped whole.
fn tokens(statement: &str, limit: usize) -> Vec<Token> {
    let b = statement.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() && out.len() < limit {
        let c = b[i];
        if c == b'-' && b.get(i + 1) == Some(&b'-') {
            i = b[i..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| i + p);
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'"' || c == b'\'' {
            let mut j = i + 1;
            let mut text = Vec::new();
            while j < b.len() {
                if b[j] == c {
                    if b.get(j + 1) == Some(&c) {
                        text.push(c);
                        j += 2;
                        continue;
                    }
                    break;
                }
                text.push(b[j]);
                j += 1;
            }
            if c == b'"' {
                out.push(Token::Quoted(String::from_utf8_lossy(&text).into_owned()));
            }
            i = j + 1;
        } else if c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80 {
            let mut j = i;
            while j < b.len()
                && (b[j].is_ascii_alphanumeric() || b[j] == b'_' || b[j] == b'$' || b[j] >= 0x80)
            {
                j += 1;
            }
            out.push(Token::Word(statement[i..j].to_owned()));
            i = j;
        } else {
            out.push(Token::Punct(c as char));
            i += 1;
        }
    }
    out
}

/// The kind of `statement`, from its first tokens: `CREATE [UNIQUE] INDEX CONCURRENTLY
/// [IF NOT EXISTS] name ON [ONLY] [schema.]table` is an index build (comments anywhere,
/// quoted names with spaces), any other statement with `CONCURRENTLY` among its first
/// words a concurrent one, the rest queued.
pub fn kind(statement: &str) -> Kind {
    let t = tokens(statement, 24);
    let at = |i: usize, keyword: &str| t.get(i).is_some_and(|t| t.is(keyword));
    if at(0, "CREATE") {
        let mut i = 1;
        if at(i, "UNIQUE") {
            i += 1;
        }
        if at(i, "INDEX") && at(i + 1, "CONCURRENTLY") {
            i += 2;
            if at(i, "IF") && at(i + 1, "NOT") && at(i + 2, "EXISTS") {
                i += 3;
            }
            // A name, then ON; without a name (`… CONCURRENTLY ON t`) the server
            // chooses one, which no check can look for.
            if !at(i, "ON")
                && at(i + 1, "ON")
                && let Some(index) = t.get(i).and_then(Token::name)
            {
                let mut table = i + 2;
                if at(table, "ONLY") {
                    table += 1;
                }
                let schema = (t.get(table + 1) == Some(&Token::Punct('.')))
                    .then(|| t.get(table).and_then(Token::name))
                    .flatten();
                return Kind::IndexBuild { schema, index };
            }
            return Kind::Concurrent;
        }
    }
    if t.iter().take(6).any(|w| w.is("CONCURRENTLY")) {
        return Kind::Concurrent;
    }
    Kind::Queued
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_one_second_to_thirty_with_jitter_inside() {
        assert_eq!(backoff(1, 1.0), Duration::from_secs(1));
        assert_eq!(backoff(1, 0.0), Duration::from_millis(500));
        assert_eq!(backoff(2, 1.0), Duration::from_secs(2));
        assert_eq!(backoff(3, 1.0), Duration::from_secs(4));
        assert_eq!(backoff(5, 1.0), Duration::from_secs(16));
        assert_eq!(backoff(6, 1.0), Duration::from_secs(30));
        assert_eq!(backoff(6, 0.0), Duration::from_secs(15));
        assert_eq!(backoff(0, 1.0), Duration::from_secs(1));
        assert_eq!(backoff(3, f64::NAN), Duration::from_secs(2));
    }

    #[test]
    fn backoff_stays_capped_and_never_overflows_at_two_billion_attempts() {
        for attempt in [2_000_000_000, u32::MAX] {
            for jitter in [0.0, 0.5, 1.0, 7.0] {
                let d = backoff(attempt, jitter);
                assert!(d <= MAX_BACKOFF && d >= MAX_BACKOFF / 2, "{attempt}: {d:?}");
            }
        }
        let j = jitter();
        assert!((0.0..1.0).contains(&j));
    }

    #[test]
    fn a_concurrent_index_build_is_told_from_other_statements() {
        assert_eq!(
            kind("CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_a\n    ON crm.outbox (seq)"),
            Kind::IndexBuild {
                schema: Some("crm".into()),
                index: "ix_a".into()
            }
        );
        assert_eq!(
            kind("create unique index concurrently \"Ux\" on only t(a)"),
            Kind::IndexBuild {
                schema: None,
                index: "Ux".into()
            }
        );
        assert_eq!(
            kind("DROP INDEX CONCURRENTLY IF EXISTS crm.ix_a"),
            Kind::Concurrent
        );
        assert_eq!(
            kind("CREATE INDEX IF NOT EXISTS ix ON crm.t (a)"),
            Kind::Queued
        );
        assert_eq!(
            kind("ALTER TABLE crm.outbox ADD COLUMN x int"),
            Kind::Queued
        );
    }

    #[test]
    fn a_build_with_comments_or_a_quoted_name_with_spaces_is_an_index_build() {
        assert_eq!(
            kind("CREATE /* online */ INDEX CONCURRENTLY ix_c ON crm.outbox (seq)"),
            Kind::IndexBuild {
                schema: Some("crm".into()),
                index: "ix_c".into()
            }
        );
        assert_eq!(
            kind("CREATE INDEX CONCURRENTLY \"Ix C\" ON \"My Schema\".t (a)"),
            Kind::IndexBuild {
                schema: Some("My Schema".into()),
                index: "Ix C".into()
            }
        );
        assert_eq!(
            kind(
                "-- why\nCREATE UNIQUE -- a comment\n INDEX /* x /* y */ */ CONCURRENTLY\n  IF NOT EXISTS \"a\"\"b\" ON ONLY crm . t (a)"
            ),
            Kind::IndexBuild {
                schema: Some("crm".into()),
                index: "a\"b".into()
            }
        );
        assert_eq!(
            kind("CREATE INDEX CONCURRENTLY ON crm.t (a)"),
            Kind::Concurrent
        );
        assert_eq!(
            kind("REINDEX /* c */ INDEX CONCURRENTLY crm.ix"),
            Kind::Concurrent
        );
        assert_eq!(kind("SELECT 'CONCURRENTLY'"), Kind::Queued);
    }

    #[test]
    fn an_index_build_gets_the_patient_limits_and_the_rest_the_short_ones() {
        let policy = Policy {
            lock_timeout: Duration::from_secs(2),
            statement_timeout: Duration::from_secs(60),
            index_timeout: Duration::from_secs(3600),
            lock_wait: Duration::from_secs(900),
            retry_for: Duration::from_secs(600),
            stop_after: None,
        };
        assert_eq!(
            Kind::Queued.timeouts(&policy),
            (Duration::from_secs(2), Duration::from_secs(60))
        );
        assert_eq!(
            Kind::Concurrent.timeouts(&policy),
            (Duration::from_secs(3600), Duration::from_secs(3600))
        );
    }
}
