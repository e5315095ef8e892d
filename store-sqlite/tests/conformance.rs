//! The SQLite store passes the conformance suite unchanged.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use async_trait::async_trait;
use baton_core::conformance::Harness;
use baton_store_sqlite::{SqliteOptions, SqliteStore};

/// `group_commit`: whether concurrent writers share one transaction.
#[derive(Debug, Default, Clone, Copy)]
struct SqliteHarness {
    group_commit: bool,
}

#[async_trait]
impl Harness for SqliteHarness {
    type Store = SqliteStore;
    type Place = tempfile::TempDir;

    async fn place(&self) -> tempfile::TempDir {
        tempfile::tempdir().expect("a temporary directory")
    }

    async fn open(&self, place: &tempfile::TempDir) -> baton_core::Result<SqliteStore> {
        let opts = SqliteOptions {
            group_commit: self.group_commit,
            ..Default::default()
        };
        SqliteStore::open(place.path().join("baton.db"), opts)
    }
}

mod group_commit {
    baton_core::conformance_tests!(super::SqliteHarness { group_commit: true });
}

mod one_commit_per_decision {
    baton_core::conformance_tests!(super::SqliteHarness {
        group_commit: false
    });
}
