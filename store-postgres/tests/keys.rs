//! A concurrency key on Postgres under claims by id: eight writers, each
//! with connections of its own, claim 30 keyed tasks by id (limit 2) and
//! complete what they get. Every request on a keyed task takes its key's
//! lock before the task's, so no two writers wait on each other's rows:
//! the server detects no deadlock, every task is granted and completed,
//! and the limit holds throughout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_core::graph::NodeSpec;
use baton_core::{Actor, Authority, Id, State, SystemClock};
use baton_store_postgres::PostgresStore;
use baton_store_postgres::testing::PgCluster;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const WRITERS: usize = 8;
const TASKS: usize = 30;

fn id(s: &str) -> Id {
    Id::parse("task", s).unwrap()
}

fn open(rt: &tokio::runtime::Runtime, url: &str) -> Authority<PostgresStore> {
    let s = rt.block_on(PostgresStore::open_url(url)).unwrap();
    Authority::new(s, Arc::new(SystemClock))
}

#[test]
fn claims_by_id_and_completions_of_one_key_never_deadlock() {
    let Some(pg) = PgCluster::start_or_skip() else {
        return;
    };
    let url = pg.url("keys");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let a = open(&rt, &url);
    rt.block_on(a.set_limit(&id("k"), Some(2), Actor::Operator(id("alice"))))
        .unwrap();
    for i in 0..TASKS {
        let t = id(&format!("job-{i:02}"));
        let spec = NodeSpec::new(&t, Some(id("q")), 0, [])
            .unwrap()
            .with_key(Some(id("k")))
            .unwrap();
        rt.block_on(a.add(&t, spec)).unwrap();
    }
    let live = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let completed = Arc::new(AtomicUsize::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (url, live, most) = (url.clone(), live.clone(), most.clone());
            let completed = completed.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Runtime::new().unwrap();
                let a = open(&rt, &url);
                let owner = id(&format!("w{w}"));
                let until = Instant::now() + Duration::from_secs(90);
                let mut done = 0;
                while Instant::now() < until && completed.load(Ordering::SeqCst) < TASKS {
                    for k in 0..TASKS {
                        let t = id(&format!("job-{:02}", (k + w * 7) % TASKS));
                        let r = rt.block_on(a.claim(&t, &owner, Some(30_000))).unwrap();
                        let Some(g) = r.grant() else {
                            continue;
                        };
                        let now = live.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(5));
                        live.fetch_sub(1, Ordering::SeqCst);
                        let c = rt.block_on(a.complete(&t, &owner, g.fence)).unwrap();
                        assert!(c.refusal().is_none(), "{c:?}");
                        done += 1;
                        completed.fetch_add(1, Ordering::SeqCst);
                    }
                }
                done
            })
        })
        .collect();
    let done: usize = writers.into_iter().map(|w| w.join().unwrap()).sum();
    assert_eq!(done, TASKS, "every task granted and completed once");
    assert!(most.load(Ordering::SeqCst) <= 2, "the limit of 2 held");
    for i in 0..TASKS {
        let r = rt
            .block_on(a.get(&id(&format!("job-{i:02}"))))
            .unwrap()
            .unwrap();
        assert_eq!(r.state, State::Succeeded, "{r:?}");
    }
    let deadlocks = pg.log().matches("deadlock detected").count();
    assert_eq!(deadlocks, 0, "the server detected {deadlocks} deadlocks");
}
