//! The SQLite store passes the conformance suite unchanged.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use async_trait::async_trait;
use baton_core::conformance::Harness;
use baton_store_sqlite::{SqliteOptions, SqliteStore};

#[derive(Debug, Default, Clone, Copy)]
struct SqliteHarness;

#[async_trait]
impl Harness for SqliteHarness {
    type Store = SqliteStore;
    type Place = tempfile::TempDir;

    async fn place(&self) -> tempfile::TempDir {
        tempfile::tempdir().expect("a temporary directory")
    }

    async fn open(&self, place: &tempfile::TempDir) -> baton_core::Result<SqliteStore> {
        SqliteStore::open(place.path().join("baton.db"), SqliteOptions::default())
    }
}

baton_core::conformance_tests!(SqliteHarness);
