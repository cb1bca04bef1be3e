//! The text exposition format of a set of metric families, encoded by the
//! `prometheus-client` crate: constant gauges, per-phase and labelled samples in the
//! order given, histograms of a run's observations. Which values go in is `gauges.rs`'s
//! concern (and the reports' own, for the families `backlog` alone prints).

use prometheus_client::encoding::prometheus_text;
use prometheus_client::encoding::{
    EncodeGaugeValue, EncodeMetric, GaugeValueEncoder, MetricEncoder,
};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::{Metric, Registry};

use super::metrics::Family;
use crate::domain::Phase;

/// The text exposition format (version 0.0.4) of a set of families, encoded by the
/// `prometheus-client` crate (its `prometheus_text` encoder): each family is
/// registered in the order it is added and printed in that order, with its HELP and
/// TYPE lines; label values are escaped by the crate.
///
/// The values are the ones a run already holds (counts, durations, ages), so they are
/// registered as constant metrics rather than updated live.
#[derive(Debug, Default)]
pub(crate) struct Exposition(Registry);

/// A sample value as the text format shows it: whole numbers without a fraction (`6`,
/// as Prometheus's own clients print them), anything else as the shortest decimal that
/// reads back the same.
#[derive(Debug, Clone, Copy)]
struct Number(f64);

impl EncodeGaugeValue for Number {
    fn encode(&self, encoder: &mut GaugeValueEncoder) -> std::fmt::Result {
        // Below 2^53 every whole f64 is exactly an i64.
        if self.0.fract() == 0.0 && self.0.abs() < 9_007_199_254_740_992.0 {
            (self.0 as i64).encode(encoder)
        } else {
            self.0.encode(encoder)
        }
    }
}

/// A family whose samples carry labels, in the order given (the crate's own `Family`
/// is a hash map: its order would change from run to run). No sample, no family.
#[derive(Debug)]
struct Labelled<M> {
    samples: Vec<(Vec<(String, String)>, M)>,
}

impl<M: EncodeMetric + TypedMetric> EncodeMetric for Labelled<M> {
    fn encode(&self, mut encoder: MetricEncoder) -> std::fmt::Result {
        for (labels, metric) in &self.samples {
            metric.encode(encoder.encode_family(labels)?)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        M::TYPE
    }

    fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }
}

fn owned(labels: &[(&str, &str)]) -> Vec<(String, String)> {
    labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn phase_label(phase: Phase) -> Vec<(String, String)> {
    vec![("phase".to_owned(), phase.to_string())]
}

/// A histogram of `observations` with the upper bounds `buckets` (`+Inf` added).
pub(crate) fn histogram_of(buckets: &[f64], observations: &[f64]) -> Histogram {
    let h = Histogram::new(buckets.iter().copied());
    for o in observations {
        h.observe(*o);
    }
    h
}

impl Exposition {
    pub(super) fn register(&mut self, f: Family, metric: impl Metric) {
        // The crate ends every help text with a period of its own.
        let help = f.help.strip_suffix('.').unwrap_or(f.help);
        self.0.register(f.name, help, metric);
    }

    pub(crate) fn gauge(&mut self, f: Family, value: f64) {
        self.register(f, ConstGauge::new(Number(value)));
    }

    pub(crate) fn per_phase(&mut self, f: Family, value: impl Fn(Phase) -> f64) {
        let samples = Phase::ALL
            .iter()
            .map(|p| (phase_label(*p), ConstGauge::new(Number(value(*p)))))
            .collect();
        self.register(f, Labelled { samples });
    }

    /// A histogram of `observations` with the upper bounds `buckets` (+Inf added).
    pub(crate) fn histogram(&mut self, f: Family, buckets: &[f64], observations: &[f64]) {
        self.register(f, histogram_of(buckets, observations));
    }

    /// A histogram per phase.
    pub(crate) fn histogram_per_phase(&mut self, f: Family, of: impl Fn(Phase) -> Histogram) {
        let samples = Phase::ALL
            .iter()
            .map(|p| (phase_label(*p), of(*p)))
            .collect();
        self.register(f, Labelled { samples });
    }

    /// A gauge with one sample per label set.
    pub(crate) fn labelled(&mut self, f: Family, samples: &[(Vec<(&str, &str)>, f64)]) {
        let samples = samples
            .iter()
            .map(|(labels, v)| (owned(labels), ConstGauge::new(Number(*v))))
            .collect();
        self.register(f, Labelled { samples });
    }

    pub(crate) fn into_text(self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail, and every value here encodes.
        prometheus_text::encode(&mut text, &self.0).expect("metrics encode as text");
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::obs::ack_age::AckAges;
    use crate::obs::metrics::{RELAY_ACK_AGE, RELAY_DURATION, RELAY_PUBLICATIONS};

    #[test]
    fn ack_ages_are_counted_into_buckets_however_many_rows_a_run_publishes() {
        let ages = AckAges::default();
        for _ in 0..100_000 {
            ages.observe(0.25);
        }
        ages.observe(400.0);
        let mut out = Exposition::default();
        out.register(RELAY_ACK_AGE, ages.histogram().clone());
        let text = out.into_text();
        for line in [
            "crm_booking_expiration_relay_ack_age_seconds_bucket{le=\"0.5\"} 100000\n",
            "crm_booking_expiration_relay_ack_age_seconds_bucket{le=\"300\"} 100000\n",
            "crm_booking_expiration_relay_ack_age_seconds_bucket{le=\"+Inf\"} 100001\n",
            "crm_booking_expiration_relay_ack_age_seconds_count 100001\n",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }

    #[test]
    fn the_text_is_the_exposition_format_with_escaped_labels() {
        let mut out = Exposition::default();
        out.gauge(RELAY_DURATION, 0.25);
        out.labelled(
            RELAY_PUBLICATIONS,
            &[(vec![("topic", "a\"b\\c\nd"), ("phase", "Reserve")], 3.0)],
        );
        out.labelled(RELAY_PUBLICATIONS, &[]);
        out.histogram(RELAY_ACK_AGE, &[0.5, 1.0], &[0.25, 0.75, 7.0]);
        assert_eq!(
            out.into_text(),
            "# HELP crm_booking_expiration_relay_duration_seconds How long the last \
             relay-outbox took, in seconds.\n\
             # TYPE crm_booking_expiration_relay_duration_seconds gauge\n\
             crm_booking_expiration_relay_duration_seconds 0.25\n\
             # HELP crm_booking_expiration_relay_publications Outbox rows the last \
             relay-outbox published, per topic and Phase of the event.\n\
             # TYPE crm_booking_expiration_relay_publications gauge\n\
             crm_booking_expiration_relay_publications{topic=\"a\\\"b\\\\c\\nd\",phase=\"Reserve\"} 3\n\
             # HELP crm_booking_expiration_relay_ack_age_seconds Seconds from an event's \
             write (the cycle's commit) to Kafka's acknowledgement, for each event the last \
             relay-outbox published.\n\
             # TYPE crm_booking_expiration_relay_ack_age_seconds histogram\n\
             crm_booking_expiration_relay_ack_age_seconds_bucket{le=\"0.5\"} 1\n\
             crm_booking_expiration_relay_ack_age_seconds_bucket{le=\"1\"} 2\n\
             crm_booking_expiration_relay_ack_age_seconds_bucket{le=\"+Inf\"} 3\n\
             crm_booking_expiration_relay_ack_age_seconds_sum 8.0\n\
             crm_booking_expiration_relay_ack_age_seconds_count 3\n"
        );
    }
}
