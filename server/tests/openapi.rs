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

/// A server without tokens or a sweeper on a memory store.
async fn serve() -> baton_server::Served {
    let mut opts = ServeOptions::new(Listen::Tcp("127.0.0.1:0".parse().unwrap()));
    opts.sweep_every = None;
    baton_server::spawn(Arc::new(MemoryStore::new()), opts)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_route_is_served_with_the_documented_rules() {
    let served = serve().await;
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

/// A value of the documented schema: the minimum of a number, an id-like
/// string (or the example, or a date-time), an object of its required
/// properties (all of them when `all`), an empty list.
fn sample(schema: &Value, all: bool) -> Value {
    for fixed in ["example", "const"] {
        if let Some(e) = schema.get(fixed) {
            return e.clone();
        }
    }
    if let Some(first) = schema.get("enum").and_then(|e| e.get(0)) {
        return first.clone();
    }
    // One of several shapes (an enum's variants, an optional value):
    // the first that is not null.
    for key in ["oneOf", "anyOf"] {
        if let Some(first) = schema
            .get(key)
            .and_then(Value::as_array)
            .and_then(|alts| alts.iter().find(|a| a["type"] != "null"))
        {
            return sample(first, all);
        }
    }
    let ty = match &schema["type"] {
        Value::Array(types) => types.iter().find(|t| *t != "null").cloned(),
        t => Some(t.clone()),
    };
    match ty.as_ref().and_then(Value::as_str) {
        Some("string") if schema["format"] == "date-time" => Value::from("2030-01-01T00:00:00Z"),
        Some("string") => Value::from("s1"),
        Some("integer") | Some("number") => {
            schema.get("minimum").cloned().unwrap_or(Value::from(1))
        }
        Some("boolean") => Value::from(false),
        Some("array") => Value::Array(Vec::new()),
        Some("object") => {
            let required: Vec<&str> = schema["required"]
                .as_array()
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut o = serde_json::Map::new();
            if let Some(props) = schema["properties"].as_object() {
                for (k, v) in props {
                    if all || required.contains(&k.as_str()) {
                        o.insert(k.clone(), sample(v, all));
                    }
                }
            }
            Value::Object(o)
        }
        _ => Value::Null,
    }
}

/// A documented path with each parameter filled in.
fn concrete(path: &str) -> String {
    path.replace("{task}", "t1")
        .replace("{name}", "n1")
        .replace("{key}", "k1")
        .replace("{queue}", "q1")
}

/// Every POST body built from its documented schema (its required
/// properties alone, and every property) is read by the server: whatever
/// the answer, it is never that the body's shape is wrong (a field the
/// document names that the server does not know, one it requires that the
/// document does not, a value of another type). Every route the server
/// serves outside the catalogue (status, metrics, health) is documented.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_built_from_each_documented_schema_is_accepted() {
    let served = serve().await;
    let addr = served.addr.unwrap();
    let wrong = tokio::task::spawn_blocking(move || {
        let (_, doc) = ask(addr, "GET", "/v1/openapi.json", "");
        for path in ["/v1/status", "/metrics", "/healthz", "/readyz"] {
            assert!(
                doc["paths"][path]["get"].is_object(),
                "{path} is not documented"
            );
        }
        let mut wrong = Vec::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            let Some(op) = item.get("post") else { continue };
            let schema = &op["requestBody"]["content"]["application/json"]["schema"];
            if schema["type"] != "object" {
                continue;
            }
            for all in [false, true] {
                let body = sample(schema, all);
                let concrete = concrete(path);
                let (status, answer) = ask(addr, "POST", &concrete, &body.to_string());
                let message = answer["error"]["message"].as_str().unwrap_or("");
                let shape = [
                    "unknown field",
                    "missing field",
                    "invalid type",
                    "is not a field",
                    "must be a JSON object",
                ];
                if status == 400 && shape.iter().any(|s| message.contains(s)) {
                    wrong.push(format!("POST {path} {body}: {answer}"));
                }
            }
            // A field the document does not name is refused, naming it,
            // where the document says no other field is taken.
            if schema["additionalProperties"] == false {
                let mut body = sample(schema, true);
                body["zz_surprise"] = Value::from(1);
                let concrete = concrete(path);
                let (status, answer) = ask(addr, "POST", &concrete, &body.to_string());
                let named = answer["error"]["field"] == "zz_surprise"
                    || answer["error"]["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("zz_surprise"));
                if status != 400 || !named {
                    wrong.push(format!(
                        "POST {path} took a field the document does not name: {status} {answer}"
                    ));
                }
            }
        }
        // A body the document does not describe is refused, not ignored.
        for path in ["/v1/sweep", "/v1/scheduler/tick"] {
            let (status, answer) = ask(addr, "POST", path, r#"{"surprise": 1}"#);
            if status != 400 {
                wrong.push(format!(
                    "POST {path} took an unknown field: {status} {answer}"
                ));
            }
        }
        wrong
    })
    .await
    .unwrap();
    assert!(
        wrong.is_empty(),
        "the document and the server disagree:\n{}",
        wrong.join("\n")
    );
    served.stop().await;
}
