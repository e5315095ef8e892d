//! The Postgres store passes the conformance suite unchanged, against a
//! real server (one per test run; each case gets a schema of its own).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use async_trait::async_trait;
use baton_core::conformance::Harness;
use baton_store_postgres::PostgresStore;
use baton_store_postgres::testing::{PgCluster, skip_reason};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

static SERVER: OnceLock<PgCluster> = OnceLock::new();

#[derive(Debug, Clone, Copy)]
struct PgHarness {
    group_commit: bool,
}

#[async_trait]
impl Harness for PgHarness {
    type Store = PostgresStore;
    /// A schema no other case uses.
    type Place = String;

    fn skip(&self) -> Option<String> {
        skip_reason()
    }

    async fn place(&self) -> String {
        static N: AtomicU64 = AtomicU64::new(0);
        format!("case_{}", N.fetch_add(1, Ordering::Relaxed))
    }

    async fn open(&self, schema: &String) -> baton_core::Result<PostgresStore> {
        let server = SERVER.get_or_init(PgCluster::start);
        let gc = if self.group_commit { "on" } else { "off" };
        PostgresStore::open_url(&format!("{}&group_commit={gc}", server.url(schema))).await
    }
}

mod group_commit {
    baton_core::conformance_tests!(super::PgHarness { group_commit: true });
}

mod one_commit_per_decision {
    baton_core::conformance_tests!(super::PgHarness {
        group_commit: false
    });
}
