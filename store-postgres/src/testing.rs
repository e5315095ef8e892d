//! A throwaway Postgres server for tests: `initdb` on a temporary
//! directory, `postgres` on a free loopback port (no Unix socket), run as
//! an unprivileged user when the tests run as root (Postgres refuses
//! root). The server is stopped and its directory removed when the value
//! is dropped or, for one kept in a static, when the test process exits.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where the server's programs are: `BATON_PG_BIN`, the directory of an
/// `initdb` on `PATH`, or the newest `/usr/lib/postgresql/*/bin` (Debian's).
pub fn bin_dir() -> Option<PathBuf> {
    if let Ok(d) = std::env::var("BATON_PG_BIN") {
        return Some(PathBuf::from(d));
    }
    let has = |d: &Path| d.join("initdb").exists() && d.join("postgres").exists();
    if let Ok(path) = std::env::var("PATH") {
        for d in std::env::split_paths(&path) {
            let initdb = d.join("initdb");
            if initdb.exists() {
                let real = std::fs::canonicalize(&initdb).ok()?;
                let dir = real.parent()?.to_path_buf();
                if has(&dir) {
                    return Some(dir);
                }
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| {
            let e = e.ok()?;
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            Some((v, e.path().join("bin")))
        })
        .filter(|(_, d)| has(d))
        .collect();
    versions.sort();
    versions.pop().map(|(_, d)| d)
}

/// Why the Postgres tests cannot run here, if they cannot. With
/// `BATON_TEST_POSTGRES=1` (as `scripts/test` sets) a missing server is a
/// failure instead, so CI never skips them.
pub fn skip_reason() -> Option<String> {
    if bin_dir().is_some() {
        return None;
    }
    if std::env::var("BATON_TEST_POSTGRES").as_deref() == Ok("1") {
        panic!(
            "BATON_TEST_POSTGRES=1 but no Postgres server programs were found: run `apt-get install postgresql`; scripts/test does it for you"
        );
    }
    Some(
        "Postgres is not installed (apt-get install postgresql, or run scripts/test); set BATON_TEST_POSTGRES=1 to require it"
            .to_owned(),
    )
}

fn free_port() -> u16 {
    baton_core::testing::listen_port().expect("a free loopback port for a test server")
}

/// The user the server runs as when the tests run as root.
fn unprivileged() -> Option<nix::unistd::User> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    for name in ["postgres", "nobody"] {
        if let Ok(Some(u)) = nix::unistd::User::from_name(name) {
            return Some(u);
        }
    }
    panic!("running as root and there is neither a postgres nor a nobody user to run Postgres as");
}

#[derive(Debug)]
pub struct PgCluster {
    pub port: u16,
    bin: PathBuf,
    dir: tempfile::TempDir,
    user: Option<nix::unistd::User>,
    /// The `sh` that runs the server and cleans up after it.
    guard: Option<Child>,
    pid: Option<u32>,
}

impl PgCluster {
    /// Starts a server, or prints why it cannot and returns `None` (see
    /// [`skip_reason`]).
    pub fn start_or_skip() -> Option<PgCluster> {
        if let Some(why) = skip_reason() {
            eprintln!("skipped: {why}");
            return None;
        }
        Some(PgCluster::start())
    }

    /// `initdb`, then the server, waiting until it accepts connections.
    pub fn start() -> PgCluster {
        let bin = bin_dir().expect("Postgres server programs");
        let dir = tempfile::Builder::new()
            .prefix("baton-pg-")
            .tempdir()
            .unwrap();
        let user = unprivileged();
        if let Some(u) = &user {
            std::os::unix::fs::chown(dir.path(), Some(u.uid.as_raw()), Some(u.gid.as_raw()))
                .unwrap();
        }
        let mut c = PgCluster {
            port: free_port(),
            bin,
            dir,
            user,
            guard: None,
            pid: None,
        };
        let out = c
            .command("initdb")
            .args(["-D", &c.data().display().to_string()])
            .args(["-U", "baton", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .args(["--locale=C"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        c.launch();
        c
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(program));
        if let Some(u) = &self.user {
            cmd.uid(u.uid.as_raw()).gid(u.gid.as_raw());
        }
        cmd.env("LC_ALL", "C");
        cmd
    }

    fn launch(&mut self) {
        let data = self.data();
        let log = self.dir.path().join("server.log");
        let args = [
            format!("-D {}", data.display()),
            format!("-p {}", self.port),
            "-c listen_addresses=127.0.0.1".to_owned(),
            "-c unix_socket_directories=".to_owned(),
            "-c max_connections=200".to_owned(),
            "-c fsync=on".to_owned(),
            "-c shared_buffers=64MB".to_owned(),
            // For the test that fences follow commit order.
            "-c track_commit_timestamp=on".to_owned(),
        ];
        // The server runs under a watcher: when this test process is gone,
        // the server is stopped at once and its directory removed.
        let script = format!(
            "'{}' {} 2>>'{}' & e=$!; echo $e; while [ -d /proc/{} ] && kill -0 $e 2>/dev/null; do sleep 0.3; done; kill -QUIT $e 2>/dev/null; wait $e 2>/dev/null; [ -f '{}/.keep' ] || rm -rf '{}'",
            self.bin.join("postgres").display(),
            args.join(" "),
            log.display(),
            std::process::id(),
            self.dir.path().display(),
            self.dir.path().display(),
        );
        let mut cmd = Command::new("sh");
        if let Some(u) = &self.user {
            cmd.uid(u.uid.as_raw()).gid(u.gid.as_raw());
        }
        let mut child = cmd
            .args(["-c", &script])
            .env("LC_ALL", "C")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        self.pid = line.trim().parse().ok();
        self.guard = Some(child);
        self.wait_ready(Duration::from_secs(60));
    }

    /// Waits until the server answers a query.
    pub fn wait_ready(&self, within: Duration) {
        let start = Instant::now();
        while start.elapsed() < within {
            if self.try_sql("SELECT 1").is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let log = std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
        panic!("the Postgres server did not come up within {within:?}; its log:\n{log}");
    }

    /// What the server wrote to its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// A store URL on this server's `postgres` database in `schema`.
    pub fn url(&self, schema: &str) -> String {
        format!(
            "postgres://baton@127.0.0.1:{}/postgres?schema={schema}",
            self.port
        )
    }

    /// Runs `sql` through `psql` in database `db`: its output (unaligned,
    /// tuples only), or what psql said when it failed.
    pub fn run_sql(&self, db: &str, sql: &str) -> Result<String, String> {
        let psql = if self.bin.join("psql").exists() {
            self.bin.join("psql")
        } else {
            PathBuf::from("psql")
        };
        let port = self.port.to_string();
        let out = Command::new(psql)
            .args(["-h", "127.0.0.1", "-p", &port, "-U", "baton", "-d", db])
            .args(["-At", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .env("PGCONNECT_TIMEOUT", "2")
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
        }
    }

    /// [`PgCluster::run_sql`] in the `postgres` database, `None` on failure.
    pub fn try_sql(&self, sql: &str) -> Option<String> {
        self.run_sql("postgres", sql).ok()
    }

    /// [`PgCluster::run_sql`] in the `postgres` database, panicking when it fails.
    pub fn sql(&self, sql: &str) -> String {
        self.sql_in("postgres", sql)
    }

    /// [`PgCluster::run_sql`], panicking when it fails.
    pub fn sql_in(&self, db: &str, sql: &str) -> String {
        self.run_sql(db, sql)
            .unwrap_or_else(|e| panic!("psql failed on {sql:?} in {db}: {e}"))
    }

    /// Stops the server the way a crash does (`SIGQUIT`: no checkpoint;
    /// the next start replays the log). Its data stays, for [`PgCluster::restart`].
    pub fn crash(&mut self) {
        std::fs::write(self.dir.path().join(".keep"), b"").ok();
        if let Some(pid) = self.pid.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
                nix::sys::signal::Signal::SIGQUIT,
            );
        }
        if let Some(mut g) = self.guard.take() {
            let _ = g.wait();
        }
        // The postmaster is gone once its pid file is (or its process is).
        let start = Instant::now();
        while self.data().join("postmaster.pid").exists()
            && start.elapsed() < Duration::from_secs(30)
        {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts a crashed server again on the same port and data.
    pub fn restart(&mut self) {
        let _ = std::fs::remove_file(self.dir.path().join(".keep"));
        self.launch();
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        if let Some(pid) = self.pid.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap_or(0)),
                nix::sys::signal::Signal::SIGQUIT,
            );
        }
        if let Some(mut g) = self.guard.take() {
            let _ = g.wait();
        }
    }
}
