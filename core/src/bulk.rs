//! An operator's act on every failed task of a queue (the page's "retry
//! failed" and "discard failed", `queue retry-failed`, `queue
//! discard-failed`): each task its own request through the store, decided
//! on its own record, so one a worker or another operator changed
//! meanwhile is refused on its own and the rest go on.

use super::*;

/// What is done to each of a queue's failed tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bulk {
    /// Redispatched as its next iteration: ready again, a new attempt.
    Retry,
    /// Forgotten now: its body and events go, its tombstone stays
    /// ([`Request::Prune`] with the time of the act).
    Discard,
}

/// What a bulk act came to.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct BulkOutcome {
    /// How many tasks it retried or discarded.
    pub done: u64,
    /// The tasks refused (changed since they were read), at most
    /// [`BulkOutcome::NAMED`] named, with why.
    pub refused: Vec<(TaskId, String)>,
    /// Whether failed tasks are left past the act's `max`.
    pub more: bool,
}

impl BulkOutcome {
    /// The most refused tasks an outcome names.
    pub const NAMED: usize = 20;
}

impl<S: Store> Authority<S> {
    /// Retries or discards ([`Bulk`]) each task of `queue` that ended
    /// failed for good ([`State::is_dead_letter`]: FAILED, STALLED,
    /// NOT_STARTED), at most `max`, as `by` (an operator's act: refused
    /// up front otherwise, whether or not any task failed).
    pub async fn bulk_failed(
        &self,
        queue: &Id,
        act: Bulk,
        by: Actor,
        max: usize,
    ) -> Result<BulkOutcome> {
        let now = self.clock.now();
        // For a task in its iteration `iteration`.
        let request = |iteration: u64| match act {
            Bulk::Retry => Request::Redispatch {
                by: by.clone(),
                iteration: iteration + 1,
            },
            Bulk::Discard => Request::Prune {
                by: by.clone(),
                before: now,
                forget_after_ms: None,
            },
        };
        let what = match act {
            Bulk::Retry => "a retry",
            Bulk::Discard => "a discard",
        };
        Self::may_act(
            request(1),
            now,
            &format!("{what} of queue {queue}'s failed tasks"),
        )?;
        let mut out = BulkOutcome::default();
        let mut tried = 0usize;
        for state in State::ALL.into_iter().filter(|s| s.is_dead_letter()) {
            let mut after: Option<String> = None;
            loop {
                let page = self
                    .list_in(Some(state), Some(queue), after.as_deref(), BULK_PAGE)
                    .await?;
                for r in &page.items {
                    if r.pruned_at.is_some() {
                        continue;
                    }
                    if tried == max {
                        out.more = true;
                        return Ok(out);
                    }
                    tried += 1;
                    match self
                        .submit(&r.task, request(r.iteration), Preconditions::none())
                        .await?
                    {
                        Reply::Refused(why) => {
                            if out.refused.len() < BulkOutcome::NAMED {
                                out.refused.push((r.task.clone(), why.to_string()));
                            }
                        }
                        Reply::Acknowledged(_) => {}
                        Reply::Committed(_) => out.done += 1,
                    }
                }
                match page.next {
                    Some(next) if !page.items.is_empty() => after = Some(next),
                    _ => break,
                }
            }
        }
        Ok(out)
    }
}

/// How many failed tasks one read of a queue's takes.
const BULK_PAGE: usize = 200;
