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
pub struct ByKind {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ByRoute {
    pub route: String,
    pub status: u16,
}

/// The server's metrics and the registry that encodes them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    grants: Counter,
    refusals: Family<Reason, Counter>,
    stale_fences: Family<ByRequest, Counter>,
    expirations: Counter,
    recoveries: Counter,
    tasks: Family<ByState, Gauge>,
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
            "Grants whose lease expired unreleased, as recorded (STALLED events)",
            expirations.clone(),
        );
        let recoveries = Counter::default();
        registry.register(
            "recoveries",
            "Tasks recovered after an expired lease",
            recoveries.clone(),
        );
        let tasks = Family::<ByState, Gauge>::default();
        registry.register(
            "tasks",
            "Tasks by derived state: the counts the store keeps with each commit, read at scrape",
            tasks.clone(),
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
            tasks,
            batch,
            latency,
            store_errors,
        }
    }

    /// Counts what a decision did.
    pub fn decided(&self, d: &Decision, request: RequestKind) {
        let expired = d.events().filter(|e| e.kind == EventKind::Stalled).count();
        if expired > 0 {
            self.expirations.inc_by(expired as u64);
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
    /// census found (0 where it has none); a queue no longer found is gone.
    pub fn census<'a>(&self, counts: impl IntoIterator<Item = (&'a str, &'a str, u64)>) {
        let counts: std::collections::BTreeMap<(&str, &str), u64> =
            counts.into_iter().map(|(q, s, n)| ((q, s), n)).collect();
        self.tasks.clear();
        for queue in counts
            .keys()
            .map(|(q, _)| *q)
            .collect::<std::collections::BTreeSet<_>>()
        {
            for state in State::ALL {
                let n = counts.get(&(queue, state.as_str())).copied().unwrap_or(0);
                self.tasks
                    .get_or_create(&ByState {
                        queue: queue.to_owned(),
                        state: state.as_str().to_owned(),
                    })
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            }
        }
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
