//! The producer's poll thread: serves its events (delivery reports, errors) as they
//! come, so that a report reaches [`super::reports::Reports`] the moment librdkafka
//! has it, whatever the relay's own thread is doing, and a waiter is woken at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use rdkafka::producer::BaseProducer;

use super::reports::Reports;

/// How long one poll serves. Events are served the moment they arrive within it; it
/// bounds only how long stopping the thread takes (a poll serves until its timeout),
/// and how often an idle producer's thread wakes up. Not a whole number of
/// milliseconds: rdkafka waits for the next event at most the time left, truncated to
/// whole milliseconds, and polls without waiting once less than one is left, so a
/// slice of exactly 50 ms would end in up to a millisecond of busy polling. From 50 ms
/// and 50 µs it waits 50 ms, by when the 50 µs are over; only an event that came
/// within the slice leaves a fraction of a millisecond to spin out (at most one per
/// slice, about 1 % of a core while reports flow; none while idle).
const SLICE: Duration = Duration::from_micros(50_050);

/// The thread polling a producer, stopped (and joined) when dropped; the producer is
/// destroyed on it once every other handle is gone.
pub(super) struct Poller {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Poller {
    pub(super) fn start(producer: Arc<BaseProducer<Reports>>) -> Result<Poller> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("kafka-reports".to_owned())
            .spawn(move || {
                while !stopped.load(Ordering::Relaxed) {
                    producer.poll(SLICE);
                }
            })
            .context("cannot start the Kafka producer's poll thread")?;
        Ok(Poller {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            // A panic on the thread was the panic hook's to report.
            let _ = thread.join();
        }
    }
}
