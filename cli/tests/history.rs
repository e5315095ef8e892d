//! Checked histories from real client processes on every store several
//! processes share, recorded under faults and checked by `baton-check`
//! (a linearizability search over a model of one task, and fences
//! store-wide): SQLite with writers SIGKILLed mid-commit and clients whose
//! clocks are skewed, Postgres restarted the way a crash does, etcd with
//! its leader killed, and `baton serve` frozen with SIGSTOP and SIGKILLed.
//! Every client also writes through a SQLite guard under its fences
//! (zombies included), checked against the guard's model. The in-process
//! stores (memory, sled) and the stores (and guard) broken on purpose are
//! checked in `check/tests/`.
//!
//! Each run records for a few seconds here; the long run is
//! `BATON_HISTORY_SECS=300 cargo test -p baton-cli --all-features --test history -- --test-threads=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_check::{Limits, Plan, Report, Writer, check_files, run_client};
use baton_core::Capabilities;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_baton");

/// How long a run records: `BATON_HISTORY_SECS`, else `short`.
fn secs(short: f64) -> f64 {
    std::env::var("BATON_HISTORY_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(short)
}

/// The child: one recording client (its plan, store and file from the
/// environment), run by the tests below as a process of its own.
#[test]
#[ignore]
fn history_client() {
    let Ok(plan) = std::env::var("BATON_HISTORY_PLAN") else {
        return;
    };
    let plan: Plan = serde_json::from_str(&plan).unwrap();
    let url = std::env::var("BATON_HISTORY_STORE").unwrap();
    let out = PathBuf::from(std::env::var("BATON_HISTORY_OUT").unwrap());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // A store that is down while a fault is under way is waited for.
        let auth = loop {
            match baton_open::authority_for(&url).await {
                Ok(a) => break a,
                Err(e)
                    if e.kind.is_temporary() && baton_check::history::now_us() < plan.until_us =>
                {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("{url}: {e}"),
            }
        };
        let mut w = Writer::create(&out).unwrap();
        run_client(&auth, &plan, &mut w).await.unwrap();
    });
}

fn capabilities(url: &str) -> Capabilities {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async { baton_open::store_for(url).await.unwrap().capabilities() })
}

/// One recording: client processes on `url`, replaced when killed.
/// Debian's libfaketime (package `faketime`), multi-threaded flavour.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

struct Recording {
    dir: tempfile::TempDir,
    /// The SQLite guard every client also writes through (zombies too).
    _guard: tempfile::TempDir,
    url: String,
    base: Plan,
    clients: Vec<(u32, Child)>,
    killed: Vec<u32>,
    next: u32,
    started: Instant,
    rng: fastrand::Rng,
}

impl Recording {
    /// `clients` processes for `secs`, with TTLs the store honours; those
    /// given a skew run under `faketime -f SKEW` (their wall clock off,
    /// the monotonic clock the history is stamped with left alone).
    fn start(url: &str, clients: u32, secs: f64, skews: &[&str]) -> Recording {
        let caps = capabilities(url);
        let mut base = Plan::new(0, "h", secs);
        let shortest = caps.min_ttl_ms.max(200);
        base.ttl_ms = (shortest, shortest + 500);
        let longest = Limits::from(caps).effective_ttl_ms(base.ttl_ms.1);
        base.generation_ms = (2 * longest).max(1500);
        let guard = tempfile::tempdir().unwrap();
        let db = guard.path().join("guard.db");
        baton_check::install_guard(&db).unwrap();
        base.guard = Some(db);
        let mut r = Recording {
            dir: tempfile::tempdir().unwrap(),
            _guard: guard,
            url: url.to_owned(),
            base,
            clients: Vec::new(),
            killed: Vec::new(),
            next: 0,
            started: Instant::now(),
            rng: fastrand::Rng::with_seed(7),
        };
        for c in 0..clients {
            r.spawn(skews.get(c as usize).copied());
        }
        r
    }

    fn spawn(&mut self, skew: Option<&str>) {
        let client = self.next;
        self.next += 1;
        let mut plan = self.base.clone();
        plan.client = client;
        plan.owner = format!("c{client}");
        plan.seed = self.base.seed.wrapping_add(u64::from(client) * 104_729);
        let test = std::env::current_exe().unwrap();
        let mut c = Command::new(&test);
        if let Some(s) = skew {
            // libfaketime preloaded as `faketime -f` would (same FAKETIME),
            // not through the wrapper: the wrapper keeps a semaphore named
            // by its pid, which a killed client leaves behind for a later
            // process with that pid to fail on ("sem_open: File exists").
            if Path::new(LIBFAKETIME).exists() {
                c.env("LD_PRELOAD", LIBFAKETIME).env("FAKETIME", s);
            } else {
                c = Command::new("faketime");
                c.args(["-f", s]).arg(&test);
            }
        }
        c.args([
            "--exact",
            "history_client",
            "--ignored",
            "--nocapture",
            "--quiet",
        ])
        .env("BATON_HISTORY_PLAN", serde_json::to_string(&plan).unwrap())
        .env("BATON_HISTORY_STORE", &self.url)
        .env("BATON_HISTORY_OUT", self.file(client))
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env_remove("BATON_STORE")
        .stdout(Stdio::null());
        self.clients.push((client, c.spawn().unwrap()));
    }

    fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    fn recording(&self) -> bool {
        baton_check::history::now_us() < self.base.until_us
    }

    /// SIGKILLs one client at random, as soon as its history shows a call
    /// in flight (an invocation with no answer yet: a write mid-commit, or
    /// waiting for the lock), and starts another in its place (a new owner).
    fn kill_mid_call(&mut self) {
        let i = self.rng.usize(0..self.clients.len());
        let path = self.file(self.clients[i].0);
        let until = Instant::now() + Duration::from_millis(500);
        while Instant::now() < until && !in_call(&path) {
            std::thread::sleep(Duration::from_micros(200));
        }
        let (client, mut child) = self.clients.remove(i);
        child.kill().unwrap();
        child.wait().unwrap();
        self.killed.push(client);
        self.spawn(None);
    }

    /// Waits (up to a second) until some client has a call in flight.
    fn wait_for_a_call(&self) {
        let until = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until && !self.clients.iter().any(|(c, _)| in_call(&self.file(*c))) {
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    fn file(&self, client: u32) -> PathBuf {
        self.dir.path().join(format!("client-{client}.jsonl"))
    }

    /// Waits for every client to finish, then checks what they recorded.
    fn finish(mut self, limits: Limits) -> Report {
        let until = Instant::now() + Duration::from_secs(60);
        for (client, child) in &mut self.clients {
            loop {
                if let Some(status) = child.try_wait().unwrap() {
                    assert!(status.success(), "client {client} failed: {status}");
                    break;
                }
                assert!(Instant::now() < until, "client {client} did not finish");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let files: Vec<PathBuf> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        let report = check_files(&files, limits).unwrap();
        println!(
            "{} after {:.1}s, {} clients killed:\n{report}",
            self.url,
            self.elapsed().as_secs_f64(),
            self.killed.len()
        );
        report
    }
}

/// Whether the last line of a client's history is an invocation.
fn in_call(path: &std::path::Path) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    let len = f.seek(SeekFrom::End(0)).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(600)));
    let mut tail = String::new();
    let _ = f.read_to_string(&mut tail);
    tail.trim_end()
        .rsplit('\n')
        .next()
        .is_some_and(|l| l.contains("\"at\":\"invoke\""))
}

/// The run exercised what it is meant to.
fn assert_exercised(r: &Report) {
    assert!(r.grants >= 20, "too few grants to mean anything: {r}");
    assert!(r.steps > 0, "no steps recorded: {r}");
    assert!(r.step_repeats > 0, "no step sent again: {r}");
    assert!(r.writes > 0, "no guarded writes: {r}");
    for reason in ["held", "stale_fence", "done", "holder", "verified"] {
        assert!(
            r.answers.get(reason).copied().unwrap_or(0) > 0,
            "no `{reason}` answers: {r}"
        );
    }
}

fn ms(v: u64) -> u64 {
    v * 1000
}

#[test]
fn sqlite_with_writers_killed_mid_commit_and_skewed_clocks() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("h.db").display());
    // SQLite keeps no clock of its own: each client's judges. Two clients
    // are 40 ms off either way, so a lease may be judged over up to 80 ms
    // early; the bound allows that and 20 ms of rounding.
    let mut rec = Recording::start(&url, 6, secs(10.0), &["+0.04", "-0.04"]);
    let mut next_kill = Duration::from_millis(700);
    while rec.recording() {
        if rec.elapsed() >= next_kill {
            rec.kill_mid_call();
            next_kill += Duration::from_millis(rec.rng.u64(300..900));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let limits = Limits {
        skew_us: ms(100),
        overstay_us: ms(100),
        ..Limits::from(capabilities(&url))
    };
    let r = rec.finish(limits);
    assert!(r.ok(), "{r}");
    assert_exercised(&r);
    assert!(r.unknown > 0, "no client was killed mid-call: {r}");
}

/// Records while `fault` runs on this thread (it is called every 20 ms
/// with the time since the start, until the recording ends).
fn record_with(rec: &mut Recording, mut fault: impl FnMut(Duration)) {
    while rec.recording() {
        fault(rec.elapsed());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn postgres_restarted_as_after_a_crash() {
    let Some(mut pg) = baton_store_postgres::testing::PgCluster::start_or_skip() else {
        return;
    };
    // Leases from 300 ms (the store's floor is 2 s by default), so that
    // many expire and are granted again within the run.
    let url = format!("{}&min_ttl=300ms", pg.url("history"));
    // The server's clock judges every lease: clients half a minute off
    // either way change nothing, so the bound is rounding alone.
    let mut rec = Recording::start(&url, 8, secs(10.0), &["+30", "-30"]);
    let mut crashes = 0;
    record_with(&mut rec, |t| {
        // Every 4 s of the run, an immediate stop and a start.
        if t >= Duration::from_secs(3 + 4 * crashes) {
            crashes += 1;
            pg.crash();
            std::thread::sleep(Duration::from_millis(300));
            pg.restart();
        }
    });
    let limits = Limits {
        skew_us: ms(3),
        overstay_us: ms(3),
        ..Limits::from(capabilities(&url))
    };
    let r = rec.finish(limits);
    assert!(r.ok(), "{r}");
    assert_exercised(&r);
    assert!(
        r.unknown + r.unavailable > 0,
        "the restarts went unseen: {r}"
    );
}

#[test]
fn etcd_with_its_leader_killed() {
    let Some(mut etcd) = baton_adapter_fabric::testing::EtcdCluster::start_or_skip() else {
        return;
    };
    // Leases of one second, etcd's shortest.
    let url = format!("{}?min_ttl=1s", etcd.url("history"));
    // etcd's leases judge liveness: clients a second off change nothing.
    let mut rec = Recording::start(&url, 6, secs(14.0), &["+1", "-1"]);
    let mut kills = 0;
    let mut down: Option<(usize, Duration)> = None;
    record_with(&mut rec, |t| {
        match down {
            // Every 5 s of the run, the leader SIGKILLed; back 2 s later.
            None if t >= Duration::from_secs(3 + 5 * kills) => {
                if let Some(l) = etcd.leader() {
                    etcd.kill(l);
                    down = Some((l, t));
                    kills += 1;
                }
            }
            Some((l, at)) if t >= at + Duration::from_secs(2) => {
                etcd.restart(l);
                down = None;
            }
            _ => {}
        }
    });
    if let Some((l, _)) = down {
        etcd.restart(l);
    }
    assert!(kills > 0, "no leader was killed");
    // A lease is never over early by etcd's clock, but one may outlive its
    // TTL: etcd checks for expired leases periodically, and a new leader
    // gives every lease its whole TTL again.
    let limits = Limits {
        skew_us: ms(3),
        overstay_us: ms(6000),
        ..Limits::from(capabilities(&url))
    };
    let r = rec.finish(limits);
    assert!(r.ok(), "{r}");
    assert_exercised(&r);
}

/// A `baton serve` child, killed when dropped.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `baton serve` on a fixed port (so that a restart is found again).
fn serve(store: &str, port: u16) -> Served {
    let mut c = Command::new(BIN);
    c.args([
        "serve",
        "--store",
        store,
        "--listen",
        &format!("127.0.0.1:{port}"),
    ])
    .env_remove("BATON_STORE")
    .env_remove("BATON_TOKEN")
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    let child = c.spawn().unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < until,
            "baton serve did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Served(child)
}

fn signal(served: &Served, sig: nix::sys::signal::Signal) {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(served.0.id()).unwrap());
    nix::sys::signal::kill(pid, sig).unwrap();
}

#[test]
fn a_server_frozen_and_killed() {
    use nix::sys::signal::Signal;
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("served.db").display());
    let port = baton_core::testing::listen_port().unwrap();
    let mut server = serve(&store, port);
    let url = format!("http://127.0.0.1:{port}");
    // The server's clock judges: clients half a minute off change nothing.
    let rec = Recording::start(&url, 6, secs(12.0), &["+30", "-30"]);
    // In every 8 s of the run: at 3 s the server freezes for 1.5 s
    // (SIGSTOP, SIGCONT); at 7 s it is SIGKILLed with a call in flight and
    // started again half a second later.
    let (mut cycle, mut step) = (0u32, 0);
    let mut kills = 0;
    while rec.recording() {
        let t = rec.elapsed().saturating_sub(Duration::from_secs(8) * cycle);
        match step {
            0 if t >= Duration::from_secs(3) => {
                signal(&server, Signal::SIGSTOP);
                step = 1;
            }
            1 if t >= Duration::from_millis(4500) => {
                signal(&server, Signal::SIGCONT);
                step = 2;
            }
            2 if t >= Duration::from_secs(7) => {
                rec.wait_for_a_call();
                drop(server);
                kills += 1;
                std::thread::sleep(Duration::from_millis(500));
                server = serve(&store, port);
                step = 0;
                cycle += 1;
            }
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if step == 1 {
        signal(&server, Signal::SIGCONT);
    }
    assert!(kills > 0, "the faults did not all happen");
    let limits = Limits {
        skew_us: ms(3),
        overstay_us: ms(3),
        ..Limits::from(capabilities(&url))
    };
    let r = rec.finish(limits);
    drop(server);
    assert!(r.ok(), "{r}");
    assert_exercised(&r);
    assert!(r.unknown + r.unavailable > 0, "the faults went unseen: {r}");
}

/// The check is not blind to real processes: SQLite judges leases by its
/// clients' clocks (SPEC §7), so clients a second apart are granted
/// leases others still hold, and a bound of 100 ms must not pass that.
#[test]
fn sqlite_clients_skewed_past_the_bound_are_caught() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("h.db").display());
    let mut rec = Recording::start(&url, 6, 6.0, &["+0.5", "-0.5", "+0.5", "-0.5"]);
    record_with(&mut rec, |_| {});
    let limits = Limits {
        skew_us: ms(100),
        overstay_us: ms(100),
        ..Limits::from(capabilities(&url))
    };
    let r = rec.finish(limits);
    assert!(!r.ok(), "leases granted a second early went unnoticed: {r}");
    assert!(
        r.violations.iter().any(|v| !v.contains("guarded writes")),
        "caught for the guard, not the leases: {r}"
    );
}
