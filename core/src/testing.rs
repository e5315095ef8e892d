//! Helpers for the test clusters the backends start (etcd members,
//! Postgres servers): nothing here is used by a store itself.

use std::hash::{BuildHasher, Hasher};
use std::net::TcpListener;

/// Where [`listen_port`] picks from: below Linux's default ephemeral range
/// (32768-60999), from which the kernel gives ports to outgoing
/// connections and to `bind(0)`.
const PORTS: std::ops::Range<u16> = 20000..32000;

/// A loopback TCP port that is free now, for a server process that will
/// bind it shortly. It is picked at random outside the ephemeral range:
/// a port from `bind(0)` is released before the server binds it, and in
/// that gap any outgoing connection on the machine (another test's, under
/// a parallel run) may take it. `None` if no port in the range is free.
pub fn listen_port() -> Option<u16> {
    let span = PORTS.end - PORTS.start;
    for _ in 0..1000 {
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let port = PORTS.start + u16::try_from(random % u64::from(span)).unwrap_or(0);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Some(port);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_free_and_outside_the_ephemeral_range() {
        let port = listen_port().expect("a free port");
        assert!(PORTS.contains(&port));
        let _held = TcpListener::bind(("127.0.0.1", port)).expect("free");
    }
}
