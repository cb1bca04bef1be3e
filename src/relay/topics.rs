//! The topics that cannot take their rows (missing, not writable, another partition
//! count): one fact per topic, not a mark per row. A topic is checked once per run (at
//! the start for the facts a run before left, or when its rows first come up), and
//! about once a second while `--follow` waits; while it cannot take them its rows are
//! left out of every fetch and never written, however many wait. The facts are kept in
//! `crm.booking_expiration_topic_wait` for `backlog` (which asks no broker); without
//! that table (migration 14 not applied) the run keeps them to itself.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::store::Session;
use anyhow::Result;
use chrono::{DateTime, Utc};
use log::{error, info, warn};

use crate::exit::{Failure, fail};
use crate::kafka::{Classify, KafkaProducer, Kind, TopicCheck};
use crate::store::{self, TopicWaiting};

/// How often `--follow` asks the brokers again about the topics rows wait for.
pub(super) const RECHECK_EVERY: Duration = Duration::from_secs(1);

/// The run's topic waits.
pub(super) struct TopicWaits {
    /// Topic → why it cannot take its rows.
    waits: BTreeMap<String, Wait>,
    /// Whether the facts' table can be read and written.
    stored: bool,
    /// Facts to write (new ones, or checked again) and to delete, at the next sync.
    to_record: BTreeSet<String>,
    to_end: BTreeSet<String>,
    /// When the waiting topics were last asked about.
    checked_at: Option<Instant>,
}

struct Wait {
    reason: String,
    /// Said in a log line this run (when its rows came up); a wait carried over from a
    /// run before is said at the end, with its rows' count.
    said: bool,
}

impl TopicWaits {
    /// The facts a run before left; a session that cannot read or write them (the
    /// schema before migration 14, or no grant) keeps this run's to itself, and says so.
    pub(super) fn load(client: &mut Session) -> Result<Self> {
        let stored = store::topic_waits(client, true)?;
        if stored.is_none() {
            warn!(
                "crm.booking_expiration_topic_wait is missing or not granted (apply {}: run `booking-expire migrate`): \
                   the topics rows wait for are kept for this run only, and backlog counts \
                   only the rows an older relay marked waiting",
                store::TOPIC_WAIT_MIGRATION
            );
        }
        let waits = stored
            .iter()
            .flatten()
            .map(|w| {
                let wait = Wait {
                    reason: w.reason.clone(),
                    said: false,
                };
                (w.topic.clone(), wait)
            })
            .collect();
        Ok(TopicWaits {
            waits,
            stored: stored.is_some(),
            to_record: BTreeSet::new(),
            to_end: BTreeSet::new(),
            checked_at: None,
        })
    }

    /// The topics whose rows are left out of the fetch.
    pub(super) fn excluded(&self) -> Vec<&str> {
        self.waits.keys().map(String::as_str).collect()
    }

    /// Whether `topic`'s rows wait for it.
    pub(super) fn waits_for(&self, topic: &str) -> bool {
        self.waits.contains_key(topic)
    }

    /// `topic` cannot take its rows (its check, or a delivery report, said so): they
    /// are left out from now on. The caller has said so in a log line.
    pub(super) fn wait(&mut self, topic: &str, reason: &str) {
        self.to_end.remove(topic);
        let new = Wait {
            reason: reason.to_owned(),
            said: true,
        };
        if let Some(old) = self.waits.insert(topic.to_owned(), new)
            && old.reason == reason
        {
            return;
        }
        self.to_record.insert(topic.to_owned());
    }

    /// Whether `--follow` should ask about the waiting topics again (about once a
    /// second; never when none waits).
    pub(super) fn recheck_due(&self, now: Instant) -> bool {
        !self.waits.is_empty()
            && self
                .checked_at
                .is_none_or(|at| now.saturating_duration_since(at) >= RECHECK_EVERY)
    }

    /// Asks the brokers about each waiting topic once: one that can take its rows again
    /// is no longer waited for (its rows go from the next fetch on); `record` writes the
    /// check of those that still cannot (once per run, not every second). True when a
    /// topic came free. `Err` when the brokers cannot be reached.
    pub(super) fn recheck(
        &mut self,
        producer: &mut KafkaProducer,
        expected_partitions: usize,
        now: Instant,
        record: bool,
    ) -> Result<bool> {
        self.checked_at = Some(now);
        let mut freed = false;
        let topics: Vec<String> = self.waits.keys().cloned().collect();
        for topic in topics {
            match producer
                .check_topic(&topic, expected_partitions)
                .classified()?
            {
                TopicCheck::Usable => {
                    self.waits.remove(&topic);
                    self.to_record.remove(&topic);
                    self.to_end.insert(topic.clone());
                    info!(Topic = topic.as_str();
                          "the topic can take its rows again: they go in this run");
                    freed = true;
                }
                TopicCheck::Unusable {
                    kind: Kind::Config,
                    reason,
                } => {
                    let wait = self.waits.get_mut(&topic).expect("a waiting topic");
                    if record || wait.reason != reason {
                        self.to_record.insert(topic.clone());
                    }
                    wait.reason = reason;
                }
                // The cluster's fault (a leader moving): the topic still waits as it was.
                TopicCheck::Unusable { reason, .. } => {
                    warn!(Topic = topic.as_str(), Error = reason.as_str();
                          "cannot tell whether the topic can take its rows now: they wait");
                }
            }
        }
        Ok(freed)
    }

    /// Writes the facts changed since the last sync (nothing when none changed, or
    /// when the table cannot be written).
    pub(super) fn sync(&mut self, client: &mut Session, now: DateTime<Utc>) -> Result<()> {
        if !self.stored {
            self.to_record.clear();
            self.to_end.clear();
            return Ok(());
        }
        let record: Vec<(&str, &str)> = self
            .to_record
            .iter()
            .filter_map(|t| self.waits.get(t).map(|w| (t.as_str(), w.reason.as_str())))
            .collect();
        store::record_topic_waits(client, &record, now)?;
        let end: Vec<&str> = self.to_end.iter().map(String::as_str).collect();
        store::end_topic_waits(client, &end)?;
        self.to_record.clear();
        self.to_end.clear();
        Ok(())
    }

    /// After the run's count of the rows that wait (`None` when it could not be read):
    /// a topic no pending row waits for any more is forgotten; each that rows still
    /// wait for and that was not said this run is said now, with their count. Returns
    /// the failure the run ends with when rows wait for a topic (78, as when the topic
    /// was first found so), the first topic's reason.
    pub(super) fn after_count(
        &mut self,
        counted: Option<&[TopicWaiting]>,
    ) -> Option<anyhow::Error> {
        let mut failure = None;
        let topics: Vec<String> = self.waits.keys().cloned().collect();
        for topic in topics {
            let rows = counted.map(|c| {
                c.iter()
                    .find(|w| w.topic == topic)
                    .map_or(0, |w| w.waiting_for_topic)
            });
            if rows == Some(0) {
                self.waits.remove(&topic);
                self.to_record.remove(&topic);
                self.to_end.insert(topic);
                continue;
            }
            let wait = &self.waits[&topic];
            if !wait.said {
                error!(Topic = topic.as_str(), Rows = rows.unwrap_or(0), Error = wait.reason.as_str();
                       "item failed: the topic cannot take these rows; they wait uncounted, the other topics' rows go on");
            }
            failure.get_or_insert_with(|| fail(Failure::Config, wait.reason.clone()));
        }
        failure
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waits(stored: &[&str]) -> TopicWaits {
        TopicWaits {
            waits: stored
                .iter()
                .map(|t| {
                    let wait = Wait {
                        reason: format!("Kafka topic {t} does not exist"),
                        said: false,
                    };
                    (t.to_string(), wait)
                })
                .collect(),
            stored: true,
            to_record: BTreeSet::new(),
            to_end: BTreeSet::new(),
            checked_at: None,
        }
    }

    fn counted(topic: &str, rows: u64) -> TopicWaiting {
        TopicWaiting {
            topic: topic.to_owned(),
            waiting: rows,
            waiting_for_topic: rows,
            next_due: None,
        }
    }

    #[test]
    fn a_topic_found_waiting_is_one_fact_written_once() {
        let mut w = waits(&[]);
        w.wait("a", "missing");
        w.wait("a", "missing");
        assert_eq!(w.excluded(), ["a"]);
        assert_eq!(w.to_record.iter().collect::<Vec<_>>(), ["a"]);
        w.to_record.clear();
        // The same reason again writes nothing; another one is written.
        w.wait("a", "missing");
        assert!(w.to_record.is_empty());
        w.wait("a", "3 partitions");
        assert_eq!(w.to_record.len(), 1);
    }

    #[test]
    fn after_the_count_a_topic_no_row_waits_for_is_forgotten_and_the_others_fail_the_run() {
        let mut w = waits(&["a", "b"]);
        let failure = w.after_count(Some(&[counted("b", 7)]));
        assert_eq!(w.excluded(), ["b"]);
        assert_eq!(w.to_end.iter().collect::<Vec<_>>(), ["a"]);
        let failure = failure.expect("rows wait for b");
        assert!(format!("{failure:#}").contains("Kafka topic b does not exist"));
        // A count that could not be read forgets nothing, and still reports the waits.
        let mut w = waits(&["a"]);
        assert!(w.after_count(None).is_some());
        assert_eq!(w.excluded(), ["a"]);
        assert!(w.to_end.is_empty());
        // No wait, no failure.
        assert!(waits(&[]).after_count(Some(&[])).is_none());
    }

    #[test]
    #[allow(
        clippy::disallowed_methods,
        reason = "a test of the recheck, handed instants"
    )]
    fn following_asks_again_about_once_a_second_and_never_without_a_wait() {
        let now = Instant::now();
        let mut w = waits(&[]);
        assert!(!w.recheck_due(now));
        w.wait("a", "missing");
        assert!(w.recheck_due(now));
        w.checked_at = Some(now);
        assert!(!w.recheck_due(now + Duration::from_millis(900)));
        assert!(w.recheck_due(now + RECHECK_EVERY));
    }
}
