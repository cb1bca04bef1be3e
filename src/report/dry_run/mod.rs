//! `dry-run --as-of T`: what a cycle at moment T would expire, which events it would
//! publish, and what the guard would refuse. The same candidate query as the claim of
//! `run-once` (without its lock) and the same domain decision, `domain::decide`; only
//! the write is skipped.
//!
//! This file is the walk: one READ ONLY snapshot, read phase by phase in chunks, each
//! chunk decided and handed to a [`Report`] as it is read; `table` and `json` are the
//! two renderings.

mod json;
mod report;
mod table;

use std::collections::HashMap;

use crate::store::{Session, Tx};
use anyhow::Result;
use log::info;
use uuid::Uuid;

use report::{Counts, Report, Scope};

use crate::clock::Clock;
use crate::config::DryRunConfig;
use crate::domain::{self, BookingRow, Phase, rfc3339};
use crate::exit::{ClassifyExt, Failure};
use crate::render::Stdout;
use crate::shutdown::Shutdown;
use crate::store::{self, CHUNK_ROWS, SchemaNeed};

/// `dry-run --as-of T`.
pub(crate) fn dry_run(
    cfg: &DryRunConfig,
    run_id: Uuid,
    clock: &dyn Clock,
    shutdown: &Shutdown,
) -> Result<()> {
    let batch = cfg.batch;
    let limit = cfg.limit();
    let as_of = cfg.as_of.resolve(|| clock.now());
    let per_phase = limit.map_or_else(|| "all".to_owned(), |n| n.to_string());
    info!(AsOf:% = rfc3339(as_of), PerPhase:% = per_phase; "dry run started: nothing will be written");

    let mut db = store::connect(&cfg.db)?;
    shutdown.on_signal(db.interrupter());
    store::check_schema(&mut db.client, SchemaNeed::Report)?;
    let scope = Scope {
        run_id,
        as_of,
        limit,
        batch,
        topics: cfg.topics.clone(),
    };
    // Printed as it is read, chunk by chunk, so memory stays flat whatever the number
    // of candidates. Nothing is printed before the first query has answered.
    let mut out = Stdout::new();
    let mut report: Box<dyn Report> = if cfg.json {
        Box::new(json::JsonLines)
    } else {
        Box::new(table::TableReport::new(cfg.wide))
    };
    stream(&mut db.client, &scope, report.as_mut(), &mut out).map_err(|e| {
        crate::report::read_failure::in_operator_words(e, "dry-run", &cfg.db, shutdown)
    })?;
    out.finish()
}

/// Reads and prints the plan of each phase in one READ ONLY snapshot: the candidates
/// through a portal in chunks of [`CHUNK_ROWS`], each chunk decided by
/// `domain::decide` and printed before the next is read; the guard's refusals (rare)
/// are held until the phase's expiries are out; the quarantined rows follow.
fn stream(
    client: &mut Session,
    scope: &Scope,
    report: &mut dyn Report,
    out: &mut Stdout,
) -> Result<()> {
    let mut tx = store::begin_read_only(client)
        .classify(Failure::Temporary, "cannot begin a read-only transaction")?;
    let mut phases = Vec::new();
    for phase in Phase::ALL {
        let counts = stream_phase(&mut tx, scope, phase, report, out)?;
        if out.closed() {
            break;
        }
        info!(Phase:% = phase, WouldExpire = counts.would_expire,
              Candidates = counts.candidates, Quarantined = counts.quarantined;
              "dry run: phase read");
        phases.push((phase, counts));
    }
    if !out.closed() {
        report.end(scope, &phases, out)?;
    }
    tx.commit()
        .classify(Failure::Temporary, "cannot end the read-only transaction")?;
    Ok(())
}

fn stream_phase(
    tx: &mut Tx<'_>,
    scope: &Scope,
    phase: Phase,
    report: &mut dyn Report,
    out: &mut Stdout,
) -> Result<Counts> {
    let mut counts = Counts::default();
    let mut rejected = Vec::new();
    store::candidates_in_chunks(tx, phase, scope.as_of, scope.limit, CHUNK_ROWS, |rows| {
        counts.candidates += rows.len() as u64;
        // The dry run's own message ids, time-ordered as run-once's are.
        let (writes, poison) = domain::decide(
            &rows,
            phase,
            scope.as_of,
            scope.run_id,
            scope.topics.versions(),
            &mut Uuid::now_v7,
        );
        counts.would_expire += writes.len() as u64;
        counts.rejected += poison.len() as u64;
        if !poison.is_empty() {
            let by_id: HashMap<Uuid, &BookingRow> = rows.iter().map(|r| (r.id, r)).collect();
            rejected.extend(
                poison
                    .into_iter()
                    .map(|p| (by_id[&p.booking_id].clone(), p)),
            );
        }
        report.expiries(scope, phase, &writes, out)?;
        Ok::<_, anyhow::Error>(!out.closed())
    })?;
    if out.closed() {
        return Ok(counts);
    }
    // A short read means there is nothing beyond it; only a full one needs a count.
    counts.left_for_later = match scope.limit {
        Some(n) if counts.candidates as i64 >= n => {
            store::count_candidates(tx, phase, scope.as_of)?.saturating_sub(counts.candidates)
        }
        _ => 0,
    };
    report.expiries_done(scope, phase, out)?;
    report.rejected(scope, phase, &rejected, out)?;
    drop(rejected);
    let mut listed = 0;
    counts.quarantined =
        store::quarantined_in_chunks(tx, phase, scope.as_of, scope.limit, CHUNK_ROWS, |q| {
            listed += q.len() as u64;
            report.quarantined(scope, phase, &q, out)?;
            Ok::<_, anyhow::Error>(!out.closed())
        })?;
    if !out.closed() {
        report.phase_done(scope, phase, &counts, listed, out)?;
    }
    Ok(counts)
}
