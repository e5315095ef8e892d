//! The CLI on a real 3-member etcd cluster (the `fabric` feature).
#![cfg(feature = "fabric")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_adapter_fabric::testing::EtcdCluster;
use serde_json::Value;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_baton");

fn baton(url: &str, args: &[&str]) -> (i32, Value) {
    let out = Command::new(BIN)
        .arg("--store")
        .arg(url)
        .args(args)
        .env_remove("BATON_STORE")
        .output()
        .unwrap();
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
    // Another prefix on the same cluster is another store.
    let (code, _) = baton(&cluster.url("other"), &["holder", "job"]);
    assert_eq!(code, 5);
    let (code, e) = baton(&format!("{url}?min_ttl=soon"), &["holder", "job"]);
    assert_eq!((code, e["error"]["field"].as_str()), (2, Some("store")));
}
