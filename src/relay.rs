//! `relay-outbox`: one relay at a time, pending outbox rows → Kafka, marked published
//! only after the broker acknowledged them; undeliverable rows marked failed; purge.

use anyhow::Result;
use uuid::Uuid;

use crate::cli::RelayArgs;

pub fn relay_outbox(_args: &RelayArgs, _run_id: Uuid) -> Result<()> {
    anyhow::bail!("relay-outbox is not built yet")
}
