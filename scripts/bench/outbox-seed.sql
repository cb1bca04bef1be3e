-- Pending outbox rows for the relay bench (scripts/bench.sh), on a migrated database:
-- :rows events of the exact shape run-once writes (payload and CloudEvents headers),
-- one key per row, in write order. psql variables: rows, and stale (optional, below).
\set ON_ERROR_STOP 1

\if :{?stale}
ALTER TABLE crm.outbox SET (autovacuum_enabled = false);
INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload, occurred_at, published_at)
SELECT gen_random_uuid(), 'Booking', gen_random_uuid()::text, 'pin.crm.booking-expired',
       'pin.crm.booking-expired.v1', '{}', now() - interval '1 day', now() - interval '1 day'
  FROM generate_series(1, 1000);
ANALYZE crm.outbox;
\endif

INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload, headers, occurred_at)
SELECT e.message_id, 'Booking', e.booking_id::text, 'pin.crm.booking-expired',
       'pin.crm.booking-expired.v1',
       jsonb_build_object('BookingId', e.booking_id, 'TenantId', e.tenant_id,
                          'DealId', e.deal_id, 'PropertyObjectId', e.object_id,
                          'Phase', e.phase, 'ExpiredAt', e.at_text),
       jsonb_build_object('ce_specversion', '1.0', 'ce_id', e.message_id,
                          'ce_type', 'pin.crm.booking-expired',
                          'ce_source', '/pin/crm/booking-expiration',
                          'ce_subject', e.booking_id, 'ce_time', e.at_text,
                          'content-type', 'application/json', 'ce_contractversion', '1',
                          'ce_correlationid', e.run_id,
                          'traceparent', '00-' || replace(e.run_id::text, '-', '') || '-'
                                         || right(replace(e.message_id::text, '-', ''), 16) || '-01'),
       e.at
  FROM (SELECT i, gen_random_uuid() AS message_id, gen_random_uuid() AS booking_id,
               md5('tenant' || i % 20)::uuid AS tenant_id, md5('deal' || i / 2)::uuid AS deal_id,
               md5('object' || i)::uuid AS object_id,
               CASE WHEN i % 2 = 0 THEN 'Reserve' ELSE 'Booking' END AS phase,
               md5('run' || i / 400)::uuid AS run_id,
               now() - interval '10 minutes' + (i / 400) * interval '1 minute' AS at,
               to_char((now() - interval '10 minutes' + (i / 400) * interval '1 minute')
                       AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at_text
          FROM generate_series(1, :rows) i) e
 ORDER BY e.i;

-- With -v stale=1: the state after an outage. The statistics are those of the outbox
-- before the burst (1,000 published rows, analyzed), the burst above is never analyzed,
-- and autovacuum stays off for the table (copies keep the setting), so no run sees it
-- catch up.
\if :{?stale}
\else
VACUUM (FREEZE, ANALYZE);
\endif
