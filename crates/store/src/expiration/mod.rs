//! The expiration cycle's SQL, one room per step: the claim per phase with its
//! skipped-locked count (`claim`), the set-based batch write, bookings + audit +
//! timeline + outbox in one statement (`write`), the isolation of the rows the
//! database refuses (`isolation`, pure), and the quarantine of poison rows
//! (`quarantine`). Here: the statements, prepared once per session.

mod claim;
mod isolation;
mod quarantine;
mod statements;
mod write;

use crate::error::{Context, Fault, Result, StoreError, fail};
use crate::{Conn, Session};
use postgres::GenericClient;

#[cfg(feature = "testing")]
pub use claim::claim_sql;
pub(crate) use claim::left_sql;
pub(crate) use claim::{BOOKING_COLUMNS, booking_row, deadline_column, overdue_predicate};
pub use claim::{Claim, ClaimKey, candidates_sql, claim, claim_counting_sql, count_left};
pub use quarantine::{quarantine, release_stale_quarantine};
pub use statements::CycleStatements;
use statements::OnFirstUse;
pub use write::{WriteOutcome, write_direct, write_isolating};

use crate::domain::Phase;
pub use crate::domain::{BatchWrite, Poison};

/// PostgreSQL runs no rule inside a data-modifying `WITH`: a rule on a table the
/// cycle's write touches (a conditional `DO INSTEAD` one refuses every `UPDATE …
/// RETURNING`, a `DO ALSO` one every data-modifying `WITH`) refuses the statement
/// itself, for every row (0A000). The operator's words for that, naming what PostgreSQL
/// refused and how to fix it; any other error is left as it is.
fn rule_in_the_way(e: &postgres::Error) -> Option<String> {
    let db = e.as_db_error()?;
    crate::sqlstate::feature_not_supported(e).then(|| {
        format!(
            "cannot prepare the cycle's write: PostgreSQL says \"{}\": a rule on \
             crm.bookings, crm.booking_audit, crm.deal_timeline or crm.outbox rewrites the \
             write, which PostgreSQL cannot run under a rule; nothing was done. Ask the \
             database's owners to replace the rule by a trigger (a BEFORE UPDATE trigger \
             that drops an update has it quarantined as update_dropped; an AFTER trigger \
             can log changes); list the rules with \
             SELECT * FROM pg_rules WHERE schemaname = 'crm'",
            db.message()
        )
    })
}

/// The declared type of `crm.bookings.status`, as SQL can name it (quoted and
/// schema-qualified where needed): the cycle's write casts the new status to it
/// ([`CycleStatements::prepare`] is handed it).
pub fn status_type(client: &mut impl Conn) -> Result<String> {
    let client = client.pg();
    let row = client
        .query_one(
            "SELECT format_type(a.atttypid, NULL) AS declared
               FROM pg_catalog.pg_attribute a
              WHERE a.attrelid = 'crm.bookings'::regclass AND a.attname = 'status'
                AND NOT a.attisdropped",
            &[],
        )
        .classify(
            Fault::Temporary,
            "cannot read the type of crm.bookings.status",
        )?;
    Ok(row.get("declared"))
}

impl CycleStatements {
    /// The cycle's statements on `client`; `status_type` is the declared type of
    /// `crm.bookings.status` ([`status_type`]), which the write casts to.
    pub fn prepare(client: &mut Session, status_type: &str) -> Result<Self> {
        let client = client.pg();
        let mut prepare = |sql: &str| {
            client.prepare(sql).map_err(|e| match rule_in_the_way(&e) {
                Some(refusal) => fail(Fault::Config, refusal),
                None => StoreError::from(e).context("cannot prepare the cycle's statements"),
            })
        };
        Ok(CycleStatements {
            claim: [
                prepare(&claim_counting_sql(Phase::Reserve))?,
                prepare(&claim_counting_sql(Phase::Booking))?,
            ],
            left: [
                OnFirstUse::new(left_sql(Phase::Reserve)),
                OnFirstUse::new(left_sql(Phase::Booking)),
            ],
            write: prepare(&write::write_sql(status_type))?,
            quarantine: OnFirstUse::new(quarantine::QUARANTINE_SQL),
            release_stale: prepare(quarantine::RELEASE_STALE_SQL)?,
        })
    }
}
