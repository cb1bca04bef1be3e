//! A guest in the CRM's database: every command against a database its owners changed
//! in one way each (session settings on the role or the database, odd time zones and
//! date styles, a same-named table earlier on the search path, serializable by
//! default with a manager writing meanwhile, read-only by default, a real hot
//! standby). For each: no crash (exit 70, 101 or 134); where the job can write, the
//! healthy bookings of both phases expire in one cycle and their events reach Kafka
//! once each; where it cannot, every writer exits 75 before any work naming the fix;
//! every report runs.
//!
//! The job runs as a LOGIN role of the case's own, a member of the three group roles,
//! so that settings on the role touch only this case.

use crate::common;
use crate::postgres;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::kafka::*;
use common::*;
use postgres::{Client, NoTls};
use uuid::Uuid;

/// As the contract's topics have (the relay checks it before sending).
const PARTITIONS: i32 = 6;

/// What the owners did to the database. In `sql`, `{db}` is the test database and
/// `{role}` the job's login role; it runs as the suite's user after the seed.
struct Case {
    name: &'static str,
    sql: &'static str,
    /// Extra flags of `relay-outbox` (e.g. a follow window longer than a timeout).
    relay: &'static [&'static str],
    /// Something else writing to the bookings while the cycle runs.
    manager: bool,
    /// Whether the job's session can write there; where it cannot, every writer exits
    /// 75 before any work, naming the fix, and the reports still run.
    writes: bool,
    /// The role may hold one connection: run-once makes do with it, the relay (which
    /// marks on a session of its own) exits 69 before sending, saying it needs two.
    one_connection: bool,
    /// A booking the owners made odd (`{odd}` in `sql`), and what becomes of it.
    odd: Option<Odd>,
    /// The owners' change stops run-once for every booking: its exit code and what its
    /// message must say; nothing changes, and the reports still run.
    refused: Option<(i32, &'static str)>,
}

impl Case {
    /// A change of the owners after which everything works as usual.
    fn new(name: &'static str, sql: &'static str) -> Self {
        Case {
            name,
            sql,
            relay: &[],
            manager: false,
            writes: true,
            one_connection: false,
            odd: None,
            refused: None,
        }
    }
}

/// An odd booking: Booked, its booking deadline 400 s past, then changed by the case's
/// SQL. The healthy bookings around it expire all the same.
struct Odd {
    fate: Fate,
    /// The first cycle fails on it (exit 75) and the next one isolates it.
    first_cycle_fails: bool,
}

enum Fate {
    /// Expires like any other: its value is unambiguous.
    Expired,
    /// Not due, so not claimed: nothing happens to it and nothing is said.
    Untouched,
    /// Quarantined with this reason and SQLSTATE; the booking stays as it was.
    Quarantined {
        reason: &'static str,
        sqlstate: Option<&'static str>,
    },
}

/// A LOGIN role in all three of the job's group roles; dropped with the case.
fn job_role(db: &TestDb) -> LoginRole {
    LoginRole::member_of(
        db,
        "job",
        "crm_booking_expiration_worker, crm_outbox_relay, crm_booking_expiration_readonly",
    )
}

/// The suite's own session on the test database, unaffected by the case's settings.
fn admin(db: &TestDb) -> Client {
    let mut c = db.client();
    c.batch_execute(
        "SET statement_timeout = 0; SET lock_timeout = 0;
         SET idle_in_transaction_session_timeout = 0;
         SET default_transaction_read_only = off;
         SET default_transaction_isolation = 'read committed';
         SET search_path = crm, public; SET TimeZone = 'UTC'",
    )
    .unwrap();
    c
}

fn run_at(url: &str, args: &[&str]) -> Run {
    Run::of(
        std::process::Command::new(BIN)
            .args(args)
            .env_clear()
            .env("DATABASE_URL", url)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .output()
            .expect("run the binary"),
    )
}

/// A crash, as no input may cause one: an internal error, a panic, an abort.
fn assert_no_crash(case: &str, what: &str, run: &Run) {
    assert!(
        ![70, 101, 134].contains(&run.code),
        "{case}: {what} crashed with exit {}:\n{}",
        run.code,
        run.stderr
    );
}

fn assert_ok(case: &str, what: &str, run: &Run) {
    assert_no_crash(case, what, run);
    assert_eq!(
        run.code, 0,
        "{case}: {what} exited {}:\n{}",
        run.code, run.stderr
    );
}

fn check(case: &Case) {
    let db = TestDb::new();
    let role = job_role(&db);
    let mut c = admin(&db);
    let (reserve, booking, managed) = seed_case(&mut c);
    let odd = case
        .odd
        .as_ref()
        .map(|_| seed(&mut c, &[Seed::booked(-400)])[0]);
    let sql = case
        .sql
        .replace("{refuse}", &format!("{REFUSE_ODD};"))
        .replace("{db}", &db.name)
        .replace("{role}", &role.name)
        .replace("{odd}", &odd.map(|id| id.to_string()).unwrap_or_default());
    c.batch_execute(&sql)
        .unwrap_or_else(|e| panic!("{}: set-up: {e}", case.name));

    exercise(
        case,
        &role.url,
        &mut c,
        &Seeded {
            odd,
            reserve,
            booking,
            managed,
            manager_url: db.url.clone(),
        },
    );
}

/// The bookings of a case: overdue in each phase, and not yet due for the manager.
struct Seeded {
    odd: Option<Uuid>,
    reserve: Vec<Uuid>,
    booking: Vec<Uuid>,
    managed: Vec<Uuid>,
    manager_url: String,
}

fn seed_case(c: &mut Client) -> (Vec<Uuid>, Vec<Uuid>, Vec<Uuid>) {
    let reserve = seed_many(c, 3, |i| Seed::reserved(-600 - i as i64));
    let booking = seed_many(c, 3, |i| Seed::booked(-600 - i as i64));
    // Bookings the manager keeps extending; not yet due, so never expired.
    let managed = seed_many(c, 5, |_| Seed::reserved(3_600));
    (reserve, booking, managed)
}

/// Every command at `url`; `c` reads back (on the server the job writes to, or for a
/// standby, the standby itself).
fn exercise(case: &Case, url: &str, c: &mut Client, seeded: &Seeded) {
    let brokers = shared_brokers();
    let topic = unique_topic();
    create_topic(&brokers, &topic, PARTITIONS, &[]);
    let (reserve, booking) = (&seeded.reserve, &seeded.booking);
    let stop = Arc::new(AtomicBool::new(false));
    let manager = case.manager.then(|| {
        let stop = Arc::clone(&stop);
        let url = seeded.manager_url.clone();
        let managed = seeded.managed.clone();
        std::thread::spawn(move || {
            // Serializable too (the database's default): it extends its bookings in
            // short transactions, as a manager's screen would, until the cycle is done.
            let mut m = Client::connect(&url, NoTls).unwrap();
            let mut writes = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let id = managed[(writes % 5) as usize];
                let _ = m.execute(
                    "UPDATE crm.bookings SET reserve_expires_at = reserve_expires_at + interval '1 second',
                            version = version + 1
                      WHERE id = $1",
                    &[&id],
                );
                writes += 1;
            }
            writes
        })
    });

    if !case.writes {
        stop.store(true, Ordering::Relaxed);
        refuses_writes(case, url, c, &brokers, &topic);
        reports(case, url, reserve[0]);
        return;
    }
    if let Some((code, says)) = case.refused {
        let before = checksum(c);
        let run = run_at(url, &["run-once"]);
        assert_no_crash(case.name, "run-once", &run);
        assert_eq!(run.code, code, "{}: run-once:\n{}", case.name, run.stderr);
        assert!(run.stderr.contains(says), "{}: {}", case.name, run.stderr);
        assert_eq!(checksum(c), before, "{}: bookings changed", case.name);
        reports(case, url, reserve[0]);
        return;
    }
    if case.odd.as_ref().is_some_and(|o| o.first_cycle_fails) {
        let first = run_at(url, &["run-once"]);
        assert_no_crash(case.name, "the first run-once", &first);
        assert_eq!(
            first.code, 75,
            "{}: the first run-once:\n{}",
            case.name, first.stderr
        );
    }
    let cycle = run_at(url, &["run-once"]);
    stop.store(true, Ordering::Relaxed);
    if let Some(manager) = manager {
        assert!(
            manager.join().unwrap() > 0,
            "{}: the manager wrote nothing",
            case.name
        );
    }
    assert_ok(case.name, "run-once", &cycle);
    let result = cycle.result();
    let mut expired: Vec<Uuid> = reserve.iter().chain(booking.iter()).copied().collect();
    match (&case.odd, seeded.odd) {
        (None, _) => assert_eq!(
            (result.reserve, result.booking, result.poison),
            (3, 3, 0),
            "{}: run-once: {}",
            case.name,
            cycle.stderr
        ),
        (Some(odd), Some(id)) => {
            if odd_fate(case.name, &odd.fate, c, id, &result, &cycle) {
                expired.push(id);
            }
        }
        (Some(_), None) => unreachable!("an odd case seeds its booking"),
    }
    for id in reserve.iter() {
        assert_eq!(status_of(c, *id), "ReserveExpired", "{}", case.name);
    }
    for id in booking.iter() {
        assert_eq!(status_of(c, *id), "BookingExpired", "{}", case.name);
    }
    assert_eq!(
        assert_each_expiry_written_once(c),
        expired.len() as i64,
        "{}",
        case.name
    );

    c.execute("UPDATE crm.outbox SET topic = $1", &[&topic])
        .unwrap();
    if case.one_connection {
        let run = run_at(url, &["relay-outbox", "--brokers", brokers.as_str()]);
        assert_no_crash(case.name, "relay-outbox", &run);
        assert_eq!(run.code, 69, "{}: relay-outbox:\n{}", case.name, run.stderr);
        assert!(
            run.stderr
                .contains("relay-outbox needs 2 database connections at once"),
            "{}: {}",
            case.name,
            run.stderr
        );
        // It has exited: what the topic holds now is all it sent.
        assert_eq!(records_on(&brokers, &topic, PARTITIONS), 0, "{}", case.name);
        reports(case, url, reserve[0]);
        return;
    }
    let mut relay = vec![
        "relay-outbox",
        "--brokers",
        brokers.as_str(),
        "--message-timeout",
        "10s",
    ];
    relay.extend_from_slice(case.relay);
    let relayed = run_at(url, &relay);
    assert_ok(case.name, "relay-outbox", &relayed);
    let got = consume(
        &brokers,
        &topic,
        PARTITIONS,
        expired.len(),
        Duration::from_secs(30),
    );
    let mut per_booking: HashMap<String, usize> = HashMap::new();
    for m in &got {
        *per_booking.entry(m.key.clone()).or_default() += 1;
    }
    for id in expired.iter().map(Uuid::to_string) {
        assert_eq!(
            per_booking.get(&id),
            Some(&1),
            "{}: events of {id}",
            case.name
        );
    }
    assert_eq!(
        got.len(),
        expired.len(),
        "{}: events on the topic",
        case.name
    );
    reports(case, url, reserve[0]);
    if let Some(id) = seeded.odd {
        reports(case, url, id);
    }
}

/// Checks what became of the odd booking `id` after the cycle `result`; true when it
/// expired.
fn odd_fate(
    case: &str,
    fate: &Fate,
    c: &mut Client,
    id: Uuid,
    result: &CycleResult,
    run: &Run,
) -> bool {
    let quarantined = c
        .query_opt(
            "SELECT reason, sqlstate FROM crm.booking_expiration_poison WHERE booking_id = $1",
            &[&id],
        )
        .unwrap()
        .map(|r| (r.get::<_, String>(0), r.get::<_, Option<String>>(1)));
    match fate {
        Fate::Expired => {
            assert_eq!(status_of(c, id), "BookingExpired", "{case}: {}", run.stderr);
            assert_eq!(quarantined, None, "{case}");
            true
        }
        Fate::Untouched => {
            assert_eq!(status_of(c, id), "Booked", "{case}");
            assert_eq!(quarantined, None, "{case}");
            assert_eq!(result.poison, 0, "{case}");
            false
        }
        Fate::Quarantined { reason, sqlstate } => {
            assert_eq!(status_of(c, id), "Booked", "{case}");
            assert_eq!(
                quarantined,
                Some((reason.to_string(), sqlstate.map(str::to_owned))),
                "{case}: {}",
                run.stderr
            );
            assert_eq!(result.poison, 1, "{case}");
            assert!(
                run.stderr.lines().any(|l| l.contains(&id.to_string())),
                "{case}: the log never names {id}:\n{}",
                run.stderr
            );
            false
        }
    }
}

/// Where the session cannot write: run-once and relay-outbox exit 75 before any work
/// with one line that names the fix; nothing changes and nothing is sent.
fn refuses_writes(case: &Case, url: &str, c: &mut Client, brokers: &str, topic: &str) {
    let before = checksum(c);
    for args in [
        vec!["run-once"],
        vec![
            "relay-outbox",
            "--brokers",
            brokers,
            "--message-timeout",
            "10s",
        ],
    ] {
        let run = run_at(url, &args);
        assert_no_crash(case.name, args[0], &run);
        assert_eq!(run.code, 75, "{}: {}:\n{}", case.name, args[0], run.stderr);
        assert!(
            run.stderr.contains("target_session_attrs=read-write"),
            "{}: {} does not say how to reach the primary:\n{}",
            case.name,
            args[0],
            run.stderr
        );
    }
    assert_eq!(checksum(c), before, "{}: bookings changed", case.name);
    assert_eq!(
        count(c, "SELECT count(*) FROM crm.outbox"),
        0,
        "{}: outbox rows written",
        case.name
    );
    // Both have exited: what the topic holds now is all they sent.
    assert_eq!(records_on(brokers, topic, PARTITIONS), 0, "{}", case.name);
}

/// The reports, read-only, run wherever the job can read.
fn reports(case: &Case, url: &str, explained: Uuid) {
    let now = chrono::Utc::now().to_rfc3339();
    let explained = explained.to_string();
    for (what, args) in [
        ("backlog", vec!["backlog"]),
        ("backlog --format json", vec!["backlog", "--format", "json"]),
        (
            "backlog --format prometheus",
            vec!["backlog", "--format", "prometheus"],
        ),
        ("dry-run", vec!["dry-run", "--as-of", now.as_str()]),
        (
            "dry-run --json",
            vec!["dry-run", "--as-of", now.as_str(), "--json"],
        ),
        ("explain", vec!["explain", explained.as_str()]),
    ] {
        let run = run_at(url, &args);
        assert_ok(case.name, what, &run);
        assert!(
            !run.stdout.is_empty(),
            "{}: {what} printed nothing",
            case.name
        );
    }
}

#[test]
fn a_far_time_zone_and_german_date_style_on_the_database() {
    check(&Case::new(
        "time zone far from UTC and a German date style, on the database",
        "ALTER DATABASE {db} SET TimeZone = 'Pacific/Kiritimati';
              ALTER DATABASE {db} SET DateStyle = 'German, DMY';
              ALTER DATABASE {db} SET IntervalStyle = 'sql_standard'",
    ));
}

#[test]
fn a_time_zone_behind_utc_and_postgres_date_style_on_the_role() {
    check(&Case::new(
        "time zone behind UTC and a Postgres date style, on the role",
        "ALTER ROLE {role} SET TimeZone = 'America/Adak';
              ALTER ROLE {role} SET DateStyle = 'Postgres, MDY'",
    ));
}

#[test]
fn a_same_named_table_first_on_the_search_path() {
    check(&Case::new(
        "a same-named table first on the search path",
        "CREATE TABLE public.bookings (LIKE crm.bookings);
              CREATE TABLE public.outbox (LIKE crm.outbox);
              GRANT ALL ON public.bookings, public.outbox TO {role};
              ALTER ROLE {role} SET search_path = public, crm",
    ));
}

#[test]
fn statement_and_lock_timeouts_of_1ms_on_the_role() {
    check(&Case::new(
        "a statement timeout of 1 ms and a lock timeout of 1 ms on the role",
        "ALTER ROLE {role} SET statement_timeout = '1ms';
              ALTER ROLE {role} SET lock_timeout = '1ms'",
    ));
}

#[test]
fn an_idle_in_transaction_timeout_of_10ms_on_the_database() {
    check(&Case::new(
        "idle in transaction timeout of 10 ms on the database",
        "ALTER DATABASE {db} SET idle_in_transaction_session_timeout = '10ms'",
    ));
}

#[test]
fn serializable_by_default_with_a_manager_writing_meanwhile() {
    check(&Case {
        manager: true,
        ..Case::new(
            "serializable by default, with a manager extending other bookings meanwhile",
            "ALTER DATABASE {db} SET default_transaction_isolation = 'serializable'",
        )
    });
}

#[test]
fn a_role_of_one_connection() {
    check(&Case {
        one_connection: true,
        ..Case::new(
            "CONNECTION LIMIT 1 on the role",
            "ALTER ROLE {role} CONNECTION LIMIT 1",
        )
    });
}

#[test]
fn read_only_by_default_on_the_database() {
    check(&Case {
        writes: false,
        ..Case::new(
            "default_transaction_read_only on the database, as on a demoted primary",
            "ALTER DATABASE {db} SET default_transaction_read_only = on",
        )
    });
}

#[test]
fn an_idle_session_timeout_shorter_than_the_follow_window_on_the_role() {
    check(&Case {
        relay: &["--follow", "3s"],
        ..Case::new(
            "idle_session_timeout of 1 s on the role, a relay following for 3 s",
            "ALTER ROLE {role} SET idle_session_timeout = '1s'",
        )
    });
}

/// A real hot standby, streaming from a primary of the test's own: the job pointed at
/// the standby alone cannot write there and says how to reach the primary; the
/// reports run on it.
#[test]
fn a_hot_standby() {
    let primary = OwnPostgres::start();
    let mut p = primary.client();
    let (reserve, booking, managed) = seed_case(&mut p);
    let standby = OwnPostgres::standby_of(&primary);
    primary.wait_replayed_by(&standby);
    exercise(
        &Case {
            name: "a hot standby",
            sql: "",
            relay: &[],
            manager: false,
            writes: false,
            one_connection: false,
            odd: None,
            refused: None,
        },
        &standby.url,
        &mut standby.client(),
        &Seeded {
            odd: None,
            reserve,
            booking,
            managed,
            manager_url: primary.url.clone(),
        },
    );
}

/// A function raising `errcode` for the odd booking and passing every other row.
const REFUSE_ODD: &str = "CREATE FUNCTION crm.refuse_odd() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
       IF NEW.id = '{odd}' THEN
         RAISE EXCEPTION 'booking % is held by the CRM', NEW.id USING ERRCODE = TG_ARGV[0];
       END IF;
       RETURN NEW;
     END $$;";

#[test]
fn a_deadline_of_minus_infinity() {
    check(&Case {
        odd: Some(Odd {
            fate: Fate::Expired,
            first_cycle_fails: false,
        }),
        ..Case::new(
            "booking_expires_at = -infinity: overdue whatever the moment",
            "UPDATE crm.bookings SET booking_expires_at = '-infinity' WHERE id = '{odd}'",
        )
    });
}

#[test]
fn a_deadline_of_infinity() {
    check(&Case {
        odd: Some(Odd {
            fate: Fate::Untouched,
            first_cycle_fails: false,
        }),
        ..Case::new(
            "booking_expires_at = infinity: never due",
            "UPDATE crm.bookings SET booking_expires_at = 'infinity' WHERE id = '{odd}'",
        )
    });
}

#[test]
fn a_deadline_in_the_year_290000() {
    check(&Case {
        odd: Some(Odd {
            fate: Fate::Untouched,
            first_cycle_fails: false,
        }),
        ..Case::new(
            "booking_expires_at in the year 290000, past what chrono holds",
            "UPDATE crm.bookings SET booking_expires_at = '290000-01-01' WHERE id = '{odd}'",
        )
    });
}

#[test]
fn an_overdue_booked_row_whose_reserve_deadline_is_infinity() {
    check(&Case {
        odd: Some(Odd {
            fate: Fate::Expired,
            first_cycle_fails: false,
        }),
        ..Case::new(
            "an overdue Booked row with reserve_expires_at = infinity",
            "UPDATE crm.bookings SET reserve_expires_at = 'infinity' WHERE id = '{odd}'",
        )
    });
}

#[test]
fn a_deferred_constraint_refusing_one_booking() {
    check(&Case {
        odd: Some(Odd {
            fate: Fate::Quarantined {
                reason: "database",
                sqlstate: Some("23514"),
            },
            first_cycle_fails: false,
        }),
        ..Case::new(
            "a deferred constraint trigger refusing one booking at COMMIT",
            "{refuse}
              CREATE CONSTRAINT TRIGGER refuse_odd AFTER UPDATE ON crm.bookings
                DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
                EXECUTE FUNCTION crm.refuse_odd('23514')",
        )
    });
}

#[test]
fn a_before_trigger_returning_null_for_one_booking() {
    check(&Case {
        odd: Some(Odd {
            fate: Fate::Quarantined {
                reason: "update_dropped",
                sqlstate: None,
            },
            first_cycle_fails: false,
        }),
        ..Case::new(
            "a BEFORE UPDATE trigger returning NULL for one booking",
            "CREATE FUNCTION crm.drop_odd() RETURNS trigger LANGUAGE plpgsql AS $$
              BEGIN
                IF NEW.id = '{odd}' THEN RETURN NULL; END IF;
                RETURN NEW;
              END $$;
              CREATE TRIGGER drop_odd BEFORE UPDATE ON crm.bookings
                FOR EACH ROW EXECUTE FUNCTION crm.drop_odd()",
        )
    });
}

#[test]
fn a_trigger_raising_lock_not_available_for_one_booking() {
    check(&Case {
        odd: Some(Odd {
            fate: Fate::Quarantined {
                reason: "database",
                sqlstate: Some("55P03"),
            },
            first_cycle_fails: true,
        }),
        ..Case::new(
            "a BEFORE UPDATE trigger raising 55P03 for one booking, a class the job retries",
            "{refuse}
              CREATE TRIGGER refuse_odd BEFORE UPDATE ON crm.bookings
                FOR EACH ROW EXECUTE FUNCTION crm.refuse_odd('55P03')",
        )
    });
}

#[test]
fn an_audit_rule_on_the_table() {
    check(&Case {
        refused: Some((78, "replace the rule by a trigger")),
        ..Case::new(
            "a rule DO ALSO logging every update into a table of the CRM's",
            "CREATE TABLE public.booking_changes (id uuid, at timestamptz);
              CREATE RULE log_changes AS ON UPDATE TO crm.bookings
                DO ALSO INSERT INTO public.booking_changes VALUES (NEW.id, now())",
        )
    });
}

#[test]
fn a_conditional_instead_rule_on_the_table() {
    check(&Case {
        refused: Some((78, "replace the rule by a trigger")),
        ..Case::new(
            "a rule DO INSTEAD NOTHING for updates of one booking",
            "CREATE RULE keep_one AS ON UPDATE TO crm.bookings
                WHERE OLD.status = 'Booked' AND OLD.booking_expires_at IS NULL
                DO INSTEAD NOTHING",
        )
    });
}
