//! The model: what every booking must be by the rules (its status, deadlines, version
//! and whether the guard or the database refuses its expiry), and the active bookings
//! by deadline, against which the invariants are checked.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum St {
    Reserved,
    AwaitingPayment,
    Booked,
    ReserveExpired,
    BookingExpired,
    Cancelled,
    Completed,
}

impl St {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            St::Reserved => "Reserved",
            St::AwaitingPayment => "AwaitingPayment",
            St::Booked => "Booked",
            St::ReserveExpired => "ReserveExpired",
            St::BookingExpired => "BookingExpired",
            St::Cancelled => "Cancelled",
            St::Completed => "Completed",
        }
    }

    pub(super) fn active(self) -> bool {
        matches!(self, St::Reserved | St::AwaitingPayment | St::Booked)
    }

    pub(super) fn expired_into(self) -> St {
        match self {
            St::Reserved | St::AwaitingPayment => St::ReserveExpired,
            St::Booked => St::BookingExpired,
            other => panic!("{other:?} never expires"),
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct Booking {
    pub(super) status: St,
    pub(super) reserve: DateTime<Utc>,
    pub(super) booking: Option<DateTime<Utc>>,
    pub(super) version: i64,
    /// The guard refuses it: an active booking whose expired_at is set.
    pub(super) guard_bad: bool,
    /// The database refuses its expiry (how: [`Refusal`]).
    pub(super) db_bad: bool,
    pub(super) refusal: Refusal,
}

/// How the database refuses a booking's expiry, and the quarantine reason it earns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// A BEFORE trigger raises.
    Raise,
    /// A deferred constraint trigger raises 23514 (at the write: the job makes every
    /// constraint immediate).
    Deferred,
    /// A BEFORE trigger returns NULL: the update is silently dropped.
    Dropped,
}

impl Refusal {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Refusal::Raise => "raise",
            Refusal::Deferred => "deferred",
            Refusal::Dropped => "drop",
        }
    }

    /// The quarantine reason the job must record (None: not checked).
    pub(super) fn reason(self) -> Option<&'static str> {
        match self {
            Refusal::Raise => None,
            Refusal::Deferred => Some("database"),
            Refusal::Dropped => Some("update_dropped"),
        }
    }
}

/// A deadline PostgreSQL holds but chrono cannot: `infinity`, `-infinity`, a year past
/// chrono's range. The model keeps them as chrono's extremes, which order the same way.
pub(super) const ODD_DEADLINES: [(&str, DateTime<Utc>); 3] = [
    ("infinity", DateTime::<Utc>::MAX_UTC),
    ("-infinity", DateTime::<Utc>::MIN_UTC),
    ("290000-01-01 00:00:00+00", DateTime::<Utc>::MAX_UTC),
];

impl Booking {
    /// The deadline of the phase its timer runs in, while active.
    pub(super) fn deadline(&self) -> Option<DateTime<Utc>> {
        match self.status {
            St::Reserved | St::AwaitingPayment => Some(self.reserve),
            St::Booked => self.booking,
            _ => None,
        }
    }

    pub(super) fn bad(&self) -> bool {
        self.guard_bad || self.db_bad
    }
}

/// Active bookings, by deadline (for "what is due") and in a list (for a random pick).
#[derive(Default)]
pub(super) struct Active {
    pub(super) by_deadline: BTreeSet<(DateTime<Utc>, Uuid)>,
    pub(super) list: Vec<Uuid>,
    pub(super) position: HashMap<Uuid, usize>,
}

impl Active {
    pub(super) fn insert(&mut self, id: Uuid, deadline: DateTime<Utc>) {
        self.by_deadline.insert((deadline, id));
        self.position.insert(id, self.list.len());
        self.list.push(id);
    }

    pub(super) fn remove(&mut self, id: Uuid, deadline: DateTime<Utc>) {
        self.by_deadline.remove(&(deadline, id));
        if let Some(at) = self.position.remove(&id) {
            self.list.swap_remove(at);
            if let Some(moved) = self.list.get(at) {
                self.position.insert(*moved, at);
            }
        }
    }

    pub(super) fn pick(&self, rng: &mut Rng) -> Option<Uuid> {
        (!self.list.is_empty()).then(|| self.list[rng.below(self.list.len() as u64) as usize])
    }

    pub(super) fn due(&self, as_of: DateTime<Utc>) -> Vec<Uuid> {
        self.by_deadline
            .range(..(as_of, Uuid::nil()))
            .map(|(_, id)| *id)
            .collect()
    }
}

pub(super) const RESERVE_STATUSES: [St; 2] = [St::Reserved, St::AwaitingPayment];
