//! The statuses a booking may hold and the phases whose timers expire it.

use std::fmt;
use std::str::FromStr;

/// Every status `crm.bookings.status` may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    Reserved,
    AwaitingPayment,
    Booked,
    ReserveExpired,
    BookingExpired,
    Cancelled,
    Completed,
}

impl Status {
    pub const ALL: [Status; 7] = [
        Status::Reserved,
        Status::AwaitingPayment,
        Status::Booked,
        Status::ReserveExpired,
        Status::BookingExpired,
        Status::Cancelled,
        Status::Completed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Reserved => "Reserved",
            Status::AwaitingPayment => "AwaitingPayment",
            Status::Booked => "Booked",
            Status::ReserveExpired => "ReserveExpired",
            Status::BookingExpired => "BookingExpired",
            Status::Cancelled => "Cancelled",
            Status::Completed => "Completed",
        }
    }

    /// The phase whose timer runs while a booking is in this status; `None` for the
    /// terminal statuses: they never expire.
    pub fn active_phase(self) -> Option<Phase> {
        match self {
            Status::Reserved | Status::AwaitingPayment => Some(Phase::Reserve),
            Status::Booked => Some(Phase::Booking),
            Status::ReserveExpired
            | Status::BookingExpired
            | Status::Cancelled
            | Status::Completed => None,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Status {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Status::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or(())
    }
}

/// Which timer expired: the reserve's or the booking's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    Reserve,
    Booking,
}

impl Phase {
    pub const ALL: [Phase; 2] = [Phase::Reserve, Phase::Booking];

    /// Its place in [`Phase::ALL`]: the index of its entry in an array kept per phase.
    pub fn slot(self) -> usize {
        match self {
            Phase::Reserve => 0,
            Phase::Booking => 1,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Reserve => "Reserve",
            Phase::Booking => "Booking",
        }
    }

    /// The statuses a booking has while this phase's timer runs.
    pub fn active_statuses(self) -> &'static [Status] {
        match self {
            Phase::Reserve => &[Status::Reserved, Status::AwaitingPayment],
            Phase::Booking => &[Status::Booked],
        }
    }

    /// The terminal status an expiry in this phase leads to.
    pub fn expired_status(self) -> Status {
        match self {
            Phase::Reserve => Status::ReserveExpired,
            Phase::Booking => Status::BookingExpired,
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_through_text() {
        for status in Status::ALL {
            assert_eq!(status.as_str().parse::<Status>(), Ok(status));
        }
        for phase in Phase::ALL {
            for status in phase.active_statuses() {
                assert_eq!(status.active_phase(), Some(phase));
            }
        }
    }

    #[test]
    fn a_phase_s_slot_is_its_place_in_all() {
        for (i, phase) in Phase::ALL.into_iter().enumerate() {
            assert_eq!(phase.slot(), i, "{phase}");
        }
    }
}
