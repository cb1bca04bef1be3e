//! Free TCP ports of 127.0.0.1 for the servers of the tests. They are chosen below the
//! kernel's ephemeral range (`net.ipv4.ip_local_port_range`, where the local ports of
//! outgoing connections come from), so no client connection takes one between its
//! choice and the server's bind: a node stopped and started again on its ports finds
//! them free. Only another server chosen at the same moment can take one, and the
//! starts choose again when a server says its port is taken.

use crate::error::{Error, Result};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// The lowest port handed out: above the ports services commonly listen on.
const LOWEST: u16 = 10_000;
/// With fewer candidates than this below the ephemeral range, the kernel picks.
const ENOUGH: u16 = 2_000;

/// `n` distinct ports of 127.0.0.1, free a moment ago (all bound at once, so distinct).
pub fn free_ports(n: usize) -> Result<Vec<u16>> {
    let (low, high) = candidates(ephemeral_start());
    let listeners = match (low, high) {
        (low, high) if high - low >= ENOUGH => below_ephemeral(n, low, high)?,
        _ => (0..n)
            .map(|_| TcpListener::bind("127.0.0.1:0"))
            .collect::<Result<Vec<_>, _>>()
            .map_err(Error::doing("a free port of 127.0.0.1"))?,
    };
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<_, _>>()
        .map_err(Error::doing("a free port of 127.0.0.1"))
}

/// One free port, as [`free_ports`].
pub fn free_port() -> Result<u16> {
    free_ports(1).map(|ports| ports[0])
}

/// The first port of the ephemeral range, as the kernel says (Linux's default when it
/// cannot be read).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// The candidates: [LOWEST, the ephemeral range's start).
fn candidates(ephemeral_start: u16) -> (u16, u16) {
    (LOWEST, ephemeral_start.max(LOWEST))
}

/// Binds `n` ports of [low, high), walking from a random one, skipping those in use.
fn below_ephemeral(n: usize, low: u16, high: u16) -> Result<Vec<TcpListener>> {
    let span = u32::from(high - low);
    let start = crate::random::u32() % span;
    let mut bound = Vec::with_capacity(n);
    for step in 0..span {
        if bound.len() == n {
            break;
        }
        let port = low + ((start + step) % span) as u16;
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
            bound.push(listener);
        }
    }
    if bound.len() < n {
        return Err(Error::Server(format!(
            "only {} of {n} free ports of 127.0.0.1 in {low}..{high}",
            bound.len()
        )));
    }
    Ok(bound)
}

/// Whether something accepts connections on 127.0.0.1:`port`.
pub fn accepts(port: u16) -> bool {
    TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(1),
    )
    .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_free_and_below_the_ephemeral_range() {
        let ports = free_ports(6).unwrap();
        let mut sorted = ports.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 6, "{ports:?}");
        let start = ephemeral_start();
        assert!(
            ports.iter().all(|&p| (LOWEST..start).contains(&p)),
            "{ports:?} below {start}"
        );
        // Free: each binds again now that the choice let it go.
        for p in ports {
            TcpListener::bind(("127.0.0.1", p)).unwrap_or_else(|e| panic!("port {p}: {e}"));
        }
    }

    #[test]
    fn a_range_starting_low_leaves_the_choice_to_the_kernel() {
        assert_eq!(candidates(1_024), (LOWEST, LOWEST));
        assert_eq!(candidates(32_768), (LOWEST, 32_768));
    }

    #[test]
    fn a_port_in_use_is_not_handed_out() {
        let taken = TcpListener::bind(("127.0.0.1", free_port().unwrap())).unwrap();
        let port = taken.local_addr().unwrap().port();
        let err = below_ephemeral(1, port, port + 1).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "only 0 of 1 free ports of 127.0.0.1 in {port}..{}",
                port + 1
            )
        );
    }
}
