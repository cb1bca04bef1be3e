//! The control plane's keys and credentials, made with `openssl` in its directory: a
//! CA and the API server's serving certificate it signed (for `localhost`, 127.0.0.1
//! and the first service IP, the `kubernetes` Service's), the service-account key
//! pair (the API server signs and checks tokens with it), and the static bearer
//! tokens (`--token-auth-file`) of the test's user, in `system:masters`, and of the
//! controller manager (`system:kube-controller-manager`, which RBAC's bootstrap
//! policy binds to what it needs, its controllers then acting as their own service
//! accounts).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The files and the tokens.
#[derive(Clone, Debug)]
pub struct Pki {
    pub ca: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    /// The service-account signing key (private) and its public half.
    pub sa_key: PathBuf,
    pub sa_pub: PathBuf,
    /// `--token-auth-file`.
    pub tokens: PathBuf,
    /// The test's: user `admin`, group `system:masters`.
    pub admin_token: String,
    /// The controller manager's: user `system:kube-controller-manager`.
    pub controller_manager_token: String,
}

/// The first address of the service range (`--service-cluster-ip-range`), the
/// `kubernetes` Service's: the serving certificate names it.
pub const SERVICE_RANGE: &str = "10.0.0.0/24";
const FIRST_SERVICE_IP: &str = "10.0.0.1";

/// A token no other run guesses: 128 random bits (std's hasher keys), in hex.
fn token() -> String {
    let a = RandomState::new().hash_one(1u8);
    let b = RandomState::new().hash_one(2u8);
    format!("{a:016x}{b:016x}")
}

/// Makes them in `dir`.
pub fn make(dir: &Path) -> crate::Result<Pki> {
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text).map_err(|e| crate::Error::doing(name)(e))
    };
    write(
        "ca.cnf",
        "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = booking-expire test kube CA\n\
         [v3_ca]\nbasicConstraints = critical, CA:TRUE\n\
         keyUsage = critical, keyCertSign, cRLSign\nsubjectKeyIdentifier = hash\n",
    )?;
    write(
        "apiserver.ext",
        &format!(
            "basicConstraints = CA:FALSE\nkeyUsage = critical, digitalSignature, keyEncipherment\n\
             extendedKeyUsage = serverAuth\n\
             subjectAltName = DNS:localhost, DNS:kubernetes.default.svc, IP:127.0.0.1, \
             IP:{FIRST_SERVICE_IP}\n"
        ),
    )?;
    // Arguments are whitespace-separated; no file name here has a space.
    let openssl = |args: &str| -> crate::Result<()> {
        let args: Vec<&str> = args.split_whitespace().collect();
        let what = format!("openssl {}", args.join(" "));
        let out = Command::new("openssl")
            .args(&args)
            .current_dir(dir)
            .output()
            .map_err(|e| {
                crate::Error::Tool(format!(
                    "{what}: {e} (is it installed? scripts/test.sh installs it)"
                ))
            })?;
        if out.status.success() {
            Ok(())
        } else {
            Err(crate::Error::Tool(format!(
                "{what} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )))
        }
    };
    openssl(
        "req -x509 -newkey rsa:2048 -nodes -days 2 -config ca.cnf -extensions v3_ca \
         -keyout ca.key -out ca.crt",
    )?;
    openssl(
        "req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver -keyout apiserver.key \
         -out apiserver.csr",
    )?;
    openssl(
        "x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
         -extfile apiserver.ext -out apiserver.crt",
    )?;
    openssl("genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key")?;
    openssl("pkey -in sa.key -pubout -out sa.pub")?;
    let admin_token = token();
    let controller_manager_token = token();
    write(
        "tokens.csv",
        &format!(
            "{admin_token},admin,admin,system:masters\n\
             {controller_manager_token},system:kube-controller-manager,kube-controller-manager\n"
        ),
    )?;
    Ok(Pki {
        ca: dir.join("ca.crt"),
        serving_cert: dir.join("apiserver.crt"),
        serving_key: dir.join("apiserver.key"),
        sa_key: dir.join("sa.key"),
        sa_pub: dir.join("sa.pub"),
        tokens: dir.join("tokens.csv"),
        admin_token,
        controller_manager_token,
    })
}

/// A kubeconfig for `server` (`https://127.0.0.1:P`) as the user of `token`.
pub fn kubeconfig(server: &str, ca: &Path, token: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
  - name: test
    cluster:
      server: {server}
      certificate-authority: {ca}
users:
  - name: test
    user:
      token: {token}
contexts:
  - name: test
    context:
      cluster: test
      user: test
current-context: test
",
        ca = ca.display()
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn two_tokens_differ_and_are_32_hex_digits() {
        let (a, b) = (super::token(), super::token());
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()), "{a}");
    }
}
