//! The store protocol: one endpoint per [`baton_core::Store`] method,
//! what an `http://` store speaks. Bodies are core's own types as JSON.

use crate::app::{Handled, Shared, json, parse};
use crate::caller::AsCaller;
use axum::Router;
use axum::body::Bytes;
use axum::routing::{get, post};
use baton_core::decide::Decision;
use baton_core::graph::NextQuery;
use baton_core::store::{ClockKind, ListQuery};
use baton_core::{Operation, Store, Timestamp, access};
use baton_store_http::wire::{
    self, AckBody, EventsBody, FenceTokenBody, PendingBody, ReadBody, WatchBody,
};

pub(crate) fn routes() -> Router<Shared> {
    Router::new()
        .route(wire::CAPABILITIES, get(capabilities))
        .route(wire::READ, post(read))
        .route(wire::APPLY, post(apply))
        .route(wire::APPLY_ALL, post(apply_all))
        .route(wire::APPLY_EACH, post(apply_each))
        .route(wire::NEXT, post(next))
        .route(wire::NEXT_MANY, post(next_many))
        .route(wire::WATCH_READY, post(watch_ready))
        .route(wire::LIST, post(list))
        .route(wire::EVENTS, post(events))
        .route(wire::PENDING, post(pending))
        .route(wire::ACK, post(ack))
        .route(wire::PERMIT, post(permit))
        .route(wire::COUNTS, post(counts))
        .route(wire::FENCE_TOKEN, post(fence_token))
}

async fn fence_token(asked: AsCaller, body: Bytes) -> Handled {
    let b: FenceTokenBody = parse(&body)?;
    json(&asked.store().fence_token(&b.task, b.fence).await?)
}

async fn capabilities(asked: AsCaller) -> Handled {
    let mut caps = asked.store().capabilities();
    // The server re-times every request to its own clock: to a client it
    // is an engine clock, whatever the store behind it keeps.
    caps.clock = ClockKind::Engine;
    // Every client of the server reaches the one store through it, so to
    // a client it is shared by many processes, even where the store alone
    // (memory, sled) belongs to the server's process only.
    caps.multi_process = true;
    json(&caps)
}

async fn read(asked: AsCaller, body: Bytes) -> Handled {
    let b: ReadBody = parse(&body)?;
    json(&asked.store().read(&b.task, Timestamp::default()).await?)
}

async fn apply(asked: AsCaller, body: Bytes) -> Handled {
    let op: Operation = parse(&body)?;
    json(&asked.store().apply(op).await?.answer_only())
}

async fn apply_all(asked: AsCaller, body: Bytes) -> Handled {
    let ops: Vec<Operation> = parse(&body)?;
    let ds = asked.store().apply_all(ops).await?;
    let ds: Vec<Decision> = ds.into_iter().map(Decision::answer_only).collect();
    json(&ds)
}

async fn apply_each(asked: AsCaller, body: Bytes) -> Handled {
    let ops: Vec<Operation> = parse(&body)?;
    let ds = asked.store().apply_each(ops).await?;
    let ds: Vec<Decision> = ds.into_iter().map(Decision::answer_only).collect();
    json(&ds)
}

async fn next(asked: AsCaller, body: Bytes) -> Handled {
    let q: NextQuery = parse(&body)?;
    json(&asked.store().next(&q).await?.map(Decision::answer_only))
}

async fn next_many(asked: AsCaller, body: Bytes) -> Handled {
    let q: NextQuery = parse(&body)?;
    let ds = asked.store().next_many(&q).await?;
    let ds: Vec<Decision> = ds.into_iter().map(Decision::answer_only).collect();
    json(&ds)
}

async fn watch_ready(asked: AsCaller, body: Bytes) -> Handled {
    let b: WatchBody = parse(&body)?;
    json(&asked.store().watch_ready(&b.query, b.max_ms).await?)
}

async fn list(asked: AsCaller, body: Bytes) -> Handled {
    let q: ListQuery = parse(&body)?;
    json(&asked.store().list(&q).await?)
}

async fn events(asked: AsCaller, body: Bytes) -> Handled {
    let b: EventsBody = parse(&body)?;
    json(
        &asked
            .store()
            .events(b.task.as_ref(), b.after, b.limit)
            .await?,
    )
}

async fn pending(asked: AsCaller, body: Bytes) -> Handled {
    let b: PendingBody = parse(&body)?;
    json(&asked.store().pending(b.after, b.limit).await?)
}

async fn ack(asked: AsCaller, body: Bytes) -> Handled {
    // The operator's check comes before the body is read.
    access::require_operator(asked.store().caller(), "an outbox acknowledgement")?;
    let b: AckBody = parse(&body)?;
    json(
        &asked
            .store()
            .ack(&b.intent_ids, Timestamp::default())
            .await?,
    )
}

async fn counts(asked: AsCaller) -> Handled {
    json(&asked.store().counts().await?)
}

async fn permit(asked: AsCaller, body: Bytes) -> Handled {
    let act: baton_core::access::Act = parse(&body)?;
    baton_core::access::require_operator(asked.store().caller(), act.as_str())?;
    json(&())
}
