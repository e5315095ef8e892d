//! `baton serve` as a real process, with real clients: tokens and roles
//! (no token, a wrong one, a worker's on an operator's request, the actor
//! recorded), the task API's statuses, the demo through a server, SIGTERM
//! mid-storm answering what is in flight, and kill -9 mid-storm losing no
//! answered grant.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

#[path = "common/run_bench.rs"]
mod run_bench;
#[path = "common/server.rs"]
mod server;

use run_bench::run_bench;
use serde_json::Value;
use server::Server;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_baton");
const WORKER: &str = "wwwwwwwwwwwwwwwwwwwwwwww";
const WORKER2: &str = "vvvvvvvvvvvvvvvvvvvvvvvv";
const WORKER3: &str = "uuuuuuuuuuuuuuuuuuuuuuuu";
const OPERATOR: &str = "oooooooooooooooooooooooo";

/// One CLI command against `url`, with `token` (or none).
fn baton(url: &str, token: Option<&str>, args: &[&str]) -> (i32, Value) {
    let mut c = Command::new(BIN);
    c.arg("--store").arg(url).args(args);
    for v in [
        "BATON_STORE",
        "BATON_TOKEN",
        "BATON_TASK",
        "BATON_OWNER",
        "BATON_FENCE",
    ] {
        c.env_remove(v);
    }
    if let Some(t) = token {
        c.env("BATON_TOKEN", t);
    }
    let out = c.output().unwrap();
    let text = if out.stdout.is_empty() {
        &out.stderr
    } else {
        &out.stdout
    };
    let v = serde_json::from_slice(text).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), v)
}

/// One raw HTTP/1.1 request on a connection of its own: the status and
/// the JSON body. `None` when the connection failed or the answer was cut.
fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> Option<(u16, Value)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).ok()?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).ok()?;
    let text = String::from_utf8_lossy(&answer);
    let (head, rest) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, serde_json::from_str(rest).unwrap_or(Value::Null)))
}

fn token_file(dir: &Path) -> std::path::PathBuf {
    let p = dir.join("tokens");
    std::fs::write(
        &p,
        format!(
            "# test tokens\nci worker {WORKER} owners=w,w-*\nci2 worker {WORKER2}\nbench worker {WORKER3} owners=bench-*\nalice operator {OPERATOR}\n"
        ),
    )
    .unwrap();
    p
}

#[test]
fn tokens_decide_who_may_ask_and_the_token_names_the_actor() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let server = Server::start(&store, Some(&token_file(dir.path())));
    let url = server.url();

    // No token, a wrong token: 401, exit 6, nothing applied.
    assert_eq!(baton(&url, None, &["claim", "t", "--owner", "w"]).0, 6);
    assert_eq!(
        baton(
            &url,
            Some("not-a-token-at-all-x"),
            &["claim", "t", "--owner", "w"]
        )
        .0,
        6
    );
    let (status, body) = http(
        server.addr,
        "POST",
        "/v1/tasks/t/claim",
        None,
        r#"{"owner":"w"}"#,
    )
    .unwrap();
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["kind"], "not_permitted");
    let (status, _) = http(
        server.addr,
        "GET",
        "/v1/tasks/t",
        Some("wrong-wrong-wrong-wrong"),
        "",
    )
    .unwrap();
    assert_eq!(status, 401);
    // The health check needs no token; the data does.
    assert_eq!(
        http(server.addr, "GET", "/healthz", None, "").map(|a| a.0),
        Some(200)
    );
    assert_eq!(
        http(server.addr, "GET", "/metrics", None, "").map(|a| a.0),
        Some(401)
    );

    // A worker's token: claims and reads; operator requests are 403, exit 6.
    let (code, grant) = baton(
        &url,
        Some(WORKER),
        &["claim", "t", "--owner", "w", "--ttl", "60s"],
    );
    assert_eq!(code, 0, "{grant}");
    let fence = grant["fence"].as_u64().unwrap();
    assert_eq!(baton(&url, Some(WORKER), &["holder", "t"]).0, 0);
    // An ended task, so that a prune has something to refuse.
    let (code, g) = baton(&url, Some(WORKER), &["claim", "ended", "--owner", "w"]);
    assert_eq!(code, 0, "{g}");
    let f = g["fence"].to_string();
    let (code, r) = baton(
        &url,
        Some(WORKER),
        &["complete", "ended", "--owner", "w", "--fence", &f],
    );
    assert_eq!(code, 0, "{r}");
    for args in [
        &["cancel", "t", "--operator", "mallory"][..],
        &["sweep"][..],
        &["outbox", "ack", "3f2b8c1e-0000-4000-8000-000000000000"][..],
        &["limit", "set", "repo", "9", "--operator", "mallory"][..],
        &[
            "queue",
            "set",
            "builds",
            "--max-attempts",
            "9",
            "--operator",
            "mallory",
        ][..],
        &["prune", "--finished-before", "0s", "--operator", "mallory"][..],
    ] {
        let (code, err) = baton(&url, Some(WORKER), args);
        assert_eq!(code, 6, "{args:?}: {err}");
        assert_eq!(err["error"]["kind"], "not_permitted", "{args:?}");
    }
    let (status, body) = http(
        server.addr,
        "POST",
        "/v1/tasks/t/cancel",
        Some(WORKER),
        r#"{"by":{"role":"operator","id":"mallory"},"fence":null}"#,
    )
    .unwrap();
    assert_eq!(status, 403, "{body}");
    let (_, holder) = baton(&url, Some(WORKER), &["holder", "t"]);
    assert_eq!(
        (holder["live"].as_bool(), holder["fence"].as_u64()),
        (Some(true), Some(fence))
    );

    // A worker's token acts only as the owners its line names: ci2's
    // lease cannot be completed, released, cancelled or renewed with ci's
    // token, nor its declared task started; nor can ci take `next` as ci2.
    let (code, g2) = baton(
        &url,
        Some(WORKER2),
        &["claim", "t2", "--owner", "ci2", "--ttl", "60s"],
    );
    assert_eq!(code, 0, "{g2}");
    let f2 = g2["fence"].to_string();
    for args in [
        &["complete", "t2", "--owner", "ci2", "--fence", &f2][..],
        &["release", "t2", "--owner", "ci2", "--fence", &f2][..],
        &["renew", "t2", "--owner", "ci2", "--fence", &f2][..],
        &["cancel", "t2", "--owner", "ci2", "--fence", &f2][..],
        &["claim", "t3", "--owner", "ci2"][..],
        &["claim", "t3", "--owner", "ci"][..],
        &["next", "--owner", "ci2"][..],
        &[
            "task",
            "start",
            "t2",
            "--run",
            "r",
            "--executor",
            "ci2",
            "--fence",
            &f2,
        ][..],
    ] {
        let (code, err) = baton(&url, Some(WORKER), args);
        assert_eq!(code, 6, "{args:?}: {err}");
        assert_eq!(err["error"]["kind"], "not_permitted", "{args:?}");
    }
    // Through the task API a request the token may not make is refused
    // as not permitted before its input is checked: a worker learns
    // nothing of an operator's (or another owner's) requests from their
    // validation.
    for (path, body) in [
        (
            "/v1/limits/k",
            r#"{"operator":"alice","limit":4000000}"#.to_owned(),
        ),
        (
            "/v1/tasks/t2/renew",
            format!(r#"{{"owner":"ci2","fence":{f2},"ttl_ms":0}}"#),
        ),
    ] {
        let (status, err) = http(server.addr, "POST", path, Some(WORKER), &body).unwrap();
        assert_eq!(
            (status, err["error"]["kind"].as_str()),
            (403, Some("not_permitted")),
            "{path}: {err}"
        );
        // The same input from a token that may send it: invalid, by name.
        let token = if path.contains("limits") {
            OPERATOR
        } else {
            WORKER2
        };
        let (status, err) = http(server.addr, "POST", path, Some(token), &body).unwrap();
        assert_eq!(
            (status, err["error"]["kind"].as_str()),
            (400, Some("invalid")),
            "{path}: {err}"
        );
    }
    let (_, h2) = baton(&url, Some(WORKER2), &["holder", "t2"]);
    assert_eq!(
        (h2["live"].as_bool(), h2["owner"].as_str()),
        (Some(true), Some("ci2")),
        "{h2}"
    );
    let (status, body) = http(
        server.addr,
        "POST",
        "/v1/tasks/t2/complete",
        Some(WORKER),
        &format!(r#"{{"owner":"ci2","fence":{f2}}}"#),
    )
    .unwrap();
    assert_eq!(status, 403, "{body}");
    // Within its names it acts as it pleases (a prefix).
    let (code, g) = baton(&url, Some(WORKER), &["claim", "t4", "--owner", "w-7"]);
    assert_eq!(code, 0, "{g}");

    // `bench --processes --token T` hands the token to its workers.
    run_bench(
        BIN,
        &url,
        &[
            "--token",
            WORKER3,
            "--processes",
            "--workers",
            "2",
            "--tasks",
            "20",
        ],
    );

    // An operator's token: the cancel lands, recorded as the token's name.
    let (code, out) = baton(
        &url,
        Some(OPERATOR),
        &["cancel", "t", "--operator", "mallory", "--force"],
    );
    assert_eq!(code, 0, "{out}");
    let out = Command::new(BIN)
        .args(["--store", &url, "task", "events", "t"])
        .env("BATON_TOKEN", WORKER)
        .output()
        .unwrap();
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let cancelled = events
        .iter()
        .find(|e| e["kind"] == "CANCELLED")
        .unwrap_or_else(|| panic!("no CANCELLED event in {events:?}"));
    assert_eq!(
        cancelled["actor"],
        serde_json::json!({"role": "operator", "id": "alice"})
    );
    assert_eq!(baton(&url, Some(OPERATOR), &["sweep"]).0, 0);
}

/// `/metrics` as the text it is, with `token`.
fn scrape(a: SocketAddr, token: &str) -> String {
    let mut s = TcpStream::connect(a).unwrap();
    let req = format!(
        "GET /metrics HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut t = String::new();
    s.read_to_string(&mut t).unwrap();
    t
}

/// `next`, a graph's add and a sweep take the path every write takes
/// (the server's layers): admitted for the token's caller, and counted.
#[test]
fn next_graph_and_sweep_are_admitted_and_counted_like_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let tokens = token_file(dir.path()).display().to_string();
    let server = Server::start_with(&store, &["--tokens", &tokens, "--sweep-every", "off"]);
    let a = server.addr;
    let graph = r#"[{"task": "fetch", "queue": "etl"}, {"task": "load", "queue": "etl", "after": ["fetch"]}]"#;
    let (s, r) = http(a, "POST", "/v1/graph", Some(WORKER), graph).unwrap();
    assert_eq!(s, 200, "{r}");
    // The same task in another queue is refused, and the refusal counted.
    let other = r#"[{"task": "fetch", "queue": "other"}]"#;
    let (s, r) = http(a, "POST", "/v1/graph", Some(WORKER), other).unwrap();
    assert_eq!(s, 409, "{r}");
    let reason = r["refused"].as_str().unwrap().to_owned();
    // `next` as an owner the token does not name is not admitted.
    let (s, r) = http(
        a,
        "POST",
        "/v1/next",
        Some(WORKER),
        r#"{"owner": "ci2", "queues": ["etl"]}"#,
    )
    .unwrap();
    assert_eq!(
        (s, r["error"]["kind"].as_str()),
        (403, Some("not_permitted")),
        "{r}"
    );
    let (s, r) = http(
        a,
        "POST",
        "/v1/next",
        Some(WORKER),
        r#"{"owner": "w", "queues": ["etl"], "ttl_ms": 300}"#,
    )
    .unwrap();
    assert_eq!((s, r["task"].as_str()), (200, Some("fetch")), "{r}");
    std::thread::sleep(Duration::from_millis(400));
    // A worker may not sweep; an operator's sweep records the expiry.
    let (s, r) = http(a, "POST", "/v1/sweep", Some(WORKER), "").unwrap();
    assert_eq!(
        (s, r["error"]["kind"].as_str()),
        (403, Some("not_permitted")),
        "{r}"
    );
    let (s, r) = http(a, "POST", "/v1/sweep", Some(OPERATOR), "").unwrap();
    assert_eq!(
        (s, r["items"][0]["task"].as_str()),
        (200, Some("fetch")),
        "{r}"
    );
    let metrics = scrape(a, OPERATOR);
    for name in [
        // The grant `next` made.
        "baton_grants_total 1",
        // The expiry the sweep wrote.
        "baton_lease_expirations_total 1",
    ] {
        assert!(metrics.contains(name), "{name} not in {metrics}");
    }
    // The graph's refused add.
    let refused = format!(r#"baton_refusals_total{{reason="{reason}"}} 1"#);
    assert!(metrics.contains(&refused), "{refused} not in {metrics}");
}

/// The value of the metric line that starts with `name ` (labels and all).
fn metric(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// What an alert needs is on `/metrics`, counted wherever the decision was
/// made: a lease the server's own sweeper ends (no request touches the
/// task) is an expiration and a failure; a failure tried again and one for
/// good are counted, dead letters and live leases are gauged, and however
/// many queues the store has, the per-queue gauges name a bounded number.
#[test]
fn the_sweepers_decisions_are_counted_and_alerts_have_their_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let server = Server::start_with(&store, &["--sweep-every", "100ms"]);
    let a = server.addr;
    let mut graph: Vec<Value> = ["sleepy", "held", "broken", "flaky"]
        .iter()
        .map(|t| serde_json::json!({"task": t, "queue": *t}))
        .collect();
    // 70 more queues of one task each, past the labelled bound.
    graph.extend(
        (0..70).map(|i| serde_json::json!({"task": format!("t{i}"), "queue": format!("q{i}")})),
    );
    // A queue's policy is taken by the tasks added after it.
    let (s, r) = http(
        a,
        "POST",
        "/v1/queues/flaky/policy",
        None,
        r#"{"retry":{"max_attempts":3,"backoff_ms":3600000},"operator":"alice"}"#,
    )
    .unwrap();
    assert_eq!(s, 200, "{r}");
    let adding = Instant::now();
    let (s, r) = http(
        a,
        "POST",
        "/v1/graph",
        None,
        &Value::from(graph).to_string(),
    )
    .unwrap();
    assert_eq!(s, 200, "{r}");
    let added = Instant::now();
    let next = |queue: &str, ttl_ms: u64| {
        let body = format!(r#"{{"owner":"w","queues":["{queue}"],"ttl_ms":{ttl_ms}}}"#);
        let (s, g) = http(a, "POST", "/v1/next", None, &body).unwrap();
        assert_eq!((s, g["task"].as_str()), (200, Some(queue)), "{g}");
        g["fence"].as_u64().unwrap()
    };
    let fail = |task: &str, fence: u64| {
        let body = format!(r#"{{"owner":"w","fence":{fence},"error":{{"exit":1}}}}"#);
        let (s, r) = http(a, "POST", &format!("/v1/tasks/{task}/fail"), None, &body).unwrap();
        assert_eq!(s, 200, "{r}");
        r["state"].as_str().unwrap().to_owned()
    };
    next("sleepy", 300);
    next("held", 600_000);
    let fence = next("broken", 600_000);
    assert_eq!(fail("broken", fence), "FAILED");
    let fence = next("flaky", 600_000);
    assert_eq!(fail("flaky", fence), "REGISTERED", "tried again");
    // Nobody asks anything of `sleepy` but to read its events: the
    // sweeper alone writes its expiry.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (s, r) = http(a, "GET", "/v1/tasks/sleepy/events", None, "").unwrap();
        assert_eq!(s, 200, "{r}");
        let kinds: Vec<&str> = r["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["kind"].as_str())
            .collect();
        if kinds.contains(&"STALLED") {
            break;
        }
        assert!(Instant::now() < deadline, "never swept: {kinds:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (waited_least, before_scrape) = (added.elapsed(), Instant::now());
    let metrics = scrape(a, "none");
    let waited_most = adding.elapsed();
    // Each of q0..q63 (named) has one task waiting since the graph was
    // added; a queue whose task is held, failed, or put off an hour
    // (flaky's retry) has none waiting.
    let age = metric(
        &metrics,
        r#"baton_queue_oldest_waiting_seconds{queue="q0"}"#,
    )
    .unwrap_or_else(|| panic!("no oldest wait for q0 in {metrics}"));
    assert!(
        age >= waited_least.as_secs_f64() - 0.002 && age <= waited_most.as_secs_f64() + 0.002,
        "{age} s, between {waited_least:?} and {waited_most:?} ({:?} to scrape)",
        before_scrape.elapsed()
    );
    let expect = [
        (r#"baton_queue_oldest_waiting_seconds{queue="held"}"#, 0.0),
        (r#"baton_queue_oldest_waiting_seconds{queue="flaky"}"#, 0.0),
        (r#"baton_queue_oldest_waiting_seconds{queue="broken"}"#, 0.0),
        ("baton_lease_expirations_total", 1.0),
        // broken's, flaky's and sleepy's.
        ("baton_failures_total", 3.0),
        ("baton_retries_scheduled_total", 1.0),
        ("baton_grants_total", 4.0),
        ("baton_live_leases", 1.0),
        (r#"baton_dead_letter_tasks{queue="broken"}"#, 1.0),
        (r#"baton_dead_letter_tasks{queue="flaky"}"#, 0.0),
        (r#"baton_tasks{queue="held",state="CLAIMED"}"#, 1.0),
        // 74 queues, 64 named; the ten with one waiting task each (the
        // same size, so the last by name) are added up.
        ("baton_unlabelled_queues", 10.0),
        (
            r#"baton_tasks_in_unlabelled_queues{state="REGISTERED"}"#,
            10.0,
        ),
        ("baton_dead_letter_tasks_in_unlabelled_queues", 0.0),
    ];
    for (name, want) in expect {
        assert_eq!(metric(&metrics, name), Some(want), "{name} in {metrics}");
    }
    let named: std::collections::BTreeSet<&str> = metrics
        .lines()
        .filter_map(|l| l.strip_prefix("baton_tasks{queue=\""))
        .filter_map(|l| l.split('"').next())
        .collect();
    assert_eq!(named.len(), 64, "{named:?}");
    let aged = metrics
        .lines()
        .filter(|l| l.starts_with("baton_queue_oldest_waiting_seconds{"))
        .count();
    assert_eq!(aged, 64, "the named queues only: {metrics}");
    let version = format!(
        r#"baton_build_info{{version="{}"}} 1"#,
        env!("CARGO_PKG_VERSION")
    );
    assert!(metrics.contains(&version), "{version} in {metrics}");
}

/// A token line's `scope=` limits its bearer to queues and id prefixes,
/// for a worker and an operator alike, whichever endpoint it asks through:
/// outside the scope a claim, a `next` naming another queue, a graph's add,
/// an operator's retry, a sweep and an acknowledgement are not permitted
/// (403) and change nothing; a scope sent in the request itself cannot
/// widen the token's; inside it everything works as for any token.
#[test]
fn a_scoped_token_acts_only_within_its_queues_and_prefixes() {
    const SCOPED: &str = "ssssssssssssssssssssssss";
    const SCOPED_OPS: &str = "pppppppppppppppppppppppp";
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        format!(
            "ci worker {SCOPED} owners=w,w-* scope=queue:ci,prefix:agent-*\n\
             ci-ops operator {SCOPED_OPS} scope=queue:ci\n\
             alice operator {OPERATOR}\n"
        ),
    )
    .unwrap();
    let server = Server::start(&store, Some(&tokens));
    let a = server.addr;
    let ask = |method: &str, path: &str, token: &str, body: &str| {
        http(a, method, path, Some(token), body).unwrap()
    };
    let graph = r#"[{"task": "build", "queue": "ci"}, {"task": "deploy", "queue": "prod"}, {"task": "deploy-2", "queue": "prod"}]"#;
    let (s, r) = ask("POST", "/v1/graph", OPERATOR, graph);
    assert_eq!(s, 200, "{r}");
    let denied = |s: u16, r: &Value, what: &str| {
        assert_eq!(
            (s, r["error"]["kind"].as_str()),
            (403, Some("not_permitted")),
            "{what}: {r}"
        );
    };
    // A worker outside its scope: another queue's task, a bare task
    // without its prefix, a `next` naming another queue, an add there.
    let (s, r) = ask("POST", "/v1/tasks/deploy/claim", SCOPED, r#"{"owner":"w"}"#);
    denied(s, &r, "claim in prod");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("outside the scope"),
        "{r}"
    );
    let (s, r) = ask("POST", "/v1/tasks/loose/claim", SCOPED, r#"{"owner":"w"}"#);
    denied(s, &r, "bare task without the prefix");
    // `next` naming another queue: its tasks are passed over (the scope
    // has a prefix, so it may name any queue and take only those tasks);
    // a token scoped to queues alone may not name it at all.
    let (s, r) = ask(
        "POST",
        "/v1/next",
        SCOPED,
        r#"{"owner":"w","queues":["prod"]}"#,
    );
    assert_eq!(s, 409, "nothing in prod for this token: {r}");
    let (s, r) = ask(
        "POST",
        "/v1/next",
        SCOPED_OPS,
        r#"{"owner":"x","queues":["ci","prod"]}"#,
    );
    denied(s, &r, "next naming prod");
    let (s, r) = ask(
        "POST",
        "/v1/graph",
        SCOPED,
        r#"[{"task": "deploy-3", "queue": "prod"}]"#,
    );
    denied(s, &r, "add to prod");
    // The store protocol, with a scope of the request's own that would
    // widen the token's: the token's scope is the one decided by.
    let forged = baton_core::Operation {
        task: baton_core::TaskId::parse("task", "deploy-2").unwrap(),
        request: baton_core::Request::Claim {
            owner: baton_core::Id::parse("owner", "w").unwrap(),
            ttl_ms: Some(60_000),
            lock_delay_ms: None,
        },
        pre: baton_core::Preconditions {
            within: Some(baton_core::access::Scope::parse("prefix:deploy-*").unwrap()),
            ..Default::default()
        },
        now: baton_core::Timestamp(0),
        clock: Default::default(),
    };
    let (s, r) = ask(
        "POST",
        "/v1/store/apply",
        SCOPED,
        &serde_json::to_string(&forged).unwrap(),
    );
    assert!(
        r.to_string().contains("outside the scope") && !r.to_string().contains("fence\":"),
        "{s}: {r}"
    );
    for task in ["deploy", "deploy-2"] {
        let (_, rec) = ask("GET", &format!("/v1/tasks/{task}"), OPERATOR, "");
        assert_eq!(rec["state"], "REGISTERED", "{task} unchanged: {rec}");
    }
    let (_, rec) = ask("GET", "/v1/tasks/loose", OPERATOR, "");
    assert_eq!(rec["refused"], "not_found", "nothing created: {rec}");
    // Inside: its queue through `next`, a bare task with its prefix.
    let (s, g) = ask(
        "POST",
        "/v1/next",
        SCOPED,
        r#"{"owner":"w","queues":["ci"]}"#,
    );
    assert_eq!((s, g["task"].as_str()), (200, Some("build")), "{g}");
    let (s, r) = ask(
        "POST",
        "/v1/tasks/agent-7/claim",
        SCOPED,
        r#"{"owner":"w-1"}"#,
    );
    assert_eq!((s, r["state"].as_str()), (200, Some("CLAIMED")), "{r}");
    // A scoped operator: a cancel in its queue, not another's; no sweep
    // or acknowledgement, which act on every task.
    let (s, r) = ask(
        "POST",
        "/v1/tasks/build/cancel",
        SCOPED_OPS,
        r#"{"by":{"role":"operator","id":"x"}}"#,
    );
    assert_eq!(s, 200, "{r}");
    let (s, r) = ask(
        "POST",
        "/v1/tasks/deploy/finalize",
        SCOPED_OPS,
        r#"{"by":{"role":"operator","id":"x"},"error":{"reason":"no"}}"#,
    );
    denied(s, &r, "an operator's finalize in prod");
    let (s, r) = ask("POST", "/v1/sweep", SCOPED_OPS, "");
    denied(s, &r, "a scoped sweep");
    let (s, r) = ask(
        "POST",
        "/v1/outbox/ack",
        SCOPED_OPS,
        r#"{"intent_ids":["x"]}"#,
    );
    denied(s, &r, "a scoped acknowledgement");
    let (_, rec) = ask("GET", "/v1/tasks/deploy", OPERATOR, "");
    assert_eq!(rec["state"], "REGISTERED", "{rec}");
    // An unscoped operator is not limited.
    let (s, r) = ask(
        "POST",
        "/v1/tasks/deploy/finalize",
        OPERATOR,
        r#"{"by":{"role":"operator","id":"x"},"error":{"reason":"no"}}"#,
    );
    assert_eq!(s, 200, "{r}");
}

#[test]
fn a_server_without_tokens_listens_only_on_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let out = Command::new(BIN)
        .args(["serve", "--store", &store, "--listen", "0.0.0.0:0"])
        .env_remove("BATON_STORE")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err: Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(err["error"]["field"], "listen");
    assert!(!dir.path().join("s.db").exists(), "nothing was opened");
}

#[test]
fn the_task_api_answers_with_the_clis_json_and_statuses() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let server = Server::start(&store, None);
    let a = server.addr;
    let (s, g) = http(
        a,
        "POST",
        "/v1/tasks/job/claim",
        None,
        r#"{"owner":"w1","ttl_ms":60000}"#,
    )
    .unwrap();
    assert_eq!(s, 200, "{g}");
    assert_eq!(
        (g["owner"].as_str(), g["idempotent"].as_bool()),
        (Some("w1"), Some(false))
    );
    let fence = g["fence"].as_u64().unwrap();
    // The CLI sees the same grant through the http:// store.
    let (code, h) = baton(&server.url(), None, &["holder", "job"]);
    assert_eq!((code, h["fence"].as_u64()), (0, Some(fence)));
    let (s, r) = http(a, "POST", "/v1/tasks/job/claim", None, r#"{"owner":"w2"}"#).unwrap();
    assert_eq!((s, r["refused"].as_str()), (409, Some("held")));
    let (s, r) = http(
        a,
        "GET",
        &format!("/v1/tasks/job/verify?fence={}", fence + 1),
        None,
        "",
    )
    .unwrap();
    assert_eq!((s, r["current"].as_bool()), (409, Some(false)));
    let (s, r) = http(
        a,
        "POST",
        "/v1/tasks/job/complete",
        None,
        &format!(r#"{{"owner":"w1","fence":{}}}"#, fence + 7),
    )
    .unwrap();
    assert_eq!(
        (s, r["refused"].as_str()),
        (409, Some("stale_fence")),
        "{r}"
    );
    let (s, r) = http(
        a,
        "POST",
        "/v1/tasks/job/complete",
        None,
        &format!(r#"{{"owner":"w1","fence":{fence}}}"#),
    )
    .unwrap();
    assert_eq!((s, r["state"].as_str()), (200, Some("SUCCEEDED")), "{r}");
    let (s, r) = http(a, "GET", "/v1/tasks/nothing-here", None, "").unwrap();
    assert_eq!((s, r["refused"].as_str()), (404, Some("not_found")));
    let (s, r) = http(
        a,
        "POST",
        "/v1/tasks/job/claim",
        None,
        r#"{"owner":"w1","ttl_ms":0}"#,
    )
    .unwrap();
    assert_eq!((s, r["error"]["field"].as_str()), (400, Some("ttl")), "{r}");
    let (s, r) = http(a, "POST", "/v1/tasks/job/claim", None, "{not json").unwrap();
    assert_eq!((s, r["error"]["field"].as_str()), (400, Some("body")));
    // A value of the wrong type names its field, at any depth.
    let (s, r) = http(
        a,
        "POST",
        "/v1/tasks/job/claim",
        None,
        r#"{"owner":"w1","ttl_ms":"soon"}"#,
    )
    .unwrap();
    assert_eq!(
        (s, r["error"]["field"].as_str()),
        (400, Some("ttl_ms")),
        "{r}"
    );
    let (s, r) = http(
        a,
        "POST",
        "/v1/tasks/deep/add",
        None,
        r#"{"node":{"queue":"q","priority":"high","depends_on":[]}}"#,
    )
    .unwrap();
    assert_eq!(
        (s, r["error"]["field"].as_str()),
        (400, Some("node.priority")),
        "{r}"
    );
    // The zombie counter counted the stale completion.
    let metrics = {
        let mut s = TcpStream::connect(a).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut t = String::new();
        s.read_to_string(&mut t).unwrap();
        t
    };
    assert!(
        metrics.contains(r#"baton_stale_fence_refusals_total{request="complete"} 1"#),
        "{metrics}"
    );
    assert!(metrics.contains("baton_grants_total 1"), "{metrics}");
    for name in [
        r#"baton_refusals_total{reason="held"} 1"#,
        r#"baton_tasks{queue="",state="SUCCEEDED"} 1"#,
        r#"baton_tasks{queue="",state="FAILED"} 0"#,
        "baton_request_duration_seconds_bucket",
        "baton_lease_expirations_total 0",
        "baton_recoveries_total 0",
    ] {
        assert!(metrics.contains(name), "{name} not in {metrics}");
    }
    // The store's group committer told the server the size of each commit.
    let batches: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("baton_commit_batch_size_count "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0.0);
    assert!(batches >= 2.0, "{metrics}");
    assert_eq!(http(a, "GET", "/readyz", None, "").map(|r| r.0), Some(200));
    // A blocking query answers as soon as there is something new.
    let started = Instant::now();
    let (s, r) = http(a, "GET", "/v1/tasks/job/events?after=0&wait=5s", None, "").unwrap();
    assert_eq!(s, 200);
    assert!(!r["items"].as_array().unwrap().is_empty());
    assert!(started.elapsed() < Duration::from_secs(4));
    // An operator's cancel that cascades: the task and every dependent
    // that has not ended, in one answer; a holder's cancel cannot cascade.
    for (task, after) in [("root", None), ("mid", Some("root")), ("leaf", Some("mid"))] {
        let args: Vec<&str> = match after {
            Some(dep) => vec!["add", task, "--after", dep],
            None => vec!["add", task],
        };
        assert_eq!(baton(&server.url(), None, &args).0, 0);
    }
    let (s, r) = http(
        a,
        "POST",
        "/v1/tasks/root/cancel",
        None,
        r#"{"by":{"role":"operator","id":"alice"},"cascade":true}"#,
    )
    .unwrap();
    assert_eq!((s, r["state"].as_str()), (200, Some("CANCELLED")), "{r}");
    assert_eq!(
        r["cascaded"],
        serde_json::json!([
            {"task": "mid", "state": "CANCELLED"},
            {"task": "leaf", "state": "CANCELLED"}
        ]),
        "{r}"
    );
    let (s, r) = http(
        a,
        "POST",
        "/v1/tasks/job/cancel",
        None,
        &format!(r#"{{"by":{{"role":"worker","id":"w1"}},"fence":{fence},"cascade":true}}"#),
    )
    .unwrap();
    assert_eq!(
        (s, r["error"]["field"].as_str()),
        (400, Some("cascade")),
        "{r}"
    );
    let (s, r) = http(
        a,
        "POST",
        "/v1/tasks/job/renew",
        None,
        r#"{"owner":"w1","fence":1,"cascade":true}"#,
    )
    .unwrap();
    assert_eq!(
        (s, r["error"]["field"].as_str()),
        (400, Some("cascade")),
        "{r}"
    );
    // A recurring schedule over the task API: set, listed, ticked once per period.
    let (s, r) = http(
        a,
        "POST",
        "/v1/schedules/nightly",
        None,
        r#"{"every_ms":3600000,"template":{"queue":"cron","priority":0,"depends_on":[]}}"#,
    )
    .unwrap();
    assert_eq!((s, r["state"].as_str()), (200, Some("REGISTERED")), "{r}");
    let (s, r) = http(a, "GET", "/v1/schedules", None, "").unwrap();
    assert_eq!(
        (s, r["items"].as_array().map(Vec::len)),
        (200, Some(1)),
        "{r}"
    );
    // Listed as `baton schedule list` lists it: core's Call answers both.
    let one = &r["items"][0];
    assert_eq!(
        (one["every_ms"].as_u64(), one["queue"].as_str()),
        (Some(3_600_000), Some("cron")),
        "{r}"
    );
    // The server's own beat (every `--sweep-every`) makes the period's
    // task; a tick after it makes none.
    let deadline = Instant::now() + Duration::from_secs(10);
    let ready = loop {
        let (s, r) = http(a, "GET", "/v1/tasks?state=READY&queue=cron", None, "").unwrap();
        assert_eq!(s, 200, "{r}");
        let n = r["items"].as_array().map_or(0, Vec::len);
        if n > 0 || Instant::now() > deadline {
            break n;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(ready, 1, "the server's beat made the period's task");
    // A queue without a state lists the queue's tasks (core reads the
    // query by the catalogue's rules, as for `baton task list --queue`).
    let (s, r) = http(a, "GET", "/v1/tasks?queue=cron", None, "").unwrap();
    assert_eq!(
        (s, r["items"].as_array().map(Vec::len)),
        (200, Some(1)),
        "{r}"
    );
    let (s, r) = http(a, "GET", "/v1/tasks?queue=elsewhere", None, "").unwrap();
    assert_eq!(
        (s, r["items"].as_array().map(Vec::len)),
        (200, Some(0)),
        "{r}"
    );
    let (s, r) = http(a, "GET", "/v1/tasks?state=STUCK", None, "").unwrap();
    assert_eq!(
        (s, r["error"]["field"].as_str()),
        (400, Some("state")),
        "{r}"
    );
    assert!(
        r["error"]["message"].as_str().unwrap().contains("BLOCKED"),
        "{r}"
    );
    let (s, r) = http(a, "POST", "/v1/scheduler/tick", None, "").unwrap();
    assert_eq!(
        (s, r["items"].as_array().map(Vec::len)),
        (200, Some(0)),
        "{r}"
    );
    let (s, r) = http(a, "POST", "/v1/schedules/fast", None, r#"{"every_ms":10}"#).unwrap();
    assert_eq!(
        (s, r["error"]["field"].as_str()),
        (400, Some("every_ms")),
        "{r}"
    );
    // A cron schedule over the task API; a bad expression names `cron`.
    let (s, r) = http(
        a,
        "POST",
        "/v1/schedules/late",
        None,
        r#"{"cron":"61 * * * *"}"#,
    )
    .unwrap();
    assert_eq!(
        (s, r["error"]["field"].as_str()),
        (400, Some("cron")),
        "{r}"
    );
    let (s, r) = http(
        a,
        "POST",
        "/v1/schedules/late",
        None,
        r#"{"cron":"0 2 * * *","template":{"queue":"cron","priority":0,"depends_on":[]}}"#,
    )
    .unwrap();
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["cron"], "0 2 * * *", "the schedule, as set: {r}");
    assert!(
        r["next_run"]
            .as_str()
            .is_some_and(|t| t.ends_with("T02:00:00.000Z")),
        "its next run: {r}"
    );
    // A concurrency key over the task API: a limit of 1, a task with the
    // key granted, the next refused `key_full` naming it.
    let (s, r) = http(
        a,
        "POST",
        "/v1/limits/deploy",
        None,
        r#"{"limit":1,"operator":"alice"}"#,
    )
    .unwrap();
    assert_eq!(
        (s, r["key"].as_str(), &r["limit"]),
        (200, Some("deploy"), &serde_json::json!(1)),
        "{r}"
    );
    for t in ["d1", "d2"] {
        let (s, r) = http(
            a,
            "POST",
            &format!("/v1/tasks/{t}/add"),
            None,
            r#"{"node":{"queue":"dq","priority":0,"depends_on":[],"key":"deploy"}}"#,
        )
        .unwrap();
        assert_eq!(s, 200, "{r}");
    }
    let (s, r) = http(a, "POST", "/v1/tasks/d1/claim", None, r#"{"owner":"w1"}"#).unwrap();
    assert_eq!(s, 200, "{r}");
    let (s, r) = http(a, "POST", "/v1/tasks/d2/claim", None, r#"{"owner":"w2"}"#).unwrap();
    assert_eq!(
        (s, r["refused"].as_str(), r["holders"][0]["task"].as_str()),
        (409, Some("key_full"), Some("d1")),
        "{r}"
    );
    let (s, r) = http(a, "GET", "/v1/limits/deploy", None, "").unwrap();
    assert_eq!(
        (s, r["limit"].as_u64(), r["parked"][0].as_str()),
        (200, Some(1), Some("d2")),
        "{r}"
    );
    let (s, r) = http(a, "GET", "/v1/limits", None, "").unwrap();
    assert_eq!(
        (s, r["items"].as_array().map(Vec::len)),
        (200, Some(1)),
        "{r}"
    );
    let (s, r) = http(
        a,
        "POST",
        "/v1/limits/deploy",
        None,
        r#"{"limit":-1,"operator":"alice"}"#,
    )
    .unwrap();
    assert_eq!(s, 400, "{r}");
    // Every task's events, paged, and a wait that returns at once when
    // there is one after the cursor.
    let (s, r) = http(a, "GET", "/v1/events?limit=2", None, "").unwrap();
    assert_eq!(
        (s, r["items"].as_array().map(Vec::len)),
        (200, Some(2)),
        "{r}"
    );
    let next = r["next"].as_str().unwrap().to_owned();
    let (s, r) = http(
        a,
        "GET",
        &format!("/v1/events?after={next}&limit=1&wait=5s"),
        None,
        "",
    )
    .unwrap();
    assert_eq!(s, 200, "{r}");
    assert!(
        r["items"][0]["seq"].as_u64() > next.parse().ok(),
        "after the cursor: {r}"
    );
    let (s, _) = http(a, "GET", "/v1/events?after=nope", None, "").unwrap();
    assert_eq!(s, 400);
    // A queue's retry policy over the task API: taken by a task added to
    // the queue after it; a policy out of bounds or with a field it does
    // not know is a 400 naming it, and changes nothing.
    let (s, r) = http(
        a,
        "POST",
        "/v1/queues/builds/policy",
        None,
        r#"{"retry":{"max_attempts":3,"backoff_ms":3600000},"operator":"alice"}"#,
    )
    .unwrap();
    assert_eq!(
        (s, r["queue"].as_str(), &r["retry"]["max_attempts"]),
        (200, Some("builds"), &serde_json::json!(3)),
        "the setting: {r}"
    );
    for (body, field) in [
        (
            r#"{"retry":{"max_attempts":0,"backoff_ms":1000},"operator":"alice"}"#,
            "max_attempts",
        ),
        (
            r#"{"retry":{"max_attempts":2,"backoff_ms":1000,"jitter":1},"operator":"alice"}"#,
            "jitter",
        ),
    ] {
        let (s, r) = http(a, "POST", "/v1/queues/builds/policy", None, body).unwrap();
        assert_eq!(s, 400, "{r}");
        assert!(r.to_string().contains(field), "{field}: {r}");
    }
    let (s, r) = http(a, "GET", "/v1/queues/builds/policy", None, "").unwrap();
    assert_eq!(
        (s, r["retry"]["max_attempts"].as_u64()),
        (200, Some(3)),
        "{r}"
    );
    let (s, r) = http(
        a,
        "POST",
        "/v1/tasks/b1/add",
        None,
        r#"{"node":{"queue":"builds","priority":0,"depends_on":[]}}"#,
    )
    .unwrap();
    assert_eq!(s, 200, "{r}");
    let (s, g) = http(a, "POST", "/v1/tasks/b1/claim", None, r#"{"owner":"w1"}"#).unwrap();
    assert_eq!(s, 200, "{g}");
    let (s, r) = http(
        a,
        "POST",
        "/v1/tasks/b1/fail",
        None,
        &format!(
            r#"{{"owner":"w1","fence":{},"error":{{"exit":1}}}}"#,
            g["fence"]
        ),
    )
    .unwrap();
    assert_eq!(
        (s, r["state"].as_str()),
        (200, Some("REGISTERED")),
        "retried by the queue's policy: {r}"
    );
    // The task gauges are by queue and state.
    let metrics = scrape(a, "none");
    for line in [
        r#"baton_tasks{queue="builds",state="REGISTERED"} 1"#,
        r#"baton_tasks{queue="builds",state="CLAIMED"} 0"#,
        r#"baton_tasks{queue="dq",state="CLAIMED"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} not in {metrics}");
    }
}

#[test]
fn the_demo_runs_through_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let server = Server::start(&store, None);
    let out = Command::new(BIN)
        .args(["demo", "--store", &server.url()])
        .env_remove("BATON_STORE")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doubles = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("double grants"))
        .map(str::trim);
    assert_eq!(doubles, Some("0"), "{text}");
}

/// Clients claiming distinct tasks as fast as they can, each answer kept.
struct Storm {
    answered: Arc<Mutex<Vec<(String, String, u64)>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Storm {
    fn start(addr: SocketAddr, clients: usize) -> Storm {
        let answered = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..clients)
            .map(|c| {
                let (answered, stop) = (answered.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut i = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let task = format!("s{c}-{i}");
                        let owner = format!("w{c}");
                        let body = format!(r#"{{"owner":"{owner}","ttl_ms":600000}}"#);
                        match http(
                            addr,
                            "POST",
                            &format!("/v1/tasks/{task}/claim"),
                            None,
                            &body,
                        ) {
                            Some((200, g)) => {
                                answered.lock().unwrap().push((
                                    task,
                                    owner,
                                    g["fence"].as_u64().unwrap(),
                                ));
                            }
                            Some((status, v)) => panic!("{task}: {status} {v}"),
                            // Refused or cut off: the server is going or gone.
                            None => std::thread::sleep(Duration::from_millis(5)),
                        }
                        i += 1;
                    }
                })
            })
            .collect();
        Storm {
            answered,
            stop,
            threads,
        }
    }

    fn finish(self) -> Vec<(String, String, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        Arc::try_unwrap(self.answered)
            .unwrap()
            .into_inner()
            .unwrap()
    }
}

/// Every answered grant is in the store, as answered.
fn assert_durable(store: &str, answered: &[(String, String, u64)]) {
    assert!(
        !answered.is_empty(),
        "the storm got answers before the server went"
    );
    let server = Server::start(store, None);
    for (task, owner, fence) in answered {
        let (code, h) = baton(&server.url(), None, &["holder", task]);
        assert_eq!(code, 0, "{task}: {h}");
        assert_eq!(
            (h["owner"].as_str(), h["fence"].as_u64()),
            (Some(owner.as_str()), Some(*fence)),
            "{task}: answered fence {fence} to {owner}, the store says {h}"
        );
    }
}

#[test]
fn kill_9_mid_storm_loses_no_answered_grant() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let mut server = Server::start(&store, None);
    let storm = Storm::start(server.addr, 8);
    std::thread::sleep(Duration::from_millis(800));
    server.signal("-KILL");
    server.wait(Duration::from_secs(5));
    let answered = storm.finish();
    assert_durable(&store, &answered);
}

#[test]
fn sigterm_mid_storm_answers_what_is_in_flight_and_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let mut server = Server::start(&store, None);
    let addr = server.addr;
    let (s, _) = http(
        addr,
        "POST",
        "/v1/tasks/waiter/claim",
        None,
        r#"{"owner":"w"}"#,
    )
    .unwrap();
    assert_eq!(s, 200);
    let storm = Storm::start(addr, 8);
    // A blocking query in flight when the signal comes is answered, early.
    let waiting = std::thread::spawn(move || {
        http(
            addr,
            "GET",
            "/v1/tasks/waiter/events?after=999999&wait=50s",
            None,
            "",
        )
    });
    std::thread::sleep(Duration::from_millis(800));
    server.signal("-TERM");
    let status = server.wait(Duration::from_secs(15));
    assert!(status.success(), "{status:?}");
    let answered = storm.finish();
    let (s, body) = waiting
        .join()
        .unwrap()
        .expect("the blocking query was answered");
    assert_eq!(s, 200, "{body}");
    assert_durable(&store, &answered);
}

/// Chromium, if this machine has it; the test needs it where
/// `BATON_TEST_BROWSER=1` (scripts/test installs it and sets that).
fn chromium() -> Option<&'static str> {
    let found = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    if found.is_none() {
        assert!(
            std::env::var("BATON_TEST_BROWSER").as_deref() != Ok("1"),
            "BATON_TEST_BROWSER=1 but Chromium is not installed (apt-get install chromium)"
        );
        eprintln!("skipped: Chromium is not installed (apt-get install chromium)");
    }
    found
}

/// Headless Chromium on this closed network: no sandbox (CI runs as
/// root), no GPU, nothing fetched from outside.
const CHROMIUM_FLAGS: [&str; 8] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
];

/// Headless Chromium with the flags this closed network needs, a profile
/// of its own, and `args`; its standard output.
fn headless(browser: &str, profile: &Path, args: &[&str]) -> String {
    let out = Command::new(browser)
        .args(CHROMIUM_FLAGS)
        .arg("--virtual-time-budget=4000")
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_status_page_shows_a_live_lease_in_a_real_browser() {
    let Some(browser) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let server = Server::start(&store, None);
    let (s, g) = http(
        server.addr,
        "POST",
        "/v1/tasks/nightly-build/claim",
        None,
        r#"{"owner":"agent-seven","ttl_ms":600000}"#,
    )
    .unwrap();
    assert_eq!(s, 200, "{g}");
    let fence = g["fence"].as_u64().unwrap().to_string();
    // A refusal for the page's list of recent ones.
    http(
        server.addr,
        "POST",
        "/v1/tasks/nightly-build/claim",
        None,
        r#"{"owner":"agent-eight"}"#,
    )
    .unwrap();
    let page = format!("{}/", server.url());
    let dom = headless(
        browser,
        &dir.path().join("profile-dom"),
        &["--dump-dom", &page],
    );
    // The page's script filled the live-lease table from /v1/status.
    let leases = dom
        .split(r#"<tbody id="leases">"#)
        .nth(1)
        .and_then(|rest| rest.split("</tbody>").next())
        .unwrap_or_else(|| panic!("no lease table in {dom}"));
    assert!(
        leases.contains(
            r##"<a class="task" title="nightly-build" href="#task=nightly-build">nightly-build</a>"##
        ),
        "the task links to its page: {leases}"
    );
    for cell in ["agent-seven", fence.as_str(), "CLAIMED"] {
        assert!(
            leases.contains(&format!("<td>{cell}</td>")),
            "{cell} not in {leases}"
        );
    }
    assert!(dom.contains("agent-seven"), "{dom}");
    assert!(
        dom.contains("<td>held</td>"),
        "the refusal is listed: {dom}"
    );
    let shot = dir.path().join("status-page.png");
    headless(
        browser,
        &dir.path().join("profile-shot"),
        &[
            "--window-size=1280,900",
            &format!("--screenshot={}", shot.display()),
            &page,
        ],
    );
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "a real screenshot"
    );
    if let Ok(keep) = std::env::var("BATON_KEEP_SCREENSHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
}

/// `baton bench` through the server at `url` with `args`: its report,
/// after checking it ran and that every task was granted once and no
/// stale write accepted.
fn bench_through(url: &str, args: &[&str]) -> Value {
    let r: Value = serde_json::from_str(&run_bench(BIN, url, args)).unwrap();
    for k in ["double_grants", "stale_accepted", "ungranted", "errors"] {
        assert_eq!(r[k].as_u64(), Some(0), "{args:?} {k}: {r}");
    }
    r
}

/// The group-commit benchmark through a server, at a size that only
/// proves it runs (its numbers live in benches/README.md).
#[test]
fn the_benchmark_runs_through_a_server_with_many_connections() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let server = Server::start(&store, None);
    for (order, connections, tasks) in [("disjoint", "4", 200u64), ("same", "1", 100)] {
        let r = bench_through(
            &server.url(),
            &[
                "--processes",
                "--workers",
                "2",
                "--connections",
                connections,
                "--tasks",
                &tasks.to_string(),
                "--order",
                order,
            ],
        );
        assert_eq!(r["grants"].as_u64(), Some(tasks), "{r}");
        assert_eq!(r["connections"].as_u64(), connections.parse().ok(), "{r}");
    }
}

/// A store that one process alone may open (memory, sled) is shared by
/// many processes through a server: the benchmark's worker processes all
/// reach it, and each task is granted once.
#[test]
fn many_processes_share_a_server_whose_store_is_one_process_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut stores = vec!["memory:".to_owned()];
    if cfg!(feature = "sled") {
        stores.push(format!("sled:{}", dir.path().join("s.sled").display()));
    }
    for store in stores {
        let server = Server::start(&store, None);
        let r = bench_through(
            &server.url(),
            &[
                "--processes",
                "--workers",
                "3",
                "--tasks",
                "60",
                "--order",
                "same",
            ],
        );
        assert_eq!(r["grants"].as_u64(), Some(60), "{store}: {r}");
        assert_eq!(r["processes"].as_bool(), Some(true), "{store}: {r}");
    }
}

/// `baton serve --listen unix:PATH` run until it says where it listens (or
/// ends first): the exit status if it ended, and its standard error.
fn serve_unix(store: &str, path: &Path) -> (Option<i32>, String) {
    let mut child = Command::new(BIN)
        .args(["serve", "--store", store, "--listen"])
        .arg(format!("unix:{}", path.display()))
        .env_remove("BATON_STORE")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = String::new();
    let mut line = String::new();
    let mut reader = std::io::BufReader::new(child.stderr.take().unwrap());
    std::io::BufRead::read_line(&mut reader, &mut line).unwrap();
    err.push_str(&line);
    if line.starts_with("baton serve: listening on") {
        child.kill().unwrap();
        child.wait().unwrap();
        return (None, err);
    }
    reader.read_to_string(&mut err).unwrap();
    (child.wait().unwrap().code(), err)
}

#[test]
fn a_unix_listener_never_removes_what_is_not_its_stale_socket() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    // A live SQLite store where the socket would go: refused, untouched.
    let victim = dir.path().join("victim.db");
    let (code, _) = baton(
        &format!("sqlite:{}", victim.display()),
        None,
        &["claim", "t", "--owner", "w"],
    );
    assert_eq!(code, 0);
    let before = std::fs::read(&victim).unwrap();
    let (code, err) = serve_unix(&store, &victim);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("not a socket"), "{err}");
    assert_eq!(
        std::fs::read(&victim).unwrap(),
        before,
        "the store was changed"
    );
    // A socket someone is listening on: refused, left in place.
    let live = dir.path().join("live.sock");
    let listener = std::os::unix::net::UnixListener::bind(&live).unwrap();
    let (code, err) = serve_unix(&store, &live);
    assert_eq!(code, Some(3), "{err}");
    assert!(
        std::os::unix::net::UnixStream::connect(&live).is_ok(),
        "the live socket was removed"
    );
    drop(listener);
    // A socket left by a server that is gone: replaced.
    let (code, err) = serve_unix(&store, &live);
    assert_eq!(code, None, "{err}");
}

#[test]
fn a_server_sweeps_on_its_own_and_the_page_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let server = Server::start(&store, None);
    let url = server.url();
    let (code, g) = baton(&url, None, &["claim", "t", "--owner", "w", "--ttl", "1s"]);
    assert_eq!(code, 0, "{g}");
    // Nobody runs `baton sweep`: the expiry is persisted with its event
    // within a second or so of the lease's end.
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let out = Command::new(BIN)
            .args(["--store", &store, "task", "events", "t"])
            .env_remove("BATON_STORE")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        if text.contains("\"STALLED\"") {
            break;
        }
        assert!(
            Instant::now() < until,
            "no sweep persisted the expiry: {text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (_, body) = http(server.addr, "GET", "/v1/status", None, "").unwrap();
    assert_eq!(body["sweeper"]["every_ms"], 1000, "{body}");
    assert!(body["sweeper"]["swept"].as_u64().unwrap() >= 1, "{body}");
    // Off when asked.
    let off = Server::start_with(&store, &["--sweep-every", "off"]);
    let (_, body) = http(off.addr, "GET", "/v1/status", None, "").unwrap();
    assert!(body["sweeper"].is_null(), "{body}");
}

/// Whether the server has closed `s` (a read answers end of file or an
/// error) within `within`.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            // An answer (the h2 SETTINGS frame): read on to the close.
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false;
            }
            Err(_) => return true,
        }
    }
}

#[test]
fn connections_that_send_nothing_cannot_keep_clients_out() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let server = Server::start_with(&store, &["--max-connections", "32", "--read-timeout", "2s"]);
    let addr = server.addr;
    // 200 that send nothing, 50 that send only an HTTP/2 preface, 20 that
    // trickle their headers: far more than the server holds.
    let mut idle: Vec<TcpStream> = Vec::new();
    for i in 0..270 {
        let mut s = TcpStream::connect(addr).unwrap();
        if (200..250).contains(&i) {
            s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
        } else if i >= 250 {
            s.write_all(b"POST /v1/tasks/x/claim HTTP/1.1\r\nHost: localhost\r\n")
                .unwrap();
        }
        idle.push(s);
    }
    // A client with a request still gets in, at once, and is answered.
    let t = Instant::now();
    let (status, body) = http(addr, "GET", "/healthz", None, "").expect("healthz answered");
    assert_eq!(status, 200, "{body}");
    let (code, g) = baton(&server.url(), None, &["claim", "t", "--owner", "w"]);
    assert_eq!(code, 0, "{g}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    // And every idle connection is closed: evicted for newer ones, or past
    // the read timeout (2 s) without a request.
    let mut open = 0;
    for s in &mut idle {
        if !closed_within(s, Duration::from_secs(5)) {
            open += 1;
        }
    }
    assert_eq!(open, 0, "idle connections still held");
}

#[test]
fn a_strangers_body_is_never_read() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let server = Server::start(&store, Some(&token_file(dir.path())));
    let pid = server.child.id();
    let rss_kb = move || -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    let before = rss_kb();
    // 40 strangers at once each announce a 31 MB body and send it: each is
    // answered 401 without its body being read.
    let addr = server.addr;
    let strangers: Vec<_> = (0..40)
        .map(|_| {
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let size = 31_000_000;
                s.write_all(
                    format!(
                        "POST /v1/graph HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {size}\r\n\r\n"
                    )
                    .as_bytes(),
                )
                .unwrap();
                let chunk = vec![b' '; 1 << 20];
                for _ in 0..(size / chunk.len()) {
                    // The server stops reading once it has answered.
                    if s.write_all(&chunk).is_err() {
                        break;
                    }
                }
                let mut answer = Vec::new();
                let _ = s.read_to_end(&mut answer);
                String::from_utf8_lossy(&answer).into_owned()
            })
        })
        .collect();
    for st in strangers {
        let answer = st.join().unwrap();
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer:.200}");
    }
    let grown_mb = rss_kb().saturating_sub(before) / 1024;
    assert!(
        grown_mb < 100,
        "the server grew by {grown_mb} MB reading strangers' bodies"
    );
    // The scheme is case-insensitive: `bearer` is `Bearer`.
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(
        format!("GET /v1/tasks/none HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: bearer {WORKER}\r\n\r\n")
            .as_bytes(),
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
}

#[test]
fn one_input_contract_for_the_cli_and_rest() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let server = Server::start(&store, None);
    let addr = server.addr;
    let manifest = |task: &str| {
        serde_json::json!({
            "task_id": task, "executor": "ci", "source_branch": "main",
            "source_oid": "abc123", "target_version": "1.0", "steps": ["build"],
        })
    };
    // A manifest the CLI takes, REST takes too.
    let file = dir.path().join("m.json");
    std::fs::write(&file, manifest("by-cli").to_string()).unwrap();
    let (code, out) = baton(
        &server.url(),
        None,
        &["task", "declare", file.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{out}");
    let (status, body) = http(
        addr,
        "POST",
        "/v1/tasks/by-rest/declare",
        None,
        &manifest("by-rest").to_string(),
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    // A key given twice is refused at any depth, and nothing is declared.
    let twice = r#"{"task_id":"dup","executor":"ci","executor":"evil","source_branch":"m","source_oid":"o","target_version":"1","steps":["s"]}"#;
    let (status, body) = http(addr, "POST", "/v1/tasks/dup/declare", None, twice).unwrap();
    assert_eq!(status, 400, "{body}");
    assert_eq!(http(addr, "GET", "/v1/tasks/dup", None, "").unwrap().0, 404);
    let (status, body) = http(
        addr,
        "POST",
        "/v1/tasks/t/claim",
        None,
        r#"{"owner":"a","owner":"b"}"#,
    )
    .unwrap();
    assert_eq!(status, 400, "{body}");
    // A field the request does not know is named, not ignored.
    let (status, body) = http(
        addr,
        "POST",
        "/v1/tasks/t/claim",
        None,
        r#"{"owner":"w","ttl":600000}"#,
    )
    .unwrap();
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (400, Some("ttl")),
        "{body}"
    );
    let (status, body) = http(
        addr,
        "POST",
        "/v1/next",
        None,
        r#"{"owner":"w","queue":"q"}"#,
    )
    .unwrap();
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (400, Some("queue")),
        "{body}"
    );
    assert_eq!(
        http(addr, "GET", "/v1/tasks/t", None, "").unwrap().0,
        404,
        "nothing was claimed"
    );
    // Every error is JSON, even those answered before a handler runs.
    for (method, path) in [
        ("GET", "/v1/tasks?limit=lots"),
        ("PUT", "/v1/tasks/t/claim"),
        ("GET", "/v1/tasks/t/events?after=-1"),
    ] {
        let (status, body) = http(addr, method, path, None, "").unwrap();
        assert!(status >= 400, "{method} {path}: {status}");
        assert!(
            body["error"]["kind"].is_string(),
            "{method} {path}: {status} {body}"
        );
    }
    // A token in the URL is refused and never repeated.
    let secret = "s3cr3t-s3cr3t-s3cr3t";
    for url in [
        format!("http://user:{secret}@{addr}"),
        format!("http://{addr}?token={secret}"),
    ] {
        let out = Command::new(BIN)
            .args(["--store", &url, "holder", "t"])
            .env_remove("BATON_STORE")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("\"field\":\"store\""), "{err}");
        assert!(!err.contains(secret), "the secret was echoed: {err}");
    }
}

/// Retention on the server's beat (`--prune-after`): a task that ended is
/// pruned without anyone running `baton prune`, its tombstone refuses a
/// new grant, and `POST /v1/prune` prunes as an operator asks.
#[test]
fn a_server_prunes_on_its_beat_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let server = Server::start_with(&store, &["--sweep-every", "200ms", "--prune-after", "1s"]);
    let url = server.url();
    let (code, g) = baton(&url, None, &["claim", "old", "--owner", "w"]);
    assert_eq!(code, 0, "{g}");
    let fence = g["fence"].to_string();
    let (code, out) = baton(
        &url,
        None,
        &["complete", "old", "--owner", "w", "--fence", &fence],
    );
    assert_eq!(code, 0, "{out}");
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, r) = baton(&url, None, &["task", "show", "old"]);
        if r["pruned_at"].is_string() {
            break;
        }
        assert!(Instant::now() < until, "the beat never pruned it: {r}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, r) = baton(&url, None, &["claim", "old", "--owner", "w"]);
    assert_eq!((code, r["refused"].as_str()), (1, Some("pruned")), "{r}");
    // By hand, over the task API.
    let (code, g) = baton(&url, None, &["claim", "new", "--owner", "w"]);
    assert_eq!(code, 0, "{g}");
    assert!(g["fence"].as_u64().unwrap() > fence.parse::<u64>().unwrap());
    let (s, r) = http(
        server.addr,
        "POST",
        "/v1/prune",
        None,
        r#"{"finished_before_ms":0,"operator":"alice"}"#,
    )
    .unwrap();
    assert_eq!((s, r["pruned"].as_u64()), (200, Some(0)), "{r}");
    let (s, r) = http(
        server.addr,
        "POST",
        "/v1/prune",
        None,
        r#"{"finished_before_ms":-5,"operator":"alice"}"#,
    )
    .unwrap();
    assert_eq!(s, 400, "{r}");
}

/// `serve --prune-after 1s --forget-after 1s`: a task that ends becomes a
/// tombstone on the beat, then goes on a later beat, and its id is granted
/// anew under a higher fence; `--forget-after` alone is a usage error, and
/// `POST /v1/prune` takes `forget_after_ms`, refusing a bad one by name.
#[test]
fn a_server_forgets_tombstones_on_its_beat_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let alone = Command::new(BIN)
        .args([
            "--store",
            &store,
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--forget-after",
            "1s",
        ])
        .output()
        .unwrap();
    assert_eq!(alone.status.code(), Some(2), "{alone:?}");
    assert!(
        String::from_utf8_lossy(&alone.stderr).contains("--prune-after"),
        "{alone:?}"
    );
    let server = Server::start_with(
        &store,
        &[
            "--sweep-every",
            "200ms",
            "--prune-after",
            "1s",
            "--forget-after",
            "1s",
        ],
    );
    let url = server.url();
    let (code, g) = baton(&url, None, &["claim", "old", "--owner", "w"]);
    assert_eq!(code, 0, "{g}");
    let fence = g["fence"].as_u64().unwrap();
    let f = fence.to_string();
    let (code, out) = baton(
        &url,
        None,
        &["complete", "old", "--owner", "w", "--fence", &f],
    );
    assert_eq!(code, 0, "{out}");
    let until = Instant::now() + Duration::from_secs(15);
    let mut was_tombstone = false;
    loop {
        let (code, r) = baton(&url, None, &["task", "show", "old"]);
        if r["pruned_at"].is_string() {
            assert!(r["forget_at"].is_string(), "{r}");
            was_tombstone = true;
        }
        if code == 5 && r["refused"] == "not_found" {
            break;
        }
        assert!(Instant::now() < until, "the beat never forgot it: {r}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(was_tombstone, "it was a tombstone before it went");
    let (code, g) = baton(&url, None, &["claim", "old", "--owner", "w"]);
    assert_eq!(code, 0, "granted anew: {g}");
    assert!(g["fence"].as_u64().unwrap() > fence, "{g}");
    let (s, r) = http(
        server.addr,
        "POST",
        "/v1/prune",
        None,
        r#"{"finished_before_ms":0,"forget_after_ms":-5,"operator":"alice"}"#,
    )
    .unwrap();
    assert_eq!(s, 400, "{r}");
    let (s, r) = http(
        server.addr,
        "POST",
        "/v1/prune",
        None,
        r#"{"finished_before_ms":0,"forget_after_ms":60000,"operator":"alice"}"#,
    )
    .unwrap();
    assert_eq!((s, r["forgotten"].as_u64()), (200, Some(0)), "{r}");
}

/// `serve --request-log`: a JSON line per request on standard error with
/// its method, path, status, latency and the token's name, never the token.
#[test]
fn the_request_log_names_the_token_never_shows_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let tokens = token_file(dir.path());
    let server = Server::start_with(
        &store,
        &["--tokens", &tokens.display().to_string(), "--request-log"],
    );
    let (s, _) = http(
        server.addr,
        "POST",
        "/v1/tasks/logged/claim",
        Some(WORKER),
        r#"{"owner":"w"}"#,
    )
    .unwrap();
    assert_eq!(s, 200);
    let (s, _) = http(
        server.addr,
        "GET",
        "/v1/tasks/logged",
        Some("wrong-wrong-wrong-wrong"),
        "",
    )
    .unwrap();
    assert_eq!(s, 401);
    let deadline = Instant::now() + Duration::from_secs(10);
    let lines: Vec<Value> = loop {
        let lines: Vec<Value> = server
            .log
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        if lines.len() >= 2 || Instant::now() > deadline {
            break lines;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let claim = lines
        .iter()
        .find(|l| l["path"] == "/v1/tasks/logged/claim")
        .unwrap_or_else(|| panic!("no line for the claim: {lines:?}"));
    assert_eq!(
        (
            claim["method"].as_str(),
            claim["status"].as_u64(),
            claim["token"].as_str()
        ),
        (Some("POST"), Some(200), Some("ci")),
        "{claim}"
    );
    assert!(claim["ms"].as_f64().is_some_and(|ms| ms >= 0.0), "{claim}");
    let refused = lines
        .iter()
        .find(|l| l["path"] == "/v1/tasks/logged")
        .unwrap_or_else(|| panic!("no line for the read: {lines:?}"));
    assert_eq!(refused["status"].as_u64(), Some(401));
    assert!(refused["token"].is_null(), "{refused}");
    let all = server.log.lock().unwrap().join("\n");
    assert!(!all.contains(WORKER), "the token itself is never logged");
    assert!(!all.contains("wrong-wrong-wrong-wrong"));
}

/// Headless Chromium driven over the DevTools protocol (a WebSocket):
/// the page is scripted as a person would use it, clicks included.
struct Browser {
    _child: KillOnDrop,
    ws: tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<TcpStream>>,
    id: u64,
}

/// A child process killed when this goes out of scope, a panic included
/// (a browser left running would spin on a CI machine's two cores).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Browser {
    fn open(browser: &str, profile: &Path) -> Browser {
        let child = Command::new(browser)
            .args(CHROMIUM_FLAGS)
            .args(["--window-size=1280,1000", "--remote-debugging-port=0"])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let child = KillOnDrop(child);
        // Chromium writes the port it took into the profile.
        let file = profile.join("DevToolsActivePort");
        let deadline = Instant::now() + Duration::from_secs(30);
        let port: u16 = loop {
            if let Some(p) = std::fs::read_to_string(&file)
                .ok()
                .and_then(|t| t.lines().next().and_then(|l| l.trim().parse().ok()))
            {
                break p;
            }
            assert!(Instant::now() < deadline, "Chromium did not start");
            std::thread::sleep(Duration::from_millis(50));
        };
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let page = loop {
            let targets = devtools_targets(addr);
            let found = targets.as_ref().and_then(|t| {
                t.as_array()?
                    .iter()
                    .find(|t| t["type"] == "page")
                    .and_then(|t| t["webSocketDebuggerUrl"].as_str().map(str::to_owned))
            });
            if let Some(url) = found {
                break url;
            }
            assert!(Instant::now() < deadline, "no page target: {targets:?}");
            std::thread::sleep(Duration::from_millis(50));
        };
        let (ws, _) = tungstenite::connect(page.as_str()).unwrap();
        Browser {
            _child: child,
            ws,
            id: 0,
        }
    }

    /// One DevTools call and its result.
    fn call(&mut self, method: &str, params: Value) -> Value {
        let v = self.answer(method, params);
        assert!(v.get("error").is_none(), "{method}: {v}");
        v["result"].clone()
    }

    /// One DevTools call and its whole answer (an error included).
    fn answer(&mut self, method: &str, params: Value) -> Value {
        self.id += 1;
        let id = self.id;
        let msg = serde_json::json!({"id": id, "method": method, "params": params});
        self.ws
            .send(tungstenite::Message::text(msg.to_string()))
            .unwrap();
        loop {
            let m = self.ws.read().unwrap();
            let Ok(text) = m.to_text() else { continue };
            let v: Value = serde_json::from_str(text).unwrap_or(Value::Null);
            if v["id"].as_u64() == Some(id) {
                return v;
            }
        }
    }

    /// Evaluates `js` in the page (awaiting a promise) and returns its value.
    fn eval(&mut self, js: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            serde_json::json!({"expression": js, "awaitPromise": true, "returnByValue": true}),
        );
        assert!(r.get("exceptionDetails").is_none(), "{js}: {r}");
        r["result"]["value"].clone()
    }

    /// Evaluates `js`; `None` when it threw (a page still loading) or the
    /// page navigated away while it ran (a reload under way).
    fn try_eval(&mut self, js: &str) -> Option<Value> {
        let v = self.answer(
            "Runtime.evaluate",
            serde_json::json!({"expression": js, "awaitPromise": true, "returnByValue": true}),
        );
        let r = &v["result"];
        (v.get("error").is_none() && r.get("exceptionDetails").is_none())
            .then(|| r["result"]["value"].clone())
    }

    /// Waits until `js` is true in the page.
    fn until(&mut self, what: &str, js: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.try_eval(js) != Some(Value::Bool(true)) {
            assert!(
                Instant::now() < deadline,
                "the page never showed {what}; it shows:\n{:?}",
                self.try_eval("document.body.innerText")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn go(&mut self, url: &str) {
        self.call("Page.navigate", serde_json::json!({"url": url}));
    }

    /// Gives the page `token` (as its token form keeps it), reloads, and
    /// waits for the new page (what the old one showed is gone with it).
    fn sign_in(&mut self, token: &str) {
        self.eval(&format!(
            "window.beforeSignIn = true; sessionStorage.setItem('baton-token', {token:?}); location.reload(); true"
        ));
        self.until(
            "the page, reloaded",
            "window.beforeSignIn === undefined && document.readyState === 'complete'",
        );
    }

    /// A screenshot, written to `path` (and named in the test's output).
    fn screenshot(&mut self, path: &Path) {
        use base64::Engine;
        let r = self.call(
            "Page.captureScreenshot",
            serde_json::json!({"format": "png"}),
        );
        let png = base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().unwrap())
            .unwrap();
        assert!(
            png.starts_with(b"\x89PNG") && png.len() > 10_000,
            "a real screenshot"
        );
        std::fs::write(path, png).unwrap();
        println!("screenshot: {}", path.display());
    }
}

/// Chromium's list of DevTools targets (it answers only a Host header
/// that names a loopback address, never a name).
fn devtools_targets(addr: SocketAddr) -> Option<Value> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let req = format!("GET /json/list HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).ok()?;
    // It may keep the connection open: read as far as Content-Length says.
    let mut answer = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = s.read(&mut buf).ok()?;
        answer.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&answer).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(usize::MAX);
            if body.len() >= len || n == 0 {
                return serde_json::from_str(body).ok();
            }
        }
        if n == 0 {
            return None;
        }
    }
}

/// The text of the table body `id` on the page.
fn table_text(id: &str) -> String {
    format!("document.getElementById({id:?}).innerText")
}

/// The status page run as an operator would, in headless Chromium: a
/// scripted scenario (a failure, a live lease, a waiting task) shows on
/// it, its filter narrows it, a retry clicked and confirmed with an
/// operator's token changes the task's state in the store, the same click
/// with a worker's token is refused and changes nothing, and the task's
/// own page shows its fence history and events. Screenshots are written
/// where the test's output says (and to `$BATON_KEEP_SCREENSHOTS`).
#[test]
fn an_operator_runs_the_fleet_from_the_status_page_in_a_real_browser() {
    let Some(browser) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let server = Server::start(&store, Some(&token_file(dir.path())));
    let a = server.addr;
    let post = |path: &str, token: &str, body: &str| {
        let (s, r) = http(a, "POST", path, Some(token), body).unwrap();
        assert_eq!(s, 200, "{path}: {r}");
        r
    };
    for t in ["etl-load", "etl-fetch", "etl-report"] {
        post(
            &format!("/v1/tasks/{t}/add"),
            WORKER,
            r#"{"node":{"queue":"etl","priority":0,"depends_on":[]}}"#,
        );
    }
    let g = post("/v1/tasks/etl-load/claim", WORKER, r#"{"owner":"w"}"#);
    // A step whose output is markup: the page shows it as text.
    post(
        "/v1/tasks/etl-load/checkpoint",
        WORKER,
        &format!(
            r#"{{"owner":"w","fence":{},"step":"extract","output":{{"html":"<img src=x onerror=window.pwned=1>"}}}}"#,
            g["fence"]
        ),
    );
    post(
        "/v1/tasks/etl-load/fail",
        WORKER,
        &format!(
            r#"{{"owner":"w","fence":{},"error":{{"message":"disk full on /data"}}}}"#,
            g["fence"]
        ),
    );
    post(
        "/v1/tasks/etl-fetch/claim",
        WORKER,
        r#"{"owner":"w-fetcher","ttl_ms":600000}"#,
    );

    let shots = std::env::var("BATON_KEEP_SCREENSHOTS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| dir.path().to_path_buf());
    std::fs::create_dir_all(&shots).unwrap();
    let mut b = Browser::open(browser, &dir.path().join("profile"));
    let page = format!("{}/", server.url());
    b.go(&page);
    // A server with tokens: the page asks for one.
    b.until(
        "the token form",
        "getComputedStyle(document.getElementById('auth')).display !== 'none'",
    );
    b.sign_in(OPERATOR);
    b.until(
        "the failure's error",
        &format!("{}.includes('disk full on /data')", table_text("failures")),
    );
    let failures = b.eval(&table_text("failures"));
    let failures = failures.as_str().unwrap();
    for want in ["etl-load", "FAILED", "retry", "finalize"] {
        assert!(failures.contains(want), "{want} not in {failures}");
    }
    let queues = b.eval(&table_text("queues"));
    let etl = queues
        .as_str()
        .unwrap()
        .lines()
        .find(|l| l.starts_with("etl"))
        .unwrap_or_else(|| panic!("no etl queue in {queues}"))
        .split('\t')
        .map(str::to_owned)
        .collect::<Vec<_>>();
    // queue, waiting (ready, retrying, blocked), held, succeeded, failed,
    // other, oldest waiting
    assert_eq!(
        &etl[1..9],
        ["1", "1", "0", "0", "1", "0", "1", "0"],
        "{etl:?}"
    );
    assert!(etl[9].ends_with("ago"), "{etl:?}");
    let leases = b.eval(&table_text("leases"));
    assert!(leases.as_str().unwrap().contains("w-fetcher"), "{leases}");
    assert_eq!(
        b.eval("document.querySelectorAll('#chart svg rect').length > 0"),
        Value::Bool(true),
        "the chart has bars for this minute's grants and failure"
    );
    b.screenshot(&shots.join("status-page.png"));

    // The search narrows every table.
    b.eval("const s = document.getElementById('search'); s.value = 'w-fetcher'; s.dispatchEvent(new Event('input')); true");
    b.until(
        "the filtered failures",
        &format!(
            "{}.includes('none matches the filter')",
            table_text("failures")
        ),
    );
    b.eval("const s2 = document.getElementById('search'); s2.value = ''; s2.dispatchEvent(new Event('input')); true");
    b.until(
        "the failures again",
        &format!("{}.includes('etl-load')", table_text("failures")),
    );

    // A worker's token: the retry is refused, and nothing changes.
    let click_retry = "(() => { const b = document.querySelector('#failures button[data-action=retry][data-task=etl-load]'); b.click(); return b.textContent; })()";
    b.eval(&format!(
        "sessionStorage.setItem('baton-token', {WORKER:?}); true"
    ));
    let asked = b.eval(click_retry);
    assert_eq!(
        asked.as_str(),
        Some("confirm retry etl-load?"),
        "a first click asks"
    );
    b.eval(click_retry);
    b.until(
        "the refusal of a worker's retry",
        "document.getElementById('notice').className === 'err'",
    );
    let notice = b.eval("document.getElementById('notice').textContent");
    assert!(notice.as_str().unwrap().contains("operator"), "{notice}");
    let (_, rec) = http(a, "GET", "/v1/tasks/etl-load", Some(OPERATOR), "").unwrap();
    assert_eq!(rec["state"], "FAILED", "a worker's click changed nothing");

    // An operator's token: retried, in the store, as the token's name.
    b.eval(&format!(
        "sessionStorage.setItem('baton-token', {OPERATOR:?}); true"
    ));
    // The worker's confirmed button stays, disabled, until the refresh
    // its refusal asked for draws a new one: wait for that one.
    b.until(
        "the retry button again",
        "!!document.querySelector('#failures button[data-action=retry][data-task=etl-load]:not(:disabled):not(.confirm)')",
    );
    b.eval(click_retry);
    b.eval(click_retry);
    b.until(
        "the retry's confirmation",
        "document.getElementById('notice').className === 'ok'",
    );
    let (_, rec) = http(a, "GET", "/v1/tasks/etl-load", Some(OPERATOR), "").unwrap();
    assert_eq!(
        (rec["state"].as_str(), rec["iteration"].as_u64()),
        (Some("REGISTERED"), Some(2)),
        "{rec}"
    );
    let (_, ev) = http(a, "GET", "/v1/tasks/etl-load/events", Some(OPERATOR), "").unwrap();
    let last = ev["items"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (last["kind"].as_str(), last["actor"]["id"].as_str()),
        (Some("REDISPATCHED"), Some("alice")),
        "{last}"
    );

    // The task's own page: its fence history and events.
    b.go(&format!("{page}#task=etl-load"));
    b.until(
        "the task's events",
        &format!("{}.includes('REDISPATCHED')", table_text("task-events")),
    );
    let fences = b.eval(&table_text("task-fences"));
    assert!(
        fences.as_str().unwrap().contains("CLAIMED") && fences.as_str().unwrap().contains("FAILED"),
        "{fences}"
    );
    let head = b.eval("document.getElementById('task-head').textContent");
    assert!(head.as_str().unwrap().starts_with("etl-load"), "{head}");
    let steps = b.eval(&table_text("task-checkpoints"));
    assert!(
        steps.as_str().unwrap().contains("extract")
            && steps
                .as_str()
                .unwrap()
                .contains("<img src=x onerror=window.pwned=1>"),
        "{steps}"
    );
    assert_eq!(
        b.eval(
            "document.querySelectorAll('#task-checkpoints img').length + (window.pwned ? 1 : 0)"
        ),
        serde_json::json!(0),
        "a step's output ran as markup"
    );
    b.screenshot(&shots.join("status-page-task.png"));
}

/// Why a task failed reads on the page as it printed: a traceback kept in
/// its error is preformatted text with its line breaks, folded to its last
/// line when long, never run as markup; a task that failed once and then
/// succeeded shows its error as an earlier attempt's.
#[test]
fn a_failures_traceback_reads_as_printed_on_the_page() {
    let Some(browser) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let server = Server::start(&store, None);
    let a = server.addr;
    let post = |path: &str, body: &str| {
        let (s, r) = http(a, "POST", path, None, body).unwrap();
        assert_eq!(s, 200, "{path}: {r}");
        r
    };
    let mut traceback = String::from("Traceback (most recent call last):\n");
    for i in 0..39 {
        traceback.push_str(&format!("  File \"job.py\", line {i}, in step_{i}\n"));
    }
    traceback.push_str("<script>window.pwned=1</script>\nKeyError: 'id'\n");
    post(
        "/v1/tasks/crash/add",
        r#"{"node":{"queue":"etl","priority":0,"depends_on":[]}}"#,
    );
    let g = post("/v1/tasks/crash/claim", r#"{"owner":"w"}"#);
    let error = serde_json::json!({"exit_code": 1, "stderr_tail": traceback});
    post(
        "/v1/tasks/crash/fail",
        &serde_json::json!({"owner": "w", "fence": g["fence"], "error": error}).to_string(),
    );
    post(
        "/v1/queues/again/policy",
        r#"{"retry":{"max_attempts":2,"backoff_ms":1},"operator":"alice"}"#,
    );
    post(
        "/v1/tasks/flaky/add",
        r#"{"node":{"queue":"again","priority":0,"depends_on":[]}}"#,
    );
    let g = post("/v1/tasks/flaky/claim", r#"{"owner":"w"}"#);
    let error =
        serde_json::json!({"exit_code": 2, "stderr_tail": "connection reset\nretrying later\n"});
    let r = post(
        "/v1/tasks/flaky/fail",
        &serde_json::json!({"owner": "w", "fence": g["fence"], "error": error}).to_string(),
    );
    assert_eq!(r["state"], "REGISTERED", "{r}");
    std::thread::sleep(Duration::from_millis(50));
    let g = post("/v1/tasks/flaky/claim", r#"{"owner":"w"}"#);
    let r = post(
        "/v1/tasks/flaky/complete",
        &format!(r#"{{"owner":"w","fence":{}}}"#, g["fence"]),
    );
    assert_eq!(r["state"], "SUCCEEDED", "{r}");

    let mut b = Browser::open(browser, &dir.path().join("profile"));
    let page = format!("{}/", server.url());
    b.go(&page);
    b.until(
        "the folded traceback",
        "!!document.querySelector('#failures details summary')",
    );
    let summary = b.eval("document.querySelector('#failures details summary').textContent");
    assert_eq!(
        summary.as_str(),
        Some("stderr_tail, 42 lines: KeyError: 'id'"),
        "{summary}"
    );
    let pre = b.eval("document.querySelector('#failures details pre').textContent");
    assert_eq!(
        pre.as_str(),
        Some(traceback.as_str()),
        "the text as printed"
    );
    let head = b.eval("document.querySelector('#failures div.error > div').textContent");
    assert_eq!(head.as_str(), Some(r#"{"exit_code":1}"#), "{head}");
    // Folded until opened; its lines are lines, not escaped JSON.
    assert_eq!(
        b.eval("document.querySelector('#failures details pre').checkVisibility()"),
        Value::Bool(false)
    );
    b.eval("document.querySelector('#failures details summary').click(); true");
    assert_eq!(
        b.eval("document.querySelector('#failures details pre').checkVisibility()"),
        Value::Bool(true)
    );
    // Opened, it stays open when the page refreshes (every 2 s).
    let before = b.eval("document.getElementById('meta').textContent");
    b.until(
        "a refresh",
        &format!("document.getElementById('meta').textContent !== {before}"),
    );
    assert_eq!(
        b.eval("document.querySelector('#failures details').open"),
        Value::Bool(true)
    );
    let shown = b.eval(&table_text("failures"));
    assert!(
        shown.as_str().unwrap().contains("line 38, in step_38\n"),
        "{shown}"
    );
    assert!(!shown.as_str().unwrap().contains("\\n"), "{shown}");
    assert_eq!(
        b.eval("(window.pwned ? 1 : 0) + document.querySelectorAll('#failures script').length"),
        serde_json::json!(0),
        "a traceback ran as markup"
    );
    let shots = std::env::var("BATON_KEEP_SCREENSHOTS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| dir.path().to_path_buf());
    std::fs::create_dir_all(&shots).unwrap();
    b.screenshot(&shots.join("status-page-traceback.png"));
    // The task that succeeded after a failure: its error is labelled.
    b.go(&format!("{page}#task=flaky"));
    b.until(
        "the earlier attempt's error",
        &format!("{}.includes('retrying later')", table_text("task-facts")),
    );
    let facts = b.eval(&table_text("task-facts"));
    let facts = facts.as_str().unwrap();
    assert!(facts.contains("from an earlier attempt"), "{facts}");
    assert!(
        facts.contains("connection reset\nretrying later"),
        "{facts}"
    );
    // A task that stands failed: its own error, unlabelled.
    b.go(&format!("{page}#task=crash"));
    b.until(
        "the failed task's error",
        &format!("{}.includes('KeyError')", table_text("task-facts")),
    );
    let facts = b.eval(&table_text("task-facts"));
    assert!(
        !facts.as_str().unwrap().contains("earlier attempt"),
        "{facts}"
    );
}

/// Retrying and blocked work is visible: a chain waiting behind a task
/// that failed for good is counted blocked at every depth, not waiting; a
/// task between attempts says which attempt failed, of how many, and when
/// the next starts; `/v1/status` and the page say the same.
#[test]
fn retrying_and_blocked_work_is_visible_on_the_page() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    // No sweeper: its beat would tick the schedule below into a ready task.
    let server = Server::start_with(&store, &["--sweep-every", "off"]);
    let a = server.addr;
    let post = |path: &str, body: &str| {
        let (s, r) = http(a, "POST", path, None, body).unwrap();
        assert_eq!(s, 200, "{path}: {r}");
        r
    };
    post(
        "/v1/queues/again/policy",
        r#"{"retry":{"max_attempts":3,"backoff_ms":3600000},"operator":"alice"}"#,
    );
    post(
        "/v1/graph",
        r#"[{"task": "a", "queue": "chain"}, {"task": "b", "queue": "chain", "after": ["a"]},
            {"task": "c", "queue": "chain", "after": ["b"]}, {"task": "d", "queue": "chain", "after": ["c"]},
            {"task": "r", "queue": "again"}, {"task": "go", "queue": "ok"}, {"task": "later", "queue": "ok", "after": ["go"]}]"#,
    );
    for (task, state) in [("a", "FAILED"), ("r", "REGISTERED")] {
        let g = post(&format!("/v1/tasks/{task}/claim"), r#"{"owner":"w"}"#);
        let r = post(
            &format!("/v1/tasks/{task}/fail"),
            &format!(
                r#"{{"owner":"w","fence":{},"error":{{"exit_code":1}}}}"#,
                g["fence"]
            ),
        );
        assert_eq!(r["state"], state, "{r}");
    }
    let (s, status) = http(a, "GET", "/v1/status", None, "").unwrap();
    assert_eq!(s, 200, "{status}");
    assert_eq!(
        status["standing"],
        serde_json::json!({"READY": 1, "WAITING": 1, "RETRYING": 1, "BLOCKED": 3, "PAUSED": 0}),
        "{status}"
    );
    assert_eq!(
        status["queues"]["chain"]["standing"],
        serde_json::json!({"READY": 0, "WAITING": 0, "RETRYING": 0, "BLOCKED": 3, "PAUSED": 0})
    );
    let failure = status["failures"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["task"] == "r")
        .unwrap_or_else(|| panic!("{status}"));
    assert_eq!(
        (
            &failure["retry"]["attempt"],
            &failure["retry"]["max_attempts"]
        ),
        (&serde_json::json!(1), &serde_json::json!(3)),
        "{failure}"
    );
    assert!(failure["retry"]["next_at"].is_string(), "{failure}");

    // The settings the fleet runs by: a schedule, a key's limit.
    post(
        "/v1/schedules/nightly",
        r#"{"every_ms":3600000,"template":{"queue":"cron","priority":0,"depends_on":[]}}"#,
    );
    post("/v1/limits/repo", r#"{"limit":2,"operator":"alice"}"#);
    let (_, status) = http(a, "GET", "/v1/status", None, "").unwrap();
    assert_eq!(status["settings"]["keys"][0]["key"], "repo", "{status}");
    assert_eq!(
        status["settings"]["queues"][0]["queue"], "again",
        "{status}"
    );
    assert_eq!(
        status["settings"]["schedules"][0]["schedule"], "schedule:nightly",
        "{status}"
    );

    let Some(browser) = chromium() else { return };
    let mut b = Browser::open(browser, &dir.path().join("profile"));
    b.go(&format!("{}/", server.url()));
    b.until(
        "the blocked count",
        "!!document.querySelector('.count[data-standing=BLOCKED]')",
    );
    for (standing, n) in [("READY", 1), ("RETRYING", 1), ("BLOCKED", 3)] {
        let shown = b.eval(&format!(
            "document.querySelector('.count[data-standing={standing}] b').textContent"
        ));
        assert_eq!(shown.as_str(), Some(n.to_string().as_str()), "{standing}");
    }
    let queues = b.eval(&table_text("queues"));
    let chain: Vec<&str> = queues
        .as_str()
        .unwrap()
        .lines()
        .find(|l| l.starts_with("chain"))
        .unwrap_or_else(|| panic!("{queues}"))
        .split('\t')
        .collect();
    // waiting 3: ready 0, retrying 0, blocked 3; held 0, succeeded 0, failed 1
    assert_eq!(
        &chain[1..8],
        ["3", "0", "0", "3", "0", "0", "1"],
        "{chain:?}"
    );
    let failures = b.eval(&table_text("failures"));
    let row = failures
        .as_str()
        .unwrap()
        .lines()
        .find(|l| l.starts_with("r\t"))
        .unwrap_or_else(|| panic!("{failures}"))
        .to_owned();
    // The policy's wait is an hour, jittered.
    assert!(row.contains("attempt 1 of 3, next try in "), "{row}");
    let minutes: u64 = row
        .split("next try in ")
        .nth(1)
        .and_then(|t| t.split('m').next())
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("{row}"));
    assert!((1..=60).contains(&minutes), "{row}");
    assert!(
        failures
            .as_str()
            .unwrap()
            .contains("from an earlier attempt"),
        "{failures}"
    );
    // Schedules with their next run, key limits, queue policies.
    let schedules = b.eval(&table_text("schedules"));
    let schedules = schedules.as_str().unwrap();
    assert!(
        schedules.contains("schedule:nightly\tevery 1h00m\tcron") && schedules.contains("(in 59m"),
        "{schedules}"
    );
    let keys = b.eval(&table_text("keys"));
    assert!(
        keys.as_str().unwrap().starts_with("repo\t2\t0\t0"),
        "{keys}"
    );
    let policies = b.eval(&table_text("policies"));
    assert!(
        policies
            .as_str()
            .unwrap()
            .starts_with("again\t3 attempts, backoff 1h00m x2 up to 1h00m"),
        "{policies}"
    );
}

/// A cancel of a live lease clicked on the page is marked until the lease
/// ends: the notice says the cancel is requested (not just "now CLAIMED"),
/// the lease's row and the task's page say who asked, the row offers no
/// second cancel, and the holder's release ends the task CANCELLED.
#[test]
fn a_requested_cancel_is_marked_on_the_page_until_the_lease_ends() {
    let Some(browser) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let server = Server::start(&store, None);
    let a = server.addr;
    let (s, g) = http(
        a,
        "POST",
        "/v1/tasks/long/claim",
        None,
        r#"{"owner":"w","ttl_ms":600000}"#,
    )
    .unwrap();
    assert_eq!(s, 200, "{g}");
    let mut b = Browser::open(browser, &dir.path().join("profile"));
    let page = format!("{}/", server.url());
    b.go(&page);
    let click = "(() => { const b = document.querySelector('#leases button[data-action=cancel][data-task=long]'); b.click(); return b.textContent; })()";
    b.until(
        "the lease's cancel",
        "!!document.querySelector('#leases button[data-action=cancel][data-task=long]')",
    );
    b.eval("document.getElementById('operator').value = 'alice'; true");
    assert_eq!(b.eval(click).as_str(), Some("confirm cancel long?"));
    b.eval(click);
    b.until(
        "the cancel's notice",
        "document.getElementById('notice').className === 'ok'",
    );
    let notice = b.eval("document.getElementById('notice').textContent");
    assert!(
        notice.as_str().unwrap().contains("cancel requested")
            && notice.as_str().unwrap().contains("now CLAIMED"),
        "{notice}"
    );
    b.until(
        "the marked lease",
        &format!(
            "{}.includes('CLAIMED, cancel requested')",
            table_text("leases")
        ),
    );
    let leases = b.eval(&table_text("leases"));
    assert!(
        leases
            .as_str()
            .unwrap()
            .contains("cancel requested by operator:alice"),
        "{leases}"
    );
    assert_eq!(
        b.eval("document.querySelectorAll('#leases button[data-action=cancel]').length"),
        serde_json::json!(0),
        "no second cancel"
    );
    b.go(&format!("{page}#task=long"));
    b.until(
        "the task's cancel",
        &format!(
            "{}.includes('cancel requested by operator:alice')",
            table_text("task-facts")
        ),
    );
    // The holder gives it back: CANCELLED, and nothing is marked live.
    let (s, r) = http(
        a,
        "POST",
        "/v1/tasks/long/release",
        None,
        &format!(r#"{{"owner":"w","fence":{}}}"#, g["fence"]),
    )
    .unwrap();
    assert_eq!((s, r["state"].as_str()), (200, Some("CANCELLED")), "{r}");
    b.until(
        "the cancelled task",
        &format!("document.getElementById('task-head').textContent.includes('CANCELLED') && !{}.includes('cancel requested')", table_text("task-facts")),
    );
}

/// The page's rough edges, as an operator on a server with tokens meets
/// them: a task page opened directly asks for a token, and once given one
/// the notice goes and the page says when it was updated (in UTC, as its
/// tables); the "Operator" box, which such a server ignores, is replaced by
/// what is true; a long id and a time stay on one line; the chart has axes.
#[test]
fn the_page_reads_right_on_a_server_with_tokens() {
    let Some(browser) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let server = Server::start(&store, Some(&token_file(dir.path())));
    let a = server.addr;
    let long = format!("ingest-{}", "0123456789abcdef".repeat(7));
    let (s, r) = http(
        a,
        "POST",
        &format!("/v1/tasks/{long}/claim"),
        Some(WORKER),
        r#"{"owner":"w","ttl_ms":600000}"#,
    )
    .unwrap();
    assert_eq!(s, 200, "{r}");
    let mut b = Browser::open(browser, &dir.path().join("profile"));
    let page = format!("{}/", server.url());
    b.go(&format!("{page}#task={long}"));
    b.until(
        "the token form",
        "getComputedStyle(document.getElementById('auth')).display !== 'none'",
    );
    let notice = b.eval("document.getElementById('notice').textContent");
    assert!(
        notice.as_str().unwrap().contains("needs a bearer token"),
        "{notice}"
    );
    b.eval(&format!(
        "document.getElementById('token').value = {OPERATOR:?}; document.getElementById('auth').requestSubmit(); true"
    ));
    b.until(
        "the task, read with the token",
        &format!(
            "document.getElementById('task-head').textContent.startsWith({:?})",
            format!("{long} \u{2014} CLAIMED")
        ),
    );
    b.until(
        "the notice gone",
        "getComputedStyle(document.getElementById('auth')).display === 'none' && document.getElementById('notice').textContent === ''",
    );
    b.until(
        "when it was updated, in UTC",
        "/^updated \\d\\d:\\d\\d:\\d\\d UTC$/.test(document.getElementById('meta').textContent)",
    );
    // The server records actions as the token's name: no Operator box.
    assert_eq!(
        b.eval("[document.getElementById('operator-box').hidden, document.getElementById('as-token').hidden]"),
        serde_json::json!([true, false])
    );
    // A time in the task's events stays on one line.
    b.until(
        "the task's events",
        "document.querySelectorAll('#task-events td.t').length > 0",
    );
    assert_eq!(
        b.eval("[...document.querySelectorAll('#task-events td.t')].every(c => c.getClientRects().length === 1 && c.offsetHeight < 30)"),
        Value::Bool(true)
    );
    // The list: the long id is one line (the whole id in its title), the
    // chart has its axes.
    b.go(&page);
    b.until("the lease", "!!document.querySelector('#leases a.task')");
    assert_eq!(
        b.eval("(() => { const l = document.querySelector('#leases a.task'); return [l.offsetHeight < 30, l.title]; })()"),
        serde_json::json!([true, long])
    );
    b.until(
        "the chart",
        "document.querySelectorAll('#chart svg text.axis').length > 0",
    );
    let axis =
        b.eval("[...document.querySelectorAll('#chart svg text.axis')].map(t => t.textContent)");
    let axis: Vec<&str> = axis
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for want in ["60 min ago", "30 min ago", "now", "1 per minute"] {
        assert!(axis.contains(&want), "{want} not in {axis:?}");
    }
}

/// The refusals the status page lists are kept in the store: a refused
/// claim is on the page after the server is stopped and another started
/// on the same store; a worker's token cannot write the log itself.
#[test]
fn refusals_on_the_status_page_outlive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let tokens = token_file(dir.path());
    let mut server = Server::start(&store, Some(&tokens));
    let a = server.addr;
    let (s, _) = http(
        a,
        "POST",
        "/v1/tasks/kept/claim",
        Some(WORKER),
        r#"{"owner":"w","ttl_ms":600000}"#,
    )
    .unwrap();
    assert_eq!(s, 200);
    let (s, r) = http(
        a,
        "POST",
        "/v1/tasks/kept/claim",
        Some(WORKER),
        r#"{"owner":"w-other"}"#,
    )
    .unwrap();
    assert_eq!((s, r["refused"].as_str()), (409, Some("held")), "{r}");
    // The sweeper's beat (1 s) writes it; wait for the store to hold it.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, rec) = http(a, "GET", "/v1/tasks/refusals:recent", Some(OPERATOR), "").unwrap();
        if rec["refusal_log"].as_array().is_some_and(|l| !l.is_empty()) {
            break;
        }
        assert!(Instant::now() < deadline, "never written: {rec}");
        std::thread::sleep(Duration::from_millis(100));
    }
    server.signal("-TERM");
    server.wait(Duration::from_secs(20));
    let server = Server::start(&store, Some(&tokens));
    let (s, status) = http(server.addr, "GET", "/v1/status", Some(OPERATOR), "").unwrap();
    assert_eq!(s, 200, "{status}");
    let first = &status["refusals"][0];
    assert_eq!(
        (
            first["task"].as_str(),
            first["request"].as_str(),
            first["refusal"]["refused"].as_str()
        ),
        (Some("kept"), Some("claim"), Some("held")),
        "{status}"
    );
    // Nobody stands in for the log: an add of its id is refused.
    let (s, r) = http(
        server.addr,
        "POST",
        "/v1/tasks/refusals:recent/add",
        Some(OPERATOR),
        r#"{"node":{"queue":"q","priority":0,"depends_on":[]}}"#,
    )
    .unwrap();
    assert!(s == 400 || s == 409, "{s}: {r}");
    let (_, rec) = http(
        server.addr,
        "GET",
        "/v1/tasks/refusals:recent",
        Some(OPERATOR),
        "",
    )
    .unwrap();
    assert!(rec["node"].is_null(), "still the log: {rec}");
}

/// A worker cannot set a schedule; a schedule naming a missing task is
/// refused when set; one whose period is taken by a task defined
/// otherwise fails alone: the server's beat keeps making the tasks of the
/// schedules after it, and `/v1/status` says which one fails and why.
#[test]
fn one_failing_schedule_stops_no_other_and_the_status_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let tokens = token_file(dir.path()).display().to_string();
    let server = Server::start_with(&store, &["--tokens", &tokens, "--sweep-every", "200ms"]);
    let a = server.addr;
    let every = r#"{"every_ms":1000,"template":{"queue":"q","priority":0,"depends_on":[]}}"#;
    let (s, r) = http(a, "POST", "/v1/schedules/0000", Some(WORKER), every).unwrap();
    assert_eq!(s, 403, "a worker sets no schedule: {r}");
    let (s, r) = http(
        a,
        "POST",
        "/v1/schedules/0000",
        Some(OPERATOR),
        r#"{"every_ms":1000,"template":{"queue":"q","priority":0,"depends_on":["ghost"]}}"#,
    )
    .unwrap();
    assert_eq!(s, 400, "{r}");
    assert!(r.to_string().contains("depends_on"), "{r}");
    let (s, r) = http(a, "POST", "/v1/schedules/0000", Some(OPERATOR), every).unwrap();
    assert_eq!(s, 200, "{r}");
    let created = r["since"].as_str().unwrap().to_owned();
    let (s, r) = http(a, "POST", "/v1/schedules/zzzz", Some(OPERATOR), every).unwrap();
    assert_eq!(s, 200, "{r}");
    // A worker adds 0000's next periods' tasks with its own definition.
    let start = baton_core::Timestamp::parse_rfc3339(&created).unwrap();
    for k in 0..40 {
        let id = format!("0000@{}", start.plus_ms(1000 * k));
        let (s, r) = http(
            a,
            "POST",
            &format!("/v1/tasks/{id}/add"),
            Some(WORKER),
            r#"{"node":{"queue":"other","priority":9,"depends_on":[]}}"#,
        )
        .unwrap();
        assert_eq!(s, 200, "{id}: {r}");
    }
    // The beat keeps making zzzz's tasks, and the status names 0000's failure.
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, st) = http(a, "GET", "/v1/status", Some(OPERATOR), "").unwrap();
        let (_, list) = http(a, "GET", "/v1/schedules", Some(OPERATOR), "").unwrap();
        let failing = st["schedules_failing"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if failing.len() == 1 && st["counts"]["REGISTERED"].as_u64().unwrap_or(0) >= 42 {
            assert_eq!(failing[0]["schedule"], "schedule:0000", "{st}");
            assert!(
                failing[0]["error"].as_str().unwrap().contains("refused"),
                "{st}"
            );
            // Listed as `schedule list` lists it: the failure beside its schedule.
            let listed = list["items"].as_array().cloned().unwrap_or_default();
            assert!(
                listed.iter().any(|i| i["schedule"] == "schedule:0000"
                    && i["failure"]["error"]
                        .as_str()
                        .is_some_and(|e| e.contains("refused"))),
                "{list}"
            );
            assert_eq!(st["sweeper"]["error"], Value::Null, "{st}");
            break;
        }
        assert!(Instant::now() < until, "status {st}\nschedules {list}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // A worker's own scheduler on a server without a beat: its tick makes
    // the later schedule's task though it may not keep the earlier one's
    // failure (that is an operator's or the server's).
    let dir2 = tempfile::tempdir().unwrap();
    let store2 = format!("sqlite:{}", dir2.path().join("s.db").display());
    let quiet = Server::start_with(&store2, &["--tokens", &tokens, "--sweep-every", "off"]);
    let b = quiet.addr;
    let (_, r) = http(b, "POST", "/v1/schedules/0000", Some(OPERATOR), every).unwrap();
    let start = baton_core::Timestamp::parse_rfc3339(r["since"].as_str().unwrap()).unwrap();
    http(b, "POST", "/v1/schedules/zzzz", Some(OPERATOR), every).unwrap();
    let (s, r) = http(
        b,
        "POST",
        &format!("/v1/tasks/0000@{start}/add"),
        Some(WORKER),
        r#"{"node":{"queue":"other","priority":9,"depends_on":[]}}"#,
    )
    .unwrap();
    assert_eq!(s, 200, "{r}");
    let (s, made) = http(b, "POST", "/v1/scheduler/tick", Some(WORKER), "").unwrap();
    assert_eq!(
        s, 200,
        "a worker's tick is not stopped by another schedule: {made}"
    );
    assert!(made.to_string().contains("zzzz@"), "{made}");
}

/// Serves `html` to every request on a loopback port of its own (another
/// origin than the server's) until the test ends.
fn serve_page(html: String) -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut s in l.incoming().map_while(Result::ok) {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{html}",
                    html.len()
                )
                .as_bytes(),
            );
        }
    });
    addr
}

/// A web page elsewhere gets nothing from a server without tokens: in a
/// real browser, a script's `fetch` and a plain HTML form (its body made
/// to parse as JSON) try to claim and to cancel a live lease; a rebound
/// name asks for the status. Nothing is granted or cancelled, and the
/// page cannot be framed.
#[test]
fn a_page_from_another_origin_gets_no_powers_over_a_server_without_tokens() {
    let Some(browser) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let server = Server::start(&store, None);
    let base = server.url();
    let (s, g) = http(
        server.addr,
        "POST",
        "/v1/tasks/live/claim",
        None,
        r#"{"owner":"w","ttl_ms":600000}"#,
    )
    .unwrap();
    assert_eq!(s, 200, "{g}");
    let attack = format!(
        r#"<!doctype html><html><body>
<iframe name="sink"></iframe>
<form id="f" method="POST" action="{base}/v1/tasks/by-form/claim" enctype="text/plain" target="sink">
<input name='{{"ttl_ms":600000,"owner":"ev' value='il"}}'></form>
<script>
fetch("{base}/v1/tasks/by-script/claim", {{method: "POST", mode: "no-cors",
  headers: {{"Content-Type": "text/plain"}}, body: '{{"owner":"evil","ttl_ms":600000}}'}});
fetch("{base}/v1/tasks/live/cancel", {{method: "POST", mode: "no-cors",
  headers: {{"Content-Type": "text/plain"}}, body: '{{"by":{{"role":"operator","id":"evil"}}}}'}});
setTimeout(() => document.getElementById("f").submit(), 500);
</script></body></html>"#
    );
    let page = serve_page(attack);
    // The browser is given 20 s, and stopped then whatever it is doing.
    let mut chromium = Command::new(browser)
        .args(CHROMIUM_FLAGS)
        .arg("--virtual-time-budget=3000")
        .arg(format!(
            "--user-data-dir={}",
            dir.path().join("profile-attack").display()
        ))
        .args(["--dump-dom", &format!("http://{page}/")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    while chromium.try_wait().unwrap().is_none() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = chromium.kill();
    let _ = chromium.wait();
    for t in ["by-form", "by-script"] {
        let (s, r) = http(server.addr, "GET", &format!("/v1/tasks/{t}"), None, "").unwrap();
        assert_eq!(s, 404, "a page elsewhere claimed {t}: {r}");
    }
    let (_, r) = http(server.addr, "GET", "/v1/tasks/live", None, "").unwrap();
    assert_eq!(r["state"], "CLAIMED", "{r}");
    assert!(
        r["cancel_requested"].is_null(),
        "a page elsewhere cancelled: {r}"
    );
    // A rebound name (the attacker's own, resolved to 127.0.0.1) reads nothing.
    let mut s = TcpStream::connect(server.addr).unwrap();
    s.write_all(b"GET /v1/status HTTP/1.1\r\nHost: evil.example:7440\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    assert!(!out.contains("\"counts\""), "{out}");
    // The page says it may not be framed.
    let mut s = TcpStream::connect(server.addr).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert!(
        out.contains("frame-ancestors 'none'"),
        "{}",
        &out[..out.len().min(600)]
    );
}

/// A worker kept waiting for work fails closed when its server is killed
/// mid-wait: `run --next --keep-waiting` exits unavailable long before its
/// wait would end and never starts its command; a task added once a server
/// is back is granted to a new wait, not to the dead one.
#[test]
fn a_kept_wait_fails_closed_when_its_server_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let mut server = Server::start(&store, None);
    let url = format!("http://{}", server.addr);
    let marker = dir.path().join("ran");
    let mut worker = Command::new(BIN)
        .args(["--store", &url, "run", "--next", "--owner", "w"])
        .args(["--queue", "idle", "--wait", "10m", "--keep-waiting", "--"])
        .arg("touch")
        .arg(&marker)
        .env_remove("BATON_STORE")
        .env_remove("BATON_TOKEN")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        worker.try_wait().unwrap().is_none(),
        "the worker stopped waiting on an empty queue"
    );
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let killed = Instant::now();
    let status = loop {
        if let Some(s) = worker.try_wait().unwrap() {
            break s;
        }
        if killed.elapsed() > Duration::from_secs(60) {
            let _ = worker.kill();
            panic!("the worker went on waiting with its server gone");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    worker
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    // `run`'s own statuses are 200 and up: 203, unavailable, nothing ran.
    assert_eq!(status.code(), Some(203), "exit unavailable: {err}");
    assert!(!marker.exists(), "the command ran without a grant");
    // A server on the same store again: the task added goes to a new wait.
    let server = Server::start(&store, None);
    let url = format!("http://{}", server.addr);
    let (code, out) = baton(&url, None, &["add", "job", "--queue", "idle"]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = baton(
        &url,
        None,
        &[
            "next",
            "--owner",
            "w",
            "--queue",
            "idle",
            "--wait",
            "5s",
            "--keep-waiting",
        ],
    );
    assert_eq!((code, out["task"].as_str()), (0, Some("job")), "{out}");
}

/// A server on a new SQLite store in `dir` with the test tokens, 8
/// connections (so 2 blocking queries a token) and a 1 s `--max-wait`,
/// and `extra` arguments.
fn capped_server(dir: &Path, extra: &[&str]) -> Server {
    let store = format!("sqlite:{}", dir.join("s.db").display());
    let tokens = token_file(dir).display().to_string();
    let mut args = vec![
        "--tokens",
        &tokens,
        "--max-connections",
        "8",
        "--max-wait",
        "1s",
    ];
    args.extend_from_slice(extra);
    Server::start_with(&store, &args)
}

/// A worker waiting for work through the task API holds no more than a
/// blocking query does: a kept wait of an hour is answered at
/// `--max-wait` (the worker asks again), and one token's waiting `next`s
/// are capped at a quarter of the connection limit (429 at once past it,
/// holding nothing) while another token's still wait.
#[test]
fn a_waiting_next_is_a_blocking_query_under_its_caps() {
    let dir = tempfile::tempdir().unwrap();
    let server = capped_server(dir.path(), &[]);
    let addr = server.addr;
    let idle = move |token: &'static str, owner: &str, wait: &str| {
        let body = format!(r#"{{"owner": "{owner}", "queues": ["idle"]}}"#);
        let path = format!("/v1/next?wait={wait}&keep_waiting=true");
        http(addr, "POST", &path, Some(token), &body).unwrap()
    };
    let t = Instant::now();
    let (st, body) = idle(WORKER, "w", "1h");
    let held = t.elapsed();
    assert_eq!(
        (st, body["refused"].as_str()),
        (409, Some("drained")),
        "{body}"
    );
    assert!(
        held >= Duration::from_millis(900) && held < Duration::from_secs(10),
        "a kept wait of an hour held its slot {held:?}, not --max-wait"
    );
    // Two of one token wait at once (8 connections / 4); a third is
    // refused at once; another token's is admitted.
    let waits: Vec<_> = (0..2)
        .map(|_| std::thread::spawn(move || idle(WORKER, "w", "3s")))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let (st, body) = idle(WORKER, "w", "3s");
    assert_eq!(st, 429, "{body}");
    let (st, body) = idle(WORKER2, "ci2", "200ms");
    assert_eq!(st, 409, "another token waits: {body}");
    for w in waits {
        let (st, body) = w.join().unwrap();
        assert_eq!(st, 409, "{body}");
    }
    // Their places given back, the token may wait again; and a next that
    // does not wait is never counted.
    let (st, body) = idle(WORKER, "w", "100ms");
    assert_eq!(st, 409, "{body}");
    let (st, body) = http(
        addr,
        "POST",
        "/v1/next",
        Some(WORKER),
        r#"{"owner": "w", "queues": ["idle"]}"#,
    )
    .unwrap();
    assert_eq!(st, 409, "{body}");
}

/// A worker's token cannot hold the server's slots: a body trickled a
/// byte at a time after valid headers is cut at `--read-timeout` for the
/// whole body (408), one token's blocking queries are capped at a
/// quarter of the connection limit (429 past it) while another token's
/// still wait, and a wait of an hour holds its slot `--max-wait` alone.
#[test]
fn a_trickled_body_or_many_waits_hold_no_slots() {
    let dir = tempfile::tempdir().unwrap();
    let server = capped_server(dir.path(), &["--read-timeout", "1s"]);
    let addr = server.addr;
    // An hour's wait is answered (nothing after the cursor) at the cap.
    let t = Instant::now();
    let (st, body) = http(
        addr,
        "GET",
        "/v1/events?after=999999&wait=1h",
        Some(WORKER),
        "",
    )
    .unwrap();
    assert_eq!(
        (st, &body["items"]),
        (200, &serde_json::json!([])),
        "{body}"
    );
    let held = t.elapsed();
    assert!(
        held >= Duration::from_millis(900) && held < Duration::from_secs(10),
        "an hour's wait held its slot {held:?}, not --max-wait"
    );
    // A body trickled a byte every 150 ms: each byte comes well within the
    // read timeout, the whole body never does.
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(
        format!(
            "POST /v1/tasks/slow/claim HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {WORKER}\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let started = Instant::now();
    let mut writer = s.try_clone().unwrap();
    let trickle = std::thread::spawn(move || {
        for _ in 0..60 {
            if writer.write_all(b" ").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(150));
        }
    });
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    let took = started.elapsed();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(
        took < Duration::from_secs(4),
        "the trickle held its slot {took:?}"
    );
    drop(s);
    trickle.join().unwrap();
    // Blocking queries: two of one token at once (8 connections / 4), a
    // third refused at once, another token's admitted.
    let waits: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(move || {
                http(
                    addr,
                    "GET",
                    "/v1/events?after=999999&wait=3s",
                    Some(WORKER),
                    "",
                )
                .unwrap()
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    let (st, body) = http(
        addr,
        "GET",
        "/v1/events?after=999999&wait=3s",
        Some(WORKER),
        "",
    )
    .unwrap();
    assert_eq!(st, 429, "{body}");
    assert!(t.elapsed() < Duration::from_secs(1));
    let (st, body) = http(
        addr,
        "GET",
        "/v1/events?after=999999&wait=1s",
        Some(WORKER2),
        "",
    )
    .unwrap();
    assert_eq!(st, 200, "another token waits: {body}");
    for w in waits {
        let (st, body) = w.join().unwrap();
        assert_eq!(st, 200, "{body}");
    }
    // Once they ended, the token may wait again.
    let (st, body) = http(
        addr,
        "GET",
        "/v1/events?after=999999&wait=100ms",
        Some(WORKER),
        "",
    )
    .unwrap();
    assert_eq!(st, 200, "{body}");
}

/// A step through the task API: recorded for the holder's token only,
/// acknowledged when repeated, never overwritten, refused from a
/// superseded attempt; its spawned tasks added in its commit; a value
/// that names a file (`@...`) is a value, never a file the server reads.
#[test]
fn a_checkpoint_through_the_task_api_is_the_holders_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let tokens = token_file(dir.path()).display().to_string();
    let server = Server::start_with(&store, &["--tokens", &tokens, "--sweep-every", "off"]);
    let (a, url) = (server.addr, server.url());
    let (code, g) = baton(
        &url,
        Some(WORKER),
        &["claim", "job", "--owner", "w", "--ttl", "2s"],
    );
    assert_eq!(code, 0, "{g}");
    let f = g["fence"].as_u64().unwrap();
    let step = |token: &str, body: String| {
        http(a, "POST", "/v1/tasks/job/checkpoint", Some(token), &body).unwrap()
    };
    let body = format!(
        r#"{{"owner": "w", "fence": {f}, "step": "fetch", "output": {{"rows": 3}}, "spawn": [{{"task": "kid", "queue": "etl"}}]}}"#
    );
    // Another worker's token may not act as the holder.
    let (s, r) = step(WORKER2, body.clone());
    assert_eq!(
        (s, r["error"]["kind"].as_str()),
        (403, Some("not_permitted")),
        "{r}"
    );
    let (s, r) = step(WORKER, body.clone());
    assert_eq!(s, 200, "{r}");
    assert_eq!(
        r["checkpoints"][0]["output"],
        serde_json::json!({"rows": 3}),
        "{r}"
    );
    assert_eq!(
        r["checkpoints"][0]["spawned"],
        serde_json::json!(["kid"]),
        "{r}"
    );
    let (s, r) = step(WORKER, body);
    assert_eq!((s, r["idempotent"].as_bool()), (200, Some(true)), "{r}");
    let (s, r) = http(a, "GET", "/v1/tasks/kid", Some(WORKER), "").unwrap();
    assert_eq!((s, r["node"]["queue"].as_str()), (200, Some("etl")), "{r}");
    let (s, r) = step(
        WORKER,
        format!(r#"{{"owner": "w", "fence": {f}, "step": "fetch", "output": {{"rows": 4}}}}"#),
    );
    assert_eq!(
        (s, r["refused"].as_str(), r["step"].as_str()),
        (409, Some("checkpoint_conflict"), Some("fetch")),
        "{r}"
    );
    let (s, r) = step(
        WORKER,
        format!(r#"{{"owner": "w", "fence": {f}, "step": "read", "output": "@/etc/passwd"}}"#),
    );
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["checkpoints"][1]["output"], "@/etc/passwd", "{r}");
    let (s, r) = step(
        WORKER,
        format!(r#"{{"owner": "w", "fence": {f}, "step": "x", "output": 1, "colour": "red"}}"#),
    );
    assert_eq!(
        (s, r["error"]["field"].as_str()),
        (400, Some("colour")),
        "{r}"
    );
    // The lease runs out and another attempt is granted: the first
    // attempt's next step is refused, and the grant carries both steps.
    std::thread::sleep(Duration::from_millis(2100));
    let (code, g2) = baton(&url, Some(WORKER), &["claim", "job", "--owner", "w-2"]);
    assert_eq!(code, 0, "{g2}");
    assert_eq!(g2["checkpoints"].as_array().map(Vec::len), Some(2), "{g2}");
    let (s, r) = step(
        WORKER,
        format!(r#"{{"owner": "w", "fence": {f}, "step": "late", "output": 1}}"#),
    );
    assert_eq!(
        (s, r["refused"].as_str()),
        (409, Some("stale_fence")),
        "{r}"
    );
}

/// `POST /v1/next` with a count: the grants of one commit, as a list; a
/// count out of bounds names the field; another's owner is not admitted.
#[test]
fn next_with_a_count_answers_a_list_of_grants() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let tokens = token_file(dir.path()).display().to_string();
    let server = Server::start_with(&store, &["--tokens", &tokens, "--sweep-every", "off"]);
    let a = server.addr;
    let graph = r#"[{"task": "b1", "queue": "batch"}, {"task": "b2", "queue": "batch", "priority": 3}, {"task": "b3", "queue": "batch"}]"#;
    let (s, r) = http(a, "POST", "/v1/graph", Some(WORKER), graph).unwrap();
    assert_eq!(s, 200, "{r}");
    let (s, r) = http(
        a,
        "POST",
        "/v1/next",
        Some(WORKER),
        r#"{"owner": "ci2", "queues": ["batch"], "count": 2}"#,
    )
    .unwrap();
    assert_eq!(
        (s, r["error"]["kind"].as_str()),
        (403, Some("not_permitted")),
        "{r}"
    );
    let (s, r) = http(
        a,
        "POST",
        "/v1/next",
        Some(WORKER),
        r#"{"owner": "w", "queues": ["batch"], "count": 0}"#,
    )
    .unwrap();
    assert_eq!(
        (s, r["error"]["field"].as_str()),
        (400, Some("count")),
        "{r}"
    );
    let (s, r) = http(
        a,
        "POST",
        "/v1/next",
        Some(WORKER),
        r#"{"owner": "w", "queues": ["batch"], "count": 5}"#,
    )
    .unwrap();
    assert_eq!(s, 200, "{r}");
    let tasks: Vec<&str> = r["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["task"].as_str().unwrap())
        .collect();
    assert_eq!(tasks, ["b2", "b1", "b3"], "{r}");
    // Reported in one call: each on its own fence, a stale one refused.
    let items = r["items"].as_array().unwrap().clone();
    let report = |fence_of_last: u64| {
        let reports: Vec<serde_json::Value> = items
            .iter()
            .enumerate()
            .map(|(i, g)| {
                serde_json::json!({
                    "task": g["task"], "owner": "w", "outcome": "complete",
                    "fence": if i == 2 { serde_json::json!(fence_of_last) } else { g["fence"].clone() },
                })
            })
            .collect();
        serde_json::json!({ "reports": reports }).to_string()
    };
    let (s, r2) = http(a, "POST", "/v1/reports", Some(WORKER2), &report(1)).unwrap();
    assert_eq!(
        (s, r2["error"]["kind"].as_str()),
        (403, Some("not_permitted")),
        "{r2}"
    );
    let (s, r2) = http(a, "POST", "/v1/reports", Some(WORKER), &report(1)).unwrap();
    assert_eq!(s, 409, "{r2}");
    let answers: Vec<&str> = r2["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["state"].as_str().or(x["refused"].as_str()).unwrap())
        .collect();
    assert_eq!(answers, ["SUCCEEDED", "SUCCEEDED", "stale_fence"], "{r2}");
    let (s, r) = http(
        a,
        "POST",
        "/v1/next",
        Some(WORKER),
        r#"{"owner": "w", "queues": ["batch"], "count": 5}"#,
    )
    .unwrap();
    assert_eq!((s, r["refused"].as_str()), (409, Some("none_ready")), "{r}");
}

/// A queue paused and resumed from the page, on a server with tokens: a
/// worker's token clicking pause is refused and the queue runs on; an
/// operator's confirmed click pauses it (the queue's row and its policy
/// say since when, a `next` on it takes nothing while another queue's is
/// taken), and the confirmed resume lets `next` take its task.
#[test]
fn a_queue_is_paused_and_resumed_from_the_page() {
    let Some(browser) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let server = Server::start(&store, Some(&token_file(dir.path())));
    let a = server.addr;
    let (s, r) = http(
        a,
        "POST",
        "/v1/graph",
        Some(OPERATOR),
        r#"[{"task": "build-1", "queue": "builds"}, {"task": "lint-1", "queue": "lint"}]"#,
    )
    .unwrap();
    assert_eq!(s, 200, "{r}");
    let next = |queue: &str| {
        http(
            a,
            "POST",
            "/v1/next",
            Some(WORKER),
            &format!(r#"{{"owner":"w","queues":["{queue}"],"ttl_ms":600000}}"#),
        )
        .unwrap()
    };
    let shots = std::env::var("BATON_KEEP_SCREENSHOTS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| dir.path().to_path_buf());
    std::fs::create_dir_all(&shots).unwrap();
    let mut b = Browser::open(browser, &dir.path().join("profile"));
    b.go(&format!("{}/", server.url()));
    let click = |verb: &str| {
        format!(
            "(() => {{ const b = document.querySelector('#queues button[data-action={verb}][data-task=builds]'); b.click(); return b.textContent; }})()"
        )
    };
    let pause_button =
        "!!document.querySelector('#queues button[data-action=pause][data-task=builds]')";
    // A worker's token: refused, nothing paused.
    b.sign_in(WORKER);
    b.until("the queue's pause", pause_button);
    assert_eq!(
        b.eval(&click("pause")).as_str(),
        Some("confirm pause builds?")
    );
    b.eval(&click("pause"));
    b.until(
        "the refusal",
        "document.getElementById('notice').className === 'err'",
    );
    let notice = b.eval("document.getElementById('notice').textContent");
    assert!(
        notice.as_str().unwrap().starts_with("pause builds: "),
        "{notice}"
    );
    let (_, q) = http(a, "GET", "/v1/queues/builds/policy", Some(WORKER), "").unwrap();
    assert_eq!(q["paused_at"], Value::Null, "{q}");
    // The operator's: paused.
    b.sign_in(OPERATOR);
    b.until("the queue's pause", pause_button);
    b.eval(&click("pause"));
    b.eval(&click("pause"));
    b.until(
        "the pause's notice",
        "document.getElementById('notice').className === 'ok'",
    );
    let notice = b.eval("document.getElementById('notice').textContent");
    assert!(
        notice.as_str().unwrap().contains("pause builds: paused"),
        "{notice}"
    );
    b.until(
        "the paused row",
        "!!document.querySelector('#queues button[data-action=resume][data-task=builds]')",
    );
    let queues = b.eval(&table_text("queues"));
    let row = queues
        .as_str()
        .unwrap()
        .lines()
        .find(|l| l.starts_with("builds"))
        .unwrap_or_else(|| panic!("{queues}"))
        .to_owned();
    assert!(row.contains("paused ") && row.contains("ago"), "{row}");
    // Its ready task counts as paused, not ready: waiting 1, ready 0.
    assert!(row.starts_with("builds\t1\t0\t"), "{row}");
    let (_, status) = http(a, "GET", "/v1/status", Some(OPERATOR), "").unwrap();
    assert_eq!(
        status["queues"]["builds"]["standing"]["PAUSED"], 1,
        "{status}"
    );
    assert_eq!(status["standing"]["READY"], 1, "lint's: {status}");
    b.until(
        "the paused card",
        "(document.querySelector('.count[data-standing=PAUSED] b') || {}).textContent === '1'",
    );
    let policies = b.eval(&table_text("policies"));
    assert!(
        policies.as_str().unwrap().contains("builds\tnone\tsince "),
        "{policies}"
    );
    let (_, q) = http(a, "GET", "/v1/queues/builds/policy", Some(WORKER), "").unwrap();
    assert!(q["paused_at"].is_string(), "{q}");
    let (_, r) = next("builds");
    assert_eq!(
        (r["refused"].as_str(), r["paused"].as_u64()),
        (Some("none_ready"), Some(1)),
        "{r}"
    );
    let (_, r) = next("lint");
    assert_eq!(r["task"], "lint-1", "{r}");
    b.screenshot(&shots.join("status-page-paused.png"));
    // Resumed: next takes its task.
    b.eval(&click("resume"));
    b.eval(&click("resume"));
    b.until(
        "the resume's notice",
        "document.getElementById('notice').textContent.includes('resume builds: running')",
    );
    b.until("the pause again", pause_button);
    let (_, r) = next("builds");
    assert_eq!(r["task"], "build-1", "{r}");
}

/// A queue's failed tasks retried, then discarded, from the page, each act
/// confirmed: a worker's token asking the same over the API is refused and
/// changes nothing; the operator's retry makes every failed task of the
/// queue ready as its next iteration (another queue's stays failed), and
/// once they fail again the discard leaves each a tombstone.
#[test]
fn a_queues_failed_tasks_are_retried_and_discarded_from_the_page() {
    let Some(browser) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let server = Server::start(&store, Some(&token_file(dir.path())));
    let a = server.addr;
    let post = |path: &str, token: &str, body: &str| {
        let (s, r) = http(a, "POST", path, Some(token), body).unwrap();
        (s, r)
    };
    let (s, r) = post(
        "/v1/graph",
        OPERATOR,
        r#"[{"task": "load-1", "queue": "etl"}, {"task": "load-2", "queue": "etl"},
            {"task": "load-3", "queue": "etl"}, {"task": "other", "queue": "misc"}]"#,
    );
    assert_eq!(s, 200, "{r}");
    let fail_all = |tasks: &[&str]| {
        for t in tasks {
            let (s, g) = post(&format!("/v1/tasks/{t}/claim"), WORKER, r#"{"owner":"w"}"#);
            assert_eq!(s, 200, "{g}");
            let (s, r) = post(
                &format!("/v1/tasks/{t}/fail"),
                WORKER,
                &format!(r#"{{"owner":"w","fence":{}}}"#, g["fence"]),
            );
            assert_eq!((s, r["state"].as_str()), (200, Some("FAILED")), "{r}");
        }
    };
    let etl = ["load-1", "load-2", "load-3"];
    fail_all(&etl);
    fail_all(&["other"]);
    let (s, r) = post(
        "/v1/queues/etl/retry-failed",
        WORKER,
        r#"{"operator":"mallory"}"#,
    );
    assert_eq!(s, 403, "{r}");
    let show = |t: &str| {
        http(a, "GET", &format!("/v1/tasks/{t}"), Some(OPERATOR), "")
            .unwrap()
            .1
    };
    assert_eq!(show("load-1")["state"], "FAILED", "nothing changed");

    let mut b = Browser::open(browser, &dir.path().join("profile"));
    b.go(&format!("{}/", server.url()));
    b.sign_in(OPERATOR);
    let button = |verb: &str| {
        format!("document.querySelector('#queues button[data-action=\"{verb}\"][data-task=etl]')")
    };
    let click = |verb: &str| {
        format!(
            "(() => {{ const b = {}; b.click(); return b.textContent; }})()",
            button(verb)
        )
    };
    b.until(
        "the retry of etl's failed",
        &format!("!!{}", button("retry failed")),
    );
    assert_eq!(
        b.eval(&click("retry failed")).as_str(),
        Some("confirm retry failed etl?")
    );
    b.eval(&click("retry failed"));
    b.until(
        "the retry's notice",
        "document.getElementById('notice').textContent.includes('retry failed etl: 3 retried')",
    );
    for t in etl {
        let r = show(t);
        assert_eq!(
            (r["state"].as_str(), r["iteration"].as_u64()),
            (Some("REGISTERED"), Some(2)),
            "{r}"
        );
    }
    assert_eq!(show("other")["state"], "FAILED", "another queue's stays");
    // No failed task left in etl: its buttons go.
    b.until("no retry of etl", &format!("!{}", button("retry failed")));
    fail_all(&etl);
    b.until(
        "the discard of etl's failed",
        &format!("!!{}", button("discard failed")),
    );
    b.eval(&click("discard failed"));
    b.eval(&click("discard failed"));
    b.until(
        "the discard's notice",
        "document.getElementById('notice').textContent.includes('discard failed etl: 3 discarded')",
    );
    for t in etl {
        let r = show(t);
        assert!(r["pruned_at"].is_string(), "{r}");
    }
    assert!(show("other")["pruned_at"].is_null());
}

/// What a webhook receiver saw: each post's task, seq and intent, whether
/// its signature held, and whether it was answered 2xx.
#[derive(Debug, Clone)]
struct Post {
    task: String,
    seq: u64,
    intent: String,
    signed: bool,
    taken: bool,
}

/// A webhook receiver on a loopback port that fails on purpose: every
/// post for task `poison` is answered 500; of the rest, the first try of
/// every third notification is answered 500 and the first try of the
/// fourth stalls past the deliverer's timeout. Every post is recorded.
fn receiver(key: Vec<u8>) -> (SocketAddr, Arc<Mutex<Vec<Post>>>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let posts: Arc<Mutex<Vec<Post>>> = Arc::default();
    let kept = posts.clone();
    std::thread::spawn(move || {
        let mut firsts: Vec<String> = Vec::new();
        for conn in l.incoming() {
            let Ok(mut c) = conn else { continue };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            let (head, body) = loop {
                let Ok(n) = c.read(&mut chunk) else {
                    break (String::new(), Vec::new());
                };
                if n == 0 {
                    break (String::new(), Vec::new());
                }
                buf.extend_from_slice(&chunk[..n]);
                let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                    continue;
                };
                let head = String::from_utf8_lossy(&buf[..at]).to_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                if buf.len() >= at + 4 + len {
                    break (head, buf[at + 4..at + 4 + len].to_vec());
                }
            };
            let Ok(n) = serde_json::from_slice::<Value>(&body) else {
                continue;
            };
            let header = |name: &str| {
                head.lines()
                    .find_map(|l| l.strip_prefix(&format!("{name}:")))
                    .map(|v| v.trim().to_owned())
                    .unwrap_or_default()
            };
            let signed =
                header("x-baton-signature") == baton_core::delivery::signature(&key, &body);
            let intent = n["intent_id"].as_str().unwrap_or_default().to_owned();
            let task = n["task"].as_str().unwrap_or_default().to_owned();
            let first = !firsts.contains(&intent);
            if first {
                firsts.push(intent.clone());
            }
            let k = firsts.iter().position(|i| *i == intent).unwrap_or(0);
            let (status, stall) = if task == "poison" || (first && k % 3 == 1) {
                (500, false)
            } else if first && k == 3 {
                (200, true)
            } else {
                (200, false)
            };
            if stall {
                std::thread::sleep(Duration::from_millis(1_500));
            }
            kept.lock().unwrap().push(Post {
                task,
                seq: n["seq"].as_u64().unwrap_or(0),
                intent,
                signed,
                taken: status == 200 && !stall,
            });
            let _ = write!(
                c,
                "HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
    });
    (addr, posts)
}

/// `baton serve --deliver`, the hard way: a receiver that fails and
/// stalls on purpose, and the server SIGKILLed while it delivers. Every
/// notification of the outbox reaches the receiver, signed, at least once
/// (once restarted, what was posted and not acknowledged is posted
/// again); each task's posts arrive in outbox order; a notification the
/// receiver keeps refusing is dead after its tries, acknowledged, and
/// shown on the page; nothing is left pending.
#[test]
fn the_outbox_is_delivered_at_least_once_in_order_through_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let key_file = dir.path().join("hook.key");
    let key = "a-webhook-key-of-32-bytes-or-more-0001";
    std::fs::write(&key_file, format!("{key}\n")).unwrap();
    let (hook, posts) = receiver(key.as_bytes().to_vec());
    // The work: eight declared tasks and a poison one, each announcing
    // its declaration and its registration.
    let declare = |task: &str| {
        let m = serde_json::json!({
            "task_id": task, "executor": "ci", "source_branch": "main", "source_oid": "abc",
            "target_version": "1", "steps": ["build"], "required_evidence": [],
            "notification_events": ["DECLARED", "REGISTERED"],
        });
        let p = dir.path().join(format!("{task}.json"));
        std::fs::write(&p, m.to_string()).unwrap();
        assert_eq!(
            baton(&store, None, &["task", "declare", p.to_str().unwrap()]).0,
            0
        );
        assert_eq!(
            baton(&store, None, &["task", "register", task, "--run", "r1"]).0,
            0
        );
    };
    let tasks: Vec<String> = (0..8).map(|i| format!("job-{i}")).collect();
    for t in &tasks {
        declare(t);
    }
    declare("poison");
    let out = Command::new(BIN)
        .args(["--store", &store, "outbox", "pending", "--limit", "1000"])
        .env_remove("BATON_STORE")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let pending = String::from_utf8_lossy(&out.stdout).to_string();
    let all: Vec<Value> = pending
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(all.len(), 18, "{pending}");

    let url = format!("http://{hook}/hook");
    let args = [
        "--deliver",
        url.as_str(),
        "--deliver-key",
        key_file.to_str().unwrap(),
        "--deliver-tries",
        "3",
        "--deliver-timeout",
        "500ms",
        "--sweep-every",
        "off",
    ];
    let mut first = Server::start_with(&store, &args);
    let until = Instant::now() + Duration::from_secs(20);
    while posts.lock().unwrap().iter().filter(|p| p.taken).count() < 6 {
        assert!(
            Instant::now() < until,
            "nothing delivered: {:?}",
            posts.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    let second = Server::start_with(&store, &args);
    let a = second.addr;
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let (s, p) = http(a, "GET", "/v1/outbox?limit=1000", None, "").unwrap();
        assert_eq!(s, 200, "{p}");
        if p["items"].as_array().is_some_and(Vec::is_empty) {
            break;
        }
        assert!(Instant::now() < until, "still pending: {p}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let posts = posts.lock().unwrap().clone();
    assert!(
        posts.iter().all(|p| p.signed),
        "an unsigned post: {posts:?}"
    );
    for n in &all {
        let intent = n["intent_id"].as_str().unwrap();
        let task = n["task"].as_str().unwrap();
        let taken = posts.iter().any(|p| p.intent == intent && p.taken);
        if task == "poison" {
            assert!(!taken);
            // Three tries by the server that gave it up (the first may
            // have tried some before it was killed).
            assert!(
                posts.iter().filter(|p| p.intent == intent).count() >= 3,
                "{posts:?}"
            );
        } else {
            assert!(taken, "{intent} ({task}) never delivered: {posts:?}");
        }
    }
    for t in tasks.iter().map(String::as_str).chain(["poison"]) {
        let seqs: Vec<u64> = posts
            .iter()
            .filter(|p| p.task == t)
            .map(|p| p.seq)
            .collect();
        assert!(
            seqs.windows(2).all(|w| w[0] <= w[1]),
            "{t}'s posts out of order: {seqs:?}"
        );
    }
    assert!(
        posts.iter().any(|p| !p.taken && p.task != "poison"),
        "the receiver failed some on purpose"
    );
    let (_, status) = http(a, "GET", "/v1/status", None, "").unwrap();
    let dl = &status["deliveries"];
    assert_eq!(dl["url"], url.as_str(), "{status}");
    let dead = dl["dead"].as_array().unwrap();
    assert!(
        !dead.is_empty()
            && dead
                .iter()
                .all(|d| d["task"] == "poison" && d["failures"] == 3),
        "{dl}"
    );
    assert!(dl["failing"].as_array().unwrap().is_empty(), "{dl}");
    let m = scrape(a, "none");
    assert_eq!(metric(&m, "baton_webhook_failing"), Some(0.0), "{m}");
    assert!(
        metric(&m, "baton_webhook_dead").is_some_and(|n| n >= 1.0),
        "{m}"
    );
    assert!(
        metric(&m, "baton_webhook_delivered").is_some_and(|n| n >= 1.0),
        "{m}"
    );
    let Some(browser) = chromium() else { return };
    let mut b = Browser::open(browser, &dir.path().join("profile"));
    b.go(&format!("{}/", second.url()));
    b.until(
        "the dead delivery",
        &format!("{}.includes('poison')", table_text("deliveries-dead")),
    );
    let text = b.eval("document.getElementById('deliveries').textContent");
    assert!(
        text.as_str().unwrap().contains(&format!("to {url}: ")),
        "{text}"
    );
}

/// `serve --otlp URL` (the `otlp` feature) against a real OTLP trace
/// service: OpenTelemetry's own protocol types served over gRPC by tonic,
/// as a collector serves them. A task added with a `traceparent` has each
/// decision on it (its grant with the fence, its completion) exported as
/// a span in that trace, under that parent; a request that sends a
/// `traceparent` header is a span in the caller's trace; an untraced
/// task's decisions make no span of their own. SIGTERM exports what is
/// left. A collector that cannot be reached costs nothing but the spans,
/// and a bad `--otlp` is refused by name before the store is opened.
#[cfg(feature = "otlp")]
#[test]
fn spans_reach_an_otlp_collector_in_the_tasks_trace() {
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
        TraceService, TraceServiceServer,
    };
    use opentelemetry_proto::tonic::collector::trace::v1::{
        ExportTraceServiceRequest, ExportTraceServiceResponse,
    };
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    type Got = Arc<Mutex<Vec<ExportTraceServiceRequest>>>;
    struct Collector(Got);
    #[tonic::async_trait]
    impl TraceService for Collector {
        async fn export(
            &self,
            r: tonic::Request<ExportTraceServiceRequest>,
        ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
            self.0.lock().unwrap().push(r.into_inner());
            Ok(tonic::Response::new(ExportTraceServiceResponse {
                partial_success: None,
            }))
        }
    }
    let hex = |s: &str| -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let got: Got = Arc::default();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let collector = format!("http://{}", listener.local_addr().unwrap());
    rt.spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(Collector(got.clone())))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );

    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    // A bad endpoint is refused by name, and no store is made.
    let bad = Command::new(BIN)
        .args([
            "--store",
            &store,
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--otlp",
            "not a url",
        ])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("\"field\":\"otlp\""),
        "{bad:?}"
    );
    assert!(!dir.path().join("s.db").exists());

    let mut server = Server::start_with(&store, &["--otlp", &collector]);
    let url = server.url();
    let (task_trace, task_parent) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let tp = format!("00-{task_trace}-{task_parent}-01");
    let (code, out) = baton(
        &url,
        None,
        &["add", "traced", "--queue", "otel", "--traceparent", &tp],
    );
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        baton(&url, None, &["add", "plain", "--queue", "plain"]).0,
        0
    );
    // The grant, asked in the caller's own trace.
    let (call_trace, call_parent) = ("11111111111111111111111111111111", "2222222222222222");
    let body = r#"{"owner":"w","queues":["otel"],"ttl_ms":60000}"#;
    let mut s = TcpStream::connect(server.addr).unwrap();
    write!(
        s,
        "POST /v1/next HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\ntraceparent: 00-{call_trace}-{call_parent}-01\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let granted: Value = serde_json::from_str(answer.split_once("\r\n\r\n").unwrap().1).unwrap();
    assert_eq!(granted["task"], "traced", "{answer}");
    let fence = granted["fence"].as_u64().unwrap();
    let f = fence.to_string();
    let (code, out) = baton(
        &url,
        None,
        &["complete", "traced", "--owner", "w", "--fence", &f],
    );
    assert_eq!(code, 0, "{out}");
    let (code, out) = baton(&url, None, &["next", "--owner", "w", "--queue", "plain"]);
    assert_eq!(code, 0, "{out}");
    server.signal("-TERM");
    assert!(server.wait(Duration::from_secs(20)).success());

    // Every span the collector received, with its service's name.
    let until = Instant::now() + Duration::from_secs(10);
    let spans = loop {
        let spans: Vec<(String, opentelemetry_proto::tonic::trace::v1::Span)> = got
            .lock()
            .unwrap()
            .iter()
            .flat_map(|r| r.resource_spans.iter())
            .flat_map(|rs| {
                let service = rs
                    .resource
                    .iter()
                    .flat_map(|r| r.attributes.iter())
                    .find(|a| a.key == "service.name")
                    .and_then(|a| a.value.as_ref()?.value.clone());
                let service = match service {
                    Some(Any::StringValue(s)) => s,
                    _ => String::new(),
                };
                rs.scope_spans
                    .iter()
                    .flat_map(|ss| ss.spans.iter())
                    .map(move |s| (service.clone(), s.clone()))
            })
            .collect();
        if spans.iter().any(|(_, s)| s.name == "baton complete") || Instant::now() > until {
            break spans;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let names: Vec<&str> = spans.iter().map(|(_, s)| s.name.as_str()).collect();
    assert!(spans.iter().all(|(svc, _)| svc == "baton"), "{names:?}");
    let attr = |s: &opentelemetry_proto::tonic::trace::v1::Span, key: &str| {
        s.attributes
            .iter()
            .find(|a| a.key == key)
            .and_then(|a| a.value.as_ref()?.value.clone())
    };
    let in_task_trace = |name: &str| {
        spans
            .iter()
            .map(|(_, s)| s)
            .find(|s| {
                s.name == name && attr(s, "baton.task") == Some(Any::StringValue("traced".into()))
            })
            .unwrap_or_else(|| panic!("no {name} span for the traced task in {names:?}"))
    };
    let grant = in_task_trace("baton claim");
    assert_eq!(grant.trace_id, hex(task_trace), "in the task's trace");
    assert_eq!(grant.parent_span_id, hex(task_parent), "under its parent");
    assert_eq!(
        attr(grant, "baton.outcome"),
        Some(Any::StringValue("granted".into()))
    );
    assert_eq!(
        attr(grant, "baton.fence"),
        Some(Any::IntValue(fence as i64))
    );
    let done = in_task_trace("baton complete");
    assert_eq!(
        (done.trace_id.clone(), done.parent_span_id.clone()),
        (hex(task_trace), hex(task_parent))
    );
    assert!(
        !spans
            .iter()
            .any(|(_, s)| attr(s, "baton.task") == Some(Any::StringValue("plain".into()))),
        "an untraced task's decisions make no span: {names:?}"
    );
    let call = spans
        .iter()
        .map(|(_, s)| s)
        .find(|s| s.name == "POST /v1/next" && s.trace_id == hex(call_trace))
        .unwrap_or_else(|| panic!("no span for the traced request in {names:?}"));
    assert_eq!(call.parent_span_id, hex(call_parent));
    assert_eq!(
        attr(call, "http.response.status_code"),
        Some(Any::IntValue(200))
    );

    // No collector listening: the server answers as ever.
    drop(rt);
    let server = Server::start_with(&store, &["--otlp", &collector]);
    let (code, out) = baton(
        &server.url(),
        None,
        &["add", "later", "--queue", "otel", "--traceparent", &tp],
    );
    assert_eq!(code, 0, "{out}");
    let (code, out) = baton(&server.url(), None, &["claim", "later", "--owner", "w"]);
    assert_eq!(code, 0, "{out}");
}
