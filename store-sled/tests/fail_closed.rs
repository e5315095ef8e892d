//! A corrupt, foreign, newer or unreadable store answers `Unavailable`,
//! `Corrupt` or `Unsupported` with the path and the cause; nothing panics.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_core::{Authority, ErrorKind, Id, SystemClock};
use baton_store_sled::{SledOptions, SledStore};
use std::path::Path;
use std::sync::Arc;

fn id(s: &str) -> Id {
    Id::parse("id", s).unwrap()
}

fn try_claim(path: &Path) -> baton_core::Result<baton_core::Reply> {
    let store = SledStore::open(path, SledOptions::default())?;
    let a = Authority::new(store, Arc::new(SystemClock));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(a.claim(&id("t"), &id("w"), None))
}

#[test]
fn a_path_that_is_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    std::fs::write(&path, b"a file, not a directory").unwrap();
    let e = try_claim(&path).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    assert!(e.message.contains(&path.display().to_string()), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), b"a file, not a directory");
}

#[test]
fn a_foreign_sled_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let db = sled::open(&path).unwrap();
    db.insert("user:1", "alice").unwrap();
    db.flush().unwrap();
    drop(db);
    let e = try_claim(&path).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Corrupt, "{e}");
    assert!(
        e.message.contains("not a baton store") && e.message.contains(&path.display().to_string()),
        "{e}"
    );
}

#[test]
fn a_layout_written_by_a_newer_baton() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    assert!(try_claim(&path).unwrap().grant().is_some());
    let db = sled::open(&path).unwrap();
    db.open_tree("meta")
        .unwrap()
        .insert("schema", &9u64.to_be_bytes())
        .unwrap();
    db.flush().unwrap();
    drop(db);
    let e = try_claim(&path).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported, "{e}");
    assert!(e.message.contains("newer baton"), "{e}");
}

#[test]
fn corrupt_data_fails_closed_without_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    {
        let a = Authority::new(
            SledStore::open(&path, SledOptions::default()).unwrap(),
            Arc::new(SystemClock),
        );
        for i in 0..300 {
            rt.block_on(a.claim(&id(&format!("t-{i}")), &id("w"), None))
                .unwrap();
        }
    }
    // Overwrite the middle of the data file with garbage.
    let data = path.join("db");
    let mut bytes = std::fs::read(&data).unwrap();
    let mid = bytes.len() / 3;
    let end = (mid + 4096).min(bytes.len());
    for b in &mut bytes[mid..end] {
        *b = 0xA5;
    }
    std::fs::write(&data, &bytes).unwrap();
    // Whatever sled makes of it, the answer is an error or a consistent store, never a panic.
    let outcome = std::panic::catch_unwind(|| try_claim(&path));
    let result = outcome.expect("no panic reaches the caller");
    if let Err(e) = result {
        assert!(
            matches!(e.kind, ErrorKind::Corrupt | ErrorKind::Unavailable),
            "{e}"
        );
        assert!(e.message.contains(&path.display().to_string()), "{e}");
    }
}

#[test]
fn an_interrupted_snapshot_is_not_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let granted = try_claim(&path).unwrap().grant().unwrap();
    // What a SIGKILL while sled writes a snapshot leaves behind.
    std::fs::write(path.join("snap.7FFFFFFFFFFFFFFF.generating"), b"half").unwrap();
    let store = SledStore::open(&path, SledOptions::default()).unwrap();
    let a = Authority::new(store, Arc::new(SystemClock));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let h = rt.block_on(a.holder(&id("t"))).unwrap().unwrap().unwrap();
    assert_eq!(h.grant.fence, granted.fence, "the answered grant is there");
    assert!(!path.join("snap.7FFFFFFFFFFFFFFF.generating").exists());
    // While a store holds the directory, nobody else's open touches its files.
    let leftover = path.join("snap.0000000000000001.generating");
    std::fs::write(&leftover, b"in progress").unwrap();
    let opts = SledOptions {
        busy_timeout: std::time::Duration::from_millis(200),
        ..Default::default()
    };
    let e = SledStore::open(&path, opts).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    assert!(
        leftover.exists(),
        "a file under another holder's lock is left alone"
    );
}

#[test]
fn a_missing_parent_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no").join("such").join("store");
    let e = try_claim(&path).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Invalid, "{e}");
    assert_eq!(e.field.as_deref(), Some("store"));
    assert!(e.message.contains("does not exist"), "{e}");
    assert!(!dir.path().join("no").exists(), "nothing was created");
    // A new directory whose parent exists is created, as SQLite creates its file.
    assert!(
        try_claim(&dir.path().join("store"))
            .unwrap()
            .grant()
            .is_some()
    );
}

#[test]
fn an_unrelated_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("home");
    std::fs::create_dir(&path).unwrap();
    std::fs::write(path.join("notes.txt"), b"mine").unwrap();
    let e = try_claim(&path).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Corrupt, "{e}");
    assert!(e.message.contains("not a sled store"), "{e}");
    let names: Vec<_> = std::fs::read_dir(&path)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        names,
        vec![std::ffi::OsString::from("notes.txt")],
        "nothing was written"
    );
    // An empty directory is a new store.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert!(try_claim(&empty).unwrap().grant().is_some());
}

#[test]
fn errors_keep_their_cause_and_name_the_store_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let held = SledStore::open(&path, SledOptions::default()).unwrap();
    let opts = SledOptions {
        busy_timeout: std::time::Duration::from_millis(100),
        ..Default::default()
    };
    // The lock is recognised from sled's error itself, in one place.
    let e = SledStore::open(&path, opts).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    assert!(e.message.contains("another process holds the store"), "{e}");
    drop(held);
    // A native failure keeps sled's error as the source and names the store.
    let locked_file = dir.path().join("db-owner");
    std::fs::create_dir(&locked_file).unwrap();
    std::fs::write(locked_file.join("db"), b"").unwrap();
    std::fs::write(locked_file.join("conf"), b"segment_size: nonsense").unwrap();
    let e = SledStore::open(&locked_file, SledOptions::default()).unwrap_err();
    assert_eq!(
        e.context.as_deref(),
        Some(format!("sled {}", locked_file.display()).as_str()),
        "{e}"
    );
    assert!(e.source.is_some(), "{e}");
}

#[test]
fn a_directory_moved_or_replaced_while_open_refuses_every_write() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for replace in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let a = Authority::new(
            SledStore::open(&path, SledOptions::default()).unwrap(),
            Arc::new(SystemClock),
        );
        let g = rt
            .block_on(a.claim(&id("t"), &id("w"), None))
            .unwrap()
            .grant()
            .unwrap();
        std::fs::rename(&path, dir.path().join("moved")).unwrap();
        if replace {
            std::fs::create_dir(&path).unwrap();
        }
        // sled would go on writing into the moved directory; another
        // process opening the path would find another store.
        let e = rt
            .block_on(a.renew(&id("t"), &id("w"), g.fence, None))
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
        assert!(e.message.contains("directory"), "{e}");
        let e = rt.block_on(a.claim(&id("u"), &id("w"), None)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    }
}
