//! Certificates for the TLS tests, made with `openssl`: a CA, a server certificate it
//! signed for `localhost` and 127.0.0.1, and a second, unrelated CA.

use crate::error::{Error, Result};
use std::path::PathBuf;
use std::process::Command;

use crate::process::TempDir;

/// A CA, a server certificate it signed for `localhost` and 127.0.0.1 (SAN
/// `DNS:localhost, IP:127.0.0.1`), and a second, unrelated CA. The directory holds
/// `server.crt` and `server.key` as the PostgreSQL ([`crate::postgres::Postgres::tls`])
/// and Kafka servers expect them; removed on drop.
pub struct Certs {
    pub dir: PathBuf,
    /// The CA that signed the server certificate.
    pub ca: PathBuf,
    /// A CA that signed nothing the servers present.
    pub other_ca: PathBuf,
    _dir: TempDir,
}

impl Certs {
    /// Makes them; panics naming the `openssl` command that failed.
    pub fn generate() -> Self {
        Self::try_generate().unwrap_or_else(|e| panic!("{e}"))
    }

    pub fn try_generate() -> Result<Self> {
        let temp = TempDir::new("tls")?;
        let dir = temp.path().to_owned();
        let write = |name: &str, text: &str| {
            std::fs::write(dir.join(name), text).map_err(Error::doing(name))
        };
        write(
            "ca.cnf",
            "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = booking-expire test CA\n\
             [v3_ca]\nbasicConstraints = critical, CA:TRUE\n\
             keyUsage = critical, keyCertSign, cRLSign\nsubjectKeyIdentifier = hash\n",
        )?;
        write(
            "server.ext",
            "basicConstraints = CA:FALSE\nkeyUsage = critical, digitalSignature, keyEncipherment\n\
             extendedKeyUsage = serverAuth\nsubjectAltName = DNS:localhost, IP:127.0.0.1\n",
        )?;
        // Arguments are whitespace-separated; no file name here has a space.
        let openssl = |args: &str| -> Result<()> {
            let args: Vec<&str> = args.split_whitespace().collect();
            let what = format!("openssl {}", args.join(" "));
            let out = Command::new("openssl")
                .args(&args)
                .current_dir(&dir)
                .output()
                .map_err(|e| {
                    Error::Tool(format!(
                        "{what}: {e} (is it installed? scripts/test.sh installs it)"
                    ))
                })?;
            if out.status.success() {
                Ok(())
            } else {
                Err(Error::Tool(format!(
                    "{what} failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                )))
            }
        };
        for name in ["ca", "other-ca"] {
            openssl(&format!(
                "req -x509 -newkey rsa:2048 -nodes -days 2 -config ca.cnf -extensions v3_ca \
                 -keyout {name}.key -out {name}.crt"
            ))?;
        }
        // The key in PKCS#8, unencrypted: what PostgreSQL and Kafka's PEM keystore read.
        openssl(
            "req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout server.key -out server.csr",
        )?;
        openssl(
            "x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
             -extfile server.ext -out server.crt",
        )?;
        Ok(Certs {
            ca: dir.join("ca.crt"),
            other_ca: dir.join("other-ca.crt"),
            dir,
            _dir: temp,
        })
    }
}
