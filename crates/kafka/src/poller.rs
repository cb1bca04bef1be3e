//! The producer's poll thread: serves its events (delivery reports, errors) as they
//! come, so that a report reaches [`super::reports::Reports`] the moment librdkafka
//! has it, whatever the relay's own thread is doing, and a waiter is woken at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

use rdkafka::producer::BaseProducer;

use super::reports::Reports;
use crate::error::{Error, Kind};

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

/// How long dropping the producer waits for its poll thread to stop: many slices. A
/// slice can last longer than its timeout: librdkafka times its waits on the wall
/// clock (an absolute `CLOCK_REALTIME` deadline), so a step of the clock back
/// stretches the slice by the step (and so does a wall clock faked by an
/// `LD_PRELOAD` library that does not reach librdkafka's own waits). The thread is
/// then left behind rather than waited for: the run has its report and exits, and
/// the process's end takes the thread with it.
const STOP_PATIENCE: Duration = Duration::from_secs(1);

/// The thread polling a producer, stopped (and joined, within [`STOP_PATIENCE`])
/// when dropped; the producer is destroyed on it once every other handle is gone.
pub(super) struct Poller {
    stop: Arc<AtomicBool>,
    thread: Option<(JoinHandle<()>, Receiver<()>)>,
}

impl Poller {
    pub(super) fn start(producer: Arc<BaseProducer<Reports>>) -> Result<Poller, Error> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let (ended, done) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("kafka-reports".to_owned())
            .spawn(move || {
                // Dropped as the thread ends (the producer with it, when last).
                let _ended = ended;
                while !stopped.load(Ordering::Relaxed) {
                    producer.poll(SLICE);
                }
            })
            .map_err(|e| {
                Error::new(
                    Kind::Internal,
                    format!("cannot start the Kafka producer's poll thread: {e}"),
                )
            })?;
        Ok(Poller {
            stop,
            thread: Some((thread, done)),
        })
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some((thread, done)) = self.thread.take()
            && !join_within(thread, &done, STOP_PATIENCE)
        {
            log::warn!(
                "the Kafka producer's poll thread did not stop within {}s (librdkafka's waits follow the wall clock, which stepped back): it is left to end with the process",
                STOP_PATIENCE.as_secs()
            );
        }
    }
}

/// Joins `thread` once `done` says it ended (its sender dropped), waiting at most
/// `patience`; false (the thread left running, detached) when it did not end by then.
fn join_within(thread: JoinHandle<()>, done: &Receiver<()>, patience: Duration) -> bool {
    match done.recv_timeout(patience) {
        Ok(()) | Err(RecvTimeoutError::Disconnected) => {
            // A panic on the thread was the panic hook's to report.
            let _ = thread.join();
            true
        }
        Err(RecvTimeoutError::Timeout) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_that_ended_is_joined() {
        let (ended, done) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || drop(ended));
        assert!(join_within(thread, &done, Duration::from_secs(60)));
    }

    /// A thread stuck in a wait (here one that only the test ends) is left behind
    /// after the patience instead of holding its owner for as long as it waits.
    #[test]
    fn a_thread_stuck_past_the_patience_is_left_behind() {
        let (ended, done) = mpsc::channel::<()>();
        let (release, stuck) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let _ended = ended;
            let _ = stuck.recv();
        });
        assert!(!join_within(thread, &done, Duration::from_millis(50)));
        release.send(()).unwrap();
        // It ends once released: its sender is dropped.
        assert_eq!(
            done.recv_timeout(Duration::from_secs(60)),
            Err(RecvTimeoutError::Disconnected)
        );
    }
}
