-- Demo data: a small CRM with bookings in every status, some overdue.
-- Deadlines are relative to now() so the demo works whenever it runs.
INSERT INTO crm.bookings (id, tenant_id, deal_id, property_object_id, status,
                          reserve_expires_at, booking_expires_at, expired_at,
                          created_at, updated_at, version)
SELECT gen_random_uuid(), t.tenant_id, gen_random_uuid(), gen_random_uuid(), s.status,
       now() + s.reserve_in, now() + s.booking_in, NULL,
       now() - interval '3 days', now() - interval '3 days', 1
  FROM (VALUES ('11111111-1111-4111-8111-111111111111'::uuid),
               ('22222222-2222-4222-8222-222222222222'::uuid)) AS t(tenant_id)
 CROSS JOIN (VALUES
       -- overdue: these expire
       ('Reserved',        interval '-2 hours',   NULL::interval),
       ('Reserved',        interval '-5 minutes', NULL),
       ('AwaitingPayment', interval '-1 minute',  NULL),
       ('Booked',          interval '-1 day',     interval '-10 minutes'),
       -- not yet due: these stay
       ('Reserved',        interval '1 hour',     NULL),
       ('Booked',          interval '-1 day',     interval '2 days'),
       -- terminal: never touched
       ('Cancelled',       interval '-1 day',     NULL),
       ('Completed',       interval '-9 days',    interval '-2 days')
 ) AS s(status, reserve_in, booking_in);
