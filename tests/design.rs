//! Tests that lock the design in: the claim is served by the partial indexes, and a
//! batch write costs a fixed number of statements whatever its size.

mod common;

use booking_expire::domain::Phase;
use booking_expire::store::claim_sql;
use common::*;

#[test]
fn the_claim_of_each_phase_uses_its_partial_index() {
    let db = TestDb::new();
    let mut c = db.client();
    // Much history, a little active work: the shape the indexes exist for.
    c.batch_execute(
        "INSERT INTO crm.bookings
         SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), gen_random_uuid(),
                (ARRAY['ReserveExpired','BookingExpired','Cancelled','Completed'])[1 + i % 4],
                now() - interval '30 days', now() - interval '20 days', now() - interval '20 days',
                now() - interval '40 days', now() - interval '20 days', 3
           FROM generate_series(1, 30000) i;
         INSERT INTO crm.bookings
         SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), gen_random_uuid(),
                (ARRAY['Reserved','AwaitingPayment','Booked'])[1 + i % 3],
                now() + i * interval '1 minute', now() + i * interval '2 minutes', NULL,
                now(), now(), 1
           FROM generate_series(1, 1000) i;
         ANALYZE crm.bookings;",
    )
    .unwrap();
    for (phase, index) in [
        (Phase::Reserve, "ix_bookings_reserve_expires_at"),
        (Phase::Booking, "ix_bookings_booking_expires_at"),
    ] {
        // Both the custom and the generic plan (a prepared statement switches to the
        // latter after a few executions).
        for mode in ["force_custom_plan", "force_generic_plan"] {
            c.batch_execute(&format!("SET plan_cache_mode = {mode}"))
                .unwrap();
            let plan: String = c
                .query(
                    &format!("EXPLAIN {}", claim_sql(phase)),
                    &[&chrono::Utc::now(), &200_i64],
                )
                .unwrap()
                .iter()
                .map(|r| r.get::<_, String>(0))
                .collect::<Vec<_>>()
                .join("\n");
            assert!(
                plan.contains(&format!("Index Scan using {index}")),
                "{phase} {mode}:\n{plan}"
            );
            assert!(
                !plan.contains("Seq Scan on bookings"),
                "{phase} {mode}:\n{plan}"
            );
            assert!(
                !plan.contains("Sort"),
                "the index carries the ORDER BY:\n{plan}"
            );
        }
    }
}

/// Counts the statements that write each table, with statement-level triggers.
fn count_write_statements(c: &mut postgres::Client) {
    c.batch_execute(
        "CREATE TABLE public.statement_log (tbl text, op text);
         CREATE FUNCTION public.log_statement() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN INSERT INTO public.statement_log VALUES (TG_TABLE_NAME, TG_OP); RETURN NULL; END $$;
         CREATE TRIGGER log_update AFTER UPDATE ON crm.bookings
           FOR EACH STATEMENT EXECUTE FUNCTION public.log_statement();
         CREATE TRIGGER log_insert AFTER INSERT ON crm.outbox
           FOR EACH STATEMENT EXECUTE FUNCTION public.log_statement();
         CREATE TRIGGER log_insert AFTER INSERT ON crm.booking_audit
           FOR EACH STATEMENT EXECUTE FUNCTION public.log_statement();
         CREATE TRIGGER log_insert AFTER INSERT ON crm.deal_timeline
           FOR EACH STATEMENT EXECUTE FUNCTION public.log_statement();",
    )
    .unwrap();
}

fn statements(c: &mut postgres::Client) -> Vec<(String, i64)> {
    c.query(
        "SELECT tbl, count(*) FROM public.statement_log GROUP BY tbl ORDER BY tbl",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

#[test]
fn a_batch_write_costs_the_same_statements_for_1_or_1000_rows() {
    for rows in [1_usize, 1_000] {
        let db = TestDb::new();
        let mut c = db.client();
        count_write_statements(&mut c);
        seed_many(&mut c, rows, |i| Seed::booked(-10_000 + i as i64));
        let result = db.run_once(&["--batch-size", "1000"]);
        assert_eq!(result.booking, rows as i64);
        assert_eq!(
            statements(&mut c),
            [
                ("booking_audit".to_owned(), 1),
                ("bookings".to_owned(), 1),
                ("deal_timeline".to_owned(), 1),
                ("outbox".to_owned(), 1),
            ],
            "{rows} rows"
        );
    }
}
