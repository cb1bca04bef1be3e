//! No event lost: every committed row of the relay's own types reaches its topic, and
//! the purge never deletes one that was not sent, whatever the writers do. The writers
//! are plain SQL sessions and the job's own `run-once`, as the CRM's are: sequences
//! with a CACHE (a session draws a lower `seq` after another committed a higher one),
//! a `seq` drawn before the transaction has an xid (its first write is the outbox
//! insert), inserts slowed by a trigger, long and prepared transactions, rollbacks;
//! beside them the real relay (runs and `--follow`), killed at random moments, and
//! PostgreSQL restarted. What is asserted is seen from the outside only: the rows each
//! committed transaction wrote (a ledger its own trigger fills in the same
//! transaction), the rows deleted (another trigger), and the `ce_id` headers on the
//! topic; never the relay's own state.
//!
//! `world` holds what a test stands on (its database with the ledger, its topic, its
//! relay, the writers' SQL), `cases` the deterministic interleavings (each the shape of
//! a loss found on a real server), `random` the seeded workload behind
//! [`random_writers_never_lose_an_event`]: `NO_LOSS_SEED=S` replays seed S (its
//! workload; the interleavings are the machine's), `NO_LOSS_SECONDS` sets how long the
//! writers write (default 45).

mod cases;
mod random;
mod world;

/// The seeded workload (see `random`): writers of random sequence caches, trigger
/// delays, long, prepared and rolled back transactions, a `seq` drawn before or after
/// the xid, beside `run-once` cycles and the relay (following, killed, purging under a
/// clock moved on), PostgreSQL restarted; then every committed own row on the topic.
#[test]
fn random_writers_never_lose_an_event() {
    random::run();
}
