//! One bad client never hurts the others: a body over the limit is 413, a
//! client that sends its headers too slowly is dropped, malformed input is
//! 400 naming what is wrong, and the server keeps answering throughout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_core::MemoryStore;
use baton_server::{Listen, ServeOptions};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn request(addr: SocketAddr, raw: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(raw).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

fn post(addr: SocketAddr, path: &str, body: &str) -> String {
    request(
        addr,
        format!(
            "POST {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
}

fn status(answer: &str) -> u16 {
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_clients_are_bounded_and_the_server_keeps_answering() {
    let mut opts = ServeOptions::new(Listen::Tcp("127.0.0.1:0".parse().unwrap()));
    opts.max_body = 4096;
    opts.read_timeout = Duration::from_millis(400);
    let served = baton_server::spawn(Arc::new(MemoryStore::new()), opts)
        .await
        .unwrap();
    let addr = served.addr.unwrap();
    let ok = r#"{"owner":"w","ttl_ms":60000}"#;
    tokio::task::spawn_blocking(move || {
        // Too large a body: 413, nothing applied.
        let big = format!(r#"{{"owner":"w","pad":"{}"}}"#, "x".repeat(8000));
        assert_eq!(status(&post(addr, "/v1/tasks/big/claim", &big)), 413);
        assert_eq!(status(&post(addr, "/v1/tasks/big", "")), 405);
        let a = request(
            addr,
            b"GET /v1/tasks/big HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(status(&a), 404, "{a}");
        // Malformed input: 400 naming the body or the field.
        let a = post(addr, "/v1/tasks/x/claim", "{\"owner\":");
        assert!(status(&a) == 400 && a.contains(r#""field":"body""#), "{a}");
        let a = post(addr, "/v1/tasks/x/claim", r#"{"owner":"w","ttl_ms":-5}"#);
        assert_eq!(status(&a), 400, "{a}");
        let a = post(addr, "/v1/tasks/bad%01id/claim", ok);
        assert!(status(&a) == 400 && a.contains(r#""field":"task""#), "{a}");
        let a = post(
            addr,
            "/v1/store/apply",
            r#"{"task":"x","request":{"request":"wake"},"pre":{},"now":"2026-01-01T00:00:00Z"}"#,
        );
        assert!(
            status(&a) == 400 && a.contains(r#""field":"request""#),
            "{a}"
        );
        // A client that never finishes its headers is dropped.
        let mut slow = TcpStream::connect(addr).unwrap();
        slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        slow.write_all(b"POST /v1/tasks/slow/claim HTTP/1.1\r\nHost: localhost\r\n")
            .unwrap();
        let started = Instant::now();
        let mut buf = Vec::new();
        let _ = slow.read_to_end(&mut buf);
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "a slow client was dropped after its read deadline"
        );
        // And every good request is still answered.
        let a = post(addr, "/v1/tasks/fine/claim", ok);
        assert_eq!(status(&a), 200, "{a}");
    })
    .await
    .unwrap();
    served.stop().await;
}

/// Ready only while the store answers: a SQLite file moved away under a
/// running server makes every read fail closed, and `/readyz` says so
/// while `/healthz` (the process) stays up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_follows_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = baton_store_sqlite::SqliteStore::open(&path, Default::default()).unwrap();
    let opts = ServeOptions::new(Listen::Tcp("127.0.0.1:0".parse().unwrap()));
    let served = baton_server::spawn(Arc::new(store), opts).await.unwrap();
    let addr = served.addr.unwrap();
    let get = move |path: &'static str| {
        tokio::task::spawn_blocking(move || {
            status(&request(
                addr,
                format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            ))
        })
    };
    assert_eq!(get("/readyz").await.unwrap(), 200);
    std::fs::rename(&path, dir.path().join("elsewhere.db")).unwrap();
    assert_eq!(get("/readyz").await.unwrap(), 503);
    assert_eq!(get("/healthz").await.unwrap(), 200);
    served.stop().await;
}
