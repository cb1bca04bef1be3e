//! The signals this crate sends to the servers, by the name `kill -s` and `setpriv
//! --pdeathsig` take.

/// The signals this crate sends, by the name `kill -s` takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM: a polite stop (Kafka's controlled shutdown; PostgreSQL's smart one).
    Term,
    /// SIGINT: PostgreSQL's fast shutdown.
    Int,
    /// SIGQUIT: PostgreSQL's immediate shutdown.
    Quit,
    /// SIGHUP: reload the configuration.
    Hup,
    /// SIGKILL.
    Kill,
    /// SIGSTOP: frozen until [`Signal::Cont`].
    Stop,
    /// SIGCONT.
    Cont,
}

impl Signal {
    /// The name `kill -s` and `setpriv --pdeathsig` take.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Term => "TERM",
            Signal::Int => "INT",
            Signal::Quit => "QUIT",
            Signal::Hup => "HUP",
            Signal::Kill => "KILL",
            Signal::Stop => "STOP",
            Signal::Cont => "CONT",
        }
    }
}
