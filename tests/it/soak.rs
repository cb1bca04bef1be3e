//! Concurrency soak, bounded in time: eight `run-once` loops and four simulated CRM
//! managers (Confirm, Extend, Cancel with optimistic version checks, some holding the
//! row while they think) work on the same bookings while their deadlines fall due.
//! Afterwards every change must be accounted for: versions rise by exactly one per
//! change, an expiry is always the last change of its booking, and every expiry has
//! exactly one outbox row and one audit row. `SOAK_SECONDS` (default 40) sets the
//! length; the counts are printed (`cargo test --test it soak:: -- --nocapture`).

use crate::common;
use crate::postgres;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::*;
use postgres::Client;
use uuid::Uuid;

const WORKERS: usize = 8;
const MANAGERS: usize = 4;
const BOOKINGS: usize = 1_600;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Action {
    /// Reserved/AwaitingPayment → Booked (paid), Booked → Completed.
    Confirm,
    /// The current phase's deadline moves 3–10 s ahead.
    Extend,
    /// → Cancelled.
    Cancel,
}

/// A manager's command that committed.
#[derive(Debug, Clone)]
struct Change {
    booking: Uuid,
    from_status: String,
    old_version: i32,
    new_version: i32,
}

#[derive(Debug, Default)]
struct Totals {
    runs: u64,
    reserve: i64,
    booking: i64,
    skipped: i64,
    poison: i64,
}

struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// One manager's command, as the CRM would run it: read the booking, then change it
/// only if it still has the status and version that were read. Half of the commands
/// hold the row (`FOR UPDATE`) while the manager thinks, as an in-flight command does.
/// What one manager command came to.
enum Outcome {
    /// No booking near its deadline right now.
    Idle,
    /// The booking had changed (expired, or changed by another manager) since it was
    /// read: the version check refused the command.
    Lost,
    Won(Action, Change),
}

fn manager_command(c: &mut Client, rng: &mut Lcg) -> Outcome {
    let Some(candidate) = c
        .query_opt(
            "SELECT id FROM crm.bookings
              WHERE (status IN ('Reserved', 'AwaitingPayment')
                     AND reserve_expires_at BETWEEN now() - interval '1 second'
                                               AND now() + interval '200 milliseconds')
                 OR (status = 'Booked'
                     AND booking_expires_at BETWEEN now() - interval '1 second'
                                               AND now() + interval '200 milliseconds')
              ORDER BY random() LIMIT 1",
            &[],
        )
        .unwrap()
    else {
        return Outcome::Idle;
    };
    let id: Uuid = candidate.get(0);
    let hold = rng.below(2) == 0;
    let think = Duration::from_millis(rng.below(30));
    let action = match rng.below(3) {
        0 => Action::Confirm,
        1 => Action::Extend,
        _ => Action::Cancel,
    };
    let extend_by = 3.0 + rng.below(7_000) as f64 / 1_000.0;
    let mut tx = c.transaction().unwrap();
    let lock = if hold { " FOR UPDATE" } else { "" };
    let row = tx
        .query_one(
            &format!("SELECT status, version FROM crm.bookings WHERE id = $1{lock}"),
            &[&id],
        )
        .unwrap();
    let (status, version): (String, i32) = (row.get(0), row.get(1));
    let reserve = status == "Reserved" || status == "AwaitingPayment";
    if !reserve && status != "Booked" {
        return Outcome::Lost; // no longer active: the manager sees it and does nothing
    }
    // The workload: a manager thinks while it holds the row, racing the cycle.
    std::thread::sleep(think);
    let set = match (action, reserve) {
        (Action::Confirm, true) => {
            "status = 'Booked', booking_expires_at = now() + $4 * interval '1 second'"
        }
        (Action::Confirm, false) => "status = 'Completed'",
        (Action::Extend, true) => "reserve_expires_at = now() + $4 * interval '1 second'",
        (Action::Extend, false) => "booking_expires_at = now() + $4 * interval '1 second'",
        (Action::Cancel, _) => "status = 'Cancelled'",
    };
    let updated = tx
        .query_opt(
            &format!(
                "UPDATE crm.bookings SET {set}, updated_at = now(), version = version + 1
                  WHERE id = $1 AND status = $2 AND version = $3 AND $4::float8 IS NOT NULL
                  RETURNING version"
            ),
            &[&id, &status, &version, &extend_by],
        )
        .unwrap();
    tx.commit().unwrap();
    match updated {
        None => Outcome::Lost,
        Some(row) => Outcome::Won(
            action,
            Change {
                booking: id,
                from_status: status,
                old_version: version,
                new_version: row.get(0),
            },
        ),
    }
}

#[test]
fn soak_run_once_instances_and_managers_on_the_same_bookings() {
    let soak = Duration::from_secs(
        std::env::var("SOAK_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(40),
    );
    let db = TestDb::new();
    let mut c = db.client();
    // Deadlines spread over the soak (a few already passed), so expiries and managers
    // meet on the same rows all along.
    let spread = soak.as_secs() as i64 - 4;
    seed_many(&mut c, BOOKINGS, |i| {
        let due = -2 + (i as i64 * 7919) % (spread + 2);
        match i % 6 {
            0 | 1 => Seed::reserved(due),
            2 => Seed::new("AwaitingPayment", Some(due), None),
            _ => Seed::booked(due),
        }
    });
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let totals = Arc::new(Mutex::new(Totals::default()));
    let changes = Arc::new(Mutex::new(Vec::<(Action, Change)>::new()));
    let lost = Arc::new(std::sync::atomic::AtomicU64::new(0));

    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (stop, totals, url) = (stop.clone(), totals.clone(), db.url.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let run = Run::of(
                        run_once_command(&url, &["--batch-size", "20", "--max-batches", "5"])
                            .output()
                            .unwrap(),
                    );
                    assert_eq!(run.code, 0, "{}", run.stderr);
                    let r = run.result();
                    let mut t = totals.lock().unwrap();
                    t.runs += 1;
                    t.reserve += r.reserve;
                    t.booking += r.booking;
                    t.skipped += r.skipped;
                    t.poison += r.poison;
                }
            })
        })
        .collect();
    let managers: Vec<_> = (0..MANAGERS)
        .map(|n| {
            let (stop, changes, lost, url) =
                (stop.clone(), changes.clone(), lost.clone(), db.url.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(&url, postgres::NoTls).unwrap();
                let mut rng = Lcg(0x5eed + n as u64);
                while !stop.load(Ordering::SeqCst) {
                    match manager_command(&mut c, &mut rng) {
                        Outcome::Idle => {}
                        Outcome::Lost => {
                            lost.fetch_add(1, Ordering::SeqCst);
                        }
                        Outcome::Won(action, change) => {
                            changes.lock().unwrap().push((action, change))
                        }
                    }
                    // Pacing, so the managers leave the two cores to the cycles too.
                    std::thread::sleep(Duration::from_millis(15));
                }
            })
        })
        .collect();
    // The workload's length; what is asserted is waited for after it.
    std::thread::sleep(soak);
    stop.store(true, Ordering::SeqCst);
    for t in workers.into_iter().chain(managers) {
        t.join().expect("a worker or manager failed");
    }
    // Nothing lost: one more cycle leaves no overdue active booking behind.
    let last = db.run_once(&["--batch-size", "1000"]);
    let duration = started.elapsed();
    let overdue_left: i64 = c
        .query_one(
            "SELECT count(*) FROM crm.bookings
              WHERE (status IN ('Reserved', 'AwaitingPayment') AND reserve_expires_at < $1)
                 OR (status = 'Booked' AND booking_expires_at < $1)",
            &[&last.as_of],
        )
        .unwrap()
        .get(0);
    assert_eq!(overdue_left, 0, "an overdue booking was left behind");

    let totals = totals.lock().unwrap();
    let changes = changes.lock().unwrap();
    check_every_change_is_accounted_for(&mut c, &changes);
    let expired = assert_each_expiry_written_once(&mut c);
    assert_eq!(
        totals.reserve + totals.booking + last.reserve + last.booking,
        expired,
        "the cycles' results count every expiry once"
    );
    assert_eq!(totals.poison + last.poison, 0);

    let by_action = |a: Action| changes.iter().filter(|(x, _)| *x == a).count();
    let reserve_expired = count(
        &mut c,
        "SELECT count(*) FROM crm.bookings WHERE status = 'ReserveExpired'",
    );
    println!(
        "soak: {:.1}s, {} bookings, {WORKERS} run-once loops ({} runs), {MANAGERS} managers",
        duration.as_secs_f64(),
        BOOKINGS,
        totals.runs + 1
    );
    println!(
        "soak: expired {expired} (reserve {reserve_expired}, booking {}), confirmed {}, \
         extended {}, cancelled {}, manager commands refused (the booking had moved on) {}, \
         skipped locked {} in total",
        expired - reserve_expired,
        by_action(Action::Confirm),
        by_action(Action::Extend),
        by_action(Action::Cancel),
        lost.load(Ordering::SeqCst),
        totals.skipped + last.skipped
    );
    assert!(expired > 0 && !changes.is_empty(), "both sides did work");
}

/// `run-once` against the database at `url`, with a clean environment.
fn run_once_command(url: &str, extra: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new(BIN);
    cmd.arg("run-once")
        .args(extra)
        .env_clear()
        .env("DATABASE_URL", url)
        .env("LOG_FORMAT", "json")
        .env("RUST_LOG", "warn");
    cmd
}

/// Every booking's history from the recorded manager changes and the expiry audit:
/// versions 2..=current, each taken by exactly one change; an expiry is the last
/// change of its booking, after its deadline; no manager changed a booking after it
/// expired.
fn check_every_change_is_accounted_for(c: &mut Client, changes: &[(Action, Change)]) {
    struct Row {
        status: String,
        version: i32,
        expired_at: Option<DateTime<Utc>>,
        deadline: Option<DateTime<Utc>>,
    }
    let bookings: HashMap<Uuid, Row> = c
        .query(
            "SELECT id, status, version, expired_at,
                    CASE WHEN status = 'ReserveExpired' THEN reserve_expires_at
                         ELSE booking_expires_at END
               FROM crm.bookings",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.get(0),
                Row {
                    status: r.get(1),
                    version: r.get(2),
                    expired_at: r.get(3),
                    deadline: r.get(4),
                },
            )
        })
        .collect();
    let mut versions: HashMap<Uuid, Vec<i32>> = HashMap::new();
    for (_, ch) in changes {
        assert_eq!(ch.new_version, ch.old_version + 1, "{ch:?}");
        assert!(
            ["Reserved", "AwaitingPayment", "Booked"].contains(&ch.from_status.as_str()),
            "{ch:?}"
        );
        versions.entry(ch.booking).or_default().push(ch.new_version);
    }
    let expiries: Vec<(Uuid, i32, DateTime<Utc>, String)> = c
        .query(
            "SELECT booking_id, version::int4, at, to_status FROM crm.booking_audit
              WHERE actor = 'system:booking-expiration'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    let mut expired_ids = HashSet::new();
    for (id, version, at, to_status) in &expiries {
        assert!(expired_ids.insert(*id), "{id} expired twice");
        let b = &bookings[id];
        assert_eq!(
            (b.version, &b.status, b.expired_at),
            (*version, to_status, Some(*at)),
            "{id}: the expiry is the last change"
        );
        assert!(
            b.deadline.is_some_and(|d| d < *at),
            "{id}: expired at {at}, not after its deadline {:?}",
            b.deadline
        );
        let late: Vec<_> = changes
            .iter()
            .filter(|(_, ch)| ch.booking == *id && ch.old_version >= *version)
            .collect();
        assert!(
            late.is_empty(),
            "{id}: a manager changed it after it expired: {late:?}"
        );
        versions.entry(*id).or_default().push(*version);
    }
    for (id, b) in &bookings {
        let mut got = versions.remove(id).unwrap_or_default();
        got.sort_unstable();
        let want: Vec<i32> = (2..=b.version).collect();
        assert_eq!(
            got, want,
            "{id}: one change per version step ({})",
            b.status
        );
        assert_eq!(
            b.status.ends_with("Expired"),
            expired_ids.contains(id),
            "{id}: {}",
            b.status
        );
    }
    assert!(versions.is_empty(), "changes of unknown bookings");
}
