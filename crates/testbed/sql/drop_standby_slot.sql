-- A standby's replication slot on its primary, dropped once the standby's WAL sender
-- has gone (a slot in use cannot be dropped): prints 'gone' once the slot no longer
-- exists, dropped now or before. psql -v slot=NAME.
SELECT CASE
    WHEN NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = :'slot') THEN 'gone'
    WHEN EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = :'slot' AND NOT active)
        THEN (SELECT 'gone' FROM pg_drop_replication_slot(:'slot'))
END;
