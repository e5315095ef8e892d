//! The conformance suite, unchanged, against a server: each case talks to
//! a `baton serve` (on a runtime of its own, as a separate process would
//! be) over HTTP, with a bearer token, through the server's layers
//! (authentication, admission by core's access rule, metering), in front
//! of every backend: memory, SQLite, sled, Postgres and etcd.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use async_trait::async_trait;
use baton_adapter_fabric::testing::EtcdCluster;
use baton_adapter_fabric::{FabricOptions, FabricStore};
use baton_core::Store;
use baton_core::conformance::Harness;
use baton_server::{Listen, ServeOptions, Served, Tokens};
use baton_store_http::{HttpOptions, HttpStore};
use baton_store_postgres::testing::PgCluster;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Clone, Copy)]
enum Backend {
    Memory,
    Sqlite,
    Sled,
    Postgres,
    Etcd,
}

/// The token every case's client sends: an operator's, since the suite
/// acts as many owners and makes an operator's requests (the access rules
/// themselves are tested in `cli/tests/serve.rs`).
const TOKEN: &str = "conformance-token-0123456789abcdef";

static POSTGRES: OnceLock<PgCluster> = OnceLock::new();
static ETCD: OnceLock<EtcdCluster> = OnceLock::new();

/// A name no other case uses (a Postgres schema, an etcd prefix).
fn fresh() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("served_{nanos}_{}", N.fetch_add(1, Ordering::Relaxed))
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

async fn backing(backend: Backend, dir: &std::path::Path) -> Arc<dyn Store> {
    match backend {
        Backend::Memory => Arc::new(baton_core::MemoryStore::new()),
        Backend::Sqlite => Arc::new(
            baton_store_sqlite::SqliteStore::open(dir.join("s.db"), Default::default()).unwrap(),
        ),
        Backend::Sled => Arc::new(
            baton_store_sled::SledStore::open(dir.join("sled"), Default::default()).unwrap(),
        ),
        Backend::Postgres => {
            let server = POSTGRES.get_or_init(PgCluster::start);
            Arc::new(
                baton_store_postgres::PostgresStore::open_url(&server.url(&fresh()))
                    .await
                    .unwrap(),
            )
        }
        Backend::Etcd => {
            let cluster = ETCD.get_or_init(EtcdCluster::start);
            Arc::new(
                FabricStore::connect(FabricOptions::new(cluster.endpoints(), &fresh()))
                    .await
                    .unwrap(),
            )
        }
    }
}

#[async_trait]
impl Harness for ServedHarness {
    type Store = HttpStore;
    type Place = Place;

    fn skip(&self) -> Option<String> {
        match self.0 {
            Backend::Postgres => baton_store_postgres::testing::skip_reason(),
            Backend::Etcd => baton_adapter_fabric::testing::skip_reason(),
            _ => None,
        }
    }

    async fn place(&self) -> Place {
        let dir = tempfile::tempdir().unwrap();
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
        opts.tokens = Some(Tokens::parse(&format!("suite operator {TOKEN}")).unwrap());
        // The store is opened on the server's runtime, where it serves.
        let (backend, path) = (self.0, dir.path().to_owned());
        let served = rt
            .spawn(async move { baton_server::spawn(backing(backend, &path).await, opts).await })
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
        let opts = HttpOptions {
            token: Some(TOKEN.to_owned()),
            ..HttpOptions::default()
        };
        HttpStore::connect(&place.url, opts).await
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

mod postgres {
    baton_core::conformance_tests!(super::ServedHarness(super::Backend::Postgres));
}

mod etcd {
    baton_core::conformance_tests!(super::ServedHarness(super::Backend::Etcd));
}
