//! The conformance suite, unchanged, against a server: each case talks to
//! a `baton serve` (on a runtime of its own, as a separate process would
//! be) over HTTP, in front of the memory, SQLite and sled stores.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use async_trait::async_trait;
use baton_core::Store;
use baton_core::conformance::Harness;
use baton_server::{Listen, ServeOptions, Served};
use baton_store_http::{HttpOptions, HttpStore};
use std::sync::Arc;

#[derive(Debug, Clone, Copy)]
enum Backend {
    Memory,
    Sqlite,
    Sled,
}

#[derive(Debug, Clone, Copy)]
struct ServedHarness(Backend);

/// A server on its own runtime, and the directory its store lives in.
struct Place {
    url: String,
    served: Option<Served>,
    rt: Option<tokio::runtime::Runtime>,
    _dir: tempfile::TempDir,
}

impl Drop for Place {
    fn drop(&mut self) {
        if let (Some(rt), Some(served)) = (self.rt.take(), self.served.take()) {
            // Stopped from a thread of its own: the drop may run inside a
            // case's runtime, where blocking is not allowed.
            std::thread::spawn(move || {
                rt.block_on(served.stop());
                rt.shutdown_background();
            })
            .join()
            .unwrap();
        }
    }
}

fn backing(backend: Backend, dir: &std::path::Path) -> Arc<dyn Store> {
    match backend {
        Backend::Memory => Arc::new(baton_core::MemoryStore::new()),
        Backend::Sqlite => Arc::new(
            baton_store_sqlite::SqliteStore::open(dir.join("s.db"), Default::default()).unwrap(),
        ),
        Backend::Sled => Arc::new(
            baton_store_sled::SledStore::open(dir.join("sled"), Default::default()).unwrap(),
        ),
    }
}

#[async_trait]
impl Harness for ServedHarness {
    type Store = HttpStore;
    type Place = Place;

    async fn place(&self) -> Place {
        let dir = tempfile::tempdir().unwrap();
        let store = backing(self.0, dir.path());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listen = Listen::Tcp("127.0.0.1:0".parse().unwrap());
        // The suite checks the store through the protocol, event by event:
        // the server's own sweeper (tested in cli/tests/serve.rs) would add
        // events the cases do not expect.
        let mut opts = ServeOptions::new(listen);
        opts.sweep_every = None;
        let served = rt
            .spawn(baton_server::spawn(store, opts))
            .await
            .unwrap()
            .unwrap();
        Place {
            url: served.url().unwrap(),
            served: Some(served),
            rt: Some(rt),
            _dir: dir,
        }
    }

    async fn open(&self, place: &Place) -> baton_core::Result<HttpStore> {
        HttpStore::connect(&place.url, HttpOptions::default()).await
    }
}

mod memory {
    baton_core::conformance_tests!(super::ServedHarness(super::Backend::Memory));
}

mod sqlite {
    baton_core::conformance_tests!(super::ServedHarness(super::Backend::Sqlite));
}

mod sled {
    baton_core::conformance_tests!(super::ServedHarness(super::Backend::Sled));
}
