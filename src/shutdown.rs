//! SIGTERM/SIGINT → a [`Shutdown`] handle the cycle and the relay are given and ask
//! between steps, plus a hook that interrupts the statement in flight so a batch
//! blocked on a lock rolls back at once instead of waiting for its timeout.
//!
//! `app` makes one handle per process and installs the signal watcher on it; a test
//! makes its own and [`Shutdown::request`]s a signal without sending one.

use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use signal_hook::consts::{SIGINT, SIGTERM};

type Interrupt = Box<dyn Fn() + Send>;

/// Whether a signal asked the process to stop, and what interrupts the work in flight
/// when one does. Clones share the same state.
#[derive(Clone, Default)]
pub struct Shutdown(Arc<State>);

#[derive(Default)]
struct State {
    /// Set by the watcher thread (or [`Shutdown::request`]): tells a second signal.
    received: AtomicI32,
    /// Set inside the signal handler itself, at delivery: the exit code knows of a
    /// signal that came while the work was ending, before the watcher thread ran.
    delivered: Arc<AtomicUsize>,
    interrupt: Mutex<Option<Interrupt>>,
}

impl std::fmt::Debug for Shutdown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shutdown")
            .field("requested", &self.requested())
            .finish()
    }
}

impl Shutdown {
    pub fn new() -> Self {
        Shutdown::default()
    }

    /// The signal received, if any (2 = SIGINT, 15 = SIGTERM).
    pub fn requested(&self) -> Option<i32> {
        match self.0.received.load(Ordering::SeqCst) {
            0 => match self.0.delivered.load(Ordering::SeqCst) {
                0 => None,
                signal => i32::try_from(signal).ok(),
            },
            signal => Some(signal),
        }
    }

    /// Sets what to do to interrupt work in flight when a signal arrives. Until one is
    /// set, nothing is in flight that needs finishing, and a signal exits at once.
    pub fn on_signal(&self, interrupt: impl Fn() + Send + 'static) {
        *self.0.interrupt.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(interrupt));
    }

    /// Records `signal` as received and runs the interrupt, as the watcher does; returns
    /// whether a signal had been received before. Without an interrupt set, nothing runs.
    pub fn request(&self, signal: i32) -> bool {
        let again = self.0.received.swap(signal, Ordering::SeqCst) != 0;
        if !again && let Some(interrupt) = self.interrupt().as_ref() {
            interrupt();
        }
        again
    }

    fn interrupt(&self) -> std::sync::MutexGuard<'_, Option<Interrupt>> {
        self.0.interrupt.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Watches SIGTERM and SIGINT, through signal-hook alone: its handler records the
    /// signal (`delivered`, an atomic store, at delivery) and wakes the watcher thread
    /// (its self-pipe). The first signal sets the flag and interrupts the statement in
    /// flight; a second one calls `exit_now` (the database rolls back an open
    /// transaction when the connection drops). `app` passes `exit::signalled`: this
    /// module never decides an exit code. Both are registered before this returns, so
    /// no signal slips through between startup and the thread getting scheduled.
    pub fn install(&self, exit_now: fn(i32) -> !) -> anyhow::Result<()> {
        for signal in [SIGTERM, SIGINT] {
            let value = usize::try_from(signal).expect("signal numbers are positive");
            signal_hook::flag::register_usize(signal, Arc::clone(&self.0.delivered), value)?;
        }
        let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])?;
        let shutdown = self.clone();
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                // The interrupt runs on this thread: the synchronous postgres client
                // starts a runtime of its own to send the cancel request.
                for signal in signals.forever() {
                    if shutdown.0.received.swap(signal, Ordering::SeqCst) != 0 {
                        log::warn!(Signal = signal; "second signal, exiting at once");
                        exit_now(signal);
                    }
                    let guard = shutdown.interrupt();
                    match guard.as_ref() {
                        Some(interrupt) => {
                            log::warn!(Signal = signal; "signal received, finishing the in-flight batch");
                            interrupt();
                        }
                        None => {
                            log::warn!(Signal = signal; "signal received before any work started, exiting");
                            exit_now(signal);
                        }
                    }
                }
            })?;
        Ok(())
    }
}

/// Interrupts the statement in flight when `after` has passed, unless dropped first:
/// the hard end of a cycle's time budget.
pub(crate) struct Deadline {
    done: Option<std::sync::mpsc::Sender<()>>,
    fired: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Deadline {
    pub(crate) fn start(after: std::time::Duration, interrupt: impl Fn() + Send + 'static) -> Self {
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let fired = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = fired.clone();
        std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(after) {
                flag.store(true, Ordering::SeqCst);
                log::warn!(DeadlineMs = after.as_millis() as u64;
                           "deadline passed with a statement in flight, cancelling it");
                interrupt();
            }
        });
        Deadline {
            done: Some(done),
            fired,
        }
    }

    /// Whether the deadline passed and the interrupt was sent.
    pub(crate) fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        // Wakes the timer thread, which then ends without interrupting.
        drop(self.done.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn a_requested_signal_is_seen_by_every_clone_and_interrupts_once() {
        let shutdown = Shutdown::new();
        let seen = shutdown.clone();
        let interrupts = Arc::new(AtomicUsize::new(0));
        let counted = interrupts.clone();
        shutdown.on_signal(move || {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(seen.requested(), None);
        assert!(!shutdown.request(SIGTERM));
        assert_eq!(seen.requested(), Some(15));
        assert!(shutdown.request(SIGINT), "a second signal is told apart");
        assert_eq!(interrupts.load(Ordering::SeqCst), 1);
    }
}
