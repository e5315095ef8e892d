//! Fail closed: whatever is wrong with the file, the answer is
//! `Unavailable`, `Corrupt` or `Unsupported` naming the path and the cause;
//! nothing is granted, nothing panics, and the file is left as it was.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use baton_core::{Error, ErrorKind};
use common::{child, child_args, id, open_with as open, report, reported, rt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// Opens the store and tries to claim a task; returns the error it must give.
fn claim_error(path: &Path) -> Error {
    let result = open(path, Duration::from_millis(300))
        .and_then(|a| rt().block_on(a.claim(&id("t-new"), &id("w"), None)));
    match result {
        Ok(reply) => panic!(
            "{} answered {reply:?} instead of failing closed",
            path.display()
        ),
        Err(e) => e,
    }
}

/// The file's bytes are what they were (compared without printing them).
fn assert_unchanged(path: &Path, before: &[u8]) {
    let now = std::fs::read(path).unwrap();
    assert!(
        now == before,
        "{} was modified ({} bytes before, {} after)",
        path.display(),
        before.len(),
        now.len()
    );
}

fn assert_names(e: &Error, path: &Path, kinds: &[ErrorKind], cause: &str) {
    assert!(
        kinds.contains(&e.kind),
        "kind {:?} not in {kinds:?}: {e}",
        e.kind
    );
    assert!(
        e.message.contains(&path.display().to_string()),
        "message names the path: {e}"
    );
    assert!(
        e.message.to_lowercase().contains(cause),
        "message names the cause ({cause}): {e}"
    );
}

/// A store with a few tasks in it, closed (WAL checkpointed into the file).
fn make_store(dir: &Path) -> PathBuf {
    let path = dir.join("baton.db");
    let a = open(&path, Duration::from_secs(5)).unwrap();
    let rt = rt();
    for i in 0..200 {
        rt.block_on(a.claim(
            &id(&format!("task-{i:03}-{}", "x".repeat(100))),
            &id("w"),
            Some(600_000),
        ))
        .unwrap();
    }
    drop(a);
    path
}

#[test]
fn a_path_that_cannot_be_created() {
    let dir = tempfile::tempdir().unwrap();
    // A folder that does not exist: bad input naming the store, not
    // something to try again later.
    let path = dir.path().join("no-such-dir").join("baton.db");
    let e = claim_error(&path);
    assert_names(&e, &path, &[ErrorKind::Invalid], "no such folder");
    assert_eq!(e.field.as_deref(), Some("store"));
    assert!(!e.kind.is_temporary(), "{e}");
    assert!(!path.exists() && !dir.path().join("no-such-dir").exists());
    // A folder that exists but cannot be written: the store cannot answer.
    let locked = dir.path().join("read-only");
    std::fs::create_dir(&locked).unwrap();
    let mut perms = std::fs::metadata(&locked).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o555);
    std::fs::set_permissions(&locked, perms).unwrap();
    let path = locked.join("baton.db");
    if std::fs::write(locked.join("probe"), b"").is_err() {
        let e = claim_error(&path);
        assert_names(&e, &path, &[ErrorKind::Unavailable], "cannot open");
    }
}

#[test]
fn a_file_that_is_not_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.db");
    let junk =
        b"this is a text file, not an SQLite database, and baton must not touch it\n".repeat(100);
    std::fs::write(&path, &junk).unwrap();
    let e = claim_error(&path);
    assert_names(&e, &path, &[ErrorKind::Corrupt], "not an sqlite database");
    assert_unchanged(&path, &junk);
}

#[test]
fn a_truncated_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_store(dir.path());
    let bytes = std::fs::read(&path).unwrap();
    assert!(bytes.len() > 16 * 4096, "the store spans many pages");
    let half = &bytes[..bytes.len() / 2];
    std::fs::write(&path, half).unwrap();
    let e = claim_error(&path);
    assert_names(&e, &path, &[ErrorKind::Corrupt], "damaged or truncated");
    assert_unchanged(&path, half);
}

#[test]
fn a_foreign_sqlite_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute_batch(
        "CREATE TABLE invoices (id INTEGER PRIMARY KEY); INSERT INTO invoices VALUES (1);",
    )
    .unwrap();
    drop(c);
    let before = std::fs::read(&path).unwrap();
    let e = claim_error(&path);
    assert_names(&e, &path, &[ErrorKind::Corrupt], "not a baton store");
    assert_unchanged(&path, &before);
}

#[test]
fn a_schema_written_by_a_newer_baton() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_store(dir.path());
    let c = rusqlite::Connection::open(&path).unwrap();
    c.pragma_update(None, "user_version", 99).unwrap();
    drop(c);
    let before = std::fs::read(&path).unwrap();
    let e = claim_error(&path);
    assert_names(&e, &path, &[ErrorKind::Unsupported], "newer baton");
    assert!(e.message.contains("99"));
    assert_unchanged(&path, &before);
}

#[test]
fn the_file_deleted_while_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.db");
    let a = open(&path, Duration::from_secs(5)).unwrap();
    let rt = rt();
    rt.block_on(a.claim(&id("before"), &id("w"), None)).unwrap();
    std::fs::remove_file(&path).unwrap();
    let e = rt
        .block_on(a.claim(&id("after"), &id("w"), None))
        .unwrap_err();
    assert_names(&e, &path, &[ErrorKind::Unavailable], "deleted");
    let e = rt.block_on(a.get(&id("before"))).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "reads fail closed too");
    // The fault removed (the store reopened at its path), it works again.
    drop(a);
    let again = open(&path, Duration::from_secs(5)).unwrap();
    assert!(
        rt.block_on(again.claim(&id("after"), &id("w"), None))
            .unwrap()
            .grant()
            .is_some()
    );
}

#[test]
fn the_file_replaced_while_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.db");
    let a = open(&path, Duration::from_secs(5)).unwrap();
    let rt = rt();
    rt.block_on(a.claim(&id("before"), &id("w"), None)).unwrap();
    // Another store, moved over the path the first one has open.
    let replacement_dir = tempfile::tempdir_in(dir.path()).unwrap();
    let replacement = make_store(replacement_dir.path());
    std::fs::rename(&replacement, &path).unwrap();
    let e = rt
        .block_on(a.claim(&id("after"), &id("w"), None))
        .unwrap_err();
    assert_names(&e, &path, &[ErrorKind::Unavailable], "replaced");
    // While the first process still holds the log it wrote for the old
    // file, a new process must not replay that log onto the replacement.
    let out = child("child_entry", &["claim", path.to_str().unwrap()])
        .output()
        .unwrap();
    let line = reported(&out).remove(0);
    let (kind, msg) = line.split_once('\t').unwrap();
    assert_eq!(kind, "corrupt", "{msg}");
    assert!(msg.contains("write-ahead log"), "{msg}");
    // SQLite never checkpoints into a file that was moved away, so the log
    // stays until the documented restore step removes it, with every
    // process stopped. Nothing was granted into either file.
    drop(a);
    let e = open(&path, Duration::from_secs(5)).unwrap_err();
    assert_names(&e, &path, &[ErrorKind::Corrupt], "write-ahead log");
    for suffix in ["-wal", "-shm"] {
        std::fs::remove_file(dir.path().join(format!("baton.db{suffix}"))).unwrap();
    }
    let fresh = open(&path, Duration::from_secs(5)).unwrap();
    assert!(rt.block_on(fresh.get(&id("after"))).unwrap().is_none());
    // Reopened on the file the path now names, it works again.
    assert!(
        rt.block_on(fresh.claim(&id("after"), &id("w"), None))
            .unwrap()
            .grant()
            .is_some()
    );
}

#[test]
#[ignore = "a child process entry point, run by the tests below"]
fn child_entry() {
    let Some(args) = child_args() else { return };
    match args[0].as_str() {
        // Hold the write lock for a while, like a stuck process would.
        "hold-lock" => {
            let c = rusqlite::Connection::open(&args[1]).unwrap();
            c.execute_batch("BEGIN IMMEDIATE").unwrap();
            report("locked");
            std::thread::sleep(Duration::from_millis(args[2].parse().unwrap()));
            c.execute_batch("ROLLBACK").unwrap();
        }
        // Try to claim (run inside a private mount namespace with the store read-only).
        "claim" => {
            let e = claim_error(Path::new(&args[1]));
            report(format!("{}\t{}", e.kind.as_str(), e.message));
        }
        other => panic!("unknown child mode {other}"),
    }
}

#[test]
fn a_lock_held_past_the_busy_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_store(dir.path());
    let mut holder = child(
        "child_entry",
        &["hold-lock", path.to_str().unwrap(), "3000"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // Wait for the child to say it holds the lock.
    let mut out = holder.stdout.take().unwrap();
    let mut seen = String::new();
    while !seen.contains("@@ locked") {
        let mut buf = [0u8; 256];
        let n = std::io::Read::read(&mut out, &mut buf).unwrap();
        assert!(n > 0, "the lock holder exited early");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    let a = open(&path, Duration::from_millis(300)).unwrap();
    let rt = rt();
    let e = rt
        .block_on(a.claim(&id("blocked"), &id("w"), None))
        .unwrap_err();
    assert_names(
        &e,
        &path,
        &[ErrorKind::Unavailable],
        "locked by another process",
    );
    assert!(holder.wait().unwrap().success());
    // Once the lock is gone, the same store works again and nothing was granted before.
    assert!(rt.block_on(a.get(&id("blocked"))).unwrap().is_none());
    assert!(
        rt.block_on(a.claim(&id("blocked"), &id("w"), None))
            .unwrap()
            .grant()
            .is_some()
    );
}

/// Runs a claim in a child process that sees `dir` through a read-only bind mount.
fn claim_in_read_only_namespace(dir: &Path, path: &Path) -> (String, String) {
    let exe = std::env::current_exe().unwrap();
    let d = dir.display();
    let script = format!(
        "mount --bind {d} {d} && mount -o remount,ro,bind {d} && exec \"$0\" --ignored --exact child_entry --nocapture --test-threads=1"
    );
    let out = std::process::Command::new("unshare")
        .args(["-m", "--", "sh", "-c", &script])
        .arg(exe)
        .env(
            common::CHILD_ENV,
            ["claim", path.to_str().unwrap()].join("\u{1f}"),
        )
        .output()
        .expect("unshare (util-linux) runs; the tests run as root");
    let lines = reported(&out);
    let (kind, msg) = lines[0].split_once('\t').unwrap();
    (kind.to_owned(), msg.to_owned())
}

#[test]
fn a_read_only_directory() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_store(dir.path());
    let before = std::fs::read(&path).unwrap();
    let (kind, msg) = claim_in_read_only_namespace(dir.path(), &path);
    assert_eq!(kind, "unavailable", "{msg}");
    assert!(
        msg.contains(&path.display().to_string()) && msg.contains("read-only"),
        "{msg}"
    );
    assert_unchanged(&path, &before);
    // Outside the namespace the directory is writable: the store works again.
    let a = open(&path, Duration::from_secs(5)).unwrap();
    assert!(
        rt().block_on(a.claim(&id("t-new"), &id("w"), None))
            .unwrap()
            .grant()
            .is_some()
    );
}

#[test]
fn a_read_only_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = make_store(dir.path());
    let before = std::fs::read(&path).unwrap();
    // Root ignores file modes; the immutable attribute it does not.
    struct Immutable<'a>(&'a Path);
    impl Drop for Immutable<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("chattr")
                .arg("-i")
                .arg(self.0)
                .status();
        }
    }
    let ok = std::process::Command::new("chattr")
        .arg("+i")
        .arg(&path)
        .status()
        .unwrap();
    assert!(
        ok.success(),
        "chattr +i needs ext4-like filesystem and root"
    );
    let _guard = Immutable(&path);
    let e = claim_error(&path);
    assert_names(&e, &path, &[ErrorKind::Unavailable], "read-only");
    drop(_guard);
    assert_unchanged(&path, &before);
    // The attribute removed, the store works again.
    let a = open(&path, Duration::from_secs(5)).unwrap();
    assert!(
        rt().block_on(a.claim(&id("t-new"), &id("w"), None))
            .unwrap()
            .grant()
            .is_some()
    );
}

#[test]
#[ignore = "a child process entry point, run by a_full_disk in a private mount namespace"]
fn full_disk_child() {
    let Ok(dir) = std::env::var("BATON_FULL_DISK_DIR") else {
        return;
    };
    let dir = Path::new(&dir);
    let path = dir.join("baton.db");
    let a = open(&path, Duration::from_secs(5)).unwrap();
    let rt = rt();
    // Leave almost nothing free on the 2 MiB filesystem.
    let filler = dir.join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    let chunk = vec![7u8; 16 * 1024];
    while std::io::Write::write_all(&mut f, &chunk).is_ok() {}
    drop(f);
    let mut granted = Vec::new();
    let mut failure = None;
    for i in 0..5000 {
        let task = id(&format!("full-{i:05}-{}", "x".repeat(200)));
        match rt.block_on(a.claim(&task, &id("w"), None)) {
            Ok(r) => granted.push((task, r.grant().unwrap().fence)),
            Err(e) => {
                failure = Some((task, e));
                break;
            }
        }
    }
    let (task, e) = failure.expect("the disk filled up");
    report(format!("error\t{}\t{}", e.kind.as_str(), e.message));
    assert!(
        rt.block_on(a.get(&task))
            .map(|r| r.is_none())
            .unwrap_or(true),
        "the refused claim granted nothing"
    );
    // Remove the fault: the same store works again, and nothing answered was lost.
    std::fs::remove_file(&filler).unwrap();
    let again = rt.block_on(a.claim(&task, &id("w"), None)).unwrap();
    assert!(again.grant().is_some());
    for (t, fence) in &granted {
        let h = rt.block_on(a.holder(t)).unwrap().unwrap().unwrap();
        assert_eq!(h.grant.fence, *fence);
    }
    report(format!("recovered\t{}", granted.len()));
}

#[test]
fn a_full_disk() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let script = format!(
        "mount -t tmpfs -o size=2m tmpfs {d} && exec \"$0\" --ignored --exact full_disk_child --nocapture --test-threads=1"
    );
    let out = std::process::Command::new("unshare")
        .args(["-m", "--", "sh", "-c", &script])
        .arg(std::env::current_exe().unwrap())
        .env("BATON_FULL_DISK_DIR", dir.path())
        .output()
        .expect("unshare (util-linux) runs; the tests run as root");
    let lines = reported(&out);
    let fields: Vec<&str> = lines[0].split('\t').collect();
    assert_eq!(fields[0], "error");
    assert_eq!(fields[1], "unavailable", "{}", fields[2]);
    assert!(
        fields[2].contains("full") && fields[2].contains("baton.db"),
        "{}",
        fields[2]
    );
    assert!(lines[1].starts_with("recovered"), "{lines:?}");
}

#[test]
fn errors_keep_their_cause_and_name_the_store_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("junk.db");
    std::fs::write(
        &path,
        b"not a database, long enough to be read as one".repeat(100),
    )
    .unwrap();
    let e = open(&path, Duration::from_secs(1)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Corrupt, "{e}");
    assert_eq!(
        e.context.as_deref(),
        Some(format!("sqlite {}", path.display()).as_str())
    );
    let source = e.source.as_ref().expect("SQLite's own error is kept");
    assert!(source.to_string().contains("not a database"), "{source}");
    assert!(std::error::Error::source(&e).is_some());
}
