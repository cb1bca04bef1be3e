//! What the harness makes on the suite's server (test databases, the run's template,
//! roles), recorded so that a run that died before its destructors ran (SIGKILL, a
//! crash, libtest's exit) leaves nothing for good: the next run sweeps it.
//!
//! The record is a table of the harness's own, `objects`, in a database of its own,
//! `be_test_registry`, on the suite's server (not in the maintenance database: on
//! PostgreSQL 15 a user with only `CREATEDB CREATEROLE` may not create tables there).
//! Each run takes a random run id and holds the session advisory lock
//! `(LOCK_SPACE, run id)` there on a session kept for its whole life; it records an
//! object with its run id before creating it, and forgets it once dropped. At its start
//! a run sweeps every run whose lock it can take: that run's sessions are gone, so it
//! is over, and its objects are dropped. A concurrent run (two runs on one shared
//! `DATABASE_URL`) holds its lock, so its objects are never touched.
//!
//! Topics are on the record too when the broker is the user's (`KAFKA_BROKERS`; a
//! throwaway broker goes with its run): every topic name the harness hands out
//! ([`super::kafka::unique_topic`]) is recorded, and a later run deletes the topics of
//! the runs that are over on the broker `KAFKA_BROKERS` names then (a topic that was
//! never made there, e.g. one of a broker of a test's own, is simply forgotten). So a
//! run's topics go at the next run's start, a killed run's included.

use crate::postgres;
use std::sync::{Mutex, OnceLock};

use postgres::error::SqlState;
use postgres::{Client, NoTls};

use super::*;

/// The name of the harness's own database on the suite's server.
pub const REGISTRY_DB: &str = "be_test_registry";
/// The first key of the runs' advisory locks in that database ("betr").
const LOCK_SPACE: i32 = 0x6265_7472;

/// What the harness makes, as the sweep drops it.
#[derive(Clone, Copy)]
pub enum Made {
    Database,
    Role,
    Topic,
}

impl Made {
    fn as_str(self) -> &'static str {
        match self {
            Made::Database => "database",
            Made::Role => "role",
            Made::Topic => "topic",
        }
    }
}

/// This run's id and the session that holds its lock (and records its objects).
struct Registry {
    session: Mutex<Client>,
    run: i32,
}

/// This run's registry, set up on first use: the database and table made if missing,
/// the run's lock taken, the previous runs' leftovers swept.
fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let admin_url = admin_url();
        let mut admin = Client::connect(&admin_url, NoTls).expect("connect as admin");
        match admin.batch_execute(&format!("CREATE DATABASE {REGISTRY_DB}")) {
            Ok(()) => {}
            // Made before, or by a concurrent run just now.
            Err(e)
                if e.code() == Some(&SqlState::DUPLICATE_DATABASE)
                    || e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {}
            Err(e) => panic!("create the harness's database {REGISTRY_DB}: {e}"),
        }
        let mut session = Client::connect(&with_database(&admin_url, REGISTRY_DB), NoTls)
            .unwrap_or_else(|e| panic!("connect to the harness's database {REGISTRY_DB}: {e}"));
        session
            .batch_execute(&format!(
                "BEGIN;
                 SELECT pg_advisory_xact_lock({LOCK_SPACE}, 0);
                 CREATE TABLE IF NOT EXISTS objects (
                     name text PRIMARY KEY,
                     kind text NOT NULL,
                     run integer NOT NULL,
                     recorded_at timestamptz NOT NULL DEFAULT now());
                 -- The kinds, topics added: a table made before them gets the new check.
                 DO $$ BEGIN
                   IF NOT EXISTS (SELECT FROM pg_constraint
                                   WHERE conrelid = 'objects'::regclass
                                     AND conname = 'objects_kinds') THEN
                     ALTER TABLE objects DROP CONSTRAINT IF EXISTS objects_kind_check;
                     ALTER TABLE objects ADD CONSTRAINT objects_kinds
                       CHECK (kind IN ('database', 'role', 'topic'));
                   END IF;
                 END $$;
                 COMMIT;"
            ))
            .expect("create the harness's table of objects");
        let run = loop {
            // Positive, at random: 1 ..= 2^31 - 1.
            let run = ((uuid::Uuid::new_v4().as_u128() as u32 >> 1) as i32).max(1);
            let free: bool = session
                .query_one("SELECT pg_try_advisory_lock($1, $2)", &[&LOCK_SPACE, &run])
                .unwrap()
                .get(0);
            if free {
                break run;
            }
        };
        sweep(&mut session, &mut admin);
        Registry {
            session: Mutex::new(session),
            run,
        }
    })
}

/// Drops the objects of every run that is over (its lock is free), then forgets them.
/// The runs' ids this run took included: rows under it predate it (it records nothing
/// before its sweep), and taking a lock a session holds already succeeds.
fn sweep(session: &mut Client, admin: &mut Client) {
    let runs: Vec<i32> = session
        .query("SELECT DISTINCT run FROM objects", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for run in runs {
        let over: bool = session
            .query_one("SELECT pg_try_advisory_lock($1, $2)", &[&LOCK_SPACE, &run])
            .unwrap()
            .get(0);
        if !over {
            continue;
        }
        // Databases first: a role's grants in them go with them.
        let objects = session
            .query(
                "SELECT name, kind FROM objects WHERE run = $1 ORDER BY kind = 'role', name",
                &[&run],
            )
            .unwrap();
        let brokers = std::env::var("KAFKA_BROKERS").ok();
        for row in objects {
            let (name, kind): (String, String) = (row.get(0), row.get(1));
            let dropped = match kind.as_str() {
                "database" => admin
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .map_err(|e| e.to_string()),
                "topic" => match &brokers {
                    Some(brokers) => super::kafka_admin::delete_topic(brokers, &name),
                    // Kept on record for a run that has the broker.
                    None => continue,
                },
                _ => admin
                    .batch_execute(&format!("DROP ROLE IF EXISTS {name}"))
                    .map_err(|e| e.to_string()),
            };
            match dropped {
                Ok(()) => {
                    session
                        .execute("DELETE FROM objects WHERE name = $1", &[&name])
                        .unwrap();
                }
                // Kept on record: the next run tries again.
                Err(e) => eprintln!("could not sweep the {kind} {name} of an earlier run: {e}"),
            }
        }
        session
            .query_one("SELECT pg_advisory_unlock($1, $2)", &[&LOCK_SPACE, &run])
            .unwrap();
    }
}

/// Records that this run is about to make `name` on the suite's server (before it
/// makes it, so that a run killed in between leaves a record, not an orphan).
pub fn record_made(kind: Made, name: &str) {
    let registry = registry();
    registry
        .session
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .execute(
            "INSERT INTO objects (name, kind, run) VALUES ($1, $2, $3)",
            &[&name, &kind.as_str(), &registry.run],
        )
        .unwrap_or_else(|e| panic!("record the {} {name}: {e}", kind.as_str()));
}

/// Forgets `name` once this run has dropped it.
pub fn forget_made(name: &str) {
    let registry = registry();
    let _ = registry
        .session
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .execute("DELETE FROM objects WHERE name = $1", &[&name]);
}
