//! Fences increase in commit order, store-wide: sorted by the commit
//! timestamps Postgres records (`track_commit_timestamp`), the fences of
//! concurrent grants from separate connections never go down. The same
//! check run on numbers from a `SEQUENCE` finds them out of order, so it
//! can tell.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_core::{Authority, Id, SystemClock};
use baton_store_postgres::PostgresStore;
use baton_store_postgres::testing::PgCluster;
use std::sync::Arc;

const THREADS: usize = 8;
const EACH: usize = 25;

/// (commit time, number) pairs from `sql`, in commit order.
fn by_commit(pg: &PgCluster, sql: &str) -> Vec<(String, u64)> {
    pg.sql(sql)
        .lines()
        .map(|l| {
            let (n, ts) = l.split_once('|').unwrap();
            (ts.to_owned(), n.parse().unwrap())
        })
        .collect()
}

/// How many neighbours in commit order (with distinct commit times) hold
/// numbers that go down.
fn inversions(rows: &[(String, u64)]) -> usize {
    rows.windows(2)
        .filter(|w| w[0].0 != w[1].0 && w[1].1 < w[0].1)
        .count()
}

#[test]
fn fences_follow_commit_order_where_a_sequence_does_not() {
    let Some(pg) = PgCluster::start_or_skip() else {
        return;
    };
    let url = format!("{}&group_commit=off&pool=1", pg.url("ordered"));
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let url = url.clone();
            s.spawn(move || {
                let rt = tokio::runtime::Runtime::new().unwrap();
                let store = rt.block_on(PostgresStore::open_url(&url)).unwrap();
                let a = Authority::new(store, Arc::new(SystemClock));
                for i in 0..EACH {
                    let task = Id::parse("task", &format!("t{t}-{i}")).unwrap();
                    let w = Id::parse("owner", &format!("w{t}")).unwrap();
                    let r = rt.block_on(a.claim(&task, &w, Some(60_000))).unwrap();
                    assert!(r.grant().is_some(), "{r:?}");
                }
            });
        }
    });
    let rows = by_commit(
        &pg,
        "SELECT (record::json->'lease'->>'fence'), pg_xact_commit_timestamp(xmin)
         FROM ordered.tasks ORDER BY 2, 1::bigint",
    );
    assert_eq!(rows.len(), THREADS * EACH);
    assert_eq!(inversions(&rows), 0, "fences out of commit order: {rows:?}");

    // The control: numbers taken from a sequence inside transactions that
    // commit after a random pause, as concurrent grants would.
    pg.sql("CREATE SEQUENCE ctl_seq; CREATE TABLE ctl (n bigint)");
    let port = pg.port;
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(move || {
                let rt = tokio::runtime::Runtime::new().unwrap();
                rt.block_on(async {
                    let (mut c, conn) = tokio_postgres::connect(
                        &format!("host=127.0.0.1 port={port} user=baton dbname=postgres"),
                        tokio_postgres::NoTls,
                    )
                    .await
                    .unwrap();
                    tokio::spawn(conn);
                    for _ in 0..EACH {
                        let tx = c.transaction().await.unwrap();
                        tx.execute(
                            "INSERT INTO ctl SELECT nextval('ctl_seq') FROM pg_sleep(random() * 0.004)",
                            &[],
                        )
                        .await
                        .unwrap();
                        tx.execute("SELECT pg_sleep(random() * 0.004)", &[]).await.unwrap();
                        tx.commit().await.unwrap();
                    }
                });
            });
        }
    });
    let rows = by_commit(
        &pg,
        "SELECT n, pg_xact_commit_timestamp(xmin) FROM ctl ORDER BY 2, 1",
    );
    assert_eq!(rows.len(), THREADS * EACH);
    assert!(
        inversions(&rows) > 0,
        "the check found no sequence number out of commit order, so it proves nothing"
    );
}
