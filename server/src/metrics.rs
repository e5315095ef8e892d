//! What `/metrics` reports, in Prometheus' text format, kept with
//! `prometheus-client`. Every count is taken from a decision core made or
//! an error a store gave; the server counts, it never judges.

use baton_core::decide::{Decision, Verdict};
use baton_core::{Error, EventKind, RequestKind, State};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Reason {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ByRequest {
    pub request: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ByState {
    /// The task's queue ("" for a task outside the work graph).
    pub queue: String,
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ByQueue {
    pub queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ByStateOnly {
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ByKind {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ByRoute {
    pub route: String,
    pub status: u16,
}

/// The most queues the per-queue gauges name, the queues with the most
/// tasks first; the rest are added up in gauges without a queue label, so
/// a store with many queues cannot make a scrape unbounded.
pub const MAX_QUEUE_LABELS: usize = 64;

/// The server's metrics and the registry that encodes them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    grants: Counter,
    refusals: Family<Reason, Counter>,
    stale_fences: Family<ByRequest, Counter>,
    expirations: Counter,
    recoveries: Counter,
    failures: Counter,
    retries: Counter,
    tasks: Family<ByState, Gauge>,
    tasks_elsewhere: Family<ByStateOnly, Gauge>,
    dead_letters: Family<ByQueue, Gauge>,
    dead_letters_elsewhere: Gauge,
    oldest_waiting: Family<ByQueue, Gauge<f64, AtomicU64>>,
    unlabelled_queues: Gauge,
    live_leases: Gauge,
    delivered: Gauge,
    deliveries_dead: Gauge,
    deliveries_failing: Gauge,
    batch: Histogram,
    latency: Family<ByRoute, Histogram>,
    store_errors: Family<ByKind, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("baton");
        let grants = Counter::default();
        registry.register(
            "grants",
            "Leases granted (a new fence each)",
            grants.clone(),
        );
        let refusals = Family::<Reason, Counter>::default();
        registry.register("refusals", "Requests refused, by reason", refusals.clone());
        let stale_fences = Family::<ByRequest, Counter>::default();
        registry.register(
            "stale_fence_refusals",
            "Reports refused for a fence that is not the current one, by request: late, stalled or duplicated workers",
            stale_fences.clone(),
        );
        let expirations = Counter::default();
        registry.register(
            "lease_expirations",
            "Grants whose lease ended unreleased, as recorded: expired (STALLED) or at the task's time limit (TIMED_OUT); whoever wrote it, a request or the server's sweeper",
            expirations.clone(),
        );
        let recoveries = Counter::default();
        registry.register(
            "recoveries",
            "Tasks recovered after an expired lease",
            recoveries.clone(),
        );
        let failures = Counter::default();
        registry.register(
            "failures",
            "Failures as recorded: attempts that ended without success (failure reported, lease expired or timed out) and start deadlines passed, each once whether or not a retry follows",
            failures.clone(),
        );
        let retries = Counter::default();
        registry.register(
            "retries_scheduled",
            "Failed attempts put off to be tried again by their retry policy (RETRY_SCHEDULED events)",
            retries.clone(),
        );
        let tasks = Family::<ByState, Gauge>::default();
        registry.register(
            "tasks",
            "Tasks by queue and derived state: the counts the store keeps with each commit, read at scrape (the queues with the most tasks; see baton_tasks_in_unlabelled_queues)",
            tasks.clone(),
        );
        let tasks_elsewhere = Family::<ByStateOnly, Gauge>::default();
        registry.register(
            "tasks_in_unlabelled_queues",
            "Tasks by derived state in the queues past the most the per-queue gauges name",
            tasks_elsewhere.clone(),
        );
        let unlabelled_queues = Gauge::default();
        registry.register(
            "unlabelled_queues",
            "Queues with tasks that the per-queue gauges do not name (they name the queues with the most tasks)",
            unlabelled_queues.clone(),
        );
        let dead_letters = Family::<ByQueue, Gauge>::default();
        registry.register(
            "dead_letter_tasks",
            "Tasks ended for good without success (FAILED, STALLED, NOT_STARTED), by queue, until retried or pruned",
            dead_letters.clone(),
        );
        let oldest_waiting = Family::<ByQueue, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "queue_oldest_waiting_seconds",
            "How long each named queue's longest-waiting task has been ready and not granted (0: none waits)",
            oldest_waiting.clone(),
        );
        let dead_letters_elsewhere = Gauge::default();
        registry.register(
            "dead_letter_tasks_in_unlabelled_queues",
            "Dead-letter tasks in the queues the per-queue gauges do not name",
            dead_letters_elsewhere.clone(),
        );
        let live_leases = Gauge::default();
        registry.register(
            "live_leases",
            "Tasks held under a live lease (CLAIMED or RUNNING), read at scrape",
            live_leases.clone(),
        );
        let delivered = Gauge::default();
        registry.register(
            "webhook_delivered",
            "Outbox notifications the webhook took (2xx) since the server started (--deliver)",
            delivered.clone(),
        );
        let deliveries_dead = Gauge::default();
        registry.register(
            "webhook_dead",
            "Outbox notifications given up on after their tries since the server started",
            deliveries_dead.clone(),
        );
        let deliveries_failing = Gauge::default();
        registry.register(
            "webhook_failing",
            "Outbox notifications whose posts are failing and will be tried again",
            deliveries_failing.clone(),
        );
        registry.register(
            "build",
            "The server's version",
            prometheus_client::metrics::info::Info::new(vec![(
                "version".to_owned(),
                env!("CARGO_PKG_VERSION").to_owned(),
            )]),
        );
        let batch = Histogram::new(exponential_buckets(1.0, 2.0, 10));
        registry.register(
            "commit_batch_size",
            "Requests per durable commit of the store's group committer",
            batch.clone(),
        );
        let latency = Family::<ByRoute, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.000_05, 2.0, 18))
        });
        registry.register(
            "request_duration_seconds",
            "Time to answer a request, by route and status",
            latency.clone(),
        );
        let store_errors = Family::<ByKind, Counter>::default();
        registry.register(
            "store_errors",
            "Requests the store could not answer, by kind",
            store_errors.clone(),
        );
        Metrics {
            registry,
            grants,
            refusals,
            stale_fences,
            expirations,
            recoveries,
            failures,
            retries,
            tasks,
            tasks_elsewhere,
            dead_letters,
            dead_letters_elsewhere,
            oldest_waiting,
            unlabelled_queues,
            live_leases,
            delivered,
            deliveries_dead,
            deliveries_failing,
            batch,
            latency,
            store_errors,
        }
    }

    /// Counts what a decision did: its grant or refusal, and what its
    /// events record (wherever the decision was made: a request, the
    /// server's sweeper, a schedule's tick).
    pub fn decided(&self, d: &Decision, request: RequestKind) {
        for e in d.events() {
            if matches!(e.kind, EventKind::Stalled | EventKind::TimedOut) {
                self.expirations.inc();
            }
            if e.kind.is_failure(&e.actor) {
                self.failures.inc();
            }
            if e.kind == EventKind::RetryScheduled {
                self.retries.inc();
            }
        }
        match &d.verdict {
            Verdict::Commit(c) => {
                if c.mints_fence {
                    self.grants.inc();
                }
                if request == RequestKind::Recover {
                    self.recoveries.inc();
                }
            }
            Verdict::Refuse { refusal, .. } => {
                let reason = refusal.reason();
                self.refusals
                    .get_or_create(&Reason {
                        reason: reason.to_owned(),
                    })
                    .inc();
                if reason == "stale_fence" {
                    self.stale_fences
                        .get_or_create(&ByRequest {
                            request: request.as_str().to_owned(),
                        })
                        .inc();
                }
            }
            Verdict::Ack | Verdict::Invalid(_) => {}
        }
    }

    pub fn store_error(&self, e: &Error) {
        self.store_errors
            .get_or_create(&ByKind {
                kind: e.kind.as_str().to_owned(),
            })
            .inc();
    }

    pub fn batch(&self, size: usize) {
        self.batch.observe(size as f64);
    }

    pub fn answered(&self, route: &str, status: u16, seconds: f64) {
        self.latency
            .get_or_create(&ByRoute {
                route: route.to_owned(),
                status,
            })
            .observe(seconds);
    }

    /// Sets the task gauges from a census: every state of each queue the
    /// census found (0 where it has none), for the [`MAX_QUEUE_LABELS`]
    /// queues with the most tasks, the rest added up; a queue no longer
    /// found is gone.
    /// The webhook deliverer's totals, read at scrape.
    pub fn deliveries(&self, delivered: u64, dead: u64, failing: usize) {
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.delivered.set(gauge(delivered));
        self.deliveries_dead.set(gauge(dead));
        self.deliveries_failing.set(gauge(failing as u64));
    }

    /// Sets each named queue's longest wait, in seconds: the queues not
    /// in `waits` have none waiting (0); one whose wait the store could
    /// not read (`None`) is left out of this scrape rather than shown as
    /// none. Only the queues the census named.
    pub fn oldest_waiting(&self, named: &[String], waits: &[(String, Option<f64>)]) {
        self.oldest_waiting.clear();
        for queue in named {
            let age = match waits.iter().find(|(q, _)| q == queue) {
                None => 0.0,
                Some((_, Some(age))) => *age,
                Some((_, None)) => continue,
            };
            self.oldest_waiting
                .get_or_create(&ByQueue {
                    queue: queue.clone(),
                })
                .set(age);
        }
    }

    /// The queues the last census named that hold tasks that may wait
    /// (REGISTERED or DECLARED), with all it named.
    pub fn census<'a>(
        &self,
        counts: impl IntoIterator<Item = (&'a str, State, u64)>,
    ) -> (Vec<String>, Vec<String>) {
        use std::collections::BTreeMap;
        let mut by_queue: BTreeMap<&str, BTreeMap<State, u64>> = BTreeMap::new();
        for (q, s, n) in counts {
            *by_queue.entry(q).or_default().entry(s).or_default() += n;
        }
        let mut queues: Vec<(&str, BTreeMap<State, u64>)> = by_queue.into_iter().collect();
        queues.sort_by_key(|(q, states)| (std::cmp::Reverse(states.values().sum::<u64>()), *q));
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.tasks.clear();
        self.dead_letters.clear();
        let mut elsewhere: BTreeMap<State, u64> = BTreeMap::new();
        let mut live = 0;
        let (mut named, mut may_wait) = (Vec::new(), Vec::new());
        for (i, (queue, states)) in queues.iter().enumerate() {
            live += State::ALL
                .iter()
                .filter(|s| s.is_held())
                .filter_map(|s| states.get(s))
                .sum::<u64>();
            let dead: u64 = State::ALL
                .iter()
                .filter(|s| s.is_dead_letter())
                .filter_map(|s| states.get(s))
                .sum();
            if i >= MAX_QUEUE_LABELS {
                for (s, n) in states {
                    *elsewhere.entry(*s).or_default() += n;
                }
                continue;
            }
            named.push((*queue).to_owned());
            if states.iter().any(|(s, n)| s.may_wait() && *n > 0) {
                may_wait.push((*queue).to_owned());
            }
            for state in State::ALL {
                self.tasks
                    .get_or_create(&ByState {
                        queue: (*queue).to_owned(),
                        state: state.as_str().to_owned(),
                    })
                    .set(gauge(states.get(&state).copied().unwrap_or(0)));
            }
            self.dead_letters
                .get_or_create(&ByQueue {
                    queue: (*queue).to_owned(),
                })
                .set(gauge(dead));
        }
        for state in State::ALL {
            self.tasks_elsewhere
                .get_or_create(&ByStateOnly {
                    state: state.as_str().to_owned(),
                })
                .set(gauge(elsewhere.get(&state).copied().unwrap_or(0)));
        }
        self.dead_letters_elsewhere.set(gauge(
            elsewhere
                .iter()
                .filter(|(s, _)| s.is_dead_letter())
                .map(|(_, n)| n)
                .sum(),
        ));
        self.unlabelled_queues
            .set(gauge(queues.len().saturating_sub(MAX_QUEUE_LABELS) as u64));
        self.live_leases.set(gauge(live));
        (named, may_wait)
    }

    /// The text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail; an encoder error would be a
        // bug in a metric's name, so an empty answer is the fallback.
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}
