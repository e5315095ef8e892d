//! A store written by an earlier build is migrated forward on open, and
//! keeps its tasks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use baton_core::graph::NodeSpec;
use baton_core::{Refusal, Reply};
use common::{id, open_with, rt};
use std::time::Duration;

fn spec(task: &str, after: &[&str]) -> NodeSpec {
    NodeSpec::new(&id(task), None, 0, after.iter().map(|d| id(d))).unwrap()
}

/// The three indexes as schema version 3 had them: whole, with an entry
/// for every task.
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
        assert_eq!(v, 4, "migrated to version 4");
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
