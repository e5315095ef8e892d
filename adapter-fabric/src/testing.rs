//! A real etcd cluster for tests: 3 members of Debian's `etcd` on free
//! loopback ports with temporary data directories, stopped (and their
//! preallocated WAL removed) when the cluster is dropped or, for a cluster
//! kept in a static, when the test process exits.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Member {
    pub name: String,
    pub client_port: u16,
    pub peer_port: u16,
    data: PathBuf,
    /// The `sh` that runs etcd and cleans up after it.
    guard: Option<Child>,
    pid: Option<u32>,
}

#[derive(Debug)]
pub struct EtcdCluster {
    pub members: Vec<Member>,
    dir: tempfile::TempDir,
    token: String,
}

fn free_port() -> u16 {
    baton_core::testing::listen_port().expect("a free loopback port for a test server")
}

/// The etcd binary, or a panic that says how to install it.
pub fn etcd_binary() -> PathBuf {
    for p in ["/usr/bin/etcd", "/usr/local/bin/etcd"] {
        if Path::new(p).exists() {
            return PathBuf::from(p);
        }
    }
    panic!(
        "etcd is not installed: run `apt-get install etcd-server` (Debian's etcd 3.4); scripts/test does it for you"
    )
}

/// Why the etcd tests cannot run here, if they cannot: etcd is not
/// installed. With `BATON_TEST_ETCD=1` (as `scripts/test` sets) a missing
/// etcd is a failure instead, so CI never skips them.
pub fn skip_reason() -> Option<String> {
    let installed = ["/usr/bin/etcd", "/usr/local/bin/etcd"]
        .iter()
        .any(|p| Path::new(p).exists());
    if installed {
        return None;
    }
    if std::env::var("BATON_TEST_ETCD").as_deref() == Ok("1") {
        panic!(
            "BATON_TEST_ETCD=1 but etcd is not installed: run `apt-get install etcd-server` (Debian's etcd 3.4); scripts/test does it for you"
        );
    }
    Some(
        "etcd is not installed (apt-get install etcd-server, or run scripts/test); set BATON_TEST_ETCD=1 to require it"
            .to_owned(),
    )
}

impl EtcdCluster {
    /// Starts a cluster, or prints why it cannot and returns `None` (see
    /// [`skip_reason`]): a test that gets `None` returns at once.
    pub fn start_or_skip() -> Option<EtcdCluster> {
        if let Some(why) = skip_reason() {
            eprintln!("skipped: {why}");
            return None;
        }
        Some(EtcdCluster::start())
    }

    /// Starts a 3-member cluster and waits until it is writable.
    pub fn start() -> EtcdCluster {
        let dir = tempfile::tempdir().unwrap();
        let token = format!("baton-{}", std::process::id());
        let members: Vec<Member> = (0..3)
            .map(|i| Member {
                name: format!("m{i}"),
                client_port: free_port(),
                peer_port: free_port(),
                data: dir.path().join(format!("m{i}")),
                guard: None,
                pid: None,
            })
            .collect();
        let mut c = EtcdCluster {
            members,
            dir,
            token,
        };
        for i in 0..3 {
            c.launch(i, "new");
        }
        c.wait_writable(Duration::from_secs(30));
        c
    }

    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn launch(&mut self, i: usize, state: &str) {
        let etcd = etcd_binary();
        let initial = self.initial_cluster();
        let m = &self.members[i];
        let log = self.dir.path().join(format!("{}.log", m.name));
        let args = [
            format!("--name={}", m.name),
            format!("--data-dir={}", m.data.display()),
            format!("--listen-client-urls=http://127.0.0.1:{}", m.client_port),
            format!("--advertise-client-urls=http://127.0.0.1:{}", m.client_port),
            format!("--listen-peer-urls=http://127.0.0.1:{}", m.peer_port),
            format!(
                "--initial-advertise-peer-urls=http://127.0.0.1:{}",
                m.peer_port
            ),
            format!("--initial-cluster={initial}"),
            format!("--initial-cluster-token={}", self.token),
            format!("--initial-cluster-state={state}"),
            "--auto-compaction-retention=1".to_owned(),
            "--experimental-enable-lease-checkpoint=true".to_owned(),
            "--logger=zap".to_owned(),
            "--log-level=error".to_owned(),
        ];
        let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
        // etcd runs under a watcher: when this test process is gone, etcd is
        // killed and its data (with ~120 MiB of preallocated WAL) removed.
        let script = format!(
            "{} {} 2>>'{}' & e=$!; echo $e; while kill -0 {} 2>/dev/null && kill -0 $e 2>/dev/null; do sleep 0.5; done; kill -9 $e 2>/dev/null; wait $e 2>/dev/null; [ -f '{}/.keep' ] || rm -rf '{}'",
            etcd.display(),
            quoted.join(" "),
            log.display(),
            std::process::id(),
            m.data.display(),
            m.data.display(),
        );
        let mut child = Command::new("sh")
            .args(["-c", &script])
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
        let m = &mut self.members[i];
        m.pid = line.trim().parse().ok();
        m.guard = Some(child);
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect()
    }

    /// `etcd://HOST:PORT,.../PREFIX`
    pub fn url(&self, prefix: &str) -> String {
        format!("etcd://{}/{prefix}", self.endpoints().join(","))
    }

    fn etcdctl(&self, endpoints: &str, args: &[&str]) -> Option<String> {
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={endpoints}"))
            .arg("--command-timeout=2s")
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Waits until a write through any live member succeeds.
    pub fn wait_writable(&self, within: Duration) {
        let start = Instant::now();
        let eps = self.live_endpoints().join(",");
        while start.elapsed() < within {
            if self
                .etcdctl(&eps, &["put", "baton-test-probe", "1"])
                .is_some()
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "the etcd cluster was not writable within {within:?}; logs in {}",
            self.dir.path().display()
        );
    }

    fn live_endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .filter(|m| m.pid.is_some())
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect()
    }

    /// The index of the current leader, asked of the live members.
    pub fn leader(&self) -> Option<usize> {
        for (i, m) in self.members.iter().enumerate() {
            if m.pid.is_none() {
                continue;
            }
            let ep = format!("127.0.0.1:{}", m.client_port);
            if let Some(out) = self.etcdctl(&ep, &["endpoint", "status", "--write-out=json"]) {
                let v: serde_json::Value = serde_json::from_str(&out).ok()?;
                let s = &v[0]["Status"];
                if s["header"]["member_id"] == s["leader"] {
                    return Some(i);
                }
            }
        }
        None
    }

    /// SIGKILLs member `i` (its data stays, for a restart).
    pub fn kill(&mut self, i: usize) {
        let m = &mut self.members[i];
        std::fs::write(m.data.join(".keep"), b"").ok();
        if let Some(pid) = m.pid.take() {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
        if let Some(mut g) = m.guard.take() {
            let _ = g.wait();
        }
    }

    /// Freezes member `i` with SIGSTOP: its sockets stay open and accept,
    /// but it answers nothing (a hung process, a stalled VM).
    pub fn pause(&self, i: usize) {
        if let Some(pid) = self.members[i].pid {
            let _ = Command::new("kill")
                .args(["-STOP", &pid.to_string()])
                .status();
        }
    }

    /// Thaws a member frozen by [`EtcdCluster::pause`].
    pub fn resume(&self, i: usize) {
        if let Some(pid) = self.members[i].pid {
            let _ = Command::new("kill")
                .args(["-CONT", &pid.to_string()])
                .status();
        }
    }

    /// Restarts a killed member with its data.
    pub fn restart(&mut self, i: usize) {
        let _ = std::fs::remove_file(self.members[i].data.join(".keep"));
        self.launch(i, "existing");
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            let _ = std::fs::remove_file(self.members[i].data.join(".keep"));
            if let Some(pid) = self.members[i].pid.take() {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            }
            if let Some(mut g) = self.members[i].guard.take() {
                let _ = g.wait();
            }
        }
    }
}
