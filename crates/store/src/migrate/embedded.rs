//! The migrations built into the binary: every file of `sql/`, in version order, each
//! with the oldest release that still works on the schema it leaves (its line's third
//! field: the CHANGELOG's "rollback across it" made data). The version is the file's
//! numeric prefix; 1–12 are the baseline (release 0.1.0), every later change is a new
//! file. A unit test fails when this list and the files of `sql/` differ, so a new file
//! cannot be forgotten here; another holds each file's release to the CHANGELOG.

/// One migration file as built in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    pub version: i32,
    /// The file's name, e.g. `001_bookings.sql`.
    pub file: &'static str,
    pub sql: &'static str,
    /// The oldest release whose binary still works on the schema this file leaves
    /// (the cycle, the relay, the operators' work): the release before the one that
    /// ships it when a rollback across it is safe, else that release itself. Recorded
    /// in the history, so that an older binary, which does not know the file, reads it
    /// there and refuses (a configuration fault) instead of running on it.
    pub works_from: &'static str,
}

macro_rules! migrations {
    ($($version:literal $file:literal $works_from:literal),* $(,)?) => {
        &[$(Migration {
            version: $version,
            file: $file,
            sql: include_str!(concat!("../../../../sql/", $file)),
            works_from: $works_from,
        }),*]
    };
}

/// Every migration, in version order: version, file, the oldest release that works on
/// the schema it leaves.
pub const MIGRATIONS: &[Migration] = migrations![
    1 "001_bookings.sql" "0.1.0",
    2 "002_outbox.sql" "0.1.0",
    3 "003_audit_and_timeline.sql" "0.1.0",
    4 "004_expiration_poison.sql" "0.1.0",
    5 "005_outbox_failed_index.sql" "0.1.0",
    6 "006_outbox_notify.sql" "0.1.0",
    7 "007_roles.sql" "0.1.0",
    8 "008_retries.sql" "0.1.0",
    9 "009_operations.sql" "0.1.0",
    10 "010_backlog_hygiene.sql" "0.1.0",
    11 "011_xmin_holders_function.sql" "0.1.0",
    12 "012_phase_failures.sql" "0.1.0",
    13 "013_outbox_notify_own_rows.sql" "0.1.0",
    14 "014_outbox_topic_waits.sql" "0.1.0",
    15 "015_outbox_row_security.sql" "0.1.0",
    16 "016_relay_receipts.sql" "0.1.0",
    17 "017_outbox_inserted_xid.sql" "0.1.0",
];

/// The last version of the baseline (release 0.1.0): the files a database migrated
/// by the old script may hold, and adoption compares with what they make.
pub const BASELINE: i32 = 12;

/// The schema version this binary expects: the highest built in.
pub fn latest() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_list_is_the_files_of_sql_in_order() {
        // The crate's folder as cargo names it when it runs the tests (a binary found
        // fresh in a target directory shared by two checkouts keeps the first's path).
        let manifest: std::path::PathBuf = std::env::var_os("CARGO_MANIFEST_DIR")
            .map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), Into::into);
        let dir = manifest.join("../../sql");
        let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "sql"))
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read_to_string(&p).unwrap())
            })
            .collect();
        files.sort();
        let built_in: Vec<(String, String)> = MIGRATIONS
            .iter()
            .map(|m| (m.file.to_owned(), m.sql.to_owned()))
            .collect();
        let names = |v: &[(String, String)]| v.iter().map(|f| f.0.clone()).collect::<Vec<_>>();
        assert_eq!(
            names(&built_in),
            names(&files),
            "crates/store/src/migrate/embedded.rs lists other files than sql/ holds"
        );
        assert!(built_in == files, "a built-in file differs from sql/'s");
    }

    #[test]
    fn versions_are_the_prefixes_one_after_another() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            let prefix: i32 = m.file.split('_').next().unwrap().parse().unwrap();
            assert_eq!(m.version, prefix, "{}", m.file);
            assert_eq!(m.version, i as i32 + 1, "{}: a gap before it", m.file);
        }
        assert!(latest() >= BASELINE);
    }
}
