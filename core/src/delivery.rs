//! Webhooks from the outbox: which notifications a deliverer posts now,
//! and what a failed post comes to. Pure: the server's loop (`baton serve
//! --deliver URL`) reads the outbox, posts what [`Deliveries::due`] names,
//! acknowledges a delivered one, and tells a failure to
//! [`Deliveries::failed`].
//!
//! The rules: a task's notifications go in outbox order, one at a time
//! (the next only once the one before is delivered or dead), so a receiver
//! sees each task's changes in the order they were made; different tasks'
//! go side by side, so one failing receiver path holds back only its own
//! task. A failed post is tried again after a wait that doubles from
//! [`DeliveryPolicy::first_wait_ms`] to [`DeliveryPolicy::max_wait_ms`];
//! after [`DeliveryPolicy::tries`] failures the notification is dead: it is
//! acknowledged (never posted again), kept among the dead that the page
//! shows, and the task's next one goes. Delivery is at least once: a post
//! the receiver took whose acknowledgement was lost (the server killed
//! between the two) is posted again; the receiver de-duplicates on
//! `intent_id`. What is failing is kept in memory: a restarted deliverer
//! begins each notification's tries anew.

use crate::model::Notification;
use crate::time::Timestamp;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::{BTreeSet, HashMap, VecDeque};

/// The header that carries a post's signature: `sha256=` and the hex of
/// HMAC-SHA256 over the body, keyed with the deliverer's key.
pub const SIGNATURE_HEADER: &str = "x-baton-signature";
/// The header that carries the notification's intent id (the receiver's
/// de-duplication key).
pub const INTENT_HEADER: &str = "x-baton-intent";
/// The header that carries which try of the notification this post is.
pub const ATTEMPT_HEADER: &str = "x-baton-attempt";

/// How a deliverer tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryPolicy {
    /// Failures after which a notification is dead (1 to 100).
    pub tries: u32,
    pub first_wait_ms: u64,
    pub max_wait_ms: u64,
}

impl Default for DeliveryPolicy {
    fn default() -> Self {
        DeliveryPolicy {
            tries: 10,
            first_wait_ms: 1_000,
            max_wait_ms: 60_000,
        }
    }
}

impl DeliveryPolicy {
    /// The most tries a policy may give.
    pub const MAX_TRIES: u32 = 100;

    /// The policy with `tries`, refused outside 1 to [`Self::MAX_TRIES`].
    pub fn with_tries(tries: u32) -> crate::Result<DeliveryPolicy> {
        if !(1..=Self::MAX_TRIES).contains(&tries) {
            return Err(crate::Error::invalid(
                "deliver_tries",
                format!("must be from 1 to {} (got {tries})", Self::MAX_TRIES),
            ));
        }
        Ok(DeliveryPolicy {
            tries,
            ..DeliveryPolicy::default()
        })
    }

    /// The wait after the `failures`-th failure.
    pub fn wait_ms(&self, failures: u32) -> u64 {
        let doubled = self
            .first_wait_ms
            .saturating_mul(1u64 << failures.saturating_sub(1).min(32));
        doubled.min(self.max_wait_ms)
    }
}

/// A notification whose posts are failing.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Failing {
    pub intent_id: String,
    pub task: crate::id::TaskId,
    pub seq: u64,
    pub failures: u32,
    pub next_at: Timestamp,
    pub error: String,
}

/// A notification given up on after its tries.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Dead {
    pub intent_id: String,
    pub task: crate::id::TaskId,
    pub seq: u64,
    pub kind: crate::model::EventKind,
    pub failures: u32,
    pub error: String,
    pub at: Timestamp,
}

/// What a failed post comes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterFailure {
    /// Tried again at this time.
    Retry(Timestamp),
    /// Dead: acknowledge it, and go on with the task's next.
    Dead,
}

/// A deliverer's state: what is failing, what died, how many went.
#[derive(Debug, Clone, Default)]
pub struct Deliveries {
    policy: DeliveryPolicy,
    failing: HashMap<String, Failing>,
    dead: VecDeque<Dead>,
    delivered: u64,
    died: u64,
}

impl Deliveries {
    /// The most dead notifications kept to show (the newest).
    pub const DEAD_KEPT: usize = 100;

    pub fn new(policy: DeliveryPolicy) -> Deliveries {
        Deliveries {
            policy,
            ..Deliveries::default()
        }
    }

    /// Of `pending` (unacknowledged, in outbox order), the ones to post
    /// now: each task's first, unless it waits for its next try.
    pub fn due<'a>(&self, pending: &'a [Notification], now: Timestamp) -> Vec<&'a Notification> {
        let mut seen = BTreeSet::new();
        let mut sorted: Vec<&Notification> = pending.iter().collect();
        sorted.sort_by_key(|n| n.seq);
        sorted
            .into_iter()
            .filter(|n| seen.insert(n.task.clone()))
            .filter(|n| {
                self.failing
                    .get(&n.intent_id)
                    .is_none_or(|f| f.next_at <= now)
            })
            .collect()
    }

    /// Which try of `n` the next post is (1 for the first).
    pub fn attempt(&self, n: &Notification) -> u32 {
        self.failing.get(&n.intent_id).map_or(0, |f| f.failures) + 1
    }

    /// `n` was posted and the receiver took it (a 2xx).
    pub fn delivered(&mut self, n: &Notification) {
        self.failing.remove(&n.intent_id);
        self.delivered += 1;
    }

    /// A post of `n` failed with `error` at `now`.
    pub fn failed(&mut self, n: &Notification, error: String, now: Timestamp) -> AfterFailure {
        let failures = self.attempt(n);
        if failures >= self.policy.tries {
            self.failing.remove(&n.intent_id);
            self.died += 1;
            self.dead.push_back(Dead {
                intent_id: n.intent_id.clone(),
                task: n.task.clone(),
                seq: n.seq,
                kind: n.kind,
                failures,
                error,
                at: now,
            });
            while self.dead.len() > Self::DEAD_KEPT {
                self.dead.pop_front();
            }
            return AfterFailure::Dead;
        }
        let next_at = now.plus_ms(self.policy.wait_ms(failures));
        self.failing.insert(
            n.intent_id.clone(),
            Failing {
                intent_id: n.intent_id.clone(),
                task: n.task.clone(),
                seq: n.seq,
                failures,
                next_at,
                error,
            },
        );
        AfterFailure::Retry(next_at)
    }

    /// Forgets what is failing for notifications no longer pending (acked
    /// by someone else meanwhile).
    pub fn keep_only(&mut self, pending: &[Notification]) {
        let ids: BTreeSet<&str> = pending.iter().map(|n| n.intent_id.as_str()).collect();
        self.failing.retain(|id, _| ids.contains(id.as_str()));
    }

    /// What the page and `/metrics` show: counts, the failing (oldest
    /// first), the newest dead.
    pub fn view(&self) -> serde_json::Value {
        let mut failing: Vec<&Failing> = self.failing.values().collect();
        failing.sort_by_key(|f| f.seq);
        serde_json::json!({
            "delivered": self.delivered,
            "dead_total": self.died,
            "failing": failing,
            "dead": self.dead.iter().rev().collect::<Vec<_>>(),
        })
    }

    /// How many notifications are failing now.
    pub fn failing(&self) -> usize {
        self.failing.len()
    }

    /// How many were delivered, and how many died, since the start.
    pub fn totals(&self) -> (u64, u64) {
        (self.delivered, self.died)
    }
}

/// The signature header's value for `body`, keyed with `key`.
pub fn signature(key: &[u8], body: &[u8]) -> String {
    // HMAC takes a key of any length.
    #[allow(clippy::expect_used)]
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts any key length");
    mac.update(body);
    let tag = mac.finalize().into_bytes();
    let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::model::EventKind;

    fn n(seq: u64, task: &str) -> Notification {
        Notification {
            seq,
            intent_id: format!("00000000-0000-4000-8000-{seq:012}"),
            task: crate::id::Id::parse("task", task).unwrap(),
            kind: EventKind::Claimed,
            payload: serde_json::json!({}),
            at: Timestamp::from_millis(0),
        }
    }

    #[test]
    fn each_task_goes_in_order_one_at_a_time_and_dies_after_its_tries() {
        let policy = DeliveryPolicy {
            tries: 3,
            first_wait_ms: 100,
            max_wait_ms: 250,
        };
        let mut d = Deliveries::new(policy);
        let pending = vec![n(3, "b"), n(1, "a"), n(2, "a"), n(4, "c")];
        let t0 = Timestamp::from_millis(1_000);
        let due: Vec<u64> = d.due(&pending, t0).iter().map(|n| n.seq).collect();
        assert_eq!(due, [1, 3, 4], "each task's first, in outbox order");
        assert_eq!(
            d.failed(&pending[1], "500".into(), t0),
            AfterFailure::Retry(t0.plus_ms(100))
        );
        let due: Vec<u64> = d
            .due(&pending, t0.plus_ms(99))
            .iter()
            .map(|n| n.seq)
            .collect();
        assert_eq!(due, [3, 4], "a's first waits; a's second waits behind it");
        assert_eq!(d.attempt(&pending[1]), 2);
        assert_eq!(
            d.failed(&pending[1], "500".into(), t0.plus_ms(100)),
            AfterFailure::Retry(t0.plus_ms(300))
        );
        assert_eq!(policy.wait_ms(3), 250, "doubling, to the most");
        assert_eq!(
            d.failed(&pending[1], "stalled".into(), t0.plus_ms(300)),
            AfterFailure::Dead
        );
        // Acknowledged as dead: the task's next goes.
        let rest = vec![n(3, "b"), n(2, "a"), n(4, "c")];
        d.keep_only(&rest);
        let due: Vec<u64> = d
            .due(&rest, t0.plus_ms(300))
            .iter()
            .map(|n| n.seq)
            .collect();
        assert_eq!(due, [2, 3, 4]);
        d.delivered(&rest[1]);
        assert_eq!(d.totals(), (1, 1));
        let v = d.view();
        assert_eq!(v["dead"][0]["failures"], 3);
        assert_eq!(v["dead"][0]["error"], "stalled");
    }

    #[test]
    fn the_signature_is_hmac_sha256_of_the_body() {
        // RFC 4231, test case 2.
        assert_eq!(
            signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert!(DeliveryPolicy::with_tries(0).is_err());
        assert!(DeliveryPolicy::with_tries(101).is_err());
    }
}
