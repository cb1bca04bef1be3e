//! What a cycle tells once a batch committed (each expiry and quarantined row, as log
//! lines and span events) and when its budget ran out with bookings left.

use crate::store::Session;
use log::{error, info, warn};
use uuid::Uuid;

use super::Cycle;
use super::batch::BatchOutcome;
use super::schedule::Budget;
use crate::clock::seconds;
use crate::domain::{self, Phase};
use crate::obs::trace::{self, Attr};
use crate::store::{self, ClaimKey, CycleStatements, Poison};

/// A batch written in its transaction, not yet committed: what to report once it is.
#[derive(Default)]
pub(super) struct Staged {
    pub(super) claimed: usize,
    pub(super) last: Option<ClaimKey>,
    pub(super) skipped: u64,
    pub(super) writes: Vec<domain::BatchWrite>,
    /// Rows the guard refused (quarantined with the batch).
    pub(super) refused: Vec<Poison>,
    /// Rows whose update the database dropped without an error (quarantined too).
    pub(super) dropped: Vec<Poison>,
    pub(super) written: store::WriteOutcome,
    pub(super) traced: bool,
}

impl Staged {
    /// Logs each committed expiry and quarantined row, and counts them.
    pub(super) fn report(self, phase: Phase) -> BatchOutcome {
        for p in &self.refused {
            error!(BookingId:% = p.booking_id, TenantId:% = p.tenant_id, Phase:% = phase, Reason = p.reason,
                   Error = p.error.as_str(); "item failed: the guard refused the row, quarantined");
            item_failed(p.booking_id, p.tenant_id, &p.error);
        }
        for (index, rejection) in &self.written.rejected {
            let w = &self.writes[*index];
            error!(BookingId:% = w.expiry.booking_id, TenantId:% = w.expiry.tenant_id, Phase:% = phase,
                   SqlState = rejection.sqlstate.as_str(), Error = rejection.message.as_str(); "item failed: the database rejected the write, quarantined");
            item_failed(w.expiry.booking_id, w.expiry.tenant_id, &rejection.message);
        }
        for p in &self.dropped {
            error!(BookingId:% = p.booking_id, TenantId:% = p.tenant_id, Phase:% = phase, Reason = p.reason,
                   Error = p.error.as_str(); "item failed: the database dropped the update, quarantined");
            item_failed(p.booking_id, p.tenant_id, &p.error);
        }
        let expired: std::collections::HashSet<Uuid> =
            self.written.expired.iter().copied().collect();
        let mut lateness = Vec::with_capacity(expired.len());
        for w in self
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
            if !self.traced {
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
            claimed: self.claimed,
            last: self.last,
            expired: self.written.expired.len() as u64,
            skipped: self.skipped,
            poison: (self.refused.len() + self.dropped.len() + self.written.rejected.len()) as u64,
            lateness,
        }
    }
}

/// The most overdue rows a cycle counts per phase when it stops with work left: the
/// count stays cheap (well within the margin) however large the backlog.
const LEFT_COUNT_CAP: i64 = 1_000_000;

/// Logs how many overdue bookings the cycle leaves for the next one (a normal end after
/// an outage: exit 0). The count is bounded, and a failed count is only a warning.
pub(super) fn report_left(
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
