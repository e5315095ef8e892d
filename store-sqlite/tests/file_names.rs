//! One database, one name, one log. SQLite finds its locks and its
//! write-ahead log by the file's name, so a second name for the file (a
//! hard link, a single-file bind mount), a log deleted under running
//! processes, or a backup moved over a live store while its log remains,
//! would grant twice or corrupt the file. Each is refused, with real
//! processes where the defect needs them; a symbolic link stays one store.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use baton_core::{Authority, ErrorKind};
use baton_store_sqlite::SqliteStore;
use common::{child, child_args, id, report, reported, rt};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn open(path: &Path) -> baton_core::Result<Authority<SqliteStore>> {
    common::open_with(path, Duration::from_secs(5))
}

fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// What one claim in a fresh process answered: `granted FENCE`,
/// `refused REASON` or `KIND\tMESSAGE`.
fn claim_in_child(path: &Path, task: &str, owner: &str) -> String {
    let out = child(
        "child_entry",
        &["claim", path.to_str().unwrap(), task, owner],
    )
    .output()
    .unwrap();
    reported(&out).remove(0)
}

#[test]
#[ignore = "a child process entry point, run by the tests below"]
fn child_entry() {
    let Some(args) = child_args() else { return };
    match args[0].as_str() {
        "claim" => {
            let line = match open(Path::new(&args[1])) {
                Err(e) => format!("{}\t{}", e.kind.as_str(), e.message),
                Ok(a) => match rt().block_on(a.claim(&id(&args[2]), &id(&args[3]), Some(60_000))) {
                    Ok(reply) => match reply.grant() {
                        Some(g) => format!("granted {}", g.fence),
                        None => format!("refused {reply:?}"),
                    },
                    Err(e) => format!("{}\t{}", e.kind.as_str(), e.message),
                },
            };
            report(line);
        }
        "claim-and-hang" => {
            let a = open(Path::new(&args[1])).unwrap();
            let g = rt()
                .block_on(a.claim(&id(&args[2]), &id(&args[3]), Some(60_000)))
                .unwrap();
            report(format!("granted {}", g.grant().unwrap().fence));
            std::thread::sleep(Duration::from_secs(60));
        }
        "holder" => {
            let line = match open(Path::new(&args[1])) {
                Err(e) => format!("{}\t{}", e.kind.as_str(), e.message),
                Ok(a) => match rt().block_on(a.holder(&id(&args[2]))) {
                    Ok(h) => format!("holder {h:?}"),
                    Err(e) => format!("{}\t{}", e.kind.as_str(), e.message),
                },
            };
            report(line);
        }
        other => panic!("unknown child mode {other}"),
    }
}

fn assert_error(line: &str, kind: ErrorKind, cause: &str) {
    let (k, msg) = line
        .split_once('\t')
        .unwrap_or_else(|| panic!("expected an error, got {line}"));
    assert_eq!(k, kind.as_str(), "{line}");
    assert!(msg.to_lowercase().contains(cause), "names {cause}: {line}");
}

#[test]
fn a_hard_link_is_refused_under_either_name() {
    let dir = tempfile::tempdir().unwrap();
    let a_path = dir.path().join("a.db");
    let b_path = dir.path().join("b.db");
    // An idle reader keeps the database open under its first name.
    let a = open(&a_path).unwrap();
    let rt = rt();
    rt.block_on(a.claim(&id("before"), &id("w0"), None))
        .unwrap();
    std::fs::hard_link(&a_path, &b_path).unwrap();
    // Through either name, in other processes: nothing is granted.
    assert_error(
        &claim_in_child(&a_path, "t", "w1"),
        ErrorKind::Unavailable,
        "hard link",
    );
    assert_error(
        &claim_in_child(&b_path, "t", "w2"),
        ErrorKind::Unavailable,
        "hard link",
    );
    // The process that opened it before the link was made refuses too.
    let e = rt.block_on(a.claim(&id("t"), &id("w3"), None)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert!(e.message.contains("hard link"), "{e}");
    assert_eq!(
        e.context.as_deref(),
        Some(format!("sqlite {}", a_path.display()).as_str()),
        "the store is named once, as context"
    );
    let e = open(&b_path).unwrap_err();
    assert_eq!(
        e.context.as_deref(),
        Some(format!("sqlite {}", b_path.display()).as_str())
    );
    assert!(rt.block_on(a.get(&id("t"))).is_err(), "reads refuse too");
    // With one name again, it works, and nothing was granted meanwhile.
    std::fs::remove_file(&b_path).unwrap();
    assert!(rt.block_on(a.get(&id("t"))).unwrap().is_none());
    let granted = claim_in_child(&a_path, "t", "w1");
    assert!(granted.starts_with("granted "), "{granted}");
}

#[test]
fn a_symbolic_link_is_one_store() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real.db");
    let link = dir.path().join("link.db");
    drop(open(&real).unwrap());
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let first = claim_in_child(&real, "t", "w1");
    assert!(first.starts_with("granted "), "{first}");
    let second = claim_in_child(&link, "t", "w2");
    assert!(
        second.starts_with("refused ") && second.contains("Held"),
        "the same lock and log through the link: {second}"
    );
    let other = claim_in_child(&link, "u", "w2");
    let fence = |line: &str| -> u64 { line.trim_start_matches("granted ").parse().unwrap() };
    assert!(fence(&other) > fence(&first), "{first} then {other}");
}

#[test]
fn a_single_file_bind_mount_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let host = dir.path().join("host.db");
    let seen = dir.path().join("x.db");
    drop(open(&host).unwrap());
    std::fs::write(&seen, b"").unwrap();
    let exe = std::env::current_exe().unwrap();
    let script = format!(
        "mount --bind {} {} && exec \"$0\" --ignored --exact child_entry --nocapture --test-threads=1",
        host.display(),
        seen.display()
    );
    let out = std::process::Command::new("unshare")
        .args(["-m", "--", "sh", "-c", &script])
        .arg(exe)
        .env(
            common::CHILD_ENV,
            ["claim", seen.to_str().unwrap(), "t", "w"].join("\u{1f}"),
        )
        .output()
        .expect("unshare (util-linux) runs; the tests run as root");
    let line = reported(&out).remove(0);
    assert_error(&line, ErrorKind::Unavailable, "bind mount");
    // The host's name was never used for a grant.
    let a = open(&host).unwrap();
    assert!(rt().block_on(a.get(&id("t"))).unwrap().is_none());
}

#[test]
fn the_log_deleted_while_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    let a = open(&path).unwrap();
    let rt = rt();
    let g = rt.block_on(a.claim(&id("a"), &id("w"), None)).unwrap();
    let fence = g.grant().unwrap().fence;
    std::fs::remove_file(sidecar(&path, "-wal")).unwrap();
    // A new process must not read the database without the log's frames.
    assert_error(
        &claim_in_child(&path, "b", "w"),
        ErrorKind::Unavailable,
        "write-ahead log",
    );
    let holder = child("child_entry", &["holder", path.to_str().unwrap(), "a"])
        .output()
        .unwrap();
    assert_error(
        &reported(&holder).remove(0),
        ErrorKind::Unavailable,
        "write-ahead log",
    );
    // The process that still holds the old log refuses writes and reads.
    let e = rt.block_on(a.claim(&id("b"), &id("w"), None)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert!(e.message.contains("write-ahead log"), "{e}");
    assert!(rt.block_on(a.holder(&id("a"))).is_err());
    drop(a);
    // Once every process has let go (the last one checkpoints the log it
    // held into the file), the grant is there and fences go on from it.
    let again = open(&path).unwrap();
    let h = rt.block_on(again.holder(&id("a"))).unwrap();
    assert_eq!(
        h.unwrap().unwrap().grant.fence,
        fence,
        "the answered grant was not lost"
    );
    let next = rt.block_on(again.claim(&id("b"), &id("w"), None)).unwrap();
    assert!(next.grant().unwrap().fence > fence);
}

#[test]
fn the_index_deleted_or_the_log_replaced_while_open() {
    for (victim, replace) in [("-shm", false), ("-wal", true), ("-shm", true)] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        let a = open(&path).unwrap();
        let rt = rt();
        rt.block_on(a.claim(&id("a"), &id("w"), None)).unwrap();
        let target = sidecar(&path, victim);
        if replace {
            let other = dir.path().join("other");
            std::fs::copy(&target, &other).unwrap();
            std::fs::rename(&other, &target).unwrap();
        } else {
            std::fs::remove_file(&target).unwrap();
        }
        let e = rt.block_on(a.claim(&id("b"), &id("w"), None)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unavailable, "{victim} {replace}: {e}");
        let what = if victim == "-wal" {
            "write-ahead log"
        } else {
            "shared-memory index"
        };
        assert!(e.message.contains(what), "{e}");
        assert!(rt.block_on(a.get(&id("b"))).is_err(), "reads refuse too");
    }
}

/// A consistent copy of a live store, the way README.md says to take one.
/// A process claims `task` and is SIGKILLed before it closes the store:
/// its log stays, with frames.
fn crash_after_claim(path: &Path, task: &str) {
    let mut c = child(
        "child_entry",
        &["claim-and-hang", path.to_str().unwrap(), task, "w"],
    )
    .stdout(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let mut out = c.stdout.take().unwrap();
    let mut seen = String::new();
    while !seen.contains("@@ granted") {
        let mut buf = [0u8; 256];
        let n = std::io::Read::read(&mut out, &mut buf).unwrap();
        assert!(n > 0, "the child exited before its grant: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    c.kill().unwrap();
    c.wait().unwrap();
}

fn backup(a: &Path, to: &Path) {
    let c = rusqlite::Connection::open(a).unwrap();
    c.execute("VACUUM INTO ?1", [to.to_str().unwrap()]).unwrap();
}

#[test]
fn a_backup_moved_over_a_live_store_is_refused_until_its_log_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.db");
    let saved = dir.path().join("saved.db");
    let a = open(&path).unwrap();
    let rt = rt();
    rt.block_on(a.claim(&id("old"), &id("w"), None)).unwrap();
    backup(&path, &saved);
    for i in 0..20 {
        rt.block_on(a.claim(&id(&format!("new-{i}")), &id("w"), None))
            .unwrap();
    }
    // The backup goes in place while the store runs and its log remains.
    std::fs::rename(&saved, &path).unwrap();
    let e = rt.block_on(a.claim(&id("x"), &id("w"), None)).unwrap_err();
    assert!(e.message.contains("replaced"), "{e}");
    // No process may replay the old file's log onto the backup.
    assert_error(
        &claim_in_child(&path, "x", "w"),
        ErrorKind::Corrupt,
        "write-ahead log",
    );
    // Not even once the last process of the old file is gone: SQLite never
    // checkpoints into a moved file, so its log stays. With every process
    // stopped, the documented restore step removes the log and its index;
    // then the backup is adopted as it was taken, and undamaged.
    drop(a);
    let e = open(&path).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Corrupt, "{e}");
    std::fs::remove_file(sidecar(&path, "-wal")).unwrap();
    std::fs::remove_file(sidecar(&path, "-shm")).unwrap();
    let restored = open(&path).unwrap();
    assert!(rt.block_on(restored.get(&id("old"))).unwrap().is_some());
    assert!(rt.block_on(restored.get(&id("new-0"))).unwrap().is_none());
    let granted = rt
        .block_on(restored.claim(&id("x"), &id("w"), None))
        .unwrap();
    assert!(granted.grant().is_some());
    drop(restored);
    let c = rusqlite::Connection::open(&path).unwrap();
    let check: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
}

#[test]
fn a_backup_over_a_crashed_store_needs_its_stale_log_removed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.db");
    let saved = dir.path().join("saved.db");
    drop(open(&path).unwrap());
    backup(&path, &saved);
    // A process commits and is killed before it closes: its log stays, with frames.
    crash_after_claim(&path, "t");
    let wal = sidecar(&path, "-wal");
    assert!(wal.exists(), "a log with frames remains");
    std::fs::rename(&saved, &path).unwrap();
    let e = open(&path).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Corrupt, "{e}");
    assert!(e.message.contains("Backup and restore"), "{e}");
    // The documented procedure: with no process running, the log and index
    // belong to the file that was replaced; remove them, then open.
    std::fs::remove_file(&wal).unwrap();
    let _ = std::fs::remove_file(sidecar(&path, "-shm"));
    let restored = open(&path).unwrap();
    assert!(rt().block_on(restored.get(&id("t"))).unwrap().is_none());
    assert!(
        rt().block_on(restored.claim(&id("t"), &id("w"), None))
            .unwrap()
            .grant()
            .is_some()
    );
}

/// The fence a claim in a fresh process got, panicking on anything else.
fn fence_in_child(path: &Path, task: &str) -> u64 {
    let line = claim_in_child(path, task, "w");
    line.strip_prefix("granted ")
        .and_then(|f| f.parse().ok())
        .unwrap_or_else(|| panic!("expected a grant: {line}"))
}

#[test]
fn a_store_moved_away_from_its_log_is_refused_until_moved_back() {
    let dir = tempfile::tempdir().unwrap();
    let a_path = dir.path().join("a.db");
    let b_path = dir.path().join("b.db");
    let rt = rt();
    // Renamed while a process has it open, its latest grants only in the log.
    let live = open(&a_path).unwrap();
    let mut last = 0;
    for i in 0..5 {
        let g = rt
            .block_on(live.claim(&id(&format!("t{i}")), &id("w"), None))
            .unwrap();
        last = g.grant().unwrap().fence;
    }
    std::fs::rename(&a_path, &b_path).unwrap();
    let line = claim_in_child(&b_path, "t9", "w");
    assert_error(&line, ErrorKind::Corrupt, "was last opened as");
    assert!(line.contains("a.db-wal"), "names the log: {line}");
    // Nothing was written at the new name: moved back, it counts on.
    std::fs::rename(&b_path, &a_path).unwrap();
    drop(live);
    let f = fence_in_child(&a_path, "t9");
    assert!(f > last, "fence {f} after {last}: a fence handed out again");

    // A crashed store moved without its log.
    let c_path = dir.path().join("c.db");
    crash_after_claim(&a_path, "t10");
    std::fs::rename(&a_path, &c_path).unwrap();
    let e = open(&c_path).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Corrupt, "{e}");
    assert!(e.message.contains("Backup and restore"), "{e}");
    // Moved back, it opens with the crashed process's grant; checkpointed
    // there, it may then be moved alone and opened at its new name.
    std::fs::rename(&c_path, &a_path).unwrap();
    let g = fence_in_child(&a_path, "t11");
    assert!(
        g > f + 1,
        "fence {g}: the crashed grant's fence was handed out again"
    );
    let conn = rusqlite::Connection::open(&a_path).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    drop(conn);
    std::fs::rename(&a_path, &c_path).unwrap();
    let h = fence_in_child(&c_path, "t12");
    assert_eq!(h, g + 1, "counts on at the new name");
}

/// A crashed store's file copied (`cp`) beside it, or moved to another
/// filesystem without its log (a copy and an unlink, whatever the inode),
/// is refused at its new name while the log at the old one still holds
/// commits that are not in the file: it would hand their fences out again.
#[test]
fn a_crashed_store_copied_or_moved_to_another_filesystem_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let a_path = dir.path().join("a.db");
    fence_in_child(&a_path, "t0");
    crash_after_claim(&a_path, "t1");
    // cp a.db copy.db: the old file is still there, with its log.
    let copy = dir.path().join("copy.db");
    std::fs::copy(&a_path, &copy).unwrap();
    let e = open(&copy).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Corrupt, "{e}");
    assert!(e.message.contains("was last opened as"), "{e}");
    // Moved to another filesystem (/dev/shm where it is one): copied there,
    // the original unlinked, its log left behind.
    let other = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let moved = other.path().join("moved.db");
    std::fs::copy(&a_path, &moved).unwrap();
    std::fs::remove_file(&a_path).unwrap();
    let e = open(&moved).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Corrupt, "{e}");
    assert!(e.message.contains("was last opened as"), "{e}");
    // The copy beside it is still refused: nothing was written at either name.
    assert_eq!(open(&copy).unwrap_err().kind, ErrorKind::Corrupt);
}

#[test]
fn the_last_close_deleting_its_log_is_not_taken_for_a_deleted_log() {
    // SQLite's last connection deletes the log, then unlinks the index; a
    // process opening the store between the two sees an index listing
    // frames and no log. That is a close, not a log deleted under running
    // processes: the open waits for the index to go and goes on.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.db");
    let rt = rt();
    let a = open(&path).unwrap();
    for i in 0..3 {
        rt.block_on(a.claim(&id(&format!("t{i}")), &id("w"), None))
            .unwrap();
    }
    let index = std::fs::read(sidecar(&path, "-shm")).unwrap();
    drop(a);
    assert!(
        !sidecar(&path, "-wal").exists(),
        "the last close deleted the log"
    );
    // The moment between the two steps, held open for a few milliseconds.
    std::fs::write(sidecar(&path, "-shm"), &index).unwrap();
    let shm = sidecar(&path, "-shm");
    let closer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        std::fs::remove_file(shm).unwrap();
    });
    let b = open(&path).unwrap();
    closer.join().unwrap();
    assert!(rt.block_on(b.get(&id("t2"))).unwrap().is_some());
    drop(b);
    // An index that stays, listing frames no log holds, is refused.
    std::fs::write(sidecar(&path, "-shm"), &index).unwrap();
    let e = open(&path).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    assert!(e.message.contains("deleted or truncated"), "{e}");
}

/// Whether another process holds SQLite's "index in use" read lock on the
/// index (byte 128 of the -shm file, taken by every process with it open).
fn index_lock_held(shm: &Path) -> bool {
    let probe = "import fcntl, os, sys\n\
        fd = os.open(sys.argv[1], os.O_RDWR)\n\
        try:\n    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 128)\n    print('free')\n\
        except OSError:\n    print('held')\n";
    let out = std::process::Command::new("python3")
        .args(["-c", probe, shm.to_str().unwrap()])
        .output()
        .expect("python3 runs the lock probe");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim() == "held"
}

#[test]
fn opening_a_store_twice_in_one_process_keeps_sqlites_locks() {
    // POSIX record locks belong to the process and go when any descriptor
    // of the file is closed: the open's look at the index must not be that
    // descriptor, or a second open drops the first's locks and the next
    // process to come rebuilds the index under it.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("baton.db");
    let rt = rt();
    let a = open(&path).unwrap();
    rt.block_on(a.claim(&id("x"), &id("w"), None)).unwrap();
    let shm = sidecar(&path, "-shm");
    assert!(index_lock_held(&shm), "SQLite holds the index open");
    for _ in 0..3 {
        let b = open(&path).unwrap();
        assert!(index_lock_held(&shm), "a second open left the lock");
        drop(b);
        assert!(index_lock_held(&shm), "closing the second left the lock");
    }
    assert_eq!(fence_in_child(&path, "y"), 2);
    assert!(matches!(
        rt.block_on(a.holder(&id("y"))).unwrap(),
        Ok(Some(_))
    ));
}
