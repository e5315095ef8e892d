//! Helpers for tests that run real OS processes: the test binary re-runs
//! itself with `BATON_CHILD` set, executing one ignored entry point.
#![allow(dead_code)]

use baton_core::{Authority, Id, SystemClock};
use baton_store_sqlite::{SqliteOptions, SqliteStore};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

pub fn id(s: &str) -> Id {
    Id::parse("id", s).expect("a valid test id")
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a test runtime")
}

/// An authority on the store at `path`, on the system clock.
pub fn open_with(path: &Path, busy: Duration) -> baton_core::Result<Authority<SqliteStore>> {
    let store = SqliteStore::open(
        path,
        SqliteOptions {
            busy_timeout: busy,
            ..Default::default()
        },
    )?;
    Ok(Authority::new(store, Arc::new(SystemClock)))
}

pub const CHILD_ENV: &str = "BATON_CHILD";

/// A command that runs `entry` (an `#[ignore]`d test in this binary) as a
/// child process with `args` in `BATON_CHILD`.
pub fn child(entry: &str, args: &[&str]) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("the test binary's path"));
    c.args([
        "--ignored",
        "--exact",
        entry,
        "--nocapture",
        "--test-threads=1",
    ]);
    c.env(CHILD_ENV, args.join("\u{1f}"));
    c
}

/// The arguments a child was started with, if this process is one.
pub fn child_args() -> Option<Vec<String>> {
    let v = std::env::var(CHILD_ENV).ok()?;
    Some(v.split('\u{1f}').map(str::to_owned).collect())
}

/// The lines a child reported (prefixed `@@ `), without the harness's chatter.
pub fn reported(out: &Output) -> Vec<String> {
    assert!(
        out.status.success(),
        "child failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        // libtest prints "test NAME ... " with no newline before the first report.
        .filter_map(|l| l.find("@@ ").map(|i| l[i + 3..].to_owned()))
        .collect()
}

pub fn report(line: impl AsRef<str>) {
    println!("@@ {}", line.as_ref());
}
