//! Refusals: the typed "no" a decision can answer (SPEC §5).

use crate::id::OwnerId;
use crate::kinds::{RequestKind, State};
use crate::time::Timestamp;
use std::fmt;

/// Why a request was refused. A caller can act on the variant without parsing text.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "refused", rename_all = "snake_case")]
pub enum Refusal {
    /// Another owner holds a live grant.
    Held {
        holder: OwnerId,
        fence: u64,
        expiry: Timestamp,
    },
    /// The fence is not the current one.
    StaleFence {
        fence: u64,
        current_fence: Option<u64>,
    },
    /// The fence is current but the caller is not its owner, or there is no grant.
    NotHolder {
        holder: Option<OwnerId>,
    },
    /// The caller's grant expired.
    LeaseExpired {
        fence: u64,
        expired_at: Timestamp,
    },
    /// The task was added to start later, and `until` has not come (as
    /// the deciding clock says).
    Scheduled {
        until: Timestamp,
    },
    /// The caller's attempt reached its run-time limit (the task's
    /// `timeout`): its lease ended at `at`, renewed or not.
    TimedOut {
        fence: u64,
        at: Timestamp,
    },
    /// The last grant's lease expired without a release, and its lock
    /// delay holds the task until `until` (judged by the store's clock).
    LockDelay {
        fence: u64,
        until: Timestamp,
    },
    /// Recover refused: the lease is still live.
    LeaseLive {
        holder: OwnerId,
        fence: u64,
        expiry: Timestamp,
    },
    /// The task SUCCEEDED; it is never granted again.
    Completed,
    IllegalTransition {
        state: State,
        request: RequestKind,
    },
    PreconditionFailed {
        which: String,
        expected: String,
        actual: String,
    },
    OperatorRequired {
        request: RequestKind,
    },
    EvidenceMissing {
        keys: Vec<String>,
    },
    StepsIncomplete {
        current_step: u32,
        total_steps: u32,
    },
    ManifestConflict,
    IterationNotAdvanced {
        iteration: u64,
        current_iteration: u64,
    },
    NotFound,
    /// The step was recorded already with another output (or other added
    /// tasks): a recorded step is never overwritten.
    CheckpointConflict {
        step: crate::id::Id,
        fence: u64,
    },
    /// A graph task whose dependencies have not all succeeded yet.
    NotReady {
        waiting_on: Vec<crate::id::TaskId>,
    },
    /// The task's concurrency key has as many live grants as its limit
    /// allows: `holders` hold them. The task waits (parked) until one ends.
    KeyFull {
        key: crate::id::Id,
        limit: u32,
        holders: Vec<crate::graph::KeyHolder>,
    },
    /// Retention pruned the task at `at`: its tombstone stands for it, and
    /// nothing is decided on it again.
    Pruned {
        at: Timestamp,
    },
    /// A dependency ended without success; an operator's redispatch of it
    /// is the way on.
    UpstreamFailed {
        upstream: crate::id::TaskId,
        state: State,
    },
    /// `next` found nothing ready in its queues; some may become ready.
    NoneReady {
        #[serde(flatten)]
        census: crate::graph::Census,
    },
    /// `next` found nothing ready, and nothing in its queues can become
    /// ready without an operator: a loop can stop.
    Drained {
        #[serde(flatten)]
        census: crate::graph::Census,
    },
}

impl Refusal {
    /// Whether the task is refused because another grant holds it now:
    /// for a claim `next` chose from a read made before, a race lost (the
    /// index has moved on). The other refusals stand whoever asks.
    pub fn held_by_another(&self) -> bool {
        matches!(self, Refusal::Held { .. } | Refusal::LeaseLive { .. })
    }

    /// The reason's name (SPEC §5).
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Held { .. } => "held",
            Refusal::StaleFence { .. } => "stale_fence",
            Refusal::NotHolder { .. } => "not_holder",
            Refusal::LeaseExpired { .. } => "lease_expired",
            Refusal::TimedOut { .. } => "timed_out",
            Refusal::Scheduled { .. } => "scheduled",
            Refusal::LeaseLive { .. } => "lease_live",
            Refusal::LockDelay { .. } => "lock_delay",
            Refusal::Completed => "completed",
            Refusal::IllegalTransition { .. } => "illegal_transition",
            Refusal::PreconditionFailed { .. } => "precondition_failed",
            Refusal::OperatorRequired { .. } => "operator_required",
            Refusal::EvidenceMissing { .. } => "evidence_missing",
            Refusal::StepsIncomplete { .. } => "steps_incomplete",
            Refusal::ManifestConflict => "manifest_conflict",
            Refusal::IterationNotAdvanced { .. } => "iteration_not_advanced",
            Refusal::NotFound => "not_found",
            Refusal::CheckpointConflict { .. } => "checkpoint_conflict",
            Refusal::NotReady { .. } => "not_ready",
            Refusal::KeyFull { .. } => "key_full",
            Refusal::Pruned { .. } => "pruned",
            Refusal::UpstreamFailed { .. } => "upstream_failed",
            Refusal::NoneReady { .. } => "none_ready",
            Refusal::Drained { .. } => "drained",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Held {
                holder,
                fence,
                expiry,
            } => {
                write!(f, "held by {holder} under fence {fence} until {expiry}")
            }
            // A fence above the task's current one was never granted
            // for it (fences only grow): a mistyped or borrowed fence, not
            // a late worker's, and the message says which.
            Refusal::StaleFence {
                fence,
                current_fence: Some(c),
            } if fence > c => write!(
                f,
                "fence {fence} was never granted for this task; its current fence is {c}"
            ),
            Refusal::StaleFence {
                fence,
                current_fence: Some(c),
            } => {
                write!(f, "fence {fence} is stale; the current fence is {c}")
            }
            Refusal::StaleFence {
                fence,
                current_fence: None,
            } => {
                write!(
                    f,
                    "fence {fence} was never granted for this task: it has no grant"
                )
            }
            Refusal::NotHolder { holder: Some(h) } => write!(f, "the grant belongs to {h}"),
            Refusal::NotHolder { holder: None } => f.write_str("the task has no grant"),
            Refusal::LeaseExpired { fence, expired_at } => {
                write!(f, "the lease of fence {fence} expired at {expired_at}")
            }
            Refusal::Scheduled { until } => {
                write!(f, "the task is put off until {until}")
            }
            Refusal::TimedOut { fence, at } => {
                write!(
                    f,
                    "the attempt of fence {fence} reached its run-time limit at {at}"
                )
            }
            Refusal::LockDelay { fence, until } => {
                write!(
                    f,
                    "the lease of fence {fence} expired without a release; its lock delay holds the task until about {until}"
                )
            }
            Refusal::LeaseLive {
                holder,
                fence,
                expiry,
            } => {
                write!(
                    f,
                    "the lease is live: {holder} holds fence {fence} until {expiry}"
                )
            }
            Refusal::Completed => f.write_str("the task succeeded and is never granted again"),
            Refusal::IllegalTransition { state, request } => {
                write!(f, "{request} is not allowed in state {state}")
            }
            Refusal::PreconditionFailed {
                which,
                expected,
                actual,
            } => {
                write!(
                    f,
                    "precondition {which} failed: expected {expected}, found {actual}"
                )
            }
            Refusal::OperatorRequired { request } => write!(f, "{request} requires an operator"),
            Refusal::EvidenceMissing { keys } => {
                write!(f, "required evidence missing: {}", keys.join(", "))
            }
            Refusal::StepsIncomplete {
                current_step,
                total_steps,
            } => {
                write!(
                    f,
                    "step {current_step} of {total_steps}: the last step has not been reached"
                )
            }
            Refusal::ManifestConflict => f.write_str(
                "the task is already declared with another manifest (or is a bare task)",
            ),
            Refusal::IterationNotAdvanced {
                iteration,
                current_iteration,
            } => {
                write!(
                    f,
                    "iteration {iteration} does not advance past {current_iteration}"
                )
            }
            Refusal::NotFound => f.write_str("no such task"),
            Refusal::CheckpointConflict { step, fence } => write!(
                f,
                "step {step} was recorded under fence {fence} with another output; a recorded step is never overwritten"
            ),
            Refusal::NotReady { waiting_on } => {
                let names: Vec<&str> = waiting_on.iter().take(10).map(|t| t.as_str()).collect();
                write!(f, "waiting on {}", names.join(", "))?;
                if waiting_on.len() > 10 {
                    write!(f, " and {} more", waiting_on.len() - 10)?;
                }
                Ok(())
            }
            Refusal::KeyFull {
                key,
                limit,
                holders,
            } => {
                write!(f, "key {key} is full ({limit} at once): held by ")?;
                let names: Vec<String> = holders
                    .iter()
                    .take(10)
                    .map(|h| match h.fence {
                        Some(fence) => format!("{} (fence {fence})", h.task),
                        None => h.task.to_string(),
                    })
                    .collect();
                if names.is_empty() {
                    f.write_str("nobody (the limit is 0)")?;
                }
                write!(f, "{}", names.join(", "))?;
                if holders.len() > 10 {
                    write!(f, " and {} more", holders.len() - 10)?;
                }
                Ok(())
            }
            Refusal::Pruned { at } => write!(
                f,
                "the task ended and was pruned at {at}: only its tombstone is kept"
            ),
            Refusal::UpstreamFailed { upstream, state } => write!(
                f,
                "dependency {upstream} ended {state}; an operator's redispatch of it unblocks this task"
            ),
            Refusal::NoneReady { census: c } if c.paused > 0 => write!(
                f,
                "nothing taken: {} of the queues asked paused ({} ready, {} queued, {} held, {} blocked)",
                c.paused, c.ready, c.queued, c.held, c.blocked
            ),
            Refusal::NoneReady { census: c } => write!(
                f,
                "nothing ready ({} queued, {} held, {} blocked)",
                c.queued, c.held, c.blocked
            ),
            Refusal::Drained { census: c } => write!(
                f,
                "drained: nothing can become ready ({} blocked behind a failed dependency)",
                c.blocked
            ),
        }
    }
}

/// The record that keeps the newest refusals a server answered
/// (`refusals:recent`, never granted), so that its status page shows them
/// after a restart too.
pub const REFUSALS_RECORD: &str = "refusals:recent";
/// The id prefix no other record may take.
pub const REFUSALS_PREFIX: &str = "refusals:";

/// One refusal as the status page lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefusalNote {
    pub task: crate::id::TaskId,
    /// The request refused (`claim`, `complete`, ...).
    pub request: crate::kinds::RequestKind,
    /// The refusal as answered (`{"refused": REASON, "message": ..., ...}`).
    pub refusal: serde_json::Value,
    pub at: Timestamp,
}

impl RefusalNote {
    /// The most notes the record keeps (the newest), and the most one
    /// request may add.
    pub const KEPT: usize = 50;
    /// The largest refusal a note holds, in bytes of JSON.
    pub const MAX_BYTES: usize = 16 * 1024;
}

/// The id of [`REFUSALS_RECORD`].
pub fn refusals_record_id() -> crate::id::TaskId {
    // A fixed id within every rule of ids (short, printable, no spaces).
    crate::id::Id::parse("task", REFUSALS_RECORD).expect("refusals:recent is a valid id")
}

#[cfg(test)]
mod tests {
    use super::Refusal;

    #[test]
    fn a_fence_never_granted_is_told_apart_from_a_stale_one() {
        let stale = Refusal::StaleFence {
            fence: 3,
            current_fence: Some(5),
        };
        assert_eq!(
            stale.to_string(),
            "fence 3 is stale; the current fence is 5"
        );
        let never = Refusal::StaleFence {
            fence: 7,
            current_fence: Some(1),
        };
        assert_eq!(
            never.to_string(),
            "fence 7 was never granted for this task; its current fence is 1"
        );
        assert_eq!(
            never.reason(),
            "stale_fence",
            "the same reason for a client"
        );
        let none = Refusal::StaleFence {
            fence: 7,
            current_fence: None,
        };
        assert!(none.to_string().contains("never granted"), "{none}");
    }
}
