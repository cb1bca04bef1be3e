//! A server kept in a directory of the caller's, STATE_DIR (`testbed start postgres`,
//! which scripts/pg-start.sh runs): started detached (a session of its own, no death
//! signal), so it outlives the command, and found again from its files by a later
//! start (which prints its URL if it runs, else starts it again with its data on its
//! port: `kept`'s shape) and by `testbed stop` (`pg_ctl stop`; a standby's slot
//! dropped on its primary). Its files: `pgdata/` (`pgdata/postmaster.pid` while it
//! runs), `postgres.log`, `database_url` (for the user), and the state, `testbed.json`
//! (`state_file`: its port, binaries, socket directories, a standby's slot and
//! primary).

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::cluster::MAKE_SLOT;
use super::{
    Instance, Slot, Started, binaries_and_user, bindir, checked, conf, seconds_from_env,
    socket_dir_for,
};
use crate::error::{Error, Result};
use crate::kept::{self, Found, Kept, Ready, canonical};
use crate::process::{self, Owned, TempDir};
use crate::state_file::{self as state, Held, Standby};

/// Whether `dir` holds a server of this module's (its `pgdata`).
pub fn holds(dir: &Path) -> bool {
    dir.join("pgdata").is_dir()
}

/// How a first start sets the server up (a start again reuses what the first did).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Setup {
    /// `ssl = on` with this directory's `server.crt` and `server.key`; TCP over TLS only.
    pub tls: Option<PathBuf>,
    /// A hot standby of the server of this STATE_DIR, through a slot of its own.
    pub standby_of: Option<PathBuf>,
}

/// Starts the server of `state` (created if missing) detached, or again, and waits
/// until it accepts connections; if it runs already, only finds it. Its URL.
pub fn start(state: &Path, setup: &Setup) -> Result<String> {
    fs::create_dir_all(state)
        .map_err(Error::doing(format!("cannot create {}", state.display())))?;
    kept::start(state, setup)
}

impl Kept for Setup {
    type Server = Instance;

    fn find(&self, state: &Path) -> Result<Found<Instance>> {
        if !holds(state) {
            return Ok(Found::Fresh);
        }
        let server = attach(state)?;
        Ok(if running(&server) {
            Found::Running(server)
        } else {
            Found::Stopped(server)
        })
    }

    fn first(&self, state: &Path) -> Result<Ready> {
        first(state, self)
    }

    fn again(&self, state: &Path, server: Instance) -> Result<Ready> {
        again(state, self, server)
    }

    fn running(&self, state: &Path, server: Instance) -> Result<Ready> {
        eprintln!(
            "testbed: the server in {} runs already ({})",
            state.display(),
            server.address()
        );
        ready(state, &server, kept_state(state)?)
    }
}

/// Writes the state of the server that now runs, and its URL for the user: ready.
fn ready(state: &Path, server: &Instance, mut kept: state::PgState) -> Result<Ready> {
    kept.port = Some(server.port);
    state::write(state, &Held::Postgres(kept))?;
    let file = state.join("database_url");
    fs::write(&file, format!("{}\n", server.url())).map_err(Error::at(&file))?;
    Ok(Ready {
        address: server.url(),
        log: Some(server.log.clone()),
    })
}

/// Stops the server of `state` (a fast shutdown; `kill`: an immediate one, as in a
/// crash), drops a standby's slot on its primary and removes a socket directory of
/// its own under /tmp. Its data stay, for [`start`]. Nothing to stop is no failure.
pub fn stop(state: &Path, kill: bool) -> Result<()> {
    if !state.exists() {
        eprintln!(
            "testbed: {} does not exist; nothing to stop",
            state.display()
        );
        return Ok(());
    }
    let state = canonical(state)?;
    let tmp_socket_dir = kept_state(&state).ok().and_then(|kept| kept.tmp_socket_dir);
    let server = attach(&state);
    if !state.join("pgdata/postmaster.pid").exists() {
        eprintln!("testbed: no server running in {}", state.display());
        if let Ok(server) = &server {
            server.drop_slot();
        }
        remove_tmp_socket_dir(tmp_socket_dir.as_deref());
        return Ok(());
    }
    let server = server?;
    if running(&server) {
        let mode = if kill { "immediate" } else { "fast" };
        eprintln!(
            "testbed: stopping the server in {} ({mode} shutdown)",
            server.data.display()
        );
        let limit = seconds_from_env("PG_STOP_TIMEOUT", 60)
            .as_secs()
            .to_string();
        let out = server
            .tool("pg_ctl")
            .arg("-D")
            .arg(&server.data)
            .args(["-m", mode, "-w", "-t", &limit, "-s", "stop"])
            .output();
        // It may have exited by itself between the look and the stop.
        if let Err(e) = checked("pg_ctl stop", out)
            && running(&server)
        {
            return Err(Error::Server(format!(
                "could not stop the server in {}: {e}\n  last lines of {}:\n{}",
                server.data.display(),
                server.log.display(),
                server.log_tail(20)
            )));
        }
    } else {
        eprintln!(
            "testbed: the server in {} is not running",
            server.data.display()
        );
    }
    server.drop_slot();
    remove_tmp_socket_dir(tmp_socket_dir.as_deref());
    Ok(())
}

/// A first start: initdb (or a base backup of the primary), then a free port.
fn first(state: &Path, setup: &Setup) -> Result<Ready> {
    if setup.tls.is_some() && setup.standby_of.is_some() {
        return Err(Error::Refused(
            "--standby-of (PG_STANDBY_OF) copies the primary's TLS set-up; \
             do not give --tls (PG_SSL_CERT_DIR) too"
                .into(),
        ));
    }
    let primary = setup.standby_of.as_deref().map(primary_of).transpose()?;
    let (bindir, run_as) = binaries_and_user(setup.tls.is_some())?;
    let mut server = Instance::in_dir(state, state.join("sock"), bindir, run_as);
    server.tls = setup.tls.is_some();
    server.give(state)?;
    reachable(&server)?;
    let tmp_socket = socket_dir_for(state)?.map(TempDir::keep);
    if let Some(dir) = &tmp_socket {
        eprintln!(
            "testbed: the STATE_DIR path is long; the unix socket goes to {}",
            dir.display()
        );
        server.socket_dir = dir.clone();
    }
    let made = server
        .prepare_dirs()
        .and_then(|()| make(&mut server, setup, primary.as_ref()));
    match made {
        // Left running for good: its PID is in pgdata/postmaster.pid.
        Ok(child) => {
            child.release();
        }
        Err(e) => {
            // A start again would find half a cluster; the log stays.
            let _ = fs::remove_dir_all(&server.data);
            if let Some(dir) = tmp_socket {
                let _ = fs::remove_dir(dir);
            }
            return Err(e);
        }
    }
    let kept = state::PgState {
        port: Some(server.port),
        bindir: server.bindir.clone(),
        socket_dir: server.socket_dir.clone(),
        tmp_socket_dir: tmp_socket,
        standby: primary
            .as_ref()
            .zip(server.slot.as_ref())
            .map(|(primary, slot)| Standby {
                slot: slot.name.clone(),
                primary_dir: primary.dir().to_owned(),
            }),
    };
    ready(state, &server, kept)
}

/// The cluster made (initdb, or a base backup of `primary`) and started detached on a
/// free port: the child, to be released.
fn make(server: &mut Instance, setup: &Setup, primary: Option<&Instance>) -> Result<Owned> {
    match primary {
        Some(primary) => {
            eprintln!(
                "testbed: pg_basebackup from {} (binaries {})",
                primary.address(),
                server.bindir.display()
            );
            server.clone_cluster(primary)?;
        }
        None => {
            eprintln!("testbed: initdb (binaries {})", server.bindir.display());
            server.init_cluster(setup.tls.as_deref())?;
        }
    }
    server.start_on_free_port(true)
}

/// A start of a server whose data `state` holds and that does not run: the server as
/// it was first set up, on its port (a standby's slot made again on its primary).
fn again(state: &Path, setup: &Setup, server: Instance) -> Result<Ready> {
    if setup.tls.is_some() || setup.standby_of.is_some() {
        eprintln!(
            "testbed: {} holds a server: it starts again as it was first set up \
             (--tls and --standby-of are a first start's)",
            state.display()
        );
    }
    if let Some(slot) = &server.slot {
        make_slot_again(&server, slot, state);
    }
    server.prepare_dirs()?;
    eprintln!(
        "testbed: starting the server in {} again on {}",
        state.display(),
        server.address()
    );
    match server.spawn_and_wait(true)? {
        Started::Ready(child) => {
            child.release();
        }
        Started::PortTaken(why) => {
            return Err(Error::Server(format!(
                "the server in {} cannot start again: its port {} (since its first start) is \
                 taken by another process ({why}; log {})",
                state.display(),
                server.port,
                server.log.display()
            )));
        }
    }
    ready(state, &server, kept_state(state)?)
}

/// The state `state` holds of its server; a STATE_DIR that holds none (its files from
/// before the state file) is taken as a first start left it: the binaries found now,
/// the socket in `sock`.
fn kept_state(state: &Path) -> Result<state::PgState> {
    match state::held(state)? {
        Some(Held::Postgres(kept)) => Ok(kept),
        Some(other) => Err(Error::Refused(format!(
            "{} holds no PostgreSQL server but {other:?}",
            state.display()
        ))),
        None => Ok(state::PgState {
            port: None,
            bindir: bindir()?,
            socket_dir: state.join("sock"),
            tmp_socket_dir: None,
            standby: None,
        }),
    }
}

/// The server of the STATE_DIR `state`, as its files describe it (not started).
fn attach(state: &Path) -> Result<Instance> {
    let data = state.join("pgdata");
    let file = data.join("throwaway.conf");
    let text = fs::read_to_string(&file).map_err(|e| {
        Error::Refused(format!(
            "{}: {e} (a start that did not finish? remove {} and start afresh)",
            file.display(),
            state.display()
        ))
    })?;
    let (port, tls) = conf::read_throwaway_conf(&text)
        .ok_or_else(|| Error::Refused(format!("{} names no port", file.display())))?;
    let kept = kept_state(state)?;
    let mut server = Instance::in_dir(state, kept.socket_dir, kept.bindir, owner(&data)?);
    server.port = port;
    server.tls = tls;
    server.slot = kept.standby.as_ref().and_then(slot_of);
    Ok(server)
}

/// The primary of a standby to be: a running server of a STATE_DIR.
fn primary_of(dir: &Path) -> Result<Instance> {
    let named = |why: &str| {
        Error::Refused(format!(
            "--standby-of (PG_STANDBY_OF) {}: {why}",
            dir.display()
        ))
    };
    let dir = canonical(dir).map_err(|_| named("does not exist"))?;
    if !holds(&dir) || !matches!(state::held(&dir), Ok(Some(Held::Postgres(_)))) {
        return Err(named(
            "is not the STATE_DIR of a server started by testbed start (or pg-start.sh): \
             no pgdata or no testbed.json",
        ));
    }
    let primary = attach(&dir)?;
    if !running(&primary) {
        return Err(named("its server is not running; start it first"));
    }
    Ok(primary)
}

/// A standby's slot, as its state names it, while the primary's files are there.
fn slot_of(standby: &Standby) -> Option<Slot> {
    let primary = &standby.primary_dir;
    let text = fs::read_to_string(primary.join("pgdata/throwaway.conf")).ok()?;
    let (primary_port, _) = conf::read_throwaway_conf(&text)?;
    Some(Slot {
        name: standby.slot.clone(),
        primary_port,
        primary_data: primary.join("pgdata"),
    })
}

/// The slot a stop dropped, made again on the primary before the standby starts: it
/// keeps the WAL from now on. WAL the primary recycled while the standby was stopped is
/// gone for good; such a standby cannot catch up, and a fresh one is needed.
fn make_slot_again(server: &Instance, slot: &Slot, state: &Path) {
    let primary = slot.primary_data.parent().map(attach);
    let Some(Ok(primary)) = primary else {
        eprintln!(
            "testbed: warning: the primary of {} is gone",
            state.display()
        );
        return;
    };
    if !running(&primary) {
        eprintln!(
            "testbed: warning: the primary in {} is not running: the standby streams once \
             it runs with the slot {}",
            primary.dir().display(),
            slot.name
        );
        return;
    }
    match server.on_primary(slot, MAKE_SLOT).as_deref() {
        Some("made") => eprintln!(
            "testbed: made the replication slot {} again on {}",
            slot.name,
            primary.address()
        ),
        Some("there") => {}
        _ => eprintln!(
            "testbed: warning: could not make the replication slot {} again on {}",
            slot.name,
            primary.address()
        ),
    }
}

/// Whether the server runs (`pg_ctl status`).
fn running(server: &Instance) -> bool {
    server
        .tool("pg_ctl")
        .arg("-D")
        .arg(&server.data)
        .arg("status")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The OS user the server runs as: the owner of its data when we are root and it is
/// not (PostgreSQL's tools refuse root).
fn owner(data: &Path) -> Result<Option<String>> {
    if !process::is_root() {
        return Ok(None);
    }
    let uid = fs::metadata(data).map_err(Error::at(data))?.uid();
    if uid == 0 {
        return Ok(None);
    }
    let out = Command::new("id").args(["-nu", &uid.to_string()]).output();
    let out = checked("id -nu", out)?;
    Ok(Some(String::from_utf8_lossy(&out.stdout).trim().to_owned()))
}

/// The server's user must reach STATE_DIR (mktemp -d makes it root's, mode 0700).
fn reachable(server: &Instance) -> Result<()> {
    let Some(user) = &server.run_as else {
        return Ok(());
    };
    let dir = server.dir();
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).map_err(Error::at(dir))?;
    let ok = Command::new("runuser")
        .args(["-u", user, "--", "test", "-w"])
        .arg(dir)
        .arg("-a")
        .arg("-x")
        .arg(dir)
        .current_dir("/")
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Ok(())
    } else {
        Err(Error::Refused(format!(
            "user '{user}' cannot reach {} (a parent directory is not traversable); use a \
             directory under /tmp, e.g. mktemp -d",
            dir.display()
        )))
    }
}

/// A socket directory of the server's own under /tmp: removed (if empty) by a stop.
fn remove_tmp_socket_dir(dir: Option<&Path>) {
    if let Some(dir) = dir
        && dir.is_dir()
        && fs::remove_dir(dir).is_err()
    {
        eprintln!(
            "testbed: warning: could not remove the socket directory {} (not empty?)",
            dir.display()
        );
    }
}
