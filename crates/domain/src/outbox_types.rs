//! Which rows of the outbox are the job's own: the event types (the outbox's `type`
//! column) the relay and the operator commands read, send, mark, count, re-queue and
//! purge. A CRM's outbox is shared with other producers (other contracts of the same
//! aggregate among them); their rows are never touched. The default is the job's own
//! type alone; a deployment whose relay publishes the whole outbox names every type.

use super::event::EVENT_TYPE;

/// The flag and its environment variable, as messages name them.
pub const OUTBOX_TYPES_INPUT: &str = "--outbox-types / BOOKING_EXPIRATION_OUTBOX_TYPES";

/// The most types one list may name.
pub const MAX_OUTBOX_TYPES: usize = 100;
/// The longest type taken, in bytes.
pub const MAX_OUTBOX_TYPE_LEN: usize = 255;

/// The outbox event types the job owns, in the order given: never empty, no repeats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxTypes(Vec<String>);

impl Default for OutboxTypes {
    /// The job's own type, `pin.crm.booking-expired` (every contract version's rows
    /// carry it).
    fn default() -> Self {
        OutboxTypes(vec![EVENT_TYPE.to_owned()])
    }
}

impl OutboxTypes {
    /// Parses a comma-separated list; a refusal says why and what is allowed.
    pub fn parse(text: &str) -> Result<Self, String> {
        let refuse = |why: String| {
            format!(
                "{why}; allowed: a comma-separated list of outbox event types (the outbox's \
                 type column, e.g. {EVENT_TYPE}), each at most once, at most \
                 {MAX_OUTBOX_TYPES} of them, each 1 to {MAX_OUTBOX_TYPE_LEN} printable \
                 characters without spaces"
            )
        };
        let mut types: Vec<String> = Vec::new();
        for entry in text.split(',').map(str::trim) {
            if entry.is_empty() {
                return Err(refuse("an entry is empty".to_owned()));
            }
            if entry.len() > MAX_OUTBOX_TYPE_LEN {
                return Err(refuse(format!("an entry is {} bytes long", entry.len())));
            }
            if let Some(c) = entry.chars().find(|c| c.is_whitespace() || c.is_control()) {
                return Err(refuse(format!("{entry:?} contains {c:?}")));
            }
            if types.iter().any(|t| t == entry) {
                return Err(refuse(format!("{entry} is listed twice")));
            }
            types.push(entry.to_owned());
        }
        if types.len() > MAX_OUTBOX_TYPES {
            return Err(refuse(format!("{} types are listed", types.len())));
        }
        Ok(OutboxTypes(types))
    }

    /// The types, as the statements bind them (`type = ANY($n)`).
    pub fn as_slice(&self) -> &[String] {
        &self.0
    }

    /// Whether this is the job's own type alone (the default, a shared outbox).
    pub fn is_own_only(&self) -> bool {
        *self == OutboxTypes::default()
    }

    /// The types, comma-separated, as the flag takes them.
    pub fn to_flag(&self) -> String {
        self.0.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_the_jobs_own_type_alone() {
        let own = OutboxTypes::default();
        assert_eq!(own.as_slice(), ["pin.crm.booking-expired"]);
        assert!(own.is_own_only());
        assert_eq!(
            OutboxTypes::parse(" pin.crm.booking-expired ").unwrap(),
            own
        );
    }

    #[test]
    fn a_whole_outbox_relay_names_every_type_in_the_order_given() {
        let both = OutboxTypes::parse("pin.crm.booking-expired, pin.crm.deal-closed.v1").unwrap();
        assert_eq!(
            both.as_slice(),
            ["pin.crm.booking-expired", "pin.crm.deal-closed.v1"]
        );
        assert!(!both.is_own_only());
        assert_eq!(
            both.to_flag(),
            "pin.crm.booking-expired,pin.crm.deal-closed.v1"
        );
    }

    #[test]
    fn empty_repeated_spaced_and_overlong_entries_are_refused_with_what_is_allowed() {
        let long = "t".repeat(256);
        let many: Vec<String> = (0..101).map(|i| format!("t{i}")).collect();
        for (input, why) in [
            (String::new(), "an entry is empty".to_owned()),
            ("a,".to_owned(), "an entry is empty".to_owned()),
            ("a,,b".to_owned(), "an entry is empty".to_owned()),
            ("a,a".to_owned(), "a is listed twice".to_owned()),
            ("a b".to_owned(), "\"a b\" contains ' '".to_owned()),
            (long, "an entry is 256 bytes long".to_owned()),
            (many.join(","), "101 types are listed".to_owned()),
        ] {
            let e = OutboxTypes::parse(&input).unwrap_err();
            assert!(
                e.starts_with(&format!("{why}; allowed: a comma-separated list")),
                "{e}"
            );
            assert!(e.contains("e.g. pin.crm.booking-expired"), "{e}");
        }
    }
}
