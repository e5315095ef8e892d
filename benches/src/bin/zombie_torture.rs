//! The zombie torture: each round a holder is paused past its lease
//! (SIGSTOP on its whole process group), another worker takes the work and
//! does its read-modify-write of one shared row and one file, then the
//! first resumes and does the same. A stale write is a write the first
//! attempt made after the later attempt's first write; with the pause
//! lasting until the later write is done, every write of the resumed
//! attempt that lands is stale. Systems side by side, each with its own
//! row and file, run at once:
//!
//! * `etcdctl-lock`: `etcdctl lock --ttl` held by the worker;
//! * `skip-locked`: a bare `FOR UPDATE SKIP LOCKED` claim with a
//!   visibility timeout (`locked_until`);
//! * `pg-boss`: pg-boss 10 with `expireInSeconds` (a node worker,
//!   `zombie_torture_pgboss.js`, when `ZT_NODE_DIR` has pg-boss);
//! * `baton-lease`: baton's lease alone (the worker renews, so checks its
//!   lease, right before it is paused);
//! * `baton-guard-postgres`, `baton-guard-sqlite`, `baton-guard-http`:
//!   baton with a guard on the row (Postgres, SQLite, a tower layer in
//!   front of the service that writes) and the file guard on the file;
//! * `baton-signed`: the Postgres and file guards with keys, the authority
//!   signing fences; each round a forger also writes with a huge fence
//!   signed by another key (`forged_accepted` counts those that land).
//!
//! Prints one JSON line per system (`system`, `rounds`, `stale_writes`,
//! `writes`, ...). Run by `scripts/zombie-torture ROUNDS`, which starts
//! Postgres and etcd and sets `ZT_PG`, `ZT_ETCD`, `ZT_DIR`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark fails by panicking

use baton_core::Id;
use baton_guard::{FenceKeys, Presented};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::json;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// The lease (and visibility timeout) of the systems that take one in ms.
const LEASE_MS: u64 = 400;

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set (run scripts/zombie-torture)"))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("worker") => worker(&args[2]),
        _ => orchestrate(&args[1..]),
    }
}

// ---------------------------------------------------------------------------
// The orchestrator.

struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Worker {
    fn start(system: &str, role: &str) -> Worker {
        let (program, args): (PathBuf, Vec<String>) = if system == "pg-boss" {
            let script =
                Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bin/zombie_torture_pgboss.js");
            ("node".into(), vec![script.display().to_string()])
        } else {
            (
                std::env::current_exe().unwrap(),
                vec!["worker".into(), system.into()],
            )
        };
        let mut c = Command::new(program);
        c.args(args)
            .env("ZT_ROLE", role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .process_group(0);
        if system == "pg-boss" {
            c.env("NODE_PATH", format!("{}/node_modules", env("ZT_NODE_DIR")));
        }
        let mut child = c.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Worker {
            child,
            stdin,
            stdout,
        }
    }

    fn send(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn answer(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        assert!(!line.is_empty(), "a worker ended");
        line.trim().to_owned()
    }

    fn ask(&mut self, line: &str) -> String {
        self.send(line);
        self.answer()
    }

    fn group(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.child.id()).unwrap())
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = killpg(self.group(), Signal::SIGCONT);
        let _ = killpg(self.group(), Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// How long the holder stays paused before the next attempt is asked in:
/// past its lease.
fn pause(system: &str) -> Duration {
    match system {
        "etcdctl-lock" => Duration::from_millis(2300),
        "pg-boss" => Duration::from_millis(1200),
        _ => Duration::from_millis(LEASE_MS + 60),
    }
}

fn run_system(system: &str, rounds: u64) -> serde_json::Value {
    let mut a = Worker::start(system, "A");
    let mut b = Worker::start(system, "B");
    let mut forger = (system == "baton-signed").then(|| Worker::start(system, "F"));
    let (mut stale, mut writes, mut refused, mut forged, mut errors) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let started = Instant::now();
    for r in 0..rounds {
        let got = a.ask(&format!("acquire {r}"));
        if !got.starts_with("acquired") {
            errors += 1;
            eprintln!("{system} round {r}: A: {got}");
            continue;
        }
        // Paused between its check and its write; the write is queued.
        killpg(a.group(), Signal::SIGSTOP).unwrap();
        a.send(&format!("write {r}"));
        std::thread::sleep(pause(system));
        let got = b.ask(&format!("acquire {r}"));
        if !got.starts_with("acquired") {
            errors += 1;
            eprintln!("{system} round {r}: B: {got}");
            killpg(a.group(), Signal::SIGCONT).unwrap();
            let _ = a.answer();
            continue;
        }
        let wrote = b.ask(&format!("write {r}"));
        writes += landed(&wrote);
        if let Some(f) = forger.as_mut() {
            forged += landed(&f.ask(&format!("forge {r}")));
        }
        killpg(a.group(), Signal::SIGCONT).unwrap();
        let late = a.answer();
        // What the zombie says landed, checked against what is stored.
        let stored = b.ask(&format!("look {r}"));
        let claimed = landed(&late);
        let found = stored.matches(&format!("{r}:A")).count() as u64;
        if claimed != found {
            eprintln!("{system} round {r}: A said {late:?}, the storage shows {stored:?}");
        }
        stale += found.max(claimed);
        refused += 2 - claimed.min(2);
        let _ = b.ask(&format!("done {r}"));
        let _ = a.ask(&format!("done {r}"));
    }
    json!({
        "system": system,
        "rounds": rounds,
        "stale_writes": stale,
        "later_writes": writes,
        "zombie_writes_refused": refused,
        "forged_accepted": forger.as_ref().map(|_| forged),
        "errors": errors,
        "seconds": (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
    })
}

/// How many of a write's targets landed (`row=ok file=ok`: 2).
fn landed(answer: &str) -> u64 {
    answer.matches("=ok").count() as u64
}

fn orchestrate(args: &[String]) {
    let rounds: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(100);
    let peer_rounds: u64 = std::env::var("ZT_PEER_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(rounds.min(50));
    let mut systems = vec![
        ("etcdctl-lock", peer_rounds),
        ("skip-locked", rounds),
        ("baton-lease", rounds),
        ("baton-guard-postgres", rounds),
        ("baton-guard-sqlite", rounds),
        ("baton-guard-http", rounds),
        ("baton-signed", rounds),
    ];
    if std::env::var("ZT_NODE_DIR")
        .is_ok_and(|d| Path::new(&d).join("node_modules/pg-boss").exists())
    {
        systems.insert(1, ("pg-boss", peer_rounds));
    } else {
        eprintln!("pg-boss skipped: ZT_NODE_DIR has no node_modules/pg-boss");
    }
    if let Ok(only) = std::env::var("ZT_SYSTEMS") {
        systems.retain(|(s, _)| only.split(',').any(|o| o == *s));
    }
    setup();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _service = rt.block_on(serve_http());
    let handles: Vec<_> = systems
        .into_iter()
        .map(|(s, n)| std::thread::spawn(move || run_system(s, n)))
        .collect();
    for h in handles {
        println!("{}", h.join().unwrap());
    }
}

/// The shared tables, guards and key files.
fn setup() {
    let dir = PathBuf::from(env("ZT_DIR"));
    std::fs::write(dir.join("fence.key"), baton_guard::keygen().unwrap()).unwrap();
    std::fs::write(dir.join("forger.key"), baton_guard::keygen().unwrap()).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let pg = env("ZT_PG");
        let mut c = baton_guard::postgres::connect(&pg).await.unwrap();
        c.batch_execute(
            "DROP TABLE IF EXISTS zt_rows, zt_jobs;
             CREATE TABLE zt_rows (system text PRIMARY KEY, value bigint NOT NULL, writer text NOT NULL);
             CREATE TABLE zt_jobs (id bigint PRIMARY KEY, locked_until timestamptz, attempt int NOT NULL DEFAULT 0);",
        )
        .await
        .unwrap();
        // Each on its own: neither runs inside a transaction block.
        c.batch_execute("DROP DATABASE IF EXISTS zt_signed").await.unwrap();
        c.batch_execute("CREATE DATABASE zt_signed").await.unwrap();
        baton_guard::postgres::install(&mut c, None).await.unwrap();
        let mut s = baton_guard::postgres::connect(&signed_url(&pg)).await.unwrap();
        let keys = FenceKeys::parse(&std::fs::read_to_string(dir.join("fence.key")).unwrap()).unwrap();
        baton_guard::postgres::install(&mut s, Some(&keys)).await.unwrap();
        s.batch_execute("CREATE TABLE zt_rows (system text PRIMARY KEY, value bigint NOT NULL, writer text NOT NULL)")
            .await
            .unwrap();
    });
    let app = rusqlite::Connection::open(dir.join("app.db")).unwrap();
    app.execute_batch(
        "PRAGMA journal_mode=WAL;
         CREATE TABLE IF NOT EXISTS zt_rows (system TEXT PRIMARY KEY, value INTEGER NOT NULL, writer TEXT NOT NULL);",
    )
    .unwrap();
    baton_guard::sqlite::install(&app).unwrap();
}

fn signed_url(pg: &str) -> String {
    match pg.rsplit_once('/') {
        Some((base, _)) => format!("{base}/zt_signed"),
        None => pg.to_owned(),
    }
}

// ---------------------------------------------------------------------------
// The HTTP service: a tower layer admits the fence, the handler does the
// read-modify-write of its row and file, unguarded inside.

async fn serve_http() -> tokio::task::JoinHandle<()> {
    use axum::routing::post;
    use baton_guard::http::{FenceLayer, Marks};
    let dir = PathBuf::from(env("ZT_DIR"));
    let marks = Marks::open(&dir.join("http-marks.db")).unwrap();
    let app = axum::Router::new()
        .route(
            "/write",
            post(|body: String| async move {
                let tag = body.trim().to_owned();
                let pg = env("ZT_PG");
                let dir = PathBuf::from(env("ZT_DIR"));
                let c = baton_guard::postgres::connect(&pg).await.unwrap();
                rmw_pg_plain(&c, "baton-guard-http", &tag).await;
                rmw_file(&dir.join("baton-guard-http.txt"), &tag);
                "row=ok file=ok".to_owned()
            }),
        )
        .layer(FenceLayer::new(std::sync::Arc::new(marks)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    std::fs::write(
        dir.join("http.addr"),
        listener.local_addr().unwrap().to_string(),
    )
    .unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    })
}

// ---------------------------------------------------------------------------
// The workers.

/// What a worker holds between `acquire` and `done`.
#[derive(Default)]
struct Held {
    fence: u64,
    token: Option<String>,
    etcdctl: Option<Child>,
}

fn worker(system: &str) {
    let role = env("ZT_ROLE");
    let dir = PathBuf::from(env("ZT_DIR"));
    let pg = env("ZT_PG");
    let rt = tokio::runtime::Runtime::new().unwrap();
    // The signed system's authority signs its fences (the forger's does
    // not: it signs with a key of its own).
    let signing = system == "baton-signed" && role != "F";
    let key_path = dir.join("fence.key");
    let auth = rt.block_on(async {
        let url = format!(
            "sqlite:{}",
            dir.join(format!("baton-{system}.db")).display()
        );
        let a = baton_open::authority_for(&url).await.unwrap();
        if signing {
            a.with_fence_keys(baton_open::read_fence_keys(&key_path).unwrap())
        } else {
            a
        }
    });
    let owner = Id::parse("owner", &format!("w{role}")).unwrap();
    let target_db = if system == "baton-signed" {
        signed_url(&pg)
    } else {
        pg.clone()
    };
    let client = rt
        .block_on(baton_guard::postgres::connect(&target_db))
        .unwrap();
    let mut app = rusqlite::Connection::open(dir.join("app.db")).unwrap();
    app.busy_timeout(Duration::from_secs(10)).unwrap();
    let file = dir.join(format!("{system}.txt"));
    let mut held = Held::default();
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    for line in stdin.lock().lines() {
        let line = line.unwrap();
        let mut words = line.split_whitespace();
        let (verb, r) = (words.next().unwrap_or(""), words.next().unwrap_or("0"));
        let tag = format!("{r}:{role}");
        let answer = match verb {
            "acquire" => match acquire(system, r, &rt, &auth, &owner, &client) {
                Ok(h) => {
                    let a = format!("acquired {}", h.fence);
                    held = h;
                    a
                }
                Err(e) => format!("error {e}"),
            },
            "write" => rt.block_on(write(system, &tag, &held, &client, &mut app, &file, &dir)),
            "forge" => {
                let forger =
                    FenceKeys::parse(&std::fs::read_to_string(dir.join("forger.key")).unwrap())
                        .unwrap();
                let forged = Held {
                    fence: 1 << 60,
                    token: Some(forger.sign(&format!("zt-{r}"), 1 << 60)),
                    etcdctl: None,
                };
                rt.block_on(write(system, &tag, &forged, &client, &mut app, &file, &dir))
            }
            "look" => rt.block_on(look(system, &client, &app, &file)),
            "done" => {
                if let Some(mut c) = held.etcdctl.take() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                if system.starts_with("baton") {
                    let task = Id::parse("task", &format!("zt-{r}")).unwrap();
                    let _ = rt.block_on(auth.complete(&task, &owner, held.fence));
                }
                "ok".to_owned()
            }
            other => format!("error unknown command {other}"),
        };
        writeln!(out, "{answer}").unwrap();
        out.flush().unwrap();
    }
}

fn acquire(
    system: &str,
    r: &str,
    rt: &tokio::runtime::Runtime,
    auth: &baton_open::DynAuthority,
    owner: &Id,
    client: &tokio_postgres::Client,
) -> Result<Held, String> {
    let until = Instant::now() + Duration::from_secs(30);
    match system {
        "etcdctl-lock" => {
            let mut c = Command::new("etcdctl")
                .args(["--endpoints", &env("ZT_ETCD"), "lock", "--ttl", "1", &format!("zt-{r}")])
                .env("ETCDCTL_API", "3")
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| e.to_string())?;
            // It prints the lock's key once it holds the lock.
            let mut first = [0u8; 1];
            c.stdout.as_mut().unwrap().read_exact(&mut first).map_err(|e| e.to_string())?;
            Ok(Held {
                etcdctl: Some(c),
                ..Held::default()
            })
        }
        "skip-locked" => rt.block_on(async {
            let id: i64 = r.parse().unwrap();
            client
                .execute("INSERT INTO zt_jobs (id) VALUES ($1) ON CONFLICT DO NOTHING", &[&id])
                .await
                .map_err(|e| e.to_string())?;
            loop {
                let row = client
                    .query_opt(
                        &format!(
                            "UPDATE zt_jobs SET locked_until = clock_timestamp() + interval '{LEASE_MS} milliseconds', attempt = attempt + 1
                             WHERE id = (SELECT id FROM zt_jobs WHERE id = $1
                                         AND (locked_until IS NULL OR locked_until < clock_timestamp())
                                         FOR UPDATE SKIP LOCKED)
                             RETURNING attempt"
                        ),
                        &[&id],
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                if let Some(row) = row {
                    let attempt: i32 = row.get(0);
                    return Ok(Held {
                        fence: u64::try_from(attempt).unwrap_or(0),
                        ..Held::default()
                    });
                }
                if Instant::now() > until {
                    return Err("never got the job".into());
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }),
        _ => rt.block_on(async {
            let task = Id::parse("task", &format!("zt-{r}")).unwrap();
            loop {
                let reply = auth
                    .claim(&task, owner, Some(LEASE_MS))
                    .await
                    .map_err(|e| e.to_string())?;
                if let Some(g) = reply.grant() {
                    // The lease-only worker's check: its lease is renewed
                    // (so live) right before it is paused.
                    let renewed = auth
                        .renew(&task, owner, g.fence, Some(LEASE_MS))
                        .await
                        .map_err(|e| e.to_string())?;
                    if renewed.is_refused() {
                        return Err(format!("renew refused: {renewed:?}"));
                    }
                    let token = auth.fence_token(&task, g.fence).await.map_err(|e| e.to_string())?;
                    // Paused right after the store's commit: a SQLite
                    // writer keeps the store's write gate a moment after
                    // one, and other writers must go around a stopped one.
                    return Ok(Held {
                        fence: g.fence,
                        token,
                        etcdctl: None,
                    });
                }
                if Instant::now() > until {
                    return Err(format!("never granted: {reply:?}"));
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }),
    }
}

fn presented(held: &Held) -> Presented {
    match &held.token {
        Some(t) => Presented::Token(t.clone()),
        None => Presented::Fence(held.fence),
    }
}

async fn write(
    system: &str,
    tag: &str,
    held: &Held,
    client: &tokio_postgres::Client,
    app: &mut rusqlite::Connection,
    file: &Path,
    dir: &Path,
) -> String {
    let p = presented(held);
    let keys = (system == "baton-signed").then(|| {
        FenceKeys::parse(&std::fs::read_to_string(dir.join("fence.key")).unwrap()).unwrap()
    });
    match system {
        "baton-guard-postgres" | "baton-signed" => {
            let row = rmw_pg_guarded(client, system, tag, &p).await;
            let file = rmw_file_guarded(file, system, tag, &p, keys.as_ref());
            format!("row={row} file={file}")
        }
        "baton-guard-sqlite" => {
            let row = rmw_sqlite_guarded(app, system, tag, &p);
            let file = rmw_file_guarded(file, system, tag, &p, None);
            format!("row={row} file={file}")
        }
        "baton-guard-http" => http_write(dir, tag, held.fence),
        _ => {
            rmw_pg_plain(client, system, tag).await;
            rmw_file(file, tag);
            "row=ok file=ok".into()
        }
    }
}

/// What the row and the file of `system` hold: `row=VALUE WRITER file=...`.
async fn look(
    system: &str,
    client: &tokio_postgres::Client,
    app: &rusqlite::Connection,
    file: &Path,
) -> String {
    let row = if system == "baton-guard-sqlite" {
        app.query_row(
            "SELECT writer FROM zt_rows WHERE system = ?1",
            [system],
            |r| r.get::<_, String>(0),
        )
        .unwrap_or_default()
    } else {
        client
            .query_opt("SELECT writer FROM zt_rows WHERE system = $1", &[&system])
            .await
            .unwrap()
            .map(|r| r.get::<_, String>(0))
            .unwrap_or_default()
    };
    let file = std::fs::read_to_string(file).unwrap_or_default();
    format!(
        "row={row} file={}",
        file.split_whitespace().nth(1).unwrap_or("")
    )
}

/// A naive read-modify-write: read the value, write it plus one.
async fn rmw_pg_plain(c: &tokio_postgres::Client, system: &str, tag: &str) {
    let v: i64 = c
        .query_opt("SELECT value FROM zt_rows WHERE system = $1", &[&system])
        .await
        .unwrap()
        .map(|r| r.get(0))
        .unwrap_or(0);
    c.execute(
        "INSERT INTO zt_rows VALUES ($1, $2, $3) ON CONFLICT (system) DO UPDATE SET value = $2, writer = $3",
        &[&system, &(v + 1), &tag],
    )
    .await
    .unwrap();
}

async fn rmw_pg_guarded(
    c: &tokio_postgres::Client,
    system: &str,
    tag: &str,
    p: &Presented,
) -> &'static str {
    c.batch_execute("BEGIN").await.unwrap();
    let admitted = baton_guard::postgres::admit(c, &format!("row:{system}"), p).await;
    if admitted.is_err() {
        c.batch_execute("ROLLBACK").await.unwrap();
        return "refused";
    }
    rmw_pg_plain(c, system, tag).await;
    c.batch_execute("COMMIT").await.unwrap();
    "ok"
}

fn rmw_sqlite_guarded(
    app: &mut rusqlite::Connection,
    system: &str,
    tag: &str,
    p: &Presented,
) -> &'static str {
    let tx = app
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .unwrap();
    if baton_guard::sqlite::admit(&tx, &format!("row:{system}"), p, None).is_err() {
        return "refused";
    }
    let v: i64 = tx
        .query_row(
            "SELECT value FROM zt_rows WHERE system = ?1",
            [system],
            |r| r.get(0),
        )
        .unwrap_or(0);
    tx.execute(
        "INSERT INTO zt_rows VALUES (?1, ?2, ?3) ON CONFLICT (system) DO UPDATE SET value = ?2, writer = ?3",
        rusqlite::params![system, v + 1, tag],
    )
    .unwrap();
    tx.commit().unwrap();
    "ok"
}

fn read_value(file: &Path) -> i64 {
    std::fs::read_to_string(file)
        .ok()
        .and_then(|t| t.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn rmw_file(file: &Path, tag: &str) {
    let v = read_value(file);
    std::fs::write(file, format!("{} {tag}\n", v + 1)).unwrap();
}

fn rmw_file_guarded(
    file: &Path,
    system: &str,
    tag: &str,
    p: &Presented,
    keys: Option<&FenceKeys>,
) -> &'static str {
    let v = read_value(file);
    let content = format!("{} {tag}\n", v + 1);
    match baton_guard::file::write(
        file,
        &format!("file:{system}"),
        p,
        keys,
        None,
        &mut content.as_bytes(),
    ) {
        Ok(_) => "ok",
        Err(_) => "refused",
    }
}

fn http_write(dir: &Path, tag: &str, fence: u64) -> String {
    let addr = std::fs::read_to_string(dir.join("http.addr")).unwrap();
    let mut s = std::net::TcpStream::connect(addr.trim()).unwrap();
    let req = format!(
        "POST /write HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nBaton-Fence: {fence}\r\nBaton-Resource: service\r\nContent-Length: {}\r\n\r\n{tag}",
        tag.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    if answer.starts_with("HTTP/1.1 200") {
        "row=ok file=ok".into()
    } else {
        "row=refused file=refused".into()
    }
}
