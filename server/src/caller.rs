//! Auth and metering as layers. The `authenticate` middleware proves the
//! caller once per request, from its bearer token, and leaves it in the
//! request ([`Who`]); a handler asks for an [`AsCaller`]: the store as that
//! caller may use it ([`CallerStore`]). Every write through it, whichever
//! endpoint asked (the store protocol, the task API's verbs, `next`, a
//! graph's add, a sweep), is admitted by core's access rule for the
//! caller, re-timed to the server's clock, validated, and applied on the
//! server's store, which counts it in the metrics (`counted.rs`); the
//! operator's acts (`ack`, a sweep, asked of core's `CallerPermits`) need
//! an operator. No handler checks a token or counts a decision itself.

use crate::app::{ApiError, Shared, Who};
use async_trait::async_trait;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use baton_core::access::{self, Caller};
use baton_core::decide::Decision;
use baton_core::graph::NextQuery;
use baton_core::{
    Authority, Capabilities, Event, ListQuery, Notification, Operation, Result, Snapshot, Store,
    TaskId, Timestamp,
};
use std::fmt;
use std::sync::Arc;

/// The server's store as one caller may use it.
pub(crate) struct CallerStore {
    app: Shared,
    caller: Option<Caller>,
    /// The blocking-query place this request took for its whole wait (the
    /// task API's waiting `next`): its watches take no second one.
    place: std::sync::Mutex<Option<crate::app::Blocking>>,
}

impl fmt::Debug for CallerStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallerStore")
            .field("caller", &self.caller.as_ref().map(|c| &c.name))
            .finish()
    }
}

impl CallerStore {
    /// `ops` admitted for the caller and applied on the server's store,
    /// all or nothing (`together`) or each on its own.
    async fn many(&self, ops: Vec<Operation>, together: bool) -> Result<Vec<Decision>> {
        let now = self.app.now();
        let admitted = ops
            .into_iter()
            .map(|op| self.admit(op, now))
            .collect::<Result<Vec<_>>>()?;
        if together {
            self.app.store.apply_all(admitted).await
        } else {
            self.app.store.apply_each(admitted).await
        }
    }

    pub(crate) fn caller(&self) -> Option<&Caller> {
        self.caller.as_ref()
    }

    /// Keeps `place` until this request ends.
    pub(crate) fn hold(&self, place: crate::app::Blocking) {
        if let Ok(mut p) = self.place.lock() {
            *p = Some(place);
        }
    }

    fn holds_place(&self) -> bool {
        self.place.lock().is_ok_and(|p| p.is_some())
    }

    /// `op` as the store may apply it: admitted by core's access rule,
    /// timed by the server's clock, validated.
    fn admit(&self, op: Operation, now: Timestamp) -> Result<Operation> {
        let mut op = access::admit(op, self.caller.as_ref())?;
        op.now = now;
        // Read again where the store serializes the decision.
        op.clock = baton_core::CommitClock::new(self.app.clock.clone());
        op.request.validate()?;
        Ok(op)
    }
}

#[async_trait]
impl Store for CallerStore {
    fn capabilities(&self) -> Capabilities {
        let mut caps = self.app.store.capabilities();
        // The server signs its callers' fences when it was given a key.
        caps.signs_fences = self.app.fence_keys.is_some();
        caps
    }

    async fn read(&self, task: &TaskId, _now: Timestamp) -> Result<Option<Snapshot>> {
        self.app.store.read(task, self.app.now()).await
    }

    async fn apply(&self, op: Operation) -> Result<Decision> {
        let op = self.admit(op, self.app.now())?;
        self.app.store.apply(op).await
    }

    async fn apply_all(&self, ops: Vec<Operation>) -> Result<Vec<Decision>> {
        self.many(ops, true).await
    }

    async fn apply_each(&self, ops: Vec<Operation>) -> Result<Vec<Decision>> {
        self.many(ops, false).await
    }

    async fn next(&self, query: &NextQuery) -> Result<Option<Decision>> {
        Ok(self.next_many(&query.one()).await?.into_iter().next())
    }

    async fn next_many(&self, query: &NextQuery) -> Result<Vec<Decision>> {
        let mut query = query.clone();
        access::admit_next(&mut query, self.caller.as_ref())?;
        let query = &query;
        if !(1..=baton_core::graph::MAX_NEXT_COUNT).contains(&query.count) {
            return Err(baton_core::Error::invalid(
                "count",
                format!(
                    "must be from 1 to {} (got {})",
                    baton_core::graph::MAX_NEXT_COUNT,
                    query.count
                ),
            ));
        }
        let mut q = query.clone();
        q.now = self.app.now();
        q.clock = baton_core::CommitClock::new(self.app.clock.clone());
        self.app.store.next_many(&q).await
    }

    async fn watch_ready(&self, query: &NextQuery, max_ms: u64) -> Result<bool> {
        let mut q = query.clone();
        q.now = self.app.now();
        let cap = u64::try_from(self.app.max_wait.as_millis()).unwrap_or(u64::MAX);
        let max_ms = max_ms.min(cap);
        // Past its token's cap of blocking queries, a waiter is told to
        // back off on its own (no change feed for it now), holding nothing.
        let name = self
            .caller
            .as_ref()
            .map(|c| c.name.to_string())
            .unwrap_or_default();
        let _place = if self.holds_place() {
            None
        } else {
            let Some(place) = self.app.blocking(&name) else {
                return Ok(false);
            };
            Some(place)
        };
        let mut stopping = self.app.stopping.clone();
        tokio::select! {
            w = self.app.store.watch_ready(&q, max_ms) => w,
            _ = stopping.wait_for(|s| *s) => Ok(true),
        }
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<Snapshot>> {
        let mut q = query.clone();
        q.now = self.app.now();
        q.limit = q.limit.clamp(1, baton_core::authority::MAX_PAGE);
        self.app.store.list(&q).await
    }

    async fn events(&self, task: Option<&TaskId>, after: u64, limit: usize) -> Result<Vec<Event>> {
        let limit = limit.clamp(1, baton_core::authority::MAX_PAGE);
        self.app.store.events(task, after, limit).await
    }

    async fn pending(&self, after: u64, limit: usize) -> Result<Vec<Notification>> {
        let limit = limit.clamp(1, baton_core::authority::MAX_PAGE);
        self.app.store.pending(after, limit).await
    }

    async fn counts(&self) -> Result<Option<Vec<baton_core::counts::Count>>> {
        self.app.store.counts().await
    }

    async fn oldest_ready(
        &self,
        lane: baton_core::graph::Lane,
        queue: &baton_core::Id,
        now: Timestamp,
    ) -> Result<Option<Timestamp>> {
        self.app.store.oldest_ready(lane, queue, now).await
    }

    /// Signs `fence` only while it is the fence of `task`'s live lease
    /// (judged at the server's time), and only for a caller that may act
    /// as its holder: a worker cannot get a token for another's attempt,
    /// or for a fence not yet granted.
    async fn fence_token(&self, task: &TaskId, fence: u64) -> Result<Option<String>> {
        let Some(keys) = &self.app.fence_keys else {
            return Ok(None);
        };
        let snap = self.app.store.read(task, self.app.now()).await?;
        let Some(snap) = snap else {
            return Ok(None);
        };
        let Some(lease) = snap.record.lease.as_ref() else {
            return Ok(None);
        };
        let live = baton_core::live_lease(&snap.record, snap.judged.lease_holds);
        let holder_asks = self
            .caller
            .as_ref()
            .is_none_or(|c| c.may_act_as(&lease.owner));
        Ok((live && lease.fence == fence && holder_asks).then(|| keys.sign(task.as_str(), fence)))
    }

    async fn ack(&self, intent_ids: &[String], _now: Timestamp) -> Result<u64> {
        access::require_operator(self.caller.as_ref(), "an outbox acknowledgement")?;
        baton_core::model::validate_intent_ids(intent_ids)?;
        self.app.store.ack(intent_ids, self.app.now()).await
    }
}

/// What a handler asks for: the authority over the store as this
/// request's caller may use it.
pub(crate) struct AsCaller(pub Authority<CallerStore>);

impl AsCaller {
    pub(crate) fn store(&self) -> &CallerStore {
        self.0.store()
    }
}

impl FromRequestParts<Shared> for AsCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &Shared) -> Result<Self, ApiError> {
        // Put there by `authenticate`; a public route has none, and is
        // asked again (it answers only when no token is needed).
        let caller = match parts.extensions.get::<Who>() {
            Some(Who(c)) => c.clone(),
            None => app.caller(&parts.headers)?,
        };
        let permits = Arc::new(access::CallerPermits(caller.clone()));
        let gated = CallerStore {
            app: app.clone(),
            caller,
            place: std::sync::Mutex::new(None),
        };
        Ok(AsCaller(
            Authority::new(gated, app.clock.clone()).with_permits(permits),
        ))
    }
}
