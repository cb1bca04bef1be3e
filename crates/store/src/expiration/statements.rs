//! The cycle's statements as its steps use them: [`CycleStatements`] (prepared by
//! `mod.rs`, from the steps' SQL) and a phase's place in its pairs. A leaf: the steps
//! import it, it imports none of them.

use std::sync::OnceLock;

use postgres::{GenericClient, Statement};

/// The cycle's statements, prepared once per session.
pub struct CycleStatements {
    pub(super) claim: [Statement; 2],
    pub(super) left: [OnFirstUse; 2],
    pub(super) write: Statement,
    pub(super) quarantine: OnFirstUse,
    pub(super) release_stale: Statement,
}

/// A statement prepared at its first use, then kept for the session: the counts of an
/// unfinished phase and the quarantine of poison rows, which a normal minute never
/// runs. Each prepare is a round trip and a parse on a new backend whose catalog caches
/// are cold, so preparing them up front cost every cycle about a millisecond apiece.
pub(super) struct OnFirstUse {
    sql: String,
    prepared: OnceLock<Statement>,
}

impl OnFirstUse {
    pub(super) fn new(sql: impl Into<String>) -> Self {
        OnFirstUse {
            sql: sql.into(),
            prepared: OnceLock::new(),
        }
    }

    /// The statement, prepared on `client` the first time.
    pub(super) fn get(
        &self,
        client: &mut impl GenericClient,
    ) -> Result<&Statement, postgres::Error> {
        if let Some(statement) = self.prepared.get() {
            return Ok(statement);
        }
        let statement = client.prepare(&self.sql)?;
        Ok(self.prepared.get_or_init(|| statement))
    }
}

/// The numbers of a statement's parameters (`$n`), each once, in the order they first
/// appear.
#[cfg(test)]
pub(super) fn parameters(sql: &str) -> Vec<u32> {
    let mut seen = Vec::new();
    for (i, _) in sql.match_indices('$') {
        let digits: String = sql[i + 1..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if let Ok(n) = digits.parse::<u32>()
            && !seen.contains(&n)
        {
            seen.push(n);
        }
    }
    seen
}
