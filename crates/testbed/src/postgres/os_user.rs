//! The system user PostgreSQL runs as when the tests run as root (it refuses to run
//! as root): created when missing, as scripts/pg-start.sh does.

use crate::error::{Error, Result};
use std::process::{Command, Stdio};

/// Creates the system user `user` when missing, as scripts/pg-start.sh does.
pub(super) fn ensure_os_user(user: &str) -> Result<()> {
    let exists = |u: &str| {
        Command::new("id")
            .args(["-u", u])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if exists(user) {
        return Ok(());
    }
    let group = Command::new("getent")
        .args(["group", user])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let _ = Command::new("useradd")
        .arg("--system")
        .args(if group {
            vec!["--gid", user]
        } else {
            vec!["--user-group"]
        })
        .args(["--home-dir", "/var/lib/postgresql", "--no-create-home"])
        .args(["--shell", "/usr/sbin/nologin", user])
        .stderr(Stdio::null())
        .status();
    // A concurrent start may have created it first.
    if exists(user) {
        Ok(())
    } else {
        Err(Error::Tool(format!("could not create OS user '{user}'")))
    }
}
