//! The one catalogue of operations: every operation a front end offers
//! (the CLI, the HTTP task API, the Python package), with its inputs and
//! the rule each input keeps. A front end maps onto this table: its
//! command, route or method names an entry, and it reads each input with
//! the rule of that input's [`Kind`] ([`duration_ms`], [`check_ms`]), so
//! that a TTL, a lock delay or a wait has the same bounds whichever door
//! it came in by. The server publishes the HTTP side as an OpenAPI
//! document generated from this table (`GET /v1/openapi.json`).

use crate::error::{Error, Result};
use crate::request::{MAX_TTL_MS, MIN_TTL_MS};

/// The longest wait a blocking call may ask for (`next --wait`, the task
/// API's `?wait=`, Python's `wait=`), in every front end.
pub const MAX_WAIT_MS: u64 = 3600 * 1000;

/// What an input is, and so the rule it keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A task, owner, executor, run, queue or operator id (SPEC §8).
    Id,
    /// A fence: a positive whole number.
    Fence,
    /// A lease's length: 1 ms to 7 days.
    Ttl,
    /// How long after an unreleased lease's end no one is granted the
    /// task: 0 (none) to 7 days.
    LockDelay,
    /// How long a blocking call waits: 0 to [`MAX_WAIT_MS`].
    Wait,
    /// A whole number (a step, an iteration).
    Count,
    /// How many items a page holds: 1 to [`crate::authority::MAX_PAGE`].
    Limit,
    /// A page cursor (the `next` of the page before).
    Cursor,
    /// A JSON value (an error object: at most 16 KiB).
    Json,
    /// Evidence: `KEY=sha256:HEX` pairs, at most 100.
    Evidence,
    /// A task state (`SUCCEEDED`, ...; `READY`, `BLOCKED` for a graph).
    State,
    /// A list of queue ids.
    Queues,
    /// A task manifest (JSON, at most 64 KiB).
    Manifest,
    /// A graph file (JSON nodes).
    Graph,
    /// Outbox intent ids.
    IntentIds,
    /// A work graph node: `queue`, `priority`, `depends_on`, `timeout_ms`.
    Node,
    /// Yes or no.
    Flag,
    /// A step's output: any JSON value, at most 64 KiB.
    Output,
    /// The tasks a step adds: graph nodes.
    Spawn,
    /// How many grants one `next` makes: 1 to 1000.
    Batch,
    /// A holder's reports: a list of task, owner, fence, outcome (and error).
    Reports,
    /// Who asks: `{"role": "operator", "id": NAME}` (or a worker, the
    /// holder, by its owner id), as the task API reads it.
    Actor,
    /// A schedule's period: 1 s to a year.
    Period,
    /// How long ago a task must have ended to be pruned: 0 to 100 years.
    Retention,
    /// A retry policy: attempts, the first wait, its growth and its cap.
    Retry,
    /// A cron expression, read in UTC.
    Cron,
}

impl Kind {
    /// The rule, as an error message and the documentation say it.
    pub fn rule(self) -> &'static str {
        match self {
            Kind::Id => "an id: 1 to 256 bytes, printable, no spaces",
            Kind::Fence => "a positive whole number",
            Kind::Ttl => "a duration from 1 ms to 7 days",
            Kind::LockDelay => "a duration from 0 to 7 days",
            Kind::Wait => "a duration from 0 to 1 hour",
            Kind::Count => "a whole number",
            Kind::Limit => "a whole number from 1 to 10000",
            Kind::Cursor => "the `next` of the page before",
            Kind::Json => "a JSON object (an error, metadata) of at most 16 KiB",
            Kind::Evidence => "KEY=sha256:HEX pairs, at most 100",
            Kind::State => "a task state",
            Kind::Queues => "a list of queue ids",
            Kind::Manifest => "a task manifest (JSON, at most 64 KiB)",
            Kind::Graph => "graph nodes (JSON)",
            Kind::IntentIds => "a list of intent ids",
            Kind::Node => {
                "a graph node: queue, priority, the tasks it depends on, a run-time limit per attempt (1 ms to 7 days), a start (a time, or a delay, ending by year 9999), a retry policy, a concurrency key, and the W3C traceparent it is added in (carried on each grant)"
            }
            Kind::Flag => "true or false",
            Kind::Output => {
                "a step's output: any JSON value of at most 64 KiB (a task's steps at most 256 KiB together); on the command line JSON text, or @FILE to read a file (@- standard input)"
            }
            Kind::Batch => "a whole number from 1 to 1000: up to this many grants in one commit",
            Kind::Reports => {
                "a JSON list of 1 to 1000 reports: {\"task\", \"owner\", \"fence\", \"outcome\": \"complete\" | \"fail\" | \"release\", \"error\"} (on the command line a file, or standard input)"
            }
            Kind::Spawn => {
                "the tasks a step adds, in its commit: graph nodes as a graph file gives them (on the command line @FILE, or JSON text)"
            }
            Kind::Actor => "who asks: {\"role\": \"operator\" or \"worker\", \"id\": an id}",
            Kind::Period => "a duration from 1 s to a year",
            Kind::Cron => {
                "a cron expression in UTC: 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds first, at most 128 characters"
            }
            Kind::Retention => "a duration from 0 to 100 years",
            Kind::Retry => {
                "a retry policy: max_attempts (1 to 1000), backoff_ms (the first wait, up to 7 days), factor (1 to 10, to a thousandth: 1.5), max_backoff_ms (the longest wait)"
            }
        }
    }

    /// The bounds of a duration kind, in ms.
    fn bounds(self) -> Option<(u64, u64)> {
        match self {
            Kind::Ttl => Some((MIN_TTL_MS, MAX_TTL_MS)),
            Kind::LockDelay => Some((0, MAX_TTL_MS)),
            Kind::Wait => Some((0, MAX_WAIT_MS)),
            Kind::Period => Some((
                crate::graph::Schedule::MIN_EVERY_MS,
                crate::graph::MAX_START_AFTER_MS,
            )),
            Kind::Retention => Some((0, MAX_RETENTION_MS)),
            _ => None,
        }
    }

    /// The JSON Schema of the input as the task API reads it.
    pub fn schema(self) -> serde_json::Value {
        use serde_json::json;
        match self {
            Kind::Id | Kind::Cursor | Kind::State => json!({"type": "string"}),
            Kind::Fence => json!({"type": "integer", "minimum": 1}),
            Kind::Ttl => json!({"type": "integer", "minimum": MIN_TTL_MS, "maximum": MAX_TTL_MS}),
            Kind::LockDelay => json!({"type": "integer", "minimum": 0, "maximum": MAX_TTL_MS}),
            Kind::Wait => json!({"type": "string", "example": "30s"}),
            Kind::Count => json!({"type": "integer", "minimum": 0}),
            Kind::Limit => {
                json!({"type": "integer", "minimum": 1, "maximum": crate::authority::MAX_PAGE})
            }
            // An error or metadata: a JSON object.
            Kind::Json => json!({"type": "object"}),
            Kind::Manifest => json!({}),
            Kind::Evidence => {
                json!({"type": "object", "additionalProperties": {"type": "string"}})
            }
            Kind::Queues | Kind::IntentIds => {
                json!({"type": "array", "items": {"type": "string"}})
            }
            Kind::Graph | Kind::Spawn => json!({"type": "array", "items": {"type": "object"}}),
            Kind::Output => json!({}),
            Kind::Reports => json!({"type": "array", "items": {"type": "object", "properties": {
                "task": {"type": "string"},
                "owner": {"type": "string"},
                "fence": {"type": "integer", "minimum": 1},
                "outcome": {"enum": ["complete", "fail", "release"]},
                "error": {"type": "object"},
            }, "required": ["task", "owner", "fence", "outcome"]}}),
            Kind::Batch => {
                json!({"type": "integer", "minimum": 1, "maximum": crate::graph::MAX_NEXT_COUNT})
            }
            Kind::Node => json!({"type": "object", "properties": {
                "queue": {"type": "string"},
                "priority": {"type": "integer"},
                "depends_on": {"type": "array", "items": {"type": "string"}},
                "timeout_ms": {"type": "integer", "minimum": MIN_TTL_MS, "maximum": MAX_TTL_MS},
                "start": {"oneOf": [
                    {"type": "object", "properties": {"at": {"type": "string", "format": "date-time"}}},
                    {"type": "object", "properties": {"after_ms": {"type": "integer", "minimum": 0}}},
                ]},
                "retry": Kind::Retry.schema(),
                "key": {"type": "string"},
                "traceparent": {"type": "string", "pattern": "^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"},
            }}),
            Kind::Retry => json!({"type": "object", "properties": {
                "max_attempts": {"type": "integer", "minimum": 1, "maximum": 1000},
                "backoff_ms": {"type": "integer", "minimum": 0, "maximum": MAX_TTL_MS},
                "factor": {"type": "number", "minimum": 1, "maximum": 10},
                "max_backoff_ms": {"type": "integer", "minimum": MIN_TTL_MS, "maximum": MAX_TTL_MS},
            }, "required": ["max_attempts", "backoff_ms"]}),
            Kind::Flag => json!({"type": "boolean"}),
            Kind::Actor => json!({
                "type": "object",
                "properties": {
                    "role": {"type": "string", "enum": ["operator", "worker"]},
                    "id": {"type": "string"},
                },
                "required": ["role", "id"],
                "additionalProperties": false,
                "example": {"role": "operator", "id": "alice"},
            }),
            Kind::Retention => {
                json!({"type": "integer", "minimum": 0, "maximum": MAX_RETENTION_MS})
            }
            Kind::Period => json!({
                "type": "integer",
                "minimum": crate::graph::Schedule::MIN_EVERY_MS,
                "maximum": crate::graph::MAX_START_AFTER_MS,
            }),
            Kind::Cron => json!({
                "type": "string",
                "maxLength": crate::graph::Schedule::MAX_CRON_CHARS,
            }),
        }
    }
}

/// One input of an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Input {
    /// The name a person uses (`ttl`): the CLI's option, Python's argument.
    pub name: &'static str,
    /// The name on the wire (`ttl_ms`): the task API's field or parameter.
    pub wire: &'static str,
    pub kind: Kind,
    pub required: bool,
}

const fn input(name: &'static str, wire: &'static str, kind: Kind, required: bool) -> Input {
    Input {
        name,
        wire,
        kind,
        required,
    }
}

const TASK: Input = input("task", "task", Kind::Id, true);
const OWNER: Input = input("owner", "owner", Kind::Id, true);
const FENCE: Input = input("fence", "fence", Kind::Fence, true);
const TTL: Input = input("ttl", "ttl_ms", Kind::Ttl, false);
const LOCK_DELAY: Input = input("lock_delay", "lock_delay_ms", Kind::LockDelay, false);
const WAIT: Input = input("wait", "wait", Kind::Wait, false);
const KEEP_WAITING: Input = input("keep_waiting", "keep_waiting", Kind::Flag, false);
const COUNT: Input = input("count", "count", Kind::Batch, false);
const RUN: Input = input("run", "run_id", Kind::Id, true);
const EXECUTOR: Input = input("executor", "executor", Kind::Id, true);
const AFTER: Input = input("after", "after", Kind::Cursor, false);
const LIMIT: Input = input("limit", "limit", Kind::Limit, false);
const QUEUES: Input = input("queues", "queues", Kind::Queues, false);

/// How the task API reaches an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub method: &'static str,
    /// `{task}` stands for the task id.
    pub path: &'static str,
}

const fn get(path: &'static str) -> Option<Route> {
    Some(Route {
        method: "GET",
        path,
    })
}

const fn post(path: &'static str) -> Option<Route> {
    Some(Route {
        method: "POST",
        path,
    })
}

/// One operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op {
    /// The operation's name; for a write, the request's (`claim`, `task_claim`).
    pub name: &'static str,
    pub summary: &'static str,
    /// Whether it may change the store.
    pub write: bool,
    /// Whether only an operator's token may ask it.
    pub operator: bool,
    /// The CLI command (`claim`, `task claim`), if the CLI has one.
    pub cli: Option<&'static str>,
    /// The task API's route, if it has one.
    pub http: Option<Route>,
    /// The Python `Authority` method, if the package has one.
    pub python: Option<&'static str>,
    pub inputs: &'static [Input],
}

/// Every operation a front end offers.
pub const OPERATIONS: &[Op] = &[
    Op {
        name: "claim",
        summary: "Claim a bare task (created if absent): a grant with a new fence, or a refusal",
        write: true,
        operator: false,
        cli: Some("claim"),
        http: post("/v1/tasks/{task}/claim"),
        python: Some("claim"),
        inputs: &[TASK, OWNER, TTL, LOCK_DELAY],
    },
    Op {
        name: "renew",
        summary: "Extend the holder's lease",
        write: true,
        operator: false,
        cli: Some("renew"),
        http: post("/v1/tasks/{task}/renew"),
        python: Some("renew"),
        inputs: &[TASK, OWNER, FENCE, TTL],
    },
    Op {
        name: "release",
        summary: "Give the grant back: the task is claimable at once, the attempt uncharged",
        write: true,
        operator: false,
        cli: Some("release"),
        http: post("/v1/tasks/{task}/release"),
        python: Some("release"),
        inputs: &[TASK, OWNER, FENCE],
    },
    Op {
        name: "recover",
        summary: "Take over a task whose lease expired",
        write: true,
        operator: false,
        cli: Some("recover"),
        http: post("/v1/tasks/{task}/recover"),
        python: Some("recover"),
        inputs: &[TASK, OWNER, TTL],
    },
    Op {
        name: "complete",
        summary: "The holder's bare task SUCCEEDED",
        write: true,
        operator: false,
        cli: Some("complete"),
        http: post("/v1/tasks/{task}/complete"),
        python: Some("complete"),
        inputs: &[TASK, OWNER, FENCE],
    },
    Op {
        name: "checkpoint",
        summary: "The holder records a step's output under its fence (and adds the tasks the step spawns, in the same commit); later grants carry it, so the next attempt skips the step",
        write: true,
        operator: false,
        cli: Some("checkpoint"),
        http: post("/v1/tasks/{task}/checkpoint"),
        python: Some("checkpoint"),
        inputs: &[
            TASK,
            OWNER,
            FENCE,
            input("step", "step", Kind::Id, true),
            input("output", "output", Kind::Output, true),
            input("spawn", "spawn", Kind::Spawn, false),
            input("wait", "wait", Kind::Flag, false),
        ],
    },
    Op {
        name: "report",
        summary: "The holder's reports of many grants in one commit (complete, fail or release of each), each accepted or refused on its own fence",
        write: true,
        operator: false,
        cli: Some("report"),
        http: post("/v1/reports"),
        python: Some("report"),
        inputs: &[input("reports", "reports", Kind::Reports, true)],
    },
    Op {
        name: "fail",
        summary: "The holder's bare task FAILED, with an error",
        write: true,
        operator: false,
        cli: Some("fail"),
        http: post("/v1/tasks/{task}/fail"),
        python: Some("fail"),
        inputs: &[
            TASK,
            OWNER,
            FENCE,
            input("error", "error", Kind::Json, false),
        ],
    },
    Op {
        name: "cancel",
        summary: "Cancel a task: the holder under its fence, or an operator (a live holder is asked to stop unless forced)",
        write: true,
        operator: false,
        cli: Some("cancel"),
        http: post("/v1/tasks/{task}/cancel"),
        python: Some("cancel"),
        inputs: &[
            TASK,
            input("owner", "by", Kind::Actor, true),
            input("fence", "fence", Kind::Fence, false),
            input("force", "force", Kind::Flag, false),
            input("cascade", "cascade", Kind::Flag, false),
        ],
    },
    Op {
        name: "holder",
        summary: "The last grant of a task and whether it is live",
        write: false,
        operator: false,
        cli: Some("holder"),
        http: get("/v1/tasks/{task}/holder"),
        python: Some("holder"),
        inputs: &[TASK],
    },
    Op {
        name: "verify",
        summary: "Whether a fence is the current one of a live lease (for resource servers)",
        write: false,
        operator: false,
        cli: Some("verify"),
        http: get("/v1/tasks/{task}/verify"),
        python: Some("verify"),
        inputs: &[TASK, FENCE],
    },
    Op {
        name: "next",
        summary: "Grant the ready bare task of the queues with the highest priority",
        write: true,
        operator: false,
        cli: Some("next"),
        http: post("/v1/next"),
        python: Some("next"),
        inputs: &[OWNER, QUEUES, TTL, LOCK_DELAY, WAIT, KEEP_WAITING, COUNT],
    },
    Op {
        name: "task_next",
        summary: "`next` for declared tasks: claim the ready one for its registered run",
        write: true,
        operator: false,
        cli: Some("task next"),
        http: post("/v1/next"),
        python: Some("task_next"),
        inputs: &[EXECUTOR, QUEUES, TTL, WAIT, KEEP_WAITING, COUNT],
    },
    Op {
        name: "add",
        summary: "Add one task to the work graph (bare, with its queue, priority and dependencies)",
        write: true,
        operator: false,
        cli: Some("add"),
        http: post("/v1/tasks/{task}/add"),
        python: Some("add"),
        inputs: &[TASK, input("node", "node", Kind::Node, true)],
    },
    Op {
        name: "add_graph",
        summary: "Add tasks to the work graph, all or none",
        write: true,
        operator: false,
        cli: Some("add"),
        http: post("/v1/graph"),
        python: Some("add_graph"),
        inputs: &[input("graph", "nodes", Kind::Graph, true)],
    },
    Op {
        name: "graph",
        summary: "Every task with a place in the work graph",
        write: false,
        operator: false,
        cli: Some("graph show"),
        http: get("/v1/graph"),
        python: Some("graph"),
        inputs: &[],
    },
    Op {
        name: "schedule",
        summary: "Set a recurring schedule (every a span, or at the times a cron expression names): one task per period, made once however many schedulers tick",
        write: true,
        operator: false,
        cli: Some("schedule add"),
        http: post("/v1/schedules/{name}"),
        python: Some("schedule"),
        inputs: &[
            input("name", "name", Kind::Id, true),
            input("every", "every_ms", Kind::Period, false),
            input("cron", "cron", Kind::Cron, false),
            input("node", "template", Kind::Node, false),
        ],
    },
    Op {
        name: "schedules",
        summary: "Every recurring schedule, with its period and state",
        write: false,
        operator: false,
        cli: Some("schedule list"),
        http: get("/v1/schedules"),
        python: Some("schedules"),
        inputs: &[],
    },
    Op {
        name: "tick",
        summary: "Make each live schedule's task for the current period, once",
        write: true,
        operator: false,
        cli: Some("schedule tick"),
        http: post("/v1/scheduler/tick"),
        python: Some("tick_schedules"),
        inputs: &[],
    },
    Op {
        name: "limit",
        summary: "Set a concurrency key's limit: at most N live grants at once of the tasks with that key (null: none)",
        write: true,
        operator: true,
        cli: Some("limit set"),
        http: post("/v1/limits/{key}"),
        python: Some("set_limit"),
        inputs: &[
            input("key", "key", Kind::Id, true),
            input("limit", "limit", Kind::Count, false),
            input("operator", "operator", Kind::Id, true),
        ],
    },
    Op {
        name: "queue_policy",
        summary: "Set a queue's retry policy: a task added to the queue without its own takes it, fixed when added (null: none)",
        write: true,
        operator: true,
        cli: Some("queue set"),
        http: post("/v1/queues/{queue}/policy"),
        python: Some("set_queue_policy"),
        inputs: &[
            input("queue", "queue", Kind::Id, true),
            input("retry", "retry", Kind::Retry, false),
            input("operator", "operator", Kind::Id, true),
        ],
    },
    Op {
        name: "queue_pause",
        summary: "Pause a queue: next passes over its tasks until it is resumed (a claim naming one still takes it; attempts in flight run on)",
        write: true,
        operator: true,
        cli: Some("queue pause"),
        http: post("/v1/queues/{queue}/pause"),
        python: Some("pause_queue"),
        inputs: &[
            input("queue", "queue", Kind::Id, true),
            input("operator", "operator", Kind::Id, true),
        ],
    },
    Op {
        name: "queue_resume",
        summary: "Resume a paused queue: next takes its tasks again",
        write: true,
        operator: true,
        cli: Some("queue resume"),
        http: post("/v1/queues/{queue}/resume"),
        python: Some("resume_queue"),
        inputs: &[
            input("queue", "queue", Kind::Id, true),
            input("operator", "operator", Kind::Id, true),
        ],
    },
    Op {
        name: "queue_retry_failed",
        summary: "Retry every task of a queue that failed for good (FAILED, STALLED, NOT_STARTED): each redispatched as its next iteration, at most max (default 1000)",
        write: true,
        operator: true,
        cli: Some("queue retry-failed"),
        http: post("/v1/queues/{queue}/retry-failed"),
        python: Some("retry_failed"),
        inputs: &[
            input("queue", "queue", Kind::Id, true),
            input("operator", "operator", Kind::Id, true),
            input("max", "max", Kind::Count, false),
        ],
    },
    Op {
        name: "queue_discard_failed",
        summary: "Discard every task of a queue that failed for good: each forgotten now (its body and events go, a tombstone stays), at most max (default 1000)",
        write: true,
        operator: true,
        cli: Some("queue discard-failed"),
        http: post("/v1/queues/{queue}/discard-failed"),
        python: Some("discard_failed"),
        inputs: &[
            input("queue", "queue", Kind::Id, true),
            input("operator", "operator", Kind::Id, true),
            input("max", "max", Kind::Count, false),
        ],
    },
    Op {
        name: "queue",
        summary: "A queue's policy: the retry policy tasks added to it without their own take, and whether it is paused",
        write: false,
        operator: false,
        cli: Some("queue show"),
        http: get("/v1/queues/{queue}/policy"),
        python: Some("queue_policy"),
        inputs: &[input("queue", "queue", Kind::Id, true)],
    },
    Op {
        name: "key",
        summary: "A concurrency key: its limit, live holders and the tasks waiting for a slot",
        write: false,
        operator: false,
        cli: Some("limit show"),
        http: get("/v1/limits/{key}"),
        python: Some("key_status"),
        inputs: &[input("key", "key", Kind::Id, true)],
    },
    Op {
        name: "keys",
        summary: "Every concurrency key with its limit, holders and waiting tasks",
        write: false,
        operator: false,
        cli: Some("limit list"),
        http: get("/v1/limits"),
        python: Some("keys"),
        inputs: &[],
    },
    Op {
        name: "prune",
        summary: "Retention: tasks that ended long enough ago lose their body and events and keep a tombstone (with forget_after, the tombstone goes that much later)",
        write: true,
        operator: true,
        cli: Some("prune"),
        http: post("/v1/prune"),
        python: Some("prune"),
        inputs: &[
            input(
                "finished_before",
                "finished_before_ms",
                Kind::Retention,
                true,
            ),
            input("forget_after", "forget_after_ms", Kind::Retention, false),
            input("operator", "operator", Kind::Id, true),
            input("max", "max", Kind::Count, false),
        ],
    },
    Op {
        name: "sweep",
        summary: "Persist every derived change that is due (expired leases, passed deadlines)",
        write: true,
        operator: true,
        cli: Some("sweep"),
        http: post("/v1/sweep"),
        python: Some("sweep"),
        inputs: &[input("dry_run", "dry_run", Kind::Flag, false)],
    },
    Op {
        name: "pending",
        summary: "Unacknowledged notifications of the outbox, in order",
        write: false,
        operator: false,
        cli: Some("outbox pending"),
        http: get("/v1/outbox"),
        python: Some("pending"),
        inputs: &[AFTER, LIMIT],
    },
    Op {
        name: "ack",
        summary: "Acknowledge outbox notifications by intent id",
        write: true,
        operator: true,
        cli: Some("outbox ack"),
        http: post("/v1/outbox/ack"),
        python: Some("ack"),
        inputs: &[input("intent_ids", "intent_ids", Kind::IntentIds, true)],
    },
    Op {
        name: "declare",
        summary: "Declare a task from its manifest",
        write: true,
        operator: false,
        cli: Some("task declare"),
        http: post("/v1/tasks/{task}/declare"),
        python: Some("declare"),
        inputs: &[input("manifest", "manifest", Kind::Manifest, true)],
    },
    Op {
        name: "register",
        summary: "Register a run for a declared task",
        write: true,
        operator: false,
        cli: Some("task register"),
        http: post("/v1/tasks/{task}/register"),
        python: Some("register"),
        inputs: &[TASK, RUN],
    },
    Op {
        name: "task_claim",
        summary: "Claim a declared task for its registered run",
        write: true,
        operator: false,
        cli: Some("task claim"),
        http: post("/v1/tasks/{task}/task_claim"),
        python: Some("task_claim"),
        inputs: &[TASK, RUN, EXECUTOR, TTL],
    },
    Op {
        name: "start",
        summary: "The executor started the claimed run",
        write: true,
        operator: false,
        cli: Some("task start"),
        http: post("/v1/tasks/{task}/start"),
        python: Some("start"),
        inputs: &[TASK, RUN, EXECUTOR, FENCE],
    },
    Op {
        name: "heartbeat",
        summary: "Report the step reached and extend the lease",
        write: true,
        operator: false,
        cli: Some("task heartbeat"),
        http: post("/v1/tasks/{task}/heartbeat"),
        python: Some("heartbeat"),
        inputs: &[
            TASK,
            RUN,
            EXECUTOR,
            FENCE,
            input("step", "step", Kind::Count, true),
            TTL,
        ],
    },
    Op {
        name: "succeed",
        summary: "The run SUCCEEDED, with the evidence the manifest requires",
        write: true,
        operator: false,
        cli: Some("task succeed"),
        http: post("/v1/tasks/{task}/succeed"),
        python: Some("succeed"),
        inputs: &[
            TASK,
            RUN,
            EXECUTOR,
            FENCE,
            input("evidence", "evidence", Kind::Evidence, false),
        ],
    },
    Op {
        name: "task_fail",
        summary: "The run FAILED, with an error",
        write: true,
        operator: false,
        cli: Some("task fail"),
        http: post("/v1/tasks/{task}/task_fail"),
        python: Some("task_fail"),
        inputs: &[
            TASK,
            RUN,
            EXECUTOR,
            FENCE,
            input("error", "error", Kind::Json, true),
        ],
    },
    Op {
        name: "retry",
        summary: "Open a failed declared task again for a new run",
        write: true,
        operator: false,
        cli: Some("task retry"),
        http: post("/v1/tasks/{task}/retry"),
        python: Some("retry"),
        inputs: &[TASK, RUN],
    },
    Op {
        name: "redispatch",
        summary: "An operator sends an ended task round again, as a new iteration",
        write: true,
        operator: true,
        cli: Some("task redispatch"),
        http: post("/v1/tasks/{task}/redispatch"),
        python: Some("redispatch"),
        inputs: &[
            TASK,
            input("operator", "by", Kind::Actor, true),
            input("iteration", "iteration", Kind::Count, true),
        ],
    },
    Op {
        name: "finalize",
        summary: "An operator ends a task as FAILED for good",
        write: true,
        operator: true,
        cli: Some("task finalize"),
        http: post("/v1/tasks/{task}/finalize"),
        python: Some("finalize"),
        inputs: &[
            TASK,
            input("operator", "by", Kind::Actor, true),
            input("error", "error", Kind::Json, false),
        ],
    },
    Op {
        name: "annotate",
        summary: "Attach metadata to a task",
        write: true,
        operator: false,
        cli: None,
        http: post("/v1/tasks/{task}/annotate"),
        python: None,
        inputs: &[
            TASK,
            input("actor", "actor", Kind::Id, true),
            input("metadata", "metadata", Kind::Json, true),
        ],
    },
    Op {
        name: "show",
        summary: "A task's record as stored",
        write: false,
        operator: false,
        cli: Some("task show"),
        http: get("/v1/tasks/{task}"),
        python: Some("get"),
        inputs: &[TASK],
    },
    Op {
        name: "events",
        summary: "A task's events in order, from a cursor; a blocking query with a wait",
        write: false,
        operator: false,
        cli: Some("task events"),
        http: get("/v1/tasks/{task}/events"),
        python: Some("events"),
        inputs: &[TASK, AFTER, LIMIT, WAIT],
    },
    Op {
        name: "feed",
        summary: "Every task's events in the order they were written, from a cursor; a blocking query with a wait",
        write: false,
        operator: false,
        cli: Some("events"),
        http: get("/v1/events"),
        python: Some("events"),
        inputs: &[AFTER, LIMIT, WAIT],
    },
    Op {
        name: "gate",
        summary: "Whether a declared task passes its gate (SUCCEEDED)",
        write: false,
        operator: false,
        cli: Some("task gate"),
        http: get("/v1/tasks/{task}/gate"),
        python: Some("gate"),
        inputs: &[TASK],
    },
    Op {
        name: "list",
        summary: "Tasks in id order, by derived state (or the graph's READY or BLOCKED) and queue",
        write: false,
        operator: false,
        cli: Some("task list"),
        http: get("/v1/tasks"),
        python: Some("list"),
        inputs: &[
            input("state", "state", Kind::State, false),
            input("queue", "queue", Kind::Id, false),
            AFTER,
            LIMIT,
        ],
    },
];

/// The operation named `name`.
pub fn op(name: &str) -> Option<&'static Op> {
    OPERATIONS.iter().find(|o| o.name == name)
}

/// Checks a duration of `kind` given in milliseconds (the task API's
/// `ttl_ms`, Python's seconds converted): the bounds of the kind, named
/// by `field`.
pub fn check_ms(kind: Kind, field: &str, ms: u64) -> Result<u64> {
    let Some((lo, hi)) = kind.bounds() else {
        return Ok(ms);
    };
    if (lo..=hi).contains(&ms) {
        return Ok(ms);
    }
    Err(Error::invalid(
        field,
        format!("must be {} (got {ms}ms)", kind.rule()),
    ))
}

/// Reads a duration of `kind` as a person writes it (`750ms`, `30s`,
/// `5m`, `2h`; `0` where the kind allows none), within the kind's bounds.
/// The longest retention window: 100 years.
pub const MAX_RETENTION_MS: u64 = 100 * 366 * 24 * 3600 * 1000;

pub fn duration_ms(kind: Kind, field: &str, text: &str) -> Result<u64> {
    // One voice for every duration: the rule, how one is written, and
    // what was given, as it was given.
    let ms = text_ms(text).map_err(|_| {
        Error::invalid(
            field,
            format!("must be {}, {DURATION_FORMS} (got {text:?})", kind.rule()),
        )
    })?;
    match kind.bounds() {
        Some((lo, hi)) if !(lo..=hi).contains(&ms) => Err(Error::invalid(
            field,
            format!("must be {} (got {})", kind.rule(), text.trim()),
        )),
        _ => Ok(ms),
    }
}

pub use crate::time::DURATION_FORMS;

/// A duration as every front end writes one (`750ms`, `30s`, `1m30s`,
/// `2h`, or `0`), in milliseconds, before any kind's bounds; the error
/// says why it is not one.
pub fn text_ms(text: &str) -> std::result::Result<u64, String> {
    crate::time::parse_ms("duration", text).map_err(|e| e.message)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::RequestKind;

    #[test]
    fn durations_keep_the_rule_of_their_kind() {
        assert_eq!(duration_ms(Kind::Ttl, "ttl", "750ms").unwrap(), 750);
        assert_eq!(duration_ms(Kind::Ttl, "ttl", "7d").unwrap(), 604_800_000);
        assert_eq!(duration_ms(Kind::LockDelay, "lock_delay", "0").unwrap(), 0);
        assert_eq!(duration_ms(Kind::Wait, "wait", "1h").unwrap(), MAX_WAIT_MS);
        for (kind, field, bad) in [
            (Kind::Ttl, "ttl", "0"),
            (Kind::Ttl, "ttl", "8d"),
            (Kind::Ttl, "ttl", "soon"),
            (Kind::Ttl, "ttl", "30"),
            (Kind::LockDelay, "lock_delay", "8d"),
            (Kind::Wait, "wait", "61m"),
        ] {
            let e = duration_ms(kind, field, bad).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field), "{bad}");
            assert!(e.message.contains(kind.rule()), "{}", e.message);
        }
        assert!(check_ms(Kind::Wait, "wait", MAX_WAIT_MS + 1).is_err());
        assert_eq!(check_ms(Kind::Fence, "fence", 7).unwrap(), 7);
    }

    #[test]
    fn every_write_route_is_a_request_and_names_are_unique() {
        let mut names: Vec<&str> = OPERATIONS.iter().map(|o| o.name).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "an operation is listed twice");
        for op in OPERATIONS {
            // A verb of the task API is a request's own name.
            if let Some(r) = op.http
                && let Some(verb) = r.path.strip_prefix("/v1/tasks/{task}/")
                && r.method == "POST"
            {
                assert_eq!(verb, op.name);
                let kind: std::result::Result<RequestKind, _> =
                    serde_json::from_value(serde_json::json!(verb));
                assert!(kind.is_ok(), "{verb} is not a request");
            }
        }
    }
}
