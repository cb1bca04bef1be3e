//! Which schemas this binary may run on: each history row carries the oldest release
//! that works on the schema its file leaves (`works_from`, from [`super::MIGRATIONS`]),
//! so a binary older than that, which does not know the file, reads it there and
//! refuses (a configuration fault) naming the release needed; one that is behind but
//! still works logs the versions ahead once and runs. The commands' catalog round trip asks whether the
//! history can be read (a statement that never fails), then its rows are read in one
//! more: no history, none readable, or a history from before `works_from` is "nothing
//! known". The same round trip says whether the read-only role
//! can still read other sessions' SQL (a member of `pg_read_all_stats`: migration 11's
//! revoke did not happen).

use std::sync::{Once, OnceLock};

use crate::error::Result;
use log::warn;
use postgres::SimpleQueryRow;

use crate::error::{Fault, fail};

/// The release this binary is, as the application names it (`0.2.0-dev+<commit>`); set
/// once at start, else the crate's version.
static RELEASE: OnceLock<String> = OnceLock::new();

/// Sets the release this binary is (once; later calls change nothing).
pub fn set_release(release: &str) {
    let _ = RELEASE.set(release.to_owned());
}

/// The release this binary is.
pub(crate) fn this_release() -> &'static str {
    RELEASE
        .get()
        .map_or(env!("CARGO_PKG_VERSION"), String::as_str)
}

/// A release's number, `major.minor.patch`, from a release as the history or
/// `--version` spell it (`0.1.0`, `0.2.0-dev+b2d6d3d27639`, `0.1.0 (commit …)`): a
/// development build of 0.2.0 counts as 0.2.0 (it has that release's code so far).
pub(crate) fn number(release: &str) -> Option<(u64, u64, u64)> {
    let core = release
        .split_whitespace()
        .next()?
        .split(['-', '+'])
        .next()?;
    let mut parts = core.split('.').map(|p| p.parse::<u64>().ok());
    let n = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(n)
}

/// Whether the history can be read, and how: `readable` (it exists and the role may
/// read it) and `works_from` (it has that column), as text. A statement of the
/// commands' catalog batch that never fails; the rows themselves are read after it,
/// only when there are some to read ([`read`]): a server without libxml has no
/// dynamic read that would do it in the same batch.
pub(crate) const PROBE_STATEMENT: &str =
    "SELECT (CASE WHEN to_regclass('crm.booking_expiration_migrations') IS NULL THEN false
             ELSE has_table_privilege('crm.booking_expiration_migrations', 'SELECT') END)::text
           AS history_readable,
       EXISTS (SELECT FROM pg_catalog.pg_attribute
                WHERE attrelid = to_regclass('crm.booking_expiration_migrations')
                  AND attname = 'works_from' AND NOT attisdropped)::text AS history_works_from";

/// The history's rows as far as compatibility goes, when [`PROBE_STATEMENT`]'s answer
/// says it can be read: one more round trip, on a migrated database only.
pub(crate) fn read(client: &mut postgres::Client, probe: &[SimpleQueryRow]) -> Result<Vec<Row>> {
    use crate::error::Context;
    let field = |name: &str| probe.first().and_then(|r| r.get(name)) == Some("true");
    if !field("history_readable") {
        return Ok(Vec::new());
    }
    let works_from = if field("history_works_from") {
        "coalesce(works_from, '')"
    } else {
        "''"
    };
    let messages = client
        .simple_query(&format!(
            "SELECT version::text AS version, name, release, {works_from} AS works_from
               FROM crm.booking_expiration_migrations ORDER BY version"
        ))
        .classify(
            Fault::Temporary,
            "cannot read the migrations' history crm.booking_expiration_migrations",
        )?;
    let answer: Vec<SimpleQueryRow> = messages
        .into_iter()
        .filter_map(|m| match m {
            postgres::SimpleQueryMessage::Row(r) => Some(r),
            _ => None,
        })
        .collect();
    Ok(rows(&answer))
}

/// Whether the read-only role can read every session's SQL text (a member of
/// `pg_read_all_stats`, directly or not).
pub(crate) const READS_ALL_STATS_STATEMENT: &str =
    "SELECT CASE WHEN to_regrole('crm_booking_expiration_readonly') IS NULL THEN 'false'
             ELSE pg_has_role('crm_booking_expiration_readonly', 'pg_read_all_stats',
                              'MEMBER')::text END AS reads_all_stats";

/// One history row, as far as compatibility goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    pub version: i32,
    pub name: String,
    pub release: String,
    pub works_from: String,
}

/// What the history says about this binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing ahead of it, nothing it is too old for.
    Fine,
    /// Files ahead of the binary's, none needing a newer release: it runs.
    Ahead { rows: Vec<Row>, needs: String },
    /// A file needs a newer release than this binary: it refuses.
    TooOld { row: Row },
}

/// Judges the history `rows` for a binary of release `this` that knows the files up to
/// `latest`.
pub(crate) fn verdict(rows: &[Row], this: &str, latest: i32) -> Verdict {
    let this_number = number(this);
    let mut too_old: Option<&Row> = None;
    for row in rows {
        let (Some(needs), Some(have)) = (number(&row.works_from), this_number) else {
            continue;
        };
        if needs > have && too_old.is_none_or(|t| number(&t.works_from) < Some(needs)) {
            too_old = Some(row);
        }
    }
    if let Some(row) = too_old {
        return Verdict::TooOld { row: row.clone() };
    }
    let ahead: Vec<Row> = rows
        .iter()
        .filter(|r| r.version > latest)
        .cloned()
        .collect();
    if ahead.is_empty() {
        return Verdict::Fine;
    }
    let needs = rows
        .iter()
        .filter_map(|r| number(&r.works_from).map(|n| (n, r.works_from.as_str())))
        .max()
        .map_or("no release named".to_owned(), |(_, r)| r.to_owned());
    Verdict::Ahead { rows: ahead, needs }
}

/// The rows of the history's answer.
fn rows(answer: &[SimpleQueryRow]) -> Vec<Row> {
    answer
        .iter()
        .filter_map(|r| {
            Some(Row {
                version: r.get("version")?.parse().ok()?,
                name: r.get("name").unwrap_or_default().to_owned(),
                release: r.get("release").unwrap_or_default().to_owned(),
                works_from: r.get("works_from").unwrap_or_default().to_owned(),
            })
        })
        .collect()
}

/// Fails (a configuration fault) when the history needs a newer release than this
/// binary; logs once (per process) the files ahead of it and a read-only role that can
/// still read other sessions' SQL.
pub(crate) fn judge(history: &[Row], reads_all_stats: &[SimpleQueryRow]) -> Result<()> {
    static AHEAD: Once = Once::new();
    static STATS: Once = Once::new();
    if reads_all_stats
        .first()
        .and_then(|r| r.get("reads_all_stats"))
        == Some("true")
    {
        STATS.call_once(|| warn!("{}", STATS_WARNING));
    }
    match verdict(history, this_release(), super::latest()) {
        Verdict::Fine => Ok(()),
        Verdict::Ahead { rows, needs } => {
            AHEAD.call_once(|| {
                let names: Vec<String> = rows
                    .iter()
                    .map(|r| format!("{} (applied by {})", r.name, r.release))
                    .collect();
                warn!(Release = this_release();
                      "the schema is ahead of this binary ({}, which knows migrations 1 to {}): {}; \
                       it works on it (the oldest release that does: {needs}), so it runs; deploy the \
                       release that migrated it",
                      this_release(), super::latest(), names.join(", "));
            });
            Ok(())
        }
        Verdict::TooOld { row } => Err(fail(
            Fault::Config,
            format!(
                "this binary ({}) is too old for the schema: migration {} (version {}, applied \
                 by {}) needs release {} or later; nothing was done (deploy release {} or later)",
                this_release(),
                row.name,
                row.version,
                row.release,
                row.works_from,
                row.works_from
            ),
        )),
    }
}

/// What `backlog` and the preflight say when the read-only role is a member of
/// `pg_read_all_stats`.
pub(crate) const STATS_WARNING: &str = "the read-only role crm_booking_expiration_readonly is a member \
    of pg_read_all_stats: it can read the SQL text of every session of the cluster \
    (pg_stat_activity), which migration 011 revokes; run as a superuser: REVOKE \
    pg_read_all_stats FROM crm_booking_expiration_readonly";

#[cfg(test)]
mod tests {
    use super::*;

    fn row(version: i32, works_from: &str) -> Row {
        Row {
            version,
            name: format!("{version:03}_x.sql"),
            release: "r".into(),
            works_from: works_from.into(),
        }
    }

    /// The workspace's root, as cargo names it when it runs the tests.
    fn root() -> std::path::PathBuf {
        let manifest: std::path::PathBuf = std::env::var_os("CARGO_MANIFEST_DIR")
            .map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), Into::into);
        manifest.join("../..")
    }

    #[test]
    fn each_files_release_is_what_the_changelog_and_the_upgrade_test_say() {
        let root = root();
        let changelog = std::fs::read_to_string(root.join("CHANGELOG.md")).unwrap();
        let releases = std::fs::read_to_string(root.join("scripts/releases.tsv")).unwrap();
        let released: Vec<&str> = releases
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .filter_map(|l| l.split('\t').next())
            .collect();
        let previous = *released.last().expect("a release in scripts/releases.tsv");
        let unreleased = changelog
            .split("\n## [")
            .find(|s| s.starts_with("Unreleased]"))
            .expect("an [Unreleased] section");
        for m in super::super::MIGRATIONS {
            let parsed = number(m.works_from);
            assert!(
                parsed.is_some(),
                "{}: works_from {:?}",
                m.file,
                m.works_from
            );
            // "`NNN_name.sql`, new (… rollback across it: safe …" in [Unreleased].
            let new = format!("`{}`, new (", m.file);
            let verdict = unreleased.find(&new).map(|at| {
                let entry = &unreleased[at + new.len()..];
                let said = "rollback across it: ";
                let from = entry
                    .find(said)
                    .unwrap_or_else(|| panic!("{}: no \"{said}\" in its CHANGELOG entry", m.file));
                entry[from + said.len()..].replace('\n', " ")
            });
            let want = match verdict {
                // Shipped by the release to come: safe to roll back across means the
                // release before works on its schema; not safe, that only this one does.
                Some(verdict) => {
                    if verdict.starts_with("safe") {
                        previous.to_owned()
                    } else {
                        assert!(verdict.starts_with("not safe"), "{}: {verdict:.40}", m.file);
                        // The release to come: the next minor one after the last.
                        let (major, minor, _) = number(previous).unwrap_or_default();
                        format!("{major}.{}.0", minor + 1)
                    }
                }
                // Shipped by a release: a baseline file needs that release at least; a
                // later file's entry is in that release's section.
                None => {
                    assert!(
                        m.version <= super::super::embedded::BASELINE,
                        "{}: no \"{new}… rollback across it: safe …\" (or \"not safe\") in \
                         CHANGELOG.md's [Unreleased]",
                        m.file
                    );
                    released[0].to_owned()
                }
            };
            assert_eq!(
                m.works_from, want,
                "{}: its release in embedded.rs against CHANGELOG.md",
                m.file
            );
        }
        // tests/it/upgrade.rs runs the release before on the schema this one migrates
        // (N−1): every file must say that release still works, or the test must change.
        let upgrade = std::fs::read_to_string(root.join("tests/it/upgrade.rs")).unwrap();
        let migrated = upgrade
            .find("cur.run(&db, &[\"migrate\"])")
            .expect("upgrade.rs migrates with the current binary");
        assert!(
            upgrade[migrated..].contains("prev.run_once(")
                && upgrade[migrated..].contains("prev.relay("),
            "upgrade.rs runs the release before after the current migrate"
        );
        let works = number(previous);
        for m in super::super::MIGRATIONS {
            assert!(
                number(m.works_from) <= works,
                "{} needs release {}, but tests/it/upgrade.rs runs release {previous} on its \
                 schema: make that test expect the refusal (78) instead",
                m.file,
                m.works_from
            );
        }
    }

    #[test]
    fn a_release_number_ignores_what_follows_the_core() {
        assert_eq!(number("0.1.0"), Some((0, 1, 0)));
        assert_eq!(number("0.2.0-dev+b2d6d3d27639"), Some((0, 2, 0)));
        assert_eq!(number("0.1.0 (commit b2d6d3d27639)"), Some((0, 1, 0)));
        assert_eq!(number("10.20.30+x"), Some((10, 20, 30)));
        assert_eq!(number(""), None);
        assert_eq!(number("0.1"), None);
        assert_eq!(number("0.1.0.4"), None);
    }

    #[test]
    fn a_binary_older_than_a_files_release_refuses_and_one_behind_runs() {
        let mine = [row(1, "0.1.0"), row(16, "0.1.0")];
        assert_eq!(verdict(&mine, "0.2.0-dev+abc", 16), Verdict::Fine);
        let ahead = [row(1, "0.1.0"), row(16, "0.1.0"), row(99, "0.2.0")];
        assert_eq!(
            verdict(&ahead, "0.2.0-dev+abc", 16),
            Verdict::Ahead {
                rows: vec![row(99, "0.2.0")],
                needs: "0.2.0".into()
            }
        );
        assert_eq!(
            verdict(&ahead, "0.1.9", 16),
            Verdict::TooOld {
                row: row(99, "0.2.0")
            }
        );
        // The highest requirement is named; rows without one (a history from before the
        // column) ask nothing.
        let far = [row(1, ""), row(98, "0.3.0"), row(99, "1.0.0")];
        assert_eq!(
            verdict(&far, "0.2.0", 16),
            Verdict::TooOld {
                row: row(99, "1.0.0")
            }
        );
        assert_eq!(
            verdict(&[row(99, "")], "0.2.0", 16),
            Verdict::Ahead {
                rows: vec![row(99, "")],
                needs: "no release named".into()
            }
        );
    }
}
