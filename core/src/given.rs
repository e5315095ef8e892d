//! What a person gave an operation, made into a [`Call`]: the one place
//! where each operation of the catalogue reads its inputs and keeps the
//! rules between them (a worker's cancel or an operator's, a task or a
//! graph file, a limit or `none`). A front end collects what it was given
//! by the catalogue's input names ([`crate::catalogue::Input::name`]) into
//! a [`Given`] and calls [`call`]; it keeps no rule of its own.
//!
//! Values are JSON as a person gives them: a duration is text (`30s`,
//! `1m30s`, by the catalogue's rule) or a number of milliseconds, a list
//! is an array, an error object is an object or its JSON text. A file a
//! command names (`--file`, or standard input) is read through the
//! front end's [`Given::reading`], so core reads no file of its own.

use crate::call::Call;
use crate::catalogue::{self, Kind};
use crate::error::{Error, Result};
use crate::graph::{NodeSpec, RetryPolicy, Schedule, Start, Taker};
use crate::id::{Id, TaskId};
use crate::kinds::{Actor, State};
use crate::manifest::Manifest;
use crate::request::{Preconditions, Request};
use crate::workgraph::GraphState;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

/// Reads the file a command names (`None`: standard input) for the input
/// named first, at most `limit` bytes (what is past them is not read).
pub type Reader<'a> = Box<dyn FnMut(&str, Option<&str>, u64) -> Result<String> + 'a>;

impl std::fmt::Debug for Given<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Given")
            .field("values", &self.values)
            .field("reads_files", &self.reader.is_some())
            .finish()
    }
}

/// The inputs an operation was given, by name. A null is not given.
pub struct Given<'a> {
    values: Map<String, Value>,
    read: BTreeSet<String>,
    reader: Option<Reader<'a>>,
}

impl<'a> Given<'a> {
    /// `values` must be a JSON object; its nulls are dropped.
    pub fn new(values: Value) -> Result<Given<'a>> {
        let Value::Object(values) = values else {
            return Err(Error::invalid("input", "must be an object of named values"));
        };
        Ok(Given {
            values: values.into_iter().filter(|(_, v)| !v.is_null()).collect(),
            read: BTreeSet::new(),
            reader: None,
        })
    }

    /// How a file named by the input `file` (or standard input) is read.
    pub fn reading(mut self, reader: Reader<'a>) -> Given<'a> {
        self.reader = Some(reader);
        self
    }

    fn get(&mut self, name: &str) -> Option<Value> {
        self.read.insert(name.to_owned());
        self.values.get(name).cloned()
    }

    fn has(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }

    fn text(&mut self, name: &str) -> Result<Option<String>> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(Error::invalid(name, "must be text")),
        }
    }

    fn id(&mut self, name: &str) -> Result<Id> {
        self.opt_id(name)?
            .ok_or_else(|| Error::invalid(name, "is required"))
    }

    fn opt_id(&mut self, name: &str) -> Result<Option<Id>> {
        self.text(name)?.map(|s| Id::parse(name, &s)).transpose()
    }

    fn ids(&mut self, name: &str) -> Result<Vec<Id>> {
        self.list(name)?
            .iter()
            .map(|s| Id::parse(name, s))
            .collect()
    }

    fn list(&mut self, name: &str) -> Result<Vec<String>> {
        match self.get(name) {
            None => Ok(Vec::new()),
            Some(Value::String(s)) => Ok(vec![s]),
            Some(Value::Array(items)) => items
                .into_iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s),
                    _ => Err(Error::invalid(name, "must be a list of text")),
                })
                .collect(),
            Some(_) => Err(Error::invalid(name, "must be a list of text")),
        }
    }

    fn number(&mut self, name: &str) -> Result<Option<u64>> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Number(n)) => n
                .as_u64()
                .map(Some)
                .ok_or_else(|| Error::invalid(name, "must be a whole number")),
            Some(Value::String(s)) => {
                s.trim().parse().map(Some).map_err(|_| {
                    Error::invalid(name, format!("must be a whole number (got {s:?})"))
                })
            }
            Some(_) => Err(Error::invalid(name, "must be a whole number")),
        }
    }

    fn fence(&mut self, name: &str) -> Result<u64> {
        self.opt_fence(name)?
            .ok_or_else(|| Error::invalid(name, "is required"))
    }

    fn opt_fence(&mut self, name: &str) -> Result<Option<u64>> {
        match self.number(name)? {
            Some(0) => Err(Error::invalid(name, Kind::Fence.rule())),
            n => Ok(n),
        }
    }

    fn flag(&mut self, name: &str) -> Result<bool> {
        match self.get(name) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(b),
            Some(_) => Err(Error::invalid(name, Kind::Flag.rule())),
        }
    }

    /// A duration of `kind`: text by the catalogue's rule, or a number of
    /// milliseconds, within the kind's bounds.
    fn ms(&mut self, name: &str, kind: Kind) -> Result<Option<u64>> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => catalogue::duration_ms(kind, name, &s).map(Some),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(ms) => catalogue::check_ms(kind, name, ms).map(Some),
                None => Err(Error::invalid(name, kind.rule())),
            },
            Some(_) => Err(Error::invalid(name, kind.rule())),
        }
    }

    /// An error object, or its JSON text.
    fn error(&mut self, name: &str) -> Result<Option<Value>> {
        let v = match self.get(name) {
            None => return Ok(None),
            Some(Value::String(s)) => crate::json::parse_strict(name, &s)?,
            Some(v) => v,
        };
        crate::request::validate_error(&v)?;
        Ok(Some(v))
    }

    fn evidence(&mut self, name: &str) -> Result<BTreeMap<String, String>> {
        let mut out = BTreeMap::new();
        match self.get(name) {
            None => {}
            Some(Value::Object(o)) => {
                for (k, v) in o {
                    let Value::String(v) = v else {
                        return Err(Error::invalid(name, format!("{k:?} must be text")));
                    };
                    out.insert(k, v);
                }
            }
            Some(v) => {
                self.values.insert(name.to_owned(), v);
                for item in self.list(name)? {
                    let (k, v) = item.split_once('=').ok_or_else(|| {
                        Error::invalid(name, format!("must be KEY=sha256:HEX (got {item:?})"))
                    })?;
                    if out.insert(k.to_owned(), v.to_owned()).is_some() {
                        return Err(Error::invalid(name, format!("key {k:?} is given twice")));
                    }
                }
            }
        }
        crate::request::validate_evidence(&out)?;
        Ok(out)
    }

    /// Who asks as an operator, by the input `name`.
    fn operator(&mut self, name: &str) -> Result<Actor> {
        self.id(name).map(Actor::Operator)
    }

    /// A page's cursor and size (`limit` 100 when not given). An event
    /// cursor is a sequence number; a list's is the last id shown.
    fn page(&mut self, events: bool) -> Result<(Option<String>, usize)> {
        let after = self.text("after")?;
        if events {
            crate::authority::parse_cursor(after.as_deref())?;
        }
        let limit = match self.number("limit")? {
            None => 100,
            Some(n) if (1..=crate::authority::MAX_PAGE as u64).contains(&n) => n as usize,
            Some(_) => return Err(Error::invalid("limit", Kind::Limit.rule())),
        };
        Ok((after, limit))
    }

    /// JSON text (a manifest, a graph) given as `name` (a value, or its
    /// text), or else read from the file named by `file` or standard input.
    fn document(&mut self, name: &str, limit: u64) -> Result<String> {
        let text = match self.get(name) {
            Some(Value::String(s)) => s,
            Some(v) => v.to_string(),
            None => {
                let file = self.text("file")?;
                let reader = self
                    .reader
                    .as_mut()
                    .ok_or_else(|| Error::invalid(name, "is required"))?;
                reader(name, file.as_deref(), limit)?
            }
        };
        Ok(text)
    }

    /// The text of the file `value` names as `@FILE` (`@-`: standard
    /// input), read through the front end; `None` when it names none.
    fn named_file(&mut self, name: &str, value: &str, limit: u64) -> Result<Option<String>> {
        let Some(path) = value.strip_prefix('@') else {
            return Ok(None);
        };
        let reader = self.reader.as_mut().ok_or_else(|| {
            Error::invalid(
                name,
                "names a file (@FILE), which only the command line reads",
            )
        })?;
        let file = (path != "-").then_some(path);
        reader(name, file, limit).map(Some)
    }

    /// How many grants one `next` may make, when given.
    fn count(&mut self) -> Result<Option<u32>> {
        let max = crate::graph::MAX_NEXT_COUNT;
        match self.number("count")? {
            None => Ok(None),
            Some(n) if (1..=u64::from(max)).contains(&n) => Ok(Some(n as u32)),
            Some(n) => Err(Error::invalid(
                "count",
                format!("must be from 1 to {max} (got {n})"),
            )),
        }
    }

    /// The retry policy given by its four inputs, if any is.
    fn retry(&mut self) -> Result<Option<RetryPolicy>> {
        let attempts = match self.number("max_attempts")? {
            None => None,
            Some(n) => Some(
                u32::try_from(n)
                    .map_err(|_| Error::invalid("max_attempts", "must be from 1 to 1000"))?,
            ),
        };
        let backoff = self.ms("backoff", Kind::LockDelay)?;
        let factor = match self.get("backoff_factor") {
            None => None,
            Some(Value::Number(n)) => n.as_f64(),
            Some(_) => return Err(Error::invalid("backoff_factor", "must be a number")),
        };
        let max = self.ms("backoff_max", Kind::Ttl)?;
        RetryPolicy::from_parts(attempts, backoff, factor, max)
    }

    /// A task's place in the graph, by its inputs: queue, priority, the
    /// tasks it comes after, a time limit, retries, a concurrency key.
    fn node(&mut self, task: &TaskId) -> Result<NodeSpec> {
        let queue = self.opt_id("queue")?;
        let priority = match self.get("priority") {
            None => 0,
            Some(Value::Number(n)) => n
                .as_i64()
                .ok_or_else(|| Error::invalid("priority", "must be a whole number"))?,
            Some(_) => return Err(Error::invalid("priority", "must be a whole number")),
        };
        let after = self.ids("after")?;
        let timeout = self.ms("timeout", Kind::Ttl)?;
        let retry = self.retry()?;
        let key = self.opt_id("key")?;
        let traceparent = self.text("traceparent")?;
        NodeSpec::new(task, queue, priority, after)?
            .with_timeout(timeout)?
            .with_retry(retry)?
            .with_key(key)?
            .with_traceparent(traceparent)
    }

    /// Refuses an input `op` did not read.
    fn done(self, op: &str, call: Call) -> Result<Call> {
        match self.values.keys().find(|k| !self.read.contains(*k)) {
            Some(k) => Err(Error::invalid(k, format!("is not an input of {op}"))),
            None => Ok(call),
        }
    }
}

fn write(task: TaskId, request: Request) -> Call {
    Call::Write {
        task,
        request,
        pre: Preconditions::none(),
    }
}

/// The inputs a graph node's place takes, which a graph file gives each
/// node of its own.
const NODE_INPUTS: &[&str] = &[
    "queue",
    "priority",
    "after",
    "timeout",
    "not_before",
    "max_attempts",
    "backoff",
    "backoff_factor",
    "backoff_max",
    "key",
    "traceparent",
];

/// How many failed tasks a `queue retry-failed` or `discard-failed` acts
/// on when it does not say (it answers `more` when some are left).
pub const BULK_DEFAULT: usize = 1000;

/// The operation named `op` (the catalogue's name) with what `given`
/// holds, every input read by its rule: or an error naming the input and
/// the rule it broke, an input the operation does not take among them.
pub fn call(op: &str, mut g: Given<'_>) -> Result<Call> {
    use Request as R;
    let call = match op {
        "claim" => write(
            g.id("task")?,
            R::Claim {
                owner: g.id("owner")?,
                ttl_ms: g.ms("ttl", Kind::Ttl)?,
                lock_delay_ms: g.ms("lock_delay", Kind::LockDelay)?,
            },
        ),
        "renew" => write(
            g.id("task")?,
            R::Renew {
                owner: g.id("owner")?,
                fence: g.fence("fence")?,
                ttl_ms: g.ms("ttl", Kind::Ttl)?,
            },
        ),
        "release" => write(
            g.id("task")?,
            R::Release {
                owner: g.id("owner")?,
                fence: g.fence("fence")?,
            },
        ),
        "recover" => write(
            g.id("task")?,
            R::Recover {
                owner: g.id("owner")?,
                ttl_ms: g.ms("ttl", Kind::Ttl)?,
            },
        ),
        "complete" => write(
            g.id("task")?,
            R::Complete {
                owner: g.id("owner")?,
                fence: g.fence("fence")?,
            },
        ),
        "fail" => write(
            g.id("task")?,
            R::Fail {
                owner: g.id("owner")?,
                fence: g.fence("fence")?,
                error: g.error("error")?,
            },
        ),
        "cancel" => cancel(&mut g)?,
        "holder" => Call::Holder {
            task: g.id("task")?,
        },
        "verify" => Call::Verify {
            task: g.id("task")?,
            fence: g.fence("fence")?,
        },
        "declare" => {
            // Read one byte past the bound, so the manifest's rule says so.
            let text = g.document("manifest", crate::manifest::MAX_MANIFEST_BYTES as u64 + 1)?;
            let manifest = Manifest::from_json(&text)?;
            write(manifest.task_id.clone(), R::Declare { manifest })
        }
        "register" => write(
            g.id("task")?,
            R::Register {
                run_id: g.id("run")?,
            },
        ),
        "task_claim" => write(
            g.id("task")?,
            R::TaskClaim {
                run_id: g.id("run")?,
                executor: g.id("executor")?,
                ttl_ms: g.ms("ttl", Kind::Ttl)?,
            },
        ),
        "start" => write(
            g.id("task")?,
            R::Start {
                run_id: g.id("run")?,
                executor: g.id("executor")?,
                fence: g.fence("fence")?,
            },
        ),
        "heartbeat" => write(
            g.id("task")?,
            R::Heartbeat {
                run_id: g.id("run")?,
                executor: g.id("executor")?,
                fence: g.fence("fence")?,
                step: match g.number("step")? {
                    Some(n) => u32::try_from(n)
                        .map_err(|_| Error::invalid("step", "must be at most 4294967295"))?,
                    None => return Err(Error::invalid("step", "is required")),
                },
                ttl_ms: g.ms("ttl", Kind::Ttl)?,
            },
        ),
        "succeed" => write(
            g.id("task")?,
            R::Succeed {
                run_id: g.id("run")?,
                executor: g.id("executor")?,
                fence: g.fence("fence")?,
                evidence: g.evidence("evidence")?,
            },
        ),
        "task_fail" => write(
            g.id("task")?,
            R::TaskFail {
                run_id: g.id("run")?,
                executor: g.id("executor")?,
                fence: g.fence("fence")?,
                error: g
                    .error("error")?
                    .ok_or_else(|| Error::invalid("error", "is required"))?,
            },
        ),
        "retry" => write(
            g.id("task")?,
            R::Retry {
                run_id: g.id("run")?,
            },
        ),
        "redispatch" => write(
            g.id("task")?,
            R::Redispatch {
                by: g.operator("operator")?,
                iteration: g
                    .number("iteration")?
                    .ok_or_else(|| Error::invalid("iteration", "is required"))?,
            },
        ),
        "finalize" => write(
            g.id("task")?,
            R::Finalize {
                by: g.operator("operator")?,
                error: g.error("error")?,
            },
        ),
        "annotate" => {
            let task = g.id("task")?;
            let actor = g.id("actor")?;
            let metadata = match g.get("metadata") {
                Some(Value::Object(m)) => m.into_iter().collect(),
                Some(Value::String(s)) => match crate::json::parse_strict("metadata", &s)? {
                    Value::Object(m) => m.into_iter().collect(),
                    _ => return Err(Error::invalid("metadata", Kind::Json.rule())),
                },
                _ => return Err(Error::invalid("metadata", Kind::Json.rule())),
            };
            write(task, R::Annotate { actor, metadata })
        }
        "show" => Call::Show {
            task: g.id("task")?,
        },
        "gate" => Call::Gate {
            task: g.id("task")?,
        },
        "events" => {
            let task = g.id("task")?;
            let (after, limit) = g.page(true)?;
            Call::TaskEvents { task, after, limit }
        }
        "feed" => {
            let task = g.opt_id("task")?;
            let (after, limit) = g.page(true)?;
            Call::Events { task, after, limit }
        }
        "list" => list(&mut g)?,
        "next" => Call::Next {
            taker: Taker::Owner {
                owner: g.id("owner")?,
                ttl_ms: g.ms("ttl", Kind::Ttl)?,
                lock_delay_ms: g.ms("lock_delay", Kind::LockDelay)?,
            },
            queues: g.ids("queues")?,
            wait_ms: g.ms("wait", Kind::Wait)?,
            keep_waiting: g.flag("keep_waiting")?,
            count: g.count()?,
        },
        "task_next" => Call::Next {
            taker: Taker::Executor {
                executor: g.id("executor")?,
                ttl_ms: g.ms("ttl", Kind::Ttl)?,
            },
            queues: g.ids("queues")?,
            wait_ms: g.ms("wait", Kind::Wait)?,
            keep_waiting: g.flag("keep_waiting")?,
            count: g.count()?,
        },
        "add" | "add_graph" => add(&mut g)?,
        "checkpoint" => checkpoint(&mut g)?,
        "report" => report(&mut g)?,
        "graph" => Call::Graph,
        "schedule" => {
            let name = g
                .text("name")?
                .ok_or_else(|| Error::invalid("name", "is required"))?;
            let task = crate::workgraph::schedule_id(&name)?;
            let every_ms = g.ms("every", Kind::Period)?;
            let cron = g.text("cron")?;
            let template = g.node(&task)?;
            // Which of every and cron a schedule has is the request's rule.
            let schedule = Schedule {
                every_ms: every_ms.unwrap_or(0),
                cron: cron.map(|c| c.trim().to_owned()),
                template,
            };
            write(task, R::Schedule { schedule })
        }
        "schedules" => Call::Schedules,
        "tick" => Call::Tick,
        "limit" => {
            let key = g.id("key")?;
            let limit = match g.get("limit") {
                None => return Err(Error::invalid("limit", "is required (a number, or none)")),
                Some(Value::String(s)) if s == "none" => None,
                Some(v) => {
                    let n = match &v {
                        Value::Number(n) => n.as_u64(),
                        Value::String(s) => s.trim().parse().ok(),
                        _ => None,
                    };
                    match n.and_then(|n| u32::try_from(n).ok()) {
                        Some(n) => Some(n),
                        None => {
                            return Err(Error::invalid(
                                "limit",
                                format!(
                                    "must be a whole number from 0 to 1000000, or none (got {v})"
                                ),
                            ));
                        }
                    }
                }
            };
            write(
                crate::graph::key_record_id(&key)?,
                R::Limit {
                    by: g.operator("operator")?,
                    limit,
                },
            )
        }
        "key" => Call::KeyShow { key: g.id("key")? },
        "keys" => Call::Keys,
        "queue_policy" => {
            let queue = g.id("queue")?;
            write(
                crate::graph::queue_record_id(&queue)?,
                R::QueuePolicy {
                    by: g.operator("operator")?,
                    retry: g.retry()?,
                },
            )
        }
        name @ ("queue_pause" | "queue_resume") => {
            let queue = g.id("queue")?;
            write(
                crate::graph::queue_record_id(&queue)?,
                R::QueuePause {
                    by: g.operator("operator")?,
                    paused: name == "queue_pause",
                },
            )
        }
        "queue" => Call::QueueShow {
            queue: g.id("queue")?,
        },
        name @ ("queue_retry_failed" | "queue_discard_failed") => Call::QueueFailed {
            queue: g.id("queue")?,
            act: if name == "queue_retry_failed" {
                crate::authority::Bulk::Retry
            } else {
                crate::authority::Bulk::Discard
            },
            by: g.operator("operator")?,
            max: g
                .number("max")?
                .map_or(BULK_DEFAULT, |n| usize::try_from(n).unwrap_or(usize::MAX)),
        },
        "prune" => Call::Prune {
            older_than_ms: g
                .ms("finished_before", Kind::Retention)?
                .ok_or_else(|| Error::invalid("finished_before", "is required"))?,
            forget_after_ms: g.ms("forget_after", Kind::Retention)?,
            by: g.operator("operator")?,
            max: g
                .number("max")?
                .map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX)),
        },
        "sweep" => Call::Sweep {
            dry_run: g.flag("dry_run")?,
        },
        "pending" => {
            let (after, limit) = g.page(false)?;
            Call::Pending { after, limit }
        }
        "ack" => {
            let intent_ids = g.list("intent_ids")?;
            crate::model::validate_intent_ids(&intent_ids)?;
            Call::Ack { intent_ids }
        }
        other => {
            return Err(Error::invalid(
                "op",
                format!("{other:?} is not an operation of the catalogue"),
            ));
        }
    };
    g.done(op, call)
}

/// A worker's cancel (owner and fence), or an operator's (which may be
/// forced, and may cascade to every task below).
fn cancel(g: &mut Given<'_>) -> Result<Call> {
    let task = g.id("task")?;
    let owner = g.opt_id("owner")?;
    let fence = g.opt_fence("fence")?;
    let operator = g.opt_id("operator")?;
    let force = g.flag("force")?;
    let cascade = g.flag("cascade")?;
    Ok(match (owner, fence, operator) {
        (Some(owner), Some(fence), None) if !force && !cascade => write(
            task,
            Request::Cancel {
                by: Actor::Worker(owner),
                fence: Some(fence),
                force: false,
            },
        ),
        (Some(_), Some(_), None) => {
            let field = if cascade { "cascade" } else { "force" };
            return Err(Error::invalid(
                field,
                "is for an operator's cancel (an operator, no owner or fence)",
            ));
        }
        (None, None, Some(op)) if cascade => Call::CancelCascade {
            task,
            by: Actor::Operator(op),
            force,
        },
        (None, None, Some(op)) => write(
            task,
            Request::Cancel {
                by: Actor::Operator(op),
                fence: None,
                force,
            },
        ),
        _ => {
            return Err(Error::invalid(
                "owner",
                "cancel takes an owner and a fence (the holder cancels) or an operator, not both",
            ));
        }
    })
}

/// Tasks by state, in a queue if given; `READY` or `BLOCKED` lists the
/// graph's claimable tasks.
fn list(g: &mut Given<'_>) -> Result<Call> {
    let state = g.text("state")?;
    let queue = g.opt_id("queue")?;
    let (after, limit) = g.page(false)?;
    let graph = match state.as_deref().map(str::to_ascii_uppercase).as_deref() {
        Some("READY") => Some(GraphState::Ready),
        Some("BLOCKED") => Some(GraphState::Blocked),
        _ => None,
    };
    Ok(match graph {
        Some(state) => Call::ListGraph {
            state,
            queue,
            limit,
        },
        None => Call::List {
            state: state.as_deref().map(list_state).transpose()?,
            queue,
            after,
            limit,
        },
    })
}

/// A state `list` filters by: a task's state, or else bad input naming
/// every state it takes (READY and BLOCKED too).
fn list_state(name: &str) -> Result<State> {
    State::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = State::ALL
            .iter()
            .map(|s| s.as_str())
            .chain(["READY", "BLOCKED"])
            .collect();
        Error::invalid(
            "state",
            format!("must be one of {} (got {name:?})", names.join(", ")),
        )
    })
}

/// One task added with its place given, or a graph of nodes given whole.
fn add(g: &mut Given<'_>) -> Result<Call> {
    if let Some(task) = g.opt_id("task")? {
        if g.has("file") || g.has("graph") {
            return Err(Error::invalid(
                "file",
                "give a task or a graph file, not both",
            ));
        }
        // Text (a time, or a delay from the add), or a start as a node
        // file writes it (`{"at": ...}`, `{"after_ms": ...}`).
        let start = match g.get("not_before") {
            None => None,
            Some(Value::String(v)) => Some(Start::parse("not_before", &v)?),
            Some(v) => Some(serde_json::from_value::<Start>(v).map_err(|_| {
                Error::invalid("not_before", "must be a time or a delay from the add")
            })?),
        };
        let node = g.node(&task)?.with_start(start)?;
        return Ok(write(task, Request::Add { node }));
    }
    if let Some(given) = NODE_INPUTS.iter().find(|n| g.has(n) && !is_default(g, n)) {
        return Err(Error::invalid(
            *given,
            "describes one task; a graph file gives each node its own",
        ));
    }
    for n in NODE_INPUTS {
        g.get(n);
    }
    let limit = crate::workgraph::MAX_GRAPH_BYTES;
    let text = g.document("graph", limit + 1)?;
    if text.len() as u64 > limit {
        return Err(Error::invalid(
            "graph",
            format!("must be at most {limit} bytes"),
        ));
    }
    let nodes = crate::workgraph::parse_graph(&text)?;
    Ok(Call::AddGraph { nodes })
}

/// A holder's reports of many grants: a JSON list of `{"task", "owner",
/// "fence", "outcome": "complete" | "fail" | "release", "error"}` (its text,
/// or read from the file `file` names, or standard input).
fn report(g: &mut Given<'_>) -> Result<Call> {
    let limit = 16 * 1024 * 1024;
    let text = match g.get("reports") {
        Some(Value::String(s)) => s,
        Some(v) => v.to_string(),
        None => {
            g.values.remove("reports");
            g.document("reports", limit + 1)?
        }
    };
    if text.len() as u64 > limit {
        return Err(Error::invalid(
            "reports",
            format!("must be at most {limit} bytes"),
        ));
    }
    let Value::Array(items) = crate::json::parse_strict("reports", &text)? else {
        return Err(Error::invalid("reports", "must be a JSON list of reports"));
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let at = |e: Error| {
            Error::invalid(
                format!("reports[{i}].{}", e.field.as_deref().unwrap_or("")),
                e.message,
            )
        };
        let mut one = Given::new(item).map_err(at)?;
        let task = one.id("task").map_err(at)?;
        let owner = one.id("owner").map_err(at)?;
        let fence = one.fence("fence").map_err(at)?;
        let outcome = one.text("outcome").map_err(at)?;
        let request = match outcome.as_deref() {
            Some("complete") => Request::Complete { owner, fence },
            Some("fail") => Request::Fail {
                owner,
                fence,
                error: one.error("error").map_err(at)?,
            },
            Some("release") => Request::Release { owner, fence },
            other => {
                return Err(at(Error::invalid(
                    "outcome",
                    format!(
                        "must be complete, fail or release (got {})",
                        other.map_or_else(|| "nothing".to_owned(), |o| format!("{o:?}"))
                    ),
                )));
            }
        };
        one.done("report", Call::Graph).map_err(at)?;
        out.push((task, request));
    }
    Ok(Call::Report { reports: out })
}

/// A step's output and the tasks it adds: JSON text, or a file named
/// `@FILE` (`@-`: standard input) read through the front end.
fn checkpoint(g: &mut Given<'_>) -> Result<Call> {
    let task = g.id("task")?;
    let owner = g.id("owner")?;
    let fence = g.fence("fence")?;
    let step = g.id("step")?;
    let limit = crate::request::MAX_CHECKPOINT_BYTES as u64;
    let output = match g.get("output") {
        None => return Err(Error::invalid("output", "is required")),
        Some(Value::String(s)) => {
            let text = g.named_file("output", &s, limit + 1)?.unwrap_or(s);
            if text.len() as u64 > limit {
                return Err(Error::invalid(
                    "output",
                    format!("must be at most {limit} bytes of JSON"),
                ));
            }
            crate::json::parse_strict("output", &text)?
        }
        Some(v) => v,
    };
    let spawn = match g.get("spawn") {
        None => Vec::new(),
        Some(Value::String(s)) => {
            let limit = crate::workgraph::MAX_GRAPH_BYTES;
            let text = g.named_file("spawn", &s, limit + 1)?.unwrap_or(s);
            if text.len() as u64 > limit {
                return Err(Error::invalid(
                    "spawn",
                    format!("must be at most {limit} bytes"),
                ));
            }
            crate::workgraph::parse_graph(&text).map_err(|mut e| {
                e.field = Some("spawn".into());
                e
            })?
        }
        Some(v) => crate::workgraph::parse_graph(&v.to_string()).map_err(|mut e| {
            e.field = Some("spawn".into());
            e
        })?,
    };
    let wait = g.flag("wait")?;
    crate::request::validate_checkpoint(
        &output,
        &spawn.iter().map(|n| n.task.clone()).collect::<Vec<_>>(),
    )?;
    Ok(Call::Checkpoint {
        task,
        owner,
        fence,
        step,
        output,
        spawn,
        wait,
    })
}

/// Whether node input `name` holds what not giving it means (a priority
/// of 0, no dependencies), as a front end with defaults passes it.
fn is_default(g: &Given<'_>, name: &str) -> bool {
    match g.values.get(name) {
        Some(Value::Number(n)) => name == "priority" && n.as_i64() == Some(0),
        Some(Value::Array(a)) => a.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
#[path = "given_tests.rs"]
mod tests;
