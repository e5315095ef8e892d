//! An idle worker's `next` on an empty queue reads the store's counts, not
//! its tasks, however many tasks other queues hold; a queue that holds a
//! task `next` cannot take yet is still told apart (none ready, or drained
//! behind a failure).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_core::fault::FaultStore;
use baton_core::graph::{NodeSpec, Taker};
use baton_core::{Authority, Id, ManualClock, MemoryStore, Refusal, Reply, Timestamp};
use std::sync::Arc;

fn id(s: &str) -> Id {
    Id::parse("id", s).unwrap()
}

fn taker() -> Taker {
    Taker::Owner {
        owner: id("w"),
        ttl_ms: Some(60_000),
        lock_delay_ms: None,
    }
}

fn census_of(r: &Reply) -> (&'static str, baton_core::Census) {
    match r {
        Reply::Refused(Refusal::Drained { census }) => ("drained", *census),
        Reply::Refused(Refusal::NoneReady { census }) => ("none_ready", *census),
        other => panic!("expected no grant, got {other:?}"),
    }
}

#[tokio::test]
async fn an_empty_queue_is_drained_without_reading_a_task() {
    let clock = Arc::new(ManualClock::new(Timestamp::from_millis(1_000_000)));
    let a = Authority::new(FaultStore::new(MemoryStore::new()), clock.clone());
    // 300 waiting tasks in another queue: the scan the census used to make
    // would read every one of them.
    for i in 0..300 {
        let t = id(&format!("busy-{i}"));
        let spec = NodeSpec::new(&t, Some(id("busy")), 0, []).unwrap();
        assert!(!a.add(&t, spec).await.unwrap().is_refused());
    }
    let before = a.store().records_listed();
    let r = a.next_for(taker(), &[id("empty")]).await.unwrap();
    let (said, census) = census_of(&r);
    assert_eq!(said, "drained");
    assert_eq!(census, baton_core::Census::default());
    assert_eq!(
        a.store().records_listed(),
        before,
        "an empty queue's next read tasks"
    );

    // A queue whose one task is held: not drained (the holder may fail and
    // it comes back), told by reading where it stands.
    let t = id("held");
    let spec = NodeSpec::new(&t, Some(id("one")), 0, []).unwrap();
    assert!(!a.add(&t, spec).await.unwrap().is_refused());
    let granted = a.next_for(taker(), &[id("one")]).await.unwrap();
    assert!(granted.grant().is_some(), "{granted:?}");
    let (said, census) = census_of(&a.next_for(taker(), &[id("one")]).await.unwrap());
    assert_eq!((said, census.held), ("none_ready", 1));

    // A task behind a dependency that failed: the queue is drained (only an
    // operator can move it), and the counts alone could not say so.
    let up = id("up");
    let spec = NodeSpec::new(&up, Some(id("chain")), 0, []).unwrap();
    assert!(!a.add(&up, spec).await.unwrap().is_refused());
    let down = id("down");
    let spec = NodeSpec::new(&down, Some(id("chain")), 0, [up.clone()]).unwrap();
    assert!(!a.add(&down, spec).await.unwrap().is_refused());
    let g = a.next_for(taker(), &[id("chain")]).await.unwrap();
    let fence = g.grant().expect("the upstream task is granted").fence;
    let failed = a.fail(&up, &id("w"), fence, None).await.unwrap();
    assert!(!failed.is_refused(), "{failed:?}");
    let (said, census) = census_of(&a.next_for(taker(), &[id("chain")]).await.unwrap());
    assert_eq!((said, census.blocked), ("drained", 1));
}

/// A queue's longest wait costs one seek a priority in use, at most
/// `OldestReady::SEEKS` of them: with more priorities than that, the
/// answer is the oldest among the highest ones read (a bound, said), and
/// never a task that is not waiting.
#[tokio::test]
async fn the_oldest_wait_reads_a_bounded_number_of_priorities() {
    use baton_core::graph::OldestReady;
    let clock = Arc::new(ManualClock::new(Timestamp::from_millis(1_000_000)));
    let a = Authority::new(MemoryStore::new(), clock.clone());
    let n = OldestReady::SEEKS as i64 + 6;
    // The lowest priorities were added first: the oldest waits lowest.
    for p in 0..n {
        let t = id(&format!("p{p:03}"));
        let spec = NodeSpec::new(&t, Some(id("wide")), p, []).unwrap();
        a.add(&t, spec).await.unwrap();
        clock.advance_ms(10);
    }
    let oldest = a.oldest_waiting(&id("wide")).await.unwrap().unwrap();
    let first_read = n - OldestReady::SEEKS as i64;
    let expected = a
        .get(&id(&format!("p{first_read:03}")))
        .await
        .unwrap()
        .and_then(|r| r.node)
        .and_then(|n| n.ready_at)
        .unwrap();
    assert_eq!(
        oldest,
        expected,
        "the oldest of the {} highest",
        OldestReady::SEEKS
    );
    // Below the bound the answer is exact: grant the six lowest.
    for p in 0..6 {
        let g = a
            .claim(&id(&format!("p{p:03}")), &id("w"), Some(60_000))
            .await
            .unwrap();
        assert!(g.grant().is_some(), "{g:?}");
    }
    assert_eq!(a.oldest_waiting(&id("wide")).await.unwrap(), Some(expected));
}
