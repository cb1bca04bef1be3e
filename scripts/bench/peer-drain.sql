-- The peer of `run-once --max-batches N` for the drain bench (scripts/bench.sh): the
-- two statements of peer.sql, looped per phase until a batch comes back short, each
-- batch its own transaction (COMMIT inside DO, PostgreSQL 11+), as a DBA's pg_cron job
-- would drain a backlog. Run as `psql -X -q -v batch_size=200 -f peer-drain.sql`.
-- Keep the statements in step with peer.sql.
\set ON_ERROR_STOP 1
SELECT set_config('bench.batch_size', :'batch_size', false);

DO $drain$
DECLARE
    batch int := current_setting('bench.batch_size')::int;
    n int;
BEGIN
    LOOP
        WITH ctx AS MATERIALIZED (
            SELECT gen_random_uuid() AS run_id, now() AS as_of,
                   to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at_text
        ), claimed AS MATERIALIZED (
            SELECT b.id, b.status
              FROM crm.bookings b
             WHERE b.status IN ('Reserved', 'AwaitingPayment') AND b.reserve_expires_at < now()
               AND NOT EXISTS (SELECT 1 FROM crm.booking_expiration_poison p
                                WHERE p.booking_id = b.id AND p.retry_at > now())
             ORDER BY b.reserve_expires_at, b.id
             LIMIT batch
               FOR UPDATE OF b SKIP LOCKED
        ), expired AS (
            UPDATE crm.bookings b
               SET status = 'ReserveExpired', expired_at = ctx.as_of, updated_at = ctx.as_of,
                   version = b.version + 1
              FROM claimed c, ctx
             WHERE b.id = c.id AND b.expired_at IS NULL
            RETURNING b.id, b.tenant_id, b.deal_id, b.property_object_id, b.version,
                      c.status AS from_status, gen_random_uuid() AS message_id
        ), ev AS (
            SELECT e.*, ctx.run_id, ctx.as_of,
                   jsonb_build_object('BookingId', e.id, 'TenantId', e.tenant_id, 'DealId', e.deal_id,
                                      'PropertyObjectId', e.property_object_id, 'Phase', 'Reserve',
                                      'ExpiredAt', ctx.at_text) AS payload,
                   jsonb_build_object('ce_specversion', '1.0', 'ce_id', e.message_id,
                                      'ce_type', 'pin.crm.booking-expired',
                                      'ce_source', '/pin/crm/booking-expiration',
                                      'ce_subject', e.id, 'ce_time', ctx.at_text,
                                      'content-type', 'application/json', 'ce_contractversion', '1',
                                      'ce_correlationid', ctx.run_id,
                                      'traceparent', '00-' || replace(ctx.run_id::text, '-', '') || '-'
                                                     || right(replace(e.message_id::text, '-', ''), 16) || '-01') AS headers
              FROM expired e, ctx
        ), audit AS (
            INSERT INTO crm.booking_audit (booking_id, tenant_id, from_status, to_status, version, actor, run_id, at)
            SELECT id, tenant_id, from_status, 'ReserveExpired', version, 'system:booking-expiration', run_id, as_of FROM ev
        ), timeline AS (
            INSERT INTO crm.deal_timeline (deal_id, tenant_id, booking_id, kind, occurred_at, correlation_id, details)
            SELECT deal_id, tenant_id, id, 'BookingReserveExpired', as_of, run_id, payload FROM ev
        ), outbox AS (
            INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload, headers, occurred_at)
            SELECT message_id, 'Booking', id::text, 'pin.crm.booking-expired', 'pin.crm.booking-expired.v1',
                   payload, headers, as_of FROM ev
        ), released AS (
            DELETE FROM crm.booking_expiration_poison p USING ev WHERE p.booking_id = ev.id
        )
        SELECT count(*) FROM ev INTO n;
        COMMIT;
        EXIT WHEN n < batch;
    END LOOP;
    LOOP
        WITH ctx AS MATERIALIZED (
            SELECT gen_random_uuid() AS run_id, now() AS as_of,
                   to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at_text
        ), claimed AS MATERIALIZED (
            SELECT b.id, b.status
              FROM crm.bookings b
             WHERE b.status = 'Booked' AND b.booking_expires_at < now()
               AND NOT EXISTS (SELECT 1 FROM crm.booking_expiration_poison p
                                WHERE p.booking_id = b.id AND p.retry_at > now())
             ORDER BY b.booking_expires_at, b.id
             LIMIT batch
               FOR UPDATE OF b SKIP LOCKED
        ), expired AS (
            UPDATE crm.bookings b
               SET status = 'BookingExpired', expired_at = ctx.as_of, updated_at = ctx.as_of,
                   version = b.version + 1
              FROM claimed c, ctx
             WHERE b.id = c.id AND b.expired_at IS NULL
            RETURNING b.id, b.tenant_id, b.deal_id, b.property_object_id, b.version,
                      c.status AS from_status, gen_random_uuid() AS message_id
        ), ev AS (
            SELECT e.*, ctx.run_id, ctx.as_of,
                   jsonb_build_object('BookingId', e.id, 'TenantId', e.tenant_id, 'DealId', e.deal_id,
                                      'PropertyObjectId', e.property_object_id, 'Phase', 'Booking',
                                      'ExpiredAt', ctx.at_text) AS payload,
                   jsonb_build_object('ce_specversion', '1.0', 'ce_id', e.message_id,
                                      'ce_type', 'pin.crm.booking-expired',
                                      'ce_source', '/pin/crm/booking-expiration',
                                      'ce_subject', e.id, 'ce_time', ctx.at_text,
                                      'content-type', 'application/json', 'ce_contractversion', '1',
                                      'ce_correlationid', ctx.run_id,
                                      'traceparent', '00-' || replace(ctx.run_id::text, '-', '') || '-'
                                                     || right(replace(e.message_id::text, '-', ''), 16) || '-01') AS headers
              FROM expired e, ctx
        ), audit AS (
            INSERT INTO crm.booking_audit (booking_id, tenant_id, from_status, to_status, version, actor, run_id, at)
            SELECT id, tenant_id, from_status, 'BookingExpired', version, 'system:booking-expiration', run_id, as_of FROM ev
        ), timeline AS (
            INSERT INTO crm.deal_timeline (deal_id, tenant_id, booking_id, kind, occurred_at, correlation_id, details)
            SELECT deal_id, tenant_id, id, 'BookingExpired', as_of, run_id, payload FROM ev
        ), outbox AS (
            INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload, headers, occurred_at)
            SELECT message_id, 'Booking', id::text, 'pin.crm.booking-expired', 'pin.crm.booking-expired.v1',
                   payload, headers, as_of FROM ev
        ), released AS (
            DELETE FROM crm.booking_expiration_poison p USING ev WHERE p.booking_id = ev.id
        )
        SELECT count(*) FROM ev INTO n;
        COMMIT;
        EXIT WHEN n < batch;
    END LOOP;
END
$drain$;
