//! Every deadline is the database server's: clients whose clocks are off by
//! ten minutes either way (injected clocks) see a lease live while it is,
//! and expired on time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_core::{Authority, Id, ManualClock, Refusal, State, Timestamp};
use baton_store_postgres::PostgresStore;
use baton_store_postgres::testing::PgCluster;
use std::sync::Arc;
use std::time::Duration;

fn id(s: &str) -> Id {
    Id::parse("task", s).unwrap()
}

fn skewed(rt: &tokio::runtime::Runtime, url: &str, by_ms: i64) -> Authority<PostgresStore> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let clock = ManualClock::new(Timestamp(i64::try_from(now).unwrap() + by_ms));
    let s = rt.block_on(PostgresStore::open_url(url)).unwrap();
    Authority::new(s, Arc::new(clock))
}

#[test]
fn clients_with_skewed_clocks_see_leases_end_on_the_servers_time() {
    let Some(pg) = PgCluster::start_or_skip() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let url = pg.url("clock");
    let ten_min = 10 * 60 * 1000;
    // The clients' clocks never move: only the server's time passes.
    let ahead = skewed(&rt, &url, ten_min);
    let behind = skewed(&rt, &url, -ten_min);
    let t = id("job");
    let g = rt
        .block_on(ahead.claim(&t, &id("ahead"), Some(3000)))
        .unwrap()
        .grant()
        .unwrap();
    // Judged by the ahead client's clock the lease ended minutes ago; by
    // the server's it holds, for both clients and for the sweep.
    let r = rt
        .block_on(behind.claim(&t, &id("behind"), Some(3000)))
        .unwrap();
    assert!(matches!(r.refusal(), Some(Refusal::Held { .. })), "{r:?}");
    rt.block_on(ahead.sweep(false)).unwrap();
    let rec = rt.block_on(behind.get(&t)).unwrap().unwrap();
    assert_eq!(rec.state, State::Claimed);
    // The expiry stored is the server's grant time plus the TTL.
    let server_ms: i64 = pg
        .sql("SELECT floor(extract(epoch from clock_timestamp()) * 1000)::bigint")
        .parse()
        .unwrap();
    let left = g.expiry.0 - server_ms;
    assert!(
        (0..=3000).contains(&left),
        "{left} ms left on the server's clock"
    );
    // Judged by the behind client's clock the lease has ten minutes to go;
    // by the server's it ends after 3 s.
    std::thread::sleep(Duration::from_millis(3500));
    let g2 = rt
        .block_on(behind.claim(&t, &id("behind"), Some(3000)))
        .unwrap()
        .grant()
        .expect("granted once the server's clock passed the expiry");
    assert!(g2.fence > g.fence);
    let late = rt
        .block_on(ahead.renew(&t, &id("ahead"), g.fence, Some(3000)))
        .unwrap();
    assert!(late.grant().is_none(), "{late:?}");
}

/// A claim that waits for another session's lock on the task's row is
/// timed once the lock is its own: its lease is not over when answered,
/// and its grant's time comes after the lock's holder let go.
#[test]
fn a_claim_that_waited_for_a_row_lock_is_granted_when_it_got_it() {
    let Some(pg) = PgCluster::start_or_skip() else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let url = pg.url("rowlock");
    let s = rt.block_on(PostgresStore::open_url(&url)).unwrap();
    let a = Authority::new(s, Arc::new(baton_core::SystemClock));
    let t = id("locked");
    let g = rt
        .block_on(a.claim(&t, &id("w"), Some(1000)))
        .unwrap()
        .grant()
        .unwrap();
    rt.block_on(a.release(&t, &id("w"), g.fence)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let holder = std::thread::spawn(move || {
        // The row locked by a session of its own for 2 s.
        let sql = "BEGIN; SELECT 1 FROM rowlock.tasks WHERE task_id = 'locked' FOR UPDATE; \
                   SELECT pg_sleep(2); COMMIT;";
        let mut c = std::process::Command::new("psql");
        c.args([
            "-h",
            "127.0.0.1",
            "-p",
            &pg_port(&url),
            "-U",
            "baton",
            "-d",
            "postgres",
        ])
        .args(["-c", sql]);
        tx.send(()).unwrap();
        c.output().unwrap()
    });
    rx.recv().unwrap();
    // psql has connected and locked the row once its backend waits in pg_sleep.
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while pg.sql("SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(2)%' AND wait_event = 'PgSleep'") != "1" {
        assert!(std::time::Instant::now() < until, "psql never locked the row");
        std::thread::sleep(Duration::from_millis(20));
    }
    let asked = baton_core::Clock::now(&baton_core::SystemClock);
    let g = rt
        .block_on(a.claim(&t, &id("v"), Some(1000)))
        .unwrap()
        .grant()
        .unwrap();
    let answered = baton_core::Clock::now(&baton_core::SystemClock);
    assert!(holder.join().unwrap().status.success());
    assert!(answered.0 - asked.0 >= 1500, "the claim waited for the row");
    assert!(
        g.claimed_at.0 >= asked.0 + 1500,
        "granted at {} though asked at {asked}",
        g.claimed_at
    );
    assert!(
        g.expiry > answered,
        "the lease ({}) was over when answered ({answered})",
        g.expiry
    );
}

fn pg_port(url: &str) -> String {
    url.split("127.0.0.1:")
        .nth(1)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned()
}
