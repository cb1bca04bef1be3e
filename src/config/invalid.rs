//! A value the configuration refuses, and what is wrong with it: the error of the
//! checks that are not clap's value parsers (the Pushgateway's URL, the OTLP endpoint).

/// A value the configuration refuses, and what is wrong with it; the caller names the
/// flag or variable it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Invalid(pub(crate) String);

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Invalid {}
