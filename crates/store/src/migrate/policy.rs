//! The runner's wait policy per statement, pure: which timeouts a statement runs
//! under, and how long to back off before it is tried again after giving up a lock.
//! A statement that queues for a lock holds up every later request for that lock (the
//! CRM's writes among them), so it waits at most `lock_timeout`, gives up, and tries
//! again later; a concurrent index build waits for older transactions instead, which
//! blocks nobody, and gets the patient policy.

use std::time::Duration;

use pg_query::NodeEnum;

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
pub(super) const FIRST_BACKOFF: Duration = Duration::from_secs(1);
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The back-off before try `attempt + 1` after `attempt` failed tries (1, 2, …): 1s,
/// 2s, 4s, … capped at 30s, of which a random part (`jitter` in 0..1) is left out so
/// that migrators and the CRM's retries do not fall into step: between half of it and
/// all of it. Never overflows, whatever `attempt`.
pub(super) fn backoff(attempt: u32, jitter: f64) -> Duration {
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
pub(super) fn jitter() -> f64 {
    let bits = u64::from_le_bytes(
        uuid::Uuid::new_v4().as_bytes()[..8]
            .try_into()
            .unwrap_or_default(),
    );
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// What kind of statement it is, for its policy, as PostgreSQL's grammar reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Kind {
    /// Anything that takes its locks in a queue: short lock_timeout, retried.
    Queued,
    /// A named concurrent index build (`IndexStmt` with `concurrent` and an `idxname`):
    /// the index (its schema: the table's, else `None` for the search path) is checked
    /// for an INVALID leftover first.
    IndexBuild {
        schema: Option<String>,
        index: String,
    },
    /// Another statement that waits for older transactions instead of queueing (`DROP
    /// INDEX CONCURRENTLY`, `REINDEX … CONCURRENTLY`, `REFRESH MATERIALIZED VIEW
    /// CONCURRENTLY`, `DETACH PARTITION … CONCURRENTLY`, a build without a name):
    /// patient, no check.
    Concurrent,
}

impl Kind {
    /// The limits a statement of this kind runs under: (lock_timeout, statement_timeout).
    pub(super) fn timeouts(&self, policy: &Policy) -> (Duration, Duration) {
        match self {
            Kind::Queued => (policy.lock_timeout, policy.statement_timeout),
            Kind::IndexBuild { .. } | Kind::Concurrent => {
                (policy.index_timeout, policy.index_timeout)
            }
        }
    }
}

/// The kind of `statement` (one statement, as [`super::split::statements`] gives it),
/// from its parse tree: comments, quoting, letter case and layout do not matter, a word
/// inside a string or a comment is no keyword. A statement the grammar refuses is
/// queued (the server refuses it too, under the short limits).
pub(super) fn kind(statement: &str) -> Kind {
    let Ok(parsed) = pg_query::parse(statement, pg_query::ParserOptions::DEFAULT) else {
        return Kind::Queued;
    };
    let Some(node) = parsed
        .protobuf
        .stmts
        .first()
        .and_then(|raw| raw.stmt.as_ref())
        .and_then(|stmt| stmt.node.as_ref())
    else {
        return Kind::Queued;
    };
    match node {
        NodeEnum::IndexStmt(build) if build.concurrent => {
            // Without a name (`… CONCURRENTLY ON t`) the server chooses one, which no
            // check can look for.
            if build.idxname.is_empty() {
                return Kind::Concurrent;
            }
            let schema = build
                .relation
                .as_ref()
                .map(|table| table.schemaname.clone())
                .filter(|schema| !schema.is_empty());
            Kind::IndexBuild {
                schema,
                index: build.idxname.clone(),
            }
        }
        NodeEnum::DropStmt(drop) if drop.concurrent => Kind::Concurrent,
        NodeEnum::RefreshMatViewStmt(refresh) if refresh.concurrent => Kind::Concurrent,
        NodeEnum::ReindexStmt(reindex) if reindex.params.iter().any(concurrently) => {
            Kind::Concurrent
        }
        NodeEnum::AlterTableStmt(alter) if alter.cmds.iter().any(detaches_concurrently) => {
            Kind::Concurrent
        }
        _ => Kind::Queued,
    }
}

/// Whether a REINDEX option is `CONCURRENTLY` switched on (`REINDEX INDEX CONCURRENTLY
/// x` and `REINDEX (CONCURRENTLY) INDEX x` alike; `(CONCURRENTLY false)` is off), as
/// the server's `defGetBoolean` reads it.
fn concurrently(option: &pg_query::Node) -> bool {
    let Some(NodeEnum::DefElem(option)) = &option.node else {
        return false;
    };
    if option.defname != "concurrently" {
        return false;
    }
    match option.arg.as_ref().and_then(|arg| arg.node.as_ref()) {
        None => true,
        Some(NodeEnum::Boolean(b)) => b.boolval,
        Some(NodeEnum::Integer(i)) => i.ival != 0,
        Some(NodeEnum::String(s)) => matches!(
            s.sval.to_ascii_lowercase().as_str(),
            "true" | "on" | "yes" | "t" | "y" | "1"
        ),
        Some(_) => false,
    }
}

/// Whether an ALTER TABLE command is `DETACH PARTITION … CONCURRENTLY`.
fn detaches_concurrently(command: &pg_query::Node) -> bool {
    let Some(NodeEnum::AlterTableCmd(command)) = &command.node else {
        return false;
    };
    matches!(
        command.def.as_ref().and_then(|def| def.node.as_ref()),
        Some(NodeEnum::PartitionCmd(partition)) if partition.concurrent
    )
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
    fn the_other_concurrent_statements_are_told_by_their_parse_tree() {
        for statement in [
            "DROP INDEX CONCURRENTLY crm.ix",
            "REINDEX INDEX CONCURRENTLY crm.ix",
            "REINDEX (CONCURRENTLY) TABLE crm.outbox",
            "REINDEX (VERBOSE, CONCURRENTLY true) TABLE crm.outbox",
            "REFRESH MATERIALIZED VIEW CONCURRENTLY crm.v",
            "ALTER TABLE crm.p DETACH PARTITION crm.p1 CONCURRENTLY",
            "create index concurrently on crm.t (a)",
        ] {
            assert_eq!(kind(statement), Kind::Concurrent, "{statement}");
        }
        for statement in [
            "REINDEX (CONCURRENTLY false) TABLE crm.outbox",
            "REINDEX (CONCURRENTLY off) TABLE crm.outbox",
            "REINDEX INDEX crm.ix",
            "DROP INDEX IF EXISTS crm.ix",
            "ALTER TABLE crm.p DETACH PARTITION crm.p1",
            "CREATE TABLE concurrently (a int)",
            "SELECT 1 -- CREATE INDEX CONCURRENTLY ix ON t (a)",
            "COMMENT ON TABLE t IS 'CREATE INDEX CONCURRENTLY ix ON t (a)'",
            "CREATE INDEX \"concurrently\" ON t (a)",
            "DO $$ BEGIN EXECUTE 'CREATE INDEX CONCURRENTLY ix ON t (a)'; END $$",
            "not sql at all",
        ] {
            assert_eq!(kind(statement), Kind::Queued, "{statement}");
        }
    }

    #[test]
    fn an_index_name_is_the_catalogs_spelling() {
        assert_eq!(
            kind("CREATE INDEX CONCURRENTLY IX_Upper ON Crm.T (a)"),
            Kind::IndexBuild {
                schema: Some("crm".into()),
                index: "ix_upper".into()
            }
        );
        assert_eq!(
            kind("CREATE INDEX CONCURRENTLY U&\"\\0049x\" ON t (a)"),
            Kind::IndexBuild {
                schema: None,
                index: "Ix".into()
            }
        );
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
