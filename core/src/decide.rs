//! The transition engine's decision: a pure function of (record, lease
//! liveness, request, preconditions, actor, now). No IO, no clock.
//!
//! A store calls [`decide`] *inside* its atomic commit and applies what it
//! returns: first the settlement (what time already decided: an expired
//! lease, a passed start deadline), then the request's change, or the
//! refusal's CONFLICT_REFUSED event. Reads call [`derive`] and write nothing.

use crate::error::Error;
use crate::id::Id;
use crate::model::{
    Actor, Closure, EventDraft, EventKind, Lease, NotificationDraft, PENDING_FENCE, State,
    TaskRecord,
};
use crate::refusal::Refusal;
use crate::request::{DEFAULT_BARE_TTL_MS, Operation, Preconditions, Request, RequestKind};
use crate::time::Timestamp;
use serde_json::{Value, json};

/// A change to commit: the new record with its events and notifications.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub record: TaskRecord,
    pub events: Vec<EventDraft>,
    pub notifications: Vec<NotificationDraft>,
    /// The change holds a new grant whose fence the store assigns at commit
    /// ([`PENDING_FENCE`] stands in for it until [`Decision::assign_fence`]).
    pub mints_fence: bool,
}

/// What the request itself comes to.
// One Verdict is made per request and moved once; boxing the change would
// only add an allocation to the hot path.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Commit this change.
    Commit(Change),
    /// Nothing to change: an idempotent repeat (or a settle with nothing
    /// more to do). The answer is the current record.
    Ack,
    /// A typed no. `conflict` is the CONFLICT_REFUSED event to record, if any.
    Refuse {
        refusal: Refusal,
        conflict: Option<EventDraft>,
    },
    /// The input broke a rule that depends on the record (a TTL above the
    /// heartbeat timeout, a step that goes back). Nothing is written.
    Invalid(Error),
}

/// Everything a store must apply for one request, in one atomic commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The record as the request saw it (after settlement), if the task exists.
    pub current: Option<TaskRecord>,
    /// Derived changes (lease expiry, start deadline) persisted before the request.
    pub settle: Option<Change>,
    pub verdict: Verdict,
}

impl Decision {
    /// The record to store, if anything changes.
    pub fn record_to_write(&self) -> Option<&TaskRecord> {
        match &self.verdict {
            Verdict::Commit(c) => Some(&c.record),
            _ => self.settle.as_ref().map(|c| &c.record),
        }
    }

    /// The events to append, in order.
    pub fn events(&self) -> impl Iterator<Item = &EventDraft> {
        let settle = self.settle.iter().flat_map(|c| c.events.iter());
        let main: Box<dyn Iterator<Item = &EventDraft>> = match &self.verdict {
            Verdict::Commit(c) => Box::new(c.events.iter()),
            Verdict::Refuse {
                conflict: Some(e), ..
            } => Box::new(std::iter::once(e)),
            _ => Box::new(std::iter::empty()),
        };
        settle.chain(main)
    }

    /// The notifications to put in the outbox, in order.
    pub fn notifications(&self) -> impl Iterator<Item = &NotificationDraft> {
        let settle = self.settle.iter().flat_map(|c| c.notifications.iter());
        let main = match &self.verdict {
            Verdict::Commit(c) => c.notifications.as_slice(),
            _ => &[],
        };
        settle.chain(main.iter())
    }

    /// Whether the commit needs anything written at all.
    pub fn writes(&self) -> bool {
        self.record_to_write().is_some() || self.events().next().is_some()
    }

    /// Whether the store must assign a new fence at commit.
    pub fn mints_fence(&self) -> bool {
        matches!(&self.verdict, Verdict::Commit(c) if c.mints_fence)
    }

    /// Fills in the fence the store assigned, in the record, its events and
    /// its notifications alike.
    pub fn assign_fence(&mut self, fence: u64) {
        if let Verdict::Commit(c) = &mut self.verdict {
            if !c.mints_fence {
                return;
            }
            if let Some(lease) = c.record.lease.as_mut()
                && lease.fence == PENDING_FENCE
            {
                lease.fence = fence;
            }
            for e in &mut c.events {
                if e.fence == Some(PENDING_FENCE) {
                    e.fence = Some(fence);
                }
            }
            for n in &mut c.notifications {
                if n.payload.get("fence") == Some(&json!(PENDING_FENCE)) {
                    n.payload["fence"] = json!(fence);
                }
            }
        }
    }
}

/// The record as it is at `now`: an expired lease shows as such, a passed
/// start deadline as NOT_STARTED. Reads use this; it never writes.
pub fn derive(record: &TaskRecord, lease_live: bool, now: Timestamp) -> TaskRecord {
    match settle(record, lease_live, now) {
        Some(c) => c.record,
        None => record.clone(),
    }
}

/// What time has already decided about `record`, as a change to persist:
/// an expired lease stalls its attempt (claimable again while
/// `stalls < max_attempts`, else STALLED), and a passed start deadline makes
/// a DECLARED or REGISTERED task NOT_STARTED. `None` when nothing is due.
pub fn settle(record: &TaskRecord, lease_live: bool, now: Timestamp) -> Option<Change> {
    let mut r = record.clone();
    let mut events = Vec::new();
    if r.state.is_held() && !lease_live {
        let from = r.state;
        let (fence, expired_at) = match &r.lease {
            Some(l) => (Some(l.fence), l.expires_at),
            None => (None, now),
        };
        r.stalls = r.stalls.saturating_add(1);
        let again = r.max_attempts().is_none_or(|max| r.stalls < max);
        if again {
            r.state = State::Registered;
            r.current_step = 0;
            // The start deadline counts afresh from when the attempt ended.
            r.deadline_from = Some(expired_at.min(now));
        } else {
            r.state = State::Stalled;
            r.finished_at = Some(now);
            r.error = Some(json!({"code": "lease_expired", "expired_at": expired_at}));
            r.closure = Some(Closure {
                request: RequestKind::Expire,
                actor: Actor::System,
                fence,
            });
        }
        events.push(
            draft(
                &r,
                EventKind::Stalled,
                Some(from),
                Actor::System,
                fence,
                now,
            )
            .details(json!({
                "expired_at": expired_at,
                "stalls": r.stalls,
                "max_attempts": r.max_attempts(),
            })),
        );
    }
    if matches!(r.state, State::Declared | State::Registered)
        && r.due_at().is_some_and(|due| due <= now)
    {
        let from = r.state;
        let due = r.due_at().unwrap_or(now);
        r.state = State::NotStarted;
        r.finished_at = Some(now);
        r.error = Some(json!({"code": "start_deadline_exceeded", "deadline": due}));
        r.closure = Some(Closure {
            request: RequestKind::Deadline,
            actor: Actor::System,
            fence: None,
        });
        events.push(
            draft(
                &r,
                EventKind::NotStarted,
                Some(from),
                Actor::System,
                None,
                now,
            )
            .details(json!({"deadline": due})),
        );
    }
    if events.is_empty() {
        return None;
    }
    r.revision += 1;
    r.updated_at = now;
    Some(finish(r, events, false))
}

/// Decides one request. Pure: the same inputs give the same decision.
///
/// `current` is the stored record (`None` if the task does not exist) and
/// `lease_live` whether its lease is live, as the store judges it (from the
/// stored expiry and `op.now`, or from the engine's own leases).
pub fn decide(op: &Operation, current: Option<&TaskRecord>, lease_live: bool) -> Decision {
    let settle = current.and_then(|r| settle(r, lease_live, op.now));
    let rec = settle.as_ref().map(|c| &c.record).or(current);
    let live = lease_live && rec.is_some_and(|r| r.state.is_held());
    let verdict = match op.request.validate() {
        Err(e) => Verdict::Invalid(e),
        Ok(()) => decide_request(op, rec, live),
    };
    Decision {
        current: rec.cloned(),
        settle,
        verdict,
    }
}

fn decide_request(op: &Operation, rec: Option<&TaskRecord>, live: bool) -> Verdict {
    let req = &op.request;
    let now = op.now;
    let actor = req.actor();
    // Authority first, so a refusal says why rather than blaming the state.
    if matches!(
        req,
        Request::Redispatch { .. } | Request::Finalize { .. } | Request::Cancel { fence: None, .. }
    ) && !actor.is_operator()
    {
        return refuse(Refusal::OperatorRequired {
            request: req.kind(),
        });
    }
    if let Request::Declare { manifest } = req
        && manifest.task_id != op.task
    {
        return Verdict::Invalid(Error::invalid(
            "task_id",
            format!(
                "the manifest declares {:?}, not {:?}",
                manifest.task_id.as_str(),
                op.task.as_str()
            ),
        ));
    }
    if let Some(refusal) = check_preconditions(&op.pre, rec) {
        return refuse(refusal);
    }
    let Some(rec) = rec else {
        return match req {
            Request::Claim { owner, ttl_ms } | Request::Recover { owner, ttl_ms } => {
                let kind = if matches!(req, Request::Claim { .. }) {
                    EventKind::Claimed
                } else {
                    EventKind::Recovered
                };
                create_bare(op, owner, ttl_ms.unwrap_or(DEFAULT_BARE_TTL_MS), kind)
            }
            Request::Declare { manifest } => Verdict::Commit(create_declared(op, manifest)),
            _ => refuse(Refusal::NotFound),
        };
    };
    if req.is_holder_only()
        && let Some(v) = check_holder(op, rec, live)
    {
        return v;
    }
    match req {
        Request::Claim { owner, ttl_ms } => {
            if !rec.is_bare() {
                return illegal(rec, req);
            }
            claim_like(
                op,
                rec,
                live,
                owner,
                ttl_ms.unwrap_or(DEFAULT_BARE_TTL_MS),
                EventKind::Claimed,
            )
        }
        Request::Recover { owner, ttl_ms } => {
            if live {
                // Invariant: live implies a lease.
                return match &rec.lease {
                    Some(l) => refuse(Refusal::LeaseLive {
                        holder: l.owner.clone(),
                        fence: l.fence,
                        expiry: l.expires_at,
                    }),
                    None => illegal(rec, req),
                };
            }
            if !rec.is_bare() && (rec.lease.is_none() || rec.state != State::Registered) {
                return match rec.state {
                    State::Succeeded => refuse(Refusal::Completed),
                    _ => illegal(rec, req),
                };
            }
            let ttl_ms = match declared_ttl(rec, *ttl_ms) {
                Ok(t) => t,
                Err(e) => return Verdict::Invalid(e),
            };
            claim_like(op, rec, live, owner, ttl_ms, EventKind::Recovered)
        }
        Request::Renew { ttl_ms, .. } => {
            let ttl_ms = match declared_ttl(rec, *ttl_ms) {
                Ok(t) => t,
                Err(e) => return Verdict::Invalid(e),
            };
            let expires_at = match lease_end(now, ttl_ms) {
                Ok(t) => t,
                Err(e) => return Verdict::Invalid(e),
            };
            let mut r = next(rec, now);
            if let Some(l) = r.lease.as_mut() {
                l.expires_at = expires_at;
            }
            let e = draft(
                &r,
                EventKind::Renewed,
                Some(rec.state),
                actor,
                req.fence(),
                now,
            )
            .details(json!({"expires_at": expires_at}));
            commit(r, vec![e])
        }
        Request::Release { .. } => {
            let mut r = next(rec, now);
            r.state = State::Registered;
            r.current_step = 0;
            r.deadline_from = Some(now);
            let e = draft(
                &r,
                EventKind::Released,
                Some(rec.state),
                actor,
                req.fence(),
                now,
            );
            commit(r, vec![e])
        }
        Request::Complete { .. } | Request::Fail { .. } => {
            if !rec.is_bare() {
                return illegal(rec, req);
            }
            let (to, kind, error) = match req {
                Request::Fail { error, .. } => (State::Failed, EventKind::Failed, error.clone()),
                _ => (State::Succeeded, EventKind::Succeeded, None),
            };
            close(rec, req, actor, to, kind, now, |r| {
                if error.is_some() {
                    r.error = error;
                }
            })
        }
        Request::Cancel { fence: Some(_), .. } => close(
            rec,
            req,
            actor,
            State::Cancelled,
            EventKind::Cancelled,
            now,
            |_| {},
        ),
        Request::Cancel { fence: None, .. } => {
            if rec.state == State::Cancelled {
                return Verdict::Ack;
            }
            if rec.state.is_terminal() {
                return illegal(rec, req);
            }
            close(
                rec,
                req,
                actor,
                State::Cancelled,
                EventKind::Cancelled,
                now,
                |_| {},
            )
        }
        Request::Declare { manifest } => {
            let Some(stored) = &rec.manifest else {
                return refuse(Refusal::ManifestConflict);
            };
            if stored == manifest {
                return Verdict::Ack;
            }
            if rec.state != State::NotStarted || !stored.differs_only_in_source_oid(manifest) {
                return refuse(Refusal::ManifestConflict);
            }
            let mut r = next(rec, now);
            r.manifest = Some(manifest.clone());
            let e = draft(
                &r,
                EventKind::ManifestSuperseded,
                Some(rec.state),
                actor,
                None,
                now,
            )
            .details(json!({
                "previous_source_oid": stored.source_oid,
                "source_oid": manifest.source_oid,
            }));
            commit(r, vec![e])
        }
        Request::Register { run_id } => {
            if rec.is_bare() {
                return illegal(rec, req);
            }
            match rec.state {
                State::Declared => {
                    let mut r = next(rec, now);
                    r.state = State::Registered;
                    r.run_id = Some(run_id.clone());
                    r.deadline_from = Some(now);
                    let e = draft(&r, EventKind::Registered, Some(rec.state), actor, None, now)
                        .details(json!({"run_id": run_id}));
                    commit(r, vec![e])
                }
                State::Registered if rec.run_id.as_ref() == Some(run_id) && rec.lease.is_none() => {
                    Verdict::Ack
                }
                _ => illegal(rec, req),
            }
        }
        Request::TaskClaim {
            run_id,
            executor,
            ttl_ms,
        } => {
            if rec.is_bare() {
                return illegal(rec, req);
            }
            let ttl_ms = match declared_ttl(rec, *ttl_ms) {
                Ok(t) => t,
                Err(e) => return Verdict::Invalid(e),
            };
            if rec.state == State::Succeeded {
                return refuse(Refusal::Completed);
            }
            if rec.state.is_terminal() || rec.state == State::Declared {
                return illegal(rec, req);
            }
            if let Some(r) = run_mismatch(rec, run_id) {
                return refuse(r);
            }
            claim_like(op, rec, live, executor, ttl_ms, EventKind::Claimed)
        }
        Request::Start { run_id, .. } => {
            if rec.is_bare() {
                return illegal(rec, req);
            }
            if let Some(r) = run_mismatch(rec, run_id) {
                return refuse(r);
            }
            match rec.state {
                State::Running => Verdict::Ack,
                State::Claimed => {
                    let mut r = next(rec, now);
                    r.state = State::Running;
                    r.current_step = 1;
                    r.started_at = Some(now);
                    let e = draft(
                        &r,
                        EventKind::Started,
                        Some(rec.state),
                        actor,
                        req.fence(),
                        now,
                    );
                    commit(r, vec![e])
                }
                _ => illegal(rec, req),
            }
        }
        Request::Heartbeat {
            run_id,
            step,
            ttl_ms,
            ..
        } => {
            if rec.is_bare() {
                return illegal(rec, req);
            }
            if let Some(r) = run_mismatch(rec, run_id) {
                return refuse(r);
            }
            if rec.state != State::Running {
                return illegal(rec, req);
            }
            let ttl_ms = match declared_ttl(rec, *ttl_ms) {
                Ok(t) => t,
                Err(e) => return Verdict::Invalid(e),
            };
            let total = rec.total_steps();
            if *step == 0 || *step > total {
                return Verdict::Invalid(Error::invalid(
                    "step",
                    format!("must be from 1 to {total} (got {step})"),
                ));
            }
            if *step < rec.current_step {
                return Verdict::Invalid(Error::invalid(
                    "step",
                    format!(
                        "never goes back: step {} is already reached (got {step})",
                        rec.current_step
                    ),
                ));
            }
            let expires_at = match lease_end(now, ttl_ms) {
                Ok(t) => t,
                Err(e) => return Verdict::Invalid(e),
            };
            let mut r = next(rec, now);
            r.current_step = *step;
            if let Some(l) = r.lease.as_mut() {
                l.expires_at = expires_at;
            }
            let e = draft(
                &r,
                EventKind::Heartbeat,
                Some(rec.state),
                actor,
                req.fence(),
                now,
            )
            .details(json!({"step": step, "expires_at": expires_at}));
            commit(r, vec![e])
        }
        Request::Succeed {
            run_id, evidence, ..
        } => {
            if rec.is_bare() {
                return illegal(rec, req);
            }
            if let Some(r) = run_mismatch(rec, run_id) {
                return refuse(r);
            }
            if rec.state != State::Running {
                return illegal(rec, req);
            }
            let total = rec.total_steps();
            if rec.current_step < total {
                return refuse(Refusal::StepsIncomplete {
                    current_step: rec.current_step,
                    total_steps: total,
                });
            }
            let missing: Vec<String> = rec
                .manifest
                .iter()
                .flat_map(|m| m.required_evidence.iter())
                .filter(|k| !evidence.contains_key(*k))
                .cloned()
                .collect();
            if !missing.is_empty() {
                return refuse(Refusal::EvidenceMissing { keys: missing });
            }
            close(
                rec,
                req,
                actor,
                State::Succeeded,
                EventKind::Succeeded,
                now,
                |r| {
                    r.evidence = evidence.clone();
                },
            )
        }
        Request::TaskFail { run_id, error, .. } => {
            if rec.is_bare() {
                return illegal(rec, req);
            }
            if let Some(r) = run_mismatch(rec, run_id) {
                return refuse(r);
            }
            close(
                rec,
                req,
                actor,
                State::Failed,
                EventKind::Failed,
                now,
                |r| r.error = Some(error.clone()),
            )
        }
        Request::Retry { run_id } => {
            if rec.is_bare() || rec.state != State::NotStarted {
                return illegal(rec, req);
            }
            let mut r = next(rec, now);
            r.state = State::Registered;
            reset_attempt_state(&mut r, now);
            r.run_id = Some(run_id.clone());
            let e =
                draft(&r, EventKind::Retried, Some(rec.state), actor, None, now).details(json!({
                    "previous_run_id": rec.run_id,
                    "run_id": run_id,
                    "previous_error": rec.error,
                }));
            commit(r, vec![e])
        }
        Request::Redispatch { iteration, .. } => {
            match rec.state {
                State::Succeeded => return refuse(Refusal::Completed),
                State::Failed | State::Cancelled | State::Stalled | State::NotStarted => {}
                _ => return illegal(rec, req),
            }
            if *iteration <= rec.iteration {
                return refuse(Refusal::IterationNotAdvanced {
                    iteration: *iteration,
                    current_iteration: rec.iteration,
                });
            }
            let mut r = next(rec, now);
            r.state = State::Registered;
            reset_attempt_state(&mut r, now);
            r.iteration = *iteration;
            r.stalls = 0;
            let e = draft(
                &r,
                EventKind::Redispatched,
                Some(rec.state),
                actor,
                None,
                now,
            )
            .details(json!({"previous_iteration": rec.iteration, "iteration": iteration}));
            commit(r, vec![e])
        }
        Request::Finalize { error, .. } => {
            if rec.state == State::Succeeded {
                return refuse(Refusal::Completed);
            }
            if rec
                .closure
                .as_ref()
                .is_some_and(|c| c.request == RequestKind::Finalize)
            {
                return Verdict::Ack;
            }
            let error = error
                .clone()
                .or_else(|| rec.error.clone())
                .unwrap_or_else(|| json!({"code": "finalized"}));
            close(
                rec,
                req,
                actor,
                State::Failed,
                EventKind::Finalized,
                now,
                |r| r.error = Some(error),
            )
        }
        Request::Annotate { metadata, .. } => {
            let mut r = next(rec, now);
            r.metadata
                .extend(metadata.iter().map(|(k, v)| (k.clone(), v.clone())));
            let keys: Vec<&String> = metadata.keys().collect();
            let e = draft(&r, EventKind::Annotated, Some(rec.state), actor, None, now)
                .details(json!({"keys": keys}));
            commit(r, vec![e])
        }
        Request::Settle => Verdict::Ack,
    }
}

/// Grant (or re-grant) `owner` the task: a new fence always; a new attempt
/// unless the owner already holds the live lease.
fn claim_like(
    op: &Operation,
    rec: &TaskRecord,
    live: bool,
    owner: &Id,
    ttl_ms: u64,
    kind: EventKind,
) -> Verdict {
    let req = &op.request;
    let expires_at = match lease_end(op.now, ttl_ms) {
        Ok(t) => t,
        Err(e) => return Verdict::Invalid(e),
    };
    if live {
        let Some(l) = &rec.lease else {
            return illegal(rec, req);
        };
        if &l.owner != owner {
            return refuse(Refusal::Held {
                holder: l.owner.clone(),
                fence: l.fence,
                expiry: l.expires_at,
            });
        }
        // The holder claims again: a new fence makes its earlier one stale.
        let mut r = next(rec, op.now);
        r.lease = Some(Lease {
            owner: owner.clone(),
            attempt: rec.attempt,
            fence: PENDING_FENCE,
            expires_at,
            claimed_at: op.now,
        });
        let e = draft(
            &r,
            kind,
            Some(rec.state),
            req.actor(),
            Some(PENDING_FENCE),
            op.now,
        )
        .details(json!({"regrant": true, "previous_fence": l.fence, "expires_at": expires_at}));
        return commit_grant(r, vec![e]);
    }
    match rec.state {
        State::Succeeded => return refuse(Refusal::Completed),
        State::Registered => {}
        _ => return illegal(rec, req),
    }
    let mut r = next(rec, op.now);
    r.state = State::Claimed;
    r.attempt += 1;
    r.current_step = 0;
    if !r.is_bare() {
        r.executor = Some(owner.clone());
    }
    r.lease = Some(Lease {
        owner: owner.clone(),
        attempt: r.attempt,
        fence: PENDING_FENCE,
        expires_at,
        claimed_at: op.now,
    });
    let previous = rec.lease.as_ref().map(|l| l.fence);
    let e = draft(
        &r,
        kind,
        Some(rec.state),
        req.actor(),
        Some(PENDING_FENCE),
        op.now,
    )
    .details(json!({"previous_fence": previous, "expires_at": expires_at}));
    commit_grant(r, vec![e])
}

fn create_bare(op: &Operation, owner: &Id, ttl_ms: u64, kind: EventKind) -> Verdict {
    let now = op.now;
    let expires_at = match lease_end(now, ttl_ms) {
        Ok(t) => t,
        Err(e) => return Verdict::Invalid(e),
    };
    let r = TaskRecord {
        task: op.task.clone(),
        manifest: None,
        state: State::Claimed,
        revision: 1,
        attempt: 1,
        stalls: 0,
        iteration: 1,
        lease: Some(Lease {
            owner: owner.clone(),
            attempt: 1,
            fence: PENDING_FENCE,
            expires_at,
            claimed_at: now,
        }),
        run_id: None,
        executor: None,
        current_step: 0,
        evidence: Default::default(),
        error: None,
        metadata: Default::default(),
        closure: None,
        created_at: now,
        deadline_from: None,
        started_at: None,
        finished_at: None,
        updated_at: now,
    };
    let e = draft(&r, kind, None, op.request.actor(), Some(PENDING_FENCE), now)
        .details(json!({"expires_at": expires_at}));
    Verdict::Commit(finish(r, vec![e], true))
}

/// When a lease granted or renewed at `now` for `ttl_ms` ends: an expiry past
/// what a timestamp can hold is bad input, never a wrapped or saturated time.
fn lease_end(now: Timestamp, ttl_ms: u64) -> Result<Timestamp, Error> {
    now.checked_plus_ms(ttl_ms).ok_or_else(|| {
        Error::invalid(
            "ttl",
            format!(
                "the lease would end past {} (now {now}, ttl {ttl_ms}ms)",
                Timestamp::MAX
            ),
        )
    })
}

fn create_declared(op: &Operation, manifest: &crate::manifest::Manifest) -> Change {
    let now = op.now;
    let r = TaskRecord {
        task: op.task.clone(),
        manifest: Some(manifest.clone()),
        state: State::Declared,
        revision: 1,
        attempt: 0,
        stalls: 0,
        iteration: 1,
        lease: None,
        run_id: None,
        executor: None,
        current_step: 0,
        evidence: Default::default(),
        error: None,
        metadata: Default::default(),
        closure: None,
        created_at: now,
        deadline_from: Some(now),
        started_at: None,
        finished_at: None,
        updated_at: now,
    };
    let e = draft(&r, EventKind::Declared, None, op.request.actor(), None, now)
        .details(json!({"source_oid": manifest.source_oid}));
    finish(r, vec![e], false)
}

/// The checks every holder-only request shares: the fence is the current
/// one, the caller owns it, the lease is live; an exact repeat of the
/// request that closed the task is an acknowledgement.
fn check_holder(op: &Operation, rec: &TaskRecord, live: bool) -> Option<Verdict> {
    let req = &op.request;
    let fence = req.fence()?;
    let owner = match req.actor() {
        Actor::Worker(id) | Actor::Operator(id) => id,
        Actor::System => return Some(illegal(rec, req)),
    };
    let Some(lease) = &rec.lease else {
        return Some(conflict(op, rec, Refusal::NotHolder { holder: None }));
    };
    if fence != lease.fence {
        return Some(conflict(
            op,
            rec,
            Refusal::StaleFence {
                fence,
                current_fence: Some(lease.fence),
            },
        ));
    }
    if owner != lease.owner {
        return Some(conflict(
            op,
            rec,
            Refusal::NotHolder {
                holder: Some(lease.owner.clone()),
            },
        ));
    }
    if let Some(c) = &rec.closure
        && c.request == req.kind()
        && c.fence == Some(fence)
    {
        return Some(Verdict::Ack);
    }
    if !live {
        if op.now >= lease.expires_at {
            return Some(conflict(
                op,
                rec,
                Refusal::LeaseExpired {
                    fence,
                    expired_at: lease.expires_at,
                },
            ));
        }
        let v = illegal(rec, req);
        // A late request after a terminal is audited; one after a release is just refused.
        return Some(if rec.state.is_terminal() {
            with_conflict(op, rec, v)
        } else {
            v
        });
    }
    None
}

fn check_preconditions(pre: &Preconditions, rec: Option<&TaskRecord>) -> Option<Refusal> {
    let failed = |which: &str, expected: String, actual: String| {
        Some(Refusal::PreconditionFailed {
            which: which.to_owned(),
            expected,
            actual,
        })
    };
    let none = || "no record".to_owned();
    if let Some(s) = pre.expected_state {
        match rec {
            Some(r) if r.state == s => {}
            Some(r) => return failed("expected_state", s.to_string(), r.state.to_string()),
            None => return failed("expected_state", s.to_string(), none()),
        }
    }
    if let Some(v) = pre.expected_revision {
        match rec {
            Some(r) if r.revision == v => {}
            Some(r) => return failed("expected_revision", v.to_string(), r.revision.to_string()),
            None => return failed("expected_revision", v.to_string(), none()),
        }
    }
    if let Some(v) = pre.expected_attempt {
        match rec {
            Some(r) if r.attempt == v => {}
            Some(r) => return failed("expected_attempt", v.to_string(), r.attempt.to_string()),
            None => return failed("expected_attempt", v.to_string(), none()),
        }
    }
    if let Some(v) = pre.expected_fence {
        match rec.and_then(|r| r.current_fence()) {
            Some(f) if f == v => {}
            Some(f) => return failed("expected_fence", v.to_string(), f.to_string()),
            None => return failed("expected_fence", v.to_string(), "no fence".to_owned()),
        }
    }
    None
}

/// The lease TTL for `rec`: a declared task's defaults to, and may not
/// exceed, its heartbeat timeout; a bare task's defaults to 30 s.
fn declared_ttl(rec: &TaskRecord, ttl_ms: Option<u64>) -> Result<u64, Error> {
    match &rec.manifest {
        None => Ok(ttl_ms.unwrap_or(DEFAULT_BARE_TTL_MS)),
        Some(m) => {
            let max = m.heartbeat_timeout_ms();
            match ttl_ms {
                None => Ok(max),
                Some(t) if t <= max => Ok(t),
                Some(t) => Err(Error::invalid(
                    "ttl",
                    format!(
                        "must not exceed the task's heartbeat_timeout_seconds ({}s, got {t}ms)",
                        m.heartbeat_timeout_seconds
                    ),
                )),
            }
        }
    }
}

fn run_mismatch(rec: &TaskRecord, run_id: &Id) -> Option<Refusal> {
    if rec.run_id.as_ref() == Some(run_id) {
        return None;
    }
    Some(Refusal::PreconditionFailed {
        which: "run_id".to_owned(),
        expected: run_id.to_string(),
        actual: rec
            .run_id
            .as_ref()
            .map_or_else(|| "no run".to_owned(), |r| r.to_string()),
    })
}

/// A holder's or operator's terminal request.
fn close(
    rec: &TaskRecord,
    req: &Request,
    actor: Actor,
    to: State,
    kind: EventKind,
    now: Timestamp,
    apply: impl FnOnce(&mut TaskRecord),
) -> Verdict {
    if rec.state.is_terminal() && req.kind() != RequestKind::Finalize {
        return illegal(rec, req);
    }
    let mut r = next(rec, now);
    r.state = to;
    r.finished_at = Some(now);
    r.closure = Some(Closure {
        request: req.kind(),
        actor: actor.clone(),
        fence: req.fence(),
    });
    apply(&mut r);
    let e = draft(
        &r,
        kind,
        Some(rec.state),
        actor,
        req.fence().or(rec.current_fence()),
        now,
    );
    commit(r, vec![e])
}

fn reset_attempt_state(r: &mut TaskRecord, now: Timestamp) {
    r.deadline_from = Some(now);
    r.current_step = 0;
    r.evidence.clear();
    r.error = None;
    r.closure = None;
    r.started_at = None;
    r.finished_at = None;
    r.executor = None;
}

/// The next version of `rec`: revision + 1, stamped `now`.
fn next(rec: &TaskRecord, now: Timestamp) -> TaskRecord {
    let mut r = rec.clone();
    r.revision += 1;
    r.updated_at = now;
    r
}

fn refuse(refusal: Refusal) -> Verdict {
    Verdict::Refuse {
        refusal,
        conflict: None,
    }
}

fn illegal(rec: &TaskRecord, req: &Request) -> Verdict {
    refuse(Refusal::IllegalTransition {
        state: rec.state,
        request: req.kind(),
    })
}

/// A refusal recorded as a CONFLICT_REFUSED event (counted per task, fence and request).
fn conflict(op: &Operation, rec: &TaskRecord, refusal: Refusal) -> Verdict {
    with_conflict(op, rec, refuse(refusal))
}

fn with_conflict(op: &Operation, rec: &TaskRecord, v: Verdict) -> Verdict {
    let Verdict::Refuse { refusal, .. } = v else {
        return v;
    };
    let fence = op.request.fence();
    let mut e = draft(
        rec,
        EventKind::ConflictRefused,
        Some(rec.state),
        op.request.actor(),
        fence,
        op.now,
    )
    .details(json!({
        "request": op.request.kind(),
        "reason": refusal.reason(),
        "refusal": refusal,
    }));
    e.to = Some(rec.state);
    e.conflict_key = Some(format!("{}:{}", fence.unwrap_or(0), op.request.kind()));
    Verdict::Refuse {
        refusal,
        conflict: Some(e),
    }
}

fn commit(r: TaskRecord, events: Vec<EventDraft>) -> Verdict {
    Verdict::Commit(finish(r, events, false))
}

fn commit_grant(r: TaskRecord, events: Vec<EventDraft>) -> Verdict {
    Verdict::Commit(finish(r, events, true))
}

/// Attaches the notifications the manifest asks for to a change.
fn finish(record: TaskRecord, events: Vec<EventDraft>, mints_fence: bool) -> Change {
    let notifications = match &record.manifest {
        None => Vec::new(),
        Some(m) => events
            .iter()
            .filter(|e| {
                // By event type, or by entering a state whose event is subscribed
                // (a finalize enters FAILED); staying in a state notifies nothing.
                m.notification_events.contains(&e.kind)
                    || (e.from != e.to
                        && e.to
                            .and_then(state_event)
                            .is_some_and(|k| m.notification_events.contains(&k)))
            })
            .map(|e| NotificationDraft {
                intent_id: intent_id(&record, e.kind),
                task: record.task.clone(),
                kind: e.kind,
                payload: json!({
                    "task": record.task,
                    "event": e.kind,
                    "from": e.from,
                    "to": e.to,
                    "revision": record.revision,
                    "attempt": record.attempt,
                    "iteration": record.iteration,
                    "fence": e.fence,
                    "owner_notification_ref": m.owner_notification_ref,
                }),
                at: e.at,
            })
            .collect(),
    };
    Change {
        record,
        events,
        notifications,
        mints_fence,
    }
}

/// The event that announces entering a terminal or running state, for
/// matching a manifest's `notification_events` by state.
fn state_event(s: State) -> Option<EventKind> {
    match s {
        State::Running => Some(EventKind::Started),
        State::Succeeded => Some(EventKind::Succeeded),
        State::Failed => Some(EventKind::Failed),
        State::Cancelled => Some(EventKind::Cancelled),
        State::NotStarted => Some(EventKind::NotStarted),
        State::Stalled => Some(EventKind::Stalled),
        _ => None,
    }
}

/// A stable intent id: the same task, revision and event always give the
/// same id, so a redelivered notification is recognised as a repeat.
fn intent_id(record: &TaskRecord, kind: EventKind) -> String {
    let name = format!("{}\u{0}{}\u{0}{}", record.task, record.revision, kind);
    uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, name.as_bytes()).to_string()
}

/// Builds an event for `r` (its state after the change is `to`).
fn draft(
    r: &TaskRecord,
    kind: EventKind,
    from: Option<State>,
    actor: Actor,
    fence: Option<u64>,
    at: Timestamp,
) -> EventDraft {
    EventDraft {
        task: r.task.clone(),
        kind,
        from,
        to: Some(r.state),
        actor,
        attempt: r.attempt,
        fence,
        details: Value::Null,
        at,
        conflict_key: None,
    }
}

trait WithDetails {
    fn details(self, d: Value) -> Self;
}

impl WithDetails for EventDraft {
    fn details(mut self, d: Value) -> Self {
        self.details = d;
        self
    }
}
