//! TLS for the tests: certificates made with `openssl` for one test, a PostgreSQL
//! server of the test's own that accepts TCP clients only over TLS, and a Kafka broker
//! of its own with SSL and SASL_SSL (SCRAM-SHA-512) listeners besides PLAINTEXT.

use crate::{native_tls, postgres, postgres_native_tls};
use std::path::PathBuf;
use std::process::{Command, Output};

use booking_expire_testbed::kafka::{Broker, Kafka};
use native_tls::{Certificate, TlsConnector};
use postgres::Client;
use postgres_native_tls::MakeTlsConnector;
use uuid::Uuid;

use super::{BIN, Run};

fn scripts() -> PathBuf {
    super::repo().join("scripts")
}

fn temp_dir(prefix: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{prefix}-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn checked(what: &str, out: std::io::Result<Output>) -> Output {
    let out = out
        .unwrap_or_else(|e| panic!("{what}: {e} (is it installed? scripts/test.sh installs it)"));
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A CA, a server certificate it signed for `localhost` and 127.0.0.1 (SAN
/// `DNS:localhost, IP:127.0.0.1`), and a second, unrelated CA. The directory holds
/// `server.crt` and `server.key` as `scripts/pg-start.sh` (PG_SSL_CERT_DIR) and
/// `scripts/kafka-start.sh` (KAFKA_TLS_DIR) expect them; removed on drop.
pub struct Certs {
    pub dir: PathBuf,
    /// The CA that signed the server certificate.
    pub ca: PathBuf,
    /// A CA that signed nothing the servers present.
    pub other_ca: PathBuf,
}

impl Certs {
    pub fn generate() -> Self {
        let dir = temp_dir("be-tls");
        std::fs::write(
            dir.join("ca.cnf"),
            "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = booking-expire test CA\n\
             [v3_ca]\nbasicConstraints = critical, CA:TRUE\n\
             keyUsage = critical, keyCertSign, cRLSign\nsubjectKeyIdentifier = hash\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("server.ext"),
            "basicConstraints = CA:FALSE\nkeyUsage = critical, digitalSignature, keyEncipherment\n\
             extendedKeyUsage = serverAuth\nsubjectAltName = DNS:localhost, IP:127.0.0.1\n",
        )
        .unwrap();
        // Arguments are whitespace-separated; no file name here has a space.
        let openssl = |args: &str| {
            let args: Vec<&str> = args.split_whitespace().collect();
            checked(
                &format!("openssl {}", args.join(" ")),
                Command::new("openssl")
                    .args(&args)
                    .current_dir(&dir)
                    .output(),
            );
        };
        for name in ["ca", "other-ca"] {
            openssl(&format!(
                "req -x509 -newkey rsa:2048 -nodes -days 2 -config ca.cnf -extensions v3_ca \
                 -keyout {name}.key -out {name}.crt"
            ));
        }
        // The key in PKCS#8, unencrypted: what PostgreSQL and Kafka's PEM keystore read.
        openssl(
            "req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout server.key -out server.csr",
        );
        openssl(
            "x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
             -extfile server.ext -out server.crt",
        );
        Certs {
            ca: dir.join("ca.crt"),
            other_ca: dir.join("other-ca.crt"),
            dir,
        }
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A throwaway PostgreSQL with `ssl = on` (`scripts/pg-start.sh` with PG_SSL_CERT_DIR):
/// its pg_hba.conf lets TCP clients in only over TLS, so a client that connected at
/// all used TLS. Stopped and removed on drop.
pub struct TlsPostgres {
    state: PathBuf,
    /// `postgres://postgres@127.0.0.1:PORT/postgres`, without TLS parameters.
    pub url: String,
    pub port: u16,
    ca: PathBuf,
}

impl TlsPostgres {
    pub fn start(certs: &Certs) -> Self {
        let state = temp_dir("be-pg-tls");
        let out = checked(
            "scripts/pg-start.sh",
            Command::new(scripts().join("pg-start.sh"))
                .arg(&state)
                .env("PG_SSL_CERT_DIR", &certs.dir)
                .output(),
        );
        let url = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        let port = std::fs::read_to_string(state.join("port"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        TlsPostgres {
            state,
            url,
            port,
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

impl Drop for TlsPostgres {
    fn drop(&mut self) {
        let _ = Command::new(scripts().join("pg-stop.sh"))
            .arg(&self.state)
            .output();
        let _ = std::fs::remove_dir_all(&self.state);
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
