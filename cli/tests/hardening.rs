//! The defects found by trying to break the binary, each driven the way it
//! was found: through `baton` itself, on real stores.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use serde_json::{Value, json};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_baton");

#[derive(Debug)]
struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("not one JSON object ({e}): {self:?}"))
    }
    fn error(&self) -> Value {
        let v: Value = serde_json::from_str(self.stderr.trim())
            .unwrap_or_else(|e| panic!("stderr not one JSON object ({e}): {self:?}"));
        v["error"].clone()
    }
    /// Exit 2, naming `field`, with a message that says the rule.
    fn invalid(&self, field: &str) {
        assert_eq!(self.code, 2, "{self:?}");
        let e = self.error();
        assert_eq!(e["field"].as_str(), Some(field), "{self:?}");
        assert!(
            e["message"].as_str().is_some_and(|m| m.len() > 10),
            "{self:?}"
        );
    }
}

fn baton_os<S: AsRef<OsStr>>(store: Option<&str>, args: &[S]) -> Ran {
    let mut c = Command::new(BIN);
    if let Some(s) = store {
        c.arg("--store").arg(s);
    }
    let out = c.args(args).env_remove("BATON_STORE").output().unwrap();
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn baton(store: &str, args: &[&str]) -> Ran {
    baton_os(Some(store), args)
}

/// The embedded stores these defects were found on.
fn stores(dir: &Path) -> Vec<String> {
    let mut out = vec![format!("sqlite:{}", dir.join("b.db").display())];
    if cfg!(feature = "sled") {
        out.push(format!("sled:{}", dir.join("sled").display()));
    }
    out
}

fn manifest(dir: &Path, task: &str, extra: Value) -> String {
    let mut m = json!({
        "task_id": task, "executor": "ci", "source_branch": "main", "source_oid": "abc",
        "target_version": "1", "steps": ["build"], "required_evidence": ["log"],
    });
    for (k, v) in extra.as_object().unwrap() {
        m[k] = v.clone();
    }
    let p = dir.join(format!("{task}.json"));
    std::fs::write(&p, m.to_string()).unwrap();
    p.display().to_string()
}

fn hash(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}

#[test]
fn a_duration_past_year_9999_is_invalid_and_the_store_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    for store in stores(dir.path()) {
        let m = manifest(
            dir.path(),
            "far",
            json!({"heartbeat_timeout_seconds": 300_000_000_000u64}),
        );
        baton(&store, &["task", "declare", &m]).invalid("heartbeat_timeout_seconds");
        let m = manifest(
            dir.path(),
            "far",
            json!({"start_deadline_seconds": 700_000}),
        );
        baton(&store, &["task", "declare", &m]).invalid("start_deadline_seconds");
        assert_eq!(baton(&store, &["task", "show", "far"]).code, 5, "{store}");
        // The longest allowed works end to end, claim without --ttl included.
        let m = manifest(
            dir.path(),
            "week",
            json!({"heartbeat_timeout_seconds": 604_800}),
        );
        assert_eq!(baton(&store, &["task", "declare", &m]).code, 0, "{store}");
        assert_eq!(
            baton(&store, &["task", "register", "week", "--run", "r"]).code,
            0
        );
        let g = baton(
            &store,
            &["task", "claim", "week", "--run", "r", "--executor", "ci"],
        );
        assert_eq!(g.code, 0, "{store}: {g:?}");
        let fence = g.json()["fence"].as_u64().unwrap().to_string();
        let run = ["--run", "r", "--executor", "ci", "--fence", fence.as_str()];
        let start: Vec<&str> = ["task", "start", "week"]
            .iter()
            .chain(&run)
            .copied()
            .collect();
        assert_eq!(baton(&store, &start).code, 0, "{store}");
        let hb: Vec<&str> = ["task", "heartbeat", "week"]
            .iter()
            .chain(&run)
            .chain(&["--step", "1"])
            .copied()
            .collect();
        assert_eq!(baton(&store, &hb).code, 0, "{store}");
        assert_eq!(baton(&store, &["claim", "next", "--owner", "w"]).code, 0);
    }
}

#[cfg(feature = "sled")]
#[test]
fn a_sled_store_opens_after_an_interrupted_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("s");
    let store = format!("sled:{}", d.display());
    let g = baton(&store, &["claim", "a", "--owner", "w"]);
    assert_eq!(g.code, 0, "{g:?}");
    std::fs::write(d.join("snap.7FFFFFFFFFFFFFFF.generating"), b"").unwrap();
    let h = baton(&store, &["holder", "a"]);
    assert_eq!(h.code, 0, "{h:?}");
    assert_eq!(h.json()["fence"], g.json()["fence"]);
}

#[test]
fn demo_and_bench_never_write_into_the_environments_store() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("mine.db");
    let env_store = format!("sqlite:{}", users.display());
    for _ in 0..2 {
        let out = Command::new(BIN)
            .args(["demo", "--format", "json"])
            .env("BATON_STORE", &env_store)
            .env("TMPDIR", dir.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["ok"], json!(true));
        assert_ne!(v["store"].as_str(), Some(env_store.as_str()));
    }
    let out = Command::new(BIN)
        .args(["bench", "--workers", "2", "--tasks", "20"])
        .env("BATON_STORE", &env_store)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("temporary store"),
        "{out:?}"
    );
    assert!(
        !users.exists(),
        "nothing was written into BATON_STORE's store"
    );
    // Named on the command line, the demo writes there, and runs again.
    let named = format!("sqlite:{}", dir.path().join("demo.db").display());
    for _ in 0..2 {
        let r = baton(&named, &["demo", "--format", "json"]);
        assert_eq!(r.code, 0, "{r:?}");
        assert_eq!(r.json()["store"].as_str(), Some(named.as_str()));
    }
    let listed = baton(&named, &["task", "list", "--limit", "1000"]);
    assert!(listed.stdout.lines().count() > 400, "both runs are there");
    let r = baton(&named, &["bench", "--workers", "2", "--tasks", "10"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("the store given"), "{r:?}");
}

#[test]
fn usage_errors_name_every_field_and_the_rule() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("b.db").display());
    let r = baton(&store, &["claim"]);
    r.invalid("owner, task");
    let m = r.error()["message"].as_str().unwrap().to_owned();
    assert!(m.contains("--owner") && m.contains("<TASK>"), "{m}");
    let r = baton(&store, &["cancel"]);
    assert!(
        r.error()["field"].as_str().unwrap().contains("task"),
        "{r:?}"
    );
    baton(&store, &["claim", "a", "--owner", "w", "--ttl", "-1s"]).invalid("ttl");
    baton(&store, &["claim", "a", "--owner", "w"]);
    baton(&store, &["task", "events", "a", "--after", "-1"]).invalid("after");
    baton(&store, &["task", "events", "nope", "--after", "-1"]).invalid("after");
    baton(&store, &["task", "events", "a", "--limit", "-1"]).invalid("limit");
    baton(&store, &["verify", "a", "--fence", "0"]).invalid("fence");
    baton_os(
        Some(&store),
        &[
            OsStr::new("claim"),
            OsStr::from_bytes(b"\xff"),
            OsStr::new("--owner"),
            OsStr::new("w"),
        ],
    )
    .invalid("task");
    baton_os(
        Some(&store),
        &[
            OsStr::new("claim"),
            OsStr::new("t"),
            OsStr::new("--owner"),
            OsStr::from_bytes(b"w\xfe"),
        ],
    )
    .invalid("owner");
    // Step 0 is bad input whatever the task's state: never a refusal.
    let m = manifest(dir.path(), "d", json!({}));
    baton(&store, &["task", "declare", &m]);
    baton(&store, &["task", "register", "d", "--run", "r"]);
    let r = baton(
        &store,
        &[
            "task",
            "heartbeat",
            "d",
            "--run",
            "r",
            "--executor",
            "ci",
            "--fence",
            "3",
            "--step",
            "0",
        ],
    );
    r.invalid("step");
    let ev = baton(&store, &["task", "events", "d"]);
    assert!(
        !ev.stdout.contains("CONFLICT_REFUSED"),
        "nothing was recorded: {ev:?}"
    );
    // An unreachable cluster: one short cause, not the transport's chain.
    #[cfg(feature = "fabric")]
    {
        let r = baton("etcd://127.0.0.1:1/x", &["holder", "a"]);
        assert_eq!(r.code, 3, "{r:?}");
        let m = r.error()["message"].as_str().unwrap().to_owned();
        assert!(
            m.contains("connection refused") && !m.contains("tonic"),
            "{m}"
        );
    }
}

#[test]
fn input_that_would_be_misread_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for store in stores(dir.path()) {
        let m = dir.path().join("dup.json");
        std::fs::write(
            &m,
            r#"{"task_id":"a","task_id":"b","executor":"ci","source_branch":"m","source_oid":"o","target_version":"1","steps":["s"]}"#,
        )
        .unwrap();
        baton(&store, &["task", "declare", m.to_str().unwrap()]).invalid("manifest");
        assert_eq!(baton(&store, &["task", "show", "b"]).code, 5);
        // Ids that print as another: an invisible character (U+034F, the
        // Hangul fillers, the Braille blank) or a leading combining mark.
        for spoof in [
            "ab\u{34f}",
            "a\u{3164}b",
            "\u{115f}ab",
            "ab\u{ffa0}",
            "ab\u{2800}",
            "\u{301}ab",
        ] {
            baton(&store, &["claim", spoof, "--owner", "w"]).invalid("task");
            baton(&store, &["claim", "x", "--owner", spoof]).invalid("owner");
        }
        let g = baton(&store, &["claim", "t", "--owner", "w"]).json();
        let f = g["fence"].to_string();
        baton(
            &store,
            &[
                "fail",
                "t",
                "--owner",
                "w",
                "--fence",
                &f,
                "--error",
                r#"{"a":1,"a":2}"#,
            ],
        )
        .invalid("error");
        for blank in [" ", "\t", "\u{3000}"] {
            baton(&store, &["claim", blank, "--owner", "w"]).invalid("task");
        }
        for bad in ["x\u{1b}[31m", "../../o/t", "3f2b8c1e"] {
            baton(&store, &["outbox", "ack", bad]).invalid("intent_id");
        }
    }
    baton("memory:extra", &["holder", "a"]).invalid("store");
    // sled, like SQLite, creates no missing directories (bad input naming
    // the store: exit 2) and takes over no directory that is not a store.
    let deep = dir.path().join("no/such/dir");
    let r = baton(
        &format!("sqlite:{}/b.db", deep.display()),
        &["claim", "a", "--owner", "w"],
    );
    assert_eq!(r.code, 2, "{r:?}");
    if cfg!(feature = "sled") {
        let r = baton(
            &format!("sled:{}", deep.display()),
            &["claim", "a", "--owner", "w"],
        );
        assert_eq!(r.code, 2, "{r:?}");
        assert!(!dir.path().join("no").exists());
        let home = dir.path().join("home");
        std::fs::create_dir(&home).unwrap();
        std::fs::write(home.join("notes.txt"), "mine").unwrap();
        let r = baton(
            &format!("sled:{}", home.display()),
            &["claim", "a", "--owner", "w"],
        );
        assert_eq!(r.code, 3, "{r:?}");
        assert_eq!(std::fs::read_dir(&home).unwrap().count(), 1);
    }
}

#[test]
fn human_output_cannot_be_spoofed() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("b.db").display());
    for id in [
        "evil\u{202e}txt.exe",
        "two\u{2028}lines",
        "para\u{2029}x",
        "zero\u{200b}w",
    ] {
        baton(&store, &["claim", id, "--owner", "w"]).invalid("task");
        baton(&store, &["claim", "t", "--owner", id]).invalid("owner");
    }
    let g = baton(&store, &["claim", "t", "--owner", "w"]).json();
    let f = g["fence"].to_string();
    let r = baton(
        &store,
        &[
            "fail",
            "t",
            "--owner",
            "w",
            "--fence",
            &f,
            "--error",
            "{\"why\":\"ok\u{202e}kO\u{2028}next\\u001b[2J\"}",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    for args in [
        vec!["task", "show", "t", "--format", "human"],
        vec!["task", "list", "--format", "human"],
        vec!["task", "events", "t", "--format", "human"],
    ] {
        let r = baton(&store, &args);
        assert_eq!(r.code, 0, "{args:?}: {r:?}");
        for raw in ['\u{202e}', '\u{2028}', '\u{1b}'] {
            assert!(
                !r.stdout.contains(raw),
                "{args:?} printed {raw:?} raw: {r:?}"
            );
        }
    }
    let shown = baton(&store, &["task", "show", "t", "--format", "human"]);
    assert!(shown.stdout.contains("\\u{202E}"), "{shown:?}");
}

#[test]
fn every_grant_event_carries_its_expiry_and_ignored_evidence_is_named() {
    let dir = tempfile::tempdir().unwrap();
    for store in stores(dir.path()) {
        baton(&store, &["claim", "r", "--owner", "w", "--ttl", "1m"]);
        let again = baton(&store, &["claim", "r", "--owner", "w", "--ttl", "2m"]).json();
        let events: Vec<Value> = baton(&store, &["task", "events", "r"])
            .stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .filter(|v: &Value| v["kind"] == "CLAIMED")
            .collect();
        assert_eq!(events.len(), 2, "{store}");
        for e in &events {
            assert!(e["details"]["expires_at"].is_string(), "{store}: {e}");
        }
        assert_eq!(events[1]["details"]["expires_at"], again["expiry"]);

        let m = manifest(dir.path(), "s", json!({}));
        baton(&store, &["task", "declare", &m]);
        baton(&store, &["task", "register", "s", "--run", "r"]);
        let g = baton(
            &store,
            &["task", "claim", "s", "--run", "r", "--executor", "ci"],
        )
        .json();
        let f = g["fence"].to_string();
        let run = ["--run", "r", "--executor", "ci", "--fence", &f];
        let mut start = vec!["task", "start", "s"];
        start.extend(run);
        baton(&store, &start);
        let first = format!("--evidence=log={}", hash('a'));
        let second = format!("--evidence=log={}", hash('b'));
        let mut s1 = vec!["task", "succeed", "s"];
        s1.extend(run);
        let mut s2 = s1.clone();
        s1.push(&first);
        s2.push(&second);
        let done = baton(&store, &s1).json();
        assert_eq!(done["idempotent"], json!(false));
        assert!(done.get("evidence_ignored").is_none());
        let repeat = baton(&store, &s2);
        assert_eq!(repeat.code, 0, "{repeat:?}");
        let v = repeat.json();
        assert_eq!(v["idempotent"], json!(true));
        assert_eq!(v["evidence_ignored"], json!(["log"]));
        assert_eq!(v["evidence"]["log"], json!(hash('a')), "the first stands");
        let same = baton(&store, &s1).json();
        assert!(same.get("evidence_ignored").is_none(), "{same}");
    }
}

/// `{"a":{"a":...{"marker":1}...}}`, `depth` levels deep.
fn nested(depth: usize) -> String {
    let mut s = String::from(r#"{"marker":1}"#);
    for _ in 1..depth {
        s = format!(r#"{{"a":{s}}}"#);
    }
    s
}

#[test]
fn no_worker_can_make_a_task_unreadable_with_deep_json() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("b.db");
    let store = format!("sqlite:{}", db.display());
    let g = baton(&store, &["claim", "t", "--owner", "w", "--ttl", "1h"]);
    assert_eq!(g.code, 0, "{g:?}");
    let fence = g.json()["fence"].to_string();
    // Too deep on the way in: exit 2 naming the field, nothing changed.
    let deep = nested(33);
    let r = baton(
        &store,
        &[
            "fail", "t", "--owner", "w", "--fence", &fence, "--error", &deep,
        ],
    );
    r.invalid("error");
    assert_eq!(baton(&store, &["holder", "t"]).json()["live"], true);
    let r = baton(
        &store,
        &[
            "fail",
            "t",
            "--owner",
            "w",
            "--fence",
            &fence,
            "--error",
            &nested(1),
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    // What an earlier baton let in: the same error 127 levels deep in the
    // record and its events, as written straight into the file.
    let c = rusqlite::Connection::open(&db).unwrap();
    let small = nested(1);
    let n = c
        .execute(
            "UPDATE tasks SET record = replace(record, ?1, ?2)",
            [&small, &nested(127)],
        )
        .unwrap();
    assert_eq!(n, 1);
    c.execute(
        "UPDATE events SET body = replace(body, ?1, ?2)",
        [&small, &nested(127)],
    )
    .unwrap();
    drop(c);
    let shown = baton(&store, &["task", "show", "t"]);
    assert_eq!(shown.code, 0, "{shown:?}");
    // Read as any reader without serde_json's depth limit would (Python's).
    let v: Value = baton_core::json::decode_stored(shown.stdout.trim().as_bytes()).unwrap();
    assert_eq!(v["state"], "FAILED", "{shown:?}");
    for args in [
        &["task", "events", "t"][..],
        &["task", "list"],
        &["graph", "show"],
        &["holder", "t"],
    ] {
        let r = baton(&store, args);
        assert_eq!(r.code, 0, "{args:?}: {r:?}");
    }
    // Requests on it are decided, not refused as corrupt.
    let r = baton(&store, &["claim", "t", "--owner", "x"]);
    assert_eq!(
        r.code, 1,
        "refused as a failed task, not unavailable: {r:?}"
    );
    let r = baton(&store, &["task", "finalize", "t", "--operator", "ops"]);
    assert_ne!(r.code, 3, "{r:?}");
}
