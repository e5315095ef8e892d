//! The Fabric adapter passes the conformance suite unchanged, against a real
//! 3-member etcd cluster (one per test run; each case gets its own prefix).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use async_trait::async_trait;
use baton_adapter_fabric::testing::EtcdCluster;
use baton_adapter_fabric::{FabricOptions, FabricStore};
use baton_core::conformance::Harness;
use std::sync::OnceLock;

static CLUSTER: OnceLock<EtcdCluster> = OnceLock::new();

#[derive(Debug, Default, Clone, Copy)]
struct FabricHarness;

#[async_trait]
impl Harness for FabricHarness {
    type Store = FabricStore;
    /// A key prefix no other case uses.
    type Place = String;

    async fn place(&self) -> String {
        format!("conformance-{}", uuid_like())
    }

    fn skip(&self) -> Option<String> {
        baton_adapter_fabric::testing::skip_reason()
    }

    async fn open(&self, prefix: &String) -> baton_core::Result<FabricStore> {
        let cluster = CLUSTER.get_or_init(EtcdCluster::start);
        FabricStore::connect(FabricOptions::new(cluster.endpoints(), prefix)).await
    }
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{nanos}-{}", N.fetch_add(1, Ordering::Relaxed))
}

baton_core::conformance_tests!(FabricHarness);
