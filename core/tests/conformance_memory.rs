//! The in-memory store passes the conformance suite, and so does every
//! wrapper a store can be given through (as object_store runs its suite on
//! every wrapper): a fault injector with no faults, an `Arc`, a boxed
//! `dyn Store`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use async_trait::async_trait;
use baton_core::conformance::Harness;
use baton_core::fault::FaultStore;
use baton_core::{MemoryStore, Store};
use std::sync::Arc;

baton_core::conformance_tests!(baton_core::conformance::MemoryHarness);

/// `FaultStore` over memory, with no fault injected.
#[derive(Debug, Default, Clone, Copy)]
struct FaultFree;

#[async_trait]
impl Harness for FaultFree {
    type Store = FaultStore<MemoryStore>;
    type Place = MemoryStore;
    async fn place(&self) -> MemoryStore {
        MemoryStore::new()
    }
    async fn open(&self, place: &MemoryStore) -> baton_core::Result<Self::Store> {
        Ok(FaultStore::new(place.clone()))
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Shared;

#[async_trait]
impl Harness for Shared {
    type Store = Arc<MemoryStore>;
    type Place = MemoryStore;
    async fn place(&self) -> MemoryStore {
        MemoryStore::new()
    }
    async fn open(&self, place: &MemoryStore) -> baton_core::Result<Self::Store> {
        Ok(Arc::new(place.clone()))
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Boxed;

#[async_trait]
impl Harness for Boxed {
    type Store = Box<dyn Store>;
    type Place = MemoryStore;
    async fn place(&self) -> MemoryStore {
        MemoryStore::new()
    }
    async fn open(&self, place: &MemoryStore) -> baton_core::Result<Self::Store> {
        Ok(Box::new(place.clone()))
    }
}

mod fault_store_without_faults {
    baton_core::conformance_tests!(super::FaultFree);
}

mod arc_store {
    baton_core::conformance_tests!(super::Shared);
}

mod boxed_dyn_store {
    baton_core::conformance_tests!(super::Boxed);
}
