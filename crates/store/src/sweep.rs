//! The relay's sweep (migration 17): the rows committed since the swept snapshot,
//! found by the transaction that inserted them (`crm.outbox.inserted_xid`), and at a
//! run's start the seq window below `high`, made exceptions; the floor's move; the
//! sweep's state as `backlog` reads it, and the one assumption it keeps of the writers.
//! docs/design.md ("The commit sweep") gives the argument.

use crate::error::{Context, Result};
use chrono::{DateTime, Utc};
use postgres::GenericClient;

use super::relay_state::{Watermark, relay_state_usable, types_key};
use crate::domain::OutboxTypes;
use crate::{Conn, Session};

/// The migration the relay's sweep needs (each outbox row's inserting transaction, the
/// swept snapshot), named when it is missing.
pub const SWEEP_MIGRATION: &str = "sql/017_outbox_inserted_xid.sql";

/// Whether `crm.outbox.inserted_xid` still defaults to the inserting transaction's id
/// (migration 17): the sweep's one assumption of the writers. A DBA's `DROP DEFAULT`,
/// or another expression, hides the late commits of the rows written since from the
/// commit window (the seq window still finds them above the floor).
pub fn inserted_xid_defaulted(client: &mut impl Conn) -> Result<bool> {
    Ok(client
        .pg()
        .query_one(
            "SELECT coalesce((SELECT pg_get_expr(d.adbin, d.adrelid) = 'pg_current_xact_id()'
                                FROM pg_attribute a
                                JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                               WHERE a.attrelid = 'crm.outbox'::regclass
                                 AND a.attname = 'inserted_xid' AND NOT a.attisdropped), false)
                    AS defaulted",
            &[],
        )
        .context("cannot read crm.outbox.inserted_xid's default")?
        .get("defaulted"))
}

/// The relay's sweep as `backlog` reads it: where the floor is, when the relay last
/// swept (a floor that does not move is a relay that does not sweep), and the
/// transactions in progress at the swept snapshot (any of them may still commit rows
/// below the floor, which the next sweep then finds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SweepState {
    pub floor: i64,
    pub high: i64,
    pub swept_at: Option<crate::domain::Timestamp>,
    pub in_progress: u64,
}

/// The sweep of `types` (`None` before migration 17, or before the relay's first run).
pub(crate) fn sweep_state(
    client: &mut impl Conn,
    types: &OutboxTypes,
) -> Result<Option<SweepState>> {
    let client = client.pg();
    if !relay_state_usable(client, false)? {
        return Ok(None);
    }
    let swept_column = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_attribute
                             WHERE attrelid = 'crm.booking_expiration_relay_state'::regclass
                               AND attname = 'swept' AND NOT attisdropped)",
            &[],
        )
        .context("cannot look up the relay's sweep")?
        .get::<_, bool>(0);
    if !swept_column {
        return Ok(None);
    }
    let row = client
        .query_opt(
            "SELECT floor, high, swept_at,
                    (SELECT count(*) FROM pg_snapshot_xip(swept)) AS in_progress
               FROM crm.booking_expiration_relay_state WHERE types = $1 AND swept IS NOT NULL",
            &[&types_key(types)],
        )
        .context("cannot read the relay's sweep")?;
    Ok(row.map(|r| SweepState {
        floor: r.get("floor"),
        high: r.get("high"),
        swept_at: crate::timestamp::get_opt(&r, "swept_at"),
        in_progress: r.get::<_, i64>("in_progress").max(0) as u64,
    }))
}

/// What a sweep did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GapCheck {
    pub watermark: Watermark,
    /// Rows found at or below `high` with neither a receipt nor an exception (committed
    /// after newer rows were relayed, or left unsettled by a run that ended between a
    /// batch's mark and its failures, or re-queued by the release before): now
    /// exceptions, due at once.
    pub late: u64,
    /// Of those, the rows below the floor the sweep started from: found by the
    /// transaction that inserted them, which committed after the rows above were
    /// settled (a sequence's cache, a `seq` drawn before the transaction's id, a
    /// prepared or long transaction).
    pub below_floor: u64,
    /// The transactions in progress at the swept snapshot: any of them may still
    /// commit outbox rows (at any `seq`), which the next sweeps find.
    pub in_progress: u64,
}

impl GapCheck {
    /// A sweep that read nothing and moved nothing.
    fn unmoved(floor: i64, high: i64) -> Self {
        GapCheck {
            watermark: Watermark { floor, high },
            late: 0,
            below_floor: 0,
            in_progress: 0,
        }
    }
}

/// Whether a sweep reads its seq window ([`sweep`], step 2), with the legacy marks off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqWindow {
    /// At a run's start: a run before may have ended between a batch's mark and its
    /// unsent rows' exceptions, leaving rows in (floor, high] unsettled.
    Read,
    /// Within a run and at its end: every batch marked so far had its exceptions
    /// written before this sweep began (the same session, in order), so the window
    /// holds nothing to find; its rows are not read again.
    Skip,
}

/// Where a sweep reads up to ([`sweep`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepTop {
    /// The sweep's own snapshot: only when no batch is fetched and not yet marked (at
    /// a run's start and end, and while a `--follow` run waits), so that the `high`
    /// the sweep reads is every fetch's, and any later fetch sees what it saw.
    Now,
    /// The snapshot of the fetch whose mark set `high`: while batches are in flight,
    /// the rows above `high` that snapshot saw are the next fetches'.
    LastMark,
}

/// The sweep, in one transaction of its own, on the state row locked first (a mark
/// waits for it, never the other way: no mark's `high` moves under it):
/// 1. the *commit window*: every own row inserted by a transaction that the top
///    snapshot ([`SweepTop`]) sees committed and the swept snapshot did not (in
///    progress there, or begun after), with `seq <= high` and neither a receipt of its
///    own (`seq` and `id`: a `seq` given again after a sequence's restart is another
///    row) nor an exception nor a mark of the release before, becomes an exception
///    ('late'), due at once. `ix_outbox_inserted_xid` reads the rows of those
///    transactions only: the ones in progress at the swept snapshot (few) and the ids
///    given after it;
/// 2. the *seq window* ([`SeqWindow::Read`], a run's first sweep; always with the
///    legacy marks, and for a watermark never swept): every such row in (floor, high]
///    the sweep's snapshot sees, by
///    the two `seq` ranges (the outbox's, the receipts') joined without a loop (nested
///    loops are off for this transaction): a batch's mark (its receipts and `high`)
///    and its unsent rows' exceptions are two transactions, and a run that ends between
///    them leaves such a row; so do the rows inserted before migration 17, which have
///    no transaction id. With `legacy_marks` the rows pending by the columns at or
///    below `high` are taken instead (the release before's own re-queues included),
///    and its failed rows become failed exceptions ('legacy');
/// 3. the swept snapshot becomes the top, and the floor `high`: every own row of a
///    transaction committed in the new swept snapshot, at or below the floor, is
///    settled, and every one above it is the fetch's.
///
/// Whatever order PostgreSQL hands out `seq` in and commits in, a committed row is
/// either above `high` (the fetch's), or committed within some sweep's window, or was
/// seen by the seq window: docs/design.md ("The commit sweep") gives the argument, and
/// `crates/model` checks it. A long transaction elsewhere holds back nothing: it stays
/// in the swept snapshot's list until it ends, and its rows are read then.
pub fn sweep(
    client: &mut Session,
    types: &OutboxTypes,
    legacy_marks: bool,
    now: DateTime<Utc>,
    top: SweepTop,
    seq_window: SeqWindow,
) -> Result<GapCheck> {
    let client = client.pg();
    let key = types_key(types);
    let mut tx = client
        .transaction()
        .context("cannot begin the relay's sweep")?;
    let state = tx
        .query_one(
            "SELECT floor, high, swept::text AS swept, high_snapshot::text AS high_snapshot
               FROM crm.booking_expiration_relay_state WHERE types = $1 FOR UPDATE",
            &[&key],
        )
        .context("cannot read the relay's watermark")?;
    let (floor, high): (i64, i64) = (state.get("floor"), state.get("high"));
    let swept: Option<String> = state.get("swept");
    let top = match top {
        SweepTop::Now => None,
        SweepTop::LastMark => match state.get::<_, Option<String>>("high_snapshot") {
            Some(snapshot) => Some(snapshot),
            // No mark since migration 17: nothing to sweep up to yet.
            None => {
                tx.commit()?;
                return Ok(GapCheck::unmoved(floor, high));
            }
        },
    };
    let bounds = tx
        .query_one(WINDOW_BOUNDS_SQL, &[&swept, &top])
        .context("cannot read the relay's commit window")?;
    if !bounds.get::<_, bool>("moved") {
        // The top is not past the swept snapshot (a mark older than the last sweep).
        tx.commit()?;
        return Ok(GapCheck::unmoved(floor, high));
    }
    let top: String = bounds.get("top");
    let in_progress = bounds.get::<_, i64>("in_progress") as u64;
    // The windows' rows and the receipts are joined by merge or hash, never by a loop.
    tx.batch_execute("SET LOCAL enable_nestloop = off")?;
    let (committed_late, below_floor) = match swept {
        // The watermark of the release before migration 17: the seq window alone, this
        // once; the transactions in progress now are the next sweeps'.
        None => (0, 0),
        Some(_) => {
            let window = tx
                .query_one(
                    COMMIT_WINDOW_SQL,
                    &[
                        &types.as_slice(),
                        &bounds.get::<_, Vec<String>>("in_progress_at_swept"),
                        &bounds.get::<_, String>("from"),
                        &bounds.get::<_, String>("upto"),
                        &top,
                        &high,
                        &floor,
                        &now,
                    ],
                )
                .context("cannot sweep the relay's commit window")?;
            (
                window.get::<_, i64>("late") as u64,
                window.get::<_, i64>("below_floor") as u64,
            )
        }
    };
    let by_seq = if legacy_marks {
        tx.execute(
            LEGACY_SWEEP_SQL,
            &[
                &types.as_slice(),
                &high,
                &now,
                &super::outbox::WAITING_FOR_TOPIC,
            ],
        )
        .context("cannot take over the outbox rows pending by their columns")?
    } else if seq_window == SeqWindow::Read || swept.is_none() {
        tx.execute(GAP_SQL, &[&types.as_slice(), &floor, &high, &now])
            .context("cannot check the relay's gap")?
    } else {
        0
    };
    tx.execute(
        "UPDATE crm.booking_expiration_relay_state
            SET floor = greatest(floor, $2), swept = $3::text::pg_snapshot, swept_at = $4,
                updated_at = $4
          WHERE types = $1",
        &[&key, &high, &top, &now],
    )
    .context("cannot move the relay's floor")?;
    tx.commit().context("cannot commit the relay's sweep")?;
    Ok(GapCheck {
        watermark: Watermark {
            floor: floor.max(high),
            high,
        },
        late: committed_late + by_seq,
        below_floor,
        in_progress,
    })
}

/// The commit window of [`sweep`] (`$1` the swept snapshot, none for the watermark of
/// the release before migration 17; `$2` the top, none for this statement's own
/// snapshot): the top as recorded, whether it sees every transaction the swept snapshot
/// saw committed (`moved`: false for an older mark's, and nothing is read then), the
/// transactions in progress at the swept snapshot, and the range of ids given after it
/// up to the top's.
const WINDOW_BOUNDS_SQL: &str = "\
SELECT top::text AS top,
       swept IS NULL
         OR (pg_snapshot_xmax(swept) <= pg_snapshot_xmax(top)
             AND NOT EXISTS (SELECT 1 FROM pg_snapshot_xip(top) x
                              WHERE x < pg_snapshot_xmax(swept)
                                AND pg_visible_in_snapshot(x, swept))) AS moved,
       coalesce(ARRAY(SELECT x::text FROM pg_snapshot_xip(swept) x), '{}') AS in_progress_at_swept,
       coalesce(pg_snapshot_xmax(swept), pg_snapshot_xmax(top))::text AS \"from\",
       pg_snapshot_xmax(top)::text AS upto,
       (SELECT count(*) FROM pg_snapshot_xip(top)) AS in_progress
  FROM (SELECT coalesce($2::text::pg_snapshot, pg_current_snapshot()) AS top,
               $1::text::pg_snapshot AS swept) t";

/// Step 1 of [`sweep`]: `$1` types; the window: `$2` the transactions in progress at
/// the swept snapshot, `$3`..`$4` the ids given after it up to the top's, `$5` the top;
/// `$6` high, `$7` floor, `$8` now. Read by `ix_outbox_inserted_xid` (an index scan
/// per bound, never the table), the receipts from the window's lowest `seq` up.
const COMMIT_WINDOW_SQL: &str = "\
WITH w AS MATERIALIZED (
    SELECT o.seq, o.id, o.aggregateid, o.topic, o.type
      FROM crm.outbox o
     WHERE (o.inserted_xid = ANY ($2::text[]::xid8[])
            OR (o.inserted_xid >= $3::text::xid8 AND o.inserted_xid < $4::text::xid8))
       AND pg_visible_in_snapshot(o.inserted_xid, $5::text::pg_snapshot)
       AND o.type = ANY($1::text[]) AND o.seq <= $6
       AND o.published_at IS NULL AND o.failed_at IS NULL),
r AS (
    SELECT seq, id FROM crm.booking_expiration_receipt
     WHERE seq >= (SELECT min(seq) FROM w) AND seq <= $6),
late AS (
    INSERT INTO crm.booking_expiration_exception
           (seq, id, key, topic, type, reason, attempts, failures, since)
    SELECT w.seq, w.id, w.aggregateid, w.topic, w.type, 'late', 0, 0, $8
      FROM w LEFT JOIN r ON r.seq = w.seq AND r.id = w.id
     WHERE r.seq IS NULL
       AND w.seq NOT IN (SELECT seq FROM crm.booking_expiration_exception)
    ON CONFLICT (seq) DO NOTHING
    RETURNING seq)
SELECT (SELECT count(*) FROM late) AS late,
       (SELECT count(*) FROM late WHERE seq <= $7) AS below_floor";

/// Step 2 of [`sweep`] without the legacy marks: `$1` types, `$2` floor, `$3` high.
const GAP_SQL: &str = "\
INSERT INTO crm.booking_expiration_exception
       (seq, id, key, topic, type, reason, attempts, failures, since)
SELECT o.seq, o.id, o.aggregateid, o.topic, o.type, 'late', 0, 0, $4
  FROM crm.outbox o
  LEFT JOIN crm.booking_expiration_receipt r
         ON r.seq = o.seq AND r.id = o.id AND r.seq > $2 AND r.seq <= $3
 WHERE o.seq > $2 AND o.seq <= $3 AND o.type = ANY($1::text[])
   AND o.published_at IS NULL AND o.failed_at IS NULL AND r.seq IS NULL
   AND o.seq NOT IN (SELECT seq FROM crm.booking_expiration_exception)
ON CONFLICT (seq) DO NOTHING";

/// Step 2 of [`sweep`] with the legacy marks on: every own row pending by the
/// columns at or below `$2` (`ix_outbox_pending`: the rows this relay holds as
/// exceptions, late rows, rows of transactions open when the watermark was made) that
/// has no receipt (a row delivered while the legacy marks were off keeps its columns
/// pending: it is not taken again), and the release before's failed rows
/// (`ix_outbox_failed`) that are neither delivered since nor exceptions.
const LEGACY_SWEEP_SQL: &str = "\
INSERT INTO crm.booking_expiration_exception AS e
       (seq, id, key, topic, type, reason, attempts, failures, next_attempt_at, last_error,
        failed_at, since)
SELECT o.seq, o.id, o.aggregateid, o.topic, o.type, 'legacy', least(o.attempts, 2147483646),
       least(o.failures, 2147483646),
       CASE WHEN NOT coalesce(starts_with(o.last_error, $4), false) THEN o.next_attempt_at END,
       o.last_error, o.failed_at, $3
  FROM (SELECT * FROM crm.outbox
         WHERE published_at IS NULL AND failed_at IS NULL AND seq <= $2
           AND type = ANY($1::text[])
           AND NOT EXISTS (SELECT 1 FROM crm.booking_expiration_receipt r
                            WHERE r.seq = crm.outbox.seq)
        UNION ALL
        SELECT * FROM crm.outbox p
         WHERE failed_at IS NOT NULL AND published_at IS NULL AND type = ANY($1::text[])
           AND NOT EXISTS (SELECT 1 FROM crm.booking_expiration_receipt r WHERE r.seq = p.seq)) o
 WHERE o.seq NOT IN (SELECT seq FROM crm.booking_expiration_exception)
ON CONFLICT (seq) DO NOTHING";
