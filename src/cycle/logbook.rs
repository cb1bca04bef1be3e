//! The cycle's logbook: what it tells once a batch committed (each expiry and
//! quarantined row, as log lines and span events) and when its budget ran out with
//! bookings left.

use crate::store::Session;
use log::{error, info, warn};
use uuid::Uuid;

use super::schedule::Budget;
use super::types::{BatchOutcome, Cycle, Staged};
use crate::clock::seconds;
use crate::domain::Phase;
use crate::obs::trace::{self, Attr};
use crate::store::{self, CycleStatements};

/// Logs each expiry and quarantined row of the batch `staged` once it committed, and
/// counts them.
pub(super) fn committed(staged: Staged, phase: Phase) -> BatchOutcome {
    for p in &staged.refused {
        error!(BookingId:% = p.booking_id, TenantId:% = p.tenant_id, Phase:% = phase, Reason = p.reason,
               Error = p.error.as_str(); "item failed: the guard refused the row, quarantined");
        item_failed(p.booking_id, p.tenant_id, &p.error);
    }
    for (index, rejection) in &staged.written.rejected {
        let w = &staged.writes[*index];
        error!(BookingId:% = w.expiry.booking_id, TenantId:% = w.expiry.tenant_id, Phase:% = phase,
               SqlState = rejection.sqlstate.as_str(), Error = rejection.message.as_str(); "item failed: the database rejected the write, quarantined");
        item_failed(w.expiry.booking_id, w.expiry.tenant_id, &rejection.message);
    }
    for p in &staged.dropped {
        error!(BookingId:% = p.booking_id, TenantId:% = p.tenant_id, Phase:% = phase, Reason = p.reason,
               Error = p.error.as_str(); "item failed: the database dropped the update, quarantined");
        item_failed(p.booking_id, p.tenant_id, &p.error);
    }
    let expired: std::collections::HashSet<Uuid> = staged.written.expired.iter().copied().collect();
    let mut lateness = Vec::with_capacity(expired.len());
    for w in staged
        .writes
        .iter()
        .filter(|w| expired.contains(&w.expiry.booking_id))
    {
        // A `-infinity` deadline has no lateness to observe.
        if let Some(late) = w.expiry.deadline.until(w.expiry.expired_at) {
            lateness.push(seconds(late));
        }
        // One message id per published contract version, comma-separated.
        let message_ids = w
            .events
            .iter()
            .map(|e| e.message_id.to_string())
            .collect::<Vec<_>>()
            .join(",");
        info!(BookingId:% = w.expiry.booking_id, DealId:% = w.expiry.deal_id, Phase:% = phase,
              TenantId:% = w.expiry.tenant_id, MessageId = message_ids.as_str(); "booking expired");
        // With tracing off there is no span to carry the event: skip building it.
        if !staged.traced {
            continue;
        }
        trace::event(
            "booking expired",
            vec![
                Attr::new("BookingId", w.expiry.booking_id.to_string()),
                Attr::new("TenantId", w.expiry.tenant_id.to_string()),
                Attr::new("DealId", w.expiry.deal_id.to_string()),
                Attr::new("MessageId", message_ids),
            ],
        );
    }
    BatchOutcome {
        claimed: staged.claimed,
        last: staged.last,
        expired: staged.written.expired.len() as u64,
        skipped: staged.skipped,
        poison: (staged.refused.len() + staged.dropped.len() + staged.written.rejected.len())
            as u64,
        lateness,
    }
}

/// The most overdue rows a cycle counts per phase when it stops with work left: the
/// count stays cheap (well within the margin) however large the backlog.
const LEFT_COUNT_CAP: i64 = 1_000_000;

/// Logs how many overdue bookings the cycle leaves for the next one (a normal end after
/// an outage: exit 0). The count is bounded, and a failed count is only a warning.
pub(super) fn log_left(
    client: &mut Session,
    stmts: &CycleStatements,
    cycle: &Cycle,
    budget: &Budget,
    unfinished: &[Phase],
) {
    let (cfg, as_of) = (cycle.cfg, cycle.as_of);
    // A finished phase has none left; a count that failed (the deadline can cancel it
    // on a loaded database) is shown as unknown, not as none.
    let mut left = [Some(0), Some(0)];
    for &phase in unfinished {
        match store::count_left(client, stmts, phase, as_of, LEFT_COUNT_CAP) {
            Ok(n) => left[phase.slot()] = Some(n),
            Err(e) => {
                left[phase.slot()] = None;
                warn!(Phase:% = phase, Error:% = format!("{e:#}");
                      "cannot count the overdue bookings left");
            }
        }
    }
    let shown = |n: Option<u64>| match n {
        Some(n) if n >= LEFT_COUNT_CAP as u64 => format!("{LEFT_COUNT_CAP}+"),
        Some(n) => n.to_string(),
        None => "unknown".to_owned(),
    };
    warn!(ReserveLeft = shown(left[Phase::Reserve.slot()]).as_str(),
          BookingLeft = shown(left[Phase::Booking.slot()]).as_str(),
          DeadlineMs = cfg.deadline.as_millis() as u64,
          SlowestBatchMs = budget.slowest.as_millis() as u64,
          ElapsedMs = budget.elapsed(cycle.now()).as_millis() as u64;
          "cycle budget spent with overdue bookings left; the next cycle goes on with them");
}

/// A per-item event on the batch's span: the row is poison.
pub(super) fn item_failed(booking_id: Uuid, tenant_id: Uuid, error: &str) {
    trace::event(
        "item failed",
        vec![
            Attr::new("BookingId", booking_id.to_string()),
            Attr::new("TenantId", tenant_id.to_string()),
            Attr::new("Error", error.to_owned()),
        ],
    );
}
