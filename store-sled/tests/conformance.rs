//! The sled store passes the conformance suite unchanged.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use async_trait::async_trait;
use baton_core::conformance::Harness;
use baton_store_sled::{SledOptions, SledStore};

#[derive(Debug, Default, Clone, Copy)]
struct SledHarness;

#[async_trait]
impl Harness for SledHarness {
    type Store = SledStore;
    type Place = tempfile::TempDir;

    async fn place(&self) -> tempfile::TempDir {
        tempfile::tempdir().expect("a temporary directory")
    }

    async fn open(&self, place: &tempfile::TempDir) -> baton_core::Result<SledStore> {
        SledStore::open(place.path().join("store"), SledOptions::default())
    }
}

baton_core::conformance_tests!(SledHarness);
