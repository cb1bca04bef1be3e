//! SIGTERM/SIGINT → a flag the cycle and the relay check between steps, plus a hook
//! that interrupts the statement in flight so a batch blocked on a lock rolls back
//! at once instead of waiting for its timeout.

use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};

const SIGINT: i32 = 2;
const SIGTERM: i32 = 15;

static RECEIVED: AtomicI32 = AtomicI32::new(0);

type Interrupt = Box<dyn Fn() + Send>;
static INTERRUPT: Mutex<Option<Interrupt>> = Mutex::new(None);

/// The signal received, if any (2 = SIGINT, 15 = SIGTERM).
pub fn requested() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}

/// Sets what to do to interrupt work in flight when a signal arrives. Until one is
/// set, nothing is in flight that needs finishing, and a signal exits at once.
pub fn on_signal(interrupt: impl Fn() + Send + 'static) {
    *INTERRUPT.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(interrupt));
}

/// Starts the signal watcher thread. The first signal sets the flag and interrupts
/// the statement in flight; a second one calls `exit_now` (the database rolls back an
/// open transaction when the connection drops). `app` passes `exit::signalled`: this
/// module never decides an exit code.
pub fn install(exit_now: fn(i32) -> !) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    // Register the handlers now, on this thread, so no signal slips through between
    // startup and the watcher thread getting scheduled.
    let (mut term, mut int) = runtime.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        Ok::<_, std::io::Error>((
            signal(SignalKind::terminate())?,
            signal(SignalKind::interrupt())?,
        ))
    })?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            loop {
                // The interrupt runs outside the runtime: the synchronous postgres
                // client starts a runtime of its own to send the cancel request.
                let signal = runtime.block_on(async {
                    tokio::select! {
                        _ = term.recv() => SIGTERM,
                        _ = int.recv() => SIGINT,
                    }
                });
                if RECEIVED.swap(signal, Ordering::SeqCst) != 0 {
                    log::warn!(Signal = signal; "second signal, exiting at once");
                    exit_now(signal);
                }
                let guard = INTERRUPT.lock().unwrap_or_else(|e| e.into_inner());
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

/// Interrupts the statement in flight when `after` has passed, unless dropped first:
/// the hard end of a cycle's time budget.
pub struct Deadline {
    done: Option<std::sync::mpsc::Sender<()>>,
    fired: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Deadline {
    pub fn start(after: std::time::Duration, interrupt: impl Fn() + Send + 'static) -> Self {
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
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        // Wakes the timer thread, which then ends without interrupting.
        drop(self.done.take());
    }
}
