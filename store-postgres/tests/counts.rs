//! The count deltas the triggers append stay few with no reader of the
//! counts: a handle folds them every `FOLD_EVERY` write transactions.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_core::{Authority, Id, Store, SystemClock};
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
    rt.block_on(grant(&a, grants));
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

/// Readers of the counts take no lock and see each delta exactly once,
/// folded or not: while eight writers grant and folds run beside them, the
/// total a reader sees never falls (a fold read half done would lose the
/// deltas it deleted, or count them twice) and never passes the grants.
#[test]
fn counts_read_beside_folds_never_lose_or_double_a_delta() {
    let Some(pg) = PgCluster::start_or_skip() else {
        return;
    };
    let url = pg.url("beside");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let a = Arc::new(Authority::new(
        rt.block_on(PostgresStore::open_url(&url)).unwrap(),
        Arc::new(SystemClock),
    ));
    let grants = 2 * FOLD_EVERY as usize + 300;
    // Folds far more often than the handles' own (every FOLD_EVERY
    // requests), each the statement a handle runs.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let fold = "BEGIN; LOCK TABLE beside.counts IN EXCLUSIVE MODE NOWAIT;
         WITH moved AS (DELETE FROM beside.count_deltas RETURNING queue, state, n)
         INSERT INTO beside.counts AS c (queue, state, n)
         SELECT queue, state, sum(n)::bigint FROM moved GROUP BY queue, state
         ON CONFLICT (queue, state) DO UPDATE SET n = c.n + excluded.n; COMMIT;";
    let (seen, folds) = std::thread::scope(|s| {
        let folder = s.spawn(|| {
            let mut folds = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                // Refused while another fold holds the lock: the next one.
                folds += u64::from(pg.run_sql("postgres", fold).is_ok());
            }
            folds
        });
        // The folder stops whether or not the run failed.
        let seen = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&rt, &a, grants)));
        stop.store(true, std::sync::atomic::Ordering::Release);
        let folds = folder.join().unwrap();
        (seen.unwrap_or_else(|p| std::panic::resume_unwind(p)), folds)
    });
    assert!(folds > 10, "only {folds} folds ran beside the readers");
    assert!(
        seen > 10,
        "only {seen} reads of the counts ran beside the writers"
    );
    let counts = rt.block_on(a.store().counts()).unwrap().unwrap();
    assert_eq!(counts.iter().map(|c| c.n).sum::<u64>(), grants as u64);
    let drift = rt.block_on(baton_core::counts::drift(a.store(), a.now()));
    assert_eq!(drift.unwrap(), None);
}

/// Eight writers granting `grants` tasks while a reader reads the counts
/// in a loop, checking each total: how many reads it made.
fn run(rt: &tokio::runtime::Runtime, a: &Arc<Authority<PostgresStore>>, grants: usize) -> u64 {
    rt.block_on(async {
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (a, done) = (a.clone(), done.clone());
            tokio::spawn(async move {
                let (mut last, mut reads) = (0u64, 0u64);
                while !done.load(std::sync::atomic::Ordering::Acquire) {
                    let counts = a.store().counts().await.unwrap().unwrap();
                    let total: u64 = counts.iter().map(|c| c.n).sum();
                    assert!(total >= last, "the counts fell from {last} to {total}");
                    assert!(total <= grants as u64, "{total} counted of {grants} grants");
                    last = total;
                    reads += 1;
                }
                reads
            })
        };
        grant(a, grants).await;
        done.store(true, std::sync::atomic::Ordering::Release);
        reader.await.unwrap()
    })
}

/// Eight writers at once grant tasks `t0..t{grants}`, each a claim.
async fn grant(a: &Arc<Authority<PostgresStore>>, grants: usize) {
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
}

/// Batches of grants and reports update their rows in one statement, and
/// the count triggers run once for it: the counts stay the records' own
/// (no drift) through batches that grant, complete, fail and are refused
/// on a stale fence, and each statement appends one delta per queue and
/// state it changed, not two per row.
#[test]
fn batches_are_counted_exactly_once_a_statement() {
    use baton_core::graph::{NewNode, NodeSpec, Taker};
    use baton_core::{Request, State};
    let Some(pg) = PgCluster::start_or_skip() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let a = Arc::new(Authority::new(
        rt.block_on(PostgresStore::open_url(&pg.url("batches")))
            .unwrap(),
        Arc::new(SystemClock),
    ));
    let q = Id::parse("queue", "q").unwrap();
    let nodes: Vec<NewNode> = (0..64)
        .map(|i| {
            let task = Id::parse("task", &format!("b{i:02}")).unwrap();
            let spec = NodeSpec::new(&task, Some(q.clone()), 0, Vec::new()).unwrap();
            NewNode { task, spec }
        })
        .collect();
    rt.block_on(a.add_graph(nodes)).unwrap().unwrap();
    let owner = Id::parse("owner", "w").unwrap();
    let taker = Taker::Owner {
        owner: owner.clone(),
        ttl_ms: Some(60_000),
        lock_delay_ms: None,
    };
    let before: u64 = pg
        .sql("SELECT count(*) FROM batches.count_deltas")
        .parse()
        .unwrap();
    let grants = rt
        .block_on(a.next_many_for(taker.clone(), std::slice::from_ref(&q), 32))
        .unwrap();
    assert_eq!(grants.len(), 32);
    let after: u64 = pg
        .sql("SELECT count(*) FROM batches.count_deltas")
        .parse()
        .unwrap();
    // One delta pair per statement (a page of the ready index a round
    // trip), where a trigger per row appended 64.
    assert!(
        after - before <= 8,
        "32 grants in one statement appended {} deltas",
        after - before
    );
    // Complete 30, fail one, and report one on a stale fence.
    let reports: Vec<_> = grants
        .iter()
        .filter_map(|r| r.grant())
        .enumerate()
        .map(|(i, g)| {
            let request = match i {
                0 => Request::Fail {
                    owner: owner.clone(),
                    fence: g.fence,
                    error: None,
                },
                1 => Request::Complete {
                    owner: owner.clone(),
                    fence: g.fence + 10_000,
                },
                _ => Request::Complete {
                    owner: owner.clone(),
                    fence: g.fence,
                },
            };
            (g.task, request)
        })
        .collect();
    let answers = rt.block_on(a.report_many(reports)).unwrap();
    assert_eq!(answers.iter().filter(|r| r.refusal().is_some()).count(), 1);
    let drift = rt.block_on(baton_core::counts::drift(a.store(), a.now()));
    assert_eq!(drift.unwrap(), None, "the counts are the records' own");
    let counts =
        baton_core::counts::Counts::of_stored(rt.block_on(a.store().counts()).unwrap().unwrap());
    let q = &counts.queues["q"];
    assert_eq!(q.get(&State::Succeeded).copied(), Some(30), "{counts:?}");
    assert_eq!(q.get(&State::Failed).copied(), Some(1), "{counts:?}");
    assert_eq!(q.get(&State::Claimed).copied(), Some(1), "{counts:?}");
    assert_eq!(q.get(&State::Registered).copied(), Some(32), "{counts:?}");
}
