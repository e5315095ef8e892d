//! A `baton serve` child for the test files that need one (the server's
//! own tests, and the supervised run's against a stalled server).
#![allow(dead_code)] // each including file uses its own part

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_baton");

/// A `baton serve` child on a free loopback port.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    /// Every line it wrote on standard error after its first.
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Server {
    pub fn start(store: &str, tokens: Option<&Path>) -> Server {
        match tokens {
            Some(t) => Server::start_with(store, &["--tokens", &t.display().to_string()]),
            None => Server::start_with(store, &[]),
        }
    }

    /// A server with `args` added to `baton serve`'s.
    pub fn start_with(store: &str, args: &[&str]) -> Server {
        let mut c = Command::new(BIN);
        c.args(["serve", "--store", store, "--listen", "127.0.0.1:0"])
            .args(args)
            .env_remove("BATON_STORE")
            .env_remove("BATON_TOKEN")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let line = lines
            .next()
            .expect("the server says where it listens")
            .unwrap();
        let addr = line
            .rsplit("http://")
            .next()
            .and_then(|a| a.trim().parse().ok())
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        // Keep reading its standard error so it never blocks on a full pipe.
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = log.clone();
        std::thread::spawn(move || {
            for l in lines.map_while(Result::ok) {
                if let Ok(mut k) = kept.lock() {
                    k.push(l);
                }
            }
        });
        Server { child, addr, log }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig}");
    }

    /// Waits for the process to end; its exit status.
    pub fn wait(&mut self, within: Duration) -> std::process::ExitStatus {
        let until = Instant::now() + within;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(Instant::now() < until, "the server did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
