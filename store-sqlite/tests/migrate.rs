//! A store written by an earlier build is migrated forward on open, and
//! keeps its tasks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use baton_core::graph::NodeSpec;
use baton_core::{Refusal, Reply, State, Store};
use common::{id, open_with, rt};
use std::time::Duration;

fn spec(task: &str, after: &[&str]) -> NodeSpec {
    NodeSpec::new(&id(task), None, 0, after.iter().map(|d| id(d))).unwrap()
}

/// Schema version 5 undone: the fence counter back in its own row, no
/// `fence_top` column, and the due index for every state.
const VERSION_4: &str = "
    ALTER TABLE file_identity DROP COLUMN path;
    UPDATE fence SET value = max(value, coalesce((SELECT max(fence_top) FROM events), 0));
    ALTER TABLE events DROP COLUMN fence_top;
    DROP INDEX tasks_by_due;
    CREATE INDEX tasks_by_due ON tasks (state, due_at) WHERE due_at IS NOT NULL;
    PRAGMA user_version = 4;";

/// The three indexes as schema version 3 had them: whole, with an entry
/// for every task (applied after [`VERSION_4`]).
const VERSION_3_INDEXES: &str = "
    DROP INDEX tasks_ready; DROP INDEX tasks_held; DROP INDEX tasks_by_due;
    CREATE INDEX tasks_ready ON tasks (ready_key);
    CREATE INDEX tasks_held ON tasks (held_key);
    CREATE INDEX tasks_by_due ON tasks (state, due_at);
    PRAGMA user_version = 3;";

#[test]
fn a_version_3_store_gets_partial_indexes_and_keeps_its_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let rt = rt();
    {
        let a = open_with(&path, Duration::from_secs(5)).unwrap();
        rt.block_on(async {
            a.add(&id("first"), spec("first", &[])).await.unwrap();
            a.add(&id("second"), spec("second", &["first"]))
                .await
                .unwrap();
            let held = a.claim(&id("bare"), &id("w"), Some(600_000)).await;
            assert!(matches!(held, Ok(Reply::Committed(_))), "{held:?}");
        });
    }
    // Put the indexes back as version 3 wrote them.
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(UNDO_COUNTS).unwrap();
        c.execute_batch(VERSION_4).unwrap();
        c.execute_batch(VERSION_3_INDEXES).unwrap();
        let v: i64 = c
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(v, 3);
    }
    let a = open_with(&path, Duration::from_secs(5)).unwrap();
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        let v: i64 = c
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(v, 8, "migrated to version 8");
        for name in ["tasks_ready", "tasks_held", "tasks_by_due"] {
            let sql: String = c
                .query_row(
                    "SELECT sql FROM sqlite_master WHERE name = ?1",
                    [name],
                    |r| r.get(0),
                )
                .unwrap();
            assert!(sql.contains("IS NOT NULL"), "{name}: {sql}");
        }
        // Only the ready task is in the ready index, and nothing yet in
        // the held one (the bare task has no queue to be taken from).
        let ready: i64 = c
            .query_row(
                "SELECT count(*) FROM tasks INDEXED BY tasks_ready WHERE ready_key IS NOT NULL",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(ready, 1);
    }
    rt.block_on(async {
        // The graph is found through the new indexes, in order.
        let got = a.next(&id("w"), &[], Some(600_000), None).await.unwrap();
        let Reply::Committed(rec) = got else {
            panic!("next granted nothing: {got:?}")
        };
        assert_eq!(rec.task.as_str(), "first");
        let got = a.next(&id("w"), &[], Some(600_000), None).await.unwrap();
        assert!(
            matches!(&got, Reply::Refused(Refusal::NoneReady { .. })),
            "second waits on first: {got:?}"
        );
        // The bare task is still held.
        let again = a.claim(&id("bare"), &id("other"), None).await.unwrap();
        assert!(matches!(again, Reply::Refused(_)), "{again:?}");
    });
}

fn fence_of(reply: &baton_core::Result<Reply>) -> u64 {
    match reply {
        Ok(Reply::Committed(rec)) => rec.lease.as_ref().expect("a grant has a lease").fence,
        other => panic!("not granted: {other:?}"),
    }
}

/// Version 5 moved the fence counter into the events: a version 4 store
/// keeps counting from where its `fence` row stood, never reusing one.
#[test]
fn a_version_4_store_keeps_counting_fences_from_its_fence_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v4.db");
    let rt = rt();
    let last = {
        let a = open_with(&path, Duration::from_secs(5)).unwrap();
        rt.block_on(async {
            let mut last = 0;
            for t in ["a", "b", "c"] {
                let f = fence_of(&a.claim(&id(t), &id("w"), Some(600_000)).await);
                assert!(f > last, "fences increase: {f} after {last}");
                last = f;
            }
            last
        })
    };
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(UNDO_COUNTS).unwrap();
        c.execute_batch(VERSION_4).unwrap();
        // Version 4 counted with the row alone: put it ahead of every
        // fence the events show, so only a store that reads the row
        // continues from the right place.
        c.execute("UPDATE fence SET value = value + 40 WHERE id = 1", [])
            .unwrap();
    }
    let a = open_with(&path, Duration::from_secs(5)).unwrap();
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        let v: i64 = c
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(v, 8);
        let due: String = c
            .query_row(
                "SELECT sql FROM sqlite_master WHERE name = 'tasks_by_due'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert!(due.contains("IN ('DECLARED', 'REGISTERED')"), "{due}");
    }
    rt.block_on(async {
        let f = fence_of(&a.claim(&id("d"), &id("w"), Some(600_000)).await);
        assert_eq!(f, last + 41, "one past the version 4 counter");
        // The counter now travels with the events: another claim, a
        // reopen, and one more still count on.
        let g = fence_of(&a.claim(&id("e"), &id("w"), Some(600_000)).await);
        assert_eq!(g, f + 1);
    });
    drop(a);
    let a = open_with(&path, Duration::from_secs(5)).unwrap();
    rt.block_on(async {
        let h = fence_of(&a.claim(&id("a"), &id("w"), Some(600_000)).await);
        assert_eq!(h, last + 43, "a re-grant after reopening");
    });
}

/// Version 7 indexes ended tasks by when they ended: a task that ended in
/// a version 6 store (no due time on its row) is found and pruned after
/// the migration, and its fence is never handed out again.
#[test]
fn a_version_6_store_prunes_what_ended_before_the_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v6.db");
    let rt = rt();
    let done = {
        let a = open_with(&path, Duration::from_secs(5)).unwrap();
        rt.block_on(async {
            let f = fence_of(&a.claim(&id("done"), &id("w"), Some(600_000)).await);
            a.complete(&id("done"), &id("w"), f).await.unwrap();
            f
        })
    };
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(&format!(
            "{UNDO_COUNTS} DROP INDEX tasks_ended; DROP INDEX outbox_acked_by_task;
                 UPDATE tasks SET due_at = NULL; PRAGMA user_version = 6;"
        ))
        .unwrap();
    }
    let a = open_with(&path, Duration::from_secs(5)).unwrap();
    rt.block_on(async {
        let operator = baton_core::Actor::Operator(id("alice"));
        let pruned = a.prune(operator, 0, 100).await.unwrap();
        assert_eq!(pruned, 1, "the task that ended before the upgrade");
        let r = a.get(&id("done")).await.unwrap().unwrap();
        assert!(r.pruned_at.is_some(), "{r:?}");
        let f = fence_of(&a.claim(&id("new"), &id("w"), Some(600_000)).await);
        assert!(f > done, "{f} after {done}");
    });
}

/// What schema 8 adds, taken away again (a store as version 7 left it).
const UNDO_COUNTS: &str = "DROP TRIGGER counts_insert; DROP TRIGGER counts_update_from;
    DROP TRIGGER counts_update_to; DROP TRIGGER counts_delete; DROP TABLE counts;
    ALTER TABLE tasks DROP COLUMN counted_queue;";

/// Version 8 keeps counts with every commit: a version 7 store's tasks
/// are counted on upgrade (settings left out), and the writes after it
/// keep the counts equal to a count of the records.
#[test]
fn a_version_7_store_counts_its_tasks_on_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v7.db");
    let rt = rt();
    {
        let a = open_with(&path, Duration::from_secs(5)).unwrap();
        rt.block_on(async {
            let f = fence_of(&a.claim(&id("done"), &id("w"), Some(600_000)).await);
            a.complete(&id("done"), &id("w"), f).await.unwrap();
            fence_of(&a.claim(&id("held"), &id("w"), Some(600_000)).await);
            a.add(&id("queued"), spec("queued", &[])).await.unwrap();
            let alice = baton_core::Actor::Operator(id("alice"));
            a.set_limit(&id("repo"), Some(1), alice).await.unwrap();
        });
    }
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(&format!("{UNDO_COUNTS} PRAGMA user_version = 7;"))
            .unwrap();
    }
    let a = open_with(&path, Duration::from_secs(5)).unwrap();
    rt.block_on(async {
        let got = baton_core::counts::Counts::of_stored(a.store().counts().await.unwrap().unwrap())
            .queues;
        let want: std::collections::BTreeMap<String, std::collections::BTreeMap<State, u64>> = [
            (
                "".to_owned(),
                [(State::Succeeded, 1), (State::Claimed, 1)].into(),
            ),
            ("default".to_owned(), [(State::Registered, 1)].into()),
        ]
        .into();
        assert_eq!(got, want);
        let f = fence_of(&a.claim(&id("done-too"), &id("w"), Some(600_000)).await);
        a.complete(&id("done-too"), &id("w"), f).await.unwrap();
        let got = baton_core::counts::Counts::of_stored(a.store().counts().await.unwrap().unwrap())
            .queues;
        assert_eq!(got[""][&State::Succeeded], 2, "{got:?}");
    });
}
