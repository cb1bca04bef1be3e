//! The observability servers the tests read back: Jaeger (traces over OTLP, its query
//! API), the Prometheus Pushgateway and Prometheus itself. Each is an owned child in a
//! temporary directory (its log there), on ports the kernel picked free a moment
//! before, started again on others when it exits before it is ready (another process
//! took one first), and stopped when dropped.

mod jaeger;
mod prometheus;
mod pushgateway;

use crate::error::{Error, Result};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use jaeger::Jaeger;
pub use prometheus::Prometheus;
pub use pushgateway::Pushgateway;

use crate::kafka::node::free_ports;
use crate::process::{Owned, Spawn, TempDir, now, pause};

/// How many times a server is started on other ports after it exited before it was
/// ready.
const ATTEMPTS: usize = 5;

/// Starts the server `spawn(ports)` makes on `n` free ports, until `ready(ports)` (asked
/// every `poll`, for at most `limit` each time); one that exits first is started again
/// on other ports. The observers' servers and the Kubernetes control plane's.
pub(crate) fn start_on_free_ports(
    what: &str,
    n: usize,
    limit: Duration,
    poll: Duration,
    mut spawn: impl FnMut(&[u16]) -> Result<Spawn>,
    mut ready: impl FnMut(&[u16]) -> bool,
) -> Result<(Owned, Vec<u16>)> {
    let mut exits = Vec::new();
    for _ in 0..ATTEMPTS {
        let ports = free_ports(n)?;
        let spec = spawn(&ports)?;
        let line = spec.command_line();
        let mut child = spec
            .spawn()
            .map_err(|e| Error::Server(format!("{what}: {line}: {e}")))?;
        let started = now();
        loop {
            if ready(&ports) {
                return Ok((child, ports));
            }
            if let Ok(Some(status)) = child.try_wait() {
                exits.push(child.failure(&format!("exited before it was ready ({status})")));
                break;
            }
            if now().duration_since(started) >= limit {
                let why = child.failure(&format!("not ready after {} s", limit.as_secs()));
                let _ = child.kill();
                return Err(Error::Server(why));
            }
            pause(poll);
        }
    }
    Err(Error::Server(format!(
        "{what} exited before it was ready, {ATTEMPTS} times:\n{}",
        exits.join("\n")
    )))
}

/// A GET of `path` (see [`http`]).
pub fn http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    http(addr, "GET", path, "")
}

/// One HTTP/1.0 request (so the answer is never chunked); the status and the body.
pub fn http(addr: &str, method: &str, path: &str, body: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut response = String::new();
    s.read_to_string(&mut response)?;
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// Whether `GET path` of `addr` answers 200.
fn answers(addr: &str, path: &str) -> bool {
    http_get(addr, path).is_ok_and(|(status, _)| status == 200)
}

/// The first of `names` on PATH.
fn on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |name| dir.join(name)))
        .find(|p| p.is_file())
}

fn write(dir: &Path, name: &str, text: &str) -> Result<PathBuf> {
    let file = dir.join(name);
    std::fs::write(&file, text).map_err(Error::at(&file))?;
    Ok(file)
}

fn temp_dir(kind: &str) -> Result<TempDir> {
    TempDir::new(kind).map_err(Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_that_exits_at_once_is_tried_five_times_and_each_exit_is_named() {
        let mut tries = 0;
        let err = start_on_free_ports(
            "a shell",
            1,
            Duration::from_secs(10),
            Duration::from_millis(50),
            |ports| {
                tries += 1;
                Ok(Spawn::new("a shell", "sh").args(["-c", "exit 3", "sh", &ports[0].to_string()]))
            },
            |_| false,
        )
        .unwrap_err()
        .to_string();
        assert_eq!(tries, ATTEMPTS);
        assert_eq!(
            err.matches("exited before it was ready").count(),
            ATTEMPTS + 1,
            "{err}"
        );
    }

    #[test]
    fn a_listener_is_ready_once_it_answers() {
        let (child, ports) =
            start_on_free_ports(
                "a listener",
                1,
                Duration::from_secs(10),
                Duration::from_millis(50),
                |ports| {
                    let script = "exec python3 -m http.server --bind 127.0.0.1 \"$1\"";
                    Ok(Spawn::new("a listener", "sh").args([
                        "-c",
                        script,
                        "sh",
                        &ports[0].to_string(),
                    ]))
                },
                |ports| answers(&format!("127.0.0.1:{}", ports[0]), "/"),
            )
            .unwrap();
        assert!(answers(&format!("127.0.0.1:{}", ports[0]), "/"));
        drop(child);
    }
}
