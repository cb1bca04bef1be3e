//! The files a server of the tests gets, as scripts/pg-start.sh writes them: its
//! `throwaway.conf` (durability off, pg_stat_statements preloaded, prepared
//! transactions allowed; read back for a restart), the `pg_hba.conf`
//! of a TLS server, a standby's replication slot name; PgBouncer's `pgbouncer.ini`.

use std::path::Path;

/// The settings of a throwaway server on `port`, its unix socket in `socket_dir`
/// (included from postgresql.conf, so a retry on another port rewrites only this).
pub fn throwaway_conf(port: u16, socket_dir: &Path, tls: bool) -> String {
    let mut conf = format!(
        "# A throwaway test server: durability deliberately off.\n\
         listen_addresses = '127.0.0.1'\n\
         port = {port}\n\
         unix_socket_directories = '{}'\n\
         fsync = off\n\
         synchronous_commit = off\n\
         full_page_writes = off\n\
         max_connections = 300\n\
         max_prepared_transactions = 10\n\
         shared_preload_libraries = 'pg_stat_statements'\n\
         pg_stat_statements.track = all\n\
         log_min_messages = warning\n",
        socket_dir.display()
    );
    if tls {
        conf.push_str("ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
    }
    conf
}

/// The port and whether TLS is on, as a `throwaway.conf` says: a restart's.
pub fn read_throwaway_conf(conf: &str) -> Option<(u16, bool)> {
    let value = |key: &str| {
        conf.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == key).then(|| v.trim().to_owned())
        })
    };
    let port = value("port")?.parse().ok()?;
    Some((port, value("ssl").as_deref() == Some("on")))
}

/// A TLS server's pg_hba.conf: TCP clients only over TLS, so a client that connected at
/// all used TLS; the unix socket without, for local administration.
pub const TLS_HBA: &str = "# TCP only over TLS; the socket without.\n\
     local   all  all                trust\n\
     hostssl all  all  127.0.0.1/32  trust\n";

/// A standby's slot on its primary, from its directory's name and this process's id:
/// slot names take a-z, 0-9 and _, at most 63 characters.
pub fn slot_name(dir_name: &str, pid: u32) -> String {
    let name: String = dir_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    format!("standby_{name}_{pid}")
}

/// PgBouncer's configuration: every database to the server on `server_port`, on
/// `port`, trusting the users of `auth_file`, in `pool_mode`.
pub fn pgbouncer_ini(
    server_port: u16,
    port: u16,
    pool_mode: &str,
    auth_file: &Path,
    log: &Path,
) -> String {
    format!(
        "[databases]\n* = host=127.0.0.1 port={server_port}\n\n[pgbouncer]\n\
         listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
         auth_type = trust\nauth_file = {auth}\npool_mode = {pool_mode}\n\
         default_pool_size = 4\nignore_startup_parameters = extra_float_digits,options\n\
         logfile = {log}\n",
        auth = auth_file.display(),
        log = log.display(),
    )
}

/// Whether a server's log (from where this start began) says its port was taken.
pub fn port_taken(log: &str) -> bool {
    log.contains("could not bind") || log.contains("Address already in use")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_conf_names_the_port_and_socket_and_tls_only_when_asked() {
        let plain = throwaway_conf(5433, Path::new("/tmp/s"), false);
        assert!(plain.contains("\nport = 5433\n"));
        assert!(plain.contains("unix_socket_directories = '/tmp/s'\n"));
        assert!(plain.contains("shared_preload_libraries = 'pg_stat_statements'\n"));
        assert!(plain.contains("\nmax_prepared_transactions = 10\n"));
        assert!(!plain.contains("ssl"));
        let tls = throwaway_conf(5433, Path::new("/tmp/s"), true);
        assert!(
            tls.ends_with("ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n")
        );
    }

    #[test]
    fn a_restart_reads_the_port_and_tls_back() {
        let plain = throwaway_conf(5433, Path::new("/tmp/s"), false);
        assert_eq!(read_throwaway_conf(&plain), Some((5433, false)));
        let tls = throwaway_conf(6543, Path::new("/tmp/s"), true);
        assert_eq!(read_throwaway_conf(&tls), Some((6543, true)));
        assert_eq!(read_throwaway_conf("fsync = off\n"), None);
    }

    #[test]
    fn a_slot_name_takes_only_what_postgres_allows() {
        assert_eq!(
            slot_name("be-it-postgres.AbC1x9", 42),
            "standby_be_it_postgres_abc1x9_42"
        );
        let long = slot_name(&"x".repeat(100), 4_194_304);
        assert!(long.len() <= 63, "{long}");
    }

    #[test]
    fn pgbouncer_points_every_database_at_the_server() {
        let ini = pgbouncer_ini(
            5432,
            6432,
            "transaction",
            Path::new("/d/u"),
            Path::new("/d/l"),
        );
        assert!(ini.starts_with("[databases]\n* = host=127.0.0.1 port=5432\n"));
        assert!(ini.contains("listen_port = 6432\n") && ini.contains("pool_mode = transaction\n"));
        assert!(ini.contains("auth_file = /d/u\n") && ini.ends_with("logfile = /d/l\n"));
    }

    #[test]
    fn a_taken_port_is_told_from_other_failures() {
        assert!(port_taken(
            "LOG:  could not bind IPv4 address \"127.0.0.1\": Address already in use"
        ));
        assert!(!port_taken("FATAL:  data directory has wrong ownership"));
    }
}
