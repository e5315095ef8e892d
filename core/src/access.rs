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
pub use crate::scope::Scope;
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

/// An authenticated caller: the name and role its token proves, and the
/// owners (and executors) a worker may act as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub name: Id,
    pub role: Role,
    /// Whom a worker may act as; empty means its own name alone. An
    /// operator may act as anyone.
    pub owners: Vec<OwnerPattern>,
    /// The tasks this caller may act on, if its token is scoped.
    pub scope: Option<Scope>,
}

/// An owner a token may act as: one id, or every id with a prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerPattern {
    Exact(Id),
    /// `ci-*` in a token file: every id that starts with `ci-`.
    Prefix(String),
}

impl OwnerPattern {
    /// `ID` or `PREFIX*` (a prefix of at least one character).
    pub fn parse(text: &str) -> Result<OwnerPattern> {
        match text.strip_suffix('*') {
            Some("") => Err(Error::invalid(
                "owners",
                "a prefix needs at least one character before `*` (a token for every owner is an operator's)",
            )),
            Some(prefix) => {
                Id::parse("owners", prefix)?;
                Ok(OwnerPattern::Prefix(prefix.to_owned()))
            }
            None => Ok(OwnerPattern::Exact(Id::parse("owners", text)?)),
        }
    }

    pub fn matches(&self, id: &Id) -> bool {
        match self {
            OwnerPattern::Exact(e) => e == id,
            OwnerPattern::Prefix(p) => id.as_str().starts_with(p.as_str()),
        }
    }
}

impl Caller {
    /// Whether this caller may act as the worker `id`.
    pub fn may_act_as(&self, id: &Id) -> bool {
        match self.role {
            Role::Operator => true,
            Role::Worker if self.owners.is_empty() => &self.name == id,
            Role::Worker => self.owners.iter().any(|p| p.matches(id)),
        }
    }

    /// Refuses (`NotPermitted`) acting as the worker `id` when this caller
    /// may not; `what` names the field.
    pub fn act_as(&self, what: &str, id: &Id) -> Result<()> {
        if self.may_act_as(id) {
            return Ok(());
        }
        Err(Error::not_permitted(format!(
            "the token of {} may not act as {what} {id} (a token acts as the owners its line names, by default its own name)",
            self.name
        )))
    }
}

/// Whom `request` acts as: the owner or executor a worker's token must be
/// allowed, with the field's name. Run ids (register, retry) are not
/// workers, and an operator's requests are checked by role.
fn acting_as(request: &Request) -> Option<(&'static str, &Id)> {
    match request {
        Request::Claim { owner, .. }
        | Request::Renew { owner, .. }
        | Request::Release { owner, .. }
        | Request::Recover { owner, .. }
        | Request::Complete { owner, .. }
        | Request::Fail { owner, .. }
        | Request::Checkpoint { owner, .. } => Some(("owner", owner)),
        Request::TaskClaim { executor, .. }
        | Request::Start { executor, .. }
        | Request::Heartbeat { executor, .. }
        | Request::Succeed { executor, .. }
        | Request::TaskFail { executor, .. } => Some(("executor", executor)),
        Request::Declare { manifest } => Some(("executor", &manifest.executor)),
        Request::Annotate { actor, .. } => Some(("actor", actor)),
        Request::Cancel {
            by: Actor::Worker(id),
            ..
        } => Some(("owner", id)),
        // Named one by one, so that a new request must say whom it acts
        // as: a wildcard here once let a worker's token act as any holder.
        Request::Cancel { .. }
        | Request::Register { .. }
        | Request::Retry { .. }
        | Request::Redispatch { .. }
        | Request::Finalize { .. }
        | Request::Settle
        | Request::Add { .. }
        | Request::Schedule { .. }
        | Request::ScheduleTicked { .. }
        | Request::Link { .. }
        | Request::Wake
        | Request::Limit { .. }
        | Request::NoteRefusals { .. }
        | Request::QueuePolicy { .. }
        | Request::QueuePause { .. }
        | Request::KeyHold { .. }
        | Request::KeyDrop { .. }
        | Request::KeyPark { .. }
        | Request::Unpark
        | Request::Prune { .. } => None,
    }
}

/// Refuses a `next` whose taker `caller` may not act as.
pub fn admit_taker(taker: &crate::graph::Taker, caller: Option<&Caller>) -> Result<()> {
    let Some(caller) = caller else {
        return Ok(());
    };
    match taker {
        crate::graph::Taker::Owner { owner, .. } => caller.act_as("owner", owner),
        crate::graph::Taker::Executor { executor, .. } => caller.act_as("executor", executor),
    }
}

/// A `next` as `caller` may ask it: its taker admitted ([`admit_taker`]),
/// and for a scoped token, only queues its scope allows and only tasks in
/// it (the query carries the scope; core's scan passes over the rest).
pub fn admit_next(query: &mut crate::graph::NextQuery, caller: Option<&Caller>) -> Result<()> {
    admit_taker(&query.taker, caller)?;
    let Some(scope) = caller.and_then(|c| c.scope.as_ref()) else {
        return Ok(());
    };
    if let Some(q) = query.queues.iter().find(|q| !scope.admits_queue(q)) {
        return Err(scope.refusal(&format!("queue {q}")));
    }
    query.within = Some(scope.clone());
    Ok(())
}

/// Whether `request` is an operator's to make.
pub fn needs_operator(request: &Request) -> bool {
    match request {
        Request::Redispatch { .. }
        | Request::Finalize { .. }
        | Request::Settle
        | Request::Limit { .. }
        | Request::QueuePolicy { .. }
        | Request::QueuePause { .. }
        | Request::NoteRefusals { .. }
        | Request::Schedule { .. }
        | Request::ScheduleTicked { .. }
        | Request::Prune { .. } => true,
        Request::Cancel { by, fence, .. } => fence.is_none() || by.is_operator(),
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
    if matches!(
        op.request,
        Request::Link { .. }
            | Request::Wake
            | Request::KeyHold { .. }
            | Request::KeyDrop { .. }
            | Request::KeyPark { .. }
            | Request::Unpark
    ) {
        return Err(Error::invalid(
            "request",
            format!(
                "{} is written by a store in the commit that needs it, never sent",
                op.request.kind()
            ),
        ));
    }
    let Some(caller) = caller else {
        return Ok(op);
    };
    if let Some((what, id)) = acting_as(&op.request) {
        caller.act_as(what, id)?;
    }
    // A scoped token's request is decided within its scope, whatever
    // scope the request itself named.
    if let Some(scope) = &caller.scope {
        op.pre.within = Some(scope.clone());
    }
    if !needs_operator(&op.request) {
        return Ok(op);
    }
    if caller.role != Role::Operator {
        return Err(not_permitted(
            caller,
            &format!("{} of {}", op.request.kind(), op.task),
        ));
    }
    // An operator's token records its own name, whichever operator (or
    // the system) the request claims to be. A request it makes as a worker
    // stays the worker's (an operator may act as anyone): the decision
    // then refuses what a worker may not do, as it would for the worker.
    let by = Actor::Operator(caller.name.clone());
    match &mut op.request {
        Request::Redispatch { by: b, .. }
        | Request::Finalize { by: b, .. }
        | Request::Cancel { by: b, .. }
        | Request::Limit { by: b, .. }
        | Request::QueuePolicy { by: b, .. }
        | Request::QueuePause { by: b, .. }
        | Request::Prune { by: b, .. }
            if !matches!(b, Actor::Worker(_)) =>
        {
            *b = by
        }
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
        // An act over every task is not a scoped token's.
        Some(c) if c.scope.is_some() => Err(Error::not_permitted(format!(
            "{what} acts on every task: it needs an operator's token without a scope; {}'s is scoped",
            c.name
        ))),
        _ => Ok(()),
    }
}

/// An operator's act that is not one request, for [`Permits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Act {
    Sweep,
}

impl Act {
    pub fn as_str(self) -> &'static str {
        match self {
            Act::Sweep => "a sweep",
        }
    }
}

/// Whether the caller may do an operator's act that is not one request,
/// asked before it begins: what an authority over a store that
/// authenticates its callers holds ([`crate::Authority::with_permits`]).
/// An authority without one permits every act (who asks is whoever says
/// so, [`Actor::Operator`]).
#[async_trait::async_trait]
pub trait Permits: Send + Sync + fmt::Debug {
    async fn permit(&self, act: Act) -> Result<()>;

    /// `op` as this caller may send it ([`admit`]), asked before its input
    /// is checked: a request the caller may not make is refused as not
    /// permitted whatever else is wrong with it, so a token learns nothing
    /// of another role's requests from their validation. Without a caller
    /// proved here (a client, whose server asks), every request passes.
    fn admit(&self, op: Operation) -> Result<Operation> {
        Ok(op)
    }
}

/// The permits of a caller proved here (a server's request): core's rule,
/// [`require_operator`].
#[derive(Debug, Clone)]
pub struct CallerPermits(pub Option<Caller>);

#[async_trait::async_trait]
impl Permits for CallerPermits {
    async fn permit(&self, act: Act) -> Result<()> {
        require_operator(self.0.as_ref(), act.as_str())
    }

    fn admit(&self, op: Operation) -> Result<Operation> {
        admit(op, self.0.as_ref())
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
            clock: Default::default(),
        }
    }

    fn caller(role: Role) -> Caller {
        Caller {
            scope: None,
            name: Id::parse("id", "alice").unwrap(),
            role,
            owners: vec![OwnerPattern::Exact(Id::parse("id", "w1").unwrap())],
        }
    }

    #[test]
    fn a_workers_token_writes_no_server_record() {
        for request in [
            Request::NoteRefusals { notes: Vec::new() },
            Request::QueuePolicy {
                by: Actor::Operator(Id::parse("id", "mallory").unwrap()),
                retry: None,
            },
            Request::Limit {
                by: Actor::Operator(Id::parse("id", "mallory").unwrap()),
                limit: Some(1),
            },
            Request::QueuePause {
                by: Actor::Operator(Id::parse("id", "mallory").unwrap()),
                paused: true,
            },
        ] {
            let e = admit(op(request.clone()), Some(&caller(Role::Worker))).unwrap_err();
            assert_eq!(e.kind, ErrorKind::NotPermitted, "{request:?}");
            assert!(admit(op(request), Some(&caller(Role::Operator))).is_ok());
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
        // An operator's token asking as a worker is that worker (whom the
        // decision refuses), never promoted to an operator.
        let as_worker = op(Request::Redispatch {
            by: Actor::Worker(Id::parse("id", "w9").unwrap()),
            iteration: 2,
        });
        let kept = admit(as_worker.clone(), Some(&caller(Role::Operator))).unwrap();
        assert_eq!(kept, as_worker);
        let system = op(Request::Finalize {
            by: Actor::System,
            error: None,
        });
        let ok = admit(system, Some(&caller(Role::Operator))).unwrap();
        assert_eq!(
            ok.request.actor(),
            Actor::Operator(Id::parse("id", "alice").unwrap())
        );
        for r in [
            Request::Settle,
            Request::Cancel {
                by: Actor::System,
                fence: None,
                force: false,
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
                force: false,
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
    fn a_worker_acts_only_as_the_owners_its_token_names() {
        let w = |owners: Vec<OwnerPattern>| Caller {
            scope: None,
            name: Id::parse("id", "ci").unwrap(),
            role: Role::Worker,
            owners,
        };
        let id = |s: &str| Id::parse("id", s).unwrap();
        let claim = |owner: &str| {
            op(Request::Claim {
                owner: id(owner),
                ttl_ms: None,
                lock_delay_ms: None,
            })
        };
        let complete = |owner: &str| {
            op(Request::Complete {
                owner: id(owner),
                fence: 1,
            })
        };
        // By default, its own name alone.
        assert!(admit(claim("ci"), Some(&w(vec![]))).is_ok());
        for o in [claim("ci2"), complete("ci2"), claim("c")] {
            let e = admit(o, Some(&w(vec![]))).unwrap_err();
            assert_eq!(e.kind, ErrorKind::NotPermitted, "{e}");
        }
        let cancel = op(Request::Cancel {
            by: Actor::Worker(id("ci2")),
            fence: Some(1),
            force: false,
        });
        assert!(admit(cancel, Some(&w(vec![]))).is_err());
        // A prefix and a list.
        let scoped = w(vec![
            OwnerPattern::parse("ci-*").unwrap(),
            OwnerPattern::parse("builder").unwrap(),
        ]);
        for ok in ["ci-1", "ci-", "builder"] {
            assert!(admit(claim(ok), Some(&scoped)).is_ok(), "{ok}");
        }
        for bad in ["ci", "builder2", "xci-1"] {
            assert!(admit(claim(bad), Some(&scoped)).is_err(), "{bad}");
        }
        let taker = crate::graph::Taker::Owner {
            owner: id("ci2"),
            ttl_ms: None,
            lock_delay_ms: None,
        };
        assert!(admit_taker(&taker, Some(&w(vec![]))).is_err());
        assert!(admit_taker(&taker, None).is_ok());
        assert!(OwnerPattern::parse("*").is_err());
        // An operator acts as anyone.
        assert!(admit(claim("anyone"), Some(&caller(Role::Operator))).is_ok());
    }

    #[test]
    fn follow_ups_are_never_accepted_from_a_caller() {
        for c in [None, Some(caller(Role::Operator))] {
            let e = admit(op(Request::Wake), c.as_ref()).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("request"));
        }
    }
}
