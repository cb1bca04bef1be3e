//! `testbed serve postgres [--tls DIR]`: starts a throwaway server for a script (the
//! demo, the bench, image-test, the by-hand steps), prints its address (the URL) as
//! the only stdout line, serves until stdin reaches end of file or SIGTERM/SIGINT
//! arrives, then stops it and removes its directory. If this process is killed, the
//! server gets its death signal (a fast shutdown) all the same. `testbed serve kafka`
//! and `testbed serve jaeger` do the same for a broker (or three nodes) and Jaeger
//! (`kafka::cli`: their arguments, what they print); `testbed serve kube` for a
//! Kubernetes control plane (`kube`: its `KUBE_URL=…` and `KUBECONFIG=…` lines).
//!
//! `testbed start postgres|kafka STATE_DIR …` starts a server that outlives it instead,
//! detached, its files in STATE_DIR, prints its address and exits; `testbed stop
//! STATE_DIR [--kill]` stops it, its data kept for a start again (`detach`).

use std::path::PathBuf;
use std::sync::mpsc;

use booking_expire_testbed::kube::ControlPlane;
use booking_expire_testbed::postgres::Postgres;
use booking_expire_testbed::process::remove_at_exit;
use booking_expire_testbed::{Error, Result, detach, kafka};

const USAGE: &str = "usage: testbed serve postgres [--tls DIR]
       testbed serve kafka [--nodes 3] [--tls DIR] [--authorizer] [--user NAME:PASSWORD]...
       testbed serve jaeger
       testbed serve kube
       testbed start postgres|kafka STATE_DIR ...   (testbed start for its flags)
       testbed stop STATE_DIR [--kill]";

/// What to serve.
#[derive(Debug, PartialEq, Eq)]
enum Service {
    Postgres {
        tls: Option<PathBuf>,
    },
    /// `serve kafka` and `serve jaeger`, parsed by `kafka::cli`.
    Kafka(Vec<String>),
    Jaeger(Vec<String>),
    /// `serve kube`: etcd, the API server and the controller manager.
    Kube,
}

fn parse(args: &[String]) -> Result<Service> {
    let mut args = args.iter().map(String::as_str);
    if args.next() != Some("serve") {
        return Err(Error::Usage(USAGE.into()));
    }
    match args.next() {
        Some("postgres") => {
            let mut tls = None;
            while let Some(arg) = args.next() {
                match arg {
                    "--tls" => {
                        let dir = args
                            .next()
                            .ok_or_else(|| Error::Usage("--tls needs a directory".into()))?;
                        tls = Some(PathBuf::from(dir));
                    }
                    other => {
                        return Err(Error::Usage(format!("unknown argument {other}\n{USAGE}")));
                    }
                }
            }
            Ok(Service::Postgres { tls })
        }
        Some("kafka") => Ok(Service::Kafka(args.map(str::to_owned).collect())),
        Some("jaeger") => Ok(Service::Jaeger(args.map(str::to_owned).collect())),
        Some("kube") => match args.next() {
            None => Ok(Service::Kube),
            Some(other) => Err(Error::Usage(format!("unknown argument {other}\n{USAGE}"))),
        },
        Some(other) => Err(Error::Usage(format!("unknown service {other}\n{USAGE}"))),
        None => Err(Error::Usage(USAGE.into())),
    }
}

/// Blocks until stdin reaches end of file or SIGTERM/SIGINT/SIGHUP arrives.
fn wait_for_the_end() -> Result<()> {
    let (done, ended) = mpsc::channel::<()>();
    let on_eof = done.clone();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        let _ = on_eof.send(());
    });
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ])
    .map_err(Error::doing("cannot catch the signals"))?;
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            let _ = done.send(());
        }
    });
    let _ = ended.recv();
    Ok(())
}

fn serve(service: Service) -> Result<()> {
    match service {
        Service::Postgres { tls } => {
            let mut builder = Postgres::new();
            if let Some(dir) = tls {
                builder = builder.tls(dir);
            }
            let server = builder.start()?;
            println!("{}", server.url());
            wait_for_the_end()?;
            server.stop()
        }
        Service::Kafka(args) => serve_until_the_end(kafka::cli::start(&args)?),
        Service::Jaeger(args) => serve_until_the_end(kafka::cli::start_jaeger(&args)?),
        Service::Kube => {
            let kube = ControlPlane::start()?;
            remove_at_exit(kube.dir());
            println!(
                "KUBE_URL={}\nKUBECONFIG={}",
                kube.url,
                kube.kubeconfig.display()
            );
            wait_for_the_end()?;
            drop(kube);
            Ok(())
        }
    }
}

/// Prints the address of what `kafka::cli` started, serves until the end, then stops
/// it (the drop).
fn serve_until_the_end((lines, served): (String, kafka::cli::Served)) -> Result<()> {
    println!("{lines}");
    wait_for_the_end()?;
    drop(served);
    Ok(())
}

/// `testbed start` and `testbed stop`: the address a start prints.
fn detached(args: &[String]) -> Result<(), (u8, Error)> {
    let what = detach::parse(args, &|name| std::env::var(name).ok()).map_err(|e| (2, e))?;
    if let Some(address) = detach::run(what).map_err(|e| (1, e))? {
        println!("{address}");
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match args.first().map(String::as_str) {
        Some("start" | "stop") => detached(&args),
        _ => parse(&args)
            .map_err(|e| (2, e))
            .and_then(|service| serve(service).map_err(|e| (1, e))),
    };
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err((code, e)) => {
            eprintln!("testbed: {e}");
            std::process::ExitCode::from(code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    /// The message of the refusal of `line`, as the binary prints it.
    fn refused(line: &str) -> String {
        match parse(&args(line)) {
            Err(Error::Usage(message)) => message,
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn serve_postgres_takes_a_tls_directory() {
        assert_eq!(
            parse(&args("serve postgres")).unwrap(),
            Service::Postgres { tls: None }
        );
        assert_eq!(
            parse(&args("serve postgres --tls /c")).unwrap(),
            Service::Postgres {
                tls: Some("/c".into())
            }
        );
    }

    #[test]
    fn anything_else_is_refused_with_the_usage() {
        assert_eq!(refused(""), USAGE);
        assert_eq!(refused("serve"), USAGE);
        assert!(refused("serve kube -x").starts_with("unknown argument -x"));
        assert!(refused("serve mysql").starts_with("unknown service mysql"));
        assert_eq!(refused("serve postgres --tls"), "--tls needs a directory");
        assert!(refused("serve postgres -x").starts_with("unknown argument -x"));
    }
}
