//! Who may ask what, when the caller is authenticated (a server with a
//! token file): the rule every transport applies the same way.
//!
//! Without authentication "operator" is a declared role ([`Actor::Operator`]
//! names whoever says so) and file permissions are the boundary. With it,
//! a caller is a name and a role proved by a token, and:
//!
//! * an operator's request (redispatch, finalize, a cancel that is not the
//!   holder's own, a sweep's settle, an outbox acknowledgement) needs the
//!   operator role;
//! * the actor such a request records is the token's name, whatever the
//!   request says;
//! * follow-ups a store writes for itself (`link`, `wake`) are never
//!   accepted from a caller.

use crate::error::{Error, Result};
use crate::id::Id;
use crate::kinds::Actor;
use crate::request::{Operation, Request};
use std::fmt;

/// What a token lets its bearer do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Claims, reports and reads: a worker acting for itself.
    Worker,
    /// Everything a worker may, and the operator's requests.
    Operator,
}

impl Role {
    pub fn parse(text: &str) -> Option<Role> {
        match text {
            "worker" => Some(Role::Worker),
            "operator" => Some(Role::Operator),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Worker => "worker",
            Role::Operator => "operator",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An authenticated caller: the name and role its token proves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub name: Id,
    pub role: Role,
}

/// Whether `request` is an operator's to make.
pub fn needs_operator(request: &Request) -> bool {
    match request {
        Request::Redispatch { .. } | Request::Finalize { .. } | Request::Settle => true,
        Request::Cancel { by, fence } => fence.is_none() || by.is_operator(),
        _ => false,
    }
}

fn not_permitted(caller: &Caller, what: &str) -> Error {
    Error::not_permitted(format!(
        "{what} needs an operator's token; {} has the {} role",
        caller.name, caller.role
    ))
}

/// The operation as `caller` may make it: refused (`NotPermitted`) when it
/// needs a role the caller lacks, with an operator's actor replaced by the
/// caller's own name. `None` for `caller` is an unauthenticated transport:
/// everything but a store's own follow-ups passes unchanged.
pub fn admit(mut op: Operation, caller: Option<&Caller>) -> Result<Operation> {
    if matches!(op.request, Request::Link { .. } | Request::Wake) {
        return Err(Error::invalid(
            "request",
            "link and wake are written by a store in the commit that needs them, never sent",
        ));
    }
    let Some(caller) = caller else {
        return Ok(op);
    };
    if !needs_operator(&op.request) {
        return Ok(op);
    }
    if caller.role != Role::Operator {
        return Err(not_permitted(
            caller,
            &format!("{} of {}", op.request.kind(), op.task),
        ));
    }
    let by = Actor::Operator(caller.name.clone());
    match &mut op.request {
        Request::Redispatch { by: b, .. }
        | Request::Finalize { by: b, .. }
        | Request::Cancel { by: b, .. } => *b = by,
        _ => {}
    }
    Ok(op)
}

/// Whether `caller` may do an operator's act that is not one request: an
/// outbox acknowledgement (it decides what is never delivered again), a
/// sweep. `what` names the act in the refusal.
pub fn require_operator(caller: Option<&Caller>, what: &str) -> Result<()> {
    match caller {
        Some(c) if c.role != Role::Operator => Err(not_permitted(c, what)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::error::ErrorKind;
    use crate::id::TaskId;
    use crate::time::Timestamp;

    fn op(request: Request) -> Operation {
        Operation {
            task: TaskId::parse("task", "t").unwrap(),
            request,
            pre: Default::default(),
            now: Timestamp::from_millis(0),
        }
    }

    fn caller(role: Role) -> Caller {
        Caller {
            name: Id::parse("id", "alice").unwrap(),
            role,
        }
    }

    #[test]
    fn operator_requests_need_the_role_and_record_the_token_name() {
        let claimed = Actor::Operator(Id::parse("id", "mallory").unwrap());
        let redispatch = op(Request::Redispatch {
            by: claimed.clone(),
            iteration: 2,
        });
        let e = admit(redispatch.clone(), Some(&caller(Role::Worker))).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotPermitted);
        let ok = admit(redispatch.clone(), Some(&caller(Role::Operator))).unwrap();
        assert_eq!(
            ok.request.actor(),
            Actor::Operator(Id::parse("id", "alice").unwrap())
        );
        // Unauthenticated: the declared actor stands.
        assert_eq!(admit(redispatch, None).unwrap().request.actor(), claimed);
        for r in [
            Request::Settle,
            Request::Cancel {
                by: Actor::System,
                fence: None,
            },
        ] {
            assert!(admit(op(r), Some(&caller(Role::Worker))).is_err());
        }
    }

    #[test]
    fn worker_requests_pass_unchanged() {
        let owner = Id::parse("id", "w1").unwrap();
        for r in [
            Request::Claim {
                owner: owner.clone(),
                ttl_ms: None,
                lock_delay_ms: None,
            },
            Request::Cancel {
                by: Actor::Worker(owner.clone()),
                fence: Some(3),
            },
        ] {
            let o = op(r);
            assert_eq!(admit(o.clone(), Some(&caller(Role::Worker))).unwrap(), o);
        }
        assert!(require_operator(Some(&caller(Role::Worker)), "ack").is_err());
        assert!(require_operator(Some(&caller(Role::Operator)), "ack").is_ok());
        assert!(require_operator(None, "ack").is_ok());
    }

    #[test]
    fn follow_ups_are_never_accepted_from_a_caller() {
        for c in [None, Some(caller(Role::Operator))] {
            let e = admit(op(Request::Wake), c.as_ref()).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("request"));
        }
    }
}
