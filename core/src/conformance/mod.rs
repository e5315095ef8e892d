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

    /// How far past a lease's end [`Ctx::expire`] goes: 1 ms on a manual
    /// clock, a margin for engine clocks. A lock delay that must still
    /// hold after an expiry is longer than this.
    pub fn expiry_margin_ms(&self) -> u64 {
        match &self.clock {
            TestClock::Manual(_) => 1,
            TestClock::System => 1500,
        }
    }

    /// Lets a lease of `ttl_ms` expire, with a margin for engine clocks.
    pub fn expire(&self, ttl_ms: u64) {
        self.advance_ms(ttl_ms + self.expiry_margin_ms());
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

    /// Every record the store holds (settings too), as stored (at most
    /// 10 000).
    pub fn stored_records(&self) -> Vec<crate::TaskRecord> {
        let a = self.auth();
        let query = crate::store::ListQuery {
            after: None,
            limit: 10_000,
            clauses: None,
            now: a.now(),
        };
        self.block_on(a.store().list(&query))
            .unwrap()
            .into_iter()
            .map(|s| s.record)
            .collect()
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
            cancel_is_cooperative,
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
            a_bad_request_leaves_the_store_serving,
            lock_delay_holds_an_expired_task,
            a_clean_release_skips_the_lock_delay,
            a_manifest_lock_delay_holds_a_declared_task,
            a_run_time_limit_ends_an_attempt_its_holder_renews,
            graph_drain_exactly_once_in_dependency_order,
            next_honours_priority_then_ready_time_then_id,
            upstream_failure_blocks_and_redispatch_unblocks,
            add_graph_all_or_nothing,
            task_next_takes_declared_tasks_in_order,
            an_expired_grant_is_next_again,
            next_passes_over_many_lock_delayed_tasks,
            a_task_added_to_start_later_is_not_granted_before,
            next_grants_what_is_due_behind_many_tasks_put_off,
            a_failed_attempt_is_retried_after_its_backoff,
            a_schedule_enqueues_one_task_per_period_however_many_tick,
            a_chain_below_a_failed_task_is_drained,
            a_worker_waiting_for_work_gets_what_is_added,
            a_cascading_cancel_reaches_every_dependent,
            a_key_limit_holds_however_grants_race,
            retention_prunes_ended_tasks_and_keeps_tombstones,
            retention_forgets_tombstones_when_their_time_comes,
            the_oldest_wait_of_a_queue_is_read_across_priorities,
            a_declared_task_is_retried_after_its_backoff,
            a_queue_policy_retries_failed_and_stalled_attempts,
            lists_of_tasks_leave_out_the_records_that_hold_settings,
            a_cron_schedule_enqueues_one_task_per_named_time,
            a_failing_schedule_stops_no_other_and_says_why,
            records_that_hold_settings_take_no_task_request,
            counts_kept_with_commits_equal_a_recount,
            a_guard_refuses_the_attempt_a_later_grant_replaced,
            checkpoints_are_fenced_kept_and_carried_by_later_grants,
            a_step_spawns_its_tasks_once_and_waits_for_them,
            next_count_grants_what_as_many_nexts_would,
            reports_in_one_call_are_each_decided_on_their_own_fence,
            a_scoped_request_acts_only_within_its_scope,
            a_traceparent_given_at_add_is_carried_on_each_grant,
            a_paused_queue_is_passed_over_until_resumed,
            a_queues_failed_tasks_are_retried_or_discarded_in_bulk
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

pub mod cases;
