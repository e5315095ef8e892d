//! The work graph through the binary: `add` (one task or a graph file),
//! `next`, `task list --state READY|BLOCKED`, `graph show`, `run --next`,
//! and `next --wait` across processes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[macro_use]
mod common;

use common::Backend;

const BIN: &str = env!("CARGO_BIN_EXE_baton");

per_backend!(
    a_graph_drains_in_dependency_order,
    a_bad_graph_adds_nothing,
    run_next_runs_whatever_next_grants,
    prune_forget_after_frees_ids_from_the_cli,
);

struct Env {
    dir: tempfile::TempDir,
    store: String,
}

impl Env {
    fn new(backend: Backend) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let store = match backend {
            Backend::Sqlite => format!("sqlite:{}", dir.path().join("b.db").display()),
            Backend::Sled => format!("sled:{}", dir.path().join("b.sled").display()),
        };
        Env { dir, store }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.arg("--store").arg(&self.store).args(args);
        for v in ["BATON_STORE", "BATON_TASK", "BATON_OWNER", "BATON_FENCE"] {
            c.env_remove(v);
        }
        c
    }

    /// Exit status and every JSON line printed.
    fn baton(&self, args: &[&str]) -> (i32, Vec<Value>) {
        let out = self.cmd(args).output().unwrap();
        let lines = String::from_utf8_lossy(&out.stdout)
            .lines()
            .chain(String::from_utf8_lossy(&out.stderr).lines())
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        (out.status.code().unwrap_or(-1), lines)
    }

    fn add_graph(&self, graph: &str) -> (i32, Vec<Value>) {
        let path = self.dir.path().join("graph.json");
        std::fs::write(&path, graph).unwrap();
        self.baton(&["add", "--file", path.to_str().unwrap()])
    }
}

const DIAMOND: &str = r#"{"nodes": [
    {"task": "d", "after": ["b", "c"]},
    {"task": "b", "after": ["a"], "priority": 1},
    {"task": "c", "after": ["a"]},
    {"task": "a"}
]}"#;

fn a_graph_drains_in_dependency_order(backend: Backend) {
    let env = Env::new(backend);
    let (code, out) = env.add_graph(DIAMOND);
    assert_eq!(code, 0, "{out:?}");
    assert_eq!(out[0]["added"], 4);
    // Again: an idempotent repeat.
    let (code, out) = env.add_graph(DIAMOND);
    assert_eq!((code, &out[0]["repeated"]), (0, &Value::from(4)));
    let (code, out) = env.baton(&["claim", "d", "--owner", "w"]);
    assert_eq!((code, out[0]["refused"].as_str()), (1, Some("not_ready")));
    let (code, out) = env.baton(&["task", "list", "--state", "READY"]);
    assert_eq!(code, 0);
    let ready: Vec<&str> = out.iter().filter_map(|v| v["task"].as_str()).collect();
    assert_eq!(ready, ["a"]);
    let mut order = Vec::new();
    loop {
        let (code, out) = env.baton(&["next", "--owner", "w", "--ttl", "10m"]);
        if code != 0 {
            assert_eq!(code, 1);
            assert_eq!(out[0]["refused"], "drained", "{out:?}");
            assert_eq!(out[0]["blocked"], 0);
            break;
        }
        let task = out[0]["task"].as_str().unwrap().to_owned();
        let fence = out[0]["fence"].to_string();
        // Nothing else is ready while `a` is held: none_ready, with counts.
        if task == "a" {
            let (code, o) = env.baton(&["next", "--owner", "w2"]);
            assert_eq!((code, o[0]["refused"].as_str()), (1, Some("none_ready")));
            assert_eq!((&o[0]["held"], &o[0]["queued"]), (&1.into(), &3.into()));
        }
        let (code, o) = env.baton(&["complete", &task, "--owner", "w", "--fence", &fence]);
        assert_eq!(code, 0, "{o:?}");
        order.push(task);
    }
    // b before c: the higher priority among the ready.
    assert_eq!(order, ["a", "b", "c", "d"]);
    let out = env
        .cmd(&["graph", "show", "--format", "dot"])
        .output()
        .unwrap();
    let dot = String::from_utf8(out.stdout).unwrap();
    assert!(dot.starts_with("digraph baton {"), "{dot}");
    for edge in [
        r#""a" -> "b""#,
        r#""a" -> "c""#,
        r#""b" -> "d""#,
        r#""c" -> "d""#,
    ] {
        assert!(dot.contains(edge), "{edge} in {dot}");
    }
    assert!(dot.contains("SUCCEEDED"), "{dot}");
    let (code, _) = env.baton(&["task", "show", "a", "--format", "dot"]);
    assert_eq!(code, 2, "dot is for graph show only");
}

fn a_bad_graph_adds_nothing(backend: Backend) {
    let env = Env::new(backend);
    let (code, out) = env.add_graph(
        r#"[{"task": "x", "after": ["y"]}, {"task": "y", "after": ["x"]}, {"task": "z"}]"#,
    );
    assert_eq!(code, 2, "{out:?}");
    assert_eq!(out[0]["error"]["field"], "depends_on");
    assert!(
        out[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cycle through x, y")
    );
    let (code, out) = env.add_graph(r#"[{"task": "z"}, {"task": "w", "after": ["ghost"]}]"#);
    assert_eq!(code, 2, "{out:?}");
    assert!(
        out[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("w -> ghost")
    );
    let (code, out) = env.add_graph(r#"[{"task": "z", "bogus": 1}]"#);
    assert_eq!(
        (code, out[0]["error"]["field"].as_str()),
        (2, Some("bogus"))
    );
    let (code, out) = env.baton(&["add", "solo", "--after", "ghost"]);
    assert_eq!(
        (code, out[0]["error"]["field"].as_str()),
        (2, Some("depends_on"))
    );
    // A run-time limit is a duration within a lease's bounds, by file or option.
    for bad in [r#""0""#, r#""8d""#, "90"] {
        let (code, out) = env.add_graph(&format!(r#"[{{"task": "z", "timeout": {bad}}}]"#));
        assert_eq!(
            (code, out[0]["error"]["field"].as_str()),
            (2, Some("timeout")),
            "{bad}: {out:?}"
        );
    }
    let (code, out) = env.baton(&["add", "solo", "--timeout", "soon"]);
    assert_eq!(
        (code, out[0]["error"]["field"].as_str()),
        (2, Some("timeout"))
    );
    for bad in [
        "--not-before=yesterday-ish",
        "--not-before=10000000d",
        "--not-before=-5m",
    ] {
        let (code, out) = env.baton(&["add", "solo", bad]);
        assert_eq!(
            (code, out[0]["error"]["field"].as_str()),
            (2, Some("not_before")),
            "{bad}: {out:?}"
        );
    }
    for (bad, field) in [
        (r#"{"max_attempts": 0}"#, "max_attempts"),
        (r#"{"backoff": "8d"}"#, "backoff"),
        (r#"{"factor": 11}"#, "backoff_factor"),
        (r#"{"tries": 3}"#, "tries"),
    ] {
        let (code, out) = env.add_graph(&format!(r#"[{{"task": "z", "retry": {bad}}}]"#));
        assert_eq!(
            (code, out[0]["error"]["field"].as_str()),
            (2, Some(field)),
            "{bad}: {out:?}"
        );
    }
    let (code, out) = env.add_graph(r#"[{"task": "z", "not_before": 5}]"#);
    assert_eq!(
        (code, out[0]["error"]["field"].as_str()),
        (2, Some("not_before")),
        "{out:?}"
    );
    let (code, out) = env.baton(&["graph", "show"]);
    assert_eq!(code, 0);
    assert!(out.is_empty(), "nothing was added: {out:?}");
    // A task added, then again with another definition: manifest_conflict.
    let (code, out) = env.add_graph(r#"[{"task": "limited", "timeout": "90s"}]"#);
    assert_eq!(code, 0, "{out:?}");
    let (_, shown) = env.baton(&["task", "show", "limited"]);
    assert_eq!(shown[0]["node"]["timeout_ms"], 90_000, "{shown:?}");
    let (code, out) = env.baton(&["add", "limited", "--timeout", "2m"]);
    assert_eq!(
        (code, out[0]["refused"].as_str()),
        (1, Some("manifest_conflict"))
    );
    // Put off: refused until its start, by an absolute time or a delay.
    for (task, start) in [("tomorrow", "1d"), ("new-year", "2099-01-01T00:00:00Z")] {
        assert_eq!(
            env.baton(&["add", task, "--queue", "later", "--not-before", start])
                .0,
            0
        );
        let (code, out) = env.baton(&["claim", task, "--owner", "w"]);
        assert_eq!(
            (code, out[0]["refused"].as_str()),
            (1, Some("scheduled")),
            "{out:?}"
        );
    }
    let (code, out) = env.baton(&["next", "--owner", "w", "--queue", "later"]);
    assert_eq!(
        (code, out[0]["refused"].as_str(), &out[0]["queued"]),
        (1, Some("none_ready"), &Value::from(2)),
        "{out:?}"
    );
    assert_eq!(env.baton(&["add", "one", "--priority", "3"]).0, 0);
    let (code, out) = env.baton(&["add", "one", "--priority", "4"]);
    assert_eq!(
        (code, out[0]["refused"].as_str()),
        (1, Some("manifest_conflict"))
    );
}

fn run_next_runs_whatever_next_grants(backend: Backend) {
    let env = Env::new(backend);
    assert_eq!(
        env.add_graph(r#"[{"task": "first"}, {"task": "second", "after": ["first"]}]"#)
            .0,
        0
    );
    let seen = env.dir.path().join("seen");
    let script = format!("echo \"$BATON_TASK\" >> {}", seen.display());
    for _ in 0..2 {
        let out = env
            .cmd(&["run", "--next", "--owner", "w", "--", "sh", "-c", &script])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    }
    let seen = std::fs::read_to_string(&seen).unwrap();
    assert_eq!(seen, "first\nsecond\n");
    let (code, out) = env.baton(&["task", "show", "second"]);
    assert_eq!((code, out[0]["state"].as_str()), (0, Some("SUCCEEDED")));
    // Nothing left: refused `drained` (run's own 201) and nothing runs.
    let out = env
        .cmd(&["run", "--next", "--owner", "w", "--", "false"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(201), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("drained"));
}

/// `next --wait` in separate processes on one SQLite file: each waits
/// while nothing is ready and takes a task as soon as one is; none takes
/// the same task.
#[test]
fn waiting_processes_each_take_one_task_as_it_becomes_ready() {
    let env = Env::new(Backend::Sqlite);
    // A held task keeps the queue from being drained while they wait.
    assert_eq!(env.baton(&["add", "gate"]).0, 0);
    let (_, g) = env.baton(&["next", "--owner", "keeper", "--ttl", "10m"]);
    let fence = g[0]["fence"].to_string();
    let nodes: Vec<String> = (0..4)
        .map(|i| format!(r#"{{"task": "job-{i}", "after": ["gate"]}}"#))
        .collect();
    assert_eq!(env.add_graph(&format!("[{}]", nodes.join(","))).0, 0);
    let started = Instant::now();
    let waiters: Vec<_> = (0..4)
        .map(|i| {
            env.cmd(&["next", "--owner", &format!("w{i}"), "--wait", "30s"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1_000));
    let (code, _) = env.baton(&["complete", "gate", "--owner", "keeper", "--fence", &fence]);
    assert_eq!(code, 0);
    let mut taken = Vec::new();
    for w in waiters {
        let out = w.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        taken.push(v["task"].as_str().unwrap().to_owned());
    }
    assert!(started.elapsed() >= Duration::from_millis(1_000));
    assert!(started.elapsed() < Duration::from_secs(20));
    taken.sort();
    assert_eq!(taken, ["job-0", "job-1", "job-2", "job-3"]);
}

/// A task added with retries: a failure before the last attempt puts it
/// off by its backoff (a claim meanwhile is refused `scheduled`), then it
/// is granted again as a new attempt; the last attempt's failure is final.
#[test]
fn a_failed_attempt_is_tried_again_after_its_backoff() {
    let env = Env::new(Backend::Sqlite);
    let (code, out) = env.baton(&["add", "flaky", "--max-attempts", "2", "--backoff", "300ms"]);
    assert_eq!(code, 0, "{out:?}");
    let (code, g) = env.baton(&["claim", "flaky", "--owner", "w"]);
    assert_eq!(code, 0, "{g:?}");
    let fence = g[0]["fence"].to_string();
    let (code, out) = env.baton(&[
        "fail",
        "flaky",
        "--owner",
        "w",
        "--fence",
        &fence,
        "--error",
        r#"{"exit": 3}"#,
    ]);
    assert_eq!(
        (code, out[0]["state"].as_str()),
        (0, Some("REGISTERED")),
        "{out:?}"
    );
    assert_eq!(out[0]["error"], serde_json::json!({"exit": 3}));
    let (code, out) = env.baton(&["claim", "flaky", "--owner", "w"]);
    assert_eq!(
        (code, out[0]["refused"].as_str()),
        (1, Some("scheduled")),
        "{out:?}"
    );
    std::thread::sleep(Duration::from_millis(450));
    let (code, g) = env.baton(&["claim", "flaky", "--owner", "w"]);
    assert_eq!((code, &g[0]["attempt"]), (0, &Value::from(2)), "{g:?}");
    let fence = g[0]["fence"].to_string();
    let (code, out) = env.baton(&["fail", "flaky", "--owner", "w", "--fence", &fence]);
    assert_eq!(
        (code, out[0]["state"].as_str()),
        (0, Some("FAILED")),
        "{out:?}"
    );
}

/// Four `schedule tick` processes at once: the tasks they made between them.
fn four_tick_processes(env: &Env) -> Vec<String> {
    let ticks: Vec<_> = (0..4)
        .map(|_| {
            env.cmd(&["schedule", "tick"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut made = Vec::new();
    for t in ticks {
        let o = t.wait_with_output().unwrap();
        assert!(o.status.success(), "{o:?}");
        for line in String::from_utf8_lossy(&o.stdout).lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            made.push(v["task"].as_str().unwrap().to_owned());
        }
    }
    made
}

/// Schedulers in four processes tick at once: the store makes the
/// period's one task once. `schedule run` is a scheduler of its own that
/// stops cleanly on SIGTERM.
#[test]
fn schedulers_in_several_processes_make_one_task_per_period() {
    let env = Env::new(Backend::Sqlite);
    let (code, out) = env.baton(&[
        "schedule", "add", "nightly", "--every", "1h", "--queue", "cron",
    ]);
    assert_eq!(code, 0, "{out:?}");
    // A setting's write answers with the setting: the schedule, its
    // period and its next run, not the record that holds it.
    assert_eq!(
        (
            out[0]["schedule"].as_str(),
            &out[0]["every_ms"],
            out[0]["idempotent"].as_bool()
        ),
        (
            Some("schedule:nightly"),
            &serde_json::json!(3_600_000),
            Some(false)
        ),
        "{out:?}"
    );
    assert!(
        out[0]["next_run"].as_str() > out[0]["since"].as_str(),
        "{out:?}"
    );
    assert!(out[0].get("revision").is_none(), "{out:?}");
    // For a person: a duration as one, a time with how far it is.
    let human = env
        .cmd(&["--format", "human", "schedule", "list"])
        .output()
        .unwrap();
    let human = String::from_utf8_lossy(&human.stdout);
    assert!(
        human.contains("every ") && human.contains("1h00m"),
        "{human}"
    );
    assert!(
        !human.contains("every_ms") && !human.contains("3600000"),
        "{human}"
    );
    assert!(
        human.contains("(in 59m") || human.contains("(in 1h00m"),
        "{human}"
    );
    let made = four_tick_processes(&env);
    assert_eq!(made.len(), 1, "one task for the period: {made:?}");
    assert!(made[0].starts_with("nightly@"), "{made:?}");
    let run = env
        .cmd(&["schedule", "run", "--tick", "100ms"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(600));
    let pid = run.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let o = run.wait_with_output().unwrap();
    assert!(o.status.success(), "{o:?}");
    assert!(
        o.stdout.is_empty(),
        "nothing more in the same period: {o:?}"
    );
    let (code, list) = env.baton(&["schedule", "list"]);
    assert_eq!(code, 0);
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["every_ms"], 3_600_000);
    let (code, ready) = env.baton(&["task", "list", "--state", "READY", "--queue", "cron"]);
    assert_eq!(code, 0);
    assert_eq!(ready.len(), 1, "{ready:?}");
    let (code, out) = env.baton(&["schedule", "add", "nightly", "--every", "2h"]);
    assert_eq!(
        (code, out[0]["refused"].as_str()),
        (1, Some("manifest_conflict"))
    );
}

/// `schedule add --cron`: a schedule at the times a cron expression names
/// (UTC), ticked by four scheduler processes at once, makes one task per
/// named time; a bad expression is refused naming `cron` (exit 2, nothing
/// written), and a schedule needs exactly one of --every and --cron.
#[test]
fn a_cron_schedule_makes_one_task_per_named_time_across_processes() {
    let env = Env::new(Backend::Sqlite);
    let (code, out) = env.baton(&["schedule", "add", "bad", "--cron", "61 * * * *"]);
    assert_eq!(code, 2, "{out:?}");
    assert_eq!(out[0]["error"]["field"], "cron", "{out:?}");
    let (code, list) = env.baton(&["schedule", "list"]);
    assert_eq!((code, list.len()), (0, 0), "{list:?}");
    for args in [
        &["schedule", "add", "neither"][..],
        &[
            "schedule",
            "add",
            "both",
            "--every",
            "1h",
            "--cron",
            "0 2 * * *",
        ][..],
    ] {
        let o = env.cmd(args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
    }
    let (code, out) = env.baton(&[
        "schedule",
        "add",
        "everysec",
        "--cron",
        "* * * * * *",
        "--queue",
        "cron",
    ]);
    assert_eq!(code, 0, "{out:?}");
    let (code, list) = env.baton(&["schedule", "list"]);
    assert_eq!(code, 0);
    assert_eq!(list[0]["cron"], "* * * * * *", "{list:?}");
    assert!(list[0]["every_ms"].is_null(), "{list:?}");
    let mut made = Vec::new();
    for _ in 0..2 {
        // Past the next whole second: a named time.
        std::thread::sleep(Duration::from_millis(1100));
        made.extend(four_tick_processes(&env));
    }
    let mut distinct = made.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(made.len(), distinct.len(), "a time made twice: {made:?}");
    assert!(made.len() >= 2, "{made:?}");
    assert!(
        made.iter()
            .all(|t| t.starts_with("everysec@") && t.ends_with(".000Z")),
        "{made:?}"
    );
    let (code, ready) = env.baton(&["task", "list", "--state", "READY", "--queue", "cron"]);
    assert_eq!(code, 0);
    assert_eq!(ready.len(), distinct.len(), "{ready:?}");
}

/// A key limited to 2 against 8 worker processes, each running `run
/// --next` until the queue says it is drained: every child records how many
/// children of the key are alive as it starts (a file per child, removed
/// before it exits, so a file only exists within its grant). Never more
/// than 2, 2 reached, every task done once, and the workers stop on
/// `drained` (tasks waiting for a slot keep the queue from being drained).
#[test]
fn a_key_limit_holds_against_eight_worker_processes() {
    let env = Env::new(Backend::Sqlite);
    let (code, out) = env.baton(&["limit", "set", "repo", "2", "--operator", "alice"]);
    assert_eq!(code, 0, "{out:?}");
    assert_eq!(
        (out[0]["key"].as_str(), &out[0]["limit"]),
        (Some("repo"), &serde_json::json!(2)),
        "the setting: {out:?}"
    );
    for i in 0..10 {
        let t = format!("job-{i}");
        let (code, out) = env.baton(&["add", &t, "--queue", "kq", "--key", "repo"]);
        assert_eq!(code, 0, "{out:?}");
    }
    let live = env.dir.path().join("live");
    std::fs::create_dir(&live).unwrap();
    let counts = env.dir.path().join("counts");
    let child = format!(
        "touch {live}/$BATON_TASK; ls {live} | wc -l >> {counts}; sleep 0.3; rm {live}/$BATON_TASK",
        live = live.display(),
        counts = counts.display()
    );
    let worker = |i: usize| {
        format!(
            r#"while :; do
  out=$("$BATON" --store '{store}' run --next --queue kq --owner w{i} --ttl 10m -- sh -c '{child}' 2>&1 >/dev/null); c=$?
  if [ $c = 201 ]; then
    case "$out" in *drained*) exit 0;; esac
    sleep 0.05; continue
  fi
  [ $c = 0 ] || {{ echo "$out" >&2; exit $c; }}
done"#,
            store = env.store,
        )
    };
    let workers: Vec<_> = (0..8)
        .map(|i| {
            Command::new("sh")
                .args(["-c", &worker(i)])
                .env("BATON", BIN)
                .env_remove("BATON_STORE")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for w in workers {
        let o = w.wait_with_output().unwrap();
        assert!(o.status.success(), "{o:?}");
    }
    let counts: Vec<usize> = std::fs::read_to_string(&counts)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(counts.len(), 10, "each task ran once: {counts:?}");
    assert!(counts.iter().all(|&n| n <= 2), "over the limit: {counts:?}");
    assert!(counts.contains(&2), "two ran at once: {counts:?}");
    for i in 0..10 {
        let (code, out) = env.baton(&["task", "show", &format!("job-{i}")]);
        assert_eq!((code, out[0]["state"].as_str()), (0, Some("SUCCEEDED")));
    }
    let (code, out) = env.baton(&["limit", "show", "repo"]);
    assert_eq!(code, 0, "{out:?}");
    assert_eq!(out[0]["limit"], 2);
    assert_eq!(out[0]["holders"], serde_json::json!([]));
}

/// A queue's retry policy, the hard way: the supervisor of the first
/// attempt is killed with SIGKILL mid-run; once its lease has run out the
/// task is not granted again before the queue's backoff, and then a
/// second worker process runs attempt 2 to success.
#[test]
fn a_killed_workers_attempt_is_retried_after_the_queues_backoff() {
    let env = Env::new(Backend::Sqlite);
    let (code, out) = env.baton(&[
        "queue",
        "set",
        "jobs",
        "--max-attempts",
        "2",
        "--backoff",
        "3s",
        "--backoff-factor",
        "1",
        "--operator",
        "alice",
    ]);
    assert_eq!(code, 0, "{out:?}");
    let (code, out) = env.baton(&["queue", "show", "jobs"]);
    assert_eq!(
        (code, out[0]["retry"]["max_attempts"].as_u64()),
        (0, Some(2)),
        "{out:?}"
    );
    // A factor written as README writes it, to a thousandth; out of bounds named.
    let (code, out) = env.baton(&[
        "add",
        "grows",
        "--max-attempts",
        "3",
        "--backoff",
        "1s",
        "--backoff-factor",
        "1.5",
    ]);
    assert_eq!(code, 0, "{out:?}");
    let (_, shown) = env.baton(&["task", "show", "grows"]);
    assert_eq!(shown[0]["node"]["retry"]["factor"], 1.5, "{shown:?}");
    let (code, out) = env.baton(&[
        "add",
        "shrinks",
        "--max-attempts",
        "3",
        "--backoff-factor",
        "0.5",
    ]);
    assert_eq!(code, 2, "{out:?}");
    assert!(format!("{out:?}").contains("backoff_factor"), "{out:?}");
    let (code, out) = env.baton(&["add", "job", "--queue", "jobs"]);
    assert_eq!(code, 0, "{out:?}");
    let started = env.dir.path().join("started");
    let script = format!("touch {}; sleep 60", started.display());
    let mut first = env
        .cmd(&[
            "run", "--next", "--queue", "jobs", "--owner", "w1", "--ttl", "2s", "--", "sh", "-c",
            &script,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !started.exists() {
        assert!(Instant::now() < deadline, "attempt 1 never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    first.kill().unwrap();
    first.wait().unwrap();
    // Its lease runs out unrenewed.
    loop {
        let (_, h) = env.baton(&["holder", "job"]);
        if h[0]["live"] == Value::Bool(false) {
            break;
        }
        assert!(Instant::now() < deadline, "the lease never ran out: {h:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (code, out) = env.baton(&["next", "--queue", "jobs", "--owner", "w2"]);
    assert_eq!(
        (code, out[0]["refused"].as_str()),
        (1, Some("none_ready")),
        "not granted before the backoff: {out:?}"
    );
    let (code, out) = env.baton(&["task", "events", "job"]);
    assert_eq!(code, 0, "{out:?}");
    let kinds: Vec<&str> = out.iter().filter_map(|e| e["kind"].as_str()).collect();
    assert!(
        kinds.ends_with(&["STALLED", "RETRY_SCHEDULED"]),
        "{kinds:?}"
    );
    let out = env
        .cmd(&[
            "run", "--next", "--queue", "jobs", "--owner", "w2", "--wait", "20s", "--", "true",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let (code, out) = env.baton(&["task", "show", "job"]);
    assert_eq!(
        (code, out[0]["state"].as_str(), out[0]["attempt"].as_u64()),
        (0, Some("SUCCEEDED"), Some(2)),
        "{out:?}"
    );
}

/// `task list` shows a graph task as a person asks about it: BLOCKED
/// behind a dependency that failed, READY when it may run, not the
/// REGISTERED both are stored as.
#[test]
fn task_list_shows_blocked_and_ready_graph_tasks() {
    let env = Env::new(Backend::Sqlite);
    assert_eq!(
        env.add_graph(r#"[{"task": "up"}, {"task": "down", "after": ["up"]}, {"task": "free"}]"#)
            .0,
        0
    );
    let (code, g) = env.baton(&["claim", "up", "--owner", "w"]);
    assert_eq!(code, 0, "{g:?}");
    let fence = g[0]["fence"].to_string();
    let (code, _) = env.baton(&["fail", "up", "--owner", "w", "--fence", &fence]);
    assert_eq!(code, 0);
    let out = env
        .cmd(&["--format", "human", "task", "list"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let state_of = |task: &str| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(task))
            .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
            .unwrap_or_else(|| panic!("{task} not in {text}"))
    };
    assert_eq!(state_of("down"), "BLOCKED", "{text}");
    assert_eq!(state_of("up"), "FAILED", "{text}");
    let (_, json) = env.baton(&["task", "list"]);
    let down = json.iter().find(|v| v["task"] == "down").unwrap();
    assert_eq!(
        (down["state"].as_str(), down["shown"].as_str()),
        (Some("REGISTERED"), Some("BLOCKED")),
        "the stored state stays, the shown one is beside it"
    );
}

/// Below a failed task, every task of the chain (a->b->c->d) is BLOCKED in
/// the plain list as in `--state BLOCKED`, not only the first; `--queue`
/// alone lists the queue's tasks; a bad state is refused naming READY and
/// BLOCKED among the states `--state` takes.
#[test]
fn task_list_agrees_with_blocked_at_any_depth_and_filters_by_queue() {
    let env = Env::new(Backend::Sqlite);
    let graph = r#"[{"task": "a", "queue": "ci"}, {"task": "b", "after": ["a"], "queue": "ci"},
        {"task": "c", "after": ["b"], "queue": "ci"}, {"task": "d", "after": ["c"]},
        {"task": "e", "queue": "ci"}]"#;
    assert_eq!(env.add_graph(graph).0, 0);
    let (code, g) = env.baton(&["claim", "a", "--owner", "w"]);
    assert_eq!(code, 0, "{g:?}");
    let fence = g[0]["fence"].to_string();
    let (code, _) = env.baton(&["fail", "a", "--owner", "w", "--fence", &fence]);
    assert_eq!(code, 0);
    let (code, all) = env.baton(&["task", "list"]);
    assert_eq!(code, 0, "{all:?}");
    let shown: Vec<(String, String)> = all
        .iter()
        .map(|v| {
            let t = v["task"].as_str().unwrap().to_owned();
            let s = v["shown"]
                .as_str()
                .or(v["state"].as_str())
                .unwrap()
                .to_owned();
            (t, s)
        })
        .collect();
    let blocked_plain: Vec<&str> = shown
        .iter()
        .filter(|(_, s)| s == "BLOCKED")
        .map(|(t, _)| t.as_str())
        .collect();
    assert_eq!(blocked_plain, ["b", "c", "d"], "{shown:?}");
    let (code, blocked) = env.baton(&["task", "list", "--state", "BLOCKED"]);
    assert_eq!(code, 0, "{blocked:?}");
    let blocked: Vec<&str> = blocked
        .iter()
        .map(|v| v["task"].as_str().unwrap())
        .collect();
    assert_eq!(blocked, blocked_plain, "the two lists agree");
    // --queue alone: the queue's tasks, whatever their state.
    let (code, ci) = env.baton(&["task", "list", "--queue", "ci"]);
    assert_eq!(code, 0, "{ci:?}");
    let ci: Vec<&str> = ci.iter().map(|v| v["task"].as_str().unwrap()).collect();
    assert_eq!(ci, ["a", "b", "c", "e"]);
    let (code, failed) = env.baton(&["task", "list", "--queue", "ci", "--state", "FAILED"]);
    assert_eq!(code, 0, "{failed:?}");
    assert_eq!(failed.len(), 1, "{failed:?}");
    // A state that is none: the error names every state there is.
    let (code, bad) = env.baton(&["task", "list", "--state", "STUCK"]);
    assert_eq!(code, 2, "{bad:?}");
    let message = bad[0]["error"]["message"].as_str().unwrap();
    assert_eq!(bad[0]["error"]["field"], "state");
    for s in ["SUCCEEDED", "READY", "BLOCKED"] {
        assert!(message.contains(s), "{message}");
    }
}

/// The issue's schedule that stopped every other: `--after ghost` is
/// refused when set; a schedule whose period is taken by a task defined
/// otherwise fails alone, `schedule tick` exits 0 having made the next
/// schedule's task, and `schedule list` says which one fails and why.
#[test]
fn one_failing_schedule_stops_no_other_in_schedule_tick() {
    let env = Env::new(Backend::Sqlite);
    let (code, out) = env.baton(&[
        "schedule", "add", "0000", "--every", "1s", "--after", "ghost",
    ]);
    assert_eq!(code, 2, "{out:?}");
    assert_eq!(out[0]["error"]["field"], "depends_on", "{out:?}");
    let (code, out) = env.baton(&["schedule", "add", "0000", "--every", "1h"]);
    assert_eq!(code, 0, "{out:?}");
    let start = out[0]["since"].as_str().unwrap().to_owned();
    let (code, out) = env.baton(&["schedule", "add", "zzzz", "--every", "1h"]);
    assert_eq!(code, 0, "{out:?}");
    let (code, out) = env.baton(&["add", &format!("0000@{start}"), "--queue", "elsewhere"]);
    assert_eq!(code, 0, "{out:?}");
    let (code, made) = env.baton(&["schedule", "tick"]);
    assert_eq!(code, 0, "{made:?}");
    let text = format!("{made:?}");
    assert!(
        text.contains("zzzz@"),
        "the later schedule made its task: {text}"
    );
    let (code, list) = env.baton(&["schedule", "list"]);
    assert_eq!(code, 0);
    let failing = list
        .iter()
        .find(|s| s["schedule"] == "schedule:0000")
        .unwrap();
    assert_eq!(
        failing["failure"]["task"],
        format!("0000@{start}"),
        "{list:?}"
    );
    assert!(
        failing["failure"]["error"]
            .as_str()
            .unwrap()
            .contains("refused"),
        "{list:?}"
    );
    let fine = list
        .iter()
        .find(|s| s["schedule"] == "schedule:zzzz")
        .unwrap();
    assert!(fine["failure"].is_null(), "{list:?}");
}

/// A paused queue, the hard way: worker processes waiting on it
/// (`next --wait`) take nothing while it is paused, though its tasks are
/// ready and another queue's task is taken by a worker that asks for both;
/// `queue resume` from another process lets each waiting worker take one
/// task within a few seconds.
#[test]
fn waiting_workers_take_nothing_from_a_paused_queue_until_it_resumes() {
    let env = Env::new(Backend::Sqlite);
    for t in ["job-0", "job-1", "job-2"] {
        assert_eq!(env.baton(&["add", t, "--queue", "jobs"]).0, 0);
    }
    assert_eq!(env.baton(&["add", "other", "--queue", "misc"]).0, 0);
    let (code, out) = env.baton(&["queue", "pause", "jobs", "--operator", "alice"]);
    assert_eq!(code, 0, "{out:?}");
    assert!(out[0]["paused_at"].is_string(), "{out:?}");
    assert_eq!(out[0]["idempotent"], false, "{out:?}");
    let (code, out) = env.baton(&["queue", "pause", "jobs", "--operator", "alice"]);
    assert_eq!(
        (code, &out[0]["idempotent"]),
        (0, &Value::Bool(true)),
        "{out:?}"
    );
    let (code, out) = env.baton(&["next", "--owner", "w", "--queue", "jobs"]);
    assert_eq!(code, 1, "{out:?}");
    assert_eq!(
        (out[0]["refused"].as_str(), out[0]["paused"].as_u64()),
        (Some("none_ready"), Some(1)),
        "{out:?}"
    );
    let (code, out) = env.baton(&["next", "--owner", "w", "--queue", "jobs", "--queue", "misc"]);
    assert_eq!(
        (code, out[0]["task"].as_str()),
        (0, Some("other")),
        "{out:?}"
    );
    let waiters: Vec<_> = (0..3)
        .map(|i| {
            env.cmd(&[
                "next",
                "--owner",
                &format!("w{i}"),
                "--queue",
                "jobs",
                "--wait",
                "60s",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(2_000));
    let (_, shown) = env.baton(&["task", "list", "--queue", "jobs", "--state", "READY"]);
    assert_eq!(shown.len(), 3, "nothing taken while paused: {shown:?}");
    let (_, q) = env.baton(&["queue", "show", "jobs"]);
    assert!(q[0]["paused_at"].is_string(), "{q:?}");
    let resumed = Instant::now();
    let (code, out) = env.baton(&["queue", "resume", "jobs", "--operator", "alice"]);
    assert_eq!(code, 0, "{out:?}");
    assert_eq!(out[0]["paused_at"], Value::Null, "{out:?}");
    let mut taken = Vec::new();
    for w in waiters {
        let out = w.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        taken.push(v["task"].as_str().unwrap().to_owned());
    }
    assert!(resumed.elapsed() < Duration::from_secs(20));
    taken.sort();
    assert_eq!(taken, ["job-0", "job-1", "job-2"]);
}

/// `queue retry-failed` and `queue discard-failed`: tasks whose `run`
/// child failed are retried a page at a time (`--max`, with `more`), run
/// again by a worker process, and once failed again discarded, each a
/// tombstone; a task of another queue is never touched.
#[test]
fn a_queues_failed_runs_are_retried_then_discarded_from_the_cli() {
    let env = Env::new(Backend::Sqlite);
    for t in ["job-0", "job-1"] {
        assert_eq!(env.baton(&["add", t, "--queue", "jobs"]).0, 0);
    }
    assert_eq!(env.baton(&["add", "other", "--queue", "misc"]).0, 0);
    let fail_runs = |queue: &str, n: usize| {
        for _ in 0..n {
            let (code, out) = env.baton(&[
                "run", "--next", "--queue", queue, "--owner", "w", "--", "sh", "-c", "exit 3",
            ]);
            assert_ne!(code, 0, "{out:?}");
        }
    };
    fail_runs("jobs", 2);
    fail_runs("misc", 1);
    let (code, out) = env.baton(&[
        "queue",
        "retry-failed",
        "jobs",
        "--operator",
        "alice",
        "--max",
        "1",
    ]);
    assert_eq!(code, 0, "{out:?}");
    assert_eq!(
        (&out[0]["retried"], &out[0]["more"]),
        (&serde_json::json!(1), &Value::Bool(true)),
        "{out:?}"
    );
    let (code, out) = env.baton(&["queue", "retry-failed", "jobs", "--operator", "alice"]);
    assert_eq!(code, 0, "{out:?}");
    assert_eq!(
        (&out[0]["retried"], &out[0]["more"]),
        (&serde_json::json!(1), &Value::Bool(false)),
        "{out:?}"
    );
    // Run again: they fail again, as their iteration 2.
    fail_runs("jobs", 2);
    for t in ["job-0", "job-1"] {
        let (_, shown) = env.baton(&["task", "show", t]);
        assert_eq!(
            (shown[0]["state"].as_str(), shown[0]["iteration"].as_u64()),
            (Some("FAILED"), Some(2)),
            "{shown:?}"
        );
    }
    let (code, out) = env.baton(&["queue", "discard-failed", "jobs", "--operator", "alice"]);
    assert_eq!(
        (code, &out[0]["discarded"]),
        (0, &serde_json::json!(2)),
        "{out:?}"
    );
    for t in ["job-0", "job-1"] {
        let (_, shown) = env.baton(&["task", "show", t]);
        assert!(shown[0]["pruned_at"].is_string(), "{shown:?}");
    }
    let (_, shown) = env.baton(&["task", "show", "other"]);
    assert_eq!(
        (shown[0]["state"].as_str(), &shown[0]["pruned_at"]),
        (Some("FAILED"), &Value::Null),
        "{shown:?}"
    );
}

/// `prune --forget-after`: the tombstones a run makes go at a run that
/// much later (not at an earlier one), counted as `forgotten`; the id is
/// then granted anew under a higher fence, and a tombstone made without it
/// stays. On SQLite the stored tombstone is compact (no body, times as
/// numbers). A bad duration changes nothing.
fn prune_forget_after_frees_ids_from_the_cli(backend: Backend) {
    let env = Env::new(backend);
    let run_one = |t: &str| {
        assert_eq!(env.baton(&["add", t, "--queue", "q"]).0, 0);
        let (code, out) = env.baton(&[
            "run", "--next", "--queue", "q", "--owner", "w", "--", "true",
        ]);
        assert_eq!(code, 0, "{out:?}");
        out.last().unwrap()["fence"].as_u64().unwrap()
    };
    let kept_fence = run_one("kept");
    let prune = |extra: &[&str]| {
        let mut args = vec!["prune", "--finished-before", "0s", "--operator", "alice"];
        args.extend_from_slice(extra);
        env.baton(&args)
    };
    let (code, out) = prune(&[]);
    assert_eq!(
        (code, &out[0]["pruned"]),
        (0, &serde_json::json!(1)),
        "{out:?}"
    );
    let gone_fence = run_one("gone");
    let (code, out) = prune(&["--forget-after", "nonsense"]);
    assert_eq!(code, 2, "{out:?}");
    assert_eq!(
        out[0]["error"]["field"].as_str(),
        Some("forget_after"),
        "{out:?}"
    );
    let (_, shown) = env.baton(&["task", "show", "gone"]);
    assert!(
        shown[0]["pruned_at"].is_null(),
        "a bad run changed nothing: {shown:?}"
    );
    let (code, out) = prune(&["--forget-after", "1s"]);
    assert_eq!(
        (code, &out[0]["pruned"], &out[0]["forgotten"]),
        (0, &serde_json::json!(1), &serde_json::json!(0)),
        "{out:?}"
    );
    let (_, shown) = env.baton(&["task", "show", "gone"]);
    assert!(shown[0]["forget_at"].is_string(), "{shown:?}");
    if let Some(path) = env.store.strip_prefix("sqlite:") {
        let db = rusqlite::Connection::open(path).unwrap();
        let stored: String = db
            .query_row("SELECT record FROM tasks WHERE task_id = 'gone'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert!(
            !stored.contains("manifest")
                && stored.contains("\"pruned_at\":1")
                && stored.len() < 400,
            "{stored}"
        );
    }
    let (_, out) = prune(&[]);
    assert_eq!(
        out[0]["forgotten"],
        serde_json::json!(0),
        "not yet: {out:?}"
    );
    std::thread::sleep(Duration::from_millis(1100));
    let (code, out) = prune(&[]);
    assert_eq!(
        (code, &out[0]["pruned"], &out[0]["forgotten"]),
        (0, &serde_json::json!(0), &serde_json::json!(1)),
        "{out:?}"
    );
    let (code, shown) = env.baton(&["task", "show", "gone"]);
    assert_eq!(
        (code, shown[0]["refused"].as_str()),
        (5, Some("not_found")),
        "{shown:?}"
    );
    let (_, shown) = env.baton(&["task", "show", "kept"]);
    assert!(shown[0]["pruned_at"].is_string(), "{shown:?}");
    // Free again: added and run anew, under a fence past both.
    let again = run_one("gone");
    assert!(again > gone_fence && again > kept_fence, "{again}");
}
