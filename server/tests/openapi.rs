//! The OpenAPI document is generated from core's catalogue and is what the
//! routes serve: every documented route answers (none is "no such
//! endpoint"), and every input's rule is the one the server applies.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_core::MemoryStore;
use baton_server::{Listen, ServeOptions};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// One request on a connection of its own: the status and the JSON body.
fn ask(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, Value) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let raw = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(raw.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let (head, rest) = out.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, serde_json::from_str(rest).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_route_is_served_with_the_documented_rules() {
    let mut opts = ServeOptions::new(Listen::Tcp("127.0.0.1:0".parse().unwrap()));
    opts.sweep_every = None;
    let served = baton_server::spawn(Arc::new(MemoryStore::new()), opts)
        .await
        .unwrap();
    let addr = served.addr.unwrap();
    let (doc, checked) = tokio::task::spawn_blocking(move || {
        let (status, doc) = ask(addr, "GET", "/v1/openapi.json", "");
        assert_eq!(status, 200, "{doc}");
        assert_eq!(doc["openapi"], "3.1.0");
        let mut checked = 0;
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                assert!(
                    op["summary"].as_str().is_some_and(|s| !s.is_empty()),
                    "{path}"
                );
                let concrete = path.replace("{task}", "t");
                let (status, body) = ask(addr, &method.to_uppercase(), &concrete, "{}");
                // Refused, invalid or answered: anything but a route that is not there.
                let missing = status == 404 && body["error"]["field"] == "path";
                assert!(
                    !missing,
                    "{method} {path} is documented but not served: {body}"
                );
                checked += 1;
            }
        }
        (doc, checked)
    })
    .await
    .unwrap();
    // Every operation of the catalogue with a route is documented.
    for op in baton_core::catalogue::OPERATIONS {
        if let Some(r) = op.http {
            let entry = &doc["paths"][r.path][r.method.to_lowercase()];
            assert!(entry.is_object(), "{} is not documented", op.name);
        }
    }
    assert!(checked >= 25, "only {checked} routes documented");
    // The wait rule the document states is the one the server applies.
    let wait = &doc["paths"]["/v1/next"]["post"]["parameters"][0];
    assert_eq!(wait["name"], "wait");
    assert!(
        wait["description"].as_str().unwrap().contains("1 hour"),
        "{wait}"
    );
    let (status, body) = tokio::task::spawn_blocking(move || {
        ask(addr, "POST", "/v1/next?wait=61m", r#"{"owner": "w"}"#)
    })
    .await
    .unwrap();
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (400, Some("wait")),
        "{body}"
    );
    // A request the catalogue does not offer is no endpoint, whatever core
    // would make of it.
    for verb in ["link", "wake", "settle", "nonsense"] {
        let (status, body) = tokio::task::spawn_blocking(move || {
            ask(addr, "POST", &format!("/v1/tasks/t/{verb}"), "{}")
        })
        .await
        .unwrap();
        assert_eq!(
            (status, body["error"]["field"].as_str()),
            (404, Some("path")),
            "{verb}: {body}"
        );
    }
    served.stop().await;
}
