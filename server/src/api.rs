//! The task API: every CLI operation as an endpoint, for clients in any
//! language. Answers are the JSON the CLI prints; a refusal is 409 (404
//! for a task that does not exist) with the refusal's reason and details.

use crate::app::{Handled, Shared, from_value_strict, json, parse_strict};
use crate::bodies::*;
use crate::caller::{AsCaller, CallerStore};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use baton_core::access;
use baton_core::authority::refusal_json;
use baton_core::call::{Call, Status};
use baton_core::catalogue;
use baton_core::graph::Taker;
use baton_core::{Authority, Error, Preconditions, Refusal, Request, TaskId};
use serde::Deserialize;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The routes of core's catalogue of operations (`catalogue::OPERATIONS`),
/// each at the path the catalogue gives it: the task API maps onto the
/// catalogue, and the OpenAPI document is generated from it. The verbs of
/// `POST /v1/tasks/{task}/{verb}` are the catalogue's writes, read as
/// core's `Request`.
pub(crate) fn routes() -> Router<Shared> {
    Router::new()
        .route(at("list"), get(list))
        .route(at("show"), get(show))
        .route(at("holder"), get(holder))
        .route(at("verify"), get(verify))
        .route(at("gate"), get(gate))
        .route(at("events"), get(events))
        .route(at("feed"), get(feed))
        .route(at("checkpoint"), post(checkpoint))
        .route(at("report"), post(report))
        .route("/v1/tasks/{task}/{verb}", post(write))
        .route(at("next"), post(next))
        .route(at("graph"), get(graph).post(add_graph))
        .route(at("sweep"), post(sweep))
        .route(at("pending"), get(pending))
        .route(at("ack"), post(ack))
        .route(at("schedule"), post(schedule))
        .route(at("schedules"), get(schedules))
        .route(at("tick"), post(tick))
        .route(at("limit"), post(set_limit).get(key_status))
        .route(at("keys"), get(keys))
        .route(at("queue_policy"), post(set_queue_policy).get(queue_policy))
        .route(at("queue_pause"), post(pause_queue))
        .route(at("queue_resume"), post(resume_queue))
        .route(at("queue_retry_failed"), post(retry_failed))
        .route(at("queue_discard_failed"), post(discard_failed))
        .route(at("prune"), post(prune))
}

/// The catalogue's path of operation `name` (a name not in it is a bug
/// `every_route_is_the_catalogues` finds; it is served nowhere useful).
fn at(name: &str) -> &'static str {
    catalogue::op(name)
        .and_then(|o| o.http)
        .map_or("/v1/not-in-the-catalogue", |r| r.path)
}

fn task(id: &str) -> Result<TaskId, Error> {
    TaskId::parse("task", id)
}

fn with_status(status: StatusCode, v: Value) -> Handled {
    Ok((status, axum::Json(v)).into_response())
}

fn refused(r: &Refusal) -> Handled {
    let status = if *r == Refusal::NotFound {
        StatusCode::NOT_FOUND
    } else {
        StatusCode::CONFLICT
    };
    with_status(status, refusal_json(r))
}

/// Refuses a field of `given` that `request` did not take: every key given
/// (but one set to null, which changes nothing) must come back when the
/// request is written out again. A request is an internally tagged enum,
/// which serde reads through a buffer that forgets what it ignored.
fn refuse_unknown_fields(given: &Value, request: &Request) -> Result<(), Error> {
    let taken = serde_json::to_value(request)
        .map_err(|e| Error::invalid("body", format!("cannot be read back: {e}")))?;
    let (Some(given), Some(taken)) = (given.as_object(), taken.as_object()) else {
        return Ok(());
    };
    match given
        .iter()
        .find(|(k, v)| !v.is_null() && !taken.contains_key(*k))
    {
        Some((k, _)) => Err(Error::invalid(
            k.as_str(),
            format!("is not a field of a {:?} request", request.kind().as_str()),
        )),
        None => Ok(()),
    }
}

/// `POST /v1/tasks/{id}/{verb}`: the body is the request's fields as
/// JSON (`{"owner": "w1", "ttl_ms": 30000}`; for `declare`, the
/// manifest), with an optional `"pre"` of preconditions.
async fn write(
    AsCaller(a): AsCaller,
    Path((id, verb)): Path<(String, String)>,
    body: Bytes,
) -> Handled {
    // Only the catalogue's verbs: a request it does not offer (a store's
    // own `link`, an `add` that belongs to `/v1/graph`) is no endpoint.
    let offered = catalogue::op(&verb).and_then(|o| o.http).is_some_and(|r| {
        r.method == "POST" && r.path.strip_prefix("/v1/tasks/{task}/") == Some(&verb)
    });
    if !offered {
        return Err(crate::app::ApiError::not_found(&format!(
            "/v1/tasks/{id}/{verb}"
        )));
    }
    let task = task(&id)?;
    let mut fields: Value = if body.is_empty() {
        json!({})
    } else {
        parse_strict(&body)?
    };
    let pre = match fields.as_object_mut() {
        Some(o) => o.remove("pre"),
        None => return Err(Error::invalid("body", "must be a JSON object").into()),
    };
    let pre: Preconditions = match pre {
        Some(p) => from_value_strict(p).map_err(|e| Error::invalid("pre", e.message))?,
        None => Preconditions::none(),
    };
    // A manifest is read as the CLI reads one (the same rules, the same
    // optional fields), not as the stored form.
    // An operator's cancel may cascade to every dependent: several commits,
    // walked by core's authority, not one request.
    let cascade = match fields.as_object_mut().and_then(|o| o.remove("cascade")) {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::Bool(true)) if verb == "cancel" => true,
        Some(Value::Bool(true)) => {
            return Err(Error::invalid("cascade", format!("is not a field of {verb:?}")).into());
        }
        Some(_) => return Err(Error::invalid("cascade", "must be true or false").into()),
    };
    let request = if verb == "declare" {
        Request::Declare {
            manifest: baton_core::Manifest::from_value(&fields)?,
        }
    } else {
        if let Some(o) = fields.as_object_mut() {
            o.insert("request".into(), Value::String(verb.clone()));
        }
        let request: Request = serde_json::from_value(fields.clone()).map_err(|e| {
            let field = culprit(&fields, &e.to_string());
            Error::invalid(&field, format!("is not a {verb:?} request: {e}"))
        })?;
        refuse_unknown_fields(&fields, &request)?;
        request
    };
    let call = if cascade {
        let Request::Cancel {
            by,
            fence: None,
            force,
        } = request
        else {
            return Err(Error::invalid(
                "cascade",
                "is for an operator's cancel (`by` an operator, no fence)",
            )
            .into());
        };
        Call::CancelCascade { task, by, force }
    } else {
        Call::Write { task, request, pre }
    };
    run(&a, call).await
}

/// `POST /v1/tasks/{id}/checkpoint`: the holder records a step (and adds
/// the tasks it spawns in the same commit). The body's fields are read by
/// core's catalogue rules, as the CLI's and Python's are; the output and
/// the nodes are JSON values here, handed to core as their text (a file
/// is read on the command line only).
async fn checkpoint(AsCaller(a): AsCaller, Path(id): Path<String>, body: Bytes) -> Handled {
    let mut fields: Value = if body.is_empty() {
        json!({})
    } else {
        parse_strict(&body)?
    };
    let Some(o) = fields.as_object_mut() else {
        return Err(Error::invalid("body", "must be a JSON object").into());
    };
    for k in ["output", "spawn"] {
        if let Some(v) = o.get_mut(k).filter(|v| !v.is_null()) {
            *v = Value::String(v.to_string());
        }
    }
    if o.contains_key("task") {
        return Err(Error::invalid("task", "is the path's, not a field of the body").into());
    }
    // A field the operation does not take is named before anything is read.
    let inputs = catalogue::op("checkpoint").map_or(&[][..], |op| op.inputs);
    if let Some(k) = o
        .keys()
        .find(|k| !inputs.iter().any(|i| i.wire == k.as_str()))
    {
        return Err(
            Error::invalid(k.as_str(), "is not a field of a \"checkpoint\" request").into(),
        );
    }
    o.insert("task".into(), Value::String(task(&id)?.to_string()));
    let call = baton_core::given::call("checkpoint", baton_core::given::Given::new(fields)?)?;
    run(&a, call).await
}

/// `POST /v1/reports`: `{"reports": [...]}`, a holder's reports of many
/// grants, each accepted or refused on its own fence, in one commit; read
/// by core's catalogue rules. 200 when every one was accepted, 409 when
/// one was refused (each item says).
async fn report(AsCaller(a): AsCaller, body: Bytes) -> Handled {
    let fields: Value = if body.is_empty() {
        json!({})
    } else {
        parse_strict(&body)?
    };
    let call = baton_core::given::call("report", baton_core::given::Given::new(fields)?)?;
    run(&a, call).await
}

/// Runs `call` as the caller, answered as every route answers: the item
/// (or a page of them), 200 when it passed, 409 when refused (a fence not
/// current, a gate still blocking, as the CLI exits 1), 404 for an unknown
/// task.
async fn run(a: &Authority<CallerStore>, call: Call) -> Handled {
    let out = call.run(a).await?;
    let status = match out.status {
        Status::Ok => StatusCode::OK,
        Status::Refused => StatusCode::CONFLICT,
        Status::NotFound => StatusCode::NOT_FOUND,
    };
    let body = if out.list {
        json!({"items": out.items, "next": out.next})
    } else {
        out.items.into_iter().next().unwrap_or(Value::Null)
    };
    with_status(status, body)
}

async fn show(AsCaller(a): AsCaller, Path(id): Path<String>) -> Handled {
    run(&a, Call::Show { task: task(&id)? }).await
}

async fn holder(AsCaller(a): AsCaller, Path(id): Path<String>) -> Handled {
    run(&a, Call::Holder { task: task(&id)? }).await
}

#[derive(Deserialize)]
struct FenceQuery {
    fence: u64,
}

async fn verify(
    AsCaller(a): AsCaller,
    Path(id): Path<String>,
    Query(q): Query<FenceQuery>,
) -> Handled {
    let task = task(&id)?;
    run(
        &a,
        Call::Verify {
            task,
            fence: q.fence,
        },
    )
    .await
}

async fn gate(AsCaller(a): AsCaller, Path(id): Path<String>) -> Handled {
    run(&a, Call::Gate { task: task(&id)? }).await
}

#[derive(Deserialize)]
struct PageQuery {
    after: Option<String>,
    limit: Option<usize>,
    /// A blocking query: wait up to this long (`30s`) for something after `after`.
    wait: Option<String>,
    state: Option<String>,
    queue: Option<String>,
    dry_run: Option<bool>,
    /// `next`: wait through `drained` too, until work is added.
    keep_waiting: Option<bool>,
}

const DEFAULT_LIMIT: usize = 100;

fn limit(q: &PageQuery) -> Result<usize, Error> {
    match q.limit {
        None => Ok(DEFAULT_LIMIT),
        Some(n) if (1..=baton_core::authority::MAX_PAGE).contains(&n) => Ok(n),
        Some(_) => Err(Error::invalid(
            "limit",
            format!("must be from 1 to {}", baton_core::authority::MAX_PAGE),
        )),
    }
}

/// A blocking query's wait, by the catalogue's rule (as every front end reads it).
fn wait(q: &Option<String>) -> Result<Option<Duration>, Error> {
    q.as_deref()
        .map(|w| {
            catalogue::duration_ms(catalogue::Kind::Wait, "wait", w).map(Duration::from_millis)
        })
        .transpose()
}

fn page<T: serde::Serialize>(p: &baton_core::Page<T>) -> Handled {
    json(&json!({"items": p.items, "next": p.next}))
}

async fn events(
    State(app): State<Shared>,
    AsCaller(a): AsCaller,
    Path(id): Path<String>,
    Query(q): Query<PageQuery>,
) -> Handled {
    let t = task(&id)?;
    let limit = limit(&q)?;
    let wait = wait(&q.wait)?;
    if q.after.is_some() {
        baton_core::authority::parse_cursor(q.after.as_deref())?;
    }
    if a.get(&t).await?.is_none() {
        return refused(&Refusal::NotFound);
    }
    let caller = a.store().caller().map(|c| c.name.to_string());
    events_waiting(&app, caller, Some(&t), &q, limit, wait).await
}

/// `GET /v1/events`: every task's events, as a task's are read.
async fn feed(
    State(app): State<Shared>,
    // The caller's token is checked (as for every read) before anything is read.
    AsCaller(a): AsCaller,
    Query(q): Query<PageQuery>,
) -> Handled {
    let limit = limit(&q)?;
    let wait = wait(&q.wait)?;
    baton_core::authority::parse_cursor(q.after.as_deref())?;
    let caller = a.store().caller().map(|c| c.name.to_string());
    events_waiting(&app, caller, None, &q, limit, wait).await
}

/// A place for one more blocking query of the token `name`, or the 429
/// that tells it to wait for one of its others to end.
fn place_for(
    app: &Shared,
    name: &str,
) -> Result<crate::app::Blocking, Box<axum::response::Response>> {
    app.blocking(name).ok_or_else(|| {
        let mut res = crate::app::ApiError::from(Error::unavailable(format!(
            "{} has {} blocking queries under way already, the most one token may: wait for one to end",
            if name.is_empty() { "this client" } else { name },
            app.max_blocking
        )))
        .into_response();
        *res.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        Box::new(res)
    })
}

/// A page of events after the query's cursor, waiting up to `wait` (at
/// most the server's `max_wait` a request: ask again for longer) for one to be written
/// when there are none yet. A token has at most the server's cap of
/// waits under way at once; past it, 429.
async fn events_waiting(
    app: &Shared,
    caller: Option<String>,
    t: Option<&TaskId>,
    q: &PageQuery,
    limit: usize,
    wait: Option<Duration>,
) -> Handled {
    let wait = wait.unwrap_or_default().min(app.max_wait);
    let _place = if wait.is_zero() {
        None
    } else {
        match place_for(app, &caller.unwrap_or_default()) {
            Ok(p) => Some(p),
            Err(res) => return Ok(*res),
        }
    };
    let until = Instant::now() + wait;
    let mut pause = Duration::from_millis(20);
    loop {
        let p = app.authority.events(t, q.after.as_deref(), limit).await?;
        if !p.items.is_empty() || Instant::now() >= until || app.is_stopping() {
            return page(&p);
        }
        app.pause(pause.min(until.saturating_duration_since(Instant::now())))
            .await;
        pause = (pause * 2).min(Duration::from_millis(250));
    }
}

async fn list(AsCaller(a): AsCaller, Query(q): Query<PageQuery>) -> Handled {
    // Core's `list` reads the query's inputs by the catalogue's rules.
    let mut fields = serde_json::Map::new();
    for (name, value) in [
        ("state", &q.state),
        ("queue", &q.queue),
        ("after", &q.after),
    ] {
        if let Some(v) = value {
            fields.insert(name.to_owned(), json!(v));
        }
    }
    fields.insert("limit".to_owned(), json!(limit(&q)?));
    let call = baton_core::given::call("list", baton_core::given::Given::new(fields.into())?)?;
    run(&a, call).await
}

/// `POST /v1/next?wait=30s`: `{"owner": ...}` for a bare task,
/// `{"executor": ...}` for a declared one; `queues` (default `["default"]`).
async fn next(
    State(app): State<Shared>,
    AsCaller(a): AsCaller,
    Query(q): Query<PageQuery>,
    body: Bytes,
) -> Handled {
    let b: NextBody = parse_strict(&body)?;
    let taker = match (b.owner, b.executor) {
        (Some(owner), None) => Taker::Owner {
            owner,
            ttl_ms: b.ttl_ms,
            lock_delay_ms: b.lock_delay_ms,
        },
        (None, Some(executor)) => {
            if b.lock_delay_ms.is_some() {
                return Err(Error::invalid("lock_delay_ms", "is for an owner's next").into());
            }
            Taker::Executor {
                executor,
                ttl_ms: b.ttl_ms,
            }
        }
        _ => return Err(Error::invalid("body", "give an owner or an executor, not both").into()),
    };
    // At most the server's `max_wait` a request, as every blocking query:
    // a longer wait (a worker kept waiting for work) asks again.
    let wait_ms =
        wait(&q.wait)?.map(|d| u64::try_from(d.min(app.max_wait).as_millis()).unwrap_or(u64::MAX));
    // A waiting next is a blocking query: under its token's cap (past it,
    // 429, holding no connection), its place held for the whole wait.
    if wait_ms.is_some_and(|ms| ms > 0) {
        let name = a.store().caller().map(|c| c.name.to_string());
        match place_for(&app, &name.unwrap_or_default()) {
            Ok(p) => a.store().hold(p),
            Err(res) => return Ok(*res),
        }
    }
    let queues = b.queues;
    let keep_waiting = q.keep_waiting.unwrap_or(false);
    run(
        &a,
        Call::Next {
            taker,
            queues,
            wait_ms,
            keep_waiting,
            count: b.count,
        },
    )
    .await
}

async fn graph(AsCaller(a): AsCaller) -> Handled {
    run(&a, Call::Graph).await
}

/// `POST /v1/graph`: a graph file's text (as `baton add --file`).
async fn add_graph(AsCaller(a): AsCaller, body: Bytes) -> Handled {
    let text = std::str::from_utf8(&body)
        .map_err(|_| Error::invalid("body", "a graph file is UTF-8 text"))?;
    let nodes = baton_core::workgraph::parse_graph(text)?;
    run(&a, Call::AddGraph { nodes }).await
}

fn no_body(body: &Bytes) -> Result<(), Error> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    parse_strict::<NoBody>(body).map(|NoBody {}| ())
}

async fn sweep(AsCaller(a): AsCaller, Query(q): Query<PageQuery>, body: Bytes) -> Handled {
    no_body(&body)?;
    let dry_run = q.dry_run.unwrap_or(false);
    run(&a, Call::Sweep { dry_run }).await
}

async fn schedule(AsCaller(a): AsCaller, Path(name): Path<String>, body: Bytes) -> Handled {
    let b: ScheduleBody = parse_strict(&body)?;
    let every_ms = b
        .every_ms
        .map(|ms| catalogue::check_ms(catalogue::Kind::Period, "every_ms", ms))
        .transpose()?;
    let template = match b.template {
        Some(t) => t,
        None => {
            baton_core::NodeSpec::new(&baton_core::workgraph::schedule_id(&name)?, None, 0, [])?
        }
    };
    // Which of every_ms and cron a schedule may have is core's to check.
    let schedule = baton_core::graph::Schedule {
        every_ms: every_ms.unwrap_or(0),
        cron: b.cron,
        template,
    };
    let task = baton_core::workgraph::schedule_id(&name)?;
    run(&a, write_of(task, Request::Schedule { schedule })).await
}

/// A write of core's catalogue: `request` on `task`, with no preconditions.
fn write_of(task: TaskId, request: Request) -> Call {
    Call::Write {
        task,
        request,
        pre: Preconditions::none(),
    }
}

async fn schedules(AsCaller(a): AsCaller) -> Handled {
    run(&a, Call::Schedules).await
}

async fn tick(AsCaller(a): AsCaller, body: Bytes) -> Handled {
    no_body(&body)?;
    run(&a, Call::Tick).await
}

async fn set_limit(AsCaller(a): AsCaller, Path(key): Path<String>, body: Bytes) -> Handled {
    let b: LimitBody = parse_strict(&body)?;
    let key = baton_core::Id::parse("key", &key)?;
    let by = baton_core::Actor::Operator(baton_core::Id::parse("operator", &b.operator)?);
    let task = baton_core::graph::key_record_id(&key)?;
    let limit = b.limit;
    run(&a, write_of(task, Request::Limit { by, limit })).await
}

async fn key_status(AsCaller(a): AsCaller, Path(key): Path<String>) -> Handled {
    let key = baton_core::Id::parse("key", &key)?;
    run(&a, Call::KeyShow { key }).await
}

async fn keys(AsCaller(a): AsCaller) -> Handled {
    run(&a, Call::Keys).await
}

async fn set_queue_policy(
    AsCaller(a): AsCaller,
    Path(queue): Path<String>,
    body: Bytes,
) -> Handled {
    let b: QueuePolicyBody = parse_strict(&body)?;
    let queue = baton_core::Id::parse("queue", &queue)?;
    let by = baton_core::Actor::Operator(baton_core::Id::parse("operator", &b.operator)?);
    let task = baton_core::graph::queue_record_id(&queue)?;
    let retry = b.retry;
    run(&a, write_of(task, Request::QueuePolicy { by, retry })).await
}

async fn pause_queue(AsCaller(a): AsCaller, Path(queue): Path<String>, body: Bytes) -> Handled {
    paused(a, queue, body, true).await
}

async fn resume_queue(AsCaller(a): AsCaller, Path(queue): Path<String>, body: Bytes) -> Handled {
    paused(a, queue, body, false).await
}

async fn paused(a: Authority<CallerStore>, queue: String, body: Bytes, paused: bool) -> Handled {
    let b: OperatorBody = parse_strict(&body)?;
    let queue = baton_core::Id::parse("queue", &queue)?;
    let by = baton_core::Actor::Operator(baton_core::Id::parse("operator", &b.operator)?);
    let task = baton_core::graph::queue_record_id(&queue)?;
    run(&a, write_of(task, Request::QueuePause { by, paused })).await
}

async fn retry_failed(AsCaller(a): AsCaller, Path(queue): Path<String>, body: Bytes) -> Handled {
    bulk(a, queue, body, baton_core::authority::Bulk::Retry).await
}

async fn discard_failed(AsCaller(a): AsCaller, Path(queue): Path<String>, body: Bytes) -> Handled {
    bulk(a, queue, body, baton_core::authority::Bulk::Discard).await
}

/// Each task of the act is admitted as its own request (a worker's token
/// is refused at the first, before anything changed).
async fn bulk(
    a: Authority<CallerStore>,
    queue: String,
    body: Bytes,
    act: baton_core::authority::Bulk,
) -> Handled {
    let b: BulkBody = parse_strict(&body)?;
    let queue = baton_core::Id::parse("queue", &queue)?;
    let by = baton_core::Actor::Operator(baton_core::Id::parse("operator", &b.operator)?);
    let max = b.max.unwrap_or(baton_core::given::BULK_DEFAULT);
    run(
        &a,
        Call::QueueFailed {
            queue,
            act,
            by,
            max,
        },
    )
    .await
}

async fn queue_policy(AsCaller(a): AsCaller, Path(queue): Path<String>) -> Handled {
    let queue = baton_core::Id::parse("queue", &queue)?;
    run(&a, Call::QueueShow { queue }).await
}

async fn prune(AsCaller(a): AsCaller, body: Bytes) -> Handled {
    // The operator's check comes before the body is read.
    access::require_operator(a.store().caller(), "a prune")?;
    let b: PruneBody = parse_strict(&body)?;
    let ms = catalogue::check_ms(
        catalogue::Kind::Retention,
        "finished_before_ms",
        b.finished_before_ms,
    )?;
    let forget_after_ms = b
        .forget_after_ms
        .map(|ms| catalogue::check_ms(catalogue::Kind::Retention, "forget_after_ms", ms))
        .transpose()?;
    let by = baton_core::Actor::Operator(baton_core::Id::parse("operator", &b.operator)?);
    let max = b.max.unwrap_or(usize::MAX);
    run(
        &a,
        Call::Prune {
            by,
            older_than_ms: ms,
            forget_after_ms,
            max,
        },
    )
    .await
}

async fn pending(AsCaller(a): AsCaller, Query(q): Query<PageQuery>) -> Handled {
    let limit = limit(&q)?;
    let after = q.after;
    run(&a, Call::Pending { after, limit }).await
}

async fn ack(AsCaller(a): AsCaller, body: Bytes) -> Handled {
    // The operator's check comes before the body is read.
    access::require_operator(a.store().caller(), "an outbox acknowledgement")?;
    let b: AckBody = parse_strict(&body)?;
    // The authority checks the ids before it acknowledges anything.
    let intent_ids = b.intent_ids;
    run(&a, Call::Ack { intent_ids }).await
}

/// The field of `fields` that a request's decoding failed on with
/// `message` (a value of the wrong type: serde's words do not name it, as
/// a request is read through its tag), by its path (`ttl_ms`,
/// `node.priority`): the first whose removal changes the error, followed
/// into objects; `body` when none does.
fn culprit(fields: &Value, message: &str) -> String {
    let changes = |without: Value| match serde_json::from_value::<Request>(without) {
        Ok(_) => true,
        Err(e) => e.to_string() != message,
    };
    let mut path: Vec<String> = Vec::new();
    // At most as deep as the body is (inputs are at most 32 levels).
    for _ in 0..baton_core::json::MAX_DEPTH {
        let here = path.iter().try_fold(fields, |v, k| v.get(k));
        let Some(object) = here.and_then(Value::as_object) else {
            break;
        };
        let found = object
            .keys()
            .filter(|k| !(path.is_empty() && *k == "request"))
            .find(|k| {
                let mut without = fields.clone();
                let parent = path.iter().try_fold(&mut without, |v, p| v.get_mut(p));
                if let Some(Value::Object(o)) = parent {
                    o.remove(*k);
                }
                changes(without)
            })
            .cloned();
        match found {
            Some(k) => path.push(k),
            None => break,
        }
    }
    if path.is_empty() {
        "body".to_owned()
    } else {
        path.join(".")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_the_catalogues() {
        for name in [
            "list",
            "show",
            "holder",
            "verify",
            "gate",
            "events",
            "next",
            "graph",
            "sweep",
            "pending",
            "ack",
            "schedule",
            "schedules",
            "tick",
            "limit",
            "key",
            "keys",
            "prune",
        ] {
            assert_ne!(at(name), "/v1/not-in-the-catalogue", "{name}");
        }
        assert_eq!(
            at("add_graph"),
            at("graph"),
            "a graph's add and its show share a path"
        );
        assert_eq!(
            at("limit"),
            at("key"),
            "a key's limit and status share a path"
        );
    }
}
