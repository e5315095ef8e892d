//! The `baton` binary, driven as scripts and agents drive it: every
//! command, every exit status, and bad input that changes nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_core::Id;
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

#[macro_use]
mod common;

use common::Backend;

const BIN: &str = env!("CARGO_BIN_EXE_baton");

per_backend!(
    lease_commands_and_their_exit_statuses,
    registry_commands_from_declare_to_gate,
    lists_are_paged_and_human_output_is_a_table,
    bad_input_is_exit_2_names_the_field_and_changes_nothing,
    a_closed_output_pipe_is_a_normal_exit,
    an_answer_that_cannot_be_written_is_not_a_success,
    a_read_never_creates_a_store,
);

struct Env {
    dir: tempfile::TempDir,
    backend: Backend,
}

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
    fn lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
    fn error(&self) -> Value {
        let v: Value = serde_json::from_str(self.stderr.trim())
            .unwrap_or_else(|e| panic!("stderr not JSON ({e}): {self:?}"));
        v["error"].clone()
    }
}

impl Env {
    fn new() -> Env {
        Env::on(Backend::Sqlite)
    }
    fn on(backend: Backend) -> Env {
        Env {
            dir: tempfile::tempdir().unwrap(),
            backend,
        }
    }
    /// Where the store lives: a SQLite file or a sled directory.
    fn db(&self) -> PathBuf {
        match self.backend {
            Backend::Sqlite => self.dir.path().join("baton.db"),
            Backend::Sled => self.dir.path().join("baton.sled"),
        }
    }
    fn url(&self) -> String {
        match self.backend {
            Backend::Sqlite => format!("sqlite:{}", self.db().display()),
            Backend::Sled => format!("sled:{}?busy_timeout=30s", self.db().display()),
        }
    }
    /// An authority on this test's store, opened in this process.
    fn open(&self) -> baton_cli::DynAuthority {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(baton_cli::authority_for(&self.url())).unwrap()
    }
    fn run(&self, args: &[&str]) -> Ran {
        self.run_with(args, None)
    }
    /// Runs with no `--store` of the test's own.
    fn run_bare(&self, args: &[&str]) -> Ran {
        let out = Command::new(BIN)
            .args(args)
            .env_remove("BATON_STORE")
            .current_dir(self.dir.path())
            .output()
            .unwrap();
        Ran {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
    fn run_with(&self, args: &[&str], stdin: Option<&str>) -> Ran {
        let mut c = Command::new(BIN);
        c.arg("--store")
            .arg(self.url())
            .args(args)
            .env_remove("BATON_STORE");
        c.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
        drop(input);
        let out = child.wait_with_output().unwrap();
        Ran {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
    fn ok(&self, args: &[&str]) -> Value {
        let r = self.run(args);
        assert_eq!(r.code, 0, "{args:?}: {r:?}");
        r.json()
    }
    /// Everything the store holds: tasks, every event, the outbox.
    fn snapshot(&self) -> Value {
        if !self.db().exists() {
            return Value::Null;
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let a = self.open();
        let tasks = rt.block_on(a.list(None, None, 10_000)).unwrap().items;
        let events = rt.block_on(a.events(None, None, 10_000)).unwrap().items;
        let pending = rt.block_on(a.pending(None, 10_000)).unwrap().items;
        json!({"tasks": tasks, "events": events, "pending": pending})
    }
}

fn write_manifest(dir: &Path, task: &str, extra: Value) -> PathBuf {
    let mut m = json!({
        "task_id": task, "executor": "ci", "source_branch": "main", "source_oid": "abc123",
        "target_version": "2.0", "steps": ["build", "test"], "required_evidence": ["log"],
        "heartbeat_timeout_seconds": 60,
    });
    for (k, v) in extra.as_object().unwrap() {
        m[k] = v.clone();
    }
    let p = dir.join(format!("{task}.json"));
    std::fs::write(&p, m.to_string()).unwrap();
    p
}

fn hash(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}

fn lease_commands_and_their_exit_statuses(backend: Backend) {
    let e = Env::on(backend);
    let g = e.ok(&["claim", "build-1", "--owner", "w1", "--ttl", "5m"]);
    for field in [
        "task", "owner", "attempt", "fence", "expiry", "state", "revision",
    ] {
        assert!(g.get(field).is_some(), "a grant has {field}: {g}");
    }
    assert_eq!(
        (g["task"].as_str(), g["owner"].as_str(), g["state"].as_str()),
        (Some("build-1"), Some("w1"), Some("CLAIMED"))
    );
    let expiry = g["expiry"].as_str().unwrap();
    assert!(
        expiry.ends_with('Z') && expiry.len() == "2026-01-01T00:00:00.000Z".len(),
        "RFC 3339 UTC with ms: {expiry}"
    );
    let f1 = g["fence"].as_u64().unwrap().to_string();

    let held = e.run(&["claim", "build-1", "--owner", "w2"]);
    assert_eq!(held.code, 1);
    let v = held.json();
    assert_eq!(
        (v["refused"].as_str(), v["holder"].as_str()),
        (Some("held"), Some("w1"))
    );
    assert_eq!(
        v["fence"]
            .as_str()
            .map(str::to_owned)
            .or(v["fence"].as_u64().map(|f| f.to_string())),
        Some(f1.clone())
    );
    assert!(v["message"].as_str().unwrap().contains("w1"));

    let r = e.ok(&[
        "renew", "build-1", "--owner", "w1", "--fence", &f1, "--ttl", "10m",
    ]);
    assert_eq!(r["fence"].as_u64().unwrap().to_string(), f1);
    let h = e.ok(&["holder", "build-1"]);
    assert_eq!(
        (h["owner"].as_str(), h["live"].as_bool()),
        (Some("w1"), Some(true))
    );
    let v = e.ok(&["verify", "build-1", "--fence", &f1]);
    assert_eq!(
        v,
        json!({"current": true, "live": true, "state": "CLAIMED", "current_fence": f1.parse::<u64>().unwrap()})
    );
    let stale = e.run(&["verify", "build-1", "--fence", "999"]);
    assert_eq!(
        (stale.code, stale.json()["current"].as_bool()),
        (1, Some(false))
    );

    let bad = e.run(&["renew", "build-1", "--owner", "w1", "--fence", "999"]);
    assert_eq!(
        (bad.code, bad.json()["refused"].as_str()),
        (1, Some("stale_fence"))
    );
    assert_eq!(
        bad.json()["current_fence"].as_u64().unwrap().to_string(),
        f1
    );

    let done = e.ok(&["complete", "build-1", "--owner", "w1", "--fence", &f1]);
    assert_eq!(
        (done["state"].as_str(), done["idempotent"].as_bool()),
        (Some("SUCCEEDED"), Some(false))
    );
    let again = e.ok(&["complete", "build-1", "--owner", "w1", "--fence", &f1]);
    assert_eq!(again["idempotent"].as_bool(), Some(true));
    let late = e.run(&[
        "fail",
        "build-1",
        "--owner",
        "w1",
        "--fence",
        &f1,
        "--error",
        r#"{"why":"late"}"#,
    ]);
    assert_eq!(
        (late.code, late.json()["refused"].as_str()),
        (1, Some("illegal_transition"))
    );
    let regrant = e.run(&["claim", "build-1", "--owner", "w2"]);
    assert_eq!(
        (regrant.code, regrant.json()["refused"].as_str()),
        (1, Some("completed"))
    );

    // release, then another owner claims; recover of a live lease is refused.
    let f2 = e.ok(&["claim", "build-2", "--owner", "w1"])["fence"]
        .as_u64()
        .unwrap()
        .to_string();
    let rel = e.ok(&["release", "build-2", "--owner", "w1", "--fence", &f2]);
    assert_eq!(rel["state"].as_str(), Some("REGISTERED"));
    let f3 = e.ok(&["claim", "build-2", "--owner", "w2"])["fence"]
        .as_u64()
        .unwrap()
        .to_string();
    let live = e.run(&["recover", "build-2", "--owner", "w3"]);
    assert_eq!(
        (live.code, live.json()["refused"].as_str()),
        (1, Some("lease_live"))
    );
    let rec = e.ok(&["recover", "build-3", "--owner", "w3", "--ttl", "750ms"]);
    assert_eq!(rec["owner"].as_str(), Some("w3"));
    // fail with an error object, cancel by the holder, cancel by an operator.
    let failed = e.ok(&[
        "fail",
        "build-2",
        "--owner",
        "w2",
        "--fence",
        &f3,
        "--error",
        r#"{"exit":3}"#,
    ]);
    assert_eq!(
        (failed["state"].as_str(), &failed["error"]),
        (Some("FAILED"), &json!({"exit": 3}))
    );
    let f4 = e.ok(&["claim", "build-4", "--owner", "w1"])["fence"]
        .as_u64()
        .unwrap()
        .to_string();
    let c = e.ok(&["cancel", "build-4", "--owner", "w1", "--fence", &f4]);
    assert_eq!(c["state"].as_str(), Some("CANCELLED"));
    e.ok(&["claim", "build-5", "--owner", "w1"]);
    // An operator asks the live holder to stop; --force ends it at once.
    let c = e.ok(&["cancel", "build-5", "--operator", "alice"]);
    assert_eq!(c["state"].as_str(), Some("CLAIMED"));
    assert!(c["cancel_requested"].is_object(), "{c}");
    let c = e.ok(&["cancel", "build-5", "--operator", "alice", "--force"]);
    assert_eq!(c["state"].as_str(), Some("CANCELLED"));

    // not found: exit 5
    for args in [
        vec!["holder", "nope"],
        vec!["verify", "nope", "--fence", "1"],
        vec!["renew", "nope", "--owner", "w", "--fence", "1"],
        vec!["task", "show", "nope"],
        vec!["task", "gate", "nope"],
        vec!["task", "events", "nope"],
    ] {
        let r = e.run(&args);
        assert_eq!(
            (r.code, r.json()["refused"].as_str()),
            (5, Some("not_found")),
            "{args:?}"
        );
    }
}

fn registry_commands_from_declare_to_gate(backend: Backend) {
    let e = Env::on(backend);
    let m = write_manifest(e.dir.path(), "rel", json!({}));
    let d = e.ok(&["task", "declare", m.to_str().unwrap()]);
    assert_eq!(d["state"].as_str(), Some("DECLARED"));
    let text = std::fs::read_to_string(&m).unwrap();
    let again = e.run_with(&["task", "declare"], Some(&text));
    assert_eq!(
        (again.code, again.json()["idempotent"].as_bool()),
        (0, Some(true)),
        "declare from standard input"
    );
    e.ok(&["task", "register", "rel", "--run", "r1"]);
    let wrong = e.run(&["task", "claim", "rel", "--run", "r9", "--executor", "ci-1"]);
    assert_eq!(
        (wrong.code, wrong.json()["refused"].as_str()),
        (1, Some("precondition_failed"))
    );
    let big = e.run(&[
        "task",
        "claim",
        "rel",
        "--run",
        "r1",
        "--executor",
        "ci-1",
        "--ttl",
        "61s",
    ]);
    assert_eq!((big.code, big.error()["field"].as_str()), (2, Some("ttl")));
    let g = e.ok(&["task", "claim", "rel", "--run", "r1", "--executor", "ci-1"]);
    let f = g["fence"].as_u64().unwrap().to_string();
    let run = ["--run", "r1", "--executor", "ci-1", "--fence", f.as_str()];
    let s = e.ok(&[&["task", "start", "rel"][..], &run].concat());
    assert_eq!(s["state"].as_str(), Some("RUNNING"));
    let early = e.run(
        &[
            &["task", "succeed", "rel"][..],
            &run,
            &["--evidence", &format!("log={}", hash('a'))],
        ]
        .concat(),
    );
    assert_eq!(
        (early.code, early.json()["refused"].as_str()),
        (1, Some("steps_incomplete"))
    );
    let hb = e.ok(&[
        &["task", "heartbeat", "rel"][..],
        &run,
        &["--step", "2", "--ttl", "30s"],
    ]
    .concat());
    assert_eq!(hb["current_step"].as_u64(), Some(2));
    let gate = e.run(&["task", "gate", "rel"]);
    assert_eq!(
        (gate.code, gate.json()["release_blocking"].as_bool()),
        (1, Some(true))
    );
    let missing = e.run(&[&["task", "succeed", "rel"][..], &run].concat());
    assert_eq!(
        (missing.code, missing.json()["refused"].as_str()),
        (1, Some("evidence_missing"))
    );
    assert_eq!(missing.json()["keys"], json!(["log"]));
    // KEY=@PATH hashes the file, as `task run` does; a file that cannot be
    // read is bad input naming the evidence, and nothing changes.
    let log = e.dir.path().join("build.log");
    std::fs::write(&log, "hello\n").unwrap();
    let unreadable = e.run(
        &[
            &["task", "succeed", "rel"][..],
            &run,
            &["--evidence", "log=@/nonexistent/build.log"],
        ]
        .concat(),
    );
    assert_eq!(unreadable.code, 2, "{unreadable:?}");
    assert_eq!(unreadable.error()["field"], "evidence");
    assert!(
        unreadable.error()["message"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/build.log")
    );
    assert_eq!(e.ok(&["task", "show", "rel"])["state"], "RUNNING");
    let ok = e.ok(&[
        &["task", "succeed", "rel"][..],
        &run,
        &[
            "--evidence",
            &format!("log=@{}", log.display()),
            "--evidence",
            &format!("extra={}", hash('b')),
        ],
    ]
    .concat());
    assert_eq!(ok["state"].as_str(), Some("SUCCEEDED"));
    let gate = e.ok(&["task", "gate", "rel"]);
    assert_eq!(
        (gate["passed"].as_bool(), gate["evidence"]["log"].as_str()),
        (
            Some(true),
            Some("sha256:5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03")
        )
    );
    let show = e.ok(&["task", "show", "rel"]);
    assert_eq!(show["run_id"].as_str(), Some("r1"));
    let events = e.run(&["task", "events", "rel"]);
    let kinds: Vec<String> = events
        .lines()
        .iter()
        .map(|v| v["kind"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        kinds,
        [
            "DECLARED",
            "REGISTERED",
            "CLAIMED",
            "STARTED",
            "HEARTBEAT",
            "SUCCEEDED"
        ]
    );
    let listed = e.run(&["task", "list", "--state", "succeeded"]);
    assert_eq!(listed.lines().len(), 1);

    // The outbox: STARTED and SUCCEEDED, until acknowledged.
    let pending = e.run(&["outbox", "pending"]).lines();
    let kinds: Vec<&str> = pending
        .iter()
        .map(|n| n["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["STARTED", "SUCCEEDED"]);
    let first = pending[0]["intent_id"].as_str().unwrap();
    let acked = e.ok(&["outbox", "ack", first]);
    assert_eq!(acked["acknowledged"].as_u64(), Some(1));
    assert_eq!(
        e.ok(&["outbox", "ack", first])["acknowledged"].as_u64(),
        Some(0),
        "acknowledging is idempotent"
    );
    assert_eq!(e.run(&["outbox", "pending"]).lines().len(), 1);

    // task fail, retry refused outside NOT_STARTED, redispatch and finalize by an operator.
    let m2 = write_manifest(e.dir.path(), "rel-2", json!({"required_evidence": []}));
    e.ok(&["task", "declare", m2.to_str().unwrap()]);
    e.ok(&["task", "register", "rel-2", "--run", "r1"]);
    let f2 = e.ok(&[
        "task",
        "claim",
        "rel-2",
        "--run",
        "r1",
        "--executor",
        "ci-2",
    ])["fence"]
        .as_u64()
        .unwrap()
        .to_string();
    let tf = e.ok(&[
        "task",
        "fail",
        "rel-2",
        "--run",
        "r1",
        "--executor",
        "ci-2",
        "--fence",
        &f2,
        "--error",
        r#"{"step":"build"}"#,
    ]);
    assert_eq!(tf["state"].as_str(), Some("FAILED"));
    let retry = e.run(&["task", "retry", "rel-2", "--run", "r2"]);
    assert_eq!(
        (retry.code, retry.json()["refused"].as_str()),
        (1, Some("illegal_transition"))
    );
    let rd = e.ok(&[
        "task",
        "redispatch",
        "rel-2",
        "--operator",
        "alice",
        "--iteration",
        "2",
    ]);
    assert_eq!(
        (rd["state"].as_str(), rd["iteration"].as_u64()),
        (Some("REGISTERED"), Some(2))
    );
    let same = e.run(&[
        "task",
        "redispatch",
        "rel-2",
        "--operator",
        "alice",
        "--iteration",
        "2",
    ]);
    assert_eq!(same.code, 1);
    let fin = e.ok(&[
        "task",
        "finalize",
        "rel-2",
        "--operator",
        "alice",
        "--error",
        r#"{"why":"budget"}"#,
    ]);
    assert_eq!(fin["state"].as_str(), Some("FAILED"));
    let sw = e.run(&["sweep", "--dry-run"]);
    assert_eq!((sw.code, sw.stdout.as_str()), (0, ""));
    assert_eq!(e.run(&["sweep"]).code, 0);
}

fn lists_are_paged_and_human_output_is_a_table(backend: Backend) {
    let e = Env::on(backend);
    for i in 0..5 {
        e.ok(&["claim", &format!("page-{i}"), "--owner", "w"]);
    }
    let first = e.run(&["task", "list", "--limit", "2"]).lines();
    assert_eq!(first.len(), 3, "two tasks and the cursor");
    let cursor = first[2]["next"].as_str().unwrap().to_owned();
    let second = e
        .run(&["task", "list", "--limit", "2", "--after", &cursor])
        .lines();
    assert_eq!(second[0]["task"].as_str(), Some("page-2"));
    let all = e.run(&["task", "list", "--state", "CLAIMED"]).lines();
    assert_eq!(all.len(), 5);
    let f = e.ok(&["holder", "page-0"])["fence"]
        .as_u64()
        .unwrap()
        .to_string();
    e.ok(&["renew", "page-0", "--owner", "w", "--fence", &f]);
    let ev = e.run(&["task", "events", "page-0", "--limit", "1"]).lines();
    assert_eq!((ev.len(), ev[0]["kind"].as_str()), (2, Some("CLAIMED")));
    let ev2 = e
        .run(&[
            "task",
            "events",
            "page-0",
            "--after",
            ev[1]["next"].as_str().unwrap(),
        ])
        .lines();
    assert_eq!(ev2[0]["kind"].as_str(), Some("RENEWED"));
    let human = e.run(&["--format", "human", "holder", "page-0"]);
    assert_eq!(human.code, 0);
    assert!(
        human
            .stdout
            .lines()
            .any(|l| l.starts_with("owner") && l.trim_end().ends_with(" w")),
        "{}",
        human.stdout
    );
    let table = e.run(&["--format", "human", "task", "list"]);
    let header: Vec<&str> = table
        .stdout
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "TASK", "STATE", "OWNER", "FENCE", "EXPIRES", "ATTEMPT", "STEP"
        ],
        "{}",
        table.stdout
    );
    assert_eq!(table.stdout.lines().count(), 6);
    let row = table.stdout.lines().nth(1).unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[0], "page-0", "{row}");
    assert_eq!(cells[2], "w", "the owner is shown: {row}");
    assert!(cells[3].parse::<u64>().is_ok(), "the fence is shown: {row}");
    assert!(row.contains(" in "), "the expiry is relative: {row}");
    assert!(!table.stdout.contains('\u{1b}'), "no colour off a terminal");
    let events = e.run(&["--format", "human", "task", "events", "page-0"]);
    assert!(
        events.stdout.starts_with("SEQ") && events.stdout.contains("FROM->TO"),
        "{}",
        events.stdout
    );
    assert!(events.stdout.contains("CLAIMED"), "{}", events.stdout);
    let line = e.run(&["--format", "human", "claim", "page-9", "--owner", "w"]);
    assert!(
        line.stdout.starts_with("granted page-9 to w: fence ") && line.stdout.lines().count() == 1,
        "{}",
        line.stdout
    );
    let no = e.run(&["--format", "human", "claim", "page-9", "--owner", "x"]);
    assert_eq!(no.code, 1);
    assert!(no.stdout.starts_with("refused held: "), "{}", no.stdout);
    // A record reads as a headline and its parts, nothing cut: a long
    // error is shown whole.
    let fence = e.run(&["holder", "page-9"]).json()["fence"].to_string();
    let long_error = format!(r#"{{"exit":3,"log":"{}"}}"#, "x".repeat(200));
    let failed = e.run(&[
        "--format",
        "human",
        "fail",
        "page-9",
        "--owner",
        "w",
        "--fence",
        &fence,
        "--error",
        &long_error,
    ]);
    assert_eq!(failed.code, 0, "{failed:?}");
    let first = failed.stdout.lines().next().unwrap();
    assert!(
        first.starts_with("page-9  FAILED  revision "),
        "{}",
        failed.stdout
    );
    assert!(
        failed.stdout.contains(&"x".repeat(200)),
        "{}",
        failed.stdout
    );
    assert!(!failed.stdout.contains('…'), "{}", failed.stdout);
    assert!(
        failed
            .stdout
            .lines()
            .any(|l| l.trim_start().starts_with("ended by") && l.contains("fail by w under fence")),
        "{}",
        failed.stdout
    );
    let shown = e.run(&["--format", "human", "task", "show", "page-9"]);
    let head = |s: &str| s.lines().take(4).map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(
        head(&shown.stdout),
        head(&failed.stdout),
        "show reads as the write printed it"
    );
    // Events: a task's first move reads `new->`, and the details are shown.
    let events = e.run(&["--format", "human", "task", "events", "page-9"]);
    assert!(events.stdout.contains("new->CLAIMED"), "{}", events.stdout);
    assert!(!events.stdout.contains("-->"), "{}", events.stdout);
    assert!(events.stdout.contains("DETAILS"), "{}", events.stdout);
    assert!(
        events.stdout.contains(r#""expires_at":"#),
        "{}",
        events.stdout
    );
}

fn bad_input_is_exit_2_names_the_field_and_changes_nothing(backend: Backend) {
    let e = Env::on(backend);
    e.ok(&["claim", "seed", "--owner", "w"]);
    let m = write_manifest(e.dir.path(), "m", json!({"colour": "red"}));
    let before = e.snapshot();
    let long = "x".repeat(300);
    let ev = format!("--evidence=log{}", hash('a'));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["claim", "", "--owner", "w"], "task"),
        (vec!["claim", &long, "--owner", "w"], "task"),
        (vec!["claim", "a\u{1}b", "--owner", "w"], "task"),
        (vec!["claim", "t", "--owner", ""], "owner"),
        // A holder's cancel cancels its own task only: --cascade is an operator's.
        (
            vec![
                "cancel",
                "seed",
                "--owner",
                "w",
                "--fence",
                "1",
                "--cascade",
            ],
            "cascade",
        ),
        (
            vec!["renew", "seed", "--owner", "w", "--fence", "-1"],
            "fence",
        ),
        (
            vec!["renew", "seed", "--owner", "w", "--fence", "abc"],
            "fence",
        ),
        (
            vec!["complete", "seed", "--owner", "w", "--fence", "0"],
            "fence",
        ),
        (
            vec![
                "task",
                "heartbeat",
                "seed",
                "--run",
                "r",
                "--executor",
                "w",
                "--fence",
                "1",
                "--step",
                "-1",
            ],
            "step",
        ),
        (vec!["claim", "t", "--owner", "w", "--ttl", "0s"], "ttl"),
        (vec!["claim", "t", "--owner", "w", "--ttl", "8d"], "ttl"),
        (
            vec!["claim", "t", "--owner", "w", "--ttl", "5 fortnights"],
            "ttl",
        ),
        (vec!["claim", "t", "--owner", "w", "--ttl", "30"], "ttl"),
        (vec!["task", "declare", m.to_str().unwrap()], "colour"),
        (
            vec![
                "fail",
                "seed",
                "--owner",
                "w",
                "--fence",
                "1",
                "--error",
                "{not json",
            ],
            "error",
        ),
        (
            vec![
                "fail", "seed", "--owner", "w", "--fence", "1", "--error", "[1,2]",
            ],
            "error",
        ),
        (
            vec![
                "task",
                "succeed",
                "seed",
                "--run",
                "r",
                "--executor",
                "w",
                "--fence",
                "1",
                &ev,
            ],
            "evidence",
        ),
        (
            vec![
                "task",
                "succeed",
                "seed",
                "--run",
                "r",
                "--executor",
                "w",
                "--fence",
                "1",
                "--evidence",
                "log=md5:abc",
            ],
            "evidence.log",
        ),
        (vec!["task", "list", "--state", "SLEEPING"], "state"),
        (vec!["task", "list", "--limit", "0"], "limit"),
    ];
    for (args, field) in cases {
        let r = e.run(&args);
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        assert_eq!(r.stdout, "", "{args:?}");
        let err = r.error();
        assert_eq!(
            (err["kind"].as_str(), err["field"].as_str()),
            (Some("invalid"), Some(field)),
            "{args:?}: {r:?}"
        );
        assert!(!err["message"].as_str().unwrap().is_empty());
    }
    let r = e.run_bare(&["--store", "ftp://x", "holder", "seed"]);
    assert_eq!((r.code, r.error()["field"].as_str()), (2, Some("store")));
    let usage = e.run(&["claim", "t"]);
    assert_eq!(
        (usage.code, usage.error()["field"].as_str()),
        (2, Some("owner")),
        "a missing argument is named"
    );
    assert_eq!(e.run(&["frobnicate"]).code, 2);
    assert_eq!(e.snapshot(), before, "bad input changed the store");
}

#[test]
fn unavailable_stores_are_exit_3_and_grant_nothing() {
    let e = Env::new();
    // A folder that is not there is bad input naming the store (it will
    // not appear by retrying), and nothing is created.
    let missing = format!("sqlite:{}/no/such/dir/baton.db", e.dir.path().display());
    let r = e.run_bare(&["--store", &missing, "claim", "t", "--owner", "w"]);
    assert_eq!(
        (
            r.code,
            r.error()["kind"].as_str(),
            r.error()["field"].as_str(),
            r.error()["temporary"].as_bool()
        ),
        (2, Some("invalid"), Some("store"), Some(false)),
        "{r:?}"
    );
    assert!(
        r.error()["message"]
            .as_str()
            .unwrap()
            .contains("no such folder")
    );
    assert!(!e.dir.path().join("no").exists());
    assert_eq!(r.stdout, "");
    let junk = e.dir.path().join("junk.db");
    std::fs::write(
        &junk,
        b"not a database at all, just some bytes that are long enough to matter".repeat(50),
    )
    .unwrap();
    let r = e.run_bare(&[
        "--store",
        &format!("sqlite:{}", junk.display()),
        "claim",
        "t",
        "--owner",
        "w",
    ]);
    assert_eq!((r.code, r.error()["kind"].as_str()), (3, Some("corrupt")));
    // An etcd URL: without the fabric feature it names the feature; with it,
    // a cluster that does not answer is unavailable.
    let r = e.run_bare(&[
        "--store",
        "etcd://127.0.0.1:1/x?timeout=500ms",
        "holder",
        "t",
    ]);
    assert_eq!(r.code, 3, "{r:?}");
    if cfg!(feature = "fabric") {
        assert_eq!(r.error()["kind"].as_str(), Some("unavailable"));
    } else {
        assert_eq!(r.error()["kind"].as_str(), Some("unsupported"));
        assert!(
            r.error()["message"]
                .as_str()
                .unwrap()
                .contains("`fabric` feature")
        );
    }
}

#[test]
fn the_store_comes_from_the_flag_the_environment_or_the_default() {
    let e = Env::new();
    let env_db = e.dir.path().join("env.db");
    let out = Command::new(BIN)
        .args(["claim", "t", "--owner", "w"])
        .env("BATON_STORE", format!("sqlite:{}", env_db.display()))
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(env_db.exists(), "BATON_STORE names the store");
    let out = Command::new(BIN)
        .args(["claim", "t", "--owner", "w"])
        .env_remove("BATON_STORE")
        .current_dir(e.dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        e.dir.path().join("baton.db").exists(),
        "the default is sqlite:baton.db in the current directory"
    );
}

fn a_closed_output_pipe_is_a_normal_exit(backend: Backend) {
    let e = Env::on(backend);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let a = e.open();
    for i in 0..2000 {
        rt.block_on(a.claim(
            &Id::parse("t", &format!("pipe-{i:05}")).unwrap(),
            &Id::parse("o", "w").unwrap(),
            None,
        ))
        .unwrap();
    }
    drop(a);
    let script = format!(
        "set -o pipefail; '{BIN}' --store '{}' task list --limit 2000 | head -c 100 >/dev/null",
        e.url()
    );
    let out = Command::new("bash").args(["-c", &script]).output().unwrap();
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

#[test]
fn the_demo_runs_and_finds_no_double_grant() {
    // The demo keeps its store in a new temporary folder: this test's.
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .arg("demo")
        .env_remove("BATON_STORE")
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("double grants    0"), "{text}");
    assert!(text.contains("stale fence"), "{text}");
    // It ends with what to look at, on the store it kept, with commands
    // that run as printed: this binary is not on the PATH, so they name it
    // by its path.
    let me = std::fs::canonicalize(BIN).unwrap().display().to_string();
    let list = text
        .lines()
        .find(|l| l.trim().ends_with("--format human task list"))
        .unwrap_or_else(|| panic!("no command to look with: {text}"));
    assert!(list.trim().starts_with(&format!("{me} --store ")), "{list}");
    let ran = Command::new("sh")
        .args(["-c", list.trim()])
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    assert!(ran.status.success(), "{list}: {ran:?}");
    assert!(
        String::from_utf8_lossy(&ran.stdout).contains("SUCCEEDED"),
        "{ran:?}"
    );
    let look = list
        .trim()
        .strip_prefix(&format!("{me} --store "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap();
    let events = Command::new(BIN)
        .args(["--store", look, "events", "--limit", "5"])
        .output()
        .unwrap();
    assert!(events.status.success(), "{events:?}");
    assert_eq!(String::from_utf8_lossy(&events.stdout).lines().count(), 6);
    let out = Command::new(BIN)
        .args(["demo", "--format", "json"])
        .env_remove("BATON_STORE")
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (
            v["double_grants"].as_u64(),
            v["ok"].as_bool(),
            v["gates_passed"].as_u64(),
            v["supervised_run"]["outcome"].as_str(),
        ),
        (Some(0), Some(true), Some(3), Some("lost"))
    );
    assert!(
        v["supervised_run"]["stopped_before_lease_end_ms"]
            .as_i64()
            .unwrap()
            > 0,
        "{v}"
    );
    // The graph act: six nodes, each after its dependencies.
    let order: Vec<&str> = v["graph"]["order"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(order.len(), 6, "{v}");
    assert_eq!((order[0], order[5]), ("fetch", "package"), "{v}");
    assert_eq!(v["graph"]["in_dependency_order"], true);
}

fn an_answer_that_cannot_be_written_is_not_a_success(backend: Backend) {
    let e = Env::on(backend);
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = Command::new(BIN)
        .args(["--store", &e.url(), "claim", "unseen", "--owner", "w"])
        .env_remove("BATON_STORE")
        .stdout(full)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "the grant was made but its fence never reached the caller: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err: Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(err["error"]["kind"], "indeterminate");
    // A read that cannot be written changed nothing: exit 3.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = Command::new(BIN)
        .args(["--store", &e.url(), "holder", "unseen"])
        .env_remove("BATON_STORE")
        .stdout(full)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    // The grant is there, as the exit status said it might be.
    assert_eq!(e.run(&["holder", "unseen"]).code, 0);
}

#[test]
fn completions_for_every_shell() {
    let e = Env::new();
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef baton"),
        ("fish", "complete -c baton"),
    ] {
        let r = e.run_bare(&["completions", shell]);
        assert_eq!(r.code, 0, "{shell}: {r:?}");
        assert!(
            r.stdout.contains(marker),
            "{shell}: {}",
            &r.stdout[..200.min(r.stdout.len())]
        );
        assert!(
            r.stdout.contains("heartbeat"),
            "{shell} completes subcommands"
        );
    }
    assert!(!e.db().exists(), "no store was opened");
}

#[test]
fn help_and_version_exit_0() {
    for arg in ["--help", "--version"] {
        let out = Command::new(BIN).arg(arg).output().unwrap();
        assert!(out.status.success(), "{arg}");
        assert!(!out.stdout.is_empty());
    }
}

#[test]
fn injected_faults_give_exit_3_and_exit_4() {
    let e = Env::new();
    // Unavailable: nothing was applied, do not start work.
    let r = e.run_bare(&[
        "--store",
        "memory:?fault=unavailable",
        "claim",
        "t",
        "--owner",
        "w",
    ]);
    assert_eq!(
        (r.code, r.error()["kind"].as_str(), r.stdout.as_str()),
        (3, Some("unavailable"), "")
    );
    // Indeterminate: it may have applied; read before retrying.
    let r = e.run_bare(&[
        "--store",
        "memory:?fault=indeterminate",
        "claim",
        "t",
        "--owner",
        "w",
    ]);
    assert_eq!(
        (r.code, r.error()["kind"].as_str(), r.stdout.as_str()),
        (4, Some("indeterminate"), "")
    );
    // Reads are not faulted, and the parameter exists only on memory: stores.
    let r = e.run_bare(&["--store", "memory:?fault=indeterminate", "holder", "t"]);
    assert_eq!(r.code, 5);
    let r = e.run_bare(&["--store", "sqlite:x.db?fault=unavailable", "holder", "t"]);
    assert_eq!((r.code, r.error()["field"].as_str()), (2, Some("store")));
}

/// `events` pages every task's events; `events --follow` (a real process)
/// prints what is already there, then each event as other processes write
/// it, in order, none twice, until it is stopped with SIGTERM (exit 0); a
/// reader that closes the pipe ends it too.
#[test]
fn events_follow_prints_every_tasks_events_as_they_are_written() {
    use std::io::BufRead;
    let e = Env::new();
    e.ok(&["claim", "f-1", "--owner", "w"]);
    e.ok(&["claim", "f-2", "--owner", "w"]);
    let page = e.run(&["events", "--limit", "1"]).lines();
    assert_eq!(page[0]["task"].as_str(), Some("f-1"), "{page:?}");
    let cursor = page[1]["next"].as_str().unwrap().to_owned();
    let rest = e.run(&["events", "--after", &cursor]).lines();
    assert_eq!(rest.len(), 1, "{rest:?}");
    assert_eq!(rest[0]["task"].as_str(), Some("f-2"));
    assert_eq!(e.run(&["events", "--after", "x"]).code, 2);

    let mut child = Command::new(BIN)
        .args(["--store", &e.url(), "events", "--follow"])
        .env_remove("BATON_STORE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(serde_json::from_str(&line).unwrap()).is_err() {
                break;
            }
        }
    });
    let next = |what: &str| {
        rx.recv_timeout(std::time::Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("no event for {what}"))
    };
    assert_eq!(next("f-1")["task"].as_str(), Some("f-1"));
    assert_eq!(next("f-2")["task"].as_str(), Some("f-2"));
    // Written by other processes after the follower caught up.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut seqs = Vec::new();
    for i in 3..=6 {
        let t = format!("f-{i}");
        e.ok(&["claim", &t, "--owner", "w"]);
        let ev = next(&t);
        assert_eq!(ev["task"].as_str(), Some(t.as_str()), "{ev}");
        seqs.push(ev["seq"].as_u64().unwrap());
    }
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in order: {seqs:?}");
    assert!(
        rx.recv_timeout(std::time::Duration::from_millis(1500))
            .is_err(),
        "nothing twice"
    );
    let pid = child.id();
    let killed = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "SIGTERM ends it cleanly");
    reader.join().unwrap();

    // Human lines, one per event; `head` closing the pipe ends it.
    let out = Command::new("sh")
        .args([
            "-c",
            &format!(
                "{BIN} --store '{}' --format human events --follow | head -n 2",
                e.url()
            ),
        ])
        .env_remove("BATON_STORE")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].contains("f-1") && lines[0].contains("new->CLAIMED"),
        "{text}"
    );
}

/// `run --format human` reports in a sentence on standard error; the
/// JSON report stays the default (and what `--report` writes).
#[test]
fn run_reports_in_words_with_format_human() {
    let e = Env::new();
    let r = e.run(&[
        "--format", "human", "run", "job-h", "--owner", "w", "--", "sh", "-c", "exit 3",
    ]);
    assert_eq!(r.code, 3, "{r:?}");
    let line = r.stderr.trim();
    assert!(
        line.starts_with(
            "baton run: job-h failed: the command exited 3; fence 1, attempt 1, held by w"
        ),
        "{r:?}"
    );
    assert!(
        serde_json::from_str::<Value>(line).is_err(),
        "not JSON: {line}"
    );
    let r = e.run(&["run", "job-j", "--owner", "w", "--", "true"]);
    assert_eq!(r.code, 0, "{r:?}");
    let v: Value = serde_json::from_str(r.stderr.trim()).unwrap();
    assert_eq!(v["outcome"].as_str(), Some("completed"));
}

/// Every read the CLI offers, on a store that is not there yet, answers
/// as the empty store a write would create (an empty list, a task not
/// found), says on stderr that there is no store there, and creates
/// nothing: no database, log, gate or sled directory, in the working
/// directory (the default store) or where `--store` points. A write then
/// creates it and the reads answer from it.
fn a_read_never_creates_a_store(backend: Backend) {
    let env = Env::on(backend);
    // Each read, and its exit status on an empty store.
    let reads: &[(&[&str], i32)] = &[
        (&["task", "list"], 0),
        (&["task", "list", "--state", "BLOCKED"], 0),
        (&["task", "show", "t1"], 5),
        (&["task", "events", "t1"], 5),
        (&["task", "gate", "t1"], 5),
        (&["events"], 0),
        (&["holder", "t1"], 5),
        (&["verify", "t1", "--fence", "1"], 5),
        (&["graph", "show"], 0),
        (&["schedule", "list"], 0),
        (&["queue", "show", "q"], 0),
        (&["limit", "show", "k"], 0),
        (&["limit", "list"], 0),
        (&["outbox", "pending"], 0),
    ];
    let empty = |what: &str| {
        let left: Vec<_> = std::fs::read_dir(env.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "{what} created {left:?}");
    };
    for (args, code) in reads {
        let r = env.run(args);
        assert_eq!(r.code, *code, "{args:?}: {r:?}");
        let note: Value = serde_json::from_str(r.stderr.lines().next().unwrap_or("")).unwrap();
        let note = note["note"].as_str().unwrap_or_default();
        assert!(
            note.contains(&env.db().display().to_string()) && note.contains("creates none"),
            "{args:?}: {r:?}"
        );
        empty(&format!("{args:?}"));
        if backend == Backend::Sqlite {
            // The default store, in the working directory.
            let r = env.run_bare(args);
            assert_eq!(r.code, *code, "{args:?} on the default store: {r:?}");
            assert!(r.stderr.contains("no store at baton.db"), "{r:?}");
            empty(&format!("{args:?} on the default store"));
        }
    }
    assert_eq!(env.run(&["task", "list"]).stdout, "", "no task: no line");
    // A write creates the store; the reads then answer from it, with no note.
    env.ok(&["claim", "t1", "--owner", "w", "--ttl", "30s"]);
    assert!(env.db().exists());
    let listed = env.run(&["task", "list"]);
    assert_eq!(listed.code, 0, "{listed:?}");
    assert!(listed.stderr.is_empty(), "{listed:?}");
    assert_eq!(env.ok(&["holder", "t1"])["owner"], "w");
}

/// `command` run under a terminal (a pseudo-terminal, as `script` makes
/// one): what the terminal showed, and the exit status.
fn on_a_terminal(command: &str, dir: &Path) -> (String, i32) {
    let out = Command::new("script")
        .args(["-qec", command, "/dev/null"])
        .current_dir(dir)
        .env_remove("BATON_STORE")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&out.stdout).replace('\r', ""),
        out.status.code().unwrap_or(-1),
    )
}

/// On a terminal the CLI writes for a person, as gh and kubectl do: tables
/// and settings as text, errors as a line naming the field, a mistyped
/// command with clap's "did you mean"; piped, or with `--format json`, it
/// writes JSON as scripts read it.
#[test]
fn a_terminal_reads_text_and_a_pipe_reads_json() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("b.db").display());
    let baton = |args: &str| format!("{BIN} --store {store} {args}");
    let (shown, code) = on_a_terminal(&baton("add build-1 --queue ci"), dir.path());
    assert_eq!(code, 0, "{shown}");
    let (shown, code) = on_a_terminal(&baton("task list"), dir.path());
    assert_eq!(code, 0, "{shown}");
    assert!(
        shown.contains("TASK") && shown.contains("build-1"),
        "{shown}"
    );
    assert!(!shown.contains('{'), "no JSON on a terminal: {shown}");
    // Asked for JSON, JSON.
    let (shown, _) = on_a_terminal(&baton("--format json task list"), dir.path());
    let first: Value = serde_json::from_str(shown.lines().next().unwrap()).unwrap();
    assert_eq!(first["task"], "build-1", "{shown}");
    // An error: a line for a person, the field named, the same status.
    let (shown, code) = on_a_terminal(&baton("claim x --owner w --ttl 0s"), dir.path());
    assert_eq!(code, 2, "{shown}");
    assert!(
        shown.starts_with("error: ") && shown.contains("(field: ttl)"),
        "{shown}"
    );
    // A mistyped command: clap's words, with what was meant.
    let (shown, code) = on_a_terminal(&format!("{BIN} clam x"), dir.path());
    assert_eq!(code, 2, "{shown}");
    assert!(
        shown.contains("unrecognized subcommand") && shown.contains("claim"),
        "did you mean: {shown}"
    );
    assert!(!shown.contains("\"kind\""), "{shown}");
    // Piped: JSON, errors too.
    let out = Command::new(BIN).args(["clam", "x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e: Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(e["error"]["kind"], "invalid");
    let out = Command::new(BIN)
        .args(["--store", &store, "task", "list"])
        .output()
        .unwrap();
    let first: Value =
        serde_json::from_slice(out.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(first["task"], "build-1");
}

/// `baton --help` groups its commands by what they are for, lists each
/// once with the first sentence of what it does, and is wrapped (to 100
/// columns off a terminal); `--store`'s help names the default store.
#[test]
fn the_help_groups_the_commands_and_fits_the_width() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for heading in [
        "Leases (a worker's):",
        "The work graph:",
        "The registry (declared tasks):",
        "Operators:",
        "Server and tools:",
    ] {
        assert!(help.lines().any(|l| l == heading), "{heading} in {help}");
    }
    assert!(
        !help.contains("Other:"),
        "every command has its group: {help}"
    );
    for name in [
        "claim",
        "renew",
        "release",
        "recover",
        "report",
        "complete",
        "checkpoint",
        "fail",
        "cancel",
        "run",
        "add",
        "next",
        "graph",
        "holder",
        "verify",
        "task",
        "events",
        "sweep",
        "prune",
        "outbox",
        "schedule",
        "limit",
        "queue",
        "demo",
        "serve",
        "bench",
        "completions",
        "guard",
    ] {
        let listed = help
            .lines()
            .filter(|l| l.split_whitespace().next() == Some(name) && l.starts_with("  "))
            .count();
        assert_eq!(listed, 1, "{name} once in {help}");
    }
    let widest = help.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    assert!(widest <= 100, "{widest} columns: {help}");
    let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("Without it or BATON_STORE: sqlite:baton.db, in the working directory"),
        "{help}"
    );
}

/// Every duration that is wrong is refused in one voice, naming its
/// field: out of range, the rule and what was given as it was given; not
/// a duration, how one is written too. Nothing is applied.
#[test]
fn durations_are_refused_in_one_voice() {
    let forms = baton_core::catalogue::DURATION_FORMS;
    for (args, field, tail) in [
        (
            &["claim", "x", "--owner", "w", "--ttl", "5x"][..],
            "ttl",
            "(got \"5x\")",
        ),
        (
            &["claim", "x", "--owner", "w", "--lock-delay", "9d"][..],
            "lock_delay",
            "(got 9d)",
        ),
        (
            &["schedule", "add", "n", "--every", "0s"][..],
            "every",
            "(got 0s)",
        ),
        (
            &["schedule", "add", "n", "--every", "soon"][..],
            "every",
            "(got \"soon\")",
        ),
        (
            &["next", "--owner", "w", "--wait", "2q"][..],
            "wait",
            "(got \"2q\")",
        ),
        (&["add", "t", "--timeout", "8d"][..], "timeout", "(got 8d)"),
    ] {
        let out = Command::new(BIN)
            .args(["--store", "memory:"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let e: Value = serde_json::from_slice(&out.stderr).unwrap();
        let message = e["error"]["message"].as_str().unwrap();
        assert_eq!(e["error"]["field"], field, "{args:?}: {e}");
        assert!(
            message.starts_with("must be a duration"),
            "{args:?}: {message}"
        );
        assert!(message.ends_with(tail), "{args:?}: {message}");
        if tail.contains('"') {
            assert!(message.contains(forms), "how one is written: {message}");
        }
    }
}
