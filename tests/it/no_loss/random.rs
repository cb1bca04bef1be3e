//! The seeded workload of [`super::random_writers_never_lose_an_event`], on a server of
//! its own (restarted under it): SQL writers that commit, hold, roll back and prepare
//! transactions of one to three rows, the job's own, another producer's (published by
//! the relay too) and a third type (never), each taking its xid before its first row or
//! not; `run-once` cycles on overdue bookings, two at a time now and then; the relay
//! following for a few seconds, SIGKILLed at a random moment, or run once, or run to
//! purge with its clock moved two hours on (never back) and a retention of one hour;
//! and now and then the sequence's CACHE altered, the inserts' delay changed, the
//! server restarted. The legacy marks are on or off by the seed (or
//! `NO_LOSS_LEGACY_MARKS`). Then the writers stop, every prepared transaction left is
//! committed, the relay drains, and every committed own row must be on the topic.

use crate::common;
use crate::postgres;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Background, OwnPostgres, Run, TestDb};
use postgres::{Client, NoTls};

use super::world::*;

use crate::common::rng::Rng;

/// Uniform seconds in `[from, to)`, to the millisecond.
fn seconds(rng: &mut Rng, from: f64, to: f64) -> f64 {
    from + (to - from) * (rng.below(1000) as f64 / 1000.0)
}

const WRITERS: u64 = 5;
/// At most this many PostgreSQL restarts per run.
const RESTARTS: u32 = 2;

/// What the actors did, for the line printed at the end.
#[derive(Default)]
struct Tally {
    commits: AtomicU64,
    rollbacks: AtomicU64,
    prepared: AtomicU64,
    reconnects: AtomicU64,
    cycles: AtomicU64,
    follows: AtomicU64,
    kills: AtomicU64,
    runs: AtomicU64,
    purge_runs: AtomicU64,
    caches: AtomicU64,
    restarts: AtomicU64,
}

fn add(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// What every actor shares.
struct Shared<'a> {
    w: &'a World,
    stop: AtomicBool,
    /// How far the relay's clock is ahead of the real one, in hours: it only grows.
    hours: AtomicU32,
    tally: Tally,
    /// Exits no actor should see (the failure names them).
    unexpected: Mutex<Vec<String>>,
}

impl Shared<'_> {
    fn hours(&self) -> u32 {
        self.hours.load(Ordering::SeqCst)
    }

    fn unexpected(&self, what: &str, run: &Run) {
        let tail: Vec<&str> = run.stderr.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        self.unexpected.lock().unwrap().push(format!(
            "{what} exited {}; its stderr's last lines:\n{}",
            run.code,
            tail.join("\n")
        ));
    }
}

pub(super) fn run() {
    let seed = match std::env::var("NO_LOSS_SEED") {
        Ok(s) => s
            .parse::<u64>()
            .unwrap_or_else(|_| panic!("NO_LOSS_SEED={s}: an unsigned integer")),
        Err(_) => uuid::Uuid::new_v4().as_u64_pair().0,
    };
    let seconds: u64 = std::env::var("NO_LOSS_SECONDS")
        .ok()
        .map(|s| s.parse().expect("NO_LOSS_SECONDS: a number of seconds"))
        .unwrap_or(45);
    let replay = format!(
        "seed {seed} (replay: NO_LOSS_SEED={seed} cargo test --test it \
         no_loss::random_writers_never_lose_an_event)"
    );
    eprintln!("no_loss: {replay}");
    let outcome = catch_unwind(AssertUnwindSafe(|| workload(seed, seconds)));
    if let Err(e) = outcome {
        let message = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default();
        panic!("{message}\n{replay}");
    }
}

fn workload(seed: u64, seconds: u64) {
    let mut rng = Rng::of(seed, 0);
    let legacy = match std::env::var("NO_LOSS_LEGACY_MARKS") {
        Ok(_) => legacy_marks(),
        Err(_) if rng.one_in(2) => "on",
        Err(_) => "off",
    };
    eprintln!("no_loss: legacy marks {legacy}, writers writing for {seconds} s");
    let pg = OwnPostgres::start();
    let w = World::on(TestDb::new_on(&pg.url), legacy, BOTH);
    let shared = Shared {
        w: &w,
        stop: AtomicBool::new(false),
        hours: AtomicU32::new(0),
        tally: Tally::default(),
        unexpected: Mutex::new(Vec::new()),
    };
    let started = Instant::now();
    std::thread::scope(|s| {
        let shared = &shared;
        // However the chaos below ends (a panic too), the actors stop: the scope waits
        // for them.
        let _stop = StopOnDrop(&shared.stop);
        for n in 1..=WRITERS {
            let rng = Rng::of(seed, n);
            s.spawn(move || writer(shared, n, rng));
        }
        let cycles_rng = Rng::of(seed, WRITERS + 1);
        s.spawn(move || cycles(shared, cycles_rng));
        let relays_rng = Rng::of(seed, WRITERS + 2);
        s.spawn(move || relays(shared, relays_rng));
        chaos(shared, &pg, &mut rng, Duration::from_secs(seconds));
    });
    let wrote_for = started.elapsed();

    // Every prepared transaction the writers left (none, unless one lost its session
    // and gave up) committed, then the drain, the clock one more hour on.
    let mut c = w.client();
    let left: Vec<String> = c
        .query(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for gid in &left {
        c.batch_execute(&format!("COMMIT PREPARED '{gid}'"))
            .unwrap();
    }
    shared.hours.fetch_add(1, Ordering::SeqCst);
    let got = w.drain(shared.hours());
    let t = &shared.tally;
    let counts: Vec<(String, i64)> = c
        .query(
            "SELECT type, count(*) FROM noloss.written GROUP BY type ORDER BY type",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let deleted = common::count(&mut c, "SELECT count(*) FROM noloss.deleted");
    let summary = format!(
        "legacy marks {legacy}; {:.0} s of writing; rows committed {counts:?}, {deleted} \
         purged; transactions committed {}, rolled back {}, prepared {} ({} left to the \
         end); reconnects {}; cycles {}; relays following {} (killed {}), runs {}, purge \
         runs {} (clock +{} h at the end); caches altered {}; restarts {}",
        wrote_for.as_secs_f64(),
        t.commits.load(Ordering::Relaxed),
        t.rollbacks.load(Ordering::Relaxed),
        t.prepared.load(Ordering::Relaxed),
        left.len(),
        t.reconnects.load(Ordering::Relaxed),
        t.cycles.load(Ordering::Relaxed),
        t.follows.load(Ordering::Relaxed),
        t.kills.load(Ordering::Relaxed),
        t.runs.load(Ordering::Relaxed),
        t.purge_runs.load(Ordering::Relaxed),
        shared.hours.load(Ordering::SeqCst),
        t.caches.load(Ordering::Relaxed),
        t.restarts.load(Ordering::Relaxed),
    );
    eprintln!("no_loss: {summary}");
    // (The failure message gets the seed's line from `run`.)
    w.assert_none_lost(&got, &summary);
    let unexpected = shared.unexpected.lock().unwrap();
    assert!(
        unexpected.is_empty(),
        "{} unexpected exits:\n{}",
        unexpected.len(),
        unexpected.join("\n\n")
    );
}

/// Sets its flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// An error the workload expects from a server restarted under it: the session ended
/// or could not be made, or the server is shutting down or starting up.
fn transient(e: &postgres::Error) -> bool {
    e.is_closed()
        || e.code()
            .is_none_or(|c| c.code().starts_with("57") || c.code().starts_with("08"))
}

/// A session of its own, waiting for the server while it restarts.
fn connect(shared: &Shared<'_>) -> Client {
    common::wait_for(
        Duration::from_secs(120),
        "the server to take connections",
        || Client::connect(&shared.w.db.url, NoTls).ok(),
        String::new,
    )
}

/// A prepared transaction to finish: its gid, and whether it commits.
struct Pending {
    gid: String,
    commit: bool,
}

/// One SQL writer: transactions of one to three rows until told to stop, then its
/// prepared transactions finished.
fn writer(shared: &Shared<'_>, n: u64, mut rng: Rng) {
    let mut c = connect(shared);
    let mut pending: Vec<Pending> = Vec::new();
    let mut serial = 0u64;
    while !shared.stop.load(Ordering::SeqCst) {
        serial += 1;
        let gid = format!("noloss-{n}-{serial}");
        let outcome = finish(&mut c, &mut pending)
            .and_then(|()| transaction(shared, &mut c, &mut rng, n, gid, &mut pending));
        match outcome {
            Ok(true) => {}
            Ok(false) => {
                // A new session: a new block of the sequence's cache.
                add(&shared.tally.reconnects);
                c = connect(shared);
            }
            Err(e) if transient(&e) => {
                add(&shared.tally.reconnects);
                c = connect(shared);
            }
            Err(e) => panic!("writer {n}: {e}"),
        }
    }
    common::wait_until(
        Duration::from_secs(120),
        "the writer's prepared transactions to finish",
        || match finish(&mut c, &mut pending) {
            Ok(()) => true,
            Err(e) if transient(&e) => {
                c = connect(shared);
                false
            }
            Err(e) => panic!("writer {n}: {e}"),
        },
    );
}

/// COMMIT or ROLLBACK PREPARED each of `pending`; one that does not exist (never
/// prepared: its session ended first) is done.
fn finish(c: &mut Client, pending: &mut Vec<Pending>) -> Result<(), postgres::Error> {
    while let Some(p) = pending.last() {
        let verb = if p.commit { "COMMIT" } else { "ROLLBACK" };
        match c.batch_execute(&format!("{verb} PREPARED '{}'", p.gid)) {
            Ok(()) => {}
            Err(e) if e.code() == Some(&postgres::error::SqlState::UNDEFINED_OBJECT) => {}
            Err(e) => return Err(e),
        }
        pending.pop();
    }
    Ok(())
}

/// One transaction of the writer; `Ok(false)`: it asks for a new session instead.
fn transaction(
    shared: &Shared<'_>,
    c: &mut Client,
    rng: &mut Rng,
    n: u64,
    gid: String,
    pending: &mut Vec<Pending>,
) -> Result<bool, postgres::Error> {
    let kind = rng.below(100);
    if kind >= 92 {
        return Ok(false);
    }
    let (long, rollback, prepared) = (
        (40..60).contains(&kind),
        (60..70).contains(&kind),
        (70..80).contains(&kind),
    );
    c.batch_execute("BEGIN")?;
    // The xid first, or the first row's insert takes it (its seq drawn before).
    if rng.one_in(2) {
        c.batch_execute("SELECT pg_current_xact_id()")?;
    }
    for _ in 0..1 + rng.below(3) {
        // A prepared transaction may not hold the job's own rows: they notify.
        let r#type = if prepared {
            rng.pick(&[THEIRS, THEIRS, FOREIGN])
        } else {
            rng.pick(&[OWN, OWN, OWN, THEIRS, THEIRS, FOREIGN])
        };
        c.execute(
            "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload)
             VALUES (gen_random_uuid(), 'Booking', $1, $2, 'routed by noloss', '{}')",
            &[&format!("writer-{n}"), &r#type],
        )?;
    }
    if long || rollback {
        c.execute("SELECT pg_sleep($1)", &[&seconds(rng, 0.2, 5.0)])?;
    }
    if rollback {
        c.batch_execute("ROLLBACK")?;
        add(&shared.tally.rollbacks);
    } else if prepared {
        pending.push(Pending {
            gid: gid.clone(),
            commit: !rng.one_in(5),
        });
        c.batch_execute(&format!("PREPARE TRANSACTION '{gid}'"))?;
        add(&shared.tally.prepared);
        // Held, by no session, for a while; then finished.
        c.execute("SELECT pg_sleep($1)", &[&seconds(rng, 0.2, 4.0)])?;
        finish(c, pending)?;
    } else {
        c.batch_execute("COMMIT")?;
        add(&shared.tally.commits);
    }
    Ok(true)
}

/// `run-once` cycles on bookings made overdue a few at a time, one or two at once.
fn cycles(shared: &Shared<'_>, mut rng: Rng) {
    let mut c = connect(shared);
    while !shared.stop.load(Ordering::SeqCst) {
        let n = 5 + rng.below(25) as i64;
        let seeded = c.execute(
            "INSERT INTO crm.bookings (id, tenant_id, deal_id, property_object_id, status,
                 reserve_expires_at, booking_expires_at, expired_at, created_at, updated_at,
                 version)
             SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(),
                    gen_random_uuid(), CASE WHEN i % 2 = 0 THEN 'Reserved' ELSE 'Booked' END,
                    now() - interval '1 day' * (i % 2) - interval '1 minute',
                    CASE WHEN i % 2 = 1 THEN now() - interval '1 minute' END,
                    NULL, now() - interval '2 days', now() - interval '2 days', 1
               FROM generate_series(1, $1::int8) i",
            &[&n],
        );
        if let Err(e) = seeded {
            assert!(transient(&e), "seeding bookings: {e}");
            c = connect(shared);
            continue;
        }
        let side_by_side = if rng.one_in(3) { 2 } else { 1 };
        let children: Vec<_> = (0..side_by_side)
            .map(|_| {
                let batch = (2 + rng.below(9)).to_string();
                let batches = (1 + rng.below(4)).to_string();
                shared
                    .w
                    .db
                    .command(&[
                        "run-once",
                        "--batch-size",
                        &batch,
                        "--max-batches",
                        &batches,
                    ])
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("spawn run-once")
            })
            .collect();
        for child in children {
            let run = Run::of(child.wait_with_output().unwrap());
            add(&shared.tally.cycles);
            // 69 and 75: the server restarted under it.
            if ![0, 69, 75].contains(&run.code) {
                shared.unexpected("run-once", &run);
            }
        }
        // The cycles' pacing.
        std::thread::sleep(Duration::from_millis(rng.below(1500)));
    }
}

/// The relay, one step after another until told to stop: the binary following for a
/// few seconds (SIGKILLed at a random moment of it, sometimes), or run once; or, in
/// process, a purge run with its clock two hours further on than the last one's and a
/// retention of one hour (see [`World::relay`]).
fn relays(shared: &Shared<'_>, mut rng: Rng) {
    let w = shared.w;
    while !shared.stop.load(Ordering::SeqCst) {
        match rng.below(4) {
            0 | 1 => {
                add(&shared.tally.follows);
                let window = format!("{}s", 2 + rng.below(7));
                let mut follower = Background::start(w.relay_command(&["--follow", &window]));
                if rng.one_in(2) {
                    // A SIGKILL at a random moment of its window.
                    std::thread::sleep(Duration::from_millis(rng.below(5000)));
                    let _ = follower.child.kill();
                    add(&shared.tally.kills);
                }
                let run = follower.wait();
                // 69 and 75: the server restarted under it; 137: killed.
                if ![0, 69, 75, 137].contains(&run.code) {
                    shared.unexpected("relay-outbox --follow", &run);
                }
            }
            2 => {
                add(&shared.tally.runs);
                let run = Run::of(w.relay_command(&[]).output().unwrap());
                if ![0, 69, 75].contains(&run.code) {
                    shared.unexpected("relay-outbox", &run);
                }
            }
            _ => {
                add(&shared.tally.purge_runs);
                let hours = shared.hours.fetch_add(2, Ordering::SeqCst) + 2;
                if let Err((code, e)) = w.relay_in_process(hours, &["--retention", "1h"])
                    && ![69, 75].contains(&code)
                {
                    let run = Run {
                        code: i32::from(code),
                        stdout: String::new(),
                        stderr: e,
                    };
                    shared.unexpected(&format!("relay-outbox, its clock {hours} h on"), &run);
                }
            }
        }
    }
}

/// For `length`, every second to four: the sequence's CACHE altered (if its lock comes
/// within 3 s: every transaction that drew from it holds it to its end), the inserts' delay changed, or (at most [`RESTARTS`] times) the
/// server restarted.
fn chaos(shared: &Shared<'_>, pg: &OwnPostgres, rng: &mut Rng, length: Duration) {
    let started = Instant::now();
    let mut c = connect(shared);
    let mut restarts = 0;
    while started.elapsed() < length {
        // The chaos's pacing.
        std::thread::sleep(Duration::from_millis(1000 + rng.below(3000)));
        let done = match rng.below(10) {
            0..=4 => {
                let cache = rng.pick(&[1, 1, 5, 20, 50]);
                let altered = c
                    .batch_execute("SET lock_timeout = '3s'")
                    .and_then(|()| set_cache(&mut c, cache));
                match altered {
                    Ok(()) => {
                        add(&shared.tally.caches);
                        Ok(())
                    }
                    Err(e) if e.code() == Some(&postgres::error::SqlState::LOCK_NOT_AVAILABLE) => {
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            5..=8 => {
                let delay = rng.pick(&[0.0, 0.0, 0.02, 0.1, 0.3]);
                c.execute("UPDATE noloss.knobs SET max_delay = $1", &[&delay])
                    .map(|_| ())
            }
            _ if restarts < RESTARTS => {
                restarts += 1;
                pg.restart();
                add(&shared.tally.restarts);
                Ok(())
            }
            _ => Ok(()),
        };
        if let Err(e) = done {
            assert!(transient(&e), "chaos: {e}");
            c = connect(shared);
        }
    }
}
