//! The Postgres store through the CLI: a URL that names it works for every
//! command, the demo runs on it, and a bad URL is refused naming the field.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_store_postgres::testing::PgCluster;
use serde_json::Value;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_baton");

fn baton(url: &str, args: &[&str]) -> (i32, Value, String) {
    let out = Command::new(BIN)
        .arg("--store")
        .arg(url)
        .args(args)
        .env_remove("BATON_STORE")
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (
        out.status.code().unwrap_or(-1),
        v,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn postgres_urls_work_end_to_end_and_the_demo_runs_on_them() {
    let Some(pg) = PgCluster::start_or_skip() else {
        return;
    };
    let url = pg.url("cli");
    let (code, v, err) = baton(&url, &["claim", "job", "--owner", "w1", "--ttl", "1h"]);
    assert_eq!(code, 0, "{v} {err}");
    let fence = v["fence"].as_u64().unwrap();
    let (code, v, _) = baton(&url, &["claim", "job", "--owner", "w2", "--ttl", "1h"]);
    assert_eq!((code, v["refused"].as_str()), (1, Some("held")), "{v}");
    let (code, v, _) = baton(&url, &["holder", "job"]);
    assert_eq!((code, v["owner"].as_str()), (0, Some("w1")), "{v}");
    let f = fence.to_string();
    let (code, v, _) = baton(&url, &["complete", "job", "--owner", "w1", "--fence", &f]);
    assert_eq!(code, 0, "{v}");
    // A graph through `add` and `next`.
    assert_eq!(baton(&url, &["add", "a"]).0, 0);
    assert_eq!(baton(&url, &["add", "b", "--after", "a"]).0, 0);
    let (code, v, _) = baton(&url, &["next", "--owner", "w1", "--ttl", "1h"]);
    assert_eq!((code, v["task"].as_str()), (0, Some("a")), "{v}");

    let out = Command::new(BIN)
        .args(["--store", &pg.url("demo"), "demo", "--format", "json"])
        .env_remove("BATON_STORE")
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert!(
        out.status.success(),
        "{v}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        (v["double_grants"].as_u64(), v["ok"].as_bool()),
        (Some(0), Some(true)),
        "{v}"
    );

    let (code, _, err) = baton(&format!("{url}&pool=0"), &["holder", "job"]);
    let e: Value = serde_json::from_str(err.trim()).unwrap_or(Value::Null);
    assert_eq!(
        (code, e["error"]["field"].as_str()),
        (2, Some("store")),
        "{err}"
    );
    let message = e["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("pool"), "{message}");
}
