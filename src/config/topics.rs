//! Which contract versions `run-once` publishes: `--topics` /
//! `BOOKING_EXPIRATION_TOPICS`, a comma-separated list of topics, each the topic of a
//! contract version this build knows, each at most once. Every expiry writes one outbox
//! row per listed topic, in the same statement. The default is version 1 alone.

use anyhow::Result;

use crate::domain::ContractVersion;
use crate::exit::{Failure, fail};

/// The flag and its environment variable, as errors name them.
pub(crate) const TOPICS_INPUT: &str = "--topics / BOOKING_EXPIRATION_TOPICS";

/// The topics a run publishes to, in the order given: never empty, no repeats, known
/// versions only (so at most one entry per known version).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topics(Vec<ContractVersion>);

impl Default for Topics {
    fn default() -> Self {
        Topics(vec![ContractVersion::V1])
    }
}

impl Topics {
    /// Parses the list; a refusal names the input, the value and what is allowed, and
    /// exits 78 (configuration).
    pub fn parse(text: &str) -> Result<Self> {
        let refuse = |why: String| {
            fail(
                Failure::Config,
                format!(
                    "invalid {TOPICS_INPUT} {text:?}: {why}; allowed: a comma-separated list \
                     of {}, each at most once",
                    allowed()
                ),
            )
        };
        let mut versions = Vec::new();
        for entry in text.split(',').map(str::trim) {
            if entry.is_empty() {
                return Err(refuse("an entry is empty".to_owned()));
            }
            let Some(version) = ContractVersion::of_topic(entry) else {
                return Err(refuse(format!("unknown topic {entry:?}")));
            };
            if versions.contains(&version) {
                return Err(refuse(format!("{entry} is listed twice")));
            }
            versions.push(version);
        }
        Ok(Topics(versions))
    }

    pub fn versions(&self) -> &[ContractVersion] {
        &self.0
    }

    /// The topics, comma-separated, as the flag takes them.
    pub fn to_flag(&self) -> String {
        self.0
            .iter()
            .map(|v| v.topic())
            .collect::<Vec<_>>()
            .join(",")
    }
}

fn allowed() -> String {
    ContractVersion::ALL
        .iter()
        .map(|v| v.topic())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = "pin.crm.booking-expired.v1";
    const V2: &str = "pin.crm.booking-expired.v2";

    #[test]
    fn known_topics_in_the_order_given() {
        assert_eq!(Topics::parse(V1).unwrap(), Topics::default());
        let both = Topics::parse(&format!("{V2}, {V1}")).unwrap();
        assert_eq!(both.versions(), [ContractVersion::V2, ContractVersion::V1]);
        assert_eq!(both.to_flag(), format!("{V2},{V1}"));
        assert_eq!(Topics::parse(V2).unwrap().versions(), [ContractVersion::V2]);
    }

    #[test]
    fn unknown_repeated_and_empty_entries_are_refused_with_what_is_allowed() {
        let allowed = format!("allowed: a comma-separated list of {V1}, {V2}, each at most once");
        for (input, why) in [
            (
                "pin.crm.booking-expired.v3".to_owned(),
                "unknown topic \"pin.crm.booking-expired.v3\"".to_owned(),
            ),
            (format!("{V1},{V1}"), format!("{V1} is listed twice")),
            (format!("{V1},"), "an entry is empty".to_owned()),
            (String::new(), "an entry is empty".to_owned()),
        ] {
            let e = Topics::parse(&input).unwrap_err();
            assert_eq!(
                format!("{e:#}"),
                format!("invalid --topics / BOOKING_EXPIRATION_TOPICS {input:?}: {why}; {allowed}")
            );
            assert_eq!(crate::exit::exit_code(&e), std::process::ExitCode::from(78));
        }
    }
}
