//! The checks requests share: the holder's fence and lease, proved
//! preconditions, the run a declared task is bound to, the TTL it may have.

use super::*;

/// The checks every holder-only request shares: the fence is the current
/// one, the caller owns it, the lease is live; an exact repeat of the
/// request that closed the task is an acknowledgement.
pub(super) fn check_holder(op: &Operation, rec: &TaskRecord, live: bool) -> Option<Verdict> {
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
        // Expired as the store's judge found it (the settlement marks it),
        // not as the caller's clock would have it.
        if lease.expired {
            let refusal = if lease.timed_out() {
                Refusal::TimedOut {
                    fence,
                    at: lease.expires_at,
                }
            } else {
                Refusal::LeaseExpired {
                    fence,
                    expired_at: lease.expires_at,
                }
            };
            return Some(conflict(op, rec, refusal));
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

pub(super) fn check_preconditions(
    pre: &Preconditions,
    rec: Option<&TaskRecord>,
) -> Option<Refusal> {
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
pub(super) fn declared_ttl(rec: &TaskRecord, ttl_ms: Option<u64>) -> Result<u64, Error> {
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

pub(super) fn run_mismatch(rec: &TaskRecord, run_id: &Id) -> Option<Refusal> {
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
