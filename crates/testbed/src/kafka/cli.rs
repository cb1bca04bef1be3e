//! `testbed serve kafka` and `testbed serve jaeger` (the binary serves what these
//! start until stdin's end or a signal, then drops it): the service started, and its
//! address to print (a broker's or a cluster's PLAINTEXT addresses, comma-separated;
//! Jaeger's `OTLP_HTTP=…`, `OTLP_GRPC=…`, `QUERY=…` lines). The environment of
//! `scripts/kafka-start.sh` sets the defaults; a flag overrides it.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

use super::{Kafka, config};
use crate::observe::Jaeger;
use crate::process::remove_at_exit;

/// What `serve kafka` was asked for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Args {
    pub nodes: u32,
    pub version: Option<String>,
    pub port: Option<u16>,
    pub tls: Option<PathBuf>,
    pub authorizer: bool,
    /// SCRAM users (name, password), the first one the broker's `relay`.
    pub users: Vec<(String, String)>,
    /// A directory to write the addresses and the users into (the names the script
    /// wrote: kafka_brokers, kafka_ssl_brokers, kafka_sasl_ssl_brokers,
    /// kafka_sasl_user, kafka_sasl_password).
    pub state: Option<PathBuf>,
}

pub const USAGE: &str = "usage: testbed serve kafka [--nodes 1|3] [--version V] [--port P] \
[--tls DIR] [--authorizer] [--user NAME:PASSWORD]... [--state DIR]
  defaults from KAFKA_NODES, KAFKA_VERSION, KAFKA_PORT, KAFKA_TLS_DIR, KAFKA_AUTHORIZER=1,
  KAFKA_SASL_USER / KAFKA_SASL_PASSWORD, KAFKA_SASL_EXTRA_USERS (\"name:password ...\")";

fn var(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    env(name).filter(|v| !v.is_empty())
}

impl Args {
    /// The arguments after `serve kafka`, over the defaults of `env`.
    pub fn parse(args: &[String], env: &dyn Fn(&str) -> Option<String>) -> Result<Args> {
        let number = |what: &str, v: &str| {
            v.trim()
                .parse::<u32>()
                .map_err(|_| Error::Usage(format!("{what} must be a number, got {v:?}")))
        };
        let mut a = Args {
            nodes: var(env, "KAFKA_NODES").map_or(Ok(1), |v| number("KAFKA_NODES", &v))?,
            version: var(env, "KAFKA_VERSION"),
            port: var(env, "KAFKA_PORT")
                .map(|v| number("KAFKA_PORT", &v))
                .transpose()?
                .map(port)
                .transpose()?,
            tls: var(env, "KAFKA_TLS_DIR").map(PathBuf::from),
            authorizer: var(env, "KAFKA_AUTHORIZER").as_deref() == Some("1"),
            users: Vec::new(),
            state: None,
        };
        if let Some(name) = var(env, "KAFKA_SASL_USER") {
            let password = var(env, "KAFKA_SASL_PASSWORD").unwrap_or_else(config::random_password);
            a.users.push((name, password));
        } else if let Some(password) = var(env, "KAFKA_SASL_PASSWORD") {
            a.users.push(("relay".into(), password));
        }
        let extra = config::parse_users(&var(env, "KAFKA_SASL_EXTRA_USERS").unwrap_or_default())?;
        let mut flag_users = Vec::new();
        let mut rest = args.iter();
        while let Some(flag) = rest.next() {
            let mut value = || {
                rest.next()
                    .map(|v| v.trim().to_owned())
                    .ok_or_else(|| Error::Usage(format!("{flag} needs a value\n{USAGE}")))
            };
            match flag.as_str() {
                "--nodes" => a.nodes = number("--nodes", &value()?)?,
                "--version" => a.version = Some(value()?),
                "--port" => a.port = Some(port(number("--port", &value()?)?)?),
                "--tls" => a.tls = Some(value()?.into()),
                "--authorizer" => a.authorizer = true,
                "--user" => flag_users.extend(config::parse_users(&value()?)?),
                "--state" => a.state = Some(value()?.into()),
                other => return Err(Error::Usage(format!("unknown argument {other:?}\n{USAGE}"))),
            }
        }
        if !flag_users.is_empty() {
            if a.tls.is_none() {
                return Err(Error::Usage(
                    "SCRAM users need TLS (--tls DIR or KAFKA_TLS_DIR)".into(),
                ));
            }
            a.users = flag_users;
        } else if a.tls.is_none() {
            // As the script did: the users of the environment are TLS's only.
            a.users.clear();
        } else {
            if a.users.is_empty() && !extra.is_empty() {
                a.users.push(("relay".into(), config::random_password()));
            }
            a.users.extend(extra);
        }
        match a.nodes {
            1 => {}
            3 if a.tls.is_none() && !a.authorizer && a.port.is_none() => {}
            3 => {
                return Err(Error::Usage(
                    "three nodes run PLAINTEXT only, on free ports".into(),
                ));
            }
            n => return Err(Error::Usage(format!("--nodes must be 1 or 3, got {n}"))),
        }
        Ok(a)
    }

    pub(super) fn kafka(&self) -> Kafka {
        let mut kafka = Kafka::new().authorizer(self.authorizer);
        if let Some(version) = &self.version {
            kafka = kafka.version(version);
        }
        if let Some(port) = self.port {
            kafka = kafka.port(port);
        }
        if let Some(dir) = &self.tls {
            kafka = kafka.tls(dir);
        }
        self.users.iter().fold(kafka, |k, (n, p)| k.user(n, p))
    }
}

fn port(n: u32) -> Result<u16> {
    u16::try_from(n)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| Error::Usage(format!("a port is 1..=65535, not {n}")))
}

fn write_state(dir: &Path, files: &[(&str, String)]) -> Result<()> {
    for (name, text) in files {
        super::config::write_private(&dir.join(name), format!("{text}\n").as_bytes())?;
    }
    Ok(())
}

/// A service being served: stopped, and its directory removed, when dropped.
#[derive(Debug)]
pub enum Served {
    Broker(Box<super::Broker>),
    Cluster(Box<super::Cluster>),
    Jaeger(Box<Jaeger>),
}

/// `testbed serve kafka ARGS`: the broker or cluster started, and what to print (its
/// PLAINTEXT addresses). Should this process die before the value is dropped, the
/// nodes die with it and a guard removes their directory.
pub fn start(args: &[String]) -> Result<(String, Served)> {
    let args = Args::parse(args, &|name| std::env::var(name).ok())?;
    let kafka = args.kafka();
    if args.nodes == 3 {
        let cluster = kafka.start_cluster()?;
        remove_at_exit(cluster.dir());
        if let Some(state) = &args.state {
            write_state(state, &[("kafka_brokers", cluster.brokers())])?;
        }
        return Ok((cluster.brokers(), Served::Cluster(Box::new(cluster))));
    }
    let broker = kafka.start()?;
    remove_at_exit(broker.dir());
    if let Some(state) = &args.state {
        let mut files = vec![("kafka_brokers", broker.brokers())];
        if let (Some(ssl), Some(sasl)) = (broker.ssl(), broker.sasl_ssl()) {
            let (user, password) = broker.users()[0].clone();
            files.extend([
                ("kafka_ssl_brokers", ssl),
                ("kafka_sasl_ssl_brokers", sasl),
                ("kafka_sasl_user", user),
                ("kafka_sasl_password", password),
            ]);
        }
        write_state(state, &files)?;
    }
    Ok((broker.brokers(), Served::Broker(Box::new(broker))))
}

/// `testbed serve jaeger` (no arguments; `JAEGER_VERSION`, `JAEGER_START_TIMEOUT`):
/// Jaeger started, and its `OTLP_HTTP=`, `OTLP_GRPC=` and `QUERY=` lines.
pub fn start_jaeger(args: &[String]) -> Result<(String, Served)> {
    if let Some(arg) = args.first() {
        return Err(Error::Usage(format!(
            "unknown argument {arg:?}\nusage: testbed serve jaeger"
        )));
    }
    let jaeger = Jaeger::start()?;
    remove_at_exit(jaeger.dir());
    let lines = format!(
        "OTLP_HTTP={}\nOTLP_GRPC={}\nQUERY=http://{}",
        jaeger.otlp_http, jaeger.otlp_grpc, jaeger.query
    );
    Ok((lines, Served::Jaeger(Box::new(jaeger))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str], env: &[(&str, &str)]) -> Result<Args> {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        Args::parse(&args, &move |name| {
            env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn the_environment_sets_the_defaults_and_a_flag_overrides_it() {
        assert_eq!(
            parse(&[], &[]).unwrap(),
            Args {
                nodes: 1,
                ..Args::default()
            }
        );
        let env = [
            ("KAFKA_VERSION", "3.9.1"),
            ("KAFKA_TLS_DIR", "/certs"),
            ("KAFKA_AUTHORIZER", "1"),
            ("KAFKA_SASL_USER", "relay"),
            ("KAFKA_SASL_PASSWORD", "pw"),
            ("KAFKA_SASL_EXTRA_USERS", "chessboard:c1 messenger:m1"),
            ("KAFKA_PORT", "9092"),
        ];
        let a = parse(&[], &env).unwrap();
        assert_eq!(a.version.as_deref(), Some("3.9.1"));
        assert_eq!(a.port, Some(9092));
        assert!(a.authorizer);
        assert_eq!(a.tls, Some(PathBuf::from("/certs")));
        let names: Vec<&str> = a.users.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["relay", "chessboard", "messenger"]);
        let b = parse(
            &["--version", " 4.4.0 ", "--user", "a:b", "--state", "/s"],
            &env,
        )
        .unwrap();
        assert_eq!(b.version.as_deref(), Some("4.4.0"));
        assert_eq!(b.users, [("a".to_owned(), "b".to_owned())]);
        assert_eq!(b.state, Some(PathBuf::from("/s")));
    }

    #[test]
    fn what_cannot_be_served_is_refused_with_a_reason() {
        assert!(
            parse(&["--nodes", "2"], &[])
                .unwrap_err()
                .to_string()
                .contains("1 or 3")
        );
        assert!(
            parse(&["--nodes", "3", "--tls", "/c"], &[])
                .unwrap_err()
                .to_string()
                .contains("PLAINTEXT")
        );
        assert!(
            parse(&["--user", "a:b"], &[])
                .unwrap_err()
                .to_string()
                .contains("need TLS")
        );
        assert!(
            parse(&["--port", "70000"], &[])
                .unwrap_err()
                .to_string()
                .contains("1..=65535")
        );
        assert!(
            parse(&["--port"], &[])
                .unwrap_err()
                .to_string()
                .contains("needs a value")
        );
        assert!(
            parse(&["--bogus"], &[])
                .unwrap_err()
                .to_string()
                .contains("unknown argument")
        );
        assert!(
            parse(&[], &[("KAFKA_NODES", "x")])
                .unwrap_err()
                .to_string()
                .contains("a number")
        );
        let plain = parse(&[], &[("KAFKA_SASL_EXTRA_USERS", "a:b")]).unwrap();
        assert!(plain.users.is_empty(), "{plain:?}");
        let tls = parse(&["--tls", "/c"], &[("KAFKA_SASL_EXTRA_USERS", "a:b")]).unwrap();
        assert_eq!(tls.users[0].0, "relay");
        assert_eq!(tls.users[1], ("a".to_owned(), "b".to_owned()));
        let three = parse(&[], &[("KAFKA_NODES", "3")]).unwrap();
        assert_eq!(three.nodes, 3);
    }
}
