//! `baton.Authority`: the Rust API's calls, one for one.

use crate::convert::{self, duration, id, json_text, millis, to_json};
use crate::shape::*;
use crate::{ProcessBound, errors, runtime};
use baton_core::State;
use baton_core::call::{Call, Output, answers_with_grant};
use baton_core::catalogue::Kind;
use baton_core::given::Given;
use baton_core::graph::Taker;
use baton_core::kinds::RequestKind;
use baton_open::DynAuthority;
use pyo3::prelude::*;
use pyo3::types::PyDict;
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

    /// [`Authority::run`] of an operation that answers one item, as a dict.
    fn run_item(&self, py: Python<'_>, call: Call) -> PyResult<Py<PyAny>> {
        let out = self.run(py, call)?;
        convert::json(py, out.items.first().unwrap_or(&serde_json::Value::Null))
    }
}

impl Authority {
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

    /// Runs `call`: a write answers its reply as Python's types (a bare
    /// task's `Grant` reporting to this authority), anything else its item.
    fn answer(slf: &Bound<'_, Self>, call: Call) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        match call {
            Call::Write { task, request, pre } => {
                let kind = request.kind();
                let as_grant = answers_with_grant(kind);
                let r =
                    slf.get().call(
                        py,
                        move |a| async move { a.submit(&task, request, pre).await },
                    )?;
                // A declared task's grant reports through its run.
                let auth = (as_grant && kind != RequestKind::TaskClaim)
                    .then(|| slf.clone().into_any().unbind());
                convert::reply_from(py, &r, as_grant, auth)
            }
            other => slf.get().run_item(py, other),
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
        let py = slf.py();
        let given = serde_json::json!({
            "task": task, "owner": owner, "fence": fence,
            "operator": operator, "force": force, "cascade": cascade,
        });
        match Self::made("cancel", given)? {
            Call::CancelCascade { task, by, force } => {
                let (first, cascaded) = slf.get().call(py, move |a| async move {
                    a.cancel_cascade(&task, by, force).await
                })?;
                let first = convert::reply(py, &first, false)?;
                let mut each = Vec::with_capacity(cascaded.len());
                for (t, r) in &cascaded {
                    each.push((t.as_str().to_owned(), convert::reply(py, r, false)?));
                }
                Ok((first, each).into_pyobject(py)?.into_any().unbind())
            }
            call => Self::answer(slf, call),
        }
    }

    /// The last grant with whether its lease is live: a `Holder`, `None`
    /// when the task was never granted, a `Refusal` (`not_found`) for an
    /// unknown task.
    fn holder(&self, py: Python<'_>, task: &str) -> PyResult<Py<PyAny>> {
        let t = id("task", task)?;
        match self.call(py, move |a| async move { a.holder(&t).await })? {
            Ok(Some(h)) => convert::holder(py, &h),
            Ok(None) => Ok(py.None()),
            Err(r) => convert::refusal(py, &r, None),
        }
    }

    /// Whether work under `fence` may be accepted now: a `Verification`
    /// (truthy only when current), or a `Refusal` for an unknown task.
    fn verify(&self, py: Python<'_>, task: &str, fence: u64) -> PyResult<Py<PyAny>> {
        let t = id("task", task)?;
        match self.call(py, move |a| async move { a.verify(&t, fence).await })? {
            Ok(v) => convert::verification(py, &v),
            Err(r) => convert::refusal(py, &r, None),
        }
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
    /// limit). A `Record` (the key's), or a `Refusal`.
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

    /// An operator sets queue `queue`'s retry policy: a task added to the
    /// queue without one of its own takes it, fixed when it is added.
    /// With none of the retry arguments the policy is removed. A `Record`
    /// (the queue's), or a `Refusal`.
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
    #[pyo3(signature = (finished_before, operator, max = None))]
    fn prune(
        &self,
        py: Python<'_>,
        finished_before: &Bound<'_, PyAny>,
        operator: &str,
        max: Option<usize>,
    ) -> PyResult<u64> {
        let ms = duration(Kind::Retention, "finished_before", Some(finished_before))?.unwrap_or(0);
        let by = self::operator(operator)?;
        self.call(py, move |a| async move {
            a.prune(by, ms, max.unwrap_or(usize::MAX)).await
        })
    }

    // ---- reads ----

    /// Concurrency key `key` as read now: a dict with its `limit` (or
    /// None), live `holders` (each `{"task", "fence"}`) and `parked`
    /// tasks waiting for a slot, oldest first.
    fn key_status(&self, py: Python<'_>, key: &str) -> PyResult<Py<PyAny>> {
        let key = id("key", key)?;
        self.run_item(py, Call::KeyShow { key })
    }

    /// Queue `queue`'s policy: a dict `{"queue", "retry"}`, `retry` a dict
    /// (`max_attempts`, `backoff_ms`, `factor`, `max_backoff_ms`) or None.
    fn queue_policy(&self, py: Python<'_>, queue: &str) -> PyResult<Py<PyAny>> {
        let queue = id("queue", queue)?;
        self.run_item(py, Call::QueueShow { queue })
    }

    /// Every concurrency key's status, as `key_status` gives each.
    fn keys(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let all = self.call(py, move |a| async move { a.keys().await })?;
        convert::json_of(py, &all)
    }

    /// The task as it is now (a `Record`), or `None` if unknown.
    fn get(&self, py: Python<'_>, task: &str) -> PyResult<Py<PyAny>> {
        let t = id("task", task)?;
        match self.call(py, move |a| async move { a.get(&t).await })? {
            Some(r) => Ok(Py::new(py, convert::Record::new(py, &r, false)?)?.into_any()),
            None => Ok(py.None()),
        }
    }

    /// The release gate as a dict (`passed` only for SUCCEEDED), or a
    /// `Refusal` for an unknown task.
    fn gate(&self, py: Python<'_>, task: &str) -> PyResult<Py<PyAny>> {
        let t = id("task", task)?;
        match self.call(py, move |a| async move { a.gate(&t).await })? {
            Ok(g) => convert::json_of(py, &g),
            Err(r) => convert::refusal(py, &r, None),
        }
    }

    /// Tasks (as `Record`s) by derived state, in task-id order: a `Page`.
    #[pyo3(signature = (state = None, *, after = None, limit = 100))]
    fn list(
        &self,
        py: Python<'_>,
        state: Option<&str>,
        after: Option<String>,
        limit: usize,
    ) -> PyResult<Py<PyAny>> {
        let state = state
            .map(|s| State::parse("state", s))
            .transpose()
            .map_err(errors::to_py)?;
        let p = self.call(py, move |a| async move {
            a.list(state, after.as_deref(), limit).await
        })?;
        let items = p
            .items
            .iter()
            .map(|r| Ok(Py::new(py, convert::Record::new(py, r, false)?)?.into_any()))
            .collect::<PyResult<Vec<_>>>()?;
        convert::page(py, items, p.next)
    }

    /// Events (of `task`, or of the whole store in one order) as dicts: a `Page`.
    #[pyo3(signature = (task = None, *, after = None, limit = 100))]
    fn events(
        &self,
        py: Python<'_>,
        task: Option<&str>,
        after: Option<&Bound<'_, PyAny>>,
        limit: usize,
    ) -> PyResult<Py<PyAny>> {
        let t = task.map(|t| id("task", t)).transpose()?;
        let after = cursor(after)?;
        let p = self.call(py, move |a| async move {
            a.events(t.as_ref(), after.as_deref(), limit).await
        })?;
        let items = p
            .items
            .iter()
            .map(|e| convert::json_of(py, e))
            .collect::<PyResult<Vec<_>>>()?;
        convert::page(py, items, p.next)
    }

    /// Notifications not yet acknowledged, as dicts: a `Page`.
    #[pyo3(signature = (*, after = None, limit = 100))]
    fn pending(
        &self,
        py: Python<'_>,
        after: Option<&Bound<'_, PyAny>>,
        limit: usize,
    ) -> PyResult<Py<PyAny>> {
        let after = cursor(after)?;
        let out = self.run(py, Call::Pending { after, limit })?;
        let items = out
            .items
            .iter()
            .map(|n| convert::json(py, n))
            .collect::<PyResult<Vec<_>>>()?;
        convert::page(py, items, out.next)
    }

    /// Acknowledges notifications by intent id; returns how many were newly acknowledged.
    fn ack(&self, py: Python<'_>, intent_ids: Vec<String>) -> PyResult<u64> {
        self.call(py, move |a| async move { a.ack(&intent_ids).await })
    }

    /// Persists the derived change of every task whose lease or deadline
    /// passed; returns what changed (`dry_run`: what would), as dicts.
    #[pyo3(signature = (dry_run = false))]
    fn sweep(&self, py: Python<'_>, dry_run: bool) -> PyResult<Py<PyAny>> {
        let out = self.run(py, Call::Sweep { dry_run })?;
        convert::json(py, &serde_json::Value::Array(out.items))
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
    #[pyo3(signature = (task, *, queue = None, priority = 0, after = None, timeout = None, not_before = None, max_attempts = None, backoff = None, backoff_factor = None, backoff_max = None, key = None))]
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
    ) -> PyResult<Py<PyAny>> {
        let shape = Shape {
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
        let mut given = shape.given()?;
        given.insert("task".into(), serde_json::json!(task));
        let start = convert::start("not_before", not_before)?;
        given.insert("not_before".into(), serde_json::json!(start));
        Self::answer(slf, Self::made("add", given.into())?)
    }

    /// Sets the recurring schedule `name` (its record `schedule:NAME`): one
    /// task `NAME@START` per period of `every` seconds (at least 1), or
    /// per time the cron expression `cron` names (UTC; 5 fields, or 6 with
    /// seconds first), with the queue, priority, dependencies, limit and
    /// retries `add` takes, made by whichever scheduler ticks first in
    /// each period. A `Record`, or a `Refusal` (`manifest_conflict`) for
    /// another schedule of that name.
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
        let shape = Shape {
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
        let mut given = shape.given()?;
        given.insert("name".into(), serde_json::json!(name));
        given.insert("every".into(), serde_json::json!(millis("every", every)?));
        given.insert("cron".into(), serde_json::json!(cron));
        Self::answer(slf, Self::made("schedule", given.into())?)
    }

    /// Every schedule's record (`schedule:NAME`), as `Record`s.
    fn schedules(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let records = self.call(py, move |a| async move { a.schedules().await })?;
        let mut out = Vec::with_capacity(records.len());
        for r in &records {
            out.push(Py::new(py, convert::Record::new(py, r, false)?)?);
        }
        Ok(out.into_pyobject(py)?.into_any().unbind())
    }

    /// One tick of a scheduler: each live schedule's task for the current
    /// period, made once however many schedulers tick. The tasks this tick
    /// made, as `(task, Record)` pairs.
    fn tick_schedules(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let made = self.call(py, move |a| async move { a.tick_schedules().await })?;
        let mut out = Vec::with_capacity(made.len());
        for (t, r) in &made {
            out.push((t.as_str().to_owned(), convert::reply(py, r, false)?));
        }
        Ok(out.into_pyobject(py)?.into_any().unbind())
    }

    /// Adds many nodes in one commit where the store allows: `graph` is
    /// what `baton add --file` reads (a list of nodes, or JSON text).
    /// Returns `{"added": n, "repeated": m}`, or the `Refusal` of the first
    /// node refused (its `task` set); a cycle or unknown dependency raises
    /// `InvalidInput` and adds nothing.
    fn add_graph(&self, py: Python<'_>, graph: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let nodes = baton_core::workgraph::parse_graph(&json_text("graph", graph)?)
            .map_err(errors::to_py)?;
        match self.call(py, move |a| async move { a.add_graph(nodes).await })? {
            Ok(added) => {
                let d = PyDict::new(py);
                d.set_item("added", added.added)?;
                d.set_item("repeated", added.repeated)?;
                Ok(d.into_any().unbind())
            }
            Err((task, r)) => convert::refusal(py, &r, Some(task.to_string())),
        }
    }

    /// Grants `owner` the ready bare task of `queues` (all when empty) with
    /// the highest priority: a `Grant`, or a `Refusal` (`none_ready`, or
    /// `drained` when nothing can become ready). `wait`: seconds to wait
    /// for one; `keep_waiting` (with `wait`): wait through `drained` too,
    /// until work is added.
    #[pyo3(signature = (owner, queues = None, *, ttl = None, lock_delay = None, wait = None, keep_waiting = false))]
    fn next(
        slf: &Bound<'_, Self>,
        owner: &str,
        queues: Option<&Bound<'_, PyAny>>,
        ttl: Option<&Bound<'_, PyAny>>,
        lock_delay: Option<&Bound<'_, PyAny>>,
        wait: Option<&Bound<'_, PyAny>>,
        keep_waiting: bool,
    ) -> PyResult<Py<PyAny>> {
        let taker = Taker::Owner {
            owner: id("owner", owner)?,
            ttl_ms: duration(Kind::Ttl, "ttl", ttl)?,
            lock_delay_ms: duration(Kind::LockDelay, "lock_delay", lock_delay)?,
        };
        let queues = queue_list(queues)?;
        let wait = duration(Kind::Wait, "wait", wait)?;
        let bound = Some(slf.clone().into_any().unbind());
        slf.get()
            .take_next(slf.py(), taker, queues, (wait, keep_waiting), bound)
    }

    /// `next` for declared tasks: claims the ready one for the run registered for it.
    #[pyo3(signature = (executor, queues = None, *, ttl = None, wait = None, keep_waiting = false))]
    fn task_next(
        &self,
        py: Python<'_>,
        executor: &str,
        queues: Option<&Bound<'_, PyAny>>,
        ttl: Option<&Bound<'_, PyAny>>,
        wait: Option<&Bound<'_, PyAny>>,
        keep_waiting: bool,
    ) -> PyResult<Py<PyAny>> {
        let taker = Taker::Executor {
            executor: id("executor", executor)?,
            ttl_ms: duration(Kind::Ttl, "ttl", ttl)?,
        };
        let queues = queue_list(queues)?;
        let wait = duration(Kind::Wait, "wait", wait)?;
        self.take_next(py, taker, queues, (wait, keep_waiting), None)
    }

    /// Every task with a place in the work graph, as dicts.
    fn graph(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let out = self.run(py, Call::Graph)?;
        convert::json(py, &serde_json::Value::Array(out.items))
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
