//! TLS for the tests: certificates made with `openssl` for one test (the testbed
//! crate's), a PostgreSQL server of the test's own that accepts TCP clients only over TLS, and a Kafka broker
//! of its own with SSL and SASL_SSL (SCRAM-SHA-512) listeners besides PLAINTEXT.

use crate::{native_tls, postgres, postgres_native_tls};
use std::path::PathBuf;
use std::process::Command;

use booking_expire_testbed::kafka::{Broker, Kafka};
use native_tls::{Certificate, TlsConnector};
use postgres::Client;
use postgres_native_tls::MakeTlsConnector;

use booking_expire_testbed::postgres::{Postgres, Server};

use super::{BIN, Run};

/// The certificates: the testbed crate's (a CA, a server certificate it signed for
/// `localhost` and 127.0.0.1, an unrelated CA).
pub use booking_expire_testbed::tls::Certs;

/// A throwaway PostgreSQL with `ssl = on` (the testbed crate's, with the certificates'
/// directory): its pg_hba.conf lets TCP clients in only over TLS, so a client that
/// connected at all used TLS. Stopped and removed on drop.
pub struct TlsPostgres {
    _server: Server,
    /// `postgres://postgres@127.0.0.1:PORT/postgres`, without TLS parameters.
    pub url: String,
    pub port: u16,
    ca: PathBuf,
}

impl TlsPostgres {
    pub fn start(certs: &Certs) -> Self {
        let server = Postgres::new()
            .tls(&certs.dir)
            .start()
            .unwrap_or_else(|e| panic!("a PostgreSQL with TLS: {e}"));
        TlsPostgres {
            url: server.url(),
            port: server.port(),
            _server: server,
            ca: certs.ca.clone(),
        }
    }

    /// The server's URL with these query parameters (`sslmode=…&sslrootcert=…`).
    pub fn url_with(&self, query: &str) -> String {
        format!("{}?{query}", self.url)
    }

    /// A superuser session over verified TLS.
    pub fn admin(&self) -> Client {
        let ca = Certificate::from_pem(&std::fs::read(&self.ca).unwrap()).unwrap();
        let connector = TlsConnector::builder()
            .add_root_certificate(ca)
            .build()
            .unwrap();
        Client::connect(
            &self.url_with("sslmode=require"),
            MakeTlsConnector::new(connector),
        )
        .expect("connect to the TLS server as admin")
    }

    /// Applies every migration of `sql/` to its `postgres` database, by the binary's
    /// `migrate` over verified TLS.
    pub fn migrate(&self) {
        super::migrate_url(&self.url_with(&format!(
            "sslmode=verify-ca&sslrootcert={}",
            self.ca.display()
        )));
    }
}

/// The binary with a clean environment plus the given variables.
pub fn command(envs: &[(&str, &str)], args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd
}

pub fn run(envs: &[(&str, &str)], args: &[&str]) -> Run {
    Run::of(command(envs, args).output().expect("run the binary"))
}

/// A single-node broker of the test's own (the testbed crate's, with TLS): PLAINTEXT
/// for the admin and the test's consumer, SSL, and SASL_SSL with one SCRAM-SHA-512
/// user. Killed and removed on drop.
pub struct TlsBroker {
    pub plaintext: String,
    pub ssl: String,
    pub sasl_ssl: String,
    pub user: String,
    pub password: String,
    broker: Broker,
}

impl TlsBroker {
    pub fn start(certs: &Certs) -> Self {
        let broker = Kafka::new()
            .tls(&certs.dir)
            .start()
            .unwrap_or_else(|e| panic!("a TLS broker of the test's own: {e}"));
        let (user, password) = broker.users()[0].clone();
        TlsBroker {
            plaintext: broker.brokers(),
            ssl: broker.ssl().expect("an SSL listener"),
            sasl_ssl: broker.sasl_ssl().expect("a SASL_SSL listener"),
            user,
            password,
            broker,
        }
    }
}

impl Drop for TlsBroker {
    fn drop(&mut self) {
        self.broker.kill();
    }
}

/// A TCP proxy to `target` that holds each chunk the server sends for `delay` before
/// passing it on: a broker that answers slowly, as a loaded host's does, so that its
/// verdict on a TLS handshake or on credentials comes only after several `delay`s. A
/// side's end ends the other: the client sees its connection cut once the server
/// closed it (a broker closes it after refusing the credentials). Stopped on drop.
pub struct SlowLink {
    /// `127.0.0.1:PORT`, where clients connect.
    pub addr: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl SlowLink {
    pub fn start(target: &str, delay: std::time::Duration) -> Self {
        use std::net::{Shutdown, TcpListener, TcpStream};
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = TcpListener::bind("127.0.0.1:0").expect("a port for the slow link");
        let addr = listener.local_addr().unwrap().to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let target = target.to_owned();
        let stopped = Arc::clone(&stop);
        let accept = std::thread::spawn(move || {
            for client in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(&target) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let (mut from_client, mut to_server) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from_client, &mut to_server);
                    let _ = to_server.shutdown(Shutdown::Both);
                    let _ = from_client.shutdown(Shutdown::Both);
                });
                let (mut from_server, mut to_client) = (server, client);
                std::thread::spawn(move || {
                    use std::io::{Read, Write};
                    let mut chunk = vec![0u8; 64 * 1024];
                    loop {
                        match from_server.read(&mut chunk) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                // Behaviour: a server that answers slowly.
                                std::thread::sleep(delay);
                                if to_client.write_all(&chunk[..n]).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    let _ = to_client.shutdown(Shutdown::Both);
                    let _ = from_server.shutdown(Shutdown::Both);
                });
            }
        });
        SlowLink {
            addr,
            stop,
            accept: Some(accept),
        }
    }
}

impl Drop for SlowLink {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        // Wakes the accept, which then sees the stop.
        let _ = std::net::TcpStream::connect(&self.addr);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}
