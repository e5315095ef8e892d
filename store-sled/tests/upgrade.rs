//! A store of an earlier layout is upgraded in place when opened.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_core::counts::{Counts, drift};
use baton_core::{Authority, Id, State, Store, SystemClock};
use baton_store_sled::{SledOptions, SledStore};
use std::path::Path;
use std::sync::Arc;

fn id(s: &str) -> Id {
    Id::parse("id", s).unwrap()
}

fn open(path: &Path) -> Authority<SledStore> {
    Authority::new(
        SledStore::open(path, SledOptions::default()).unwrap(),
        Arc::new(SystemClock),
    )
}

/// Layout 3 keeps counts with every commit: a layout 2 store (no counts)
/// is counted when opened (settings left out), and the writes after keep
/// the counts equal to a count of the records.
#[test]
fn a_layout_2_store_counts_its_tasks_when_opened() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    {
        let a = open(&path);
        rt.block_on(async {
            let f = a.claim(&id("done"), &id("w"), None).await.unwrap();
            let f = f.grant().unwrap().fence;
            a.complete(&id("done"), &id("w"), f).await.unwrap();
            a.claim(&id("held"), &id("w"), None).await.unwrap();
            let alice = baton_core::Actor::Operator(id("alice"));
            a.set_limit(&id("repo"), Some(1), alice).await.unwrap();
        });
    }
    // Back to layout 2: no counts, and a count a crash left half written.
    {
        let db = sled::open(&path).unwrap();
        let meta = db.open_tree("meta").unwrap();
        for k in meta.scan_prefix(b"count/").keys() {
            meta.remove(k.unwrap()).unwrap();
        }
        meta.insert(b"count/\0SUCCEEDED", &7i64.to_be_bytes())
            .unwrap();
        meta.insert("schema", &2u64.to_be_bytes()).unwrap();
        db.flush().unwrap();
    }
    let a = open(&path);
    rt.block_on(async {
        let kept = Counts::of_stored(a.store().counts().await.unwrap().unwrap());
        assert_eq!(kept.queues[""][&State::Succeeded], 1, "{kept:?}");
        assert_eq!(kept.queues[""][&State::Claimed], 1, "{kept:?}");
        assert_eq!(kept.queues.len(), 1, "the setting is not counted: {kept:?}");
        let f = a.claim(&id("more"), &id("w"), None).await.unwrap();
        let f = f.grant().unwrap().fence;
        a.complete(&id("more"), &id("w"), f).await.unwrap();
        assert_eq!(drift(a.store(), a.now()).await.unwrap(), None);
        let kept = Counts::of_stored(a.store().counts().await.unwrap().unwrap());
        assert_eq!(kept.queues[""][&State::Succeeded], 2, "{kept:?}");
    });
}
