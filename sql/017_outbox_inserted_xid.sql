-- squawk-ignore-file require-lock-timeout,require-statement-timeout -- booking-expire migrate sets both before each statement
-- The inserting transaction of every outbox row, and the relay's sweep by it (migration 17).
--
-- Why: the relay fetches rows by seq, above the highest it dealt with, and rows that
-- commit below that are found later. A seq says nothing of when its row commits: a
-- sequence with CACHE above 1 hands each session a block of values, so a session can
-- commit, long after, a seq lower than rows other sessions committed and the relay sent;
-- a writer whose first write is the outbox insert draws its seq before its transaction
-- has an id. So the relay no longer reasons about seq at all to find the late rows: each
-- row records the transaction that inserted it, and the relay sweeps, snapshot to
-- snapshot, the rows of every transaction that committed in between (as PgQ batches
-- by snapshots). docs/design.md ("The commit sweep") gives the argument.
--
-- Online, in three steps that never rewrite crm.outbox:
--   1. the column, NULL, with no default: a catalog change, under an ACCESS EXCLUSIVE
--      lock for an instant (the rows written before have none: they all committed before
--      step 2 could take its lock, and the relay's first sweep reads them by seq);
--   2. its default, for the rows inserted from then on (another catalog change, the same
--      instant's lock): pg_current_xact_id() is the id of the inserting transaction, the
--      one every snapshot lists while it is in progress, prepared transactions included;
--   3. its index, built CONCURRENTLY, over the rows that have one (none yet at first):
--      the sweep reads the rows of a few transactions, never the table.
-- The release before neither reads nor writes the column: a rollback across this
-- migration is safe (its rows then have none; this release's sweep reads those by seq,
-- as it reads the rows from before the migration).
ALTER TABLE crm.outbox ADD COLUMN IF NOT EXISTS inserted_xid xid8 NULL;

-- squawk-ignore prefer-robust-stmts -- SET DEFAULT run again sets the same default: it may run again as it is
ALTER TABLE crm.outbox ALTER COLUMN inserted_xid SET DEFAULT pg_current_xact_id();

CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_outbox_inserted_xid
    ON crm.outbox (inserted_xid)
    WHERE inserted_xid IS NOT NULL;

-- The relay's sweep: the snapshot it has swept up to (every own row of a transaction
-- that snapshot saw committed, with seq <= floor, is settled), when, and the snapshot of
-- the fetch whose mark set high (the sweep's top while batches are in flight).
ALTER TABLE crm.booking_expiration_relay_state
    ADD COLUMN IF NOT EXISTS swept pg_snapshot NULL,
    ADD COLUMN IF NOT EXISTS swept_at timestamptz NULL,
    ADD COLUMN IF NOT EXISTS high_snapshot pg_snapshot NULL;
