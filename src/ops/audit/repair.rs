//! `audit --repair`: the missing rows that were published or failed re-queued through
//! republish's own code, in batches, in one transaction with their entry in the
//! operations trail.

use anyhow::Result;
use chrono::{DateTime, Utc};
use log::info;
use uuid::Uuid;

use super::report::{COMMAND, Repair};
use crate::config::AuditConfig;
use crate::exit::{ClassifyExt, Failure, fail};
use crate::store;
use crate::store::ops::{self, Operation};

/// Rows re-queued per statement.
const BATCH: i64 = 1_000;

/// `--repair`: the missing rows that were published or failed re-queued, in one
/// transaction with their entry in the operations trail, as republish does it.
pub(super) fn repair(
    db: &mut store::Db,
    cfg: &AuditConfig,
    actor: &crate::config::Actor,
    counts: &ops::AuditCounts,
    described: &str,
    now: DateTime<Utc>,
) -> Result<Repair> {
    let to_take = counts.missing_published + counts.missing_failed;
    if to_take > u64::from(cfg.max_rows) {
        return Err(fail(
            Failure::Usage,
            format!(
                "{COMMAND} --repair: {to_take} rows to re-queue, more than --max-rows {}; \
             narrow the window or raise --max-rows (nothing was changed)",
                cfg.max_rows
            ),
        ));
    }
    let mut tx = db
        .client
        .transaction()
        .classify(Failure::Temporary, "cannot begin a transaction")?;
    let who = crate::ops::actor(&mut tx, actor)?;
    let mut ids: Vec<Uuid> = Vec::new();
    let mut requeued = 0;
    let mut after = i64::MIN;
    loop {
        let batch = ops::missing_to_requeue(&mut tx, after, BATCH)?;
        let Some((last, _)) = batch.last() else {
            break;
        };
        after = *last;
        let batch_ids: Vec<Uuid> = batch.iter().map(|(_, id)| *id).collect();
        requeued += ops::requeue(&mut tx, &batch_ids, &cfg.outbox_types)?;
        ids.extend(batch_ids);
    }
    let mut operation_id = None;
    if !ids.is_empty() {
        operation_id = Some(ops::record(
            &mut tx,
            &Operation {
                at: now,
                actor: &who,
                action: "audit --repair",
                target: described,
                reason: &actor.reason,
                outbox_ids: &ids,
            },
        )?);
    }
    tx.commit()
        .classify(Failure::Temporary, "cannot commit the re-queue")?;
    if requeued > 0 {
        info!(Command = COMMAND, Requeued = requeued, Actor = who.as_str(),
              Reason = actor.reason.as_str(); "outbox rows re-queued");
    }
    Ok(Repair {
        requeued,
        left_pending: counts.missing_pending,
        operation_id,
        actor: who,
        reason: actor.reason.clone(),
    })
}
