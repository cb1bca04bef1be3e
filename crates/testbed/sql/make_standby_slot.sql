-- A standby's replication slot on its primary, made again before the standby starts
-- again (its stop dropped it), reserving WAL from now on: prints 'made', or 'there'
-- when it exists already. psql -v slot=NAME.
SELECT CASE
    WHEN EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = :'slot') THEN 'there'
    ELSE (SELECT 'made' FROM pg_create_physical_replication_slot(:'slot', true))
END;
