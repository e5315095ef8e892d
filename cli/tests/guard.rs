//! `baton guard` and signed fences as real processes: a zombie writer
//! paused with SIGSTOP past its lease, resumed after a later attempt
//! wrote, is refused by the file, SQLite and Postgres guards; a server
//! with a fence key signs its grants (the task API's, `baton run`'s
//! child's, an `http://` client's) and only for the lease's holder; a
//! forged or unsigned fence is refused; and a guard that is missing or a
//! database that is down fails closed, naming why.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

#[path = "common/server.rs"]
mod server;

use baton_core::fencing::FenceKeys;
use baton_store_postgres::testing::PgCluster;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;
use server::Server;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_baton");
const WORKER: &str = "wwwwwwwwwwwwwwwwwwwwwwww";
const OTHER: &str = "vvvvvvvvvvvvvvvvvvvvvvvv";

fn cmd(args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args);
    for v in [
        "BATON_STORE",
        "BATON_TOKEN",
        "BATON_FENCE",
        "BATON_FENCE_TOKEN",
        "BATON_FENCE_KEY",
        "BATON_GUARD_KEY",
    ] {
        c.env_remove(v);
    }
    c
}

fn json_of(out: &std::process::Output) -> Value {
    let text = if out.stdout.is_empty() {
        &out.stderr
    } else {
        &out.stdout
    };
    serde_json::from_slice(text)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(text).into()))
}

/// Runs baton with `stdin`; its exit code and JSON.
fn baton_in(c: &mut Command, stdin: &str) -> (i32, Value) {
    c.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.code().unwrap_or(-1), json_of(&out))
}

fn baton(args: &[&str]) -> (i32, Value) {
    let out = cmd(args).output().unwrap();
    (out.status.code().unwrap_or(-1), json_of(&out))
}

/// A claim on `store` with `env` added: the grant.
fn claim(store: &str, task: &str, owner: &str, ttl: &str, env: &[(&str, &str)]) -> Value {
    let mut c = cmd(&[
        "--store", store, "claim", task, "--owner", owner, "--ttl", ttl,
    ]);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    assert!(out.status.success(), "{:?}", json_of(&out));
    json_of(&out)
}

/// A guarded writer started now, blocked reading what to write, then
/// paused: a worker stopped between taking the work and writing.
fn zombie(mut c: Command, fence: &Value) -> Child {
    c.env("BATON_FENCE", fence.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = c.spawn().unwrap();
    kill(Pid::from_raw(child.id() as i32), Signal::SIGSTOP).unwrap();
    child
}

/// Resumes the zombie, feeds it `stdin`: its exit code and JSON.
fn resume(mut child: Child, stdin: &str) -> (i32, Value) {
    kill(Pid::from_raw(child.id() as i32), Signal::SIGCONT).unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.code().unwrap_or(-1), json_of(&out))
}

/// The zombie round every guard must pass: attempt 1 takes the task and is
/// paused before it writes; its lease runs out; attempt 2 takes the task
/// and writes; attempt 1 resumes and writes. `write(fence, text)` builds a
/// guarded writer reading `text` on stdin.
fn zombie_round(store: &str, task: &str, write: impl Fn() -> Command) -> ((i32, Value), Value) {
    let first = claim(store, task, "w1", "400ms", &[]);
    let z = zombie(write(), &first["fence"]);
    std::thread::sleep(Duration::from_millis(600));
    let second = claim(store, task, "w2", "30s", &[]);
    assert!(second["fence"].as_u64() > first["fence"].as_u64());
    let mut c = write();
    c.env("BATON_FENCE", second["fence"].to_string());
    let (code, v) = baton_in(&mut c, "later attempt\n");
    assert_eq!(code, 0, "{v}");
    (resume(z, "zombie\n"), second)
}

#[test]
fn a_zombie_resumed_after_sigstop_is_refused_by_the_file_guard() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("b.db").display());
    let out = dir.path().join("report.txt");
    let o = out.display().to_string();
    let ((code, v), second) = zombie_round(&store, "report", || {
        cmd(&["guard", "write", &o, "--resource", "report"])
    });
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["code"], "stale_fence");
    assert_eq!(v["highest"], second["fence"]);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "later attempt\n");
    let (_, shown) = baton(&[
        "guard",
        "show",
        &dir.path().join(".baton-guard").display().to_string(),
        "--resource",
        "report",
    ]);
    assert_eq!(shown["fence"], second["fence"]);
}

#[test]
fn a_zombies_sql_never_runs_and_the_later_attempts_does() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("b.db").display());
    let app_path = dir.path().join("app.db");
    let app = format!("sqlite:{}", app_path.display());
    // Before install: named, exit 3, nothing run.
    let (code, v) = baton_in(
        &mut cmd(&["guard", "sql", &app, "--resource", "acct", "--fence", "1"]),
        "CREATE TABLE never (x int)",
    );
    assert_eq!(code, 3, "{v}");
    assert!(v.to_string().contains("guard_not_installed"), "{v}");
    assert_eq!(baton(&["guard", "install", &app]).0, 0);
    let db = rusqlite::Connection::open(&app_path).unwrap();
    db.execute_batch("CREATE TABLE acct (n int, who text); INSERT INTO acct VALUES (0, '')")
        .unwrap();
    let first = claim(&store, "acct", "w1", "400ms", &[]);
    let z = zombie(
        cmd(&["guard", "sql", &app, "--resource", "acct"]),
        &first["fence"],
    );
    std::thread::sleep(Duration::from_millis(600));
    let second = claim(&store, "acct", "w2", "30s", &[]);
    let mut c = cmd(&["guard", "sql", &app, "--resource", "acct"]);
    c.env("BATON_FENCE", second["fence"].to_string());
    let (code, v) = baton_in(&mut c, "UPDATE acct SET n = n + 1, who = 'w2'");
    assert_eq!(code, 0, "{v}");
    let (code, v) = resume(z, "UPDATE acct SET n = n + 1, who = 'zombie'");
    assert_eq!((code, v["code"].as_str()), (1, Some("stale_fence")), "{v}");
    let row: (i64, String) = db
        .query_row("SELECT n, who FROM acct", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!(row, (1, "w2".into()));
}

#[test]
fn a_zombie_resumed_after_sigstop_is_refused_by_the_postgres_guard() {
    let Some(mut pg) = PgCluster::start_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("b.db").display());
    let db = format!("postgres://baton@127.0.0.1:{}/postgres", pg.port);
    // Not installed: exit 3, named.
    let (code, v) = baton_in(
        &mut cmd(&["guard", "sql", &db, "--resource", "acct", "--fence", "1"]),
        "SELECT 1",
    );
    assert_eq!(code, 3, "{v}");
    assert!(v.to_string().contains("guard_not_installed"), "{v}");
    let (code, v) = baton(&["guard", "install", &db]);
    assert_eq!(code, 0, "{v}");
    pg.sql("CREATE TABLE acct (n int, who text); INSERT INTO acct VALUES (0, '')");
    let first = claim(&store, "acct", "w1", "400ms", &[]);
    let z = zombie(
        cmd(&["guard", "sql", &db, "--resource", "acct"]),
        &first["fence"],
    );
    std::thread::sleep(Duration::from_millis(600));
    let second = claim(&store, "acct", "w2", "30s", &[]);
    let mut c = cmd(&["guard", "sql", &db, "--resource", "acct"]);
    c.env("BATON_FENCE", second["fence"].to_string());
    let (code, v) = baton_in(&mut c, "UPDATE acct SET n = n + 1, who = 'w2'");
    assert_eq!(code, 0, "{v}");
    let (code, v) = resume(z, "UPDATE acct SET n = n + 1, who = 'zombie'");
    assert_eq!((code, v["code"].as_str()), (1, Some("stale_fence")), "{v}");
    assert_eq!(pg.sql("SELECT n || ' ' || who FROM acct"), "1 w2");
    // The database down: exit 3, nothing admitted.
    pg.crash();
    let (code, v) = baton_in(
        &mut cmd(&["guard", "sql", &db, "--resource", "acct", "--fence", "99"]),
        "UPDATE acct SET who = 'down'",
    );
    assert_eq!(code, 3, "{v}");
    assert!(v.to_string().contains("unavailable"), "{v}");
    pg.restart();
    assert_eq!(
        pg.sql("SELECT fence FROM baton_guard.fences WHERE resource = 'acct'"),
        second["fence"].to_string()
    );
}

fn http(addr: SocketAddr, path: &str, token: &str, body: &str) -> (u16, Value) {
    let mut s = TcpStream::connect(addr).unwrap();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let (head, rest) = answer.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, serde_json::from_str(rest).unwrap_or(Value::Null))
}

fn key_file(dir: &Path, name: &str) -> std::path::PathBuf {
    let out = cmd(&["guard", "keygen"]).output().unwrap();
    assert!(out.status.success());
    let p = dir.join(name);
    std::fs::write(&p, &out.stdout).unwrap();
    p
}

#[test]
fn a_server_with_a_fence_key_signs_its_holders_fences_and_guards_refuse_forgeries() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "fence.key");
    let forger = key_file(dir.path(), "forger.key");
    let keys = FenceKeys::parse(&std::fs::read_to_string(&key).unwrap()).unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        format!("ci worker {WORKER} owners=w,w-*\nci2 worker {OTHER}\n"),
    )
    .unwrap();
    let store = format!("sqlite:{}", dir.path().join("b.db").display());
    let s = Server::start_with(
        &store,
        &[
            "--tokens",
            &tokens.display().to_string(),
            "--fence-key",
            &key.display().to_string(),
        ],
    );
    let url = s.url();

    // The task API's grant carries a token the key verifies.
    let (st, g) = http(
        s.addr,
        "/v1/tasks/t1/claim",
        WORKER,
        r#"{"owner":"w","ttl_ms":30000}"#,
    );
    assert_eq!(st, 200, "{g}");
    let t = g["token"].as_str().expect("a signed grant");
    let v = keys.verify(t).unwrap();
    assert_eq!(
        (v.fence, v.task.as_str()),
        (g["fence"].as_u64().unwrap(), "t1")
    );

    // An http:// client (no key of its own) gets its token from the server.
    let (code, g2) = {
        let mut c = cmd(&[
            "--store", &url, "claim", "t2", "--owner", "w-2", "--ttl", "30s",
        ]);
        c.env("BATON_TOKEN", WORKER);
        let out = c.output().unwrap();
        (out.status.code().unwrap(), json_of(&out))
    };
    assert_eq!(code, 0, "{g2}");
    assert_eq!(
        keys.verify(g2["token"].as_str().unwrap()).unwrap().fence,
        g2["fence"].as_u64().unwrap()
    );

    // The server signs only for the lease's holder, only its live fence.
    let ask = |token: &str, task: &str, fence: &Value| {
        http(
            s.addr,
            "/v1/store/fence_token",
            token,
            &format!(r#"{{"task":"{task}","fence":{fence}}}"#),
        )
    };
    assert_eq!(
        ask(WORKER, "t1", &g["fence"]),
        (200, Value::String(t.into()))
    );
    assert_eq!(
        ask(OTHER, "t1", &g["fence"]),
        (200, Value::Null),
        "another worker's token"
    );
    let next = g["fence"].as_u64().unwrap() + 100;
    assert_eq!(
        ask(WORKER, "t1", &Value::from(next)),
        (200, Value::Null),
        "a fence not granted"
    );

    // `baton run` through the server hands the child its signed fence.
    let mut c = cmd(&[
        "--store",
        &url,
        "run",
        "t3",
        "--owner",
        "w",
        "--ttl",
        "30s",
        "--",
        "sh",
        "-c",
        "printf %s \"$BATON_FENCE_TOKEN\" > tok",
    ]);
    c.env("BATON_TOKEN", WORKER).current_dir(dir.path());
    assert!(c.status().unwrap().success());
    let child_token = std::fs::read_to_string(dir.path().join("tok")).unwrap();
    assert_eq!(keys.verify(&child_token).unwrap().task, "t3");

    // A file guard holding the key: the real token passes; a forged one, a
    // real one with its fence raised, and a bare fence are refused, and
    // none of them moves the mark.
    let out = dir.path().join("o.txt").display().to_string();
    let k = key.display().to_string();
    let write = |fence: &str, text: &str| {
        baton_in(
            &mut cmd(&[
                "guard",
                "write",
                &out,
                "--resource",
                "o",
                "--key",
                &k,
                "--fence",
                fence,
            ]),
            text,
        )
    };
    assert_eq!(write(t, "honest").0, 0);
    let forged = FenceKeys::parse(&std::fs::read_to_string(&forger).unwrap())
        .unwrap()
        .sign("t1", 1 << 60);
    let raised = t.replacen(&format!("bf1.{}.", g["fence"]), "bf1.999999999.", 1);
    for (fence, code) in [
        (forged.as_str(), "forged_fence"),
        (raised.as_str(), "forged_fence"),
        ("999999999", "unsigned_fence"),
    ] {
        let (exit, v) = write(fence, "forged");
        assert_eq!((exit, v["code"].as_str()), (1, Some(code)), "{fence}: {v}");
    }
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "honest");
    // Still the honest fence's mark: the next honest attempt passes.
    let (_, shown) = baton(&[
        "guard",
        "show",
        &dir.path().join(".baton-guard").display().to_string(),
        "--resource",
        "o",
    ]);
    assert_eq!(shown["fence"], g["fence"]);
}

#[test]
fn a_local_authority_signs_with_its_key_file_and_keeps_it_from_the_child() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "fence.key");
    let keys = FenceKeys::parse(&std::fs::read_to_string(&key).unwrap()).unwrap();
    let store = format!("sqlite:{}", dir.path().join("b.db").display());
    let k = key.display().to_string();
    let g = claim(&store, "a", "w", "30s", &[("BATON_FENCE_KEY", &k)]);
    assert_eq!(
        keys.verify(g["token"].as_str().unwrap()).unwrap().fence,
        g["fence"].as_u64().unwrap()
    );
    // Without the key, no token.
    assert!(claim(&store, "b", "w", "30s", &[]).get("token").is_none());
    // A bad key file is named and nothing is granted.
    let short = dir.path().join("short.key");
    std::fs::write(&short, "too short").unwrap();
    let out = cmd(&["--store", &store, "claim", "c", "--owner", "w"])
        .env("BATON_FENCE_KEY", &short)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{:?}", json_of(&out));
    assert!(json_of(&out).to_string().contains("fence key"));
    let (_, holder) = baton(&["--store", &store, "holder", "c"]);
    assert_eq!(holder["refused"], "not_found", "{holder}");
    // The child sees its token, never where the key is.
    let mut c = cmd(&[
        "--store",
        &store,
        "run",
        "d",
        "--owner",
        "w",
        "--",
        "sh",
        "-c",
        "echo \"${BATON_FENCE_KEY:-none} $BATON_FENCE_TOKEN\" > seen",
    ]);
    c.env("BATON_FENCE_KEY", &k).current_dir(dir.path());
    assert!(c.status().unwrap().success());
    let seen = std::fs::read_to_string(dir.path().join("seen")).unwrap();
    let (where_key, token) = seen.trim().split_once(' ').unwrap();
    assert_eq!(where_key, "none");
    assert_eq!(keys.verify(token).unwrap().task, "d");
}

#[test]
fn a_client_asks_a_server_for_tokens_only_when_it_signs() {
    // Without --fence-key the server says it signs nothing, and its
    // clients' grants cost no request for a token; with one, they ask.
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "fence.key");
    for (signs, args) in [
        (false, vec!["--request-log"]),
        (
            true,
            vec!["--request-log", "--fence-key", key.to_str().unwrap()],
        ),
    ] {
        let store = format!(
            "sqlite:{}",
            dir.path().join(format!("s-{signs}.db")).display()
        );
        let s = Server::start_with(&store, &args);
        let out = cmd(&["--store", &s.url(), "claim", "t", "--owner", "w"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{:?}", json_of(&out));
        assert_eq!(json_of(&out).get("token").is_some(), signs);
        // The request log's line for the claim's token request comes
        // before the server answers the next request; wait for one.
        let _ = cmd(&["--store", &s.url(), "holder", "t"]).output().unwrap();
        let log = s.log.lock().unwrap().join("\n");
        assert!(log.contains("/v1/store/apply"), "{log}");
        assert_eq!(log.contains("/v1/store/fence_token"), signs, "{log}");
    }
}
