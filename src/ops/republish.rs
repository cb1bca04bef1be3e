//! `republish` and `retry-failed`: put outbox rows back into the relay's queue, as they
//! are (no row is inserted, so the relay sends the same `ce_id` again and consumers
//! dedupe), and write who, when, why and how many to the operations trail in the same
//! transaction. Replaces the hand-written `UPDATE … SET published_at = NULL`.

use std::collections::HashSet;

use anyhow::Result;
use log::info;
use serde::Serialize;
use uuid::Uuid;

use crate::clock::{Clock, SystemClock};
use crate::config::RequeueConfig;
use crate::domain::{AsOf, rfc3339};
use crate::exit::{ClassifyExt, Failure, fail};
use crate::render::{self as format, Table};
use crate::store::ids::IdTable;
use crate::store::ops::{self, Operation, OutboxEntry, Requeue, Selection};
use crate::store::{self, SchemaNeed};

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Outcome {
    command: &'static str,
    dry_run: bool,
    selection: String,
    /// Rows re-queued (or, with --dry-run, that would be).
    requeued: u64,
    /// The first rows re-queued, in write order (at most [`SHOWN_ROWS`]; every id is in
    /// the operations trail).
    rows: Vec<RowJson>,
    /// Rows re-queued beyond those listed.
    rows_not_shown: u64,
    /// Selected rows left as they are: pending ones (they go anyway), and for
    /// retry-failed the published ones (the first [`SHOWN_ROWS`]).
    left_alone: Vec<RowJson>,
    /// Rows left alone beyond those listed.
    left_alone_not_shown: u64,
    /// `--ids` that name no outbox row of the job's types (never written, purged after the
    /// retention, or another producer's row):
    /// whole ids, or starts of ids that no row's id has.
    not_found: Vec<String>,
    actor: String,
    reason: String,
    operation_id: Option<i64>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct RowJson {
    id: Uuid,
    aggregate_id: String,
    topic: String,
    state: &'static str,
    published_at: Option<String>,
    partition: Option<i32>,
    offset: Option<i64>,
    failed_at: Option<String>,
    last_error: Option<String>,
}

fn row_json(o: &OutboxEntry) -> RowJson {
    RowJson {
        id: o.id,
        aggregate_id: o.aggregateid.clone(),
        topic: o.topic.clone(),
        state: o.state(),
        published_at: o.published_at.map(rfc3339),
        partition: o.partition,
        offset: o.offset,
        failed_at: o.failed_at.map(rfc3339),
        last_error: o.last_error.clone(),
    }
}

fn usage(message: String) -> anyhow::Error {
    fail(Failure::Usage, message)
}

/// Rows re-queued per statement: each batch's rows are locked and updated together.
const BATCH: i64 = 1_000;
/// Rows listed in the report (re-queued, and left alone); the rest are counted.
const SHOWN_ROWS: usize = 1_000;

fn over_max_rows(command: &str, rows: u64, max_rows: u32) -> anyhow::Error {
    usage(format!(
        "{command}: the selection holds {rows} rows to re-queue, more than --max-rows \
         {max_rows}; narrow it or raise --max-rows (nothing was changed)"
    ))
}

/// `republish` and `retry-failed` (`cfg.failed_only`).
pub(crate) fn republish(cfg: &RequeueConfig) -> Result<()> {
    let command = cfg.command();
    let failed_only = cfg.failed_only;
    let now = SystemClock.now();
    let at = |t: AsOf| match t {
        AsOf::Now => now,
        AsOf::At(at) => at,
    };
    // Ids are resolved once connected; the rest is checked before.
    let (selection, described) = if !cfg.ids.is_empty() || cfg.booking.is_some() {
        (Selection::Ids(Vec::new()), String::new())
    } else if let (Some(since), Some(until)) = (cfg.since, cfg.until) {
        let (since, until) = (at(since), at(until));
        if since >= until {
            return Err(usage(format!(
                "{command}: --since {} is not before --until {}",
                format::time(since),
                format::time(until)
            )));
        }
        (
            Selection::Window { since, until },
            format!(
                "written from {} until {}",
                format::time(since),
                format::time(until)
            ),
        )
    } else if cfg.all {
        // `--all` is for retry-failed only: `config` refused it for republish.
        (Selection::AllFailed, "every failed row".to_owned())
    } else {
        return Err(usage(format!(
            "{command}: select the rows with --ids, --booking or --since/--until"
        )));
    };

    let mut db = store::connect(&cfg.db)?;
    if !cfg.dry_run {
        db.require_writable(&cfg.db, command)?;
    }
    store::check_schema(&mut db.client, SchemaNeed::Requeue)?;
    crate::preflight::check_row_security(&mut db.client, command, &cfg.outbox_types)?;
    let mut tx = db
        .client
        .transaction()
        .classify(Failure::Temporary, "cannot begin a transaction")?;
    let actor = super::actor(&mut tx, &cfg.actor)?;
    let types = &cfg.outbox_types;
    // Starts of ids that no row's id has: as unknown ids.
    let mut unmatched: Vec<String> = Vec::new();
    let (selection, described) = if !cfg.ids.is_empty() {
        let mut ids = Vec::with_capacity(cfg.ids.len());
        for arg in &cfg.ids {
            match super::ids::resolve(&mut tx, IdTable::Outbox(types), arg, "--ids")? {
                Some(id) => ids.push(id),
                None => unmatched.push(arg.to_string()),
            }
        }
        let shown: Vec<String> = ids
            .iter()
            .map(Uuid::to_string)
            .chain(unmatched.iter().cloned())
            .collect();
        (Selection::Ids(ids), format!("ids {}", shown.join(",")))
    } else if let Some(booking) = &cfg.booking {
        match super::ids::resolve(&mut tx, IdTable::Bookings, booking, "--booking")? {
            Some(id) => (Selection::Booking(id), format!("booking {id}")),
            None => (
                Selection::Ids(Vec::new()),
                format!("booking {booking}: no booking's id starts with it"),
            ),
        }
    } else {
        (selection, described)
    };
    let which = if failed_only {
        Requeue::FailedOnly
    } else {
        Requeue::PublishedOrFailed
    };
    // Counted first: a selection over --max-rows is refused before any row is loaded
    // or locked, however wide the window.
    let (to_take, to_leave) = ops::count_selection(&mut tx, &selection, which, types)?;
    if to_take > u64::from(cfg.max_rows) {
        return Err(over_max_rows(command, to_take, cfg.max_rows));
    }
    let not_found: Vec<String> = match &selection {
        Selection::Ids(ids) => {
            let seen: HashSet<Uuid> = ops::existing_ids(&mut tx, ids, types)?
                .into_iter()
                .collect();
            let mut missing: Vec<Uuid> = ids
                .iter()
                .filter(|id| !seen.contains(id))
                .copied()
                .collect();
            missing.dedup();
            missing
                .iter()
                .map(Uuid::to_string)
                .chain(unmatched)
                .collect()
        }
        _ => Vec::new(),
    };
    // Read before the re-queue makes the taken rows pending too.
    let left: Vec<RowJson> = ops::left_alone(&mut tx, &selection, which, SHOWN_ROWS as i64, types)?
        .iter()
        .map(row_json)
        .collect();
    // Batch by batch in write order: only the rows re-queued are locked (the pending
    // ones never are), and only the first SHOWN_ROWS are kept for the report.
    let mut ids: Vec<Uuid> = Vec::new();
    let mut shown: Vec<RowJson> = Vec::new();
    let mut requeued = 0;
    let mut after = i64::MIN;
    loop {
        let batch = ops::requeue_batch(
            &mut tx,
            &selection,
            which,
            after,
            BATCH,
            !cfg.dry_run,
            types,
        )?;
        let Some((last, _)) = batch.last() else {
            break;
        };
        after = *last;
        if ids.len() + batch.len() > cfg.max_rows as usize {
            // Rows became re-queueable since the count (the relay gave up on some).
            return Err(over_max_rows(
                command,
                (ids.len() + batch.len()) as u64,
                cfg.max_rows,
            ));
        }
        let batch_ids: Vec<Uuid> = batch.iter().map(|(_, o)| o.id).collect();
        let room = SHOWN_ROWS.saturating_sub(shown.len());
        shown.extend(batch.iter().take(room).map(|(_, o)| row_json(o)));
        if !cfg.dry_run {
            requeued += ops::requeue(&mut tx, &batch_ids, types)?;
        }
        ids.extend(batch_ids);
    }
    let mut operation_id = None;
    if cfg.dry_run {
        requeued = ids.len() as u64;
    } else if !ids.is_empty() {
        operation_id = Some(ops::record(
            &mut tx,
            &Operation {
                at: now,
                actor: &actor,
                action: command,
                target: &described,
                reason: &cfg.actor.reason,
                outbox_ids: &ids,
            },
        )?);
    }
    if cfg.dry_run {
        drop(tx);
    } else {
        tx.commit()
            .classify(Failure::Temporary, "cannot commit the re-queue")?;
        info!(Command = command, Requeued = requeued, Actor = actor.as_str(), Reason = cfg.actor.reason.as_str(),
              Selection = described.as_str(); "outbox rows re-queued");
    }
    let outcome = Outcome {
        command,
        dry_run: cfg.dry_run,
        selection: described,
        requeued,
        rows_not_shown: (ids.len() - shown.len()) as u64,
        rows: shown,
        left_alone_not_shown: to_leave.saturating_sub(left.len() as u64),
        left_alone: left,
        not_found,
        actor,
        reason: cfg.actor.reason.clone(),
        operation_id,
    };
    if cfg.json {
        format::print_json(&outcome)?;
    } else {
        format::print(&text(&outcome, cfg.wide))?;
    }
    Ok(())
}

fn text(o: &Outcome, wide: bool) -> String {
    let mut out = String::new();
    let verb = if o.dry_run {
        "would re-queue"
    } else {
        "re-queued"
    };
    out.push_str(&format::wrap(
        &format!(
            "{}: {verb} {} outbox rows ({})",
            o.command, o.requeued, o.selection
        ),
        "",
        "  ",
    ));
    if !o.rows.is_empty() {
        let mut t = Table::new(&["Id", "Booking", "Was", "At", "Partition", "Offset"]);
        for r in &o.rows {
            t.row(vec![
                r.id.to_string(),
                if wide {
                    r.aggregate_id.clone()
                } else {
                    r.aggregate_id
                        .chars()
                        .take(format::SHORT_ID_WIDTH)
                        .collect()
                },
                r.state.to_owned(),
                r.published_at
                    .clone()
                    .or_else(|| r.failed_at.clone())
                    .unwrap_or_else(|| "-".to_owned()),
                r.partition.map_or("-".to_owned(), |p| p.to_string()),
                r.offset.map_or("-".to_owned(), |p| p.to_string()),
            ]);
        }
        t.render(&mut out);
    }
    if o.rows_not_shown > 0 {
        out.push_str(&format!(
            "… and {} more rows (every id is in the operations trail)\n",
            o.rows_not_shown
        ));
    }
    for r in &o.left_alone {
        out.push_str(&format!("left alone: {} is {}\n", r.id, r.state));
    }
    if o.left_alone_not_shown > 0 {
        out.push_str(&format!(
            "left alone: {} more rows\n",
            o.left_alone_not_shown
        ));
    }
    for id in &o.not_found {
        out.push_str(&format!(
            "not found: {id} (never written, purged after the outbox retention, or not a row \
             of --outbox-types)\n"
        ));
    }
    match (o.dry_run, o.operation_id) {
        (true, _) => out.push_str("dry run: nothing was changed\n"),
        (false, Some(id)) => out.push_str(&format::wrap(
            &format!(
                "the next relay-outbox run sends them again with the same ce_id; recorded as \
                 operation {id} by {}: {}",
                o.actor, o.reason
            ),
            "",
            "  ",
        )),
        (false, None) => out.push_str("nothing to re-queue; nothing was changed\n"),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(reason: &str) -> Outcome {
        let id: Uuid = "01a22e27-eb27-753a-823b-74b8c190ac35".parse().unwrap();
        Outcome {
            command: "republish",
            dry_run: false,
            selection: "booking b1000001-0000-4000-8000-000000000000".into(),
            requeued: 1,
            rows: vec![RowJson {
                id,
                aggregate_id: "b1000001-0000-4000-8000-000000000000".into(),
                topic: "pin.crm.booking-expired".into(),
                state: "published",
                published_at: Some("2026-11-30T20:31:40.055381Z".into()),
                partition: Some(5),
                offset: Some(2_147_483_648),
                failed_at: None,
                last_error: None,
            }],
            rows_not_shown: 0,
            left_alone: vec![],
            left_alone_not_shown: 0,
            not_found: vec![],
            actor: "ops@example.com (database user postgres)".into(),
            reason: reason.into(),
            operation_id: Some(i64::MAX),
        }
    }

    #[test]
    fn the_report_fits_120_columns_and_wide_shows_the_whole_booking_id() {
        let reason = "INC-9: the chessboard lost its event ".repeat(4);
        let text = text(&outcome(reason.trim()), false);
        assert_eq!(
            text,
            "republish: re-queued 1 outbox rows (booking b1000001-0000-4000-8000-000000000000)\n\
             Id                                    Booking   Was        At                           \
             Partition  Offset\n\
             01a22e27-eb27-753a-823b-74b8c190ac35  b1000001  published  2026-11-30T20:31:40.055381Z  \
             5          2147483648\n\
             the next relay-outbox run sends them again with the same ce_id; recorded as operation \
             9223372036854775807 by\n  ops@example.com (database user postgres): INC-9: the chessboard \
             lost its event INC-9: the chessboard lost its event\n  INC-9: the chessboard lost its event \
             INC-9: the chessboard lost its event\n"
        );
        assert!(text.lines().all(|l| l.chars().count() <= 120), "{text}");
        let wide = super::text(&outcome("INC-9"), true);
        assert!(
            wide.contains(
                "\n01a22e27-eb27-753a-823b-74b8c190ac35  b1000001-0000-4000-8000-000000000000  published  "
            ),
            "{wide}"
        );
    }
}
