//! The sled store passes the conformance suite unchanged.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use async_trait::async_trait;
use baton_core::conformance::Harness;
use baton_store_sled::{SledOptions, SledStore};

/// `group_commit`: whether one flush serves every change before it.
#[derive(Debug, Default, Clone, Copy)]
struct SledHarness {
    group_commit: bool,
}

#[async_trait]
impl Harness for SledHarness {
    type Store = SledStore;
    type Place = tempfile::TempDir;

    async fn place(&self) -> tempfile::TempDir {
        tempfile::tempdir().expect("a temporary directory")
    }

    async fn open(&self, place: &tempfile::TempDir) -> baton_core::Result<SledStore> {
        SledStore::open(
            place.path().join("store"),
            SledOptions {
                group_commit: self.group_commit,
                ..Default::default()
            },
        )
    }
}

mod group_commit {
    baton_core::conformance_tests!(super::SledHarness { group_commit: true });
}

mod one_flush_per_change {
    baton_core::conformance_tests!(super::SledHarness {
        group_commit: false
    });
}
