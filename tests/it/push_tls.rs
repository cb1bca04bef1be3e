//! The metrics push to a Pushgateway behind TLS with basic authentication: Debian's
//! `prometheus-pushgateway` with its own `--web.config.file` (TLS certificate, bcrypt
//! hashed users), a CA of the test's own. The push arrives; a wrong password, an
//! untrusted certificate or credentials over plain http do not get through; the password
//! never appears in any output.

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use booking_expire_testbed::observe::Pushgateway;
use common::tls::Certs;
use common::*;

const USER: &str = "pusher";
const PASSWORD: &str = "pw-7f3c1e9a-never-printed";

/// The testbed's Pushgateway behind the web configuration of `dir/web.yml`; killed and
/// removed when dropped.
struct SecurePushgateway {
    _gateway: Pushgateway,
    port: u16,
    dir: PathBuf,
}

impl SecurePushgateway {
    fn start(certs: &Certs) -> Self {
        let dir = std::env::temp_dir().join(format!("be-pgw-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let hash = bcrypt::hash(PASSWORD, 4).unwrap();
        std::fs::write(
            dir.join("web.yml"),
            format!(
                "tls_server_config:\n  cert_file: {}\n  key_file: {}\nbasic_auth_users:\n  {USER}: '{hash}'\n",
                certs.dir.join("server.crt").display(),
                certs.dir.join("server.key").display()
            ),
        )
        .unwrap();
        let gateway = Pushgateway::start_with(Some(&dir.join("web.yml")))
            .unwrap_or_else(|e| panic!("the TLS Pushgateway: {e}"));
        let port = gateway.port;
        SecurePushgateway {
            _gateway: gateway,
            port,
            dir,
        }
    }

    fn url(&self) -> String {
        format!("https://localhost:{}", self.port)
    }

    fn get(&self, certs: &Certs, path: &str) -> reqwest::Result<(u16, String)> {
        get_at(self.port, certs, path)
    }
}

/// GET `path` of the Pushgateway on `port` (https, the test's CA, basic auth).
fn get_at(port: u16, certs: &Certs, path: &str) -> reqwest::Result<(u16, String)> {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(&certs.ca).unwrap()).unwrap();
    let client = reqwest::blocking::Client::builder()
        .add_root_certificate(ca)
        .timeout(Duration::from_secs(5))
        .build()?;
    let response = client
        .get(format!("https://localhost:{port}{path}"))
        .basic_auth(USER, Some(PASSWORD))
        .send()?;
    Ok((response.status().as_u16(), response.text()?))
}

impl Drop for SecurePushgateway {
    fn drop(&mut self) {
        // The gateway itself is killed as the field is dropped, right after.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn never_shows_the_password(run: &Run) {
    assert!(!run.stdout.contains(PASSWORD), "{}", run.stdout);
    assert!(!run.stderr.contains(PASSWORD), "{}", run.stderr);
}

#[test]
fn the_push_reaches_a_pushgateway_behind_tls_and_basic_auth() {
    let certs = Certs::generate();
    let gateway = SecurePushgateway::start(&certs);
    let db = TestDb::new();
    seed(&mut db.client(), &[Seed::reserved(-60), Seed::booked(-60)]);
    let ca = certs.ca.display().to_string();

    // Debug logging of every crate on: still no password.
    let run = Run::of(
        db.command(&["run-once"])
            .env("PUSHGATEWAY_URL", gateway.url())
            .env("PUSHGATEWAY_CA_FILE", &ca)
            .env("PUSHGATEWAY_USERNAME", USER)
            .env("PUSHGATEWAY_PASSWORD", PASSWORD)
            .env("RUST_LOG", "trace")
            .output()
            .unwrap(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.result().counts(), (1, 1, 0, 0));
    assert!(run.stderr.contains("metrics pushed"), "{}", run.stderr);
    never_shows_the_password(&run);
    let (status, text) = gateway.get(&certs, "/metrics").unwrap();
    assert_eq!(status, 200);
    let line = "crm_booking_expiration_items{instance=\"\",job=\"crm_booking_expiration\",phase=\"Reserve\",step=\"run-once\"} 1";
    assert!(text.lines().any(|l| l == line), "{text}");

    // The password from a file, as a Kubernetes secret is mounted.
    let file = certs.dir.join("password");
    std::fs::write(&file, format!("{PASSWORD}\n")).unwrap();
    seed(&mut db.client(), &[Seed::reserved(-60)]);
    let run = Run::of(
        db.command(&["run-once"])
            .env("PUSHGATEWAY_URL", gateway.url())
            .env("PUSHGATEWAY_CA_FILE", &ca)
            .env("PUSHGATEWAY_USERNAME", USER)
            .env("PUSHGATEWAY_PASSWORD_FILE", &file)
            .output()
            .unwrap(),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stderr.contains("metrics pushed"), "{}", run.stderr);
    let (_, text) = gateway.get(&certs, "/metrics").unwrap();
    assert!(text.lines().any(|l| l == line), "{text}");
}

#[test]
fn wrong_credentials_an_untrusted_certificate_or_plain_http_do_not_get_through() {
    let certs = Certs::generate();
    let gateway = SecurePushgateway::start(&certs);
    let db = TestDb::new();
    seed(&mut db.client(), &[Seed::reserved(-60)]);
    let ca = certs.ca.display().to_string();
    let other_ca = certs.other_ca.display().to_string();

    let attempt = |envs: &[(&str, &str)]| {
        let mut cmd = db.command(&["run-once"]);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        Run::of(cmd.output().unwrap())
    };
    let url = gateway.url();

    let wrong = attempt(&[
        ("PUSHGATEWAY_URL", &url),
        ("PUSHGATEWAY_CA_FILE", &ca),
        ("PUSHGATEWAY_USERNAME", USER),
        ("PUSHGATEWAY_PASSWORD", "not-the-password"),
    ]);
    assert_eq!(wrong.code, 0, "{}", wrong.stderr);
    assert!(
        wrong.stderr.contains("metrics push failed"),
        "{}",
        wrong.stderr
    );
    assert!(
        wrong.stderr.contains("401 Unauthorized"),
        "{}",
        wrong.stderr
    );
    assert!(
        !wrong.stderr.contains("not-the-password"),
        "{}",
        wrong.stderr
    );

    let untrusted = attempt(&[
        ("PUSHGATEWAY_URL", &url),
        ("PUSHGATEWAY_CA_FILE", &other_ca),
        ("PUSHGATEWAY_USERNAME", USER),
        ("PUSHGATEWAY_PASSWORD", PASSWORD),
    ]);
    assert_eq!(untrusted.code, 0, "{}", untrusted.stderr);
    assert!(
        untrusted.stderr.contains("metrics push failed"),
        "{}",
        untrusted.stderr
    );
    assert!(
        untrusted.stderr.contains("certificate verify failed"),
        "{}",
        untrusted.stderr
    );
    never_shows_the_password(&untrusted);

    // Credentials are never sent in clear: refused before any work.
    let plain = attempt(&[
        ("PUSHGATEWAY_URL", &url.replace("https://", "http://")),
        ("PUSHGATEWAY_USERNAME", USER),
        ("PUSHGATEWAY_PASSWORD", PASSWORD),
    ]);
    assert_eq!(plain.code, 78, "{}", plain.stderr);
    assert!(
        plain
            .stderr
            .contains("credentials are sent only over https"),
        "{}",
        plain.stderr
    );
    never_shows_the_password(&plain);
    assert_eq!(
        count(
            &mut db.client(),
            "SELECT count(*) FROM crm.bookings WHERE status = 'Reserved'"
        ),
        0,
        "the first two runs expired the booking; the refused one did nothing"
    );
}
