//! A no-loss test's world, shared by the deterministic cases and the seeded workload:
//! its database with the ledger (what committed transactions wrote, what the purge
//! deleted), its topic and relay, the checks against the ledger, and the writers' SQL
//! (rows, the sequence's CACHE, the inserts' delay, xids).

use crate::common;
use crate::postgres;

use std::collections::{BTreeMap, HashSet};
use std::process::Command;
use std::time::{Duration, Instant};

use common::kafka::{consume, create_topic, records_on, shared_brokers, unique_topic};
use common::{Background, Run, TestDb, json_lines};
use postgres::Client;
use serde_json::Value;

/// The job's own event type: its rows notify the relay as they commit.
pub(crate) const OWN: &str = "pin.crm.booking-expired";
/// Another producer's type that the relays of the tests that name it in
/// `--outbox-types` publish too (its rows do not notify).
pub(crate) const THEIRS: &str = "crm.deal-won";
/// A type no relay of these tests names: never sent, never deleted.
pub(crate) const FOREIGN: &str = "crm.note-added";
/// `--outbox-types` of a relay that publishes [`OWN`] and [`THEIRS`].
pub(crate) const BOTH: &str = "pin.crm.booking-expired,crm.deal-won";

const PARTITIONS: i32 = 6;

/// The ledger of a test's database: every outbox row a committed transaction wrote
/// (`noloss.written`, by an AFTER INSERT trigger, so in the writer's own transaction),
/// every row deleted (`noloss.deleted`, by an AFTER DELETE trigger: the purge's), and
/// a BEFORE INSERT trigger that routes every row to the test's topic (`run-once` writes
/// the contract's) and sleeps up to `noloss.knobs.max_delay` seconds (random), after
/// the row's `seq` was drawn and before the row is written (so before the writer's xid,
/// when the insert is its first write).
const LEDGER: &str = "
CREATE SCHEMA noloss;
CREATE TABLE noloss.knobs (topic text NOT NULL, max_delay float8 NOT NULL);
CREATE TABLE noloss.written (id uuid PRIMARY KEY, seq bigint NOT NULL, type text NOT NULL);
CREATE TABLE noloss.deleted (id uuid PRIMARY KEY, seq bigint NOT NULL);
CREATE FUNCTION noloss.before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE k noloss.knobs;
BEGIN
  SELECT * INTO k FROM noloss.knobs;
  NEW.topic := k.topic;
  IF NEW.aggregateid LIKE 'gate:%' THEN
    -- A gated writer waits here, its seq drawn and no xid taken, while the test holds
    -- the advisory lock named by the rest of its key.
    PERFORM pg_advisory_lock(substr(NEW.aggregateid, 6)::int8);
    PERFORM pg_advisory_unlock(substr(NEW.aggregateid, 6)::int8);
  END IF;
  IF k.max_delay > 0 THEN PERFORM pg_sleep(random() * k.max_delay); END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER noloss_before BEFORE INSERT ON crm.outbox
  FOR EACH ROW EXECUTE FUNCTION noloss.before_insert();
CREATE FUNCTION noloss.written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO noloss.written VALUES (NEW.id, NEW.seq, NEW.type); RETURN NULL; END $$;
CREATE TRIGGER noloss_written AFTER INSERT ON crm.outbox
  FOR EACH ROW EXECUTE FUNCTION noloss.written();
CREATE FUNCTION noloss.deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO noloss.deleted VALUES (OLD.id, OLD.seq) ON CONFLICT DO NOTHING;
  RETURN NULL;
END $$;
CREATE TRIGGER noloss_deleted AFTER DELETE ON crm.outbox
  FOR EACH ROW EXECUTE FUNCTION noloss.deleted();
";

/// A test's world: its database (with the [`LEDGER`]), its topic, and how its relay
/// runs (`--legacy-marks`, `--outbox-types`).
pub(crate) struct World {
    pub db: TestDb,
    pub brokers: String,
    pub topic: String,
    pub legacy: &'static str,
    pub types: &'static str,
}

impl World {
    /// On the suite's server.
    pub fn new(legacy: &'static str, types: &'static str) -> Self {
        Self::on(TestDb::new(), legacy, types)
    }

    /// On `db` (e.g. one on a server of the test's own).
    pub fn on(db: TestDb, legacy: &'static str, types: &'static str) -> Self {
        let brokers = shared_brokers();
        let topic = unique_topic();
        // A relay whose clock a test moved on may stamp its records hours ahead: the
        // broker takes them (newer brokers refuse a record more than an hour ahead of
        // their clock by default).
        create_topic(
            &brokers,
            &topic,
            PARTITIONS,
            &[("message.timestamp.after.max.ms", "9223372036854775807")],
        );
        db.client()
            .batch_execute(LEDGER)
            .expect("install the ledger");
        db.client()
            .execute("INSERT INTO noloss.knobs VALUES ($1, 0)", &[&topic])
            .unwrap();
        World {
            db,
            brokers,
            topic,
            legacy,
            types,
        }
    }

    pub fn client(&self) -> Client {
        self.db.client()
    }

    /// The relay's own types.
    pub fn own_types(&self) -> Vec<&'static str> {
        self.types.split(',').collect()
    }

    /// The flags of this world's relay, then `extra`.
    fn relay_args<'a>(&'a self, extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec![
            "relay-outbox",
            "--brokers",
            &self.brokers,
            "--message-timeout",
            "5s",
            "--legacy-marks",
            self.legacy,
            "--outbox-types",
            self.types,
        ];
        args.extend_from_slice(extra);
        args
    }

    /// The binary's `relay-outbox` with this world's flags and `extra`.
    pub fn relay_command(&self, extra: &[&str]) -> Command {
        self.db.command(&self.relay_args(extra))
    }

    /// One relay run that must succeed, its clock `ahead` hours ahead of the real one
    /// (the database's untouched): its result, as the binary prints it. With the real
    /// clock it is the binary; with one moved on, the same relay in process with a
    /// clock of the test's ([`Ahead`]), as the simulation drives it: libfaketime cannot
    /// move the binary's clock alone, since librdkafka's waits go by the real-time
    /// clock through C11's `cnd_timedwait`, which libfaketime does not intercept (its
    /// threads slept the two hours).
    pub fn relay(&self, ahead: u32, extra: &[&str]) -> Value {
        if ahead > 0 {
            return self
                .relay_in_process(ahead, extra)
                .unwrap_or_else(|(code, e)| {
                    panic!("relay-outbox, its clock {ahead} h on, failed ({code}): {e}")
                });
        }
        let run = Run::of(self.relay_command(extra).output().unwrap());
        assert_eq!(run.code, 0, "relay-outbox failed:\n{}", run.stderr);
        let lines = json_lines(&run.stdout);
        assert_eq!(lines.len(), 1, "one JSON line: {}", run.stdout);
        lines.into_iter().next().unwrap()
    }

    /// [`World::relay`] in process, its clock `ahead` hours on: its result, or the code
    /// the binary would have exited with and the error.
    pub fn relay_in_process(&self, ahead: u32, extra: &[&str]) -> Result<Value, (u8, String)> {
        use booking_expire::testing::cli::{Cli, Command};
        use booking_expire::testing::clock::{Ambient, SystemMonotonic};
        use booking_expire::testing::config::RelayConfig;
        use booking_expire::testing::relay::{RelayResult, relay_outbox};
        use booking_expire::testing::shutdown::Shutdown;
        use clap::Parser;
        let mut args = vec!["booking-expire"];
        args.extend(self.relay_args(extra));
        args.extend(["--database-url", &self.db.url]);
        let cfg = match Cli::try_parse_from(args).unwrap().command {
            Command::RelayOutbox(args) => RelayConfig::from_args(&args).unwrap(),
            _ => unreachable!(),
        };
        let mut result = RelayResult {
            run_id: uuid::Uuid::new_v4(),
            ..Default::default()
        };
        let clock = Ahead(chrono::TimeDelta::hours(i64::from(ahead)));
        let ambient = Ambient {
            clock: &clock,
            monotonic: &SystemMonotonic,
            shutdown: &Shutdown::new(),
        };
        match relay_outbox(&cfg, ambient, &mut result) {
            Ok(()) => Ok(serde_json::to_value(&result).unwrap()),
            Err(e) => Err((
                booking_expire::testing::exit::failure_of(&e).code(),
                format!("{e:#}"),
            )),
        }
    }

    /// A relay following for up to ten minutes (the test ends it with SIGTERM).
    pub fn follow(&self) -> Background {
        Background::start(self.relay_command(&["--follow", "600s"]))
    }

    /// The ce_id of every record on the topic now (each once, however often sent).
    pub fn on_topic(&self) -> HashSet<String> {
        let n = records_on(&self.brokers, &self.topic, PARTITIONS) as usize;
        let got = consume(
            &self.brokers,
            &self.topic,
            PARTITIONS,
            n,
            Duration::from_secs(60),
        );
        assert!(
            got.len() >= n,
            "{} of the topic's {n} records read",
            got.len()
        );
        got.into_iter()
            .map(|m| m.headers["ce_id"].clone())
            .collect()
    }

    /// Every committed row of the relay's own types: id → (seq, type).
    pub fn committed_own(&self) -> BTreeMap<String, (i64, String)> {
        self.client()
            .query(
                "SELECT id::text, seq, type FROM noloss.written WHERE type = ANY($1)",
                &[&self.own_types()],
            )
            .unwrap()
            .iter()
            .map(|r| (r.get(0), (r.get(1), r.get(2))))
            .collect()
    }

    /// Relay runs (the clock `ahead` hours on, see [`World::relay`]) until every
    /// committed own row is on
    /// the topic, or until three runs in a row sent nothing while some are still
    /// missing (each run sweeps at its start and its end; none had anything due later),
    /// or two minutes passed. Returns what the topic holds then.
    pub fn drain(&self, ahead: u32) -> HashSet<String> {
        let started = Instant::now();
        let mut idle = 0;
        loop {
            let result = &self.relay(ahead, &[]);
            let got = self.on_topic();
            let missing = self
                .committed_own()
                .keys()
                .filter(|id| !got.contains(*id))
                .count();
            if missing == 0 {
                return got;
            }
            let quiet = result["Skipped"] == false
                && result["Published"] == 0
                && result["Waiting"] == 0
                && result["Retrying"] == 0;
            idle = if quiet { idle + 1 } else { 0 };
            if idle >= 3 || started.elapsed() > Duration::from_secs(120) {
                return got;
            }
        }
    }

    /// The property: every committed own row's ce_id is on the topic (`got`), and no
    /// own row was deleted before it was sent; no row of another type was sent or
    /// deleted. `context` says which test (and seed) it is.
    pub fn assert_none_lost(&self, got: &HashSet<String>, context: &str) {
        let committed = self.committed_own();
        let mut c = self.client();
        let deleted: HashSet<String> = c
            .query("SELECT id::text FROM noloss.deleted", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut purged_unsent = Vec::new();
        let mut never_sent = Vec::new();
        for (id, (seq, r#type)) in &committed {
            if got.contains(id) {
                continue;
            }
            let row = format!("seq {seq} ({type}) ce_id {id}");
            if deleted.contains(id) {
                purged_unsent.push(row);
            } else {
                never_sent.push(row);
            }
        }
        let theirs: Vec<String> = c
            .query(
                "SELECT id::text FROM noloss.written WHERE NOT type = ANY($1)",
                &[&self.own_types()],
            )
            .unwrap()
            .iter()
            .map(|r| r.get::<_, String>(0))
            .filter(|id| got.contains(id) || deleted.contains(id))
            .collect();
        assert!(
            purged_unsent.is_empty() && never_sent.is_empty() && theirs.is_empty(),
            "{context}: of {} committed own rows, {} purged unsent: {}; {} never sent \
             (still in the outbox): {}; rows of other types sent or deleted: {theirs:?}",
            committed.len(),
            purged_unsent.len(),
            first(&purged_unsent),
            never_sent.len(),
            first(&never_sent),
        );
    }
}

/// The system clock, `.0` ahead.
struct Ahead(chrono::TimeDelta);

impl booking_expire::testing::clock::Clock for Ahead {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        booking_expire::testing::clock::to_micros(chrono::Utc::now() + self.0)
    }
}

/// The first few of a list, for a failure message.
fn first(rows: &[String]) -> String {
    let shown: Vec<&str> = rows.iter().take(20).map(String::as_str).collect();
    let more = rows.len().saturating_sub(shown.len());
    if more > 0 {
        format!("[{}, and {more} more]", shown.join("; "))
    } else {
        format!("[{}]", shown.join("; "))
    }
}

/// An outbox row a test wrote: its ce_id and seq.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub id: String,
    pub seq: i64,
}

/// Inserts one outbox row of `type` in `c`'s transaction (or alone).
pub(crate) fn insert(c: &mut impl postgres::GenericClient, r#type: &str, key: &str) -> Row {
    let r = c
        .query_one(
            "INSERT INTO crm.outbox (id, aggregatetype, aggregateid, type, topic, payload)
             VALUES (gen_random_uuid(), 'Booking', $1, $2, 'routed by noloss', '{\"n\": 1}')
             RETURNING id::text, seq",
            &[&key, &r#type],
        )
        .unwrap();
    Row {
        id: r.get(0),
        seq: r.get(1),
    }
}

/// Sets the CACHE of the outbox's `seq` sequence (`ALTER SEQUENCE`, as a DBA would);
/// sessions that hold a block of values already keep it until it is used up.
pub(crate) fn set_cache(c: &mut Client, cache: i64) -> Result<(), postgres::Error> {
    c.batch_execute(&format!(
        "DO $$ BEGIN
           EXECUTE format('ALTER SEQUENCE %s CACHE {cache}',
                          pg_get_serial_sequence('crm.outbox', 'seq'));
         END $$"
    ))
}

/// The longest a row's insert sleeps in the ledger's trigger (0: none).
pub(crate) fn set_max_delay(c: &mut Client, seconds: f64) {
    c.execute("UPDATE noloss.knobs SET max_delay = $1", &[&seconds])
        .unwrap();
}

/// `--legacy-marks` of the deterministic cases: off, the rule under test, unless
/// `NO_LOSS_LEGACY_MARKS` says otherwise (`on` shows the cases pass where the relay
/// also reads the outbox's own columns).
pub(crate) fn legacy_marks() -> &'static str {
    match std::env::var("NO_LOSS_LEGACY_MARKS").as_deref() {
        Ok("on") => "on",
        Ok("off") | Err(_) => "off",
        Ok(other) => panic!("NO_LOSS_LEGACY_MARKS={other}: on or off"),
    }
}

/// The xid of `c`'s transaction, taking one if it has none yet.
pub(crate) fn take_xid(c: &mut impl postgres::GenericClient) -> String {
    c.query_one("SELECT pg_current_xact_id()::text", &[])
        .unwrap()
        .get(0)
}

/// Waits until no transaction that took its xid before `xid` is still running on the
/// server (other tests' too): the snapshot's xmin has reached it.
pub(crate) fn wait_older_transactions_ended(c: &mut Client, xid: &str) {
    common::wait_until(
        Duration::from_secs(120),
        &format!("the transactions older than xid {xid} to end"),
        || {
            c.query_one(
                "SELECT pg_snapshot_xmin(pg_current_snapshot()) >= $1::text::xid8",
                &[&xid],
            )
            .unwrap()
            .get(0)
        },
    );
}
