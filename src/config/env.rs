//! The environment as the job reads it besides its flags' variables (whose values
//! `cli`'s parsers read without the whitespace around them): a warning for each
//! variable with one of the job's prefixes that no setting reads (a typo would
//! otherwise leave a setting at its default without a word).

use log::warn;

/// The prefixes of the job's own variables: a variable starting with one of them that
/// the job does not read is most likely a misspelt setting.
pub(crate) const PREFIXES: &[&str] = &[
    "BOOKING_EXPIRATION_",
    "BOOKING_EXPIRE_",
    "OUTBOX_",
    "KAFKA_",
    "PUSHGATEWAY_",
];

/// The test hook that proves the panic path: the one variable of the job's prefixes
/// that is no flag's (`cli`), since it is no setting. Only a build with debug
/// assertions reads it (the tests' binary, `cargo test`'s profile); a release build
/// ignores it and warns of it as of any variable that is no setting.
const TEST_PANIC: &str = "BOOKING_EXPIRE_TEST_PANIC";

/// The tests' hook that stops `migrate` after so many statements, as a signal would
/// (to interrupt it at every statement boundary); read only by a build with debug
/// assertions, as [`TEST_PANIC`].
const TEST_MIGRATE_STOP_AFTER: &str = "BOOKING_EXPIRE_TEST_MIGRATE_STOP_AFTER";

/// Variables the job reads besides its flags'.
const OTHERS: &[&str] = if cfg!(debug_assertions) {
    &[TEST_PANIC, TEST_MIGRATE_STOP_AFTER]
} else {
    &[]
};

/// How many statements the tests ask `migrate` to run before it stops: never in a
/// release build.
pub(crate) fn test_migrate_stop_after() -> Option<usize> {
    if !cfg!(debug_assertions) {
        return None;
    }
    std::env::var(TEST_MIGRATE_STOP_AFTER)
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether the tests ask this run to panic (to prove that a panic ends it with 70 and
/// one line): never in a release build.
pub(crate) fn test_panic_asked() -> bool {
    cfg!(debug_assertions) && std::env::var_os(TEST_PANIC).is_some()
}

/// Every variable of the job that carries a setting: each flag's (of every
/// subcommand) and the others it reads.
pub(crate) fn known() -> Vec<String> {
    use clap::CommandFactory;
    let cmd = crate::cli::Cli::command();
    let mut names: Vec<String> = std::iter::once(&cmd)
        .chain(cmd.get_subcommands())
        .flat_map(|c| c.get_arguments())
        .filter_map(|a| a.get_env())
        .map(|env| env.to_string_lossy().into_owned())
        .chain(OTHERS.iter().map(|s| (*s).to_owned()))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// A variable of the job's prefixes that no setting reads, with the known name it most
/// likely meant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unknown {
    pub name: String,
    pub closest: Option<String>,
}

/// Of `names`, those with one of the job's prefixes that are not in `known`. Variables
/// Kubernetes sets for a Service (`KAFKA_SERVICE_HOST`, `KAFKA_PORT_9092_TCP`, …) are
/// not settings of anyone's and are left out.
pub(crate) fn unknown(names: impl IntoIterator<Item = String>, known: &[String]) -> Vec<Unknown> {
    let mut found: Vec<Unknown> = names
        .into_iter()
        .filter(|n| PREFIXES.iter().any(|p| n.starts_with(p)))
        .filter(|n| !known.contains(n) && !service_link(n))
        .map(|name| Unknown {
            closest: closest(&name, known),
            name,
        })
        .collect();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

/// Logs one warning per [`unknown`] variable of this process's environment.
pub(crate) fn warn_unknown() {
    let names = std::env::vars_os().filter_map(|(k, _)| k.into_string().ok());
    for u in unknown(names, &known()) {
        match &u.closest {
            Some(closest) => warn!(Variable = u.name.as_str(), DidYouMean = closest.as_str();
                "environment variable {} is not a setting of booking-expire and is ignored; \
                 did you mean {closest}?", u.name),
            None => warn!(Variable = u.name.as_str();
                "environment variable {} is not a setting of booking-expire and is ignored \
                 (its settings are listed in --help)", u.name),
        }
    }
}

/// The known name nearest to `name` by edits (insert, delete, replace one character:
/// Levenshtein's distance, strsim's), if it is near enough to be a typo: at most a fifth
/// of its length, and at least 2.
fn closest(name: &str, known: &[String]) -> Option<String> {
    let (best, distance) = known
        .iter()
        .map(|k| (k, strsim::levenshtein(name, k)))
        .min_by_key(|(k, d)| (*d, k.len()))?;
    (distance <= (name.len() / 5).max(2)).then(|| best.clone())
}

/// A Kubernetes service link: `<SERVICE>_SERVICE_HOST`, `<SERVICE>_SERVICE_PORT[_NAME]`,
/// `<SERVICE>_PORT` and `<SERVICE>_PORT_<n>_<PROTO>[_PROTO|_PORT|_ADDR]`.
fn service_link(name: &str) -> bool {
    if name.ends_with("_SERVICE_HOST") || name.contains("_SERVICE_PORT") || name.ends_with("_PORT")
    {
        return true;
    }
    name.split("_PORT_").skip(1).any(|rest| {
        let mut parts = rest.split('_');
        parts
            .next()
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            && parts
                .next()
                .is_some_and(|p| matches!(p, "TCP" | "UDP" | "SCTP"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_misspelt_setting_is_named_with_the_one_it_most_likely_meant() {
        let found = unknown(
            names(&[
                "BOOKING_EXPIRATION_BATCHSIZE",
                "BOOKING_EXPIRATION_TOPIC",
                "PUSHGATEWAY_URI",
                "KAFKA_CLIENT_SOFTWARE_NAME",
                "BOOKING_EXPIRATION_BATCH_SIZE",
                "HOME",
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ]),
            &known(),
        );
        let closest = |name: &str| Some(name.to_owned());
        assert_eq!(
            found,
            vec![
                Unknown {
                    name: "BOOKING_EXPIRATION_BATCHSIZE".into(),
                    closest: closest("BOOKING_EXPIRATION_BATCH_SIZE"),
                },
                Unknown {
                    name: "BOOKING_EXPIRATION_TOPIC".into(),
                    closest: closest("BOOKING_EXPIRATION_TOPICS"),
                },
                Unknown {
                    name: "KAFKA_CLIENT_SOFTWARE_NAME".into(),
                    closest: None,
                },
                Unknown {
                    name: "PUSHGATEWAY_URI".into(),
                    closest: closest("PUSHGATEWAY_URL"),
                },
            ]
        );
    }

    #[test]
    fn kubernetes_service_links_are_not_settings() {
        let found = unknown(
            names(&[
                "KAFKA_SERVICE_HOST",
                "KAFKA_SERVICE_PORT",
                "KAFKA_SERVICE_PORT_BROKER",
                "KAFKA_PORT",
                "KAFKA_PORT_9092_TCP",
                "KAFKA_PORT_9092_TCP_ADDR",
                "PUSHGATEWAY_PORT_9091_TCP_PROTO",
            ]),
            &known(),
        );
        assert_eq!(found, vec![]);
    }

    #[test]
    fn only_a_build_with_debug_assertions_knows_the_panic_hook() {
        assert_eq!(
            known().contains(&TEST_PANIC.to_owned()),
            cfg!(debug_assertions)
        );
        let warned = unknown(names(&[TEST_PANIC]), &known());
        assert_eq!(warned.is_empty(), cfg!(debug_assertions), "{warned:?}");
    }

    #[test]
    fn the_nearest_name_is_within_a_fifth_of_its_length() {
        let known = names(&["BOOKING_EXPIRATION_BATCH_SIZE", "KAFKA_BROKERS", "OUTBOX_X"]);
        let nearest = |name: &str| closest(name, &known);
        assert_eq!(
            nearest("BOOKING_EXPIRATION_BATCHSIZE").as_deref(),
            Some("BOOKING_EXPIRATION_BATCH_SIZE")
        );
        assert_eq!(nearest("KAFKA_BROKER").as_deref(), Some("KAFKA_BROKERS"));
        // Two edits are always allowed (a short name), more only for a long one.
        assert_eq!(nearest("OUTBOX_YZ").as_deref(), Some("OUTBOX_X"));
        assert_eq!(nearest("KAFKA_BRKRS_X"), None);
    }
}
