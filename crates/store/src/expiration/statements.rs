//! The cycle's statements as its steps use them: [`CycleStatements`] (prepared by
//! `mod.rs`, from the steps' SQL) and a phase's place in its pairs. A leaf: the steps
//! import it, it imports none of them.

use postgres::Statement;

/// The cycle's statements, prepared once per session.
pub struct CycleStatements {
    pub(super) claim: [Statement; 2],
    pub(super) left: [Statement; 2],
    pub(super) write: Statement,
    pub(super) quarantine: Statement,
    pub(super) release_stale: Statement,
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
