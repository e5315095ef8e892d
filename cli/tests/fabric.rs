//! The CLI on a real 3-member etcd cluster (the `fabric` feature).
#![cfg(feature = "fabric")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_adapter_fabric::testing::EtcdCluster;
use serde_json::Value;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_baton");

fn baton(url: &str, args: &[&str]) -> (i32, Value) {
    let mut c = Command::new(BIN);
    c.arg("--store").arg(url).args(args);
    answer(c)
}

/// The exit status and the one JSON object a `baton` command printed
/// (standard output, or standard error for an error).
fn answer(mut c: Command) -> (i32, Value) {
    let out = c.env_remove("BATON_STORE").output().unwrap();
    let text = if out.stdout.is_empty() {
        out.stderr
    } else {
        out.stdout
    };
    (
        out.status.code().unwrap_or(-1),
        serde_json::from_slice(&text).unwrap_or(Value::Null),
    )
}

#[test]
fn etcd_urls_work_end_to_end_and_report_the_effective_lease() {
    let Some(cluster) = EtcdCluster::start_or_skip() else {
        return;
    };
    let url = cluster.url("cli");
    let (code, g) = baton(&url, &["claim", "job", "--owner", "w1", "--ttl", "1s"]);
    assert_eq!(code, 0, "{g}");
    let expiry = baton_core::Timestamp::parse_rfc3339(g["expiry"].as_str().unwrap()).unwrap();
    let claimed = baton_core::Timestamp::parse_rfc3339(g["claimed_at"].as_str().unwrap()).unwrap();
    assert_eq!(
        expiry.as_millis() - claimed.as_millis(),
        2000,
        "a 1s TTL is rounded up to etcd's 2s minimum"
    );
    let (code, r) = baton(&url, &["claim", "job", "--owner", "w2"]);
    assert_eq!((code, r["refused"].as_str()), (1, Some("held")));
    let fence = g["fence"].as_u64().unwrap().to_string();
    let (code, h) = baton(&url, &["holder", "job"]);
    assert_eq!((code, h["live"].as_bool()), (0, Some(true)));
    let (code, _) = baton(
        &url,
        &["complete", "job", "--owner", "w1", "--fence", &fence],
    );
    assert_eq!(code, 0);
    // A process that ends a grant revokes its lease before it exits (after
    // answering): an hour's lease does not outlive the grant.
    let (code, g) = baton(&url, &["claim", "hour", "--owner", "w1", "--ttl", "1h"]);
    assert_eq!(code, 0, "{g}");
    let fence = g["fence"].as_u64().unwrap().to_string();
    let (code, _) = baton(
        &url,
        &["complete", "hour", "--owner", "w1", "--fence", &fence],
    );
    assert_eq!(code, 0);
    assert_eq!(leases_left(&cluster), 0, "the completed grant's lease");
    // Another prefix on the same cluster is another store.
    let (code, _) = baton(&cluster.url("other"), &["holder", "job"]);
    assert_eq!(code, 5);
    let (code, e) = baton(&format!("{url}?min_ttl=soon"), &["holder", "job"]);
    assert_eq!((code, e["error"]["field"].as_str()), (2, Some("store")));
}

/// How many leases the cluster holds, once it shows none or 3 s pass (a
/// member may list leases before it has applied a revoke the leader
/// answered; a lease left behind lives out its TTL).
fn leases_left(cluster: &EtcdCluster) -> usize {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut client = etcd_client::Client::connect(cluster.endpoints(), None)
            .await
            .unwrap();
        let mut n = usize::MAX;
        for _ in 0..30 {
            n = client.leases().await.unwrap().leases().len();
            if n == 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        n
    })
}

/// `faketime`, or `None` with the reason printed (a failure instead under
/// `BATON_TEST_ETCD=1`, as `scripts/test` runs, which installs it).
fn faketime() -> Option<&'static str> {
    let path = "/usr/bin/faketime";
    if std::path::Path::new(path).exists() {
        return Some(path);
    }
    if std::env::var("BATON_TEST_ETCD").as_deref() == Ok("1") {
        panic!(
            "BATON_TEST_ETCD=1 but faketime is not installed: apt-get install faketime (scripts/test does it)"
        );
    }
    eprintln!("skipped: faketime is not installed (apt-get install faketime)");
    None
}

/// `baton` under `faketime -f SKEW`: a process whose clock is wrong.
fn baton_skewed(faketime: &str, skew: &str, url: &str, args: &[&str]) -> (i32, Value) {
    let mut c = Command::new(faketime);
    c.args(["-f", skew, BIN, "--store", url]).args(args);
    answer(c)
}

fn declared(dir: &std::path::Path, task: &str, heartbeat_s: u64, start_s: u64) -> String {
    let m = serde_json::json!({
        "task_id": task, "executor": "ci", "source_branch": "main", "source_oid": "abc123",
        "target_version": "2.0", "steps": ["build"], "required_evidence": [],
        "heartbeat_timeout_seconds": heartbeat_s, "start_deadline_seconds": start_s,
        "max_attempts": 3,
    });
    let p = dir.join(format!("{task}.json"));
    std::fs::write(&p, m.to_string()).unwrap();
    p.to_str().unwrap().to_owned()
}

#[test]
fn processes_with_clocks_an_hour_off_move_no_deadline() {
    let Some(cluster) = EtcdCluster::start_or_skip() else {
        return;
    };
    let Some(ft) = faketime() else {
        return;
    };
    let url = cluster.url("faketime");
    let dir = tempfile::tempdir().unwrap();
    // Three REGISTERED tasks with a 600 s start deadline: a sweep an hour
    // ahead moves none of them.
    for t in ["a", "b", "c"] {
        let (code, out) = baton(
            &url,
            &["task", "declare", &declared(dir.path(), t, 60, 600)],
        );
        assert_eq!(code, 0, "{out}");
        let (code, out) = baton(&url, &["task", "register", t, "--run", "run"]);
        assert_eq!(code, 0, "{out}");
    }
    let (code, out) = baton_skewed(ft, "+1h", &url, &["sweep"]);
    assert_eq!(code, 0, "{out}");
    for t in ["a", "b", "c"] {
        let (_, shown) = baton(&url, &["task", "show", t]);
        assert_eq!(shown["state"], "REGISTERED", "{t}: {shown}");
    }
    // A claimant an hour behind: its 2 s lease ends by the engine's clock,
    // its late renew hears lease_expired, and the attempt returns to
    // REGISTERED (one stall of three), not NOT_STARTED.
    let (code, out) = baton(&url, &["task", "declare", &declared(dir.path(), "l", 2, 5)]);
    assert_eq!(code, 0, "{out}");
    baton(&url, &["task", "register", "l", "--run", "run"]);
    let (code, g) = baton_skewed(
        ft,
        "-1h",
        &url,
        &["task", "claim", "l", "--run", "run", "--executor", "x"],
    );
    assert_eq!(code, 0, "{g}");
    let fence = g["fence"].as_u64().unwrap().to_string();
    // Its clock is behind the record's last write (the register's), so
    // it decided at that write's time: a task's time never runs back.
    let expiry = baton_core::Timestamp::parse_rfc3339(g["expiry"].as_str().unwrap()).unwrap();
    let now = baton_core::Clock::now(&baton_core::SystemClock);
    assert!(expiry.as_millis() > now.as_millis() - 60_000, "{g}");
    // The process really runs an hour behind: on a task of its own (no
    // write before it), the expiry it reports is its own clock's.
    let (code, own) = baton_skewed(
        ft,
        "-1h",
        &url,
        &["claim", "fresh", "--owner", "x", "--ttl", "2s"],
    );
    assert_eq!(code, 0, "{own}");
    let behind = baton_core::Timestamp::parse_rfc3339(own["expiry"].as_str().unwrap()).unwrap();
    assert!(behind.as_millis() < now.as_millis() - 1_800_000, "{own}");
    std::thread::sleep(std::time::Duration::from_millis(3_500));
    let (code, r) = baton_skewed(
        ft,
        "-1h",
        &url,
        &["renew", "l", "--owner", "x", "--fence", &fence],
    );
    assert_eq!(
        (code, r["refused"].as_str()),
        (1, Some("lease_expired")),
        "{r}"
    );
    let (code, g2) = baton_skewed(
        ft,
        "+1h",
        &url,
        &["task", "claim", "l", "--run", "run", "--executor", "y"],
    );
    assert_eq!(code, 0, "{g2}");
    assert_eq!(g2["attempt"], 2, "{g2}");
}

/// The work graph through the binary on the cluster: a graph file added,
/// separate processes waiting with `next --wait` each take one task as
/// soon as the task they all wait on succeeds, none the same one.
#[test]
fn waiting_processes_take_the_graph_on_etcd() {
    let Some(cluster) = EtcdCluster::start_or_skip() else {
        return;
    };
    let url = cluster.url("graph");
    let dir = tempfile::tempdir().unwrap();
    let graph = dir.path().join("graph.json");
    let nodes: Vec<String> = (0..3)
        .map(|i| format!(r#"{{"task": "job-{i}", "after": ["gate"]}}"#))
        .collect();
    std::fs::write(
        &graph,
        format!(r#"[{{"task": "gate"}}, {}]"#, nodes.join(",")),
    )
    .unwrap();
    let (code, out) = baton(&url, &["add", "--file", graph.to_str().unwrap()]);
    assert_eq!((code, out["added"].as_u64()), (0, Some(4)), "{out}");
    let (code, g) = baton(&url, &["next", "--owner", "keeper", "--ttl", "60s"]);
    assert_eq!((code, g["task"].as_str()), (0, Some("gate")), "{g}");
    let (code, r) = baton(&url, &["claim", "job-0", "--owner", "x"]);
    assert_eq!((code, r["refused"].as_str()), (1, Some("not_ready")), "{r}");
    let waiters: Vec<_> = (0..3)
        .map(|i| {
            let mut c = Command::new(BIN);
            c.arg("--store")
                .arg(&url)
                .args(["next", "--owner", &format!("w{i}"), "--wait", "30s"]);
            c.env_remove("BATON_STORE")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(1_000));
    let fence = g["fence"].as_u64().unwrap().to_string();
    let (code, _) = baton(
        &url,
        &["complete", "gate", "--owner", "keeper", "--fence", &fence],
    );
    assert_eq!(code, 0);
    let mut taken: Vec<String> = waiters
        .into_iter()
        .map(|w| {
            let out = w.wait_with_output().unwrap();
            assert_eq!(out.status.code(), Some(0), "{out:?}");
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            v["task"].as_str().unwrap().to_owned()
        })
        .collect();
    taken.sort();
    assert_eq!(taken, ["job-0", "job-1", "job-2"]);
    let (code, r) = baton(&url, &["next", "--owner", "late"]);
    assert_eq!(
        (code, r["refused"].as_str()),
        (1, Some("none_ready")),
        "{r}"
    );
}
