//! The store protocol: one endpoint per [`baton_core::Store`] method,
//! what an `http://` store speaks. Bodies are core's own types as JSON.

use crate::app::{Answer, Shared, json, parse};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::{get, post};
use baton_core::Operation;
use baton_core::access;
use baton_core::decide::Decision;
use baton_core::graph::NextQuery;
use baton_core::store::{ClockKind, ListQuery};
use baton_store_http::wire::{self, AckBody, EventsBody, PendingBody, ReadBody, WatchBody};

pub(crate) fn routes() -> Router<Shared> {
    Router::new()
        .route(wire::CAPABILITIES, get(capabilities))
        .route(wire::READ, post(read))
        .route(wire::APPLY, post(apply))
        .route(wire::APPLY_ALL, post(apply_all))
        .route(wire::NEXT, post(next))
        .route(wire::WATCH_READY, post(watch_ready))
        .route(wire::LIST, post(list))
        .route(wire::EVENTS, post(events))
        .route(wire::PENDING, post(pending))
        .route(wire::ACK, post(ack))
        .route(wire::PERMIT, post(permit))
}

async fn capabilities(State(app): State<Shared>, headers: HeaderMap) -> Answer {
    app.caller(&headers)?;
    let mut caps = app.store.capabilities();
    // The server re-times every request to its own clock: to a client it
    // is an engine clock, whatever the store behind it keeps.
    caps.clock = ClockKind::Engine;
    // Every client of the server reaches the one store through it, so to
    // a client it is shared by many processes, even where the store alone
    // (memory, sled) belongs to the server's process only.
    caps.multi_process = true;
    json(&caps)
}

async fn read(State(app): State<Shared>, headers: HeaderMap, body: Bytes) -> Answer {
    app.caller(&headers)?;
    let b: ReadBody = parse(&body)?;
    let snap = app
        .store
        .read(&b.task, app.now())
        .await
        .inspect_err(|e| app.metrics.store_error(e))?;
    json(&snap)
}

async fn apply(State(app): State<Shared>, headers: HeaderMap, body: Bytes) -> Answer {
    let caller = app.caller(&headers)?;
    let op: Operation = parse(&body)?;
    json(&app.apply(op, caller.as_ref()).await?.answer_only())
}

async fn apply_all(State(app): State<Shared>, headers: HeaderMap, body: Bytes) -> Answer {
    let caller = app.caller(&headers)?;
    let ops: Vec<Operation> = parse(&body)?;
    let now = app.now();
    let admitted = ops
        .into_iter()
        .map(|op| app.admit(op, caller.as_ref(), now))
        .collect::<Result<Vec<_>, _>>()?;
    let kinds: Vec<_> = admitted
        .iter()
        .map(|o| (o.request.kind(), o.task.clone()))
        .collect();
    let ds = app
        .store
        .apply_all(admitted)
        .await
        .inspect_err(|e| app.metrics.store_error(e))?;
    for (d, (kind, task)) in ds.iter().zip(&kinds) {
        app.decided(d, *kind, task);
    }
    let ds: Vec<Decision> = ds.into_iter().map(Decision::answer_only).collect();
    json(&ds)
}

async fn next(State(app): State<Shared>, headers: HeaderMap, body: Bytes) -> Answer {
    let caller = app.caller(&headers)?;
    let mut q: NextQuery = parse(&body)?;
    baton_core::access::admit_taker(&q.taker, caller.as_ref())?;
    q.now = app.now();
    let d = app
        .store
        .next(&q)
        .await
        .inspect_err(|e| app.metrics.store_error(e))?;
    if let Some(d) = &d
        && let Some(r) = d.current.as_ref().or(d.record_to_write())
    {
        app.decided(d, baton_core::RequestKind::Claim, &r.task);
    }
    json(&d.map(Decision::answer_only))
}

async fn watch_ready(State(app): State<Shared>, headers: HeaderMap, body: Bytes) -> Answer {
    app.caller(&headers)?;
    let mut b: WatchBody = parse(&body)?;
    b.query.now = app.now();
    let max_ms = b.max_ms.min(wire::MAX_WATCH_MS);
    let mut stopping = app.stopping.clone();
    let waited = tokio::select! {
        w = app.store.watch_ready(&b.query, max_ms) => w.inspect_err(|e| app.metrics.store_error(e))?,
        _ = stopping.wait_for(|s| *s) => true,
    };
    json(&waited)
}

async fn list(State(app): State<Shared>, headers: HeaderMap, body: Bytes) -> Answer {
    app.caller(&headers)?;
    let mut q: ListQuery = parse(&body)?;
    q.now = app.now();
    q.limit = q.limit.clamp(1, baton_core::authority::MAX_PAGE);
    json(
        &app.store
            .list(&q)
            .await
            .inspect_err(|e| app.metrics.store_error(e))?,
    )
}

async fn events(State(app): State<Shared>, headers: HeaderMap, body: Bytes) -> Answer {
    app.caller(&headers)?;
    let b: EventsBody = parse(&body)?;
    let limit = b.limit.clamp(1, baton_core::authority::MAX_PAGE);
    let e = app
        .store
        .events(b.task.as_ref(), b.after, limit)
        .await
        .inspect_err(|e| app.metrics.store_error(e))?;
    json(&e)
}

async fn pending(State(app): State<Shared>, headers: HeaderMap, body: Bytes) -> Answer {
    app.caller(&headers)?;
    let b: PendingBody = parse(&body)?;
    let limit = b.limit.clamp(1, baton_core::authority::MAX_PAGE);
    let p = app
        .store
        .pending(b.after, limit)
        .await
        .inspect_err(|e| app.metrics.store_error(e))?;
    json(&p)
}

async fn ack(State(app): State<Shared>, headers: HeaderMap, body: Bytes) -> Answer {
    let caller = app.caller(&headers)?;
    access::require_operator(caller.as_ref(), "an outbox acknowledgement")?;
    let b: AckBody = parse(&body)?;
    baton_core::model::validate_intent_ids(&b.intent_ids)?;
    let n = app
        .store
        .ack(&b.intent_ids, app.now())
        .await
        .inspect_err(|e| app.metrics.store_error(e))?;
    json(&n)
}

async fn permit(State(app): State<Shared>, headers: HeaderMap, body: Bytes) -> Answer {
    let caller = app.caller(&headers)?;
    let act: baton_core::store::Act = parse(&body)?;
    access::require_operator(caller.as_ref(), act.as_str())?;
    app.store.permit(act).await?;
    json(&())
}
