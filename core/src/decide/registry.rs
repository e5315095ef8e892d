//! The registry requests (SPEC §6): declare, register, task claim, start,
//! heartbeat, succeed, task fail, retry.

use super::*;

/// Decides a registry request on an existing task.
pub(super) fn decide(op: &Operation, rec: &TaskRecord, live: bool, rules: LeaseRules) -> Verdict {
    let req = &op.request;
    let now = op.now;
    let actor = req.actor();
    match req {
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
            claim_like(op, rules, rec, live, executor, ttl_ms, EventKind::Claimed)
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
            let expires_at = match lease_end(now, ttl_ms, rules) {
                Ok(t) => t,
                Err(e) => return Verdict::Invalid(e),
            };
            let mut r = next(rec, now);
            r.current_step = *step;
            if let Some(l) = r.lease.as_mut() {
                l.expires_at = l.capped(expires_at);
            }
            let expires_at = r.lease.as_ref().map_or(expires_at, |l| l.expires_at);
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
            if rec.cancel_requested.is_none() && super::lease::retries(rec).is_some() {
                return super::lease::retry_later(rec, req, actor, Some(error.clone()), now);
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
        // Every other request is decided by another concern's module.
        _ => illegal(rec, req),
    }
}

pub(super) fn create_declared(
    op: &Operation,
    manifest: &crate::manifest::Manifest,
    node: crate::graph::Node,
) -> Change {
    let now = op.now;
    let mut r = first_record(&op.task, State::Declared, now);
    r.manifest = Some(manifest.clone());
    r.deadline_from = Some(now);
    r.node = Some(node);
    let mut details = json!({});
    if !manifest.source_oid.is_empty() {
        details["source_oid"] = json!(manifest.source_oid);
    }
    if !manifest.depends_on.is_empty() {
        details["depends_on"] = json!(manifest.depends_on);
    }
    let e = draft(&r, EventKind::Declared, None, op.request.actor(), None, now).details(details);
    finish(r, vec![e], false)
}
