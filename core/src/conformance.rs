//! The conformance suite: the behaviour every backend must show, written
//! once. A backend wires it in with one line in a test file:
//!
//! ```ignore
//! baton_core::conformance_tests!(my_backend::TestHarness::default());
//! ```
//!
//! which expands to one named `#[test]` per case, each on a fresh store.
//! Races use real OS threads. Stores whose clock is injected get a manual
//! clock that the cases advance; stores that judge leases by their
//! engine's clock (etcd) get the system clock, and the cases wait.

// A test suite: a panic is how a case reports a failure.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::authority::{Authority, Reply};
use crate::error::Result;
use crate::id::{Id, TaskId};
use crate::manifest::Manifest;
use crate::memory::MemoryStore;
use crate::model::{Actor, Event, EventKind, State};
use crate::refusal::Refusal;
use crate::request::Preconditions;
use crate::store::{ClockKind, Store};
use crate::time::{Clock, ManualClock, SystemClock};
use async_trait::async_trait;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;

/// How the suite makes and reopens stores of one backend.
#[async_trait]
pub trait Harness: Send + Sync + 'static {
    type Store: Store + 'static;
    /// Where a store lives (a temporary directory, a key prefix).
    type Place: Send + Sync + 'static;

    /// Why this backend's cases cannot run on this machine (a service that
    /// is not installed), if they cannot: each case then prints the reason
    /// and passes without running. `None` by default.
    fn skip(&self) -> Option<String> {
        None
    }

    /// A new, empty place.
    async fn place(&self) -> Self::Place;

    /// Opens a store on `place`; called again after the previous store was
    /// dropped, to test what survives a reopen.
    async fn open(&self, place: &Self::Place) -> Result<Self::Store>;
}

/// The in-memory store's harness. A reopen shares the same memory.
#[derive(Debug, Default, Clone, Copy)]
pub struct MemoryHarness;

#[async_trait]
impl Harness for MemoryHarness {
    type Store = MemoryStore;
    type Place = MemoryStore;

    async fn place(&self) -> MemoryStore {
        MemoryStore::new()
    }

    async fn open(&self, place: &MemoryStore) -> Result<MemoryStore> {
        Ok(place.clone())
    }
}

enum TestClock {
    Manual(ManualClock),
    System,
}

/// One case's world: a runtime, a store on a fresh place, a clock.
#[allow(missing_debug_implementations)] // holds a runtime and a harness-defined place
pub struct Ctx<H: Harness> {
    harness: H,
    place: H::Place,
    auth: Option<Arc<Authority<H::Store>>>,
    clock: TestClock,
    rt: tokio::runtime::Runtime,
}

impl<H: Harness> Ctx<H> {
    pub fn new(harness: H) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .unwrap();
        let place = rt.block_on(harness.place());
        let store = rt
            .block_on(harness.open(&place))
            .expect("open a fresh store");
        let (clock, dyn_clock): (TestClock, Arc<dyn Clock>) = match store.capabilities().clock {
            ClockKind::Injected => {
                let c = ManualClock::default();
                (TestClock::Manual(c.clone()), Arc::new(c))
            }
            ClockKind::Engine => (TestClock::System, Arc::new(SystemClock)),
        };
        let auth = Some(Arc::new(Authority::new(store, dyn_clock)));
        Ctx {
            harness,
            place,
            auth,
            clock,
            rt,
        }
    }

    pub fn auth(&self) -> Arc<Authority<H::Store>> {
        self.auth.clone().expect("store is open")
    }

    /// Runs a future to completion on the case's runtime (from any thread).
    pub fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.rt.handle().block_on(f)
    }

    /// A short lease the store can honour; [`Ctx::expire`] waits past it.
    pub fn short_ttl_ms(&self) -> u64 {
        let min = self.auth().store().capabilities().min_ttl_ms;
        min.max(1000)
    }

    /// Lets `ms` milliseconds pass: moves the manual clock, or sleeps.
    pub fn advance_ms(&self, ms: u64) {
        match &self.clock {
            TestClock::Manual(c) => c.advance_ms(i64::try_from(ms).unwrap()),
            TestClock::System => std::thread::sleep(std::time::Duration::from_millis(ms)),
        }
    }

    /// Lets a lease of `ttl_ms` expire, with a margin for engine clocks.
    pub fn expire(&self, ttl_ms: u64) {
        match &self.clock {
            TestClock::Manual(_) => self.advance_ms(ttl_ms + 1),
            TestClock::System => self.advance_ms(ttl_ms + 1500),
        }
    }

    pub fn durable(&self) -> bool {
        self.auth().store().capabilities().durable
    }

    /// Drops the store and opens it again on the same place.
    pub fn reopen(&mut self) {
        let old = self.auth.take().expect("store is open");
        let clock: Arc<dyn Clock> = match &self.clock {
            TestClock::Manual(c) => Arc::new(c.clone()),
            TestClock::System => Arc::new(SystemClock),
        };
        let old = Arc::try_unwrap(old).expect("no other handle to the store is alive at reopen");
        drop(old);
        let store = self
            .rt
            .block_on(self.harness.open(&self.place))
            .expect("reopen the store");
        self.auth = Some(Arc::new(Authority::new(store, clock)));
    }

    /// Every event in the store, in order.
    pub fn all_events(&self) -> Vec<Event> {
        let a = self.auth();
        let mut out = Vec::new();
        let mut after = None;
        loop {
            let page = self
                .block_on(a.events(None, after.as_deref(), 1000))
                .unwrap();
            out.extend(page.items);
            match page.next {
                Some(n) => after = Some(n),
                None => return out,
            }
        }
    }

    pub fn task_events(&self, task: &TaskId) -> Vec<Event> {
        self.block_on(self.auth().events(Some(task), None, 10_000))
            .unwrap()
            .items
    }
}

/// Runs one case on a fresh store.
pub fn run<H: Harness>(harness: H, case: fn(&mut Ctx<H>)) {
    if let Some(why) = harness.skip() {
        eprintln!("skipped: {why}");
        return;
    }
    let mut ctx = Ctx::new(harness);
    case(&mut ctx);
}

/// Expands to one `#[test]` per conformance case for the given harness.
#[macro_export]
macro_rules! conformance_tests {
    ($harness:expr) => {
        $crate::conformance_tests!(@cases $harness;
            claim_race_single_winner,
            revision_race_exact_count,
            stale_fence_renew,
            stale_fence_heartbeat,
            stale_fence_start,
            stale_fence_succeed,
            stale_fence_task_fail,
            stale_fence_fail,
            stale_fence_complete,
            stale_fence_release,
            stale_fence_cancel,
            fences_strictly_increase,
            holder_reclaim_makes_old_fence_stale,
            idempotent_repeats,
            completed_never_granted_again,
            stalls_and_max_attempts,
            retried_task_counts_deadline_from_retry,
            reads_never_write,
            operator_requests_need_an_operator,
            notifications_in_outbox_until_acked,
            events_in_one_total_order,
            durable_across_reopen,
            declared_lifecycle,
            renew_after_expiry_refused,
            release_and_recover,
            list_by_derived_state,
            sweep_persists_derived_changes,
            verify_answers,
            manifest_supersede_and_conflict,
            redispatch_and_finalize,
            preconditions_must_be_proved,
            a_bad_request_leaves_the_store_serving
        );
    };
    (@cases $harness:expr; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::conformance::run($harness, $crate::conformance::cases::$case);
            }
        )*
    };
}

/// Small builders the cases share.
pub mod fixtures {
    use super::*;

    pub fn id(s: &str) -> Id {
        Id::parse("id", s).unwrap()
    }

    /// A manifest with `steps` steps, the given required evidence, and the
    /// given heartbeat timeout and max attempts.
    pub fn manifest(
        task: &str,
        steps: usize,
        evidence: &[&str],
        heartbeat_s: u64,
        max_attempts: u32,
    ) -> Manifest {
        let steps: Vec<String> = (1..=steps).map(|i| format!("step-{i}")).collect();
        Manifest::from_value(&json!({
            "task_id": task, "executor": "ci", "source_branch": "main", "source_oid": "0a1b2c",
            "target_version": "1.0", "steps": steps, "required_evidence": evidence,
            "heartbeat_timeout_seconds": heartbeat_s, "start_deadline_seconds": 600,
            "max_attempts": max_attempts,
        }))
        .unwrap()
    }

    pub fn hash(c: char) -> String {
        format!("sha256:{}", c.to_string().repeat(64))
    }

    pub fn refusal(r: &Reply) -> &Refusal {
        r.refusal()
            .unwrap_or_else(|| panic!("expected a refusal, got {r:?}"))
    }

    pub fn fence(r: &Reply) -> u64 {
        r.grant()
            .unwrap_or_else(|| panic!("expected a grant, got {r:?}"))
            .fence
    }
}

/// The cases. Each takes a fresh store.
pub mod cases {
    use super::fixtures::*;
    use super::*;

    /// 16 threads race to claim the same 500 tasks: exactly one grant each,
    /// every loser told who holds it, every fence unique.
    pub fn claim_race_single_winner<H: Harness>(ctx: &mut Ctx<H>) {
        const THREADS: usize = 16;
        const TASKS: usize = 500;
        let tasks: Vec<TaskId> = (0..TASKS).map(|i| id(&format!("race-{i:04}"))).collect();
        let results: Vec<Vec<(TaskId, Id, Reply)>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let ctx = &*ctx;
                    let tasks = &tasks;
                    s.spawn(move || {
                        let a = ctx.auth();
                        let owner = id(&format!("worker-{t}"));
                        // Each thread walks the tasks from its own offset, so the races differ.
                        (0..TASKS)
                            .map(|i| {
                                let task = &tasks[(i + t * 31) % TASKS];
                                let r = ctx.block_on(a.claim(task, &owner, Some(600_000))).unwrap();
                                (task.clone(), owner.clone(), r)
                            })
                            .collect()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut winners: HashMap<TaskId, (Id, u64)> = HashMap::new();
        let mut fences = BTreeSet::new();
        for (task, owner, r) in results.iter().flatten() {
            if let Some(g) = r.grant() {
                assert!(
                    winners
                        .insert(task.clone(), (owner.clone(), g.fence))
                        .is_none(),
                    "{task} granted twice"
                );
                assert!(fences.insert(g.fence), "fence {} issued twice", g.fence);
            }
        }
        assert_eq!(winners.len(), TASKS, "every task has exactly one winner");
        for (task, _owner, r) in results.iter().flatten() {
            if let Some(Refusal::Held { holder, fence, .. }) = r.refusal() {
                let (w, f) = &winners[task];
                assert_eq!((holder, fence), (w, f), "a loser learns who holds {task}");
            } else {
                assert!(
                    r.grant().is_some(),
                    "a claim either wins or is told `held`: {r:?}"
                );
            }
        }
        let a = ctx.auth();
        for (task, (owner, f)) in &winners {
            let h = ctx.block_on(a.holder(task)).unwrap().unwrap().unwrap();
            assert_eq!((&h.grant.owner, h.grant.fence, h.live), (owner, *f, true));
        }
    }

    /// 8 workers x 50 metadata updates guarded by `expected_revision`,
    /// retried on `precondition_failed`: exactly 400 revisions.
    pub fn revision_race_exact_count<H: Harness>(ctx: &mut Ctx<H>) {
        const WORKERS: usize = 8;
        const UPDATES: usize = 50;
        let a = ctx.auth();
        let task = id("counter");
        let first = ctx
            .block_on(a.claim(&task, &id("setup"), Some(600_000)))
            .unwrap();
        let start_rev = first.record().unwrap().revision;
        std::thread::scope(|s| {
            for w in 0..WORKERS {
                let ctx = &*ctx;
                let task = &task;
                s.spawn(move || {
                    let a = ctx.auth();
                    let me = id(&format!("w{w}"));
                    for u in 0..UPDATES {
                        let mut tries = 0;
                        loop {
                            tries += 1;
                            assert!(tries < 100_000, "update never landed");
                            let rev = ctx.block_on(a.get(task)).unwrap().unwrap().revision;
                            let pre = Preconditions {
                                expected_revision: Some(rev),
                                ..Default::default()
                            };
                            let meta = BTreeMap::from([(format!("w{w}"), json!(u))]);
                            match ctx.block_on(a.annotate(task, &me, meta, pre)).unwrap() {
                                Reply::Committed(r) => {
                                    assert_eq!(r.revision, rev + 1);
                                    break;
                                }
                                Reply::Refused(Refusal::PreconditionFailed { which, .. }) => {
                                    assert_eq!(which, "expected_revision")
                                }
                                other => panic!("unexpected {other:?}"),
                            }
                        }
                    }
                });
            }
        });
        let r = ctx.block_on(a.get(&task)).unwrap().unwrap();
        assert_eq!(r.revision, start_rev + (WORKERS * UPDATES) as u64);
        let annotated = ctx
            .task_events(&task)
            .iter()
            .filter(|e| e.kind == EventKind::Annotated)
            .count();
        assert_eq!(annotated, WORKERS * UPDATES);
        for w in 0..WORKERS {
            assert_eq!(r.metadata[&format!("w{w}")], json!(UPDATES - 1));
        }
    }

    /// Which request a stale-fence case sends.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Late {
        Renew,
        Heartbeat,
        Start,
        Succeed,
        TaskFail,
        Fail,
        Complete,
        Release,
        Cancel,
    }

    /// A worker's lease expires, another takes the task over, and the late
    /// worker's request with its old fence is refused `stale_fence`: one
    /// CONFLICT_REFUSED event, repeats counted on it, the record unchanged.
    fn stale_fence_after_takeover<H: Harness>(ctx: &mut Ctx<H>, late: Late) {
        let a = ctx.auth();
        let ttl = ctx.short_ttl_ms();
        let declared = matches!(
            late,
            Late::Heartbeat | Late::Start | Late::Succeed | Late::TaskFail
        );
        let task = id(&format!("stale-{late:?}"));
        let (old_a, new_b) = (id("worker-a"), id("worker-b"));
        let run = id("run-1");
        let (f1, f2) = if declared {
            let hb_s = ttl.div_ceil(1000);
            ctx.block_on(a.declare(manifest(task.as_str(), 1, &[], hb_s, 2)))
                .unwrap();
            ctx.block_on(a.register(&task, &run)).unwrap();
            let f1 = fence(
                &ctx.block_on(a.task_claim(&task, &run, &old_a, None))
                    .unwrap(),
            );
            if late != Late::Start {
                ctx.block_on(a.start(&task, &run, &old_a, f1)).unwrap();
            }
            ctx.expire(hb_s * 1000);
            let f2 = fence(
                &ctx.block_on(a.task_claim(&task, &run, &new_b, None))
                    .unwrap(),
            );
            (f1, f2)
        } else {
            let f1 = fence(&ctx.block_on(a.claim(&task, &old_a, Some(ttl))).unwrap());
            ctx.expire(ttl);
            let f2 = fence(&ctx.block_on(a.claim(&task, &new_b, Some(600_000))).unwrap());
            (f1, f2)
        };
        assert!(f2 > f1);
        let before = ctx.block_on(a.get(&task)).unwrap().unwrap();
        let events_before = ctx.task_events(&task).len();
        let send = || -> Reply {
            let r = match late {
                Late::Renew => ctx.block_on(a.renew(&task, &old_a, f1, None)),
                Late::Release => ctx.block_on(a.release(&task, &old_a, f1)),
                Late::Complete => ctx.block_on(a.complete(&task, &old_a, f1)),
                Late::Fail => ctx.block_on(a.fail(&task, &old_a, f1, Some(json!({"late": true})))),
                Late::Cancel => ctx.block_on(a.cancel(&task, &old_a, f1)),
                Late::Start => ctx.block_on(a.start(&task, &run, &old_a, f1)),
                Late::Heartbeat => ctx.block_on(a.heartbeat(&task, &run, &old_a, f1, 1, None)),
                Late::Succeed => ctx.block_on(a.succeed(&task, &run, &old_a, f1, BTreeMap::new())),
                Late::TaskFail => {
                    ctx.block_on(a.task_fail(&task, &run, &old_a, f1, json!({"late": true})))
                }
            };
            r.unwrap()
        };
        for round in 1..=3u64 {
            let r = send();
            assert_eq!(
                refusal(&r),
                &Refusal::StaleFence {
                    fence: f1,
                    current_fence: Some(f2)
                },
                "{late:?} with a stale fence"
            );
            let after = ctx.block_on(a.get(&task)).unwrap().unwrap();
            assert_eq!(after, before, "a refused request changes nothing");
            let events = ctx.task_events(&task);
            assert_eq!(
                events.len(),
                events_before + 1,
                "one CONFLICT_REFUSED event, repeats counted"
            );
            let last = events.last().unwrap();
            assert_eq!(last.kind, EventKind::ConflictRefused);
            assert_eq!(last.fence, Some(f1));
            assert_eq!(last.count, round);
        }
        let v = ctx.block_on(a.verify(&task, f1)).unwrap().unwrap();
        assert!(!v.current);
        assert_eq!(v.current_fence, Some(f2));
    }

    pub fn stale_fence_renew<H: Harness>(ctx: &mut Ctx<H>) {
        stale_fence_after_takeover(ctx, Late::Renew)
    }
    pub fn stale_fence_heartbeat<H: Harness>(ctx: &mut Ctx<H>) {
        stale_fence_after_takeover(ctx, Late::Heartbeat)
    }
    pub fn stale_fence_start<H: Harness>(ctx: &mut Ctx<H>) {
        stale_fence_after_takeover(ctx, Late::Start)
    }
    pub fn stale_fence_succeed<H: Harness>(ctx: &mut Ctx<H>) {
        stale_fence_after_takeover(ctx, Late::Succeed)
    }
    pub fn stale_fence_task_fail<H: Harness>(ctx: &mut Ctx<H>) {
        stale_fence_after_takeover(ctx, Late::TaskFail)
    }
    pub fn stale_fence_fail<H: Harness>(ctx: &mut Ctx<H>) {
        stale_fence_after_takeover(ctx, Late::Fail)
    }
    pub fn stale_fence_complete<H: Harness>(ctx: &mut Ctx<H>) {
        stale_fence_after_takeover(ctx, Late::Complete)
    }
    pub fn stale_fence_release<H: Harness>(ctx: &mut Ctx<H>) {
        stale_fence_after_takeover(ctx, Late::Release)
    }
    pub fn stale_fence_cancel<H: Harness>(ctx: &mut Ctx<H>) {
        stale_fence_after_takeover(ctx, Late::Cancel)
    }

    /// Fences grow strictly across tasks, re-claims, releases, completions
    /// and (for durable stores) a reopen.
    pub fn fences_strictly_increase<H: Harness>(ctx: &mut Ctx<H>) {
        let a = ctx.auth();
        let w = id("w");
        let mut fences = Vec::new();
        for i in 0..5 {
            let t = id(&format!("f-{i}"));
            let f = fence(&ctx.block_on(a.claim(&t, &w, None)).unwrap());
            fences.push(f);
            let f = fence(&ctx.block_on(a.claim(&t, &w, None)).unwrap());
            fences.push(f);
            ctx.block_on(a.release(&t, &w, f)).unwrap();
            let f = fence(&ctx.block_on(a.claim(&t, &id("other"), None)).unwrap());
            fences.push(f);
            assert!(
                !ctx.block_on(a.complete(&t, &id("other"), f))
                    .unwrap()
                    .is_refused()
            );
        }
        assert!(
            fences.windows(2).all(|w| w[0] < w[1]),
            "fences strictly increase: {fences:?}"
        );
        drop(a);
        ctx.reopen();
        let a = ctx.auth();
        let f = fence(
            &ctx.block_on(a.claim(&id("after-reopen"), &w, None))
                .unwrap(),
        );
        assert!(
            f > *fences.last().unwrap(),
            "a fence after reopen is higher than every earlier one"
        );
    }

    /// A holder that claims again gets a new fence and keeps its attempt;
    /// its earlier fence is stale from then on.
    pub fn holder_reclaim_makes_old_fence_stale<H: Harness>(ctx: &mut Ctx<H>) {
        let a = ctx.auth();
        let (t, w) = (id("reclaim"), id("w"));
        let g1 = ctx
            .block_on(a.claim(&t, &w, None))
            .unwrap()
            .grant()
            .unwrap();
        let g2 = ctx
            .block_on(a.claim(&t, &w, None))
            .unwrap()
            .grant()
            .unwrap();
        assert!(g2.fence > g1.fence);
        assert_eq!(g2.attempt, g1.attempt);
        let r = ctx.block_on(a.renew(&t, &w, g1.fence, None)).unwrap();
        assert_eq!(
            refusal(&r),
            &Refusal::StaleFence {
                fence: g1.fence,
                current_fence: Some(g2.fence)
            }
        );
        assert!(
            !ctx.block_on(a.verify(&t, g1.fence))
                .unwrap()
                .unwrap()
                .current
        );
        assert!(
            ctx.block_on(a.verify(&t, g2.fence))
                .unwrap()
                .unwrap()
                .current
        );
        assert!(
            !ctx.block_on(a.renew(&t, &w, g2.fence, None))
                .unwrap()
                .is_refused()
        );
    }

    /// The same terminal request by the same grant is acknowledged with
    /// the first outcome; a different late terminal is refused and audited.
    pub fn idempotent_repeats<H: Harness>(ctx: &mut Ctx<H>) {
        let a = ctx.auth();
        let w = id("w");
        // complete twice
        let t = id("done-twice");
        let f = fence(&ctx.block_on(a.claim(&t, &w, None)).unwrap());
        let first = ctx.block_on(a.complete(&t, &w, f)).unwrap();
        assert!(matches!(first, Reply::Committed(_)));
        let again = ctx.block_on(a.complete(&t, &w, f)).unwrap();
        assert!(again.is_idempotent(), "{again:?}");
        assert_eq!(again.record(), first.record());
        let late = ctx.block_on(a.fail(&t, &w, f, None)).unwrap();
        assert!(matches!(
            refusal(&late),
            Refusal::IllegalTransition {
                state: State::Succeeded,
                ..
            }
        ));
        assert_eq!(
            ctx.task_events(&t).last().unwrap().kind,
            EventKind::ConflictRefused
        );
        // fail twice: the first error stands
        let t = id("failed-twice");
        let f = fence(&ctx.block_on(a.claim(&t, &w, None)).unwrap());
        ctx.block_on(a.fail(&t, &w, f, Some(json!({"first": 1}))))
            .unwrap();
        let again = ctx
            .block_on(a.fail(&t, &w, f, Some(json!({"second": 2}))))
            .unwrap();
        assert!(again.is_idempotent());
        assert_eq!(again.record().unwrap().error, Some(json!({"first": 1})));
        // cancel twice
        let t = id("cancel-twice");
        let f = fence(&ctx.block_on(a.claim(&t, &w, None)).unwrap());
        assert!(matches!(
            ctx.block_on(a.cancel(&t, &w, f)).unwrap(),
            Reply::Committed(_)
        ));
        assert!(ctx.block_on(a.cancel(&t, &w, f)).unwrap().is_idempotent());
        assert!(
            ctx.block_on(a.cancel_as(&t, Actor::Operator(id("op"))))
                .unwrap()
                .is_idempotent()
        );
        // succeed twice: evidence is immutable once recorded
        let t = id("succeed-twice");
        let run = id("run");
        ctx.block_on(a.declare(manifest(t.as_str(), 1, &["log"], 60, 1)))
            .unwrap();
        ctx.block_on(a.register(&t, &run)).unwrap();
        let f = fence(&ctx.block_on(a.task_claim(&t, &run, &w, None)).unwrap());
        ctx.block_on(a.start(&t, &run, &w, f)).unwrap();
        let ev1 = BTreeMap::from([("log".to_owned(), hash('a'))]);
        let ev2 = BTreeMap::from([("log".to_owned(), hash('b'))]);
        assert!(matches!(
            ctx.block_on(a.succeed(&t, &run, &w, f, ev1.clone()))
                .unwrap(),
            Reply::Committed(_)
        ));
        let again = ctx
            .block_on(a.succeed(&t, &run, &w, f, ev2.clone()))
            .unwrap();
        assert!(again.is_idempotent());
        assert_eq!(again.record().unwrap().evidence, ev1);
        assert_eq!(again.evidence_ignored(&ev2), vec!["log".to_owned()]);
        assert!(again.evidence_ignored(&ev1).is_empty());
        assert_eq!(ctx.block_on(a.get(&t)).unwrap().unwrap().evidence, ev1);
    }

    /// A request the decision finds invalid inside the store's commit (a
    /// lease that would end past what a timestamp holds) is refused as
    /// invalid, writes nothing, and the same store handle goes on serving.
    pub fn a_bad_request_leaves_the_store_serving<H: Harness>(ctx: &mut Ctx<H>) {
        let a = ctx.auth();
        let (t, w) = (id("end-of-time"), id("w"));
        if let TestClock::Manual(c) = &ctx.clock {
            let now = c.now();
            c.set(crate::time::Timestamp(
                crate::time::Timestamp::MAX.as_millis() - 1000,
            ));
            let e = ctx.block_on(a.claim(&t, &w, Some(60_000))).unwrap_err();
            assert_eq!(e.kind, crate::error::ErrorKind::Invalid, "{e}");
            assert_eq!(e.field.as_deref(), Some("ttl"), "{e}");
            c.set(now);
        }
        let huge = Manifest::from_value(&json!({
            "task_id": "huge", "executor": "ci", "source_branch": "main", "source_oid": "0",
            "target_version": "1", "steps": ["a"], "heartbeat_timeout_seconds": 300_000_000_000u64,
        }))
        .unwrap_err();
        assert_eq!(huge.field.as_deref(), Some("heartbeat_timeout_seconds"));
        assert!(
            ctx.block_on(a.get(&t)).unwrap().is_none(),
            "nothing was written"
        );
        for i in 0..3 {
            let g = ctx
                .block_on(a.claim(&id(&format!("after-{i}")), &w, None))
                .unwrap();
            assert!(g.grant().is_some(), "the store still grants: {g:?}");
        }
    }

    /// A SUCCEEDED task is never granted again: not by claim, recover or
    /// redispatch, not after its lease would have expired.
    pub fn completed_never_granted_again<H: Harness>(ctx: &mut Ctx<H>) {
        let a = ctx.auth();
        let (t, w, other) = (id("final"), id("w"), id("other"));
        let ttl = ctx.short_ttl_ms();
        let f = fence(&ctx.block_on(a.claim(&t, &w, Some(ttl))).unwrap());
        ctx.block_on(a.complete(&t, &w, f)).unwrap();
        ctx.expire(ttl);
        for owner in [&w, &other] {
            assert_eq!(
                refusal(&ctx.block_on(a.claim(&t, owner, None)).unwrap()),
                &Refusal::Completed
            );
            assert_eq!(
                refusal(&ctx.block_on(a.recover(&t, owner, None)).unwrap()),
                &Refusal::Completed
            );
        }
        let r = ctx
            .block_on(a.redispatch(&t, Actor::Operator(id("op")), 2))
            .unwrap();
        assert_eq!(refusal(&r), &Refusal::Completed);
        let r = ctx
            .block_on(a.finalize(&t, Actor::Operator(id("op")), None))
            .unwrap();
        assert_eq!(refusal(&r), &Refusal::Completed);
        let rec = ctx.block_on(a.get(&t)).unwrap().unwrap();
        assert_eq!(
            (rec.state, rec.current_fence()),
            (State::Succeeded, Some(f))
        );
    }

    /// Bare tasks are reclaimable after any number of stalls; a declared
    /// task stalls for good after `max_attempts` (default 1).
    pub fn stalls_and_max_attempts<H: Harness>(ctx: &mut Ctx<H>) {
        let a = ctx.auth();
        let ttl = ctx.short_ttl_ms();
        let bare = id("bare-stalls");
        let mut last = 0;
        for round in 1..=4u64 {
            let g = ctx
                .block_on(a.claim(&bare, &id(&format!("w{round}")), Some(ttl)))
                .unwrap()
                .grant()
                .unwrap();
            assert_eq!(g.attempt, round);
            assert!(g.fence > last);
            last = g.fence;
            ctx.expire(ttl);
            let rec = ctx.block_on(a.get(&bare)).unwrap().unwrap();
            assert_eq!((rec.state, rec.stalls), (State::Registered, round as u32));
        }
        let hb_s = ttl.div_ceil(1000);
        let run = id("run");
        // Default max_attempts = 1: one stall and the task is STALLED.
        let once = id("declared-once");
        ctx.block_on(a.declare(manifest(once.as_str(), 1, &[], hb_s, 1)))
            .unwrap();
        ctx.block_on(a.register(&once, &run)).unwrap();
        ctx.block_on(a.task_claim(&once, &run, &id("w1"), None))
            .unwrap();
        ctx.expire(hb_s * 1000);
        assert_eq!(
            ctx.block_on(a.get(&once)).unwrap().unwrap().state,
            State::Stalled
        );
        let r = ctx
            .block_on(a.task_claim(&once, &run, &id("w2"), None))
            .unwrap();
        assert!(matches!(
            refusal(&r),
            Refusal::IllegalTransition {
                state: State::Stalled,
                ..
            }
        ));
        let stalled: Vec<_> = ctx
            .task_events(&once)
            .into_iter()
            .filter(|e| e.kind == EventKind::Stalled)
            .collect();
        assert_eq!(
            stalled.len(),
            1,
            "the stall was persisted once, by the next write"
        );
        // max_attempts = 3: two stalls are survived, the third ends it.
        let thrice = id("declared-thrice");
        ctx.block_on(a.declare(manifest(thrice.as_str(), 1, &[], hb_s, 3)))
            .unwrap();
        ctx.block_on(a.register(&thrice, &run)).unwrap();
        for round in 1..=3u32 {
            let g = ctx
                .block_on(a.task_claim(&thrice, &run, &id("w"), None))
                .unwrap()
                .grant()
                .unwrap();
            assert_eq!(g.attempt, u64::from(round));
            ctx.expire(hb_s * 1000);
            let rec = ctx.block_on(a.get(&thrice)).unwrap().unwrap();
            let want = if round < 3 {
                State::Registered
            } else {
                State::Stalled
            };
            assert_eq!((rec.state, rec.stalls), (want, round));
        }
    }

    /// A retried task's start deadline counts from the retry, so it does not
    /// fall straight back to NOT_STARTED.
    pub fn retried_task_counts_deadline_from_retry<H: Harness>(ctx: &mut Ctx<H>) {
        let a = ctx.auth();
        let t = id("retry-me");
        let deadline_s = ctx.short_ttl_ms().div_ceil(1000) + 1;
        let mut m = manifest(t.as_str(), 1, &[], 60, 1);
        m.start_deadline_seconds = deadline_s;
        ctx.block_on(a.declare(m)).unwrap();
        ctx.block_on(a.register(&t, &id("run-1"))).unwrap();
        ctx.expire(deadline_s * 1000);
        assert_eq!(
            ctx.block_on(a.get(&t)).unwrap().unwrap().state,
            State::NotStarted
        );
        let r = ctx.block_on(a.retry(&t, &id("run-2"))).unwrap();
        let rec = r.record().unwrap();
        assert_eq!(
            (rec.state, rec.run_id.clone()),
            (State::Registered, Some(id("run-2")))
        );
        assert_eq!(
            ctx.block_on(a.get(&t)).unwrap().unwrap().state,
            State::Registered
        );
        assert!(
            ctx.task_events(&t)
                .iter()
                .any(|e| e.kind == EventKind::Retried)
        );
        let r = ctx.block_on(a.retry(&t, &id("run-3"))).unwrap();
        assert!(matches!(
            refusal(&r),
            Refusal::IllegalTransition {
                state: State::Registered,
                ..
            }
        ));
        let g = ctx
            .block_on(a.task_claim(&t, &id("run-2"), &id("w"), None))
            .unwrap();
        assert!(g.grant().is_some());
    }

    /// holder, verify, get, list, gate, events and the outbox read nothing
    /// into the store: not even the derived expiry of a lease.
    pub fn reads_never_write<H: Harness>(ctx: &mut Ctx<H>) {
        let a = ctx.auth();
        let ttl = ctx.short_ttl_ms();
        let (t, w) = (id("read-only"), id("w"));
        let f = fence(&ctx.block_on(a.claim(&t, &w, Some(ttl))).unwrap());
        let d = id("read-only-declared");
        ctx.block_on(a.declare(manifest(d.as_str(), 1, &[], 60, 1)))
            .unwrap();
        ctx.expire(ttl);
        let events_before = ctx.all_events();
        let pending_before = ctx.block_on(a.pending(None, 1000)).unwrap().items;
        let stored_before = ctx
            .block_on(a.store().read(&t, a.now()))
            .unwrap()
            .unwrap()
            .record;
        for _ in 0..3 {
            let h = ctx.block_on(a.holder(&t)).unwrap().unwrap().unwrap();
            assert!(!h.live, "an expired lease shows as such");
            assert_eq!(
                ctx.block_on(a.get(&t)).unwrap().unwrap().state,
                State::Registered
            );
            assert!(!ctx.block_on(a.verify(&t, f)).unwrap().unwrap().current);
            ctx.block_on(a.list(Some(State::Registered), None, 100))
                .unwrap();
            ctx.block_on(a.list(None, None, 100)).unwrap();
            ctx.block_on(a.gate(&d)).unwrap().unwrap();
            ctx.block_on(a.events(Some(&t), None, 100)).unwrap();
            ctx.block_on(a.pending(None, 100)).unwrap();
            ctx.block_on(a.sweep(true)).unwrap();
        }
        assert_eq!(ctx.all_events(), events_before);
        assert_eq!(
            ctx.block_on(a.pending(None, 1000)).unwrap().items,
            pending_before
        );
        let stored_after = ctx
            .block_on(a.store().read(&t, a.now()))
            .unwrap()
            .unwrap()
            .record;
        assert_eq!(stored_after, stored_before);
        assert_eq!(
            stored_after.state,
            State::Claimed,
            "the stored record still says CLAIMED"
        );
    }

    /// redispatch, finalize and an operator cancel refuse a non-operator.
    pub fn operator_requests_need_an_operator<H: Harness>(ctx: &mut Ctx<H>) {
        let a = ctx.auth();
        let (t, w) = (id("ops"), id("w"));
        let f = fence(&ctx.block_on(a.claim(&t, &w, None)).unwrap());
        ctx.block_on(a.fail(&t, &w, f, None)).unwrap();
        let before = ctx.block_on(a.get(&t)).unwrap().unwrap();
        let worker = Actor::Worker(w.clone());
        let r = ctx.block_on(a.redispatch(&t, worker.clone(), 2)).unwrap();
        assert!(matches!(refusal(&r), Refusal::OperatorRequired { .. }));
        let r = ctx.block_on(a.finalize(&t, worker.clone(), None)).unwrap();
        assert!(matches!(refusal(&r), Refusal::OperatorRequired { .. }));
        let r = ctx.block_on(a.cancel_as(&t, worker)).unwrap();
        assert!(matches!(refusal(&r), Refusal::OperatorRequired { .. }));
        assert_eq!(ctx.block_on(a.get(&t)).unwrap().unwrap(), before);
        let r = ctx
            .block_on(a.redispatch(&t, Actor::Operator(id("alice")), 2))
            .unwrap();
        assert_eq!(r.record().unwrap().state, State::Registered);
    }

    /// Notifications are written with their transition, returned until
    /// acknowledged, with stable intent ids; acknowledging is idempotent.
    pub fn notifications_in_outbox_until_acked<H: Harness>(ctx: &mut Ctx<H>) {
        let a = ctx.auth();
        let (t, w, run) = (id("notify"), id("w"), id("run"));
        ctx.block_on(a.declare(manifest(t.as_str(), 1, &[], 60, 1)))
            .unwrap();
        ctx.block_on(a.register(&t, &run)).unwrap();
        let f = fence(&ctx.block_on(a.task_claim(&t, &run, &w, None)).unwrap());
        assert!(
            ctx.block_on(a.pending(None, 100)).unwrap().items.is_empty(),
            "only STARTED, SUCCEEDED, FAILED by default"
        );
        let started = ctx.block_on(a.start(&t, &run, &w, f)).unwrap();
        let p = ctx.block_on(a.pending(None, 100)).unwrap().items;
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].kind, EventKind::Started);
        assert_eq!(
            p[0].payload["revision"],
            json!(started.record().unwrap().revision),
            "written in the transition's commit"
        );
        assert_eq!(p[0].payload["fence"], json!(f));
        ctx.block_on(a.heartbeat(&t, &run, &w, f, 1, None)).unwrap();
        let after_heartbeat = ctx.block_on(a.pending(None, 100)).unwrap().items;
        assert_eq!(after_heartbeat.len(), 1, "a heartbeat notifies nothing");
        ctx.block_on(a.succeed(&t, &run, &w, f, BTreeMap::new()))
            .unwrap();
        let p1 = ctx.block_on(a.pending(None, 100)).unwrap().items;
        let p2 = ctx.block_on(a.pending(None, 100)).unwrap().items;
        assert_eq!(
            p1, p2,
            "delivered again, with the same intent ids, until acknowledged"
        );
        assert_eq!(
            p1.iter().map(|n| n.kind).collect::<Vec<_>>(),
            [EventKind::Started, EventKind::Succeeded]
        );
        assert_ne!(p1[0].intent_id, p1[1].intent_id);
        assert_eq!(ctx.block_on(a.ack(&[p1[0].intent_id.clone()])).unwrap(), 1);
        let unknown = "00000000-0000-0000-0000-000000000000".to_owned();
        assert_eq!(
            ctx.block_on(a.ack(&[p1[0].intent_id.clone(), unknown]))
                .unwrap(),
            0
        );
        // Only intent ids are acknowledged: anything else is bad input, and
        // nothing in the batch is acknowledged.
        let e = ctx
            .block_on(a.ack(&[p1[1].intent_id.clone(), "t/76696374696d".to_owned()]))
            .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("intent_id"), "{e}");
        let p3 = ctx.block_on(a.pending(None, 100)).unwrap().items;
        assert_eq!(p3, vec![p1[1].clone()]);
        // Paging by cursor.
        let first = ctx.block_on(a.pending(None, 1)).unwrap();
        assert_eq!(first.items.len(), 1);
        let rest = ctx.block_on(a.pending(first.next.as_deref(), 10)).unwrap();
        assert!(rest.items.is_empty());
        ctx.block_on(a.ack(&[p1[1].intent_id.clone()])).unwrap();
        assert!(ctx.block_on(a.pending(None, 100)).unwrap().items.is_empty());
        // Bare tasks never notify.
        let f = fence(&ctx.block_on(a.claim(&id("bare"), &w, None)).unwrap());
        ctx.block_on(a.complete(&id("bare"), &w, f)).unwrap();
        assert!(ctx.block_on(a.pending(None, 100)).unwrap().items.is_empty());
    }

    /// All events of the store share one strictly increasing sequence.
    pub fn events_in_one_total_order<H: Harness>(ctx: &mut Ctx<H>) {
        let a = ctx.auth();
        let w = id("w");
        let tasks: Vec<TaskId> = (0..4).map(|i| id(&format!("ev-{i}"))).collect();
        let mut fences = HashMap::new();
        for t in &tasks {
            fences.insert(
                t.clone(),
                fence(&ctx.block_on(a.claim(t, &w, None)).unwrap()),
            );
        }
        for t in tasks.iter().rev() {
            ctx.block_on(a.renew(t, &w, fences[t], None)).unwrap();
        }
        for t in &tasks {
            ctx.block_on(a.complete(t, &w, fences[t])).unwrap();
        }
        let all = ctx.all_events();
        assert_eq!(all.len(), 12);
        assert!(all.windows(2).all(|p| p[0].seq < p[1].seq));
        let kinds: Vec<_> = all.iter().map(|e| e.kind).collect();
        assert_eq!(&kinds[..4], &[EventKind::Claimed; 4]);
        assert_eq!(
            all[4].task, tasks[3],
            "renewals in the order they were made"
        );
        for t in &tasks {
            let mine: Vec<_> = all.iter().filter(|e| &e.task == t).cloned().collect();
            assert_eq!(ctx.task_events(t), mine);
        }
        // Paging over the whole log returns each event once.
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let page = ctx.block_on(a.events(None, after.as_deref(), 5)).unwrap();
            seen.extend(page.items.iter().map(|e| e.seq));
            match page.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        assert_eq!(seen, all.iter().map(|e| e.seq).collect::<Vec<_>>());
    }

    /// Everything committed is there after a reopen (durable stores).
    pub fn durable_across_reopen<H: Harness>(ctx: &mut Ctx<H>) {
        let a = ctx.auth();
        let (t, d, w, run) = (id("keep"), id("keep-declared"), id("w"), id("run"));
        let f = fence(&ctx.block_on(a.claim(&t, &w, Some(600_000))).unwrap());
        ctx.block_on(a.declare(manifest(d.as_str(), 1, &["log"], 60, 1)))
            .unwrap();
        ctx.block_on(a.register(&d, &run)).unwrap();
        let fd = fence(&ctx.block_on(a.task_claim(&d, &run, &w, None)).unwrap());
        ctx.block_on(a.start(&d, &run, &w, fd)).unwrap();
        ctx.block_on(a.succeed(
            &d,
            &run,
            &w,
            fd,
            BTreeMap::from([("log".to_owned(), hash('c'))]),
        ))
        .unwrap();
        let rec_t = ctx.block_on(a.get(&t)).unwrap().unwrap();
        let rec_d = ctx.block_on(a.get(&d)).unwrap().unwrap();
        let events = ctx.all_events();
        let pending = ctx.block_on(a.pending(None, 100)).unwrap().items;
        drop(a);
        ctx.reopen();
        let a = ctx.auth();
        assert_eq!(ctx.block_on(a.get(&t)).unwrap().unwrap(), rec_t);
        assert_eq!(ctx.block_on(a.get(&d)).unwrap().unwrap(), rec_d);
        assert_eq!(ctx.all_events(), events);
        assert_eq!(ctx.block_on(a.pending(None, 100)).unwrap().items, pending);
        let h = ctx.block_on(a.holder(&t)).unwrap().unwrap().unwrap();
        assert_eq!(
            (h.grant.fence, h.live),
            (f, true),
            "a live grant survives a reopen"
        );
        let r = ctx.block_on(a.claim(&t, &id("intruder"), None)).unwrap();
        assert!(matches!(refusal(&r), Refusal::Held { .. }));
    }

    /// declare, register, claim, start, heartbeat, succeed and the gate,
    /// with every refusal along the way.
    pub fn declared_lifecycle<H: Harness>(ctx: &mut Ctx<H>) {
        let a = ctx.auth();
        let (t, w, run) = (id("life"), id("ci-7"), id("run-1"));
        let m = manifest(t.as_str(), 3, &["build.log", "report"], 60, 1);
        let r = ctx.block_on(a.declare(m.clone())).unwrap();
        assert_eq!(r.record().unwrap().state, State::Declared);
        assert!(ctx.block_on(a.declare(m)).unwrap().is_idempotent());
        let r = ctx.block_on(a.claim(&t, &w, None)).unwrap();
        assert!(matches!(
            refusal(&r),
            Refusal::IllegalTransition {
                request: crate::RequestKind::Claim,
                ..
            }
        ));
        let r = ctx.block_on(a.task_claim(&t, &run, &w, None)).unwrap();
        assert!(matches!(
            refusal(&r),
            Refusal::IllegalTransition {
                state: State::Declared,
                ..
            }
        ));
        ctx.block_on(a.register(&t, &run)).unwrap();
        let r = ctx
            .block_on(a.task_claim(&t, &id("run-x"), &w, None))
            .unwrap();
        assert!(
            matches!(refusal(&r), Refusal::PreconditionFailed { which, .. } if which == "run_id")
        );
        let e = ctx
            .block_on(a.task_claim(&t, &run, &w, Some(61_000)))
            .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("ttl"));
        let g = ctx
            .block_on(a.task_claim(&t, &run, &w, None))
            .unwrap()
            .grant()
            .unwrap();
        assert_eq!(
            g.expiry,
            g.claimed_at.plus_ms(60_000),
            "the TTL defaults to the heartbeat timeout"
        );
        let f = g.fence;
        let r = ctx
            .block_on(a.task_claim(&t, &run, &id("ci-8"), None))
            .unwrap();
        assert!(matches!(refusal(&r), Refusal::Held { .. }));
        let r = ctx.block_on(a.heartbeat(&t, &run, &w, f, 1, None)).unwrap();
        assert!(matches!(
            refusal(&r),
            Refusal::IllegalTransition {
                state: State::Claimed,
                ..
            }
        ));
        let r = ctx.block_on(a.start(&t, &run, &w, f)).unwrap();
        assert_eq!(
            (r.record().unwrap().state, r.record().unwrap().current_step),
            (State::Running, 1)
        );
        let r = ctx.block_on(a.heartbeat(&t, &run, &w, f, 2, None)).unwrap();
        assert_eq!(r.record().unwrap().current_step, 2);
        let e = ctx
            .block_on(a.heartbeat(&t, &run, &w, f, 1, None))
            .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("step"), "a step never goes back");
        let e = ctx
            .block_on(a.heartbeat(&t, &run, &w, f, 4, None))
            .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("step"), "nor past the count");
        let ev = BTreeMap::from([
            ("build.log".to_owned(), hash('1')),
            ("report".to_owned(), hash('2')),
        ]);
        let r = ctx
            .block_on(a.succeed(&t, &run, &w, f, ev.clone()))
            .unwrap();
        assert_eq!(
            refusal(&r),
            &Refusal::StepsIncomplete {
                current_step: 2,
                total_steps: 3
            }
        );
        ctx.block_on(a.heartbeat(&t, &run, &w, f, 3, None)).unwrap();
        let gate = ctx.block_on(a.gate(&t)).unwrap().unwrap();
        assert!(!gate.passed && gate.release_blocking);
        let partial = BTreeMap::from([("report".to_owned(), hash('2'))]);
        let r = ctx.block_on(a.succeed(&t, &run, &w, f, partial)).unwrap();
        assert_eq!(
            refusal(&r),
            &Refusal::EvidenceMissing {
                keys: vec!["build.log".to_owned()]
            }
        );
        let mut extra = ev.clone();
        extra.insert("coverage".to_owned(), hash('3'));
        let r = ctx
            .block_on(a.succeed(&t, &run, &w, f, extra.clone()))
            .unwrap();
        assert_eq!(r.record().unwrap().state, State::Succeeded);
        let gate = ctx.block_on(a.gate(&t)).unwrap().unwrap();
        assert!(gate.passed && !gate.release_blocking);
        assert_eq!(
            (gate.current_step, gate.total_steps, gate.evidence),
            (3, 3, extra)
        );
        let kinds: Vec<EventKind> = ctx.task_events(&t).iter().map(|e| e.kind).collect();
        use EventKind::*;
        assert_eq!(
            kinds,
            [
                Declared, Registered, Claimed, Started, Heartbeat, Heartbeat, Succeeded
            ]
        );
        // task fail from CLAIMED, on another task
        let t2 = id("life-fail");
        ctx.block_on(a.declare(manifest(t2.as_str(), 1, &[], 60, 1)))
            .unwrap();
        ctx.block_on(a.register(&t2, &run)).unwrap();
        let f2 = fence(&ctx.block_on(a.task_claim(&t2, &run, &w, None)).unwrap());
        let r = ctx
            .block_on(a.task_fail(&t2, &run, &w, f2, json!({"exit": 2})))
            .unwrap();
        assert_eq!(r.record().unwrap().state, State::Failed);
        assert_eq!(r.record().unwrap().error, Some(json!({"exit": 2})));
        let gate = ctx.block_on(a.gate(&t2)).unwrap().unwrap();
        assert!(!gate.passed);
        assert!(matches!(
            ctx.block_on(a.gate(&id("nobody"))).unwrap(),
            Err(Refusal::NotFound)
        ));
    }

    /// Renew after expiry is refused even if nobody took the task.
    pub fn renew_after_expiry_refused<H: Harness>(ctx: &mut Ctx<H>) {
        let a = ctx.auth();
        let ttl = ctx.short_ttl_ms();
        let (t, w) = (id("late-renew"), id("w"));
        let f = fence(&ctx.block_on(a.claim(&t, &w, Some(ttl))).unwrap());
        assert!(
            !ctx.block_on(a.renew(&t, &w, f, Some(ttl)))
                .unwrap()
                .is_refused()
        );
        ctx.expire(ttl);
        let r = ctx.block_on(a.renew(&t, &w, f, None)).unwrap();
        assert!(matches!(refusal(&r), Refusal::LeaseExpired { fence, .. } if *fence == f));
        let r = ctx.block_on(a.complete(&t, &w, f)).unwrap();
        assert!(
            matches!(refusal(&r), Refusal::LeaseExpired { .. }),
            "nor completed late"
        );
        assert_eq!(
            ctx.block_on(a.get(&t)).unwrap().unwrap().state,
            State::Registered
        );
        let r = ctx.block_on(a.renew(&id("nobody"), &w, f, None)).unwrap();
        assert_eq!(refusal(&r), &Refusal::NotFound);
    }

    /// release returns the task without charging a stall; recover takes over
    /// only an expired lease.
    pub fn release_and_recover<H: Harness>(ctx: &mut Ctx<H>) {
        let a = ctx.auth();
        let ttl = ctx.short_ttl_ms();
        let (t, w, x) = (id("rr"), id("w"), id("x"));
        let g = ctx
            .block_on(a.claim(&t, &w, Some(ttl)))
            .unwrap()
            .grant()
            .unwrap();
        let r = ctx.block_on(a.release(&t, &x, g.fence)).unwrap();
        assert!(
            matches!(refusal(&r), Refusal::NotHolder { .. }),
            "only the holder releases"
        );
        let r = ctx.block_on(a.release(&t, &w, g.fence)).unwrap();
        let rec = r.record().unwrap();
        assert_eq!((rec.state, rec.stalls), (State::Registered, 0));
        let g2 = ctx
            .block_on(a.claim(&t, &x, Some(ttl)))
            .unwrap()
            .grant()
            .unwrap();
        assert_eq!(g2.attempt, g.attempt + 1);
        let r = ctx.block_on(a.recover(&t, &w, None)).unwrap();
        assert!(matches!(refusal(&r), Refusal::LeaseLive { holder, .. } if holder == &x));
        ctx.expire(ttl);
        let g3 = ctx
            .block_on(a.recover(&t, &w, Some(ttl)))
            .unwrap()
            .grant()
            .unwrap();
        assert!(g3.fence > g2.fence);
        assert_eq!((g3.owner.clone(), g3.attempt), (w.clone(), g2.attempt + 1));
        let r = ctx.block_on(a.complete(&t, &x, g2.fence)).unwrap();
        assert!(
            matches!(refusal(&r), Refusal::StaleFence { .. }),
            "the late worker cannot complete"
        );
        assert!(
            ctx.task_events(&t)
                .iter()
                .any(|e| e.kind == EventKind::Recovered)
        );
    }

    /// list filters on derived state and pages by task id.
    pub fn list_by_derived_state<H: Harness>(ctx: &mut Ctx<H>) {
        let a = ctx.auth();
        let ttl = ctx.short_ttl_ms();
        let w = id("w");
        for i in 0..30 {
            let t = id(&format!("l-{i:02}"));
            let long = i % 3 != 0;
            let f = fence(
                &ctx.block_on(a.claim(&t, &w, Some(if long { 600_000 } else { ttl })))
                    .unwrap(),
            );
            if i % 5 == 1 {
                ctx.block_on(a.complete(&t, &w, f)).unwrap();
            }
        }
        ctx.expire(ttl);
        let all = |state: Option<State>, page: usize| -> Vec<String> {
            let mut out = Vec::new();
            let mut after: Option<String> = None;
            loop {
                let p = ctx.block_on(a.list(state, after.as_deref(), page)).unwrap();
                assert!(p.items.len() <= page);
                out.extend(p.items.iter().map(|r| {
                    if let Some(s) = state {
                        assert_eq!(r.state, s);
                    }
                    r.task.to_string()
                }));
                match p.next {
                    Some(n) => after = Some(n),
                    None => return out,
                }
            }
        };
        let expired: Vec<String> = (0..30)
            .filter(|i| i % 3 == 0 && i % 5 != 1)
            .map(|i| format!("l-{i:02}"))
            .collect();
        let done: Vec<String> = (0..30)
            .filter(|i| i % 5 == 1)
            .map(|i| format!("l-{i:02}"))
            .collect();
        let held: Vec<String> = (0..30)
            .filter(|i| i % 3 != 0 && i % 5 != 1)
            .map(|i| format!("l-{i:02}"))
            .collect();
        assert_eq!(all(Some(State::Registered), 4), expired);
        assert_eq!(all(Some(State::Succeeded), 4), done);
        assert_eq!(all(Some(State::Claimed), 4), held);
        assert_eq!(all(Some(State::Claimed), 1000), held);
        assert_eq!(all(None, 7).len(), 30);
        assert!(all(Some(State::Running), 10).is_empty());
    }

    /// sweep persists what time decided, with its events and notifications,
    /// and then has nothing left to do.
    pub fn sweep_persists_derived_changes<H: Harness>(ctx: &mut Ctx<H>) {
        let a = ctx.auth();
        let ttl = ctx.short_ttl_ms();
        let deadline_s = ttl.div_ceil(1000);
        for i in 0..3 {
            let t = format!("sw-{i}");
            let mut m = manifest(&t, 1, &[], 60, 1);
            m.start_deadline_seconds = deadline_s;
            m.notification_events = [EventKind::NotStarted].into();
            ctx.block_on(a.declare(m)).unwrap();
        }
        let w = id("w");
        ctx.block_on(a.claim(&id("sw-bare"), &w, Some(ttl)))
            .unwrap();
        ctx.expire(deadline_s * 1000);
        let planned = ctx.block_on(a.sweep(true)).unwrap();
        assert_eq!(planned.len(), 4);
        assert!(
            ctx.block_on(a.pending(None, 100)).unwrap().items.is_empty(),
            "a dry run writes nothing"
        );
        let swept = ctx.block_on(a.sweep(false)).unwrap();
        assert_eq!(swept, planned);
        let stored = ctx
            .block_on(a.store().read(&id("sw-0"), a.now()))
            .unwrap()
            .unwrap()
            .record;
        assert_eq!(stored.state, State::NotStarted);
        let pending = ctx.block_on(a.pending(None, 100)).unwrap().items;
        assert_eq!(pending.len(), 3);
        assert!(pending.iter().all(|n| n.kind == EventKind::NotStarted));
        assert!(ctx.block_on(a.sweep(false)).unwrap().is_empty());
    }

    /// verify is true only for the fence of a live lease of a task that is not terminal.
    pub fn verify_answers<H: Harness>(ctx: &mut Ctx<H>) {
        let a = ctx.auth();
        let ttl = ctx.short_ttl_ms();
        let (t, w) = (id("v"), id("w"));
        let f = fence(&ctx.block_on(a.claim(&t, &w, Some(ttl))).unwrap());
        let v = ctx.block_on(a.verify(&t, f)).unwrap().unwrap();
        assert!(v.current && v.live);
        assert_eq!((v.state, v.current_fence), (State::Claimed, Some(f)));
        assert!(
            !ctx.block_on(a.verify(&t, f + 1000))
                .unwrap()
                .unwrap()
                .current
        );
        ctx.expire(ttl);
        let v = ctx.block_on(a.verify(&t, f)).unwrap().unwrap();
        assert!(!v.current && !v.live);
        let t2 = id("v2");
        let f2 = fence(&ctx.block_on(a.claim(&t2, &w, None)).unwrap());
        ctx.block_on(a.complete(&t2, &w, f2)).unwrap();
        let v = ctx.block_on(a.verify(&t2, f2)).unwrap().unwrap();
        assert!(!v.current);
        assert_eq!(v.state, State::Succeeded);
        assert!(matches!(
            ctx.block_on(a.verify(&id("none"), 1)).unwrap(),
            Err(Refusal::NotFound)
        ));
        assert!(matches!(
            ctx.block_on(a.holder(&id("none"))).unwrap(),
            Err(Refusal::NotFound)
        ));
    }

    /// Declaring again: the same manifest is a no-op, another one conflicts,
    /// except a new source_oid on a NOT_STARTED task.
    pub fn manifest_supersede_and_conflict<H: Harness>(ctx: &mut Ctx<H>) {
        let a = ctx.auth();
        let t = id("sup");
        let deadline_s = ctx.short_ttl_ms().div_ceil(1000);
        let mut m = manifest(t.as_str(), 2, &[], 60, 1);
        m.start_deadline_seconds = deadline_s;
        ctx.block_on(a.declare(m.clone())).unwrap();
        let mut newer = m.clone();
        newer.source_oid = "ffff".to_owned();
        assert_eq!(
            refusal(&ctx.block_on(a.declare(newer.clone())).unwrap()),
            &Refusal::ManifestConflict
        );
        ctx.expire(deadline_s * 1000);
        let r = ctx.block_on(a.declare(newer.clone())).unwrap();
        assert_eq!(
            r.record().unwrap().manifest.as_ref().unwrap().source_oid,
            "ffff"
        );
        assert_eq!(r.record().unwrap().state, State::NotStarted);
        let ev = ctx.task_events(&t);
        assert_eq!(ev.last().unwrap().kind, EventKind::ManifestSuperseded);
        assert!(
            ev.iter().any(|e| e.kind == EventKind::NotStarted),
            "the deadline was persisted first"
        );
        let mut other = newer.clone();
        other.target_version = "9".to_owned();
        assert_eq!(
            refusal(&ctx.block_on(a.declare(other)).unwrap()),
            &Refusal::ManifestConflict
        );
        let w = id("w");
        ctx.block_on(a.claim(&id("bare-one"), &w, None)).unwrap();
        let m2 = manifest("bare-one", 1, &[], 60, 1);
        assert_eq!(
            refusal(&ctx.block_on(a.declare(m2)).unwrap()),
            &Refusal::ManifestConflict
        );
    }

    /// redispatch moves a finished task to a new iteration (stalls reset,
    /// next claim a new attempt); finalize fails anything but SUCCEEDED.
    pub fn redispatch_and_finalize<H: Harness>(ctx: &mut Ctx<H>) {
        let a = ctx.auth();
        let op = Actor::Operator(id("alice"));
        let (t, w) = (id("rd"), id("w"));
        let g = ctx
            .block_on(a.claim(&t, &w, None))
            .unwrap()
            .grant()
            .unwrap();
        let r = ctx.block_on(a.redispatch(&t, op.clone(), 2)).unwrap();
        assert!(matches!(
            refusal(&r),
            Refusal::IllegalTransition {
                state: State::Claimed,
                ..
            }
        ));
        ctx.block_on(a.fail(&t, &w, g.fence, Some(json!({"e": 1}))))
            .unwrap();
        let r = ctx.block_on(a.redispatch(&t, op.clone(), 1)).unwrap();
        assert_eq!(
            refusal(&r),
            &Refusal::IterationNotAdvanced {
                iteration: 1,
                current_iteration: 1
            }
        );
        let r = ctx.block_on(a.redispatch(&t, op.clone(), 2)).unwrap();
        let rec = r.record().unwrap();
        assert_eq!(
            (rec.state, rec.iteration, rec.stalls, rec.error.clone()),
            (State::Registered, 2, 0, None)
        );
        let g2 = ctx
            .block_on(a.claim(&t, &w, None))
            .unwrap()
            .grant()
            .unwrap();
        assert_eq!(g2.attempt, g.attempt + 1);
        assert!(g2.fence > g.fence);
        let r = ctx
            .block_on(a.finalize(&t, op.clone(), Some(json!({"why": "budget"}))))
            .unwrap();
        let rec = r.record().unwrap();
        assert_eq!(
            (rec.state, rec.error.clone()),
            (State::Failed, Some(json!({"why": "budget"})))
        );
        assert!(
            ctx.block_on(a.finalize(&t, op.clone(), None))
                .unwrap()
                .is_idempotent()
        );
        let r = ctx.block_on(a.complete(&t, &w, g2.fence)).unwrap();
        assert!(r.is_refused(), "a worker never walks back a terminal");
        let r = ctx.block_on(a.cancel_as(&id("nobody"), op)).unwrap();
        assert_eq!(refusal(&r), &Refusal::NotFound);
    }

    /// A named precondition must be proved by the record.
    pub fn preconditions_must_be_proved<H: Harness>(ctx: &mut Ctx<H>) {
        let a = ctx.auth();
        let (t, w) = (id("pre"), id("w"));
        let meta = || BTreeMap::from([("k".to_owned(), json!(1))]);
        let pre = Preconditions {
            expected_revision: Some(1),
            ..Default::default()
        };
        let r = ctx
            .block_on(a.annotate(&t, &w, meta(), pre.clone()))
            .unwrap();
        assert!(
            matches!(refusal(&r), Refusal::PreconditionFailed { .. }),
            "an absent record proves nothing"
        );
        let g = ctx
            .block_on(a.claim(&t, &w, None))
            .unwrap()
            .grant()
            .unwrap();
        let pre_fence = Preconditions {
            expected_fence: Some(g.fence + 1),
            ..Default::default()
        };
        let r = ctx.block_on(a.annotate(&t, &w, meta(), pre_fence)).unwrap();
        assert!(
            matches!(refusal(&r), Refusal::PreconditionFailed { which, .. } if which == "expected_fence")
        );
        let ok = Preconditions {
            expected_state: Some(State::Claimed),
            expected_revision: Some(g.revision),
            expected_attempt: Some(g.attempt),
            expected_fence: Some(g.fence),
        };
        assert!(
            !ctx.block_on(a.annotate(&t, &w, meta(), ok.clone()))
                .unwrap()
                .is_refused()
        );
        let r = ctx.block_on(a.annotate(&t, &w, meta(), ok)).unwrap();
        assert!(
            matches!(refusal(&r), Refusal::PreconditionFailed { which, .. } if which == "expected_revision")
        );
        let bad = BTreeMap::from([("state".to_owned(), json!("SUCCEEDED"))]);
        let e = ctx
            .block_on(a.annotate(&t, &w, bad, Preconditions::none()))
            .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("metadata.state"));
    }
}
