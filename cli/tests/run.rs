//! `baton run` and `baton task run` with real processes, real signals and
//! real stores: renewals while the child runs, exit statuses, the wrapper
//! signalled or killed, and no two runs of a task ever overlapping when the
//! store goes away mid-run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

#[macro_use]
mod common;

use common::Backend;

const BIN: &str = env!("CARGO_BIN_EXE_baton");

per_backend!(
    a_child_that_outlives_its_ttl_is_renewed_and_completes,
    exit_statuses_and_signals_are_the_childs,
    a_failures_error_keeps_the_end_of_the_childs_stderr,
    a_command_that_cannot_run_leaves_nothing_claimed,
    a_declared_task_runs_with_its_evidence_hashed,
    sigterm_to_the_wrapper_stops_the_child_then_releases,
    sigkill_of_the_wrapper_kills_the_child_and_the_lease_expires,
    no_two_runs_of_a_task_overlap_when_the_store_goes_away,
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

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.arg("--store").arg(&self.store).args(args);
        for v in [
            "BATON_STORE",
            "BATON_TASK",
            "BATON_OWNER",
            "BATON_FENCE",
            "BATON_RUN",
            "BATON_EXECUTOR",
        ] {
            c.env_remove(v);
        }
        c
    }

    fn baton(&self, args: &[&str]) -> (i32, Value) {
        let out = self.cmd(args).output().unwrap();
        (out.status.code().unwrap_or(-1), json_of(&out))
    }

    /// `baton run`/`task run ... -- sh -c SCRIPT`, with its report.
    fn run(&self, args: &[&str], script: &str) -> (i32, Value) {
        let report = self.path(&format!("report-{}.json", uuid_like()));
        let out = self
            .cmd(args)
            .arg("--report")
            .arg(&report)
            .args(["--", "sh", "-c", script, BIN])
            .output()
            .unwrap();
        (out.status.code().unwrap_or(-1), read_report(&report, &out))
    }

    fn events(&self, task: &str) -> Vec<String> {
        let out = self.cmd(&["task", "events", task]).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|e| e["kind"].as_str().map(str::to_owned))
            .collect()
    }
}

fn json_of(out: &Output) -> Value {
    let text = if out.stdout.is_empty() {
        &out.stderr
    } else {
        &out.stdout
    };
    serde_json::from_slice(text).unwrap_or(Value::Null)
}

fn read_report(path: &Path, out: &Output) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("no report ({e}): {out:?}"));
    serde_json::from_str(text.trim()).unwrap()
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn a_child_that_outlives_its_ttl_is_renewed_and_completes(b: Backend) {
    let env = Env::new(b);
    // The child sees its lease, and its own `baton verify` finds it current.
    let (code, report) = env.run(
        &["run", "long", "--owner", "w", "--ttl", "1s"],
        &format!(
            r#"test "$BATON_TASK" = long && test "$BATON_OWNER" = w && test -n "$BATON_FENCE" \
               && test -n "$BATON_EXPIRY" && test "$BATON_ATTEMPT" = 1 || exit 9
               if [ {own} = yes ]; then "$0" verify >/dev/null || exit 8; fi
               sleep 3"#,
            // A sled store admits one process at a time: the wrapper's.
            own = if b == Backend::Sqlite { "yes" } else { "no" },
        ),
    );
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["outcome"], "completed", "{report}");
    assert!(report["renewals"].as_u64().unwrap() >= 5, "{report}");
    let events = env.events("long");
    let renewed = events.iter().filter(|k| *k == "RENEWED").count();
    assert!(renewed >= 5, "{events:?}");
    assert_eq!(
        events.last().map(String::as_str),
        Some("SUCCEEDED"),
        "{events:?}"
    );
}

fn exit_statuses_and_signals_are_the_childs(b: Backend) {
    let env = Env::new(b);
    let (code, report) = env.run(&["run", "seven", "--owner", "w"], "exit 7");
    assert_eq!(
        (code, report["outcome"].as_str()),
        (7, Some("failed")),
        "{report}"
    );
    let (_, shown) = env.baton(&["task", "show", "seven"]);
    assert_eq!(shown["state"], "FAILED");
    assert_eq!(shown["error"]["exit_code"], 7, "{shown}");
    let (code, report) = env.run(&["run", "segv", "--owner", "w"], "kill -SEGV $$");
    assert_eq!(code, 128 + 11, "{report}");
    assert_eq!(report["child"]["signal"], "SIGSEGV", "{report}");
    let (_, shown) = env.baton(&["task", "show", "segv"]);
    assert_eq!(shown["error"]["signal"], "SIGSEGV", "{shown}");
    // A refused claim starts nothing.
    let (code, held) = env.baton(&["claim", "busy", "--owner", "other", "--ttl", "1m"]);
    assert_eq!(code, 0, "{held}");
    let marker = env.path("ran");
    let (code, _) = env.baton(&[
        "run",
        "busy",
        "--owner",
        "w",
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]);
    assert_eq!(code, 201, "run's own status for a refused claim");
    assert!(!marker.exists(), "a refused run started its command");
    // A child's status that is one of baton's is still the child's: exit 3
    // means the child ran and its failure is recorded, never "unavailable".
    let (code, report) = env.run(&["run", "three", "--owner", "w"], "exit 3");
    assert_eq!(
        (code, report["outcome"].as_str()),
        (3, Some("failed")),
        "{report}"
    );
    // A child exiting in run's own range (200 to 209) does not pass its
    // status on as it is (203 would read as "the store cannot be opened"):
    // run exits 209, the report has the child's status, the failure is kept.
    for child in [200, 203, 208, 209] {
        let (code, report) = env.run(
            &["run", &format!("own-{child}"), "--owner", "w"],
            &format!("exit {child}"),
        );
        assert_eq!(
            (code, report["outcome"].as_str()),
            (209, Some("failed")),
            "{report}"
        );
        assert_eq!(report["child"]["exit_code"], child, "{report}");
    }
    let (code, report) = env.run(&["run", "own-210", "--owner", "w"], "exit 210");
    assert_eq!(code, 210, "outside run's range a status passes: {report}");
    // baton's own statuses are apart from any child's: invalid input (202),
    // a usage error (202), a store that cannot be opened (203).
    let (code, _) = env.baton(&["run", "x", "--owner", "w", "--ttl", "0s", "--", "true"]);
    assert_eq!(code, 202);
    let (code, _) = env.baton(&["run", "x", "--", "true"]);
    assert_eq!(code, 202, "a usage error under run");
    // A store that cannot answer: 203; a store URL that cannot be right
    // (a folder that does not exist): bad input, 202. Nothing runs.
    for (store, code) in [
        ("memory:?fault=unavailable", 203),
        ("sqlite:/no/such/dir/b.db", 202),
    ] {
        let out = Command::new(BIN)
            .args([
                "--store", store, "run", "x", "--owner", "w", "--", "touch", "ran",
            ])
            .current_dir(env.dir.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(code), "{store}: {out:?}");
        assert!(!env.dir.path().join("ran").exists(), "{store}: nothing ran");
    }
}

/// Why a run failed is in its recorded error: the end of what the child
/// wrote to its standard error, which still reaches the wrapper's own as
/// it comes. A flood keeps only its last lines, within the stated size; a
/// process that left the child's process group holding the pipe does not
/// hold the report up.
fn a_failures_error_keeps_the_end_of_the_childs_stderr(b: Backend) {
    let env = Env::new(b);
    let script = "echo progress; echo 'Traceback (most recent call last):' >&2; \
                  echo '  File \"job.py\", line 3' >&2; echo 'KeyError: x' >&2; exit 3";
    let out = env
        .cmd(&["run", "why", "--owner", "w", "--", "sh", "-c", script])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let passed = String::from_utf8_lossy(&out.stderr);
    assert!(passed.contains("KeyError: x"), "passed on: {passed}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("progress"));
    let (_, shown) = env.baton(&["task", "show", "why"]);
    assert_eq!(shown["error"]["exit_code"], 3, "{shown}");
    assert_eq!(
        shown["error"]["stderr_tail"],
        "Traceback (most recent call last):\n  File \"job.py\", line 3\nKeyError: x\n",
        "{shown}"
    );
    assert!(shown["error"].get("stderr_cut").is_none(), "{shown}");
    // 20,000 numbered lines, then a signal: the tail is the last whole
    // lines within 4096 bytes, and says how much it left out.
    let (code, _) = env.run(
        &["run", "flood", "--owner", "w"],
        "i=0; while [ $i -lt 20000 ]; do echo \"line $i\" >&2; i=$((i+1)); done; kill -TERM $$",
    );
    assert_eq!(code, 128 + 15);
    let (_, shown) = env.baton(&["task", "show", "flood"]);
    let e = &shown["error"];
    assert_eq!(e["signal"], "SIGTERM", "{shown}");
    let tail = e["stderr_tail"].as_str().unwrap();
    assert!(
        tail.len() <= baton_supervisor::STDERR_TAIL_BYTES,
        "{}",
        tail.len()
    );
    assert!(tail.len() > 4000, "{}", tail.len());
    assert!(
        tail.starts_with("line ") && tail.ends_with("line 19999\n"),
        "{tail}"
    );
    let written: u64 = (0..20000).map(|i| format!("line {i}\n").len() as u64).sum();
    assert_eq!(
        e["stderr_cut"].as_u64().unwrap() + tail.len() as u64,
        written
    );
    // A success records no error; a child that wrote nothing to stderr
    // fails with its status alone.
    let (code, _) = env.run(&["run", "fine", "--owner", "w"], "echo noise >&2");
    assert_eq!(code, 0);
    let (_, shown) = env.baton(&["task", "show", "fine"]);
    assert!(shown["error"].is_null(), "{shown}");
    let (_, _) = env.run(&["run", "quiet", "--owner", "w"], "exit 5");
    let (_, shown) = env.baton(&["task", "show", "quiet"]);
    assert_eq!(
        shown["error"],
        serde_json::json!({"exit_code": 5}),
        "{shown}"
    );
    // A process that leaves the child's process group holds the pipe
    // after the child exits: it is stopped with the tree (or, if it got
    // away, not waited for long), and the failure is recorded promptly.
    let started = Instant::now();
    let (code, _) = env.run(
        &["run", "escaped", "--owner", "w"],
        "setsid sleep 30 & echo 'before exit' >&2; exit 4",
    );
    assert_eq!(code, 4);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let (_, shown) = env.baton(&["task", "show", "escaped"]);
    assert_eq!(shown["error"]["stderr_tail"], "before exit\n", "{shown}");
}

fn a_command_that_cannot_run_leaves_nothing_claimed(b: Backend) {
    let env = Env::new(b);
    let (code, report) = env.run(&["run", "nope", "--owner", "w"], "exec /no/such/command");
    // `sh` itself reports 127 for a missing command; baton's own check is below.
    assert_eq!(code, 127, "{report}");
    let out = env
        .cmd(&["run", "missing", "--owner", "w", "--", "/no/such/command"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    let (_, h) = env.baton(&["holder", "missing"]);
    assert_eq!(h["live"], false, "released, not held: {h}");
    assert_eq!(h["state"], "REGISTERED", "{h}");
    let script = env.path("not-executable.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    let out = env
        .cmd(&[
            "run",
            "noexec",
            "--owner",
            "w",
            "--",
            script.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    let (code, g) = env.baton(&["claim", "noexec", "--owner", "next"]);
    assert_eq!(code, 0, "the next claimant gets it at once: {g}");
}

fn manifest(env: &Env, task: &str, steps: &[&str], evidence: &[&str]) -> String {
    let m = serde_json::json!({
        "task_id": task, "executor": "ci", "source_branch": "main", "source_oid": "abc123",
        "target_version": "2.0", "steps": steps, "required_evidence": evidence,
        "heartbeat_timeout_seconds": 2,
    });
    let p = env.path(&format!("{task}.json"));
    std::fs::write(&p, m.to_string()).unwrap();
    p.to_str().unwrap().to_owned()
}

fn a_declared_task_runs_with_its_evidence_hashed(b: Backend) {
    let env = Env::new(b);
    // Two steps where the child can report them, else one (reached at start).
    let steps: &[&str] = if b == Backend::Sqlite {
        &["build", "test"]
    } else {
        &["build"]
    };
    for t in ["built", "nothing"] {
        let (code, out) = env.baton(&["task", "declare", &manifest(&env, t, steps, &["log"])]);
        assert_eq!(code, 0, "{out}");
        let (code, out) = env.baton(&["task", "register", t, "--run", "r1"]);
        assert_eq!(code, 0, "{out}");
    }
    let log = env.path("build.log");
    let (code, report) = env.run(
        &[
            "task",
            "run",
            "built",
            "--run",
            "r1",
            "--executor",
            "ci",
            "--evidence",
            &format!("log={}", log.display()),
        ],
        &format!(
            // The child reports its steps with no flags: they come from its
            // environment. (A sled store admits one process at a time, and the
            // wrapper holds it: there the child cannot call baton.)
            r#"test "$BATON_RUN" = r1 && test "$BATON_EXECUTOR" = ci || exit 9
               if [ {steps} = yes ]; then
                 "$0" task heartbeat --step 1 >/dev/null || exit 10
                 "$0" task heartbeat --step 2 >/dev/null || exit 11
               fi
               echo built > {log}"#,
            log = log.display(),
            steps = if b == Backend::Sqlite { "yes" } else { "no" },
        ),
    );
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["outcome"], "completed", "{report}");
    if b == Backend::Sqlite {
        let beats = env
            .events("built")
            .iter()
            .filter(|k| *k == "HEARTBEAT")
            .count();
        assert_eq!(beats, 2, "the child's own heartbeats");
    }
    let (code, gate) = env.baton(&["task", "gate", "built"]);
    assert_eq!(code, 0, "{gate}");
    let (_, shown) = env.baton(&["task", "show", "built"]);
    // sha256 of "built\n".
    assert_eq!(
        shown["evidence"]["log"].as_str(),
        Some(format!("sha256:{}", sha256_hex(b"built\n")).as_str()),
        "{shown}"
    );
    // Exit 0 without the evidence file: failed, naming the key and the path.
    let (code, report) = env.run(
        &[
            "task",
            "run",
            "nothing",
            "--run",
            "r1",
            "--executor",
            "ci",
            "--evidence",
            "log=/no/such/file",
        ],
        "true",
    );
    assert_eq!(
        (code, report["outcome"].as_str()),
        (1, Some("failed")),
        "{report}"
    );
    let (_, shown) = env.baton(&["task", "show", "nothing"]);
    assert_eq!(shown["state"], "FAILED", "{shown}");
    assert_eq!(shown["error"]["code"], "evidence_unreadable", "{shown}");
    assert_eq!(shown["error"]["key"], "log", "{shown}");
}

/// SHA-256 as the CLI prints it, from the system's `sha256sum`.
fn sha256_hex(data: &[u8]) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), data).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

fn wait_for(path: &Path, within: Duration) {
    let t = Instant::now();
    while !path.exists() {
        assert!(t.elapsed() < within, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn alive(pid: u32) -> bool {
    // A zombie is dead for our purpose: its state letter is Z.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

fn spawn_run(env: &Env, args: &[&str], script: &str, report: &Path) -> Child {
    env.cmd(args)
        .arg("--report")
        .arg(report)
        .args(["--", "sh", "-c", script])
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

fn sigterm_to_the_wrapper_stops_the_child_then_releases(b: Backend) {
    let env = Env::new(b);
    let (pid, term, report) = (env.path("pid"), env.path("term"), env.path("report"));
    // A child that ignores SIGTERM (writing that it got it): SIGKILL after the grace.
    let script = format!(
        "trap 'echo got >> {term}' TERM; echo $$ > {pid}.tmp; mv {pid}.tmp {pid}; while :; do sleep 0.02; done",
        term = term.display(),
        pid = pid.display()
    );
    let mut wrapper = spawn_run(
        &env,
        &[
            "run", "t", "--owner", "w", "--ttl", "10s", "--grace", "700ms",
        ],
        &script,
        &report,
    );
    let child = child_pid(&pid);
    let sent = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(wrapper.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = wrapper.wait().unwrap();
    let took = sent.elapsed();
    assert!(!alive(child), "the child outlived the wrapper");
    assert!(
        std::fs::read_to_string(&term).unwrap().contains("got"),
        "no SIGTERM reached the child"
    );
    assert!(
        took >= Duration::from_millis(600),
        "SIGKILL before the grace: {took:?}"
    );
    assert_eq!(status.code(), Some(128 + 9), "the child's status: killed");
    let r: Value = serde_json::from_str(std::fs::read_to_string(&report).unwrap().trim()).unwrap();
    assert_eq!(r["outcome"], "released", "{r}");
    let (code, g) = env.baton(&["claim", "t", "--owner", "next"]);
    assert_eq!(code, 0, "released: the next claimant gets it at once: {g}");
}

fn sigkill_of_the_wrapper_kills_the_child_and_the_lease_expires(b: Backend) {
    let env = Env::new(b);
    let (pid, report) = (env.path("pid"), env.path("report"));
    let script = format!(
        "echo $$ > {pid}.tmp; mv {pid}.tmp {pid}; while :; do sleep 0.02; done",
        pid = pid.display()
    );
    let mut wrapper = spawn_run(
        &env,
        &["run", "t", "--owner", "w", "--ttl", "2s"],
        &script,
        &report,
    );
    let child = child_pid(&pid);
    wrapper.kill().unwrap();
    wrapper.wait().unwrap();
    let t = Instant::now();
    while alive(child) {
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "the child outlived a SIGKILLed wrapper"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let (code, r) = env.baton(&["claim", "t", "--owner", "next"]);
    assert_eq!(
        (code, r["refused"].as_str()),
        (1, Some("held")),
        "the lease holds until it expires: {r}"
    );
    std::thread::sleep(Duration::from_millis(2_200));
    let (code, g) = env.baton(&["claim", "t", "--owner", "next"]);
    assert_eq!(code, 0, "{g}");
}

/// Puts a copy of the store in its place: every process that had the old
/// one open refuses from then on, as the store has "gone away", and a new
/// process opens the copy, which holds every grant made so far. SQLite: a
/// consistent copy (its log included), the old log removed. sled: the
/// directory copied (the process that holds it is stopped meanwhile, so the
/// copy is what a crash would leave) and the old one moved away.
fn replace_store(env: &Env, b: Backend) {
    match b {
        Backend::Sqlite => {
            let db = env.dir.path().join("b.db");
            let copy = db.with_extension("copy");
            let c = rusqlite::Connection::open(&db).unwrap();
            c.busy_timeout(Duration::from_secs(5)).unwrap();
            c.execute("VACUUM INTO ?1", [copy.to_str().unwrap()])
                .unwrap();
            drop(c);
            std::fs::rename(&copy, &db).unwrap();
            for ext in ["db-wal", "db-shm"] {
                let _ = std::fs::remove_file(db.with_extension(ext));
            }
        }
        Backend::Sled => {
            let dir = env.dir.path().join("b.sled");
            let copy = env.dir.path().join("b.sled.copy");
            let ok = Command::new("cp")
                .arg("-a")
                .arg(&dir)
                .arg(&copy)
                .status()
                .unwrap();
            assert!(ok.success());
            std::fs::rename(&dir, env.dir.path().join("b.sled.old")).unwrap();
            std::fs::rename(&copy, &dir).unwrap();
        }
    }
}

fn signal(child: &Child, sig: nix::sys::signal::Signal) {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, sig).unwrap();
    if sig != nix::sys::signal::Signal::SIGSTOP {
        return;
    }
    // A stop takes hold asynchronously: until the kernel reports every
    // thread stopped, the process may still renew (into a store about to
    // be replaced by a copy that would not hold that renewal).
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match waitpid(pid, Some(WaitPidFlag::WUNTRACED | WaitPidFlag::WNOHANG)).unwrap() {
            WaitStatus::Stopped(..) => return,
            WaitStatus::StillAlive if Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(2))
            }
            other => panic!("the process did not stop: {other:?}"),
        }
    }
}

/// The interval a child recorded (`/proc/uptime`, one host's monotonic clock).
fn interval(path: &Path) -> (f64, f64) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let find = |what: &str| {
        text.lines()
            .find_map(|l| {
                l.strip_prefix(what)
                    .map(|v| v.trim().parse::<f64>().unwrap())
            })
            .unwrap_or_else(|| panic!("no {what} in {}: {text:?}", path.display()))
    };
    (find("start "), find("stop "))
}

/// One round of a no-overlap storm: the first run lost its lease (exit 200,
/// outcome `lost`), the second completed, and the second child started only
/// after the first had stopped.
fn check_round(
    n: usize,
    env: &Env,
    first: std::process::ExitStatus,
    second: std::process::ExitStatus,
    first_log: &Path,
    second_log: &Path,
) {
    let text = std::fs::read_to_string(env.path("first.json")).unwrap();
    let report: Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(
        (first.code(), report["outcome"].as_str()),
        (Some(200), Some("lost")),
        "round {n}: {report}"
    );
    assert_eq!(second.code(), Some(0), "round {n}");
    let (s1, e1) = interval(first_log);
    let (s2, e2) = interval(second_log);
    assert!(s1 <= e1 && s2 <= e2);
    assert!(
        e1 < s2,
        "round {n}: the runs overlap: first {s1}..{e1}, second {s2}..{e2}"
    );
}

/// A child that records when it started and stopped (on SIGTERM, or after
/// `secs`), on the monotonic clock.
fn recording_child(log: &Path, secs: &str) -> String {
    format!(
        "now() {{ cut -d' ' -f1 /proc/uptime; }}; echo \"start $(now)\" >> {log}; \
         trap 'echo \"stop $(now)\" >> {log}; exit 143' TERM; \
         end=$(( $(cut -d. -f1 /proc/uptime) + {secs} )); \
         while [ \"$(cut -d. -f1 /proc/uptime)\" -lt \"$end\" ] 2>/dev/null; do sleep 0.02; done; \
         echo \"stop $(now)\" >> {log}",
        log = log.display()
    )
}

fn no_two_runs_of_a_task_overlap_when_the_store_goes_away(b: Backend) {
    // 20 rounds, five at a time, each on a store of its own.
    for batch in 0..4 {
        let rounds: Vec<_> = (0..5)
            .map(|i| {
                let env = Env::new(b);
                let n = batch * 5 + i;
                let (first_log, second_log) = (env.path("first.log"), env.path("second.log"));
                let first = spawn_run(
                    &env,
                    &[
                        "run", "t", "--owner", "first", "--ttl", "2s", "--grace", "300ms",
                    ],
                    &recording_child(&first_log, "30"),
                    &env.path("first.json"),
                );
                (n, env, first, first_log, second_log)
            })
            .collect();
        let mut seconds = Vec::new();
        for (n, env, first, first_log, second_log) in rounds {
            wait_for(&first_log, Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(300));
            // The first wrapper is frozen while the copy is made, so the copy
            // holds its latest renewal (its child keeps running meanwhile).
            signal(&first, nix::sys::signal::Signal::SIGSTOP);
            replace_store(&env, b);
            // Started at once: it gets the task only once the first lease ends.
            let second = spawn_run(
                &env,
                &[
                    "run", "t", "--owner", "second", "--ttl", "2s", "--wait", "10s",
                ],
                &recording_child(&second_log, "0"),
                &env.path("second.json"),
            );
            signal(&first, nix::sys::signal::Signal::SIGCONT);
            seconds.push((n, env, first, second, first_log, second_log));
        }
        for (n, env, mut first, mut second, first_log, second_log) in seconds {
            let a = first.wait().unwrap();
            let b = second.wait().unwrap();
            check_round(n, &env, a, b, &first_log, &second_log);
        }
    }
}

#[cfg(feature = "fabric")]
#[test]
fn no_two_runs_of_a_task_overlap_when_the_etcd_cluster_stops() {
    use baton_adapter_fabric::testing::EtcdCluster;
    let Some(cluster) = EtcdCluster::start_or_skip() else {
        return;
    };
    for n in 0..3 {
        let env = Env {
            dir: tempfile::tempdir().unwrap(),
            store: cluster.url(&format!("run-{n}")),
        };
        let (first_log, second_log) = (env.path("first.log"), env.path("second.log"));
        let mut first = spawn_run(
            &env,
            &[
                "run", "t", "--owner", "first", "--ttl", "3s", "--grace", "500ms",
            ],
            &recording_child(&first_log, "60"),
            &env.path("first.json"),
        );
        wait_for(&first_log, Duration::from_secs(10));
        // The whole cluster stops answering.
        for i in 0..3 {
            cluster.pause(i);
        }
        let mut second = spawn_run(
            &env,
            &[
                "run", "t", "--owner", "second", "--ttl", "3s", "--wait", "30s",
            ],
            &recording_child(&second_log, "0"),
            &env.path("second.json"),
        );
        let a = first.wait().unwrap();
        for i in 0..3 {
            cluster.resume(i);
        }
        let b = second.wait().unwrap();
        check_round(n, &env, a, b, &first_log, &second_log);
    }
}

#[test]
fn a_lock_delay_holds_a_vanished_holders_task_and_run_waits_it_out() {
    let env = Env::new(Backend::Sqlite);
    let (code, g) = env.baton(&[
        "claim",
        "t",
        "--owner",
        "gone",
        "--ttl",
        "1s",
        "--lock-delay",
        "2s",
    ]);
    assert_eq!(code, 0, "{g}");
    std::thread::sleep(Duration::from_millis(1_200));
    let (code, r) = env.baton(&["claim", "t", "--owner", "next"]);
    assert_eq!(
        (code, r["refused"].as_str()),
        (1, Some("lock_delay")),
        "{r}"
    );
    let (code, e) = env.baton(&["claim", "u", "--owner", "x", "--lock-delay", "8d"]);
    assert_eq!(
        (code, e["error"]["field"].as_str()),
        (2, Some("lock_delay")),
        "{e}"
    );
    let t = Instant::now();
    let (code, report) = env.run(&["run", "t", "--owner", "next", "--wait", "10s"], "true");
    assert_eq!(code, 0, "{report}");
    assert!(
        t.elapsed() >= Duration::from_millis(500),
        "granted inside the lock delay"
    );
}

#[test]
fn a_refused_renewal_kills_the_child_at_once() {
    let env = Env::new(Backend::Sqlite);
    let (log, report) = (env.path("child.log"), env.path("report"));
    let mut wrapper = spawn_run(
        &env,
        &["run", "t", "--owner", "w", "--ttl", "3s", "--grace", "1s"],
        &recording_child(&log, "60"),
        &report,
    );
    wait_for(&log, Duration::from_secs(5));
    // The same owner claims again elsewhere: the wrapper's fence is stale,
    // so its next renewal is refused and the child is killed, not asked.
    let (code, g) = env.baton(&["claim", "t", "--owner", "w", "--ttl", "3s"]);
    assert_eq!(code, 0, "{g}");
    let t = Instant::now();
    let status = wrapper.wait().unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(1_900),
        "not at once: {:?}",
        t.elapsed()
    );
    assert_eq!(status.code(), Some(200));
    let r: Value = serde_json::from_str(std::fs::read_to_string(&report).unwrap().trim()).unwrap();
    assert_eq!(r["outcome"], "lost", "{r}");
    assert_eq!(
        r["child"]["signal"], "SIGKILL",
        "killed, not terminated: {r}"
    );
    assert!(r["reason"].as_str().unwrap().contains("stale"), "{r}");
}

/// A child that writes its pid to `pid` once it runs, notes when SIGTERM
/// came (`got MS`, ms since the epoch) in `term`, and goes on: only
/// SIGKILL ends it.
fn stubborn_child(pid: &Path, term: &Path) -> String {
    format!(
        "trap 'echo \"got $(date +%s%3N)\" >> {term}' TERM; echo $$ > {pid}.tmp; mv {pid}.tmp {pid}; while :; do sleep 0.02; done",
        term = term.display(),
        pid = pid.display()
    )
}

/// The pid a [`stubborn_child`] wrote, once it has.
fn child_pid(pid: &Path) -> u32 {
    wait_for(pid, Duration::from_secs(5));
    std::fs::read_to_string(pid)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A child that writes the wall-clock time (ms since the epoch) it started
/// and the time SIGTERM reached it, then runs until stopped.
fn wall_clock_child(log: &Path) -> String {
    format!(
        "echo \"start $(date +%s%3N)\" >> {log}; \
         trap 'echo \"stop $(date +%s%3N)\" >> {log}; exit 143' TERM; \
         while :; do sleep 0.02; done",
        log = log.display()
    )
}

/// `baton run` holds a 3 s lease while `stall` makes its store stop
/// answering for about 5 s (in flight: the renewal due at 1 s is waiting on
/// it). The child must have got its SIGTERM before the lease ended, not when
/// the store answered again.
fn stopped_before_the_lease_ends_while_the_store_stalls(env: &Env, stall: impl FnOnce()) {
    let (log, report) = (env.path("child.log"), env.path("report.json"));
    let mut wrapper = spawn_run(
        env,
        &[
            "run", "t", "--owner", "a", "--ttl", "3s", "--grace", "500ms",
        ],
        &wall_clock_child(&log),
        &report,
    );
    wait_for(&log, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(200));
    stall();
    let status = wrapper.wait().unwrap();
    let r: Value = serde_json::from_str(std::fs::read_to_string(&report).unwrap().trim()).unwrap();
    assert_eq!(
        (status.code(), r["outcome"].as_str()),
        (Some(200), Some("lost")),
        "{r}"
    );
    let expiry = baton_core::Timestamp::parse_rfc3339(r["lease_expiry"].as_str().unwrap())
        .unwrap()
        .as_millis();
    let text = std::fs::read_to_string(&log).unwrap();
    let stop: i64 = text
        .lines()
        .find_map(|l| l.strip_prefix("stop "))
        .unwrap_or_else(|| panic!("the child never got SIGTERM: {text:?} {r}"))
        .trim()
        .parse()
        .unwrap();
    assert!(
        stop < expiry,
        "the child got SIGTERM {} ms after its lease ended: {r}",
        stop - expiry
    );
}

#[test]
fn the_child_stops_before_its_lease_ends_while_sqlite_is_locked() {
    // Four rounds at once, each on a store of its own, each locked for 5 s
    // by a writer in this process (`BEGIN IMMEDIATE` held open).
    let rounds: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(|| {
                let env = Env::new(Backend::Sqlite);
                let db = env.path("b.db");
                stopped_before_the_lease_ends_while_the_store_stalls(&env, || {
                    let c = rusqlite::Connection::open(&db).unwrap();
                    c.busy_timeout(Duration::from_secs(5)).unwrap();
                    c.execute_batch("BEGIN IMMEDIATE").unwrap();
                    std::thread::sleep(Duration::from_secs(5));
                    c.execute_batch("ROLLBACK").unwrap();
                });
            })
        })
        .collect();
    for r in rounds {
        r.join().unwrap();
    }
}

#[path = "common/server.rs"]
mod server;

/// A server on a SQLite store of its own, and an environment whose store
/// is that server (the server's folder goes with it).
fn through_a_server() -> (server::Server, Env, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.db").display());
    let server = server::Server::start(&store, None);
    let env = Env {
        dir: tempfile::tempdir().unwrap(),
        store: server.url(),
    };
    (server, env, dir)
}

#[test]
fn the_child_stops_before_its_lease_ends_while_its_server_is_stopped() {
    let (server, env, _dir) = through_a_server();
    stopped_before_the_lease_ends_while_the_store_stalls(&env, || {
        server.signal("-STOP");
        std::thread::sleep(Duration::from_secs(5));
        server.signal("-CONT");
    });
}

#[cfg(feature = "postgres")]
#[test]
fn the_child_stops_before_its_lease_ends_while_postgres_waits_on_a_lock() {
    use baton_store_postgres::testing::PgCluster;
    let Some(pg) = PgCluster::start_or_skip() else {
        return;
    };
    let env = Env {
        dir: tempfile::tempdir().unwrap(),
        store: format!("{}&statement_timeout=8s", pg.url("stall")),
    };
    stopped_before_the_lease_ends_while_the_store_stalls(&env, || {
        // Every statement on the store's tables waits behind this lock.
        pg.sql(
            "BEGIN; LOCK TABLE stall.tasks IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(5); COMMIT;",
        );
    });
}

/// The pid a child wrote to `path`.
fn pid_in(path: &Path) -> u32 {
    wait_for(path, Duration::from_secs(10));
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Waits for `pid` to be gone; panics naming `what` after `within`.
fn gone_within(pid: u32, within: Duration, what: &str) {
    let t = Instant::now();
    while alive(pid) {
        assert!(t.elapsed() < within, "{what} (pid {pid}) is still running");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Starts two grandchildren, one in the child's group and one in a session
/// of its own, writing their pids; then runs `tail`. Their output goes
/// elsewhere, so that a test reading the wrapper's output does not wait
/// for them.
fn grandchildren(env: &Env, tail: &str) -> String {
    format!(
        "sleep 60 >/dev/null 2>&1 & echo $! > {a}.tmp; mv {a}.tmp {a}; \
         setsid sleep 61 >/dev/null 2>&1 & echo $! > {b}.tmp; mv {b}.tmp {b}; {tail}",
        a = env.path("in-group").display(),
        b = env.path("own-session").display(),
    )
}

#[test]
fn sigkill_of_the_wrapper_kills_the_grandchildren_in_its_group() {
    let env = Env::new(Backend::Sqlite);
    let report = env.path("report");
    // `sh -c 'work; true'`: the shell waits for work, which is its child.
    let mut wrapper = spawn_run(
        &env,
        &["run", "t", "--owner", "w", "--ttl", "5s"],
        &grandchildren(&env, "wait; true"),
        &report,
    );
    let in_group = pid_in(&env.path("in-group"));
    pid_in(&env.path("own-session"));
    wrapper.kill().unwrap();
    wrapper.wait().unwrap();
    gone_within(
        in_group,
        Duration::from_secs(2),
        "a grandchild in the child's group outlived the SIGKILLed wrapper",
    );
}

#[test]
fn nothing_the_child_started_outlives_its_report() {
    let env = Env::new(Backend::Sqlite);
    // A child that exits 0 and leaves two grandchildren running: one in its
    // group, one that left it. The task completes only once both are gone.
    let (code, report) = env.run(
        &[
            "run", "t", "--owner", "w", "--ttl", "5s", "--grace", "300ms",
        ],
        &grandchildren(&env, "exit 0"),
    );
    assert_eq!(
        (code, report["outcome"].as_str()),
        (0, Some("completed")),
        "{report}"
    );
    for name in ["in-group", "own-session"] {
        let pid = pid_in(&env.path(name));
        assert!(!alive(pid), "{name} grandchild {pid} outlived the report");
    }
    // A lost lease stops them too (the same owner's new claim makes the
    // wrapper's fence stale, so its next renewal is refused).
    let env = Env::new(Backend::Sqlite);
    let mut wrapper = spawn_run(
        &env,
        &["run", "t", "--owner", "w", "--ttl", "3s"],
        &grandchildren(&env, "wait"),
        &env.path("report"),
    );
    let pids = [
        pid_in(&env.path("in-group")),
        pid_in(&env.path("own-session")),
    ];
    let (code, g) = env.baton(&["claim", "t", "--owner", "w", "--ttl", "3s"]);
    assert_eq!(code, 0, "{g}");
    assert_eq!(wrapper.wait().unwrap().code(), Some(200));
    for pid in pids {
        assert!(!alive(pid), "grandchild {pid} outlived the lost lease");
    }
}

/// An operator's cancel reaches a running child: the wrapper sees the
/// request on its next renewal, sends SIGTERM, SIGKILLs after the grace,
/// gives the task back, and the task is CANCELLED (exit 207).
#[test]
fn an_operators_cancel_stops_the_child_and_cancels_the_task() {
    let env = Env::new(Backend::Sqlite);
    let (pid, term, report) = (env.path("pid"), env.path("term"), env.path("report"));
    let script = stubborn_child(&pid, &term);
    let mut wrapper = spawn_run(
        &env,
        &[
            "run",
            "t",
            "--owner",
            "w",
            "--ttl",
            "3s",
            "--renew-every",
            "300ms",
            "--grace",
            "500ms",
        ],
        &script,
        &report,
    );
    let child = child_pid(&pid);
    let (code, r) = env.baton(&["cancel", "t", "--operator", "alice"]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(
        r["state"], "CLAIMED",
        "asked, not ended under the holder: {r}"
    );
    let asked = Instant::now();
    let status = wrapper.wait().unwrap();
    let took = asked.elapsed();
    assert!(!alive(child), "the child outlived the wrapper");
    assert!(
        std::fs::read_to_string(&term)
            .unwrap_or_default()
            .contains("got"),
        "no SIGTERM reached the child"
    );
    assert!(
        took >= Duration::from_millis(450),
        "SIGKILL before the grace: {took:?}"
    );
    assert!(
        took < Duration::from_secs(3),
        "not stopped before the lease: {took:?}"
    );
    assert_eq!(status.code(), Some(207));
    let r: Value = serde_json::from_str(std::fs::read_to_string(&report).unwrap().trim()).unwrap();
    assert_eq!(r["outcome"], "cancelled", "{r}");
    let (_, shown) = env.baton(&["task", "show", "t"]);
    assert_eq!(shown["state"], "CANCELLED", "{shown}");
    let events = env.events("t");
    assert!(events.iter().any(|e| e == "CANCEL_REQUESTED"), "{events:?}");
}

/// A task's run-time limit stops `run`'s child however well the lease is
/// renewed: SIGTERM a grace before the limit, SIGKILL before the lease
/// ends there; the wrapper exits 208, and the attempt counts as a stall
/// (TIMED_OUT) once the lease has ended, so the next grant is a new attempt.
#[test]
fn a_run_time_limit_stops_the_child_before_the_lease_ends_there() {
    let env = Env::new(Backend::Sqlite);
    let (code, r) = env.baton(&["add", "t", "--timeout", "3s"]);
    assert_eq!(code, 0, "{r}");
    let (pid, term, report) = (env.path("pid"), env.path("term"), env.path("report"));
    let script = stubborn_child(&pid, &term);
    let started = Instant::now();
    let mut wrapper = spawn_run(
        &env,
        &[
            "run",
            "t",
            "--owner",
            "w",
            "--ttl",
            "1s",
            "--renew-every",
            "200ms",
            "--grace",
            "500ms",
        ],
        &script,
        &report,
    );
    let child = child_pid(&pid);
    // Bounded: a limit that did not hold would leave the wrapper renewing.
    let status = loop {
        if let Some(s) = wrapper.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > Duration::from_secs(10) {
            let _ = wrapper.kill();
            panic!("the wrapper still runs 10 s after a 3 s limit");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = started.elapsed();
    assert!(!alive(child), "the child outlived the wrapper");
    let got = std::fs::read_to_string(&term).unwrap_or_default();
    let term_at: i64 = got
        .lines()
        .find_map(|l| l.strip_prefix("got "))
        .unwrap_or_else(|| panic!("no SIGTERM reached the child: {got:?}"))
        .trim()
        .parse()
        .unwrap();
    assert!(
        took >= Duration::from_millis(1500),
        "stopped before the renewals had carried it past one TTL: {took:?}"
    );
    assert_eq!(status.code(), Some(208));
    let r: Value = serde_json::from_str(std::fs::read_to_string(&report).unwrap().trim()).unwrap();
    assert_eq!(r["outcome"], "timed_out", "{r}");
    assert_eq!(r["child"]["signal"], "SIGKILL", "the grace ran out: {r}");
    // The lease ends at the limit, three seconds after the grant; SIGTERM
    // came before it (due a grace and a margin before).
    let at = |k: &str| {
        baton_core::Timestamp::parse_rfc3339(r[k].as_str().unwrap())
            .unwrap()
            .as_millis()
    };
    let (expiry, began) = (at("lease_expiry"), at("started_at"));
    assert!(expiry - began <= 3_000, "the lease ran past the limit: {r}");
    assert!(
        term_at < expiry,
        "SIGTERM came {} ms after the limit: {r}",
        term_at - expiry
    );
    // The lease ends at the limit; the next grant is a new attempt.
    std::thread::sleep(
        Duration::from_secs(3).saturating_sub(started.elapsed()) + Duration::from_millis(300),
    );
    let (code, g) = env.baton(&["claim", "t", "--owner", "v"]);
    assert_eq!(code, 0, "{g}");
    assert_eq!(g["attempt"], 2, "{g}");
    let (_, shown) = env.baton(&["task", "show", "t"]);
    assert_eq!(shown["stalls"], 1, "{shown}");
    let events = env.events("t");
    assert!(events.iter().any(|e| e == "TIMED_OUT"), "{events:?}");
}

/// A grant that reaches `baton run` with its lease already over (here:
/// the wrapper's clock runs 5 s ahead of its server's, so a 2 s lease
/// ended before the answer by the clock the keeper keeps) starts nothing:
/// the wrapper gives the task back and exits with its own status.
#[test]
fn a_grant_answered_with_its_lease_over_starts_no_child() {
    let ft = "/usr/bin/faketime";
    if !Path::new(ft).exists() {
        assert!(
            std::env::var("BATON_TEST_SERVER").as_deref() != Ok("1"),
            "faketime is not installed: apt-get install faketime (scripts/test does it)"
        );
        eprintln!("skipped: faketime is not installed");
        return;
    }
    let (_server, env, _dir) = through_a_server();
    let ran = env.path("ran");
    let report = env.path("report.json");
    let mut c = Command::new(ft);
    c.args(["-f", "+5s", BIN, "--store", &env.store])
        .args(["run", "late", "--owner", "w", "--ttl", "2s", "--report"])
        .arg(&report)
        .args(["--", "sh", "-c", &format!("touch {}", ran.display())])
        .env_remove("BATON_STORE");
    let out = c.output().unwrap();
    assert_eq!(out.status.code(), Some(200), "{out:?}");
    assert!(!ran.exists(), "the child ran on a lease that was over");
    let r = read_report(&report, &out);
    assert_eq!(r["outcome"], "released", "{r}");
    assert!(
        r["reason"].as_str().unwrap().contains("safety margin"),
        "{r}"
    );
    // Given back: another worker may take it at once.
    let taken = env
        .cmd(&["claim", "late", "--owner", "v"])
        .output()
        .unwrap();
    assert!(taken.status.success(), "{taken:?}");
}

/// A run that waited behind another writer's lock longer than its TTL
/// still gets a whole lease (it is timed when decided) and runs.
#[test]
fn a_run_that_waited_for_the_sqlite_lock_gets_a_whole_lease() {
    let env = Env::new(Backend::Sqlite);
    let db = env.path("b.db");
    env.cmd(&["claim", "warm", "--owner", "w"])
        .output()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let holder = std::thread::spawn(move || {
        let c = rusqlite::Connection::open(&db).unwrap();
        c.execute_batch("BEGIN IMMEDIATE").unwrap();
        tx.send(()).unwrap();
        std::thread::sleep(Duration::from_secs(3));
        c.execute_batch("ROLLBACK").unwrap();
    });
    rx.recv().unwrap();
    let ran = env.path("ran");
    let report = env.path("report.json");
    let out = env
        .cmd(&["run", "waited", "--owner", "w", "--ttl", "1s", "--report"])
        .arg(&report)
        .args(["--", "sh", "-c", &format!("touch {}", ran.display())])
        .output()
        .unwrap();
    holder.join().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(ran.exists(), "the child did not run");
    assert_eq!(read_report(&report, &out)["outcome"], "completed");
}

/// `run --next --wait --keep-waiting`: a worker's wait for work. An empty
/// queue is waited out (not answered `drained` at once, which makes a
/// worker loop spin), and work added meanwhile is run.
#[test]
fn run_next_keeps_waiting_for_work_and_runs_what_is_added() {
    let env = Env::new(Backend::Sqlite);
    let args = [
        "run", "--next", "--owner", "w", "--queue", "idle", "--wait", "20s",
    ];
    let refused = |args: &[&str]| {
        let started = Instant::now();
        let out = env.cmd(args).args(["--", "true"]).output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(201), "{said}");
        assert!(said.contains("drained"), "{said}");
        started.elapsed()
    };
    let took = refused(&args);
    assert!(
        took < Duration::from_secs(5),
        "a plain wait answers a drained queue at once"
    );
    // Kept waiting, with an add 1 s into the wait: the child runs it.
    let marker = env.path("ran");
    let adder = {
        let mut c = env.cmd(&["add", "late", "--queue", "idle"]);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(1));
            c.output().unwrap()
        })
    };
    let started = Instant::now();
    let mut keep: Vec<&str> = args.to_vec();
    keep.push("--keep-waiting");
    let (code, report) = env.run(&keep, &format!("touch {}", marker.display()));
    assert!(adder.join().unwrap().status.success());
    assert_eq!(
        (code, report["task"].as_str()),
        (0, Some("late")),
        "{report}"
    );
    assert!(
        marker.exists(),
        "the task added during the wait did not run"
    );
    assert!(started.elapsed() >= Duration::from_secs(1), "{report}");
    // And with nothing added it waits the whole time, then says drained.
    let short = [
        "run",
        "--next",
        "--owner",
        "w",
        "--queue",
        "none",
        "--wait",
        "1500ms",
        "--keep-waiting",
    ];
    assert!(refused(&short) >= Duration::from_millis(1400));
}

/// `run --next --count 3`: three grants in one commit, the three children
/// at once (each waits until the others have started), each under its own
/// lease and reported on its own; the first run to end, failing, stops
/// nothing of the others (a run's tree is its own), and the wrapper exits
/// with the first non-zero status in grant order.
#[test]
fn a_batch_runs_its_grants_at_once_and_no_run_stops_anothers() {
    let env = Env::new(Backend::Sqlite);
    for t in ["a", "b", "c"] {
        let (code, r) = env.baton(&["add", t, "--queue", "q"]);
        assert_eq!(code, 0, "{r}");
    }
    let dir = env.path("");
    let script = format!(
        "cd {dir}; echo $$ > $BATON_TASK.pid; \
         [ $BATON_TASK = a ] && exit 3; \
         n=0; until [ -e b.pid ] && [ -e c.pid ]; do n=$((n+1)); [ $n -gt 500 ] && exit 9; sleep 0.01; done; \
         sleep 1; echo $BATON_FENCE > $BATON_TASK.done",
        dir = dir.display()
    );
    let report = env.path("report");
    let out = env
        .cmd(&[
            "run", "--next", "--count", "3", "--queue", "q", "--owner", "w", "--grace", "300ms",
            "--report",
        ])
        .arg(&report)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let lines: Vec<Value> = std::fs::read_to_string(&report)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "one report line per run: {lines:?}");
    let by = |t: &str| lines.iter().find(|l| l["task"] == t).unwrap().clone();
    assert_eq!(by("a")["outcome"], "failed");
    for t in ["b", "c"] {
        let r = by(t);
        assert_eq!(r["outcome"], "completed", "{r}");
        let fence = std::fs::read_to_string(env.path(&format!("{t}.done"))).unwrap();
        assert_eq!(fence.trim(), r["fence"].to_string(), "its own lease");
    }
    let mut fences: Vec<u64> = lines.iter().map(|l| l["fence"].as_u64().unwrap()).collect();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), 3, "a fence each");
    for (t, state) in [("a", "FAILED"), ("b", "SUCCEEDED"), ("c", "SUCCEEDED")] {
        let (_, r) = env.baton(&["task", "show", t]);
        assert_eq!(r["state"], state, "{t}: {r}");
    }
}

/// A batch's wrapper signalled: every child is stopped and every grant
/// given back (the next `next --count` gets them all again); SIGKILLed:
/// every run's guardian kills its child.
#[test]
fn a_batchs_wrapper_signalled_or_killed_stops_every_child() {
    use nix::sys::signal::Signal;
    for sig in [Signal::SIGTERM, Signal::SIGKILL] {
        let env = Env::new(Backend::Sqlite);
        for t in ["a", "b"] {
            env.baton(&["add", t, "--queue", "q"]);
        }
        let script = format!(
            "echo $$ > {dir}/$BATON_TASK.tmp; mv {dir}/$BATON_TASK.tmp {dir}/$BATON_TASK.pid; while :; do sleep 0.02; done",
            dir = env.path("").display()
        );
        let mut wrapper = spawn_run(
            &env,
            &[
                "run", "--next", "--count", "2", "--queue", "q", "--owner", "w", "--ttl", "30s",
                "--grace", "300ms",
            ],
            &script,
            &env.path("report"),
        );
        let pids = [pid_in(&env.path("a.pid")), pid_in(&env.path("b.pid"))];
        signal(&wrapper, sig);
        wrapper.wait().unwrap();
        for pid in pids {
            gone_within(pid, Duration::from_secs(3), &format!("a child after {sig}"));
        }
        if sig == Signal::SIGTERM {
            let lines = std::fs::read_to_string(env.path("report")).unwrap();
            assert_eq!(lines.matches("\"released\"").count(), 2, "{lines}");
            let out = env
                .cmd(&["next", "--owner", "x", "--queue", "q", "--count", "2"])
                .output()
                .unwrap();
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).lines().count(),
                2,
                "both given back: {out:?}"
            );
        }
    }
}

/// A task added with `--traceparent` has it on its grants, and `baton run`
/// gives it to the child as `TRACEPARENT`, `next` and a claim by id alike;
/// a malformed one is refused naming the field, and adds nothing.
#[test]
fn the_child_joins_the_trace_its_task_was_added_in() {
    let env = Env::new(Backend::Sqlite);
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let (code, out) = env.baton(&["add", "traced", "--queue", "tq", "--traceparent", tp]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = env.baton(&["add", "bad", "--traceparent", "00-xyz-01"]);
    assert_eq!(
        (code, out["error"]["field"].as_str()),
        (2, Some("traceparent")),
        "{out}"
    );
    let (code, _) = env.baton(&["task", "show", "bad"]);
    assert_eq!(code, 5, "nothing added");
    let seen = env.path("seen");
    let (code, report) = env.run(
        &["run", "--next", "--queue", "tq", "--owner", "w"],
        &format!("printf %s \"$TRACEPARENT\" > {}", seen.display()),
    );
    assert_eq!(code, 0, "{report}");
    assert_eq!(std::fs::read_to_string(&seen).unwrap(), tp);
    // The grant a claim prints carries it too.
    let (code, out) = env.baton(&["add", "traced-2", "--traceparent", tp]);
    assert_eq!(code, 0, "{out}");
    let (code, g) = env.baton(&["claim", "traced-2", "--owner", "w"]);
    assert_eq!((code, g["traceparent"].as_str()), (0, Some(tp)), "{g}");
    // A graph file's node takes it as well.
    let file = env.path("graph.json");
    std::fs::write(
        &file,
        format!(r#"[{{"task": "traced-3", "traceparent": "{tp}"}}]"#),
    )
    .unwrap();
    let (code, out) = env.baton(&["add", "--file", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let (code, g) = env.baton(&["claim", "traced-3", "--owner", "w"]);
    assert_eq!((code, g["traceparent"].as_str()), (0, Some(tp)), "{g}");
}
