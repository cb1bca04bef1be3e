//! Adoption of a database migrated by the old script (every file of `sql/` replayed
//! by `psql`, no history), file by file, whatever the history holds: a baseline file
//! without a history row is adopted only when what it makes is there as it makes it,
//! fact by fact (`catalog`: columns with their types and defaults, index definitions,
//! constraints, triggers, functions, storage parameters, roles and privileges).
//!
//! Where the database differs, each difference is one of three:
//! - **run**: running the file again puts it back, changing nothing else (a missing
//!   table, index, grant or role; a column its file adds to a table an earlier file
//!   made; a function or trigger its file replaces); the file runs, and `migrate` says
//!   why.
//! - **kept**: a DBA's setting on an object of the file (a storage parameter changed
//!   or reset): the file is adopted and the setting kept, and named. Were the file to
//!   run for another difference, it would reset the setting: then it is refused.
//! - **refused**: running the file would not put it back (a column missing from a
//!   table the file creates, a column of another type or default, an index or a
//!   constraint of another definition under the file's name): the run refuses (a
//!   configuration fault) naming each, before anything is made or recorded.

use super::catalog::{ABSENT, Fact, ROLE_EXISTS, Snapshot, expected, superseded};
use super::embedded::BASELINE;

/// What a baseline file without a history row gets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Verdict {
    /// Nothing the file makes is there (the job's roles aside, which are the
    /// cluster's): it was never applied, and runs as any pending file does.
    pub absent: bool,
    /// Differences running the file puts back.
    pub run: Vec<String>,
    /// The DBA's settings kept on adoption.
    pub kept: Vec<String>,
    /// Differences running the file would not put back, each with what to do.
    pub refused: Vec<String>,
}

impl Verdict {
    /// Adopted as it is: nothing to run, nothing refused (kept settings are named).
    pub(super) fn adopts(&self) -> bool {
        !self.absent && self.run.is_empty() && self.refused.is_empty()
    }

    /// Why the file cannot be adopted nor run, one phrase each; empty when it can.
    pub(super) fn refusals(&self) -> Vec<String> {
        let mut out = self.refused.clone();
        if !self.run.is_empty() && !self.refused.is_empty() {
            out.push(format!(
                "and what running the file again would put back: {}",
                some(&self.run)
            ));
        }
        if !self.run.is_empty() && self.refused.is_empty() && !self.kept.is_empty() {
            out.push(format!(
                "{}; the file must run again ({}), which would reset these settings of the \
                 DBA's: RESET them, let migrate run the file, then set them again, or put \
                 back by hand what the file makes",
                self.kept.join("; "),
                some(&self.run)
            ));
        }
        out
    }
}

/// Compares baseline file `version`'s facts with the database's `actual`.
pub(super) fn judge(version: i32, actual: &Snapshot) -> Verdict {
    let facts = expected(version);
    let creates_table = |table: &str| {
        facts
            .iter()
            .any(|f| f.kind == "table" && f.object == table && f.value != ABSENT)
    };
    let table_present = |table: &str| actual.contains_key(&("table".to_owned(), table.to_owned()));
    let exists = |role: &str| actual.contains_key(&(ROLE_EXISTS.to_owned(), role.to_owned()));
    let missing_roles: Vec<&str> = facts
        .iter()
        .filter(|f| f.kind == "role" && !exists(&f.object))
        .map(|f| f.object.as_str())
        .collect();
    let mut v = Verdict::default();
    if !facts.is_empty()
        && !facts
            .iter()
            .any(|f| f.kind != "role" && f.value != ABSENT && actual.contains_key(&f.key()))
    {
        v.absent = true;
        return v;
    }
    for f in facts.iter().filter(|f| !superseded(f, BASELINE)) {
        let found = actual.get(&f.key());
        if f.value == ABSENT {
            if found.is_some() {
                v.run.push(format!(
                    "{} {} is there (the file removes it)",
                    f.kind, f.object
                ));
            }
            continue;
        }
        let Some(found) = found else {
            missing(f, &mut v, &missing_roles, &creates_table, &table_present);
            continue;
        };
        if *found == f.value {
            continue;
        }
        differs(f, found, &mut v);
    }
    v
}

/// At most five of `items`, and how many more.
fn some(items: &[String]) -> String {
    let mut out = items.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    if items.len() > 5 {
        out.push_str(&format!(" and {} more", items.len() - 5));
    }
    out
}

/// The table a fact's object belongs to (`crm.t` of `crm.t.c` or `crm.t option`).
fn table_of(f: &Fact) -> String {
    match f.kind.as_str() {
        "storage parameter" => f.object.split(' ').next().unwrap_or_default().to_owned(),
        "column" | "constraint" | "trigger" | "policy" => f
            .object
            .rsplit_once('.')
            .map_or(f.object.clone(), |(t, _)| t.to_owned()),
        _ => f.object.clone(),
    }
}

fn missing(
    f: &Fact,
    v: &mut Verdict,
    missing_roles: &[&str],
    creates_table: &dyn Fn(&str) -> bool,
    table_present: &dyn Fn(&str) -> bool,
) {
    let table = table_of(f);
    match f.kind.as_str() {
        // A role that exists and holds none of the file's privileges here: each grant
        // is named.
        "role" if !missing_roles.contains(&f.object.as_str()) => {}
        "role" => v.run.push(format!("role {} does not exist", f.object)),
        // Named once, with its role.
        "grant"
            if missing_roles
                .iter()
                .any(|r| f.object.ends_with(&format!(" to {r}"))) => {}
        "grant" => v.run.push(format!("privilege {} is not granted", f.object)),
        "column" if table_present(&table) && creates_table(&table) => {
            v.refused.push(missing_from_its_table("column", f, &table));
        }
        "constraint" if table_present(&table) => {
            v.refused
                .push(missing_from_its_table("constraint", f, &table));
        }
        "storage parameter" if table_present(&table) => v.kept.push(format!(
            "storage parameter {} of {table} is reset (the file sets it to {}): kept as it is",
            f.object.split(' ').nth(1).unwrap_or_default(),
            f.value
        )),
        "row security" if table_present(&table) => v.refused.push(format!(
            "row security on {table} is disabled (the file enables it: ALTER TABLE {table} \
             ENABLE ROW LEVEL SECURITY)"
        )),
        "policy" if table_present(&table) => {
            v.run.push(format!("policy {} does not exist", f.object))
        }
        _ => v
            .run
            .push(format!("{} {} does not exist", f.kind, f.object)),
    }
}

fn differs(f: &Fact, found: &str, v: &mut Verdict) {
    let table = table_of(f);
    match f.kind.as_str() {
        // An earlier build's leftover, whatever its definition: the runner drops an
        // INVALID index of the file's name before it builds the file's.
        "index" if found.ends_with(" (INVALID)") => v.run.push(format!(
            "index {} is INVALID (a build that failed): it is dropped and built again",
            f.object
        )),
        "index" => v.refused.push(format!(
            "index {} is `{found}` where the file makes `{}` (an index of the DBA's under the \
             file's name: running the file would skip it; rename it, ALTER INDEX {} RENAME TO \
             …, or drop it, DROP INDEX CONCURRENTLY {}, and migrate builds the file's)",
            f.object, f.value, f.object, f.object
        )),
        "column" => {
            let column = f.object.rsplit_once('.').map_or("", |(_, c)| c);
            let fix = type_of(&f.value)
                .filter(|t| Some(*t) != type_of(found))
                .map_or_else(
                    || {
                        format!(
                            "change it as the file makes it: ALTER TABLE {table} ALTER COLUMN \
                             {column} …"
                        )
                    },
                    |t| {
                        format!(
                            "change it in a quiet moment: ALTER TABLE {table} ALTER COLUMN \
                             {column} TYPE {t}, which rewrites the table under an ACCESS \
                             EXCLUSIVE lock; docs/guides/upgrading.md, \"A column of another \
                             type\""
                        )
                    },
                );
            v.refused.push(format!(
                "column {} is {found} where the file makes it {} (running the file again would \
                 not change it; {fix})",
                f.object, f.value
            ));
        }
        "storage parameter" => v.kept.push(format!(
            "storage parameter {} of {table} is {found} where the file sets {}: kept as it is",
            f.object.split(' ').nth(1).unwrap_or_default(),
            f.value
        )),
        // Disabled or set to fire on replicas only by a DBA: the trigger is the file's.
        "trigger" if found.starts_with(&f.value) && found.ends_with(')') => {
            let state = match &found[f.value.len()..] {
                " (DISABLED)" => "disabled",
                " (ENABLE REPLICA)" => "enabled on replicas only",
                _ => "enabled always (replicas too)",
            };
            v.kept.push(format!(
                "trigger {} is {state} where the file makes it enabled: kept as it is",
                f.object
            ))
        }
        "function" | "trigger" => v.run.push(format!(
            "{} {} differs from the file's (its definition: `{}`): the file replaces it",
            f.kind,
            f.object,
            found.lines().next().unwrap_or_default()
        )),
        _ => v.refused.push(format!(
            "{} {} is `{found}` where the file makes `{}` (running the file again would not \
             change it)",
            f.kind, f.object, f.value
        )),
    }
}

/// The type of a column fact's value (`bigint` of `bigint NOT NULL DEFAULT 0`).
fn type_of(value: &str) -> Option<&str> {
    value
        .split(" NOT NULL")
        .next()
        .and_then(|s| s.split(" NULL").next())
        .filter(|s| !s.is_empty())
}

/// The refusal for a column or constraint (`what`) of fact `f` missing from `table`,
/// which is there: running the file again would not add it (its `CREATE TABLE IF NOT
/// EXISTS` skips the table), so the DBA adds it back, as the statement given says.
fn missing_from_its_table(what: &str, f: &Fact, table: &str) -> String {
    format!(
        "{what} {} is missing (the file makes it {}; running the file again would not add it \
         to the table that is there: add it back, ALTER TABLE {table} ADD {} {} {})",
        f.object,
        f.value,
        what.to_uppercase(),
        f.object.rsplit_once('.').map_or("", |(_, c)| c),
        f.value
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actual_of(version: i32) -> Snapshot {
        let mut actual: Snapshot = (1..=version)
            .flat_map(expected)
            .map(|f| (f.key(), f.value))
            .collect();
        for role in crate::migrate::catalog::roles() {
            actual.insert((ROLE_EXISTS.to_owned(), role.to_owned()), String::new());
        }
        actual
    }

    #[test]
    fn a_role_that_exists_without_the_files_grants_is_named_by_its_grants_and_a_missing_one_once() {
        let mut actual = actual_of(BASELINE);
        let role = "crm_outbox_relay";
        actual.retain(|(kind, object), _| {
            !(kind == "grant" && object.ends_with(&format!(" to {role}")) || object == role)
        });
        actual.insert((ROLE_EXISTS.to_owned(), role.to_owned()), String::new());
        let v = judge(7, &actual);
        assert!(v.run.iter().all(|d| d.starts_with("privilege ")), "{v:?}");
        assert_eq!(v.run.len(), 7, "{v:?}");
        actual.remove(&(ROLE_EXISTS.to_owned(), role.to_owned()));
        let v = judge(7, &actual);
        assert_eq!(v.run, vec![format!("role {role} does not exist")]);
    }

    #[test]
    fn a_disabled_trigger_is_kept_and_named() {
        let mut actual = actual_of(BASELINE);
        let key = ("trigger".to_owned(), "crm.outbox.outbox_notify".to_owned());
        let def = actual[&key].clone();
        actual.insert(key, format!("{def} (DISABLED)"));
        let v = judge(6, &actual);
        assert!(v.adopts(), "{v:?}");
        assert_eq!(
            v.kept,
            vec![
                "trigger crm.outbox.outbox_notify is disabled where the file makes it \
                 enabled: kept as it is"
                    .to_owned()
            ]
        );
    }

    #[test]
    fn a_database_with_every_fact_adopts_every_baseline_file() {
        let actual = actual_of(BASELINE);
        for v in 1..=BASELINE {
            assert_eq!(judge(v, &actual), Verdict::default(), "{v}");
        }
    }

    #[test]
    fn a_column_missing_from_a_table_its_file_creates_is_refused_naming_it() {
        let mut actual = actual_of(BASELINE);
        let key = (
            "column".to_owned(),
            "crm.booking_expiration_poison.retry_at".to_owned(),
        );
        assert!(actual.remove(&key).is_some());
        let v = judge(4, &actual);
        assert!(v.run.is_empty(), "{v:?}");
        assert_eq!(v.refused.len(), 1, "{v:?}");
        assert!(
            v.refused[0].starts_with(
                "column crm.booking_expiration_poison.retry_at is missing (the file makes it \
                 timestamp with time zone NOT NULL"
            ),
            "{v:?}"
        );
    }

    #[test]
    fn a_revoked_grant_runs_the_file_and_a_storage_parameter_is_kept() {
        let mut actual = actual_of(BASELINE);
        let grant = (
            "grant".to_owned(),
            "UPDATE on crm.bookings (updated_at) to crm_booking_expiration_worker".to_owned(),
        );
        assert!(actual.remove(&grant).is_some(), "{actual:?}");
        let v = judge(7, &actual);
        assert_eq!(v.run.len(), 1, "{v:?}");
        assert!(v.refusals().is_empty());
        let option = (
            "storage parameter".to_owned(),
            "crm.outbox autovacuum_vacuum_threshold".to_owned(),
        );
        actual.insert(option.clone(), "5000".to_owned());
        let v = judge(9, &actual);
        assert!(v.adopts(), "{v:?}");
        assert_eq!(
            v.kept,
            vec![
                "storage parameter autovacuum_vacuum_threshold of crm.outbox is 5000 where the \
                 file sets 1000: kept as it is"
                    .to_owned()
            ]
        );
        // Were 009 to run for another difference, the setting would be reset: refused.
        actual.remove(&("index".to_owned(), "crm.ix_outbox_aggregateid".to_owned()));
        let v = judge(9, &actual);
        assert!(!v.adopts());
        assert_eq!(v.refusals().len(), 1, "{v:?}");
    }

    #[test]
    fn an_index_of_another_definition_under_the_files_name_is_refused() {
        let mut actual = actual_of(BASELINE);
        actual.insert(
            ("index".to_owned(), "crm.ix_outbox_pending".to_owned()),
            "CREATE INDEX ix_outbox_pending ON crm.outbox USING btree (occurred_at)".to_owned(),
        );
        let v = judge(2, &actual);
        assert_eq!(v.refused.len(), 1, "{v:?}");
        assert!(v.refused[0].contains("(occurred_at)"), "{v:?}");
    }

    #[test]
    fn the_type_of_a_column_value_is_its_first_words() {
        assert_eq!(type_of("bigint NOT NULL DEFAULT 0"), Some("bigint"));
        assert_eq!(
            type_of("timestamp with time zone NULL"),
            Some("timestamp with time zone")
        );
    }
}
