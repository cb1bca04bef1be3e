//! `explain BOOKING_ID`: the first question of every incident ("why didn't booking X
//! expire, why is its object still blocked, did its event go out?") in one read-only
//! command, instead of hand-written SQL over four tables and a Kafka consumer.
//!
//! Three steps, one file each: `read` (one read-only transaction), `judge` (what the
//! next cycle would do, a pure function), and the rendering (`view` as data and JSON,
//! `text` for people). With `--brokers`, each receipt is read back from Kafka
//! (`kafka::readback`).

mod judge;
mod read;
mod text;
mod view;

use anyhow::Result;

use crate::clock::{Clock, SystemClock};
use crate::config::{ExplainConfig, READ_BACK_TIMEOUT};
use crate::domain::AsOf;
use crate::exit::{Failure, fail};
use crate::kafka::readback;
use crate::render;
use crate::shutdown::Shutdown;
use crate::store::{self, SchemaNeed};

/// `explain BOOKING_ID`.
pub(crate) fn explain(args: &ExplainConfig, shutdown: &Shutdown) -> Result<()> {
    let (cfg, kafka) = (&args.db, &args.kafka);
    let as_of = match args.as_of {
        AsOf::Now => SystemClock.now(),
        AsOf::At(at) => at,
    };
    let mut db = store::connect(cfg)?;
    shutdown.on_signal(db.interrupter());
    store::check_schema(&mut db.client, SchemaNeed::Explain)?;
    let resolved = super::ids::resolve(
        &mut db.client,
        store::ids::IdTable::Bookings,
        &args.booking_id,
        "BOOKING_ID",
    )?;
    let mut explanation = match resolved {
        Some(id) => {
            let facts = read::read(&mut db.client, id, as_of, &args.outbox_types)?;
            let next_cycle = judge::judge(
                facts.booking.as_ref(),
                facts.poison.as_ref(),
                facts.lock.as_ref(),
                facts.paused.as_ref(),
                as_of,
            );
            view::Explanation::of(id, as_of, facts, next_cycle)
        }
        None => view::no_booking_starts_with(&args.booking_id.to_string(), as_of),
    };
    if let Some(kafka) = kafka {
        for row in &mut explanation.outbox {
            if let (Some(partition), Some(offset)) = (row.partition, row.offset) {
                row.read_back = Some(readback::read_back(
                    kafka,
                    &row.topic,
                    partition,
                    offset,
                    &row.id.to_string(),
                    READ_BACK_TIMEOUT,
                ));
            }
        }
    }
    if args.json {
        render::print_json(&explanation)?;
    } else {
        render::print(&text::text(&explanation))?;
    }
    if explanation.found {
        Ok(())
    } else {
        Err(fail(
            Failure::Threshold,
            match resolved {
                Some(id) => format!("booking {id} does not exist"),
                None => format!("no booking's id starts with {}", args.booking_id),
            },
        ))
    }
}
