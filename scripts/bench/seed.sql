-- Bench data for scripts/bench.sh, on a migrated database. psql variables:
--   history  terminal bookings (ReserveExpired/BookingExpired/Cancelled/Completed), months old
--   active   active bookings whose deadlines are still in the future
--   overdue  overdue active bookings per phase (Reserved/AwaitingPayment, and Booked)
-- Deadlines are relative to now(): the overdue ones are 1–2 h past, the future ones at
-- least a day ahead, so a template built now is still "the same data" an hour later.
-- Tenants and deals repeat as they do in a CRM (20 tenants, one deal per 2 bookings).
\set ON_ERROR_STOP 1

INSERT INTO crm.bookings
SELECT gen_random_uuid(),
       md5('tenant' || i % 20)::uuid,
       md5('deal' || i / 2)::uuid,
       md5('object' || i)::uuid,
       (ARRAY['ReserveExpired', 'BookingExpired', 'Cancelled', 'Completed'])[1 + i % 4],
       now() - interval '120 days' + i * interval '5 seconds',
       now() - interval '100 days' + i * interval '5 seconds',
       CASE WHEN i % 4 < 2 THEN now() - interval '100 days' + i * interval '5 seconds' END,
       now() - interval '130 days', now() - interval '100 days' + i * interval '5 seconds',
       3
  FROM generate_series(1, :history) i;

INSERT INTO crm.bookings
SELECT gen_random_uuid(),
       md5('tenant' || i % 20)::uuid,
       md5('adeal' || i / 2)::uuid,
       md5('aobject' || i)::uuid,
       (ARRAY['Reserved', 'AwaitingPayment', 'Booked'])[1 + i % 3],
       now() + interval '1 day' + i * interval '10 seconds',
       now() + interval '2 days' + i * interval '10 seconds',
       NULL, now(), now(), 1
  FROM generate_series(1, :active) i;

INSERT INTO crm.bookings
SELECT gen_random_uuid(),
       md5('tenant' || i % 20)::uuid,
       md5('odeal' || i / 2)::uuid,
       md5('oobject' || i)::uuid,
       (ARRAY['Reserved', 'AwaitingPayment'])[1 + i % 2],
       now() - interval '2 hours' + i * interval '10 milliseconds',
       now() + interval '3 days',
       NULL, now() - interval '1 day', now() - interval '1 day', 1
  FROM generate_series(1, :overdue) i;

INSERT INTO crm.bookings
SELECT gen_random_uuid(),
       md5('tenant' || i % 20)::uuid,
       md5('bdeal' || i / 2)::uuid,
       md5('bobject' || i)::uuid,
       'Booked',
       now() - interval '2 days',
       now() - interval '2 hours' + i * interval '10 milliseconds',
       NULL, now() - interval '3 days', now() - interval '1 day', 2
  FROM generate_series(1, :overdue) i;

-- Hint bits set, visibility map full, statistics fresh: what a live database that
-- autovacuum looks after has, so no contender pays for the first touch of the data.
VACUUM (FREEZE, ANALYZE);
