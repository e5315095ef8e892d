//! `next --count N` on SQLite: the grants of one scan in one commit (one
//! fsync), however many it makes; across processes, each task granted once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod common;

use baton_core::Reply;
use baton_core::graph::{NodeSpec, Taker};
use baton_core::store::Meter;
use common::{id, rt};
use std::collections::BTreeSet;
use std::time::Duration;

fn taker(owner: &str) -> Taker {
    Taker::Owner {
        owner: id(owner),
        ttl_ms: Some(600_000),
        lock_delay_ms: None,
    }
}

#[test]
fn a_batch_of_grants_is_one_commit() {
    let dir = tempfile::tempdir().unwrap();
    let a = common::open_with(&dir.path().join("b.db"), Duration::from_secs(5)).unwrap();
    let rt = rt();
    for i in 0..12 {
        let t = id(&format!("t{i:02}"));
        rt.block_on(a.add(&t, NodeSpec::new(&t, None, 0, []).unwrap()))
            .unwrap();
    }
    let before = a.store().commits().unwrap();
    let granted = rt.block_on(a.next_many_for(taker("w"), &[], 10)).unwrap();
    assert_eq!(granted.len(), 10);
    assert!(granted.iter().all(|r| matches!(r, Reply::Committed(_))));
    assert_eq!(a.store().commits().unwrap() - before, 1, "one commit");
    let rest = rt.block_on(a.next_many_for(taker("w"), &[], 10)).unwrap();
    assert_eq!(rest.len(), 2);
    let tasks: BTreeSet<String> = granted
        .iter()
        .chain(&rest)
        .map(|r| r.grant().unwrap().task.to_string())
        .collect();
    assert_eq!(tasks.len(), 12, "each task granted once");
}

#[test]
fn a_batch_of_reports_is_one_commit() {
    let dir = tempfile::tempdir().unwrap();
    let a = common::open_with(&dir.path().join("r.db"), Duration::from_secs(5)).unwrap();
    let rt = rt();
    for i in 0..8 {
        let t = id(&format!("t{i}"));
        rt.block_on(a.add(&t, NodeSpec::new(&t, None, 0, []).unwrap()))
            .unwrap();
    }
    let granted = rt.block_on(a.next_many_for(taker("w"), &[], 8)).unwrap();
    let reports = granted
        .iter()
        .map(|r| {
            let g = r.grant().unwrap();
            (
                g.task.clone(),
                baton_core::Request::Complete {
                    owner: id("w"),
                    fence: g.fence,
                },
            )
        })
        .collect();
    let before = a.store().commits().unwrap();
    let done = rt.block_on(a.report_many(reports)).unwrap();
    assert_eq!(a.store().commits().unwrap() - before, 1, "one commit");
    assert!(done.iter().all(|r| {
        r.record()
            .is_some_and(|r| r.state == baton_core::State::Succeeded)
    }));
}

/// Batches of reports from many callers at once share the store's group
/// commits with each other (and with single requests), as single requests
/// do: 16 batches take far fewer than 16 commits, and each report is still
/// decided on its own fence.
#[test]
fn batches_of_reports_from_many_callers_share_commits() {
    let dir = tempfile::tempdir().unwrap();
    let a = common::open_with(&dir.path().join("s.db"), Duration::from_secs(5)).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    for i in 0..128 {
        let t = id(&format!("t{i:03}"));
        rt.block_on(a.add(&t, NodeSpec::new(&t, None, 0, []).unwrap()))
            .unwrap();
    }
    let granted = rt.block_on(a.next_many_for(taker("w"), &[], 128)).unwrap();
    assert_eq!(granted.len(), 128);
    let a = std::sync::Arc::new(a);
    let before = a.store().commits().unwrap();
    let joins: Vec<_> = granted
        .chunks(8)
        .enumerate()
        .map(|(k, chunk)| {
            let reports: Vec<_> = chunk
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let g = r.grant().unwrap();
                    // Each batch's first report carries a fence not its own.
                    let fence = if i == 0 { g.fence + 1000 } else { g.fence };
                    (
                        g.task.clone(),
                        baton_core::Request::Complete {
                            owner: id("w"),
                            fence,
                        },
                    )
                })
                .collect();
            let a = a.clone();
            rt.spawn(async move { (k, a.report_many(reports).await) })
        })
        .collect();
    for j in joins {
        let (k, done) = rt.block_on(j).unwrap();
        let done = done.unwrap();
        assert_eq!(done.len(), 8, "batch {k}");
        assert!(
            matches!(done[0], Reply::Refused(_)),
            "batch {k}: a fence not the current one is refused: {:?}",
            done[0]
        );
        assert!(done[1..].iter().all(|r| {
            r.record()
                .is_some_and(|r| r.state == baton_core::State::Succeeded)
        }));
    }
    let commits = a.store().commits().unwrap() - before;
    assert!(
        commits < 8,
        "16 batches of reports made {commits} commits: they did not share"
    );
}
