//! Servers of a test's own: a PostgreSQL to restart, stop or configure at the server
//! level (pg_stat_statements preloaded), and a listener that never answers.

use crate::postgres;
use std::time::{Duration, Instant};

use booking_expire_testbed::postgres::{Postgres, Server};
use postgres::{Client, NoTls};

use super::*;

/// A TCP listener on 127.0.0.1 that never accepts: the kernel completes the
/// handshake, then nothing ever answers (a hung server, a half-dead proxy).
pub fn silent_listener() -> (std::net::TcpListener, u16) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

/// A port of 127.0.0.1 that refuses every connection for as long as this value lives:
/// a socket bound to it that never listens, so the kernel answers a connection with a
/// reset, and no other process (a server another test starts, an outgoing connection's
/// ephemeral port) can take the port meanwhile, as it could one bound and released.
pub struct RefusedPort {
    _socket: std::os::fd::OwnedFd,
    pub port: u16,
}

pub fn refused_port() -> RefusedPort {
    use std::os::fd::FromRawFd;
    #[repr(C)]
    struct SockaddrIn {
        family: u16,
        port: u16,
        addr: [u8; 4],
        zero: [u8; 8],
    }
    unsafe extern "C" {
        fn socket(domain: i32, kind: i32, protocol: i32) -> i32;
        fn bind(fd: i32, addr: *const SockaddrIn, len: u32) -> i32;
        fn getsockname(fd: i32, addr: *mut SockaddrIn, len: *mut u32) -> i32;
    }
    const AF_INET: u16 = 2;
    const SOCK_STREAM: i32 = 1;
    let mut addr = SockaddrIn {
        family: AF_INET,
        port: 0,
        addr: [127, 0, 0, 1],
        zero: [0; 8],
    };
    let len = std::mem::size_of::<SockaddrIn>() as u32;
    // SAFETY: plain socket calls on a descriptor of our own, with a sockaddr_in of the
    // kernel's layout and its size; the descriptor is owned (closed) from here on.
    unsafe {
        let fd = socket(i32::from(AF_INET), SOCK_STREAM, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let socket = std::os::fd::OwnedFd::from_raw_fd(fd);
        assert_eq!(
            bind(fd, &addr, len),
            0,
            "bind 127.0.0.1:0: {}",
            std::io::Error::last_os_error()
        );
        let mut got = len;
        assert_eq!(
            getsockname(fd, &mut addr, &mut got),
            0,
            "getsockname: {}",
            std::io::Error::last_os_error()
        );
        RefusedPort {
            _socket: socket,
            port: u16::from_be(addr.port),
        }
    }
}

/// A PostgreSQL server of the test's own (the testbed crate's, in a temporary
/// directory), to restart or stop; its `postgres` database is migrated. Stopped when
/// dropped, and when the test process dies (its death signal).
pub struct OwnPostgres {
    pub url: String,
    server: Server,
}

impl OwnPostgres {
    fn of(server: Server) -> Self {
        OwnPostgres {
            url: server.url(),
            server,
        }
    }

    pub fn start() -> Self {
        let server = Postgres::new()
            .start()
            .unwrap_or_else(|e| panic!("a PostgreSQL of the test's own: {e}"));
        let pg = OwnPostgres::of(server);
        migrate_url(&pg.url);
        pg
    }

    /// A hot standby of `primary`, streaming from it through a replication slot of its
    /// own: the primary's data, read-only until [`OwnPostgres::promote`].
    pub fn standby_of(primary: &OwnPostgres) -> Self {
        let server = Postgres::new()
            .standby_of(&primary.server)
            .start()
            .unwrap_or_else(|e| panic!("a standby of the test's own: {e}"));
        OwnPostgres::of(server)
    }

    /// `host:port` of this server, for a multi-host URL.
    pub fn address(&self) -> String {
        self.server.address()
    }

    /// Waits until `standby` has replayed everything this primary has committed so far,
    /// as long as its replay moves on: a standby that replays nothing for 30 s fails the
    /// test with what both servers report (the primary's WAL position, senders and
    /// slots; the standby's received and replayed positions and WAL receiver; both
    /// logs' last lines).
    pub fn wait_replayed_by(&self, standby: &OwnPostgres) {
        const STALLED: Duration = Duration::from_secs(30);
        // The insert position, not the write position: the suite's servers commit
        // asynchronously (synchronous_commit = off), so a commit may have returned while
        // its record is not yet written out, and a crash loses it unless it was streamed.
        let lsn: String = self
            .client()
            .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
            .unwrap()
            .get(0);
        let mut c = standby.client();
        let started = Instant::now();
        let mut last = (String::new(), started);
        loop {
            let row = c
                .query_one(
                    "SELECT coalesce(pg_last_wal_replay_lsn() >= $1::text::pg_lsn, false), \
                            coalesce(pg_last_wal_replay_lsn()::text, '')",
                    &[&lsn],
                )
                .unwrap();
            if row.get::<_, bool>(0) {
                // A slow replay is no failure, but worth a line in the test's output.
                if started.elapsed() > STALLED {
                    eprintln!(
                        "the standby took {:.1} s to replay the primary's WAL up to {lsn}\n{}",
                        started.elapsed().as_secs_f64(),
                        self.replication_report(true)
                    );
                }
                return;
            }
            let replayed: String = row.get(1);
            if replayed != last.0 {
                last = (replayed, Instant::now());
            } else if last.1.elapsed() > STALLED {
                panic!(
                    "timed out waiting for the standby to replay the primary's WAL up to \
                     {lsn}: it replayed nothing for {} s\n{}\n{}",
                    STALLED.as_secs(),
                    self.replication_report(true),
                    standby.replication_report(false)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What this server says about replication, and its log's last lines, for a
    /// failure message.
    fn replication_report(&self, primary: bool) -> String {
        let sql = if primary {
            "SELECT 'primary: current WAL ' || pg_current_wal_lsn() || '; senders: ' || \
             coalesce((SELECT string_agg(format('%s sent %s flushed %s replayed %s', state, \
             sent_lsn, flush_lsn, replay_lsn), '; ') FROM pg_stat_replication), 'none') || \
             '; slots: ' || coalesce((SELECT string_agg(format('%s active %s restart %s %s', \
             slot_name, active, restart_lsn, wal_status), '; ') FROM pg_replication_slots), \
             'none')"
        } else {
            "SELECT 'standby: received ' || coalesce(pg_last_wal_receive_lsn()::text, 'nothing') \
             || ', replayed ' || coalesce(pg_last_wal_replay_lsn()::text, 'nothing') || \
             ', replay paused ' || pg_is_wal_replay_paused() || '; receiver: ' || \
             coalesce((SELECT format('%s, flushed up to %s, last message %s', status, \
             flushed_lsn, last_msg_receipt_time) FROM pg_stat_wal_receiver), 'none')"
        };
        let state = match Client::connect(&self.url, NoTls)
            .and_then(|mut c| c.query_one(sql, &[]).map(|r| r.get::<_, String>(0)))
        {
            Ok(s) => s,
            Err(e) => format!("{}: {e}", if primary { "primary" } else { "standby" }),
        };
        let log = self.server.log_path();
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(15)..].join("\n  ");
        format!(
            "{state}\n{} (kept on failure), last lines:\n  {tail}",
            log.display()
        )
    }

    /// Immediate shutdown (SIGQUIT, as `pg_ctl stop -m immediate`): the server dies as
    /// in a crash, nothing is flushed.
    pub fn stop_immediately(&self) {
        self.server
            .stop_immediately()
            .unwrap_or_else(|e| panic!("an immediate stop: {e}"));
    }

    /// `pg_ctl promote`: a standby becomes a primary that takes writes.
    pub fn promote(&self) {
        self.server
            .promote()
            .unwrap_or_else(|e| panic!("promote: {e}"));
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.url, NoTls).expect("connect to the own server")
    }

    /// A fast shutdown and a start again: every session is terminated, the server comes
    /// back on the same port.
    pub fn restart(&self) {
        self.server
            .restart()
            .unwrap_or_else(|e| panic!("restart: {e}"));
    }

    /// A fast shutdown (as `pg_ctl stop -m fast`).
    pub fn stop(&self) {
        self.server.stop().unwrap_or_else(|e| panic!("stop: {e}"));
    }

    /// The TCP port the server listens on.
    pub fn port(&self) -> u16 {
        self.server.port()
    }
}
