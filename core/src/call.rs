//! Operations as values: a [`Call`] is one operation of the catalogue with
//! its inputs read, and [`Call::run`] runs it on an authority and says
//! what came of it ([`Output`]): the items, as the JSON every front end
//! shows, whether it passed, whether it wrote, and what the items are
//! ([`Shape`]). The CLI and the task API map their input to a `Call` and
//! render its `Output`; what an answer holds is decided here, once.

use crate::authority::{
    Authority, Holder, Verification, cascade_json, cascade_proceeded, refusal_json, reply_json,
};
use crate::error::Result;
use crate::graph::{NewNode, Readiness, Taker};
use crate::id::{Id, TaskId};
use crate::kinds::{Actor, RequestKind, State};
use crate::model::TaskRecord;
use crate::refusal::Refusal;
use crate::request::{Preconditions, Request};
use crate::store::Store;
use crate::workgraph::{Added, GraphState, KeyStatus};
use crate::{GraphNode, Reply};
use serde_json::{Value, json};

/// One operation with its inputs, ready to run.
// Made once per operation and moved once: boxing the request would only
// add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Call {
    /// A write: one request through [`Authority::submit`], under
    /// preconditions (none when not given).
    Write {
        task: TaskId,
        request: Request,
        #[serde(default, skip_serializing_if = "Preconditions::is_empty")]
        pre: Preconditions,
    },
    /// The last grant and whether its lease is live.
    Holder { task: TaskId },
    /// Whether work under `fence` may be accepted now.
    Verify { task: TaskId, fence: u64 },
    /// The task's record.
    Show { task: TaskId },
    /// A page of a known task's events.
    TaskEvents {
        task: TaskId,
        after: Option<String>,
        limit: usize,
    },
    /// A page of the store's events, or of one task's.
    Events {
        task: Option<TaskId>,
        after: Option<String>,
        limit: usize,
    },
    /// The release gate.
    Gate { task: TaskId },
    /// A page of tasks, by derived state, in a queue if given.
    List {
        state: Option<State>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        queue: Option<Id>,
        after: Option<String>,
        limit: usize,
    },
    /// The claimable graph tasks that are ready, or blocked.
    ListGraph {
        state: GraphState,
        queue: Option<Id>,
        limit: usize,
    },
    /// Every graph task.
    Graph,
    /// Persists what time changed (expired leases, passed deadlines).
    Sweep { dry_run: bool },
    /// A page of notifications not yet acknowledged.
    Pending { after: Option<String>, limit: usize },
    /// Acknowledges notifications.
    Ack { intent_ids: Vec<String> },
    /// Adds a graph, all of it or nothing.
    AddGraph { nodes: Vec<NewNode> },
    /// A holder's reports of many grants, each on its own fence, in one
    /// commit.
    Report { reports: Vec<(TaskId, Request)> },
    /// The holder records a step (and adds the tasks it spawns, in the
    /// same commit; with `wait`, the task waits for them).
    Checkpoint {
        task: TaskId,
        owner: Id,
        fence: u64,
        step: Id,
        output: Value,
        spawn: Vec<NewNode>,
        wait: bool,
    },
    /// An operator's cancel of a task and every task below it.
    CancelCascade {
        task: TaskId,
        by: Actor,
        force: bool,
    },
    /// The next ready task, waiting up to `wait_ms` when given; with
    /// `keep_waiting`, through `drained` too (until work is added).
    Next {
        taker: Taker,
        queues: Vec<Id>,
        wait_ms: Option<u64>,
        #[serde(default)]
        keep_waiting: bool,
        /// Up to this many grants in one commit, answered as a list (even
        /// of one); `None`: the one `next`, answered as its grant.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        count: Option<u32>,
    },
    /// Every schedule.
    Schedules,
    /// Makes the tasks whose schedules are due.
    Tick,
    /// A concurrency key's limit, holders and parked tasks.
    KeyShow { key: Id },
    /// Every concurrency key.
    Keys,
    /// A queue's policy.
    QueueShow { queue: Id },
    /// Retries or discards each of a queue's failed tasks, at most `max`.
    QueueFailed {
        queue: Id,
        act: crate::authority::Bulk,
        by: Actor,
        max: usize,
    },
    /// Prunes ended tasks older than `older_than_ms` to tombstones, marked
    /// to be forgotten `forget_after_ms` later if given, and forgets the
    /// marked tombstones whose time came; at most `max`.
    Prune {
        by: Actor,
        older_than_ms: u64,
        forget_after_ms: Option<u64>,
        max: usize,
    },
}

/// What the items of an [`Output`] are, so a front end shows them as such.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Shape {
    /// Keys and values (or columns of every key, for a list).
    #[default]
    Generic,
    /// A grant: who holds what, under which fence, until when.
    Grant,
    /// A refusal: its reason and what it says.
    Refusal,
    /// Task records, as a list.
    Tasks,
    /// Events.
    Events,
    /// One task's record.
    Record,
    /// Graph nodes.
    Graph,
    /// Settings (a key's limit, a queue's policy, a schedule): durations
    /// in `_ms` fields, the times they name.
    Setting,
}

/// Whether an operation did what it was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// A refusal, a gate that blocks, a fence that is not current.
    Refused,
    NotFound,
}

/// What came of a [`Call`] as core's types, beside the JSON of its
/// items: for a front end that shows types of its own (Python's `Grant`,
/// `Record`, `Holder`) rather than the JSON.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Answer {
    /// The items are all there is.
    #[default]
    Items,
    /// A write's reply, or a next's.
    Reply(Reply),
    /// A refusal, and the task it was about when it is not the one asked
    /// (a graph's node).
    Refused(Refusal, Option<TaskId>),
    /// An operator's cancel, and each dependent's.
    Cascade(Reply, Vec<(TaskId, Reply)>),
    /// The last grant, if the task was ever granted.
    Holder(Option<Holder>),
    Verification(Verification),
    /// Task records (one task's, a page of them, the schedules').
    Records(Vec<TaskRecord>),
    /// The tasks a tick made.
    Made(Vec<(TaskId, Reply)>),
    Keys(Vec<KeyStatus>),
    Added(Added),
    /// How many (pruned, acknowledged).
    Count(u64),
    /// A batch's replies (`next --count`): its grants, in order.
    Replies(Vec<Reply>),
}

/// What came of a [`Call`].
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    pub items: Vec<Value>,
    /// The cursor of the next page, for a page.
    pub next: Option<String>,
    /// Whether the answer is a list (a page, every key) rather than one item.
    pub list: bool,
    pub status: Status,
    /// A write was applied.
    pub wrote: bool,
    pub shape: Shape,
    /// The same, as core's types.
    pub answer: Answer,
}

impl Output {
    /// One item that passed.
    pub fn one(v: Value) -> Output {
        Output {
            items: vec![v],
            next: None,
            list: false,
            status: Status::Ok,
            wrote: false,
            shape: Shape::Generic,
            answer: Answer::Items,
        }
    }

    /// A list (a page when `next` is given).
    pub fn list(items: Vec<Value>, next: Option<String>) -> Output {
        Output {
            items,
            next,
            list: true,
            ..Output::one(Value::Null)
        }
    }

    /// A refusal: `NotFound` for an unknown task, `Refused` otherwise.
    pub fn refused(r: &Refusal) -> Output {
        Output {
            status: if *r == Refusal::NotFound {
                Status::NotFound
            } else {
                Status::Refused
            },
            shape: Shape::Refusal,
            answer: Answer::Refused(r.clone(), None),
            ..Output::one(refusal_json(r))
        }
    }

    /// A reply: the grant when `as_grant` and the record holds one, the
    /// record otherwise, or the refusal.
    pub fn reply(reply: &Reply, as_grant: bool) -> Output {
        if let Reply::Refused(r) = reply {
            return Output::refused(r);
        }
        Output {
            shape: match (as_grant, reply.grant()) {
                (true, Some(_)) => Shape::Grant,
                _ => Shape::Record,
            },
            answer: Answer::Reply(reply.clone()),
            ..Output::one(reply_json(reply, as_grant))
        }
    }

    /// The refusal of `task`, one member of a group that commits all or
    /// nothing: named, with what came of the rest (`nothing`).
    fn refused_member(r: Refusal, task: TaskId, nothing: &str) -> Output {
        let mut out = Output::refused(&r).answering(Answer::Refused(r, Some(task.clone())));
        if let Some(v) = out.items.first_mut() {
            v["task"] = json!(task);
            v["message"] = json!(format!(
                "{task}: {}; {nothing}",
                v["message"].as_str().unwrap_or_default()
            ));
        }
        out
    }

    /// A check: `Ok` when it passed, `Refused` when not.
    fn checked(passed: bool, v: Value) -> Output {
        Output {
            status: if passed { Status::Ok } else { Status::Refused },
            ..Output::one(v)
        }
    }

    fn shaped(mut self, shape: Shape) -> Output {
        self.shape = shape;
        self
    }

    fn written(mut self, wrote: bool) -> Output {
        self.wrote = wrote;
        self
    }

    /// A grant answered with its signed token (`token`), when the
    /// authority or its store signs fences. A token the signer could not
    /// give leaves the grant without one: a guard with keys then refuses
    /// the holder's writes, which is the safe way to be wrong.
    async fn signed<S: Store>(mut self, a: &Authority<S>) -> Output {
        // Nothing signs (most stores): no work on the grant's path.
        let signs = a.signs_fences() || a.store().capabilities().signs_fences;
        if self.shape != Shape::Grant || !signs {
            return self;
        }
        let Answer::Reply(reply) = &self.answer else {
            return self;
        };
        let Some(g) = reply.grant() else {
            return self;
        };
        if let (Ok(Some(token)), Some(v)) = (
            a.fence_token(&g.task, g.fence).await,
            self.items.first_mut(),
        ) {
            v["token"] = json!(token);
        }
        self
    }

    fn answering(mut self, answer: Answer) -> Output {
        self.answer = answer;
        self
    }
}

/// Whether a request's answer shows the grant rather than the record.
pub fn answers_with_grant(kind: RequestKind) -> bool {
    matches!(
        kind,
        RequestKind::Claim | RequestKind::Renew | RequestKind::Recover | RequestKind::TaskClaim
    )
}

/// A graph node as shown: its fields, and the state a person reads (READY
/// and BLOCKED for claimable tasks).
pub fn graph_json(n: &GraphNode) -> Value {
    let mut v = json!(n);
    v["shown"] = json!(n.shown_state());
    v
}

/// A task a schedule made, as shown.
pub fn made_json(task: &TaskId, reply: &Reply) -> Value {
    json!({"task": task, "state": reply.record().map(|r| r.state), "made": true})
}

impl Call {
    /// Runs the call on `a`.
    pub async fn run<S: Store>(self, a: &Authority<S>) -> Result<Output> {
        Ok(match self {
            Call::Write { task, request, pre } => {
                let as_grant = answers_with_grant(request.kind());
                let setting = matches!(
                    request,
                    Request::Limit { .. }
                        | Request::QueuePolicy { .. }
                        | Request::QueuePause { .. }
                        | Request::Schedule { .. }
                );
                let evidence = match &request {
                    Request::Succeed { evidence, .. } => Some(evidence.clone()),
                    _ => None,
                };
                let reply = a.submit(&task, request, pre).await?;
                // A setting's write answers with the setting, as its read
                // shows it, not with the record that holds it.
                if setting && let Some(record) = reply.record() {
                    let mut view = setting_json(a, record).await?;
                    view["idempotent"] = json!(matches!(reply, Reply::Acknowledged(_)));
                    return Ok(Output::one(view).shaped(Shape::Setting).written(true));
                }
                let mut out = Output::reply(&reply, as_grant)
                    .written(true)
                    .signed(a)
                    .await;
                let ignored = evidence.map(|ev| reply.evidence_ignored(&ev));
                if let Some(ignored) = ignored.filter(|i| !i.is_empty())
                    && let Some(v) = out.items.first_mut()
                {
                    v["evidence_ignored"] = json!(ignored);
                }
                out
            }
            Call::Holder { task } => match a.holder(&task).await? {
                Err(r) => Output::refused(&r),
                Ok(None) => Output::one(json!({"task": task, "holder": null, "live": false}))
                    .answering(Answer::Holder(None)),
                Ok(Some(h)) => Output::one(json!(h)).answering(Answer::Holder(Some(h))),
            },
            Call::Verify { task, fence } => match a.verify(&task, fence).await? {
                Err(r) => Output::refused(&r),
                Ok(v) => Output::checked(v.current, json!(v)).answering(Answer::Verification(v)),
            },
            Call::Show { task } => match a.get(&task).await? {
                None => Output::refused(&Refusal::NotFound),
                Some(r) => Output::one(json!(r))
                    .shaped(Shape::Record)
                    .answering(Answer::Records(vec![r])),
            },
            Call::TaskEvents { task, after, limit } => {
                if a.get(&task).await?.is_none() {
                    return Ok(Output::refused(&Refusal::NotFound));
                }
                let p = a.events(Some(&task), after.as_deref(), limit).await?;
                Output::list(p.items.iter().map(|e| json!(e)).collect(), p.next)
                    .shaped(Shape::Events)
            }
            Call::Events { task, after, limit } => {
                let p = a.events(task.as_ref(), after.as_deref(), limit).await?;
                Output::list(p.items.iter().map(|e| json!(e)).collect(), p.next)
                    .shaped(Shape::Events)
            }
            Call::Gate { task } => match a.gate(&task).await? {
                Err(r) => Output::refused(&r),
                Ok(g) => Output::checked(g.passed, json!(g)),
            },
            Call::List {
                state,
                queue,
                after,
                limit,
            } => {
                let p = a
                    .list_in(state, queue.as_ref(), after.as_deref(), limit)
                    .await?;
                let mut items = Vec::with_capacity(p.items.len());
                for r in &p.items {
                    let mut v = json!(r);
                    // A claimable graph task is shown as a person asks
                    // about it: READY, BLOCKED (behind a dependency that
                    // ended without success, at any depth), or waiting
                    // (REGISTERED).
                    if r.state == State::Registered && !r.depends_on().is_empty() {
                        let shown = match a.readiness(r).await? {
                            Readiness::Ready => "READY",
                            Readiness::Blocked { .. } | Readiness::Unknown { .. } => "BLOCKED",
                            Readiness::Waiting { .. } => "REGISTERED",
                        };
                        v["shown"] = json!(shown);
                    }
                    items.push(v);
                }
                Output::list(items, p.next)
                    .shaped(Shape::Tasks)
                    .answering(Answer::Records(p.items))
            }
            Call::ListGraph {
                state,
                queue,
                limit,
            } => {
                let nodes = a.list_graph(state, queue.as_ref(), limit).await?;
                Output::list(nodes.iter().map(graph_json).collect(), None).shaped(Shape::Graph)
            }
            Call::Graph => {
                let nodes = a.graph().await?;
                Output::list(nodes.iter().map(graph_json).collect(), None).shaped(Shape::Graph)
            }
            Call::Sweep { dry_run } => {
                let swept = a.sweep(dry_run).await?;
                let wrote = !dry_run && !swept.is_empty();
                Output::list(swept.iter().map(|s| json!(s)).collect(), None).written(wrote)
            }
            Call::Pending { after, limit } => {
                let p = a.pending(after.as_deref(), limit).await?;
                Output::list(p.items.iter().map(|n| json!(n)).collect(), p.next)
            }
            Call::Ack { intent_ids } => {
                let acked = a.ack(&intent_ids).await?;
                Output::one(json!({"acknowledged": acked, "intent_ids": intent_ids}))
                    .written(acked > 0)
                    .answering(Answer::Count(acked))
            }
            Call::CancelCascade { task, by, force } => {
                let (first, cascaded) = a.cancel_cascade(&task, by, force).await?;
                let mut out = Output::reply(&first, false).written(true);
                if let Some(v) = out.items.first_mut() {
                    *v = cascade_json(&first, &cascaded);
                }
                if cascade_proceeded(&first, &cascaded) {
                    out.status = Status::Ok;
                }
                out.answering(Answer::Cascade(first, cascaded))
            }
            Call::AddGraph { nodes } => match a.add_graph(nodes).await? {
                Ok(added) => Output::one(json!(added))
                    .written(true)
                    .answering(Answer::Added(added)),
                Err((task, r)) => Output::refused_member(r, task, "nothing was added"),
            },
            Call::Report { reports } => {
                let tasks: Vec<TaskId> = reports.iter().map(|(t, _)| t.clone()).collect();
                let replies = a.report_many(reports).await?;
                let items = replies
                    .iter()
                    .zip(tasks)
                    .map(|(r, task)| {
                        let mut v = reply_json(r, false);
                        // A refusal names the task it is about.
                        v["task"] = json!(task);
                        v
                    })
                    .collect();
                let all = replies.iter().all(|r| !r.is_refused());
                Output {
                    status: if all { Status::Ok } else { Status::Refused },
                    ..Output::list(items, None)
                        .shaped(Shape::Record)
                        .written(true)
                        .answering(Answer::Replies(replies))
                }
            }
            Call::Checkpoint {
                task,
                owner,
                fence,
                step,
                output,
                spawn,
                wait,
            } => {
                let step = crate::workgraph::Step {
                    owner,
                    fence,
                    step,
                    output,
                    spawn,
                    wait,
                };
                match a.checkpoint(&task, step).await? {
                    Ok(reply) => Output::reply(&reply, false).written(true),
                    Err((child, r)) => {
                        Output::refused_member(r, child, "nothing was added or recorded")
                    }
                }
            }
            Call::Next {
                taker,
                queues,
                wait_ms,
                keep_waiting,
                count: None,
            } => {
                let reply = a
                    .next_as_asked(taker, &queues, wait_ms, keep_waiting)
                    .await?;
                Output::reply(&reply, true).written(true).signed(a).await
            }
            Call::Next {
                taker,
                queues,
                wait_ms,
                keep_waiting,
                count: Some(count),
            } => {
                let replies = a
                    .next_many_as_asked(taker, &queues, wait_ms, keep_waiting, count)
                    .await?;
                if let [r @ Reply::Refused(_)] = replies.as_slice() {
                    return Ok(Output::reply(r, true));
                }
                let mut items = Vec::with_capacity(replies.len());
                for r in &replies {
                    let one = Output::reply(r, true).signed(a).await;
                    items.extend(one.items);
                }
                Output::list(items, None)
                    .shaped(Shape::Grant)
                    .written(true)
                    .answering(Answer::Replies(replies))
            }
            Call::Schedules => {
                let records = a.schedules().await?;
                let now = a.now();
                let items = records.iter().map(|r| schedule_json(r, now)).collect();
                Output::list(items, None)
                    .shaped(Shape::Setting)
                    .answering(Answer::Records(records))
            }
            Call::Tick => {
                let made = a.tick_schedules().await?;
                Output::list(made.iter().map(|(t, r)| made_json(t, r)).collect(), None)
                    .written(!made.is_empty())
                    .answering(Answer::Made(made))
            }
            Call::KeyShow { key } => Output::one(key_json(a, &key).await?).shaped(Shape::Setting),
            Call::Keys => {
                let keys = a.keys().await?;
                let items = keys
                    .iter()
                    .map(|s| {
                        json!({
                            "key": s.key,
                            "limit": s.limit,
                            "holders": s.holders.len(),
                            "parked": s.parked.len(),
                        })
                    })
                    .collect();
                Output::list(items, None)
                    .shaped(Shape::Setting)
                    .answering(Answer::Keys(keys))
            }
            Call::QueueShow { queue } => {
                Output::one(queue_json(a, &queue).await?).shaped(Shape::Setting)
            }
            Call::QueueFailed {
                queue,
                act,
                by,
                max,
            } => {
                let out = a.bulk_failed(&queue, act, by, max).await?;
                let done = match act {
                    crate::authority::Bulk::Retry => "retried",
                    crate::authority::Bulk::Discard => "discarded",
                };
                let refused: Vec<Value> = out
                    .refused
                    .iter()
                    .map(|(task, why)| json!({"task": task, "refusal": why}))
                    .collect();
                Output::one(json!({
                    "queue": queue,
                    done: out.done,
                    // Not "refused": that key marks an answer that is a refusal.
                    "refusals": refused,
                    "more": out.more,
                }))
                .written(out.done > 0)
            }
            Call::Prune {
                by,
                older_than_ms,
                forget_after_ms,
                max,
            } => {
                let p = a
                    .prune_and_forget(by, older_than_ms, forget_after_ms, max)
                    .await?;
                Output::one(json!({"pruned": p.pruned, "forgotten": p.forgotten}))
                    .written(p.pruned + p.forgotten > 0)
                    .answering(Answer::Count(p.pruned))
            }
        })
    }
}

/// A schedule as `schedule list` shows it: its period (`every_ms`, or
/// `cron`), queue, when it was set and when it next makes a task, and why
/// its last tick made none, until one does.
fn schedule_json(r: &TaskRecord, now: crate::Timestamp) -> Value {
    let s = r.schedule.as_ref();
    json!({
        "schedule": r.task,
        "state": r.state,
        "every_ms": s.map(|s| s.every_ms).filter(|ms| *ms > 0),
        "cron": s.and_then(|s| s.cron.as_deref()),
        "queue": s.map(|s| &s.template.queue),
        "since": r.created_at,
        "next_run": s.filter(|_| !r.state.is_terminal()).and_then(|s| s.next_run(r.created_at, now)),
        "failure": r.schedule_failure,
    })
}

/// A concurrency key as `limit show` shows it.
async fn key_json<S: Store>(a: &Authority<S>, key: &Id) -> Result<Value> {
    Ok(match a.key_status(key).await? {
        Some(s) => json!(s),
        None => json!({"key": key, "limit": null, "holders": [], "parked": []}),
    })
}

/// A queue's policy as `queue show` shows it.
async fn queue_json<S: Store>(a: &Authority<S>, queue: &Id) -> Result<Value> {
    let policy = a.queue_policy(queue).await?.unwrap_or_default();
    Ok(queue_view(queue, &policy))
}

/// A queue's policy as every front end shows it.
pub fn queue_view(queue: &Id, policy: &crate::graph::QueuePolicy) -> Value {
    json!({"queue": queue, "retry": policy.retry, "paused_at": policy.paused_at})
}

/// The setting `record` holds, as its read shows it.
async fn setting_json<S: Store>(a: &Authority<S>, record: &TaskRecord) -> Result<Value> {
    let id = record.task.as_str();
    if let Some(key) = id.strip_prefix(crate::graph::KEY_PREFIX) {
        return key_json(a, &Id::parse("key", key)?).await;
    }
    if let Some(queue) = id.strip_prefix(crate::graph::QUEUE_PREFIX) {
        return queue_json(a, &Id::parse("queue", queue)?).await;
    }
    Ok(schedule_json(record, a.now()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{ManualClock, MemoryStore, Timestamp};
    use std::sync::Arc;

    fn id(s: &str) -> Id {
        Id::parse("id", s).unwrap()
    }

    /// A call is a value: what a front end sends is what runs.
    #[test]
    fn a_call_is_one_serde_value() {
        let call = Call::Write {
            task: id("t"),
            request: Request::Claim {
                owner: id("w"),
                ttl_ms: Some(1000),
                lock_delay_ms: None,
            },
            pre: Preconditions::none(),
        };
        let text = serde_json::to_string(&call).unwrap();
        assert!(text.contains(r#""op":"write""#), "{text}");
        assert_eq!(serde_json::from_str::<Call>(&text).unwrap(), call);
        let page: Call = serde_json::from_str(
            r#"{"op": "list_graph", "state": "BLOCKED", "queue": null, "limit": 5}"#,
        )
        .unwrap();
        assert_eq!(
            page,
            Call::ListGraph {
                state: GraphState::Blocked,
                queue: None,
                limit: 5
            }
        );
    }

    /// What a call's output says: a claim's grant, a stale fence's
    /// refusal, an unknown task's `NotFound`, a page.
    #[tokio::test]
    async fn outputs_say_what_came_of_the_call() {
        let clock = Arc::new(ManualClock::new(Timestamp::from_millis(1_000)));
        let a = Authority::new(MemoryStore::new(), clock.clone());
        let claim = |owner: &str| Call::Write {
            task: id("t"),
            request: Request::Claim {
                owner: id(owner),
                ttl_ms: Some(1000),
                lock_delay_ms: None,
            },
            pre: Preconditions::none(),
        };
        let out = claim("w1").run(&a).await.unwrap();
        assert_eq!(
            (out.status, out.shape, out.wrote),
            (Status::Ok, Shape::Grant, true)
        );
        let fence = out.items[0]["fence"].as_u64().unwrap();
        // Another owner while the lease is live: refused, and shown as such.
        let out = claim("w2").run(&a).await.unwrap();
        assert_eq!((out.status, out.shape), (Status::Refused, Shape::Refusal));
        assert_eq!(out.items[0]["refused"], "held", "{:?}", out.items);
        // The lease runs out; a new grant makes the first fence stale.
        clock.advance_ms(2_000);
        let out = claim("w2").run(&a).await.unwrap();
        assert_eq!(out.status, Status::Ok);
        let out = Call::Verify {
            task: id("t"),
            fence,
        }
        .run(&a)
        .await
        .unwrap();
        assert_eq!(out.status, Status::Refused, "{:?}", out.items);
        assert_eq!(out.items[0]["current"], false);
        let out = Call::Show { task: id("nobody") }.run(&a).await.unwrap();
        assert_eq!((out.status, out.list), (Status::NotFound, false));
        let out = Call::List {
            state: None,
            queue: None,
            after: None,
            limit: 10,
        }
        .run(&a)
        .await
        .unwrap();
        assert_eq!(
            (out.list, out.items.len(), out.shape),
            (true, 1, Shape::Tasks)
        );
    }
}
