//! `baton.Authority`: the Rust API's calls, one for one.

use crate::convert::{self, duration, id, json_text, millis, to_json};
use crate::shape::*;
use crate::{ProcessBound, errors, runtime};
use baton_core::call::{Answer, Call, Output, Shape, answers_with_grant};
use baton_core::catalogue::Kind;
use baton_core::given::Given;
use baton_core::graph::Taker;
use baton_core::kinds::RequestKind;
use baton_open::DynAuthority;
use pyo3::prelude::*;
use std::future::Future;
use std::sync::{Arc, Mutex};

/// Opens the store `url` names (`sqlite:PATH`, `sled:PATH`,
/// `etcd://HOSTS/PREFIX`, `postgres://...`, `http://HOST:PORT` of a
/// `baton serve`, `memory:`) as the CLI does, and returns its authority.
/// `token` is what an `http://` store sends (default: `BATON_TOKEN`).
///
/// Raises `InvalidInput` (field `store`) for a URL that is not one,
/// `Unavailable` when the store cannot be opened.
#[pyfunction]
#[pyo3(signature = (url, *, token = None))]
pub fn authority_for(py: Python<'_>, url: &str, token: Option<String>) -> PyResult<Authority> {
    let rt = runtime()?;
    let owned = url.to_owned();
    let auth = py
        .detach(move || rt.block_on(baton_open::authority_with_token(&owned, token)))
        .map_err(errors::to_py)?;
    Ok(Authority {
        url: url.to_owned(),
        inner: ProcessBound::new(Mutex::new(Some(Arc::new(auth)))),
    })
}

/// The authority and the registry over one store. Threads may share one;
/// a child of `fork` must open its own (using this one raises
/// `UsedAfterFork`). Every call releases the GIL while the store works.
///
/// A request the store answered returns a value: a `Grant` or `Record`
/// when it was applied (or was an idempotent repeat: `.idempotent`), a
/// `Refusal` (falsy) when it was refused. Only what could not be answered
/// raises: `Unavailable`, `Indeterminate`, `Corrupt`, `InvalidInput`,
/// `NotPermitted`.
#[pyclass(frozen, module = "baton")]
#[derive(Debug)]
pub struct Authority {
    url: String,
    pub(crate) inner: ProcessBound<Mutex<Option<Arc<DynAuthority>>>>,
}

impl Authority {
    /// The authority, if it is open and of this process.
    pub(crate) fn open(&self) -> PyResult<Arc<DynAuthority>> {
        let slot = self.inner.get("authority")?;
        let guard = slot.lock().unwrap_or_else(|p| p.into_inner());
        guard
            .clone()
            .ok_or_else(|| errors::unavailable("this authority is closed"))
    }

    /// Runs one call of the Rust API with the GIL released.
    pub(crate) fn call<T, F, Fut>(&self, py: Python<'_>, f: F) -> PyResult<T>
    where
        T: Send,
        F: FnOnce(Arc<DynAuthority>) -> Fut + Send,
        Fut: Future<Output = baton_core::Result<T>>,
    {
        crate::runtime::call(py, self.open()?, f)
    }

    /// Like `call`, ended by a signal Python handles (Ctrl-C) while it waits.
    pub(crate) fn call_interruptible<T, F, Fut>(&self, py: Python<'_>, f: F) -> PyResult<T>
    where
        T: Send,
        F: FnOnce(Arc<DynAuthority>) -> Fut + Send,
        Fut: Future<Output = baton_core::Result<T>>,
    {
        crate::runtime::call_interruptible(py, self.open()?, f)
    }

    /// Runs an operation of core's catalogue with the GIL released.
    fn run(&self, py: Python<'_>, call: Call) -> PyResult<Output> {
        self.call(py, move |a| async move { call.run(&a).await })
    }
}

impl Authority {
    /// An operator's act on queue `queue` (pause, resume, retry or
    /// discard its failed tasks), as the catalogue's `op` makes it.
    fn queue_act(
        slf: &Bound<'_, Self>,
        op: &str,
        queue: &str,
        operator: &str,
        max: Option<u64>,
    ) -> PyResult<Py<PyAny>> {
        let mut given = serde_json::json!({"queue": queue, "operator": operator});
        if let Some(n) = max {
            given["max"] = serde_json::json!(n);
        }
        Self::answer(slf, Self::made(op, given)?)
    }

    /// The catalogue's operation `op` made by core from `given` (its
    /// inputs by the catalogue's names): core reads each and keeps the
    /// rules between them.
    fn made(op: &str, given: serde_json::Value) -> PyResult<Call> {
        Given::new(given)
            .and_then(|g| baton_core::given::call(op, g))
            .map_err(|mut e| {
                // The catalogue's `run` is Python's `run_id` argument.
                if e.field.as_deref() == Some("run") {
                    e.field = Some("run_id".to_owned());
                }
                errors::to_py(e)
            })
    }

    /// Runs `call` and shows what came of it as Python's types (a reply
    /// as a `Grant` or `Record`, a refusal as a `Refusal`, a holder, a
    /// verification; otherwise its item as a dict). `bind`: a bare task's
    /// `Grant` reports to this authority (a declared task's, through its run).
    fn answer(slf: &Bound<'_, Self>, call: Call) -> PyResult<Py<PyAny>> {
        let bind = match &call {
            Call::Write { request, .. } => {
                answers_with_grant(request.kind()) && request.kind() != RequestKind::TaskClaim
            }
            Call::Next { taker, .. } => matches!(taker, Taker::Owner { .. }),
            _ => false,
        };
        // A wait for work is ended by a signal Python handles (Ctrl-C).
        let waits = matches!(&call, Call::Next { wait_ms: Some(w), .. } if *w > 0);
        let out = if waits {
            slf.get()
                .call_interruptible(slf.py(), move |a| async move { call.run(&a).await })?
        } else {
            slf.get().run(slf.py(), call)?
        };
        Self::shown(slf, out, bind)
    }

    /// A page of what came of `call`: its records as `Record`s, anything
    /// else as dicts.
    fn paged(slf: &Bound<'_, Self>, call: Call) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let out = slf.get().run(py, call)?;
        let items = match out.answer {
            Answer::Records(records) => records
                .iter()
                .map(|r| Ok(Py::new(py, convert::Record::new(py, r, false)?)?.into_any()))
                .collect::<PyResult<Vec<_>>>()?,
            _ => out
                .items
                .iter()
                .map(|v| convert::json(py, v))
                .collect::<PyResult<Vec<_>>>()?,
        };
        convert::page(py, items, out.next)
    }

    /// What came of a call, as Python's types (see [`Authority::answer`]).
    fn shown(slf: &Bound<'_, Self>, out: Output, bind: bool) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        match out.answer {
            Answer::Reply(r) => {
                let auth = bind.then(|| slf.clone().into_any().unbind());
                let token = out
                    .items
                    .first()
                    .and_then(|v| v["token"].as_str())
                    .map(str::to_owned);
                convert::reply_from(py, &r, out.shape == Shape::Grant, auth, token)
            }
            Answer::Refused(r, task) => convert::refusal(py, &r, task.map(|t| t.to_string())),
            Answer::Cascade(first, cascaded) => {
                let first = convert::reply(py, &first, false)?;
                let mut each = Vec::with_capacity(cascaded.len());
                for (t, r) in &cascaded {
                    each.push((t.as_str().to_owned(), convert::reply(py, r, false)?));
                }
                Ok((first, each).into_pyobject(py)?.into_any().unbind())
            }
            Answer::Holder(None) => Ok(py.None()),
            Answer::Holder(Some(h)) => convert::holder(py, &h),
            Answer::Verification(v) => convert::verification(py, &v),
            Answer::Records(records) => {
                let items = records
                    .iter()
                    .map(|r| Ok(Py::new(py, convert::Record::new(py, r, false)?)?.into_any()))
                    .collect::<PyResult<Vec<_>>>()?;
                Ok(items.into_pyobject(py)?.into_any().unbind())
            }
            Answer::Made(made) => {
                let mut out = Vec::with_capacity(made.len());
                for (t, r) in &made {
                    out.push((t.as_str().to_owned(), convert::reply(py, r, false)?));
                }
                Ok(out.into_pyobject(py)?.into_any().unbind())
            }
            Answer::Keys(keys) => convert::json_of(py, &keys),
            Answer::Added(added) => convert::json_of(py, &added),
            Answer::Count(n) => Ok(n.into_pyobject(py)?.into_any().unbind()),
            Answer::Replies(replies) => {
                let as_grant = out.shape == Shape::Grant;
                let mut grants = Vec::with_capacity(replies.len());
                for (i, r) in replies.iter().enumerate() {
                    let auth = (bind && as_grant).then(|| slf.clone().into_any().unbind());
                    let token = out
                        .items
                        .get(i)
                        .and_then(|v| v["token"].as_str())
                        .map(str::to_owned);
                    grants.push(convert::reply_from(py, r, as_grant, auth, token)?);
                }
                Ok(grants.into_pyobject(py)?.into_any().unbind())
            }
            Answer::Items if out.list => convert::json(py, &serde_json::Value::Array(out.items)),
            Answer::Items => {
                convert::json(py, out.items.first().unwrap_or(&serde_json::Value::Null))
            }
        }
    }
}

#[pymethods]
impl Authority {
    /// The store URL this authority was opened with.
    #[getter]
    fn url(&self) -> &str {
        &self.url
    }

    fn __repr__(&self) -> String {
        format!("Authority({:?})", self.url)
    }

    /// Closes the store (a lease still held keeps it open until it ends).
    /// Later calls raise `Unavailable`.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let slot = self.inner.get("authority")?;
        let taken = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(a) = taken {
            // Dropped on the runtime, so what the store does as it goes
            // (on etcd, revoking the leases it kept for reuse) can run,
            // and waited for.
            let rt = runtime()?;
            py.detach(move || {
                rt.block_on(async move {
                    drop(a);
                    baton_open::finish_stores().await;
                })
            });
        }
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    // ---- the authority ----

    /// Claims a bare task (created if absent) for `owner`. `ttl`: seconds
    /// (default 30); `lock_delay`: seconds no one is granted the task after
    /// this lease expires unreleased. Returns a `Grant` or a `Refusal`.
    #[pyo3(signature = (task, owner, ttl = None, *, lock_delay = None))]
    fn claim(
        slf: &Bound<'_, Self>,
        task: &str,
        owner: &str,
        ttl: Option<&Bound<'_, PyAny>>,
        lock_delay: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let given = serde_json::json!({
            "task": task, "owner": owner,
            "ttl": millis("ttl", ttl)?, "lock_delay": millis("lock_delay", lock_delay)?,
        });
        Self::answer(slf, Self::made("claim", given)?)
    }

    /// Extends the holder's lease by `ttl` seconds (default: 30).
    #[pyo3(signature = (task, owner, fence, ttl = None))]
    fn renew(
        slf: &Bound<'_, Self>,
        task: &str,
        owner: &str,
        fence: u64,
        ttl: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let given = serde_json::json!({
            "task": task, "owner": owner, "fence": fence, "ttl": millis("ttl", ttl)?,
        });
        Self::answer(slf, Self::made("renew", given)?)
    }

    /// Gives the grant back: the task may be claimed again at once.
    fn release(slf: &Bound<'_, Self>, task: &str, owner: &str, fence: u64) -> PyResult<Py<PyAny>> {
        let given = serde_json::json!({"task": task, "owner": owner, "fence": fence});
        Self::answer(slf, Self::made("release", given)?)
    }

    /// Takes over a task whose lease expired, under a new fence.
    #[pyo3(signature = (task, owner, ttl = None))]
    fn recover(
        slf: &Bound<'_, Self>,
        task: &str,
        owner: &str,
        ttl: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let given = serde_json::json!({"task": task, "owner": owner, "ttl": millis("ttl", ttl)?});
        Self::answer(slf, Self::made("recover", given)?)
    }

    /// The holder reports success (SUCCEEDED: never granted again).
    fn complete(slf: &Bound<'_, Self>, task: &str, owner: &str, fence: u64) -> PyResult<Py<PyAny>> {
        let given = serde_json::json!({"task": task, "owner": owner, "fence": fence});
        Self::answer(slf, Self::made("complete", given)?)
    }

    /// The holder records a step's output (any JSON value: dicts, lists,
    /// strings, numbers, booleans, None) under its fence; every later grant
    /// of the task carries it (`Grant.checkpoints`). `spawn`: tasks to add
    /// in the same commit (graph nodes, as `add_graph` takes them);
    /// `wait=True`: the task depends on them. A `Record`, or a `Refusal`
    /// (`stale_fence` from a superseded attempt, `checkpoint_conflict`
    /// for a step recorded with another output).
    #[pyo3(signature = (task, owner, fence, step, output, *, spawn = None, wait = false))]
    #[allow(clippy::too_many_arguments)] // The catalogue's inputs, one by one.
    fn checkpoint(
        slf: &Bound<'_, Self>,
        task: &str,
        owner: &str,
        fence: u64,
        step: &str,
        output: &Bound<'_, PyAny>,
        spawn: Option<&Bound<'_, PyAny>>,
        wait: bool,
    ) -> PyResult<Py<PyAny>> {
        // The output is a value: handed to core as its JSON text.
        let output = serde_json::to_string(&convert::to_json("output", output)?)
            .map_err(|e| errors::invalid("output", e.to_string()))?;
        let given = serde_json::json!({
            "task": task, "owner": owner, "fence": fence, "step": step, "output": output,
            "spawn": spawn.map(|s| json_text("spawn", s)).transpose()?, "wait": wait,
        });
        Self::answer(slf, Self::made("checkpoint", given)?)
    }

    /// The holder's reports of many grants in one commit: `reports` a list
    /// of dicts `{"task", "owner", "fence", "outcome": "complete" | "fail"
    /// | "release", "error"}` (or `Grant`s, each reported `complete`), each
    /// accepted or refused on its own fence. A list of `Record`s and
    /// `Refusal`s, in order.
    fn report(slf: &Bound<'_, Self>, reports: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let mut items = Vec::new();
        for item in reports.try_iter()? {
            let item = item?;
            if let Ok(g) = item.cast::<convert::Grant>() {
                let g = g.get();
                items.push(serde_json::json!({
                    "task": g.task, "owner": g.owner, "fence": g.fence, "outcome": "complete",
                }));
            } else {
                items.push(convert::to_json("reports", &item)?);
            }
        }
        let given = serde_json::json!({ "reports": items });
        Self::answer(slf, Self::made("report", given)?)
    }

    /// The holder reports failure; `error` is any JSON value (a dict).
    #[pyo3(signature = (task, owner, fence, error = None))]
    fn fail(
        slf: &Bound<'_, Self>,
        task: &str,
        owner: &str,
        fence: u64,
        error: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let given = serde_json::json!({
            "task": task, "owner": owner, "fence": fence, "error": error_json(error)?,
        });
        Self::answer(slf, Self::made("fail", given)?)
    }

    /// Cancels a task: by its holder (`owner` and `fence`), or by an
    /// operator (`operator=NAME`). An operator's cancel of a task whose
    /// lease is live asks its holder to stop (the record's
    /// `cancel_requested`; a `lease()` sets `lease.cancelled`), and the task
    /// becomes CANCELLED when the holder gives it back or its lease ends;
    /// `force=True` ends it at once. `cascade=True` (an operator's cancel)
    /// also cancels every task that depends on it, at any depth, that has
    /// not ended, and answers `(answer, [(task, answer), ...])`: the task's
    /// own answer and each dependent's.
    #[pyo3(signature = (task, owner = None, fence = None, *, operator = None, force = false, cascade = false))]
    #[allow(clippy::too_many_arguments)]
    fn cancel(
        slf: &Bound<'_, Self>,
        task: &str,
        owner: Option<&str>,
        fence: Option<u64>,
        operator: Option<&str>,
        force: bool,
        cascade: bool,
    ) -> PyResult<Py<PyAny>> {
        let given = serde_json::json!({
            "task": task, "owner": owner, "fence": fence,
            "operator": operator, "force": force, "cascade": cascade,
        });
        Self::answer(slf, Self::made("cancel", given)?)
    }

    /// The last grant with whether its lease is live: a `Holder`, `None`
    /// when the task was never granted, a `Refusal` (`not_found`) for an
    /// unknown task.
    fn holder(slf: &Bound<'_, Self>, task: &str) -> PyResult<Py<PyAny>> {
        Self::answer(
            slf,
            Self::made("holder", serde_json::json!({ "task": task }))?,
        )
    }

    /// Whether work under `fence` may be accepted now: a `Verification`
    /// (truthy only when current), or a `Refusal` for an unknown task.
    fn verify(slf: &Bound<'_, Self>, task: &str, fence: u64) -> PyResult<Py<PyAny>> {
        let given = serde_json::json!({"task": task, "fence": fence});
        Self::answer(slf, Self::made("verify", given)?)
    }

    // ---- the registry ----

    /// Declares a task from its manifest: a dict, or JSON text.
    fn declare(slf: &Bound<'_, Self>, manifest: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let manifest = match manifest.extract::<String>() {
            Ok(text) => serde_json::Value::String(text),
            Err(_) => to_json("manifest", manifest)?,
        };
        let given = serde_json::json!({ "manifest": manifest });
        Self::answer(slf, Self::made("declare", given)?)
    }

    /// Registers the run `run_id` for a declared task.
    fn register(slf: &Bound<'_, Self>, task: &str, run_id: &str) -> PyResult<Py<PyAny>> {
        let given = serde_json::json!({"task": task, "run": run_id});
        Self::answer(slf, Self::made("register", given)?)
    }

    /// Claims a declared task for its registered run: a `Grant` or a `Refusal`.
    #[pyo3(signature = (task, run_id, executor, ttl = None))]
    fn task_claim(
        slf: &Bound<'_, Self>,
        task: &str,
        run_id: &str,
        executor: &str,
        ttl: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let given = serde_json::json!({
            "task": task, "run": run_id, "executor": executor, "ttl": millis("ttl", ttl)?,
        });
        Self::answer(slf, Self::made("task_claim", given)?)
    }

    /// The executor starts the claimed task (RUNNING, step 1).
    fn start(
        slf: &Bound<'_, Self>,
        task: &str,
        run_id: &str,
        executor: &str,
        fence: u64,
    ) -> PyResult<Py<PyAny>> {
        let given = serde_json::json!({
            "task": task, "run": run_id, "executor": executor, "fence": fence,
        });
        Self::answer(slf, Self::made("start", given)?)
    }

    /// Reports progress (`step`, 1-based) and extends the lease.
    #[pyo3(signature = (task, run_id, executor, fence, step, ttl = None))]
    #[allow(clippy::too_many_arguments)]
    fn heartbeat(
        slf: &Bound<'_, Self>,
        task: &str,
        run_id: &str,
        executor: &str,
        fence: u64,
        step: u32,
        ttl: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let given = serde_json::json!({
            "task": task, "run": run_id, "executor": executor, "fence": fence,
            "step": step, "ttl": millis("ttl", ttl)?,
        });
        Self::answer(slf, Self::made("heartbeat", given)?)
    }

    /// Reports success with `evidence` (key to hash), which the manifest may require.
    #[pyo3(signature = (task, run_id, executor, fence, evidence = None))]
    fn succeed(
        slf: &Bound<'_, Self>,
        task: &str,
        run_id: &str,
        executor: &str,
        fence: u64,
        evidence: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let given = serde_json::json!({
            "task": task, "run": run_id, "executor": executor, "fence": fence,
            "evidence": self::evidence(evidence)?,
        });
        Self::answer(slf, Self::made("succeed", given)?)
    }

    /// Reports failure of a declared task; `error` is a JSON value (a dict).
    fn task_fail(
        slf: &Bound<'_, Self>,
        task: &str,
        run_id: &str,
        executor: &str,
        fence: u64,
        error: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        let given = serde_json::json!({
            "task": task, "run": run_id, "executor": executor, "fence": fence,
            "error": to_json("error", error)?,
        });
        Self::answer(slf, Self::made("task_fail", given)?)
    }

    /// Registers a new run for a task that failed or stalled.
    fn retry(slf: &Bound<'_, Self>, task: &str, run_id: &str) -> PyResult<Py<PyAny>> {
        let given = serde_json::json!({"task": task, "run": run_id});
        Self::answer(slf, Self::made("retry", given)?)
    }

    /// An operator sends a task round again, into `iteration` (one past the current).
    fn redispatch(
        slf: &Bound<'_, Self>,
        task: &str,
        operator: &str,
        iteration: u64,
    ) -> PyResult<Py<PyAny>> {
        let given = serde_json::json!({"task": task, "operator": operator, "iteration": iteration});
        Self::answer(slf, Self::made("redispatch", given)?)
    }

    /// An operator ends a task for good, with an optional JSON `error`.
    #[pyo3(signature = (task, operator, error = None))]
    fn finalize(
        slf: &Bound<'_, Self>,
        task: &str,
        operator: &str,
        error: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let given = serde_json::json!({
            "task": task, "operator": operator, "error": error_json(error)?,
        });
        Self::answer(slf, Self::made("finalize", given)?)
    }

    /// An operator sets concurrency key `key`'s limit: at most `limit`
    /// live grants at once of the tasks added with that key (`None`: no
    /// limit). The key as `key_status` shows it (with `idempotent`), or a
    /// `Refusal`.
    #[pyo3(signature = (key, limit, operator))]
    fn set_limit(
        slf: &Bound<'_, Self>,
        key: &str,
        limit: Option<u32>,
        operator: &str,
    ) -> PyResult<Py<PyAny>> {
        let limit = limit.map_or(serde_json::json!("none"), |n| serde_json::json!(n));
        let given = serde_json::json!({"key": key, "limit": limit, "operator": operator});
        Self::answer(slf, Self::made("limit", given)?)
    }

    /// An operator pauses queue `queue`: `next` passes over its tasks until
    /// it is resumed (a claim naming one still takes it; attempts in
    /// flight run on). The queue as `queue_policy` shows it (with
    /// `idempotent`), or a `Refusal`.
    #[pyo3(signature = (queue, operator))]
    fn pause_queue(slf: &Bound<'_, Self>, queue: &str, operator: &str) -> PyResult<Py<PyAny>> {
        Self::queue_act(slf, "queue_pause", queue, operator, None)
    }

    /// An operator resumes queue `queue`: `next` takes its tasks again.
    /// The queue as `queue_policy` shows it, or a `Refusal`.
    #[pyo3(signature = (queue, operator))]
    fn resume_queue(slf: &Bound<'_, Self>, queue: &str, operator: &str) -> PyResult<Py<PyAny>> {
        Self::queue_act(slf, "queue_resume", queue, operator, None)
    }

    /// An operator retries every task of `queue` that failed for good
    /// (FAILED, STALLED, NOT_STARTED), at most `max` (default 1000):
    /// `{"queue", "retried", "refusals": [{"task", "refusal"}], "more"}`.
    #[pyo3(signature = (queue, operator, max = None))]
    fn retry_failed(
        slf: &Bound<'_, Self>,
        queue: &str,
        operator: &str,
        max: Option<u64>,
    ) -> PyResult<Py<PyAny>> {
        Self::queue_act(slf, "queue_retry_failed", queue, operator, max)
    }

    /// An operator discards every task of `queue` that failed for good:
    /// each forgotten now, its tombstone kept; at most `max` (default
    /// 1000): `{"queue", "discarded", "refusals", "more"}`.
    #[pyo3(signature = (queue, operator, max = None))]
    fn discard_failed(
        slf: &Bound<'_, Self>,
        queue: &str,
        operator: &str,
        max: Option<u64>,
    ) -> PyResult<Py<PyAny>> {
        Self::queue_act(slf, "queue_discard_failed", queue, operator, max)
    }

    /// An operator sets queue `queue`'s retry policy: a task added to the
    /// queue without one of its own takes it, fixed when it is added.
    /// With none of the retry arguments the policy is removed. The queue
    /// as `queue_policy` shows it (with `idempotent`), or a `Refusal`.
    #[pyo3(signature = (queue, operator, *, max_attempts = None, backoff = None, backoff_factor = None, backoff_max = None))]
    #[allow(clippy::too_many_arguments)]
    fn set_queue_policy(
        slf: &Bound<'_, Self>,
        queue: &str,
        operator: &str,
        max_attempts: Option<u32>,
        backoff: Option<&Bound<'_, PyAny>>,
        backoff_factor: Option<f64>,
        backoff_max: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let given = serde_json::json!({
            "queue": queue,
            "operator": operator,
            "max_attempts": max_attempts,
            "backoff": millis("backoff", backoff)?,
            "backoff_factor": backoff_factor,
            "backoff_max": millis("backoff_max", backoff_max)?,
        });
        Self::answer(slf, Self::made("queue_policy", given)?)
    }

    /// Retention, an operator's act: tasks that ended at least
    /// `finished_before` ago (seconds, or "30d") lose their body and
    /// events and keep a tombstone; at most `max` of them. How many.
    /// With `forget_after`, each tombstone made goes that much later (a
    /// later prune removes it; its id may then be granted again).
    #[pyo3(signature = (finished_before, operator, max = None, forget_after = None))]
    fn prune(
        slf: &Bound<'_, Self>,
        finished_before: &Bound<'_, PyAny>,
        operator: &str,
        max: Option<usize>,
        forget_after: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let given = serde_json::json!({
            "finished_before": millis("finished_before", Some(finished_before))?,
            "forget_after": millis("forget_after", forget_after)?,
            "operator": operator,
            "max": max,
        });
        Self::answer(slf, Self::made("prune", given)?)
    }

    // ---- reads ----

    /// Concurrency key `key` as read now: a dict with its `limit` (or
    /// None), live `holders` (each `{"task", "fence"}`) and `parked`
    /// tasks waiting for a slot, oldest first.
    fn key_status(slf: &Bound<'_, Self>, key: &str) -> PyResult<Py<PyAny>> {
        Self::answer(slf, Self::made("key", serde_json::json!({ "key": key }))?)
    }

    /// Queue `queue`'s policy: a dict `{"queue", "retry"}`, `retry` a dict
    /// (`max_attempts`, `backoff_ms`, `factor`, `max_backoff_ms`) or None.
    fn queue_policy(slf: &Bound<'_, Self>, queue: &str) -> PyResult<Py<PyAny>> {
        Self::answer(
            slf,
            Self::made("queue", serde_json::json!({ "queue": queue }))?,
        )
    }

    /// Every concurrency key's status, as `key_status` gives each.
    fn keys(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        Self::answer(slf, Self::made("keys", serde_json::json!({}))?)
    }

    /// The task as it is now (a `Record`), or `None` if unknown.
    fn get(slf: &Bound<'_, Self>, task: &str) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let out = slf
            .get()
            .run(py, Self::made("show", serde_json::json!({ "task": task }))?)?;
        match out.answer {
            Answer::Records(r) if r.len() == 1 => {
                Ok(Py::new(py, convert::Record::new(py, &r[0], false)?)?.into_any())
            }
            _ => Ok(py.None()),
        }
    }

    /// The release gate as a dict (`passed` only for SUCCEEDED), or a
    /// `Refusal` for an unknown task.
    fn gate(slf: &Bound<'_, Self>, task: &str) -> PyResult<Py<PyAny>> {
        Self::answer(
            slf,
            Self::made("gate", serde_json::json!({ "task": task }))?,
        )
    }

    /// Tasks (as `Record`s) by derived state, in task-id order: a `Page`;
    /// with `queue`, only the tasks placed in it. `READY` or `BLOCKED`: the
    /// work graph's claimable tasks in that state, as dicts (as `graph()`
    /// shows each), as `baton task list --state READY` lists them.
    #[pyo3(signature = (state = None, *, queue = None, after = None, limit = 100))]
    fn list(
        slf: &Bound<'_, Self>,
        state: Option<&str>,
        queue: Option<&str>,
        after: Option<String>,
        limit: usize,
    ) -> PyResult<Py<PyAny>> {
        let given =
            serde_json::json!({"state": state, "queue": queue, "after": after, "limit": limit});
        Self::paged(slf, Self::made("list", given)?)
    }

    /// Events (of `task`, or of the whole store in one order) as dicts: a `Page`.
    #[pyo3(signature = (task = None, *, after = None, limit = 100))]
    fn events(
        slf: &Bound<'_, Self>,
        task: Option<&str>,
        after: Option<&Bound<'_, PyAny>>,
        limit: usize,
    ) -> PyResult<Py<PyAny>> {
        let given = serde_json::json!({"task": task, "after": cursor(after)?, "limit": limit});
        Self::paged(slf, Self::made("feed", given)?)
    }

    /// Notifications not yet acknowledged, as dicts: a `Page`.
    #[pyo3(signature = (*, after = None, limit = 100))]
    fn pending(
        slf: &Bound<'_, Self>,
        after: Option<&Bound<'_, PyAny>>,
        limit: usize,
    ) -> PyResult<Py<PyAny>> {
        let given = serde_json::json!({"after": cursor(after)?, "limit": limit});
        Self::paged(slf, Self::made("pending", given)?)
    }

    /// Acknowledges notifications by intent id; returns how many were newly acknowledged.
    fn ack(slf: &Bound<'_, Self>, intent_ids: Vec<String>) -> PyResult<Py<PyAny>> {
        let given = serde_json::json!({ "intent_ids": intent_ids });
        Self::answer(slf, Self::made("ack", given)?)
    }

    /// Persists the derived change of every task whose lease or deadline
    /// passed; returns what changed (`dry_run`: what would), as dicts.
    #[pyo3(signature = (dry_run = false))]
    fn sweep(slf: &Bound<'_, Self>, dry_run: bool) -> PyResult<Py<PyAny>> {
        let given = serde_json::json!({ "dry_run": dry_run });
        Self::answer(slf, Self::made("sweep", given)?)
    }

    // ---- the work graph ----

    /// Adds a bare task to the work graph (REGISTERED), after the tasks
    /// `after` names: a `Record` or a `Refusal` (`manifest_conflict`).
    /// `timeout` (seconds): the most one attempt may run, however often
    /// it is renewed (a renewal after it is refused `timed_out`).
    /// `not_before`: not granted before it (a timezone-aware datetime, an
    /// RFC 3339 string, or a delay from the add in seconds or as "10m");
    /// an add repeated with another start is the same add. `max_attempts`:
    /// a failure before the last attempt is tried again after `backoff`
    /// seconds (default 1), each wait `backoff_factor` times longer
    /// (default 2), at most `backoff_max` (default an hour). `key`: a
    /// concurrency key; at most the key's limit (`set_limit`) of the tasks
    /// with it hold live grants at once, the rest wait (`key_full`).
    /// `traceparent`: the W3C trace context the task joins, carried on
    /// each grant (`Grant.traceparent`).
    #[pyo3(signature = (task, *, queue = None, priority = 0, after = None, timeout = None, not_before = None, max_attempts = None, backoff = None, backoff_factor = None, backoff_max = None, key = None, traceparent = None))]
    #[allow(clippy::too_many_arguments)]
    fn add(
        slf: &Bound<'_, Self>,
        task: &str,
        queue: Option<&str>,
        priority: i64,
        after: Option<Vec<String>>,
        timeout: Option<&Bound<'_, PyAny>>,
        not_before: Option<&Bound<'_, PyAny>>,
        max_attempts: Option<u32>,
        backoff: Option<&Bound<'_, PyAny>>,
        backoff_factor: Option<f64>,
        backoff_max: Option<&Bound<'_, PyAny>>,
        key: Option<&str>,
        traceparent: Option<&str>,
    ) -> PyResult<Py<PyAny>> {
        let place = Place {
            queue,
            priority,
            after,
            timeout,
            max_attempts,
            backoff,
            backoff_factor,
            backoff_max,
            key,
        };
        let mut given = place.given()?;
        given.insert("task".into(), serde_json::json!(task));
        if let Some(tp) = traceparent {
            given.insert("traceparent".into(), serde_json::json!(tp));
        }
        let start = convert::start("not_before", not_before)?;
        given.insert("not_before".into(), serde_json::json!(start));
        Self::answer(slf, Self::made("add", given.into())?)
    }

    /// Sets the recurring schedule `name` (its record `schedule:NAME`): one
    /// task `NAME@START` per period of `every` seconds (at least 1), or
    /// per time the cron expression `cron` names (UTC; 5 fields, or 6 with
    /// seconds first), with the queue, priority, dependencies, limit and
    /// retries `add` takes, made by whichever scheduler ticks first in
    /// each period. The schedule as a dict (`schedule`, `every_ms` or
    /// `cron`, `queue`, `since`, `next_run`, `failure`, `idempotent`), or
    /// a `Refusal` (`manifest_conflict`) for another schedule of that name.
    #[pyo3(signature = (name, every = None, *, cron = None, queue = None, priority = 0, after = None, timeout = None, max_attempts = None, backoff = None, backoff_factor = None, backoff_max = None, key = None))]
    #[allow(clippy::too_many_arguments)]
    fn schedule(
        slf: &Bound<'_, Self>,
        name: &str,
        every: Option<&Bound<'_, PyAny>>,
        cron: Option<&str>,
        queue: Option<&str>,
        priority: i64,
        after: Option<Vec<String>>,
        timeout: Option<&Bound<'_, PyAny>>,
        max_attempts: Option<u32>,
        backoff: Option<&Bound<'_, PyAny>>,
        backoff_factor: Option<f64>,
        backoff_max: Option<&Bound<'_, PyAny>>,
        key: Option<&str>,
    ) -> PyResult<Py<PyAny>> {
        let place = Place {
            queue,
            priority,
            after,
            timeout,
            max_attempts,
            backoff,
            backoff_factor,
            backoff_max,
            key,
        };
        let mut given = place.given()?;
        given.insert("name".into(), serde_json::json!(name));
        given.insert("every".into(), serde_json::json!(millis("every", every)?));
        given.insert("cron".into(), serde_json::json!(cron));
        Self::answer(slf, Self::made("schedule", given.into())?)
    }

    /// Every schedule's record (`schedule:NAME`), as `Record`s.
    fn schedules(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        Self::answer(slf, Self::made("schedules", serde_json::json!({}))?)
    }

    /// One tick of a scheduler: each live schedule's task for the current
    /// period, made once however many schedulers tick. The tasks this tick
    /// made, as `(task, Record)` pairs.
    fn tick_schedules(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        Self::answer(slf, Self::made("tick", serde_json::json!({}))?)
    }

    /// Adds many nodes in one commit where the store allows: `graph` is
    /// what `baton add --file` reads (a list of nodes, or JSON text).
    /// Returns `{"added": n, "repeated": m}`, or the `Refusal` of the first
    /// node refused (its `task` set); a cycle or unknown dependency raises
    /// `InvalidInput` and adds nothing.
    fn add_graph(slf: &Bound<'_, Self>, graph: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let given = serde_json::json!({ "graph": json_text("graph", graph)? });
        Self::answer(slf, Self::made("add_graph", given)?)
    }

    /// Grants `owner` the ready bare task of `queues` (all when empty) with
    /// the highest priority: a `Grant`, or a `Refusal` (`none_ready`, or
    /// `drained` when nothing can become ready). `wait`: seconds to wait
    /// for one; `keep_waiting` (with `wait`): wait through `drained` too,
    /// until work is added.
    /// `count=N`: up to N grants in one commit, a list of `Grant`s in the
    /// order N `next`s would make them (a `Refusal` when none is ready).
    #[pyo3(signature = (owner, queues = None, *, ttl = None, lock_delay = None, wait = None, keep_waiting = false, count = None))]
    #[allow(clippy::too_many_arguments)] // The catalogue's inputs, one by one.
    fn next(
        slf: &Bound<'_, Self>,
        owner: &str,
        queues: Option<&Bound<'_, PyAny>>,
        ttl: Option<&Bound<'_, PyAny>>,
        lock_delay: Option<&Bound<'_, PyAny>>,
        wait: Option<&Bound<'_, PyAny>>,
        keep_waiting: bool,
        count: Option<i64>,
    ) -> PyResult<Py<PyAny>> {
        let given = serde_json::json!({
            "owner": owner,
            "queues": queue_list(queues)?,
            "ttl": millis("ttl", ttl)?,
            "lock_delay": millis("lock_delay", lock_delay)?,
            "wait": millis("wait", wait)?,
            "keep_waiting": keep_waiting,
            "count": count,
        });
        Self::answer(slf, Self::made("next", given)?)
    }

    /// The worker loop: up to `count` grants a `next` (one commit), each
    /// kept renewed while it waits its turn and runs; `fn(grant)` called
    /// for each in turn, and the batch reported in one call: completed
    /// when `fn` returned, failed with its exception's type and message
    /// when it raised (Ctrl-C gives the batch's unfinished grants back
    /// and goes on). Ends when `next` grants nothing (`drained`, or
    /// `none_ready` without `wait`), after `max_tasks` grants, or once
    /// `stop` (a `threading.Event`) is set. Returns a dict: completed,
    /// failed, refused (reports refused: a grant superseded meanwhile),
    /// lost (grants whose lease was lost before their turn, given back
    /// unrun), batches, stopped (the refusal that ended it, or None).
    #[pyo3(signature = (owner, r#fn, queues = None, *, count = 16, ttl = None, lock_delay = None, wait = None, keep_waiting = false, max_tasks = None, stop = None))]
    #[allow(clippy::too_many_arguments)]
    fn work(
        slf: &Bound<'_, Self>,
        owner: &str,
        r#fn: &Bound<'_, PyAny>,
        queues: Option<&Bound<'_, PyAny>>,
        count: i64,
        ttl: Option<&Bound<'_, PyAny>>,
        lock_delay: Option<&Bound<'_, PyAny>>,
        wait: Option<&Bound<'_, PyAny>>,
        keep_waiting: bool,
        max_tasks: Option<i64>,
        stop: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        if !r#fn.is_callable() {
            return Err(errors::invalid("fn", "must be callable: fn(grant)"));
        }
        let wait_ms = millis("wait", wait)?;
        let ttl_ms = millis("ttl", ttl)?;
        let next = serde_json::json!({
            "owner": owner,
            "queues": queue_list(queues)?,
            "ttl": ttl_ms,
            "lock_delay": millis("lock_delay", lock_delay)?,
            "wait": wait_ms,
            "keep_waiting": keep_waiting,
        });
        let make_next = |n: u64| {
            let mut given = next.clone();
            given["count"] = serde_json::json!(n);
            Self::made("next", given)
        };
        crate::work::work(
            slf.py(),
            crate::work::Work {
                authority: slf.get().open()?,
                bound: slf.clone().into_any().unbind(),
                func: r#fn,
                make_next: &make_next,
                count,
                ttl_ms,
                waits: wait_ms.is_some_and(|w| w > 0),
                max_tasks,
                stop: stop.filter(|s| !s.is_none()),
            },
        )
    }

    /// `next` for declared tasks: claims the ready one for the run registered for it.
    #[pyo3(signature = (executor, queues = None, *, ttl = None, wait = None, keep_waiting = false, count = None))]
    fn task_next(
        slf: &Bound<'_, Self>,
        executor: &str,
        queues: Option<&Bound<'_, PyAny>>,
        ttl: Option<&Bound<'_, PyAny>>,
        wait: Option<&Bound<'_, PyAny>>,
        keep_waiting: bool,
        count: Option<i64>,
    ) -> PyResult<Py<PyAny>> {
        let given = serde_json::json!({
            "executor": executor,
            "queues": queue_list(queues)?,
            "ttl": millis("ttl", ttl)?,
            "wait": millis("wait", wait)?,
            "keep_waiting": keep_waiting,
            "count": count,
        });
        Self::answer(slf, Self::made("task_next", given)?)
    }

    /// Every task with a place in the work graph, as dicts.
    fn graph(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        Self::answer(slf, Self::made("graph", serde_json::json!({}))?)
    }

    // ---- a kept lease ----

    /// A lease kept for you: `with a.lease(task, owner) as lease:` claims
    /// (raising `Refused` if the claim is refused), renews in the
    /// background, sets `lease.lost` when the work must stop, completes
    /// on a clean exit and fails (with the exception's type and message)
    /// on an exception. `ttl`, `renew_every` and `grace` are seconds;
    /// `wait` (seconds, at most an hour) keeps trying the claim while
    /// another holds the task before raising `Refused`.
    #[pyo3(signature = (task, owner, ttl = None, *, renew_every = None, grace = None, wait = None))]
    #[allow(clippy::too_many_arguments)]
    fn lease(
        &self,
        py: Python<'_>,
        task: &str,
        owner: &str,
        ttl: Option<&Bound<'_, PyAny>>,
        renew_every: Option<&Bound<'_, PyAny>>,
        grace: Option<&Bound<'_, PyAny>>,
        wait: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<crate::lease::Lease> {
        let opts = crate::lease::Options {
            task: id("task", task)?,
            owner: id("owner", owner)?,
            ttl_ms: duration(Kind::Ttl, "ttl", ttl)?,
            renew_every_ms: millis("renew_every", renew_every)?,
            grace_ms: millis("grace", grace)?.unwrap_or(0),
            wait_ms: duration(Kind::Wait, "wait", wait)?.unwrap_or(0),
        };
        crate::lease::Lease::new(py, self.open()?, opts)
    }
}
