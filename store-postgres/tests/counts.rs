//! The count deltas the triggers append stay few with no reader of the
//! counts: a handle folds them every `FOLD_EVERY` write transactions.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_core::{Authority, Id, SystemClock};
use baton_store_postgres::testing::PgCluster;
use baton_store_postgres::{FOLD_EVERY, PostgresStore};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn the_count_deltas_are_folded_without_a_reader() {
    let Some(pg) = PgCluster::start_or_skip() else {
        return;
    };
    let url = pg.url("folds");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let a = Arc::new(Authority::new(
        rt.block_on(PostgresStore::open_url(&url)).unwrap(),
        Arc::new(SystemClock),
    ));
    // Three folds' worth of grants, eight writers at once, and no read
    // of the counts.
    let grants = 3 * FOLD_EVERY as usize + 100;
    rt.block_on(async {
        let workers: Vec<_> = (0..8)
            .map(|w| {
                let a = a.clone();
                tokio::spawn(async move {
                    for i in (w..grants).step_by(8) {
                        let t = Id::parse("task", &format!("t{i}")).unwrap();
                        let owner = Id::parse("owner", "w").unwrap();
                        let r = a.claim(&t, &owner, None).await.unwrap();
                        assert!(r.grant().is_some(), "{r:?}");
                    }
                })
            })
            .collect();
        for w in workers {
            w.await.unwrap();
        }
    });
    // A fold runs in the background: wait for the last one to land.
    let deadline = Instant::now() + Duration::from_secs(10);
    let left = loop {
        let n: u64 = pg
            .sql("SELECT count(*) FROM folds.count_deltas")
            .parse()
            .unwrap();
        if n < FOLD_EVERY + 200 || Instant::now() > deadline {
            break n;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        left < FOLD_EVERY + 200,
        "{left} deltas left of {grants} grants: not folded"
    );
    let drift = rt.block_on(baton_core::counts::drift(a.store(), a.now()));
    assert_eq!(drift.unwrap(), None);
}
