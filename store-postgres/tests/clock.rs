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
