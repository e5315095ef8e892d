//! The store's own unit tests (the conformance suite and the fault tests
//! are in `tests/`).

use super::*;
use baton_core::engine::apply_in;
use baton_core::{Id, Lane};

/// The index reads of `next` are prepared once, however many records
/// each asks for (a LIMIT bound as 1 and then as 2 made SQLite prepare
/// the statement again on every call).
#[test]
fn next_reads_are_prepared_once_whatever_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("a.db"), SqliteOptions::default()).unwrap();
    let inner = store.shell.inner();
    let queue = Id::parse("queue", "q").unwrap();
    let now = Timestamp::from_millis(1_000);
    let mut conn = inner.lock(&inner.writer);
    let tx = conn.transaction().unwrap();
    let mut t = SqlTx::new(inner, &tx);
    for limit in [1, 2, 8, 1, 64, 1, 2] {
        let page = IndexPage {
            lane: Lane::Bare,
            queue: &queue,
            after: None,
            limit,
            now,
        };
        t.ready(page).unwrap();
        t.expired(page).unwrap();
    }
    for sql in [READY_SQL, HELD_SQL] {
        let s = tx.prepare_cached(sql).unwrap();
        assert!(
            s.get_status(rusqlite::StatementStatus::RePrepare) <= 1,
            "{sql} was prepared again {} times",
            s.get_status(rusqlite::StatementStatus::RePrepare)
        );
    }
}

fn claim(task: &str, now: Timestamp) -> Operation {
    Operation {
        task: Id::parse("task", task).unwrap(),
        request: baton_core::Request::Claim {
            owner: Id::parse("owner", "w").unwrap(),
            ttl_ms: Some(60_000),
            lock_delay_ms: None,
        },
        pre: baton_core::request::Preconditions::default(),
        now,
        clock: Default::default(),
    }
}

/// The fence counter rides in the last event (schema 5); a decision
/// that mints a fence and appends no event (none does today: this one
/// has its events taken away) keeps the count in the `fence` row, so
/// the next grant is still one past it and no fence is issued twice.
#[test]
fn a_fence_minted_without_an_event_is_counted_in_the_fence_row() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("a.db"), SqliteOptions::default()).unwrap();
    let inner = store.shell.inner();
    let now = Timestamp::from_millis(1_000);
    let fence_of = |d: &Decision| match &d.verdict {
        baton_core::Verdict::Commit(c) => c.record.lease.as_ref().map(|l| l.fence),
        other => panic!("not granted: {other:?}"),
    };
    let mut conn = inner.lock(&inner.writer);
    // Claims each task in a commit of its own; each gets its fence.
    let grant = |conn: &mut Connection, grants: &[(&str, u64)]| {
        for &(task, fence) in grants {
            let tx = conn.transaction().unwrap();
            let mut t = SqlTx::new(inner, &tx);
            let (d, _) = apply_in(&mut t, &claim(task, now)).unwrap();
            assert_eq!(fence_of(&d), Some(fence), "{task}");
            tx.commit().unwrap();
        }
    };
    grant(&mut conn, &[("a", 1), ("b", 2)]);
    let tx = conn.transaction().unwrap();
    let mut t = SqlTx::new(inner, &tx);
    let mut d = baton_core::engine::decide_read(&mut t, &claim("c", now)).unwrap();
    assert!(d.mints_fence());
    if let baton_core::Verdict::Commit(c) = &mut d.verdict {
        c.events.clear();
    }
    assert_eq!(d.events().count(), 0);
    t.write(&mut d).unwrap();
    assert_eq!(fence_of(&d), Some(3));
    tx.commit().unwrap();
    let row: i64 = conn
        .query_row("SELECT value FROM fence WHERE id = 1", [], |r| r.get(0))
        .unwrap();
    assert_eq!(row, 3, "the fence row holds the count");
    grant(&mut conn, &[("d", 4), ("e", 5)]);
}

/// A process stopped while it keeps the write gate after a commit (a
/// holder paused past its lease, say) holds no SQLite lock: the others
/// write without the gate after a short wait, not `Unavailable` after the
/// busy timeout for as long as it stays stopped.
#[test]
fn a_stopped_process_keeping_the_gate_stops_no_other_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.db");
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    // The gate as another process holds it: an exclusive flock of its own.
    let mut name = path.as_os_str().to_owned();
    name.push("-gate");
    let gate = std::fs::OpenOptions::new().write(true).open(&name).unwrap();
    gate.lock().unwrap();
    let auth = baton_core::Authority::new(store, std::sync::Arc::new(baton_core::SystemClock));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    for i in 0..5 {
        let t = Id::parse("task", &format!("t{i}")).unwrap();
        let reply = rt
            .block_on(auth.claim(&t, &Id::parse("owner", "w").unwrap(), None))
            .expect("the store answers");
        assert!(reply.grant().is_some(), "{reply:?}");
    }
    assert!(
        started.elapsed() < std::time::Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    drop(gate);
}
