//! The Kafka room of the application: the Kafka crate (`crates/kafka`, which knows
//! nothing of the outbox, the exit codes or the signals) re-exported, and the adapter
//! between the two: its errors become this program's [`Failure`]s, and the shutdown
//! handle answers its [`Stop`].

pub use booking_expire_kafka::*;

use crate::exit::{Failure, fail};
use crate::shutdown::Shutdown;

/// The exit code's class of a Kafka error's kind.
pub(crate) fn failure(kind: Kind) -> Failure {
    match kind {
        Kind::Config => Failure::Config,
        Kind::Unavailable => Failure::Unavailable,
        Kind::Temporary => Failure::Temporary,
        Kind::Interrupted(signal) => Failure::Interrupted(signal),
        Kind::Internal => Failure::Internal,
    }
}

/// A Kafka error as the program's error, classified by its kind.
pub(crate) trait Classify<T> {
    fn classified(self) -> anyhow::Result<T>;
}

impl<T> Classify<T> for Result<T, Error> {
    fn classified(self) -> anyhow::Result<T> {
        self.map_err(|e| fail(failure(e.kind), e.message))
    }
}

impl Stop for Shutdown {
    fn requested(&self) -> Option<i32> {
        Shutdown::requested(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::failure_of;

    #[test]
    fn a_kafka_error_keeps_its_exit_code_and_message() {
        for (kind, code) in [
            (Kind::Config, 78),
            (Kind::Unavailable, 69),
            (Kind::Temporary, 75),
            (Kind::Interrupted(15), 143),
            (Kind::Internal, 70),
        ] {
            let refused: Result<(), Error> = Err(Error {
                kind,
                message: "cannot reach Kafka".to_owned(),
            });
            let e = refused.classified().unwrap_err();
            assert_eq!(failure_of(&e).code(), code, "{kind:?}");
            assert_eq!(format!("{e:#}"), "cannot reach Kafka");
        }
    }

    #[test]
    fn the_shutdown_handle_tells_the_producer_of_a_signal() {
        let shutdown = Shutdown::new();
        assert_eq!(Stop::requested(&shutdown), None);
        shutdown.request(15);
        assert_eq!(Stop::requested(&shutdown), Some(15));
    }
}
