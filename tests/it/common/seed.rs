//! Seeding bookings, quarantine entries and outbox rows, and reading back what the job
//! wrote (bookings as stored, digests, the invariants of the expiry write).

use crate::postgres;
use chrono::{DateTime, Utc};
use postgres::Client;
use uuid::Uuid;

/// A booking to seed. Deadlines are given relative to now, in seconds.
#[derive(Debug, Clone)]
pub struct Seed {
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub deal_id: Uuid,
    pub property_object_id: Uuid,
    pub status: &'static str,
    pub reserve_in: Option<i64>,
    pub booking_in: Option<i64>,
    pub expired_at_set: bool,
    pub version: i32,
}

impl Seed {
    pub fn new(status: &'static str, reserve_in: Option<i64>, booking_in: Option<i64>) -> Self {
        Seed {
            id: Uuid::new_v4(),
            tenant_id: Uuid::new_v4(),
            deal_id: Uuid::new_v4(),
            property_object_id: Uuid::new_v4(),
            status,
            reserve_in,
            booking_in,
            expired_at_set: false,
            version: 1,
        }
    }
    pub fn reserved(reserve_in: i64) -> Self {
        Seed::new("Reserved", Some(reserve_in), None)
    }
    pub fn booked(booking_in: i64) -> Self {
        Seed::new("Booked", Some(-86_400), Some(booking_in))
    }
}

/// Inserts the bookings in one statement; returns their ids in order.
pub fn seed(c: &mut Client, rows: &[Seed]) -> Vec<Uuid> {
    let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
    let tenants: Vec<Uuid> = rows.iter().map(|r| r.tenant_id).collect();
    let deals: Vec<Uuid> = rows.iter().map(|r| r.deal_id).collect();
    let objects: Vec<Uuid> = rows.iter().map(|r| r.property_object_id).collect();
    let statuses: Vec<&str> = rows.iter().map(|r| r.status).collect();
    let reserve: Vec<Option<f64>> = rows
        .iter()
        .map(|r| r.reserve_in.map(|s| s as f64))
        .collect();
    let booking: Vec<Option<f64>> = rows
        .iter()
        .map(|r| r.booking_in.map(|s| s as f64))
        .collect();
    let expired: Vec<bool> = rows.iter().map(|r| r.expired_at_set).collect();
    let versions: Vec<i32> = rows.iter().map(|r| r.version).collect();
    c.execute(
        "INSERT INTO crm.bookings (id, tenant_id, deal_id, property_object_id, status,
             reserve_expires_at, booking_expires_at, expired_at, created_at, updated_at, version)
         SELECT id, t, d, o, s,
                now() + r * interval '1 second', now() + b * interval '1 second',
                CASE WHEN e THEN now() - interval '1 day' END,
                now() - interval '2 days', now() - interval '2 days', v
           FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::uuid[], $5::text[],
                       $6::float8[], $7::float8[], $8::bool[], $9::int4[])
             AS x(id, t, d, o, s, r, b, e, v)",
        &[
            &ids, &tenants, &deals, &objects, &statuses, &reserve, &booking, &expired, &versions,
        ],
    )
    .expect("seed bookings");
    ids
}

/// `n` bookings of one kind.
pub fn seed_many(c: &mut Client, n: usize, make: impl Fn(usize) -> Seed) -> Vec<Uuid> {
    let rows: Vec<Seed> = (0..n).map(make).collect();
    seed(c, &rows)
}

/// A booking as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Booking {
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub deal_id: Uuid,
    pub property_object_id: Uuid,
    pub status: String,
    pub expired_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
    pub version: i32,
}

pub fn booking(c: &mut Client, id: Uuid) -> Booking {
    let r = c
        .query_one(
            "SELECT id, tenant_id, deal_id, property_object_id, status, expired_at, updated_at, version
               FROM crm.bookings WHERE id = $1",
            &[&id],
        )
        .unwrap();
    Booking {
        id: r.get(0),
        tenant_id: r.get(1),
        deal_id: r.get(2),
        property_object_id: r.get(3),
        status: r.get(4),
        expired_at: r.get(5),
        updated_at: r.get(6),
        version: r.get(7),
    }
}

pub fn status_of(c: &mut Client, id: Uuid) -> String {
    booking(c, id).status
}

pub fn count(c: &mut Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).unwrap().get(0)
}

/// A text digest of every row of every table of the schema `crm`: equal digests mean
/// nothing was written. The record of a phase's failed batch is left out: a cycle
/// whose batch rolled back writes it on purpose, for the next cycle.
pub fn checksum(c: &mut Client) -> String {
    let tables: Vec<String> = c
        .query(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'crm'
                AND tablename <> 'booking_expiration_phase_failure' ORDER BY tablename",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut out = String::new();
    for t in tables {
        let row = c
            .query_one(
                &format!(
                    "SELECT count(*), coalesce(md5(string_agg(x::text, '|' ORDER BY x::text)), '')
                       FROM crm.{t} x"
                ),
                &[],
            )
            .unwrap();
        let (n, digest): (i64, String) = (row.get(0), row.get(1));
        out.push_str(&format!("{t}:{n}:{digest}\n"));
    }
    out
}
/// Quarantines a booking (as it is now) as the cycle would, until `retry_in` seconds
/// from now.
pub fn put_in_quarantine(
    c: &mut Client,
    booking: &Seed,
    phase: &str,
    reason: &str,
    attempts: i32,
    retry_in: i64,
) {
    c.execute(
        "INSERT INTO crm.booking_expiration_poison
             (booking_id, tenant_id, phase, reason, error, sqlstate, attempts,
              first_seen_at, last_seen_at, retry_at, last_run_id, booking_version, booking_status)
         SELECT $1, $2, $3, $4, 'seeded by a test', NULL, $5,
                now() - interval '1 hour', now() - interval '1 minute',
                now() + $6 * interval '1 second', NULL, b.version, b.status::text
           FROM crm.bookings b WHERE b.id = $1",
        &[
            &booking.id,
            &booking.tenant_id,
            &phase,
            &reason,
            &attempts,
            &(retry_in as f64),
        ],
    )
    .expect("quarantine a booking");
}

/// The relay's view of an outbox row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutboxState {
    Pending,
    Published,
    Failed,
}

/// Writes one outbox row per entry of `ages` (seconds since it was written); returns
/// their ids.
pub fn insert_outbox_rows(c: &mut Client, state: OutboxState, ages: &[i64]) -> Vec<Uuid> {
    let ids: Vec<Uuid> = ages.iter().map(|_| Uuid::now_v7()).collect();
    let ages: Vec<f64> = ages.iter().map(|a| *a as f64).collect();
    let (published, failed) = match state {
        OutboxState::Pending => (false, false),
        OutboxState::Published => (true, false),
        OutboxState::Failed => (false, true),
    };
    c.execute(
        "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload, headers,
                                 occurred_at, published_at, failed_at, attempts)
         SELECT id, 'Booking', gen_random_uuid()::text, 'pin.crm.booking-expired',
                'pin.crm.booking-expired.v1', '{}'::jsonb, '{}'::jsonb,
                now() - age * interval '1 second',
                CASE WHEN $3 THEN now() END, CASE WHEN $4 THEN now() END,
                CASE WHEN $3 OR $4 THEN 1 ELSE 0 END
           FROM unnest($1::uuid[], $2::float8[]) AS x(id, age)",
        &[&ids, &ages, &published, &failed],
    )
    .expect("insert outbox rows");
    ids
}

/// The invariants of the expiry write, whatever happened before: every expired
/// booking (status *Expired with `expired_at` set) has exactly one outbox row, one
/// audit row and one timeline entry, and nothing else has any.
pub fn assert_each_expiry_written_once(c: &mut Client) -> i64 {
    assert_each_expiry_written_once_per_topic(c, 1)
}

/// As [`assert_each_expiry_written_once`] for a run that publishes on `topics` topics
/// (contract versions): one audit row and one timeline entry per expiry, and one outbox
/// row per expiry on each topic, so `topics` rows per expiry in all.
pub fn assert_each_expiry_written_once_per_topic(c: &mut Client, topics: i64) -> i64 {
    let expired = count(
        c,
        "SELECT count(*) FROM crm.bookings
          WHERE status IN ('ReserveExpired', 'BookingExpired') AND expired_at IS NOT NULL",
    );
    for (sql, what, per_expiry) in [
        (
            "SELECT count(*) FROM crm.outbox o JOIN crm.bookings b ON b.id::text = o.aggregateid
              WHERE b.status IN ('ReserveExpired', 'BookingExpired')",
            "outbox rows of expired bookings",
            topics,
        ),
        (
            "SELECT count(DISTINCT aggregateid) FROM crm.outbox",
            "bookings with an outbox row",
            1,
        ),
        (
            "SELECT count(DISTINCT (aggregateid, topic)) FROM crm.outbox",
            "bookings with an outbox row, per topic",
            topics,
        ),
        ("SELECT count(*) FROM crm.outbox", "outbox rows", topics),
        ("SELECT count(*) FROM crm.booking_audit", "audit rows", 1),
        (
            "SELECT count(DISTINCT booking_id) FROM crm.booking_audit",
            "bookings with an audit row",
            1,
        ),
        (
            "SELECT count(*) FROM crm.deal_timeline",
            "timeline entries",
            1,
        ),
    ] {
        assert_eq!(count(c, sql), expired * per_expiry, "{what}");
    }
    expired
}
/// Much history and a little active work, the shape the partial indexes exist for:
/// `terminal` finished bookings, then 1,000 active ones whose deadlines start
/// `first_deadline_min` minutes from now, one minute (reserve) and two (booking) apart.
pub fn seed_history(c: &mut Client, terminal: i32, first_deadline_min: i32) {
    c.execute(
        "INSERT INTO crm.bookings
         SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), gen_random_uuid(),
                (ARRAY['ReserveExpired','BookingExpired','Cancelled','Completed'])[1 + i % 4],
                now() - interval '30 days', now() - interval '20 days', now() - interval '20 days',
                now() - interval '40 days', now() - interval '20 days', 3
           FROM generate_series(1, $1) i",
        &[&terminal],
    )
    .expect("seed history");
    c.execute(
        "INSERT INTO crm.bookings
         SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), gen_random_uuid(),
                (ARRAY['Reserved','AwaitingPayment','Booked'])[1 + i % 3],
                now() + (i - 1 + $1) * interval '1 minute',
                now() + (i - 1 + $1) * interval '2 minutes', NULL, now(), now(), 1
           FROM generate_series(1, 1000) i",
        &[&first_deadline_min],
    )
    .expect("seed active bookings");
}

/// Makes every statement that inserts outbox rows take `seconds` longer (a statement
/// trigger), so a cycle's batches take measurable time.
pub fn slow_outbox_writes(c: &mut Client, seconds: f64) {
    c.batch_execute(&format!(
        "CREATE FUNCTION crm.slow() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_sleep({seconds}); RETURN NULL; END $$;
         CREATE TRIGGER slow AFTER INSERT ON crm.outbox
           FOR EACH STATEMENT EXECUTE FUNCTION crm.slow();"
    ))
    .expect("slow down outbox writes");
}

/// The ids (text) of the outbox rows marked published.
pub fn marked_published(c: &mut Client) -> std::collections::HashSet<String> {
    c.query(
        "SELECT id::text FROM crm.outbox WHERE published_at IS NOT NULL",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

/// The demo's data (`scripts/demo-seed.sql`), as the worked example of docs/guides/operating.md starts.
pub fn seed_demo(c: &mut Client) {
    c.batch_execute(&std::fs::read_to_string("scripts/demo-seed.sql").unwrap())
        .unwrap();
}

/// The worked example, next step: the demo's booking b1000004 made inconsistent
/// (`expired_at` set while it is still Booked), so the guard refuses it.
pub fn break_demo_booking(c: &mut Client) {
    c.execute(
        "UPDATE crm.bookings SET expired_at = now() - interval '1 day'
          WHERE id = 'b1000004-0000-4000-8000-000000000000'",
        &[],
    )
    .unwrap();
}

/// Every line of `text` fits 120 terminal columns as the report counts them
/// (`render::width`: `→`, `↳` and `…` one column each, a CJK character two), not bytes.
pub fn assert_fits_120(text: &str) {
    for line in text.lines() {
        let columns = booking_expire::testing::render::width(line);
        assert!(columns <= 120, "{columns} columns: {line}\nin:\n{text}");
    }
}

/// An outbox row as another writer would insert it: key `key`, payload `{"n": n}`, on
/// `topic`; its id (UUIDv7, so rows inserted in turn sort in that order).
pub fn insert_outbox_row(c: &mut Client, topic: &str, key: &str, n: i32) -> Uuid {
    let id = Uuid::now_v7();
    c.execute(
        "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload)
         VALUES ($1, 'Booking', $2, 'pin.crm.booking-expired', $3, $4)",
        &[&id, &key, &topic, &serde_json::json!({ "n": n })],
    )
    .unwrap();
    id
}
