//! What `backlog` reads about the database's upkeep: the outbox's dead tuples and when
//! autovacuum last visited it, the sizes of the outbox and of the partial indexes the
//! job's queries ride on, and who holds the xmin horizon back (so that VACUUM cannot
//! remove those dead tuples): old transactions of this database's sessions, prepared
//! transactions, replication slots nobody consumes.
//!
//! Plain SELECTs of the statistics views and size functions, inside the report's READ
//! ONLY transaction. Every list is cut to [`SHOWN`] entries and carries the total, so the
//! report stays short whatever piles up.
//!
//! Privileges: `pg_stat_activity` shows a role that is not a member of
//! `pg_read_all_stats` only the PID, user, application name and transaction ids of other
//! roles' sessions: not their state, nor when their transaction began. Such sessions are
//! listed apart ([`XminHorizon::hidden_sessions`]), by how many transactions old their
//! snapshot is, since their age in time cannot be read. The read-only role reads the
//! holders through `crm.booking_expiration_xmin_holders()` instead
//! (`sql/011_xmin_holders_function.sql`): a `SECURITY DEFINER` function that returns
//! what the report needs and never a query text.

use crate::Conn;
use crate::error::{Context, Result};
use chrono::{DateTime, TimeDelta, Utc};
use postgres::GenericClient;

/// Holders of each kind listed at most; the rest are counted.
pub(crate) const SHOWN: i64 = 5;

/// The outbox table's upkeep.
#[derive(Debug, Clone, PartialEq)]
pub struct TableHealth {
    pub live_tuples: i64,
    pub dead_tuples: i64,
    pub last_autovacuum: Option<DateTime<Utc>>,
    pub last_autoanalyze: Option<DateTime<Utc>>,
    /// False when autovacuum is off for the server or for this table.
    pub autovacuum_enabled: bool,
    /// The table's main fork.
    pub table_bytes: i64,
    /// All of its indexes.
    pub indexes_bytes: i64,
}

/// A partial index of `crm.bookings` or `crm.outbox` and its size.
#[derive(Debug, Clone, PartialEq)]
pub struct IndexSize {
    pub table: String,
    pub index: String,
    pub bytes: i64,
}

/// A session whose transaction (or snapshot) began longer ago than the threshold.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionHolder {
    pub pid: i32,
    pub application_name: String,
    pub user: Option<String>,
    /// `None` when the role may not see it (see the module's comment).
    pub state: Option<String>,
    pub transaction_start: Option<DateTime<Utc>>,
    pub xid: Option<String>,
    pub xmin: Option<String>,
    /// How many transactions old the oldest of its xid and xmin is.
    pub xid_age: Option<i32>,
}

/// A prepared transaction (two-phase commit) waiting longer than the threshold for its
/// COMMIT PREPARED or ROLLBACK PREPARED.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedHolder {
    pub gid: String,
    pub owner: String,
    pub prepared_at: DateTime<Utc>,
    pub xid: String,
    pub xid_age: i32,
}

/// A replication slot nobody is consuming that keeps an xmin (every table) or a
/// catalog_xmin (the system catalogs).
#[derive(Debug, Clone, PartialEq)]
pub struct SlotHolder {
    pub name: String,
    /// `physical` or `logical`.
    pub slot_type: String,
    pub database: Option<String>,
    pub xmin: Option<String>,
    pub catalog_xmin: Option<String>,
    /// How many transactions old the older of xmin and catalog_xmin is.
    pub xid_age: Option<i32>,
    /// WAL the slot keeps on disk; `None` on a standby or before its first use.
    pub retained_wal_bytes: Option<i64>,
}

/// The first few of a longer list (`shown`) and how long the list is (`total`).
#[derive(Debug, Clone, PartialEq)]
pub struct FirstOf<T> {
    pub shown: Vec<T>,
    pub total: u64,
}

impl<T> FirstOf<T> {
    fn of(shown: Vec<T>, rows: &[postgres::Row]) -> Self {
        FirstOf {
            shown,
            total: rows
                .first()
                .map_or(0, |r| r.get::<_, i64>("total").max(0) as u64),
        }
    }
}

/// What holds this database's xmin horizon back.
#[derive(Debug, Clone, PartialEq)]
pub struct XminHorizon {
    /// Held longer than this is named.
    pub threshold: TimeDelta,
    /// Whether the role may read other roles' session details (`pg_read_all_stats`).
    pub can_read_all_stats: bool,
    /// Sessions of this database whose transaction began before `as_of - threshold`,
    /// oldest first.
    pub sessions: FirstOf<SessionHolder>,
    /// Sessions of this database holding an xid or a snapshot whose details the role
    /// may not see, the most transactions behind first. Always empty for a member of
    /// `pg_read_all_stats`.
    pub hidden_sessions: FirstOf<SessionHolder>,
    /// Prepared transactions of this database older than the threshold, oldest first.
    pub prepared: FirstOf<PreparedHolder>,
    /// Inactive slots of this database, or of the whole server (physical), that hold
    /// an xmin or catalog_xmin, the most transactions behind first. A slot records no
    /// time, so an inactive one is named whatever its age: nothing moves its horizon
    /// until a consumer comes back.
    pub slots: FirstOf<SlotHolder>,
}

/// The upkeep figures of the `backlog` report.
#[derive(Debug, Clone, PartialEq)]
pub struct Hygiene {
    pub outbox: TableHealth,
    pub partial_indexes: Vec<IndexSize>,
    pub xmin_horizon: XminHorizon,
}

/// The outbox's row counts, vacuum times and sizes. The statistics are the server's
/// cumulative counters: `n_dead_tup` counts row versions deleted or updated away and
/// not yet removed by a VACUUM.
pub(crate) const OUTBOX_HEALTH_SQL: &str = "\
SELECT coalesce(s.n_live_tup, 0) AS live, coalesce(s.n_dead_tup, 0) AS dead,
       s.last_autovacuum, s.last_autoanalyze,
       current_setting('autovacuum')::boolean
         AND coalesce((SELECT o.option_value::boolean
                         FROM pg_catalog.pg_options_to_table(c.reloptions) o
                        WHERE o.option_name = 'autovacuum_enabled'), true) AS autovacuum,
       pg_relation_size(c.oid) AS table_bytes, pg_indexes_size(c.oid) AS indexes_bytes
  FROM pg_catalog.pg_class c
  LEFT JOIN pg_catalog.pg_stat_all_tables s ON s.relid = c.oid
 WHERE c.oid = 'crm.outbox'::regclass";

/// The partial indexes of the bookings and of the outbox (the claim's, the relay's
/// queue, the failed rows, the back-off), by table and name.
pub(crate) const PARTIAL_INDEXES_SQL: &str = "\
SELECT t.relname::text AS tab, c.relname::text AS idx, pg_relation_size(c.oid) AS bytes
  FROM pg_catalog.pg_index i
  JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
  JOIN pg_catalog.pg_class t ON t.oid = i.indrelid
 WHERE i.indrelid IN ('crm.bookings'::regclass, 'crm.outbox'::regclass)
   AND i.indpred IS NOT NULL
 ORDER BY t.relname, c.relname";

/// Whether the role sees every session's details (`can`), and whether it reads them
/// through `crm.booking_expiration_xmin_holders()` (`sql/011_xmin_holders_function.sql`:
/// the read-only role's way, which never returns query text) rather than
/// `pg_stat_activity` itself.
pub(crate) const READ_ALL_STATS_SQL: &str = "\
SELECT f.ok AS via_function,
       f.ok OR (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user)
            OR pg_has_role(current_user, 'pg_read_all_stats', 'USAGE') AS can
  FROM (SELECT coalesce(has_function_privilege(
                 to_regprocedure('crm.booking_expiration_xmin_holders()'), 'EXECUTE'), false) AS ok) f";

/// Where the holders are read: the narrow function when the role may call it.
const HOLDERS_FUNCTION: &str = "crm.booking_expiration_xmin_holders()";
const HOLDERS_VIEW: &str = "pg_catalog.pg_stat_activity";

/// Sessions of this database, other than the report's own, holding an xid or a
/// snapshot since before `$1 - $2` seconds; `$3` = how many to list. A hidden session
/// has no `backend_type`, so it never passes the time filter (its `xact_start` is hidden).
pub(crate) fn old_sessions_sql(source: &str) -> String {
    format!(
        "\
SELECT a.pid, coalesce(a.application_name, '') AS app, a.usename::text AS usr, a.state,
       a.xact_start, a.backend_xid::text AS xid, a.backend_xmin::text AS xmin,
       greatest(age(a.backend_xid), age(a.backend_xmin)) AS xid_age,
       count(*) OVER () AS total
  FROM {source} a
 WHERE a.pid <> pg_backend_pid()
   AND (a.backend_xid IS NOT NULL OR a.backend_xmin IS NOT NULL)
   AND (a.datname = current_database() OR a.datname IS NULL)
   AND a.xact_start < $1::timestamptz - $2::float8 * interval '1 second'
 ORDER BY a.xact_start, a.pid
 LIMIT $3"
    )
}

/// Sessions of this database holding an xid or a snapshot whose details the role may
/// not see (no `backend_type`); `$1` = how many to list. A hidden row with no user is
/// an autovacuum worker (its `ANALYZE` holds a snapshot for as long as it reads a
/// table): PostgreSQL's own upkeep, not a session anyone could end, and with no start
/// time shown it would be listed however briefly it held the snapshot.
pub(crate) fn hidden_sessions_sql(source: &str) -> String {
    format!(
        "\
SELECT a.pid, coalesce(a.application_name, '') AS app, a.usename::text AS usr, a.state,
       a.xact_start, a.backend_xid::text AS xid, a.backend_xmin::text AS xmin,
       greatest(age(a.backend_xid), age(a.backend_xmin)) AS xid_age,
       count(*) OVER () AS total
  FROM {source} a
 WHERE a.pid <> pg_backend_pid()
   AND (a.backend_xid IS NOT NULL OR a.backend_xmin IS NOT NULL)
   AND a.datname = current_database()
   AND a.backend_type IS NULL
   AND a.usesysid IS NOT NULL
 ORDER BY xid_age DESC NULLS LAST, a.pid
 LIMIT $1"
    )
}

/// Prepared transactions of this database prepared before `$1 - $2` seconds; `$3` =
/// how many to list.
pub(crate) const OLD_PREPARED_SQL: &str = "\
SELECT p.gid, p.owner::text AS owner, p.prepared, p.transaction::text AS xid,
       age(p.transaction) AS xid_age, count(*) OVER () AS total
  FROM pg_catalog.pg_prepared_xacts p
 WHERE p.database = current_database()
   AND p.prepared < $1::timestamptz - $2::float8 * interval '1 second'
 ORDER BY p.prepared, p.gid
 LIMIT $3";

/// Inactive replication slots of this database (logical) or of the server (physical)
/// keeping an xmin or a catalog_xmin; `$1` = how many to list.
pub(crate) const IDLE_SLOTS_SQL: &str = "\
SELECT s.slot_name::text AS name, s.slot_type AS kind, s.database::text AS db,
       s.xmin::text AS xmin, s.catalog_xmin::text AS catalog_xmin,
       greatest(age(s.xmin), age(s.catalog_xmin)) AS xid_age,
       CASE WHEN pg_is_in_recovery() THEN NULL
            ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn)::bigint END AS wal,
       count(*) OVER () AS total
  FROM pg_catalog.pg_replication_slots s
 WHERE NOT s.active
   AND (s.xmin IS NOT NULL OR s.catalog_xmin IS NOT NULL)
   AND (s.database IS NULL OR s.database = current_database())
 ORDER BY xid_age DESC NULLS LAST, s.slot_name
 LIMIT $1";

fn session(r: &postgres::Row) -> SessionHolder {
    SessionHolder {
        pid: r.get("pid"),
        application_name: r.get("app"),
        user: r.get("usr"),
        state: r.get("state"),
        transaction_start: r.get("xact_start"),
        xid: r.get("xid"),
        xmin: r.get("xmin"),
        xid_age: r.get("xid_age"),
    }
}

/// Reads the upkeep figures at `as_of`, naming what holds the horizon back longer
/// than `threshold`.
pub(crate) fn hygiene(
    client: &mut impl Conn,
    as_of: DateTime<Utc>,
    threshold: TimeDelta,
) -> Result<Hygiene> {
    let client = client.pg();
    let r = client
        .query_one(OUTBOX_HEALTH_SQL, &[])
        .context("cannot read the outbox's statistics")?;
    let outbox = TableHealth {
        live_tuples: r.get("live"),
        dead_tuples: r.get("dead"),
        last_autovacuum: r.get("last_autovacuum"),
        last_autoanalyze: r.get("last_autoanalyze"),
        autovacuum_enabled: r.get("autovacuum"),
        table_bytes: r.get("table_bytes"),
        indexes_bytes: r.get("indexes_bytes"),
    };
    let partial_indexes = client
        .query(PARTIAL_INDEXES_SQL, &[])
        .context("cannot read the sizes of the partial indexes")?
        .iter()
        .map(|r| IndexSize {
            table: format!("crm.{}", r.get::<_, String>("tab")),
            index: r.get("idx"),
            bytes: r.get("bytes"),
        })
        .collect();
    let stats = client
        .query_one(READ_ALL_STATS_SQL, &[])
        .context("cannot look up what the role may see of other sessions")?;
    let can_read_all_stats: bool = stats.get("can");
    let source = if stats.get("via_function") {
        HOLDERS_FUNCTION
    } else {
        HOLDERS_VIEW
    };
    // In seconds, to the microsecond (as the clock's durations are shown).
    let seconds = threshold
        .num_microseconds()
        .map_or(threshold.num_seconds() as f64, |us| us as f64 / 1e6);
    let rows = client
        .query(&old_sessions_sql(source), &[&as_of, &seconds, &SHOWN])
        .context("cannot read the sessions holding the xmin horizon")?;
    let sessions = FirstOf::of(rows.iter().map(session).collect(), &rows);
    let rows = client
        .query(&hidden_sessions_sql(source), &[&SHOWN])
        .context("cannot read the sessions holding the xmin horizon")?;
    let hidden_sessions = FirstOf::of(rows.iter().map(session).collect(), &rows);
    let rows = client
        .query(OLD_PREPARED_SQL, &[&as_of, &seconds, &SHOWN])
        .context("cannot read the prepared transactions")?;
    let prepared = FirstOf::of(
        rows.iter()
            .map(|r| PreparedHolder {
                gid: r.get("gid"),
                owner: r.get("owner"),
                prepared_at: r.get("prepared"),
                xid: r.get("xid"),
                xid_age: r.get("xid_age"),
            })
            .collect(),
        &rows,
    );
    let rows = client
        .query(IDLE_SLOTS_SQL, &[&SHOWN])
        .context("cannot read the replication slots")?;
    let slots = FirstOf::of(
        rows.iter()
            .map(|r| SlotHolder {
                name: r.get("name"),
                slot_type: r.get("kind"),
                database: r.get("db"),
                xmin: r.get("xmin"),
                catalog_xmin: r.get("catalog_xmin"),
                xid_age: r.get("xid_age"),
                retained_wal_bytes: r.get("wal"),
            })
            .collect(),
        &rows,
    );
    Ok(Hygiene {
        outbox,
        partial_indexes,
        xmin_horizon: XminHorizon {
            threshold,
            can_read_all_stats,
            sessions,
            hidden_sessions,
            prepared,
            slots,
        },
    })
}
