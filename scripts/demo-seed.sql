-- Demo data: a small CRM with bookings in every kind of state, some overdue.
--
-- The ids are fixed, so the docs' examples can name them: booking
-- b<T>00000<C>-0000-4000-8000-000000000000, deal d<T>00000<C>-…, property object
-- c<T>00000<C>-…, where T is the tenant (1 or 2) and C the case below (1–8); e.g.
-- b1000004-0000-4000-8000-000000000000 is tenant 1's overdue Booked booking. The deadlines are relative to now(), so the demo behaves
-- the same whenever it runs; only the timestamps differ from run to run.
INSERT INTO crm.bookings (id, tenant_id, deal_id, property_object_id, status,
                          reserve_expires_at, booking_expires_at, expired_at,
                          created_at, updated_at, version)
SELECT format('b%s00000%s-0000-4000-8000-000000000000', t.n, s.c)::uuid,
       t.tenant_id,
       format('d%s00000%s-0000-4000-8000-000000000000', t.n, s.c)::uuid,
       format('c%s00000%s-0000-4000-8000-000000000000', t.n, s.c)::uuid,
       s.status, now() + s.reserve_in, now() + s.booking_in, NULL,
       now() - interval '3 days', now() - interval '3 days', 1
  FROM (VALUES (1, '11111111-1111-4111-8111-111111111111'::uuid),
               (2, '22222222-2222-4222-8222-222222222222'::uuid)) AS t(n, tenant_id)
 CROSS JOIN (VALUES
       -- overdue: the next cycle expires these
       (1, 'Reserved',        interval '-2 hours',   NULL::interval),
       (2, 'Reserved',        interval '-5 minutes', NULL),
       (3, 'AwaitingPayment', interval '-1 minute',  NULL),
       (4, 'Booked',          interval '-1 day',     interval '-10 minutes'),
       -- not yet due: these stay active until their deadline passes
       (5, 'Reserved',        interval '1 hour',     NULL),
       (6, 'Booked',          interval '-1 day',     interval '2 days'),
       -- terminal: never expire, whatever their deadlines say
       (7, 'Cancelled',       interval '-1 day',     NULL),
       (8, 'Completed',       interval '-9 days',    interval '-2 days')
 ) AS s(c, status, reserve_in, booking_in);
