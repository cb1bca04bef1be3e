//! The release before: the previous release's binary (the newest line of
//! `scripts/releases.tsv`, built once from its commit by `scripts/release-before.sh`,
//! which `scripts/test.sh` starts early and the tests call, waiting for that build; or
//! the binary `BOOKING_EXPIRE_PREVIOUS_BIN` names) and
//! the current one taking turns on one database, as a deploy and a rollback do: the
//! previous release on its own schema, migrated the way it was (`psql
//! --single-transaction` per file), then the current `migrate`, the previous binary on
//! the new schema (N−1, while the deploy rolls out), the current binary, and the
//! previous one again (a rollback). Every booking is expired once and every event
//! reaches the topic once, whoever wrote or relayed it.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use common::kafka::*;
use common::*;
use serde_json::Value;
use uuid::Uuid;

/// The previous release: its binary and its `sql/` (the migrations it shipped).
struct Previous {
    bin: PathBuf,
    sql: PathBuf,
}

/// `BOOKING_EXPIRE_PREVIOUS_BIN`, or (plain `cargo test`) what `scripts/release-before.sh`
/// prints, building it once if its cache has none.
fn previous() -> &'static Previous {
    static PREVIOUS: OnceLock<Previous> = OnceLock::new();
    PREVIOUS.get_or_init(|| {
        let bin = match std::env::var_os("BOOKING_EXPIRE_PREVIOUS_BIN") {
            Some(bin) => PathBuf::from(bin),
            None => {
                let script = crate::common::repo().join("scripts/release-before.sh");
                let out = Command::new(&script)
                    .stderr(std::process::Stdio::inherit())
                    .output()
                    .expect("run scripts/release-before.sh");
                assert!(out.status.success(), "scripts/release-before.sh failed");
                PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
            }
        };
        assert!(
            bin.is_file(),
            "no previous release's binary at {}",
            bin.display()
        );
        let sql = bin.parent().unwrap().join("sql");
        assert!(sql.is_dir(), "no sql/ beside {}", bin.display());
        Previous { bin, sql }
    })
}

/// The previous release's binary, for the modules that run it beside this one.
pub(crate) fn previous_bin() -> PathBuf {
    previous().bin.clone()
}

/// The previous release's migrations applied as its `scripts/migrate.sh` did: every
/// file in byte order, each in one transaction.
///
/// Its files create the job's group roles, which are the cluster's, in `DO` blocks that
/// look first: two databases migrated at once race there (one fails with "role … does
/// not exist"), as two old scripts would. So the roles are made first, by the suite's
/// template (migrated once per run), and this module migrates one database at a time.
fn migrate_the_old_way(db: &TestDb) {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    drop(TestDb::new());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let files = sql_files(&previous().sql);
    assert!(!files.is_empty(), "the previous release ships no migration");
    let mut c = db.client();
    for name in files {
        let file = previous().sql.join(name);
        let mut tx = c.transaction().unwrap();
        tx.batch_execute(&std::fs::read_to_string(&file).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e:?}", file.display()));
        tx.commit().unwrap();
    }
}

/// Which binary runs a step.
#[derive(Clone, Copy, Debug)]
enum Release {
    Previous,
    Current,
}

impl Release {
    fn run(self, db: &TestDb, args: &[&str]) -> Run {
        let bin: &Path = match self {
            Release::Previous => &previous().bin,
            Release::Current => Path::new(BIN),
        };
        let out = Command::new(bin)
            .args(args)
            .env_clear()
            .env("DATABASE_URL", &db.url)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .output()
            .expect("run a release's binary");
        let run = Run::of(out);
        assert_eq!(
            run.code, 0,
            "{self:?} release: {args:?} exited {}:\n{}",
            run.code, run.stderr
        );
        run
    }

    /// One run-once, which must expire `reserve` + `booking` bookings; its outbox rows
    /// are then pointed at the test's own topic (as the relay tests do: the job writes
    /// only the contract's topic names).
    fn run_once(self, db: &TestDb, topic: &str, reserve: i64, booking: i64) {
        let result = self.run(db, &["run-once"]).result();
        assert_eq!(
            result.counts(),
            (reserve, booking, 0, 0),
            "{self:?} release's run-once"
        );
        db.client()
            .execute(
                "UPDATE crm.outbox SET topic = $1 WHERE published_at IS NULL",
                &[&topic],
            )
            .unwrap();
    }

    /// One relay-outbox, which must publish exactly `n` events.
    fn relay(self, db: &TestDb, brokers: &str, n: i64) {
        let run = self.run(
            db,
            &[
                "relay-outbox",
                "--brokers",
                brokers,
                "--message-timeout",
                "5s",
            ],
        );
        let result: Value = serde_json::from_str(run.stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "{self:?} release's relay result is not JSON ({e}): {}",
                run.stdout
            )
        });
        assert_eq!(result["Published"], n, "{self:?} release's relay: {result}");
    }
}

/// `n` bookings overdue in each phase (Reserved and AwaitingPayment past their reserve
/// deadline, Booked past its booking deadline); returns their ids.
fn seed_overdue(db: &TestDb, n: usize) -> Vec<Uuid> {
    let mut c = db.client();
    seed_many(&mut c, 2 * n, |i| match i % 4 {
        _ if i >= n => Seed::booked(-300 - i as i64),
        0 | 2 => Seed::reserved(-300 - i as i64),
        _ => Seed::new("AwaitingPayment", Some(-300 - i as i64), None),
    })
}

/// Every booking of `ids` expired exactly once (one audit row, one timeline entry and
/// one outbox row each, nothing else written), every outbox row published, and the
/// topic holding every row's event exactly once (by `ce_id`), nothing else.
fn assert_all_expired_once_and_delivered(db: &TestDb, brokers: &str, topic: &str, ids: &[Uuid]) {
    let mut c = db.client();
    let expired = assert_each_expiry_written_once(&mut c);
    assert_eq!(expired, ids.len() as i64, "bookings expired");
    let ids_text: Vec<String> = ids.iter().map(Uuid::to_string).collect();
    assert_eq!(
        count(
            &mut c,
            &format!(
                "SELECT count(*) FROM crm.bookings WHERE id::text IN ('{}')
                    AND status IN ('ReserveExpired', 'BookingExpired') AND expired_at IS NOT NULL",
                ids_text.join("','")
            )
        ),
        ids.len() as i64,
        "every seeded booking is expired"
    );
    assert_eq!(
        count(
            &mut c,
            &format!(
                "SELECT count(*) FROM crm.outbox
                  WHERE published_at IS NULL OR failed_at IS NOT NULL OR topic <> '{topic}'"
            )
        ),
        0,
        "every outbox row published to the test's topic, none failed"
    );
    let rows: BTreeMap<String, String> = c
        .query("SELECT id::text, aggregateid FROM crm.outbox", &[])
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let got = consume(brokers, topic, 6, rows.len(), Duration::from_secs(30));
    let mut by_id: BTreeMap<&str, usize> = BTreeMap::new();
    for m in &got {
        let ce_id = m.headers["ce_id"].as_str();
        *by_id.entry(ce_id).or_default() += 1;
        assert_eq!(
            rows.get(ce_id),
            Some(&m.key),
            "the event {ce_id} is an outbox row's, under its booking's key"
        );
    }
    let twice: Vec<_> = by_id.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "events sent more than once: {twice:?}");
    assert_eq!(
        by_id.keys().copied().collect::<BTreeSet<_>>(),
        rows.keys().map(String::as_str).collect::<BTreeSet<_>>(),
        "every outbox row's event on the topic, no other"
    );
}

#[test]
fn the_previous_release_the_current_one_and_a_rollback_expire_each_booking_once() {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let db = TestDb::empty();
    migrate_the_old_way(&db);
    let (prev, cur) = (Release::Previous, Release::Current);
    let mut all = Vec::new();

    // The previous release on the schema it shipped: some events delivered, some left
    // pending for whoever relays next.
    all.extend(seed_overdue(&db, 4));
    prev.run_once(&db, &topic, 4, 4);
    prev.relay(&db, &brokers, 8);
    all.extend(seed_overdue(&db, 3));
    prev.run_once(&db, &topic, 3, 3);

    // The deploy: the current binary migrates the database the old script migrated.
    let migrated = cur.run(&db, &["migrate"]);
    let result: Value = serde_json::from_str(migrated.stdout.trim()).unwrap();
    // The binary embeds exactly the files of sql/ (a unit test holds it to that).
    let embedded = sql_files(&crate::common::repo().join("sql"));
    let latest: i64 = embedded.last().unwrap()[..3].parse().unwrap();
    assert_eq!(result["SchemaVersion"], latest, "{}", migrated.stdout);
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap_or_else(|| panic!("a list: {v}"))
            .iter()
            .map(|n| n.as_str().unwrap().to_owned())
            .collect()
    };
    let baseline = sql_files(&previous().sql);
    assert_eq!(names(&result["Adopted"]), baseline, "{}", migrated.stdout);
    assert_eq!(
        names(&result["Applied"]),
        embedded[baseline.len()..].to_vec(),
        "{}",
        migrated.stdout
    );
    let history: Vec<(i32, String, bool)> = db
        .client()
        .query(
            "SELECT version, name, adopted FROM crm.booking_expiration_migrations ORDER BY version",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let want: Vec<(i32, String, bool)> = embedded
        .iter()
        .map(|f| (f[..3].parse().unwrap(), f.clone(), baseline.contains(f)))
        .collect();
    assert_eq!(
        history, want,
        "the history: the baseline adopted, the rest applied"
    );

    // N−1 on the new schema, while the deploy rolls out: the previous release expires,
    // and relays what it left pending and what it just wrote.
    all.extend(seed_overdue(&db, 2));
    prev.run_once(&db, &topic, 2, 2);
    prev.relay(&db, &brokers, 6 + 4);

    // The current release: a relay of its own, then expiries it leaves pending.
    all.extend(seed_overdue(&db, 3));
    cur.run_once(&db, &topic, 3, 3);
    cur.relay(&db, &brokers, 6);
    // It keeps receipts of its own and, its legacy marks on (the default), writes what
    // 0.1.0 reads beside them: the same receipt in the columns, so that 0.1.0's relay
    // (below) takes none of these rows again.
    let marked = db
        .client()
        .query_one(
            "SELECT count(*) AS receipts,
                    count(*) FILTER (WHERE o.published_at IS NOT NULL
                                       AND o.delivered_partition = r.partition
                                       AND o.delivered_offset = r.\"offset\") AS marked
               FROM crm.booking_expiration_receipt r JOIN crm.outbox o USING (seq)",
            &[],
        )
        .unwrap();
    assert_eq!(
        (
            marked.get::<_, i64>("receipts"),
            marked.get::<_, i64>("marked")
        ),
        (6, 6),
        "the current relay's receipts, each also in 0.1.0's columns"
    );
    all.extend(seed_overdue(&db, 2));
    cur.run_once(&db, &topic, 2, 2);

    // The rollback: the previous release again, on the new schema. Its relay sends what
    // the current run-once left pending and what it writes itself, nothing the current
    // relay marked.
    all.extend(seed_overdue(&db, 1));
    prev.run_once(&db, &topic, 1, 1);
    prev.relay(&db, &brokers, 4 + 2);

    // And forward again: the current relay takes what 0.1.0 delivered as settled
    // (its columns) and sends nothing twice.
    cur.relay(&db, &brokers, 0);

    assert_all_expired_once_and_delivered(&db, &brokers, &topic, &all);
}

/// The names of the migrations in `dir`, in order.
fn sql_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sql"))
        .collect();
    names.sort();
    names
}

#[test]
fn the_current_release_works_on_the_previous_schema() {
    // What the current binary does on a database the previous release migrated, before
    // `migrate` ran (a deploy whose migration step was skipped or is still waiting):
    // it works. A later release that needs its migrations would refuse here, before
    // any work (exit 78, naming the missing migration, nothing written): this test says
    // which of the two the current release does.
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, 6, &[]);
    let db = TestDb::empty();
    migrate_the_old_way(&db);
    let cur = Release::Current;
    let ids = seed_overdue(&db, 3);
    cur.run_once(&db, &topic, 3, 3);
    cur.relay(&db, &brokers, 6);
    assert_all_expired_once_and_delivered(&db, &brokers, &topic, &ids);
}
