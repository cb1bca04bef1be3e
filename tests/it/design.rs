//! Tests that lock the design in: the claim is served by the partial indexes, the
//! skipped count reads only up to the claimed key (also in a drain's generic plan), and
//! a batch costs a fixed number of statements whatever its size.

use crate::common;
use crate::postgres;

use booking_expire_domain::Phase;
use booking_expire_store::SchemaNeed;
use booking_expire_store::testing::{
    MARK_PUBLISHED_SQL, PENDING_SQL, WAITING_SQL, catalog_statements, claim_counting_sql, claim_sql,
};
use common::*;

/// The claim's "no previous batch" key: a cycle's first batch.
const NO_DEADLINE: Option<chrono::DateTime<chrono::Utc>> = None;
const NO_ID: Option<uuid::Uuid> = None;

#[test]
fn the_claim_of_each_phase_uses_its_partial_index() {
    let db = TestDb::new();
    let mut c = db.client();
    // Much history, a little active work: the shape the indexes exist for.
    seed_history(&mut c, 30_000, 1);
    c.batch_execute("ANALYZE crm.bookings").unwrap();
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
                    &[&chrono::Utc::now(), &200_i64, &NO_DEADLINE, &NO_ID],
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

#[test]
fn the_skipped_count_reads_only_up_to_the_claimed_key_in_its_generic_plan() {
    // A drain runs the same prepared statement batch after batch, and after five the
    // session switches to the generic plan: the count's bound to the last claimed key
    // (computed by the same statement, after its claim) must still be an index
    // condition there, or every batch reads the whole backlog.
    let db = TestDb::new();
    let mut c = db.client();
    c.batch_execute(
        "INSERT INTO crm.bookings
         SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), gen_random_uuid(),
                (ARRAY['Reserved','AwaitingPayment','Booked'])[1 + i % 3],
                now() - interval '1 day' + i * interval '1 second',
                now() - interval '1 day' + i * interval '1 second', NULL, now(), now(), 1
           FROM generate_series(1, 30000) i;
         ANALYZE crm.bookings;",
    )
    .unwrap();
    c.batch_execute("SET plan_cache_mode = force_generic_plan")
        .unwrap();
    for (phase, index) in [
        (Phase::Reserve, "ix_bookings_reserve_expires_at"),
        (Phase::Booking, "ix_bookings_booking_expires_at"),
    ] {
        let plan: String = c
            .query(
                &format!("EXPLAIN {}", claim_counting_sql(phase)),
                &[&chrono::Utc::now(), &200_i64, &NO_DEADLINE, &NO_ID],
            )
            .unwrap()
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(plan.contains(index), "{phase}:\n{plan}");
        let index_conds: Vec<&str> = plan.lines().filter(|l| l.contains("Index Cond")).collect();
        assert!(
            index_conds.iter().any(|l| l.contains("<= ROW(")),
            "{phase}: the bound to the claimed key is not an index condition:\n{plan}"
        );
        // Both the claim and the count start after the previous batch's key, in the
        // index too: a drain's batch does not walk the dead entries its predecessors
        // left at the index head.
        assert_eq!(
            index_conds
                .iter()
                .filter(|l| l.contains(", id) > ROW("))
                .count(),
            2,
            "{phase}: the previous batch's key is not an index condition of both:\n{plan}"
        );
    }
}

/// Calls per statement text that the binary made in this database, from
/// pg_stat_statements (statement-level counts, also of BEGIN, COMMIT AND CHAIN and of
/// statements run by triggers).
fn statement_calls(c: &mut postgres::Client) -> Option<Vec<(String, i64)>> {
    let dealloc = |c: &mut postgres::Client| -> i64 {
        c.query_one("SELECT dealloc FROM pg_stat_statements_info", &[])
            .unwrap()
            .get(0)
    };
    let before = dealloc(c);
    let rows = c
        .query(
            "SELECT query, calls FROM pg_stat_statements
              WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                AND query NOT LIKE '%pg_stat_statements%'",
            &[],
        )
        .unwrap();
    // Entries evicted meanwhile (other tests fill the table too) make the counts
    // unreliable: the caller tries again.
    if dealloc(c) != before {
        return None;
    }
    Some(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

#[test]
fn a_batch_issues_the_same_statements_for_1_or_1000_rows() {
    // Every statement a cycle sends — session set-up, claim (with its skipped count),
    // write, commit and chain — counted by PostgreSQL itself.
    // pg_stat_statements is a server-level setting (preloaded, track = all), so the
    // count runs on a throwaway server of the test's own, configured as
    // scripts/pg-start.sh does, whatever server DATABASE_URL names; and no other test's
    // statements share its table.
    let server = OwnPostgres::start();
    let mut per_size = Vec::new();
    for rows in [1_usize, 1_000] {
        let calls = (0..3)
            .find_map(|_| {
                let db = TestDb::new_on(&server.url);
                let mut c = db.client();
                if let Err(e) = c
                    .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                    .and_then(|()| c.batch_execute("SELECT 1 FROM pg_stat_statements LIMIT 1"))
                {
                    let e = e
                        .as_db_error()
                        .map_or_else(|| e.to_string(), |d| d.message().to_owned());
                    panic!(
                        "this test counts statements with pg_stat_statements, which the server \
                         scripts/pg-start.sh started cannot use ({e}): it needs PostgreSQL's \
                         contrib (Debian's postgresql-contrib)"
                    );
                }
                let track: String = c
                    .query_one("SHOW pg_stat_statements.track", &[])
                    .unwrap()
                    .get(0);
                assert_eq!(
                    track, "all",
                    "this test needs pg_stat_statements.track = all (statements run by \
                     triggers count too), as scripts/pg-start.sh configures"
                );
                seed_many(&mut c, rows, |i| Seed::booked(-10_000 + i as i64));
                let before = statement_calls(&mut c)?;
                let result = db.run_once(&["--batch-size", "1000"]);
                assert_eq!(result.booking, rows as i64);
                let after = statement_calls(&mut c)?;
                let mut made: Vec<(String, i64)> = after
                    .into_iter()
                    .map(|(q, n)| {
                        let earlier = before.iter().find(|(b, _)| *b == q).map_or(0, |b| b.1);
                        (q, n - earlier)
                    })
                    // The outbox's wake-up (sql/013_outbox_notify_own_rows.sql) is a row
                    // trigger for the job's own type, so that other producers' inserts
                    // never notify: it runs once per outbox row (one per booking here),
                    // in the server, and its notifications collapse into one per
                    // transaction. Counted apart from what the binary sends.
                    .map(|(q, n)| {
                        let per_row = if q.starts_with("SELECT pg_notify(") {
                            rows as i64
                        } else {
                            0
                        };
                        (q, n - per_row)
                    })
                    .filter(|(_, n)| *n > 0)
                    .collect();
                made.sort();
                Some(made)
            })
            .expect("pg_stat_statements evicted entries during three attempts in a row");
        per_size.push((rows, calls));
    }
    let (_, one) = &per_size[0];
    let (_, thousand) = &per_size[1];
    assert!(
        one.iter().any(|(q, _)| q.starts_with("COMMIT AND CHAIN")),
        "the count must see the batch's own statements:\n{one:#?}"
    );
    assert_eq!(
        one, thousand,
        "statements of a 1-row and a 1000-row batch differ"
    );
}

/// An outbox that a burst filled after its last ANALYZE, as after an outage when
/// autovacuum has not caught up: the statistics say no row is pending (they were taken
/// when all 1,000 rows were published), while 50,000 are. Autovacuum is off for the
/// table so it stays that way during the test.
fn stale_outbox(c: &mut postgres::Client) {
    c.batch_execute(
        "ALTER TABLE crm.outbox SET (autovacuum_enabled = false);
         INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload, occurred_at, published_at)
         SELECT gen_random_uuid(), 'Booking', gen_random_uuid()::text, 'pin.crm.booking-expired',
                'pin.crm.booking-expired.v1', '{}', now() - interval '1 hour', now()
           FROM generate_series(1, 1000);
         ANALYZE crm.outbox;
         INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload, occurred_at)
         SELECT gen_random_uuid(), 'Booking', gen_random_uuid()::text, 'pin.crm.booking-expired',
                'pin.crm.booking-expired.v1', '{}', now()
           FROM generate_series(1, 50000);",
    )
    .unwrap();
}

fn explain(
    c: &mut postgres::Client,
    mode: &str,
    sql: &str,
    params: &[&(dyn postgres::types::ToSql + Sync)],
) -> String {
    c.batch_execute(&format!("SET plan_cache_mode = {mode}"))
        .unwrap();
    c.query(&format!("EXPLAIN (COSTS OFF) {sql}"), params)
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_relays_statements_keep_their_index_plans_on_an_outbox_a_burst_filled_after_its_last_analyze()
{
    let db = TestDb::new();
    let mut c = db.client();
    stale_outbox(&mut c);
    let batch = c
        .query(
            "SELECT id, seq FROM crm.outbox WHERE published_at IS NULL ORDER BY seq LIMIT 500",
            &[],
        )
        .unwrap();
    let seqs: Vec<i64> = batch.iter().map(|r| r.get(1)).collect();
    let (first, last) = (seqs[0], seqs[seqs.len() - 1]);
    let receipts: serde_json::Map<String, serde_json::Value> = seqs
        .iter()
        .map(|seq| (seq.to_string(), serde_json::json!([0, 0])))
        .collect();
    let receipts = serde_json::Value::Object(receipts);
    let now = chrono::Utc::now();
    // The job's outbox types, as the relay binds them: a filter on the same indexes.
    let own = booking_expire_domain::OutboxTypes::default();
    let types = own.as_slice();
    // Stale first, then once ANALYZE has seen the burst: the same plans.
    for (analyze, mode) in [
        (false, "force_custom_plan"),
        (false, "force_generic_plan"),
        (true, "force_custom_plan"),
        (true, "force_generic_plan"),
    ] {
        if analyze {
            c.batch_execute("ANALYZE crm.outbox").unwrap();
        }
        // The queue: in seq order from the pending index (no sort, no scan of the
        // table); the older row of the same key by the key index, once per fetched row.
        // With the keys of two batches in flight, as the pipelined relay fetches.
        let in_flight: Vec<String> = (0..1000)
            .map(|_| uuid::Uuid::new_v4().to_string())
            .collect();
        // With a topic that cannot take its rows: they are left out by a hash too.
        let waiting_topics = vec!["pin.crm.booking-expired.v9".to_owned()];
        let plan = explain(
            &mut c,
            mode,
            PENDING_SQL,
            &[
                &500_i64,
                &now,
                &in_flight,
                &1_000_000_i64,
                &booking_expire_store::testing::FETCH_BYTES,
                &types,
                &waiting_topics,
                &booking_expire_store::WAITING_FOR_TOPIC,
            ],
        );
        let lines: Vec<&str> = plan.lines().map(str::trim).collect();
        let scans: Vec<&str> = lines
            .iter()
            .copied()
            .map(|l| l.trim_start_matches("->  "))
            .filter(|l| l.contains("Scan") && !l.starts_with("Subquery Scan"))
            .collect();
        assert_eq!(
            scans,
            [
                "Index Scan using ix_outbox_pending on outbox o",
                "Index Scan using ix_outbox_backing_off on outbox w"
            ],
            "{mode}:\n{plan}"
        );
        assert!(
            lines.contains(&"Index Cond: ((aggregateid = o.aggregateid) AND (seq < o.seq))"),
            "{mode}:\n{plan}"
        );
        // The sizes are summed over the fetched rows, above the queue's limit.
        assert!(lines[1].starts_with("->  WindowAgg"), "{mode}:\n{plan}");
        let limit = lines.iter().position(|l| l.starts_with("->  Limit"));
        let scan = lines.iter().position(|l| l.contains("ix_outbox_pending"));
        assert!(limit.is_some() && limit < scan, "{mode}:\n{plan}");
        // The keys in flight: one hash per fetch, not a search of the array per row
        // (PostgreSQL 15 prints "NOT (hashed SubPlan 1)", 18 "NOT (ANY (aggregateid =
        // (hashed SubPlan 1).col1))").
        assert!(plan.contains("hashed SubPlan 1"), "{mode}:\n{plan}");
        assert!(!plan.contains("<> ALL"), "{mode}:\n{plan}");
        assert!(
            !plan.contains("Seq Scan") && !plan.contains("Materialize"),
            "{mode}:\n{plan}"
        );
        assert!(!plan.contains("Sort"), "{mode}:\n{plan}");

        // The mark: the batch's span of the queue, one table, no join.
        let plan = explain(
            &mut c,
            mode,
            MARK_PUBLISHED_SQL,
            &[&seqs, &receipts, &now, &first, &last, &types],
        );
        let lines: Vec<&str> = plan.lines().map(str::trim).collect();
        assert_eq!(lines[0], "Update on outbox o", "{mode}:\n{plan}");
        assert_eq!(
            lines[1], "->  Index Scan using ux_outbox_seq on outbox o",
            "{mode}:\n{plan}"
        );
        // The span and the rows' own seqs, all in the one index.
        assert!(
            lines[2].starts_with("Index Cond: ((seq >= ")
                && lines[2].contains("AND (seq <= ")
                && lines[2].contains("AND (seq = ANY ("),
            "{mode}:\n{plan}"
        );
        // The job's type is a filter on the rows the span found, never another scan.
        assert!(
            lines[3].starts_with("Filter: ((published_at IS NULL) AND (type = ANY ("),
            "{mode}:\n{plan}"
        );
        assert_eq!(lines.len(), 4, "{mode}:\n{plan}");

        // The rows that wait, read at the end of each run: the few rows with a
        // back-off, from their partial index, never a scan of the burst; the pending
        // rows of the topics that wait for their topic only when one does (a one-time
        // filter on the list keeps that scan from running when it is empty).
        let no_topic: Vec<String> = Vec::new();
        let plan = explain(
            &mut c,
            mode,
            WAITING_SQL,
            &[
                &now,
                &booking_expire_store::WAITING_FOR_TOPIC,
                &types,
                &no_topic,
            ],
        );
        let scans: Vec<&str> = plan
            .lines()
            .map(|l| l.trim().trim_start_matches("->  "))
            .filter(|l| l.contains("Scan") && !l.starts_with("Subquery Scan"))
            .collect();
        // A custom plan drops the second part outright; a generic one keeps it behind
        // the one-time filter.
        let pending = "Index Scan using ix_outbox_pending on outbox outbox_1";
        let backing_off = "Index Scan using ix_outbox_backing_off on outbox";
        assert!(
            scans == [backing_off] || scans == [backing_off, pending],
            "{mode}:\n{plan}"
        );
        assert!(
            scans.len() == 1 || plan.contains("One-Time Filter: (cardinality("),
            "{mode}:\n{plan}"
        );
        // With a topic that waits.
        let a_topic = vec!["pin.crm.booking-expired.v9".to_owned()];
        let plan = explain(
            &mut c,
            mode,
            WAITING_SQL,
            &[
                &now,
                &booking_expire_store::WAITING_FOR_TOPIC,
                &types,
                &a_topic,
            ],
        );
        // The back-offs still by their index. The count of the waiting topic's rows
        // reads every pending row of it, by the pending index or (an outbox that is
        // mostly pending, as this burst) the table: once per run, only while a topic
        // waits, and never a write.
        assert!(plan.contains(backing_off), "{mode}:\n{plan}");
    }
}

#[test]
fn the_claim_keeps_its_partial_index_on_bookings_a_burst_filled_after_their_last_analyze() {
    let db = TestDb::new();
    let mut c = db.client();
    // Statistics taken on history only (no active row), then 50,000 overdue active rows
    // that no ANALYZE has seen.
    c.batch_execute(
        "ALTER TABLE crm.bookings SET (autovacuum_enabled = false);
         INSERT INTO crm.bookings
         SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), gen_random_uuid(),
                'Completed', now() - interval '9 days', now() - interval '8 days', NULL,
                now(), now(), 3
           FROM generate_series(1, 2000);
         ANALYZE crm.bookings;
         INSERT INTO crm.bookings
         SELECT gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), gen_random_uuid(),
                (ARRAY['Reserved','AwaitingPayment','Booked'])[1 + i % 3],
                now() - interval '1 day' + i * interval '1 second',
                now() - interval '1 day' + i * interval '1 second', NULL, now(), now(), 1
           FROM generate_series(1, 50000) i;",
    )
    .unwrap();
    let now = chrono::Utc::now();
    for (phase, index) in [
        (Phase::Reserve, "ix_bookings_reserve_expires_at"),
        (Phase::Booking, "ix_bookings_booking_expires_at"),
    ] {
        for mode in ["force_custom_plan", "force_generic_plan"] {
            let plan = explain(
                &mut c,
                mode,
                &claim_sql(phase),
                &[&now, &200_i64, &NO_DEADLINE, &NO_ID],
            );
            assert!(
                plan.contains(&format!("Index Scan using {index} on bookings b")),
                "{phase} {mode}:\n{plan}"
            );
            assert!(!plan.contains("Seq Scan"), "{phase} {mode}:\n{plan}");
            assert!(!plan.contains("Sort"), "{phase} {mode}:\n{plan}");
        }
    }
}

/// The preflight asks the catalog at every run of every writing command. Each table and
/// column it checks is looked up by the catalog's indexes, never by reading the whole
/// of `pg_attribute` or `pg_class`: on a host whose other applications have thousands
/// of tables those scans took milliseconds at every run, and more as the host grew.
/// The planner prefers the scans on a catalog this small, so a join that lets it choose
/// shows here too.
#[test]
fn the_preflights_catalog_reads_look_up_each_column_by_index() {
    let db = TestDb::new();
    let mut c = db.client();
    for need in [SchemaNeed::Cycle, SchemaNeed::Relay, SchemaNeed::Report] {
        for sql in catalog_statements(need) {
            let plan = explain(&mut c, "auto", &sql, &[]);
            for catalog in ["pg_attribute", "pg_class"] {
                assert!(
                    !plan.contains(&format!("Seq Scan on {catalog}")),
                    "{need:?}: a scan of {catalog}:\n{sql}\n{plan}"
                );
            }
        }
    }
}
