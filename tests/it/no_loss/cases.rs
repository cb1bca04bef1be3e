//! The deterministic interleavings, each the shape of a loss found on a real server:
//! a session's cached `seq` drawn after another's higher one was relayed, a
//! transaction open at the relay's first start, a `seq` drawn before the xid, a
//! prepared transaction (across a PostgreSQL restart), a transaction open past the
//! retention while purges run; and the job's own cycles with a CACHE of 50 and slow
//! inserts beside a following relay.

use crate::common;

use std::collections::HashSet;
use std::sync::mpsc;
use std::time::Duration;

use common::{OwnPostgres, Seed, TestDb, seed_many, send_signal};

use super::world::*;

/// Asserts that `row` is on the topic and was not deleted before.
fn assert_sent(w: &World, got: &HashSet<String>, row: &Row, what: &str) {
    let deleted: bool = w
        .client()
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM noloss.deleted WHERE id = $1::text::uuid)",
            &[&row.id],
        )
        .unwrap()
        .get(0);
    assert!(
        got.contains(&row.id),
        "{what} (seq {}, ce_id {}) is not on the topic{}",
        row.seq,
        row.id,
        if deleted { ": purged unsent" } else { "" }
    );
}

/// Session 1 commits a (seq 1, its cache holding 2..50), session 2 commits c (51), a
/// relay run sends both; session 1 then takes an xid and inserts b with seq 2 from its
/// cache, a relay run goes by while b is open (every older transaction ended), b
/// commits, and a relay under a clock two hours on purges with a retention of one
/// hour: b must be sent, and not purged unsent.
fn three_rows_of_a_cache_of_50(legacy: &'static str) {
    let w = World::new(legacy, OWN);
    let mut admin = w.client();
    set_cache(&mut admin, 50).unwrap();
    let (mut one, mut two) = (w.client(), w.client());
    let a = insert(&mut one, OWN, "a");
    let c = insert(&mut two, OWN, "c");
    assert_eq!((a.seq, c.seq), (1, 51), "each session took a block of 50");
    assert_eq!(w.relay(0, &[])["Published"], 2);

    let mut open = one.transaction().unwrap();
    let xid = take_xid(&mut open);
    let b = insert(&mut open, OWN, "b");
    assert_eq!(b.seq, 2, "b from session 1's cache");
    wait_older_transactions_ended(&mut admin, &xid);
    w.relay(0, &[]);
    open.commit().unwrap();

    let purge = w.relay(2, &["--retention", "1h"]);
    let got = w.drain(2);
    let context = format!("three rows of a CACHE 50, legacy marks {legacy} (purge run: {purge})");
    assert_sent(&w, &got, &b, "b");
    w.assert_none_lost(&got, &context);
}

#[test]
fn a_cached_seq_drawn_below_one_relayed_is_sent_and_never_purged_unsent() {
    three_rows_of_a_cache_of_50(legacy_marks());
}

#[test]
fn a_cached_seq_drawn_below_one_relayed_is_sent_with_the_legacy_marks_too() {
    three_rows_of_a_cache_of_50("on");
}

/// A transaction holds seq 1 open while seq 2 commits, and the relay starts for the
/// first time (its watermark made then); row 1 commits after: it must be sent.
fn open_at_the_first_start(legacy: &'static str) {
    let w = World::new(legacy, OWN);
    let (mut one, mut two) = (w.client(), w.client());
    let mut open = one.transaction().unwrap();
    let first = insert(&mut open, OWN, "first");
    let second = insert(&mut two, OWN, "second");
    assert_eq!((first.seq, second.seq), (1, 2));
    assert_eq!(w.relay(0, &[])["Published"], 1);
    open.commit().unwrap();
    let got = w.drain(0);
    assert_sent(&w, &got, &first, "the row open at the first start");
    w.assert_none_lost(
        &got,
        &format!("a row open at the first start, legacy marks {legacy}"),
    );
}

#[test]
fn a_row_open_at_the_relays_first_start_is_sent_once_it_commits() {
    open_at_the_first_start(legacy_marks());
}

#[test]
fn a_row_open_at_the_relays_first_start_is_sent_with_the_legacy_marks_too() {
    open_at_the_first_start("on");
}

/// Bookings overdue in both phases expired by `run-once` cycles, several side by side,
/// each session drawing `seq` from a block of 50, every insert slowed by up to 300 ms
/// (after its `seq` was drawn), while a relay follows; then drained.
#[test]
fn cycles_with_a_cache_of_50_and_slow_inserts_beside_a_following_relay_lose_nothing() {
    const BOOKINGS: usize = 240;
    let w = World::new(legacy_marks(), OWN);
    let mut c = w.client();
    set_cache(&mut c, 50).unwrap();
    set_max_delay(&mut c, 0.3);
    seed_many(&mut c, BOOKINGS, |i| {
        if i % 2 == 0 {
            Seed::reserved(-60 - i as i64)
        } else {
            Seed::booked(-60 - i as i64)
        }
    });
    let follower = w.follow();
    // Three loops of cycles side by side, each until a cycle finds nothing: small
    // batches, so each session's block of 50 spans several transactions.
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                loop {
                    let cycle = w.db.run_once(&["--batch-size", "8", "--max-batches", "3"]);
                    if cycle.reserve + cycle.booking == 0 {
                        break;
                    }
                }
            });
        }
    });
    let expired = common::count(
        &mut c,
        "SELECT count(*) FROM crm.bookings WHERE status IN ('ReserveExpired', 'BookingExpired')",
    );
    assert_eq!(expired, BOOKINGS as i64, "every booking expired");
    assert_eq!(w.committed_own().len(), BOOKINGS, "one event each");
    send_signal(&follower.child, "TERM");
    let run = follower.wait();
    assert_eq!(run.code, 143, "{}", run.stderr);
    let got = w.drain(0);
    w.assert_none_lost(
        &got,
        &format!("cycles, CACHE 50, slow inserts, legacy marks {}", w.legacy),
    );
}

/// Another producer's writer whose first write is its outbox insert draws its `seq`
/// (one that does not write the sequence to the WAL: such a draw takes an xid) and
/// waits (no xid yet) while a higher row commits and is relayed; it then writes
/// the row (its xid newer than the relay's snapshot) and stays open across a relay
/// run. Then many such writers at once, their inserts slowed, beside a following
/// relay (woken by the job's own rows committing beside them).
#[test]
fn another_producers_rows_whose_seq_came_before_the_xid_are_all_sent() {
    // A server of its own: the waits below for the server's older transactions to end
    // then wait for this test's alone, not for whatever the suite's other tests hold
    // open on a loaded host.
    let pg = OwnPostgres::start();
    let w = World::on(TestDb::new_on(&pg.url), legacy_marks(), BOTH);
    let mut c = w.client();
    assert_eq!(w.relay(0, &[])["Published"], 0);

    // A row first, so the gated writer's draw below is not the one that writes the
    // sequence's next 32 values ahead to the WAL (that draw takes an xid).
    insert(&mut c, OWN, "first");
    assert_eq!(w.relay(0, &[])["Published"], 1);
    // The gate: the writer's insert waits in the trigger, its seq drawn. Made inside
    // the scope, so a failure ends the gate's session and the channels, and the
    // writer with them, before the scope waits for it.
    let gated = std::thread::scope(|s| {
        let mut gate = w.client();
        gate.execute("SELECT pg_advisory_lock(4242)", &[]).unwrap();
        let (to_main, from_writer) = mpsc::channel::<(Row, String)>();
        let (to_writer, from_main) = mpsc::channel::<()>();
        let w = &w;
        let writer = s.spawn(move || {
            let mut own = w.client();
            let mut tx = own.transaction().unwrap();
            let row = insert(&mut tx, THEIRS, "gate:4242");
            let xid = take_xid(&mut tx);
            to_main.send((row.clone(), xid)).unwrap();
            from_main.recv().unwrap();
            tx.commit().unwrap();
            row
        });
        common::wait_until(
            Duration::from_secs(60),
            "the gated writer to wait in the trigger",
            || {
                common::count(
                    &mut c,
                    "SELECT count(*) FROM pg_locks
                      WHERE locktype = 'advisory' AND objid = 4242 AND NOT granted
                        AND database = (SELECT oid FROM pg_database
                                         WHERE datname = current_database())",
                ) == 1
            },
        );
        let xid: Option<String> = c
            .query_one(
                "SELECT a.backend_xid::text FROM pg_locks l JOIN pg_stat_activity a USING (pid)
                  WHERE l.locktype = 'advisory' AND l.objid = 4242 AND NOT l.granted
                    AND a.datname = current_database()",
                &[],
            )
            .unwrap()
            .get(0);
        // Its seq was drawn first (the identity column comes before inserted_xid), then
        // inserted_xid's default took the transaction's id, in the same insert, before
        // the trigger: the relay's sweep reads the row by that id, whatever the order.
        assert!(
            xid.is_some(),
            "inserted_xid's default took the gated writer's xid"
        );
        // (Before migration 17 the writer had no xid here, and the test waited for the
        // server's older transactions to end, so that the old floor's horizon passed
        // its row. Now the writer's own xid holds any such horizon: nothing to wait
        // for, and the sweep reads its row whenever it commits.)
        let higher = insert(&mut c, OWN, "higher");
        assert_eq!(w.relay(0, &[])["Published"], 1);
        gate.execute("SELECT pg_advisory_unlock(4242)", &[])
            .unwrap();
        let (row, xid) = from_writer.recv().unwrap();
        assert!(row.seq < higher.seq, "{row:?} drawn before {higher:?}");
        assert!(!xid.is_empty());
        // Its transaction still open: nothing of it is sent.
        assert_eq!(w.relay(0, &[])["Published"], 0);
        to_writer.send(()).unwrap();
        writer.join().unwrap()
    });

    // Many at once.
    set_max_delay(&mut c, 0.3);
    let follower = w.follow();
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                let mut own = w.client();
                for _ in 0..10 {
                    let mut tx = own.transaction().unwrap();
                    insert(&mut tx, THEIRS, "theirs");
                    tx.execute("SELECT pg_sleep(random() * 3)", &[]).unwrap();
                    tx.commit().unwrap();
                }
            });
        }
        for _ in 0..2 {
            s.spawn(|| {
                let mut own = w.client();
                for _ in 0..40 {
                    insert(&mut own, OWN, "ours");
                    own.execute("SELECT pg_sleep(0.2)", &[]).unwrap();
                }
            });
        }
    });
    send_signal(&follower.child, "TERM");
    let run = follower.wait();
    assert_eq!(run.code, 143, "{}", run.stderr);
    let got = w.drain(0);
    assert_sent(&w, &got, &gated, "the gated writer's row");
    assert_eq!(w.committed_own().len(), 3 + 80 + 80);
    w.assert_none_lost(&got, &format!("seq before xid, legacy marks {}", w.legacy));
}

/// A prepared transaction (another producer's two-phase commit) holds a row whose
/// `seq` came from its session's cached block, below a row already relayed, across
/// several relay runs and a PostgreSQL restart; COMMIT PREPARED: the row is sent.
/// (Prepared transactions cannot hold the job's own rows: their insert notifies.)
#[test]
fn a_prepared_transactions_row_is_sent_once_committed_after_a_restart() {
    let pg = OwnPostgres::start();
    let w = World::on(TestDb::new_on(&pg.url), legacy_marks(), BOTH);
    let mut c = w.client();
    set_cache(&mut c, 50).unwrap();
    let mut two_phase = w.client();
    let a = insert(&mut two_phase, THEIRS, "a");
    let higher = insert(&mut c, OWN, "higher");
    assert_eq!((a.seq, higher.seq), (1, 51));
    assert_eq!(w.relay(0, &[])["Published"], 2);

    two_phase.batch_execute("BEGIN").unwrap();
    let xid = take_xid(&mut two_phase);
    let held = insert(&mut two_phase, THEIRS, "prepared");
    assert_eq!(held.seq, 2, "from the two-phase session's cache");
    two_phase
        .batch_execute("PREPARE TRANSACTION 'noloss-held'")
        .unwrap();
    wait_older_transactions_ended(&mut c, &xid);
    insert(&mut c, OWN, "beside");
    w.relay(0, &[]);
    w.relay(0, &[]);
    drop((c, two_phase));
    pg.restart();
    let mut c = w.client();
    insert(&mut c, OWN, "after the restart");
    w.relay(0, &[]);
    c.batch_execute("COMMIT PREPARED 'noloss-held'").unwrap();
    let got = w.drain(0);
    assert_sent(&w, &got, &held, "the prepared transaction's row");
    w.assert_none_lost(
        &got,
        &format!("a prepared transaction, legacy marks {}", w.legacy),
    );
}

/// A transaction holds an own row open while the relay's clock moves on past the
/// retention, run after run, each purging what it may (rows delivered before and
/// after the transaction began); it commits, a purge runs first: the row is sent, and
/// nothing was purged unsent.
#[test]
fn a_transaction_open_longer_than_the_retention_loses_nothing_to_the_purges() {
    let w = World::new(legacy_marks(), OWN);
    let mut c = w.client();
    for _ in 0..3 {
        insert(&mut c, OWN, "before");
    }
    assert_eq!(w.relay(0, &[])["Published"], 3);
    let mut long = w.client();
    let mut open = long.transaction().unwrap();
    take_xid(&mut open);
    let held = insert(&mut open, OWN, "long");
    for hours in [2, 4, 6] {
        insert(&mut c, OWN, "while open");
        insert(&mut c, OWN, "while open");
        w.relay(hours, &["--retention", "1h"]);
    }
    open.commit().unwrap();
    let purge = w.relay(8, &["--retention", "1h"]);
    let got = w.drain(8);
    assert_sent(&w, &got, &held, "the long transaction's row");
    w.assert_none_lost(
        &got,
        &format!(
            "a transaction open past the retention, legacy marks {} (purge run: {purge})",
            w.legacy
        ),
    );
    let deleted = common::count(&mut c, "SELECT count(*) FROM noloss.deleted");
    assert!(deleted > 0, "the purges ran meanwhile: none deleted a row");
}
