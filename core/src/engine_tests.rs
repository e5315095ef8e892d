//! Unit tests of `engine.rs`.

use super::*;
use crate::request::Request;

fn op(task: &str, request: Request) -> Operation {
    Operation {
        task: Id::parse("task", task).unwrap(),
        request,
        pre: Preconditions::default(),
        now: Timestamp(1_767_225_600_000),
        clock: Default::default(),
    }
}

fn claim(task: &str) -> Operation {
    op(
        task,
        Request::Claim {
            owner: Id::parse("owner", "w").unwrap(),
            ttl_ms: Some(1000),
            lock_delay_ms: None,
        },
    )
}

/// A claim of a task with no record: the engine asks for the record,
/// then for the grant to be written (once, however often it runs the
/// operation again), and answers with the fence the store assigned.
#[test]
fn a_claim_asks_for_its_record_then_its_write_once() {
    let mut e = Engine::one(claim("t1"), LeaseRules::default());
    let Some(Need::Load { tasks, .. }) = e.step().unwrap() else {
        panic!("the record first")
    };
    assert_eq!(tasks, vec![Id::parse("task", "t1").unwrap()]);
    e.supply(Supply::Loaded(vec![None])).unwrap();
    let Some(Need::Write(mut d)) = e.step().unwrap() else {
        panic!("then the write")
    };
    assert!(d.mints_fence());
    d.assign_fence(42);
    e.supply(Supply::Written(d)).unwrap();
    assert!(e.step().unwrap().is_none(), "nothing more");
    assert!(e.wrote());
    let (answers, keep) = e.finish();
    assert!(keep);
    let d = answers.into_iter().next().unwrap().into_one().unwrap();
    let Verdict::Commit(c) = &d.verdict else {
        panic!("a grant")
    };
    assert_eq!(c.record.lease.as_ref().unwrap().fence, 42);
}

/// A supply that does not answer the need is an error, never a panic
/// and never a decision.
#[test]
fn a_supply_for_another_need_is_refused() {
    let mut e = Engine::one(claim("t1"), LeaseRules::default());
    assert!(matches!(e.step().unwrap(), Some(Need::Load { .. })));
    e.supply(Supply::Page(Vec::new())).unwrap_err();
    // A load answered with the wrong number of records.
    e.supply(Supply::Loaded(vec![None, None])).unwrap();
    e.step().unwrap_err();
    let mut e = Engine::one(claim("t1"), LeaseRules::default());
    e.supply(Supply::Loaded(vec![None])).unwrap_err();
}

/// In a group, a refusal ends it, and the commit may keep nothing of it.
#[test]
fn a_group_with_a_refusal_keeps_nothing() {
    let stale = op(
        "t2",
        Request::Release {
            fence: 99,
            owner: Id::parse("owner", "w").unwrap(),
        },
    );
    let mut e = Engine::new(
        [Job::All(vec![claim("t1"), stale, claim("t3")])],
        LeaseRules::default(),
    );
    let mut writes = 0;
    while let Some(need) = e.step().unwrap() {
        match need {
            Need::Load { tasks, .. } => e.supply(Supply::Loaded(vec![None; tasks.len()])).unwrap(),
            Need::Write(mut d) => {
                writes += 1;
                // As a store does: the fence assigned when written.
                if d.mints_fence() {
                    d.assign_fence(writes);
                }
                e.supply(Supply::Written(d)).unwrap()
            }
            _ => panic!("no page for a group"),
        }
    }
    let (answers, keep) = e.finish();
    assert!(!keep);
    assert_eq!(writes, 1, "the claim before the refusal");
    let ds = answers.into_iter().next().unwrap().into_all().unwrap();
    assert_eq!(ds.len(), 2, "the group ends at its refusal");
    assert!(!matches!(ds[1].verdict, Verdict::Commit(_) | Verdict::Ack));
}

/// The first page of a queue's ready index a `next` reads is as large as
/// the grants it may make (so a batch of 16 reads one page of 16, not
/// pages of 2, 8 and 32), within the first and the largest page.
#[test]
fn a_batchs_first_read_of_the_ready_index_is_its_count() {
    for (count, first) in [(1, 2), (2, 2), (16, 16), (64, 64), (1000, 64)] {
        let query = crate::graph::NextQuery {
            taker: crate::graph::Taker::Owner {
                owner: Id::parse("owner", "w").unwrap(),
                ttl_ms: Some(1000),
                lock_delay_ms: None,
            },
            queues: vec![Id::parse("queue", "q").unwrap()],
            now: Timestamp(1_767_225_600_000),
            clock: Default::default(),
            count,
            within: None,
        };
        let mut e = Engine::new([Job::Next(query)], LeaseRules::default());
        let Some(Need::Policies { tasks, .. }) = e.step().unwrap() else {
            panic!("the queues' policies first")
        };
        assert_eq!(tasks, vec![Id::parse("queue", "queue:q").unwrap()]);
        e.supply(Supply::Loaded(vec![None])).unwrap();
        let Some(Need::Expired { .. }) = e.step().unwrap() else {
            panic!("then expired leases")
        };
        e.supply(Supply::Page(Vec::new())).unwrap();
        let Some(Need::Ready { limit, after, .. }) = e.step().unwrap() else {
            panic!("then the ready index")
        };
        assert!(after.is_none());
        assert_eq!(limit, first, "count {count}");
        // An empty index ends the scan with no grant.
        e.supply(Supply::Page(Vec::new())).unwrap();
        assert!(e.step().unwrap().is_none());
    }
}
