//! The metric families only `backlog --format prometheus` prints, never pushed after a
//! run: the lateness of each phase's next claim, the other producers' rows of a shared
//! outbox, and the database's upkeep (read by
//! `store::read_report`, written by `report/backlog.rs` and `report/hygiene.rs`). The
//! families both print and push are in `metrics.rs`.

use super::metrics::Family;

pub const BACKLOG_LATENESS: Family = Family {
    name: "crm_booking_expiration_backlog_lateness_seconds",
    help: "Seconds past its deadline of the overdue booking the next run-once claims first \
     (quarantined ones left out), per phase (0 when none).",
};
pub const OUTBOX_OTHER_PRODUCERS: Family = Family {
    name: "crm_booking_expiration_outbox_other_producers_rows",
    help: "Other producers' rows of a shared crm.outbox (types not in --outbox-types), by the \
     job's columns, per state (pending, failed): not the job's, never in its outbox figures.",
};
pub const OUTBOX_LIVE_TUPLES: Family = Family {
    name: "crm_booking_expiration_outbox_live_tuples",
    help: "Live rows of crm.outbox, as the server's statistics estimate them.",
};
pub const OUTBOX_DEAD_TUPLES: Family = Family {
    name: "crm_booking_expiration_outbox_dead_tuples",
    help: "Dead row versions of crm.outbox that no VACUUM has removed yet.",
};
pub const OUTBOX_AUTOVACUUM_ENABLED: Family = Family {
    name: "crm_booking_expiration_outbox_autovacuum_enabled",
    help: "1 when autovacuum may visit crm.outbox, 0 when it is off for the server or the table.",
};
pub const OUTBOX_LAST_AUTOVACUUM: Family = Family {
    name: "crm_booking_expiration_outbox_last_autovacuum_timestamp_seconds",
    help: "Unix time of autovacuum's last visit to crm.outbox (0 when never).",
};
pub const OUTBOX_LAST_AUTOANALYZE: Family = Family {
    name: "crm_booking_expiration_outbox_last_autoanalyze_timestamp_seconds",
    help: "Unix time of autovacuum's last ANALYZE of crm.outbox (0 when never).",
};
pub const OUTBOX_TABLE_BYTES: Family = Family {
    name: "crm_booking_expiration_outbox_table_bytes",
    help: "Size of crm.outbox's table (main fork), in bytes.",
};
pub const OUTBOX_INDEXES_BYTES: Family = Family {
    name: "crm_booking_expiration_outbox_indexes_bytes",
    help: "Size of all of crm.outbox's indexes, in bytes.",
};
pub const PARTIAL_INDEX_BYTES: Family = Family {
    name: "crm_booking_expiration_partial_index_bytes",
    help: "Size of each partial index of crm.bookings and crm.outbox, in bytes.",
};
pub const XMIN_HOLDERS: Family = Family {
    name: "crm_booking_expiration_xmin_horizon_holders",
    help: "What holds the xmin horizon back, per kind: sessions and prepared transactions older \
     than --xmin-horizon-age, inactive replication slots, sessions the role may not see.",
};
pub const XMIN_OLDEST_AGE: Family = Family {
    name: "crm_booking_expiration_xmin_horizon_oldest_age_seconds",
    help: "Age of the oldest session transaction or prepared transaction holding the xmin \
     horizon back longer than --xmin-horizon-age, per kind (0 when none).",
};
pub const XMIN_OLDEST_XID_AGE: Family = Family {
    name: "crm_booking_expiration_xmin_horizon_oldest_xid_age",
    help: "Transactions since the xid or xmin of the oldest holder of each kind (0 when none).",
};

/// All of them: the push after a run sends every other family `backlog` prints, with
/// the same help text.
pub const FAMILIES: &[Family] = &[
    BACKLOG_LATENESS,
    OUTBOX_OTHER_PRODUCERS,
    OUTBOX_LIVE_TUPLES,
    OUTBOX_DEAD_TUPLES,
    OUTBOX_AUTOVACUUM_ENABLED,
    OUTBOX_LAST_AUTOVACUUM,
    OUTBOX_LAST_AUTOANALYZE,
    OUTBOX_TABLE_BYTES,
    OUTBOX_INDEXES_BYTES,
    PARTIAL_INDEX_BYTES,
    XMIN_HOLDERS,
    XMIN_OLDEST_AGE,
    XMIN_OLDEST_XID_AGE,
];
