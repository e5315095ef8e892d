//! Answers as Python values, and Python arguments as the Rust API's.
//!
//! A grant, a record, a refusal, a holder, a verification and a page are
//! frozen classes with attributes; times are aware `datetime`s in UTC;
//! what the CLI prints as JSON objects (events, notifications, the gate)
//! arrives as dicts of the same shape.

use crate::errors;
use baton_core::authority::{Holder as CoreHolder, Verification as CoreVerification};
use baton_core::{Grant as CoreGrant, Id, Refusal as CoreRefusal, Reply, TaskRecord, Timestamp};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList};
use serde_json::Value;

/// `t` as an aware `datetime` in UTC, exact to the millisecond.
pub(crate) fn datetime(py: Python<'_>, t: Timestamp) -> PyResult<Py<PyAny>> {
    static EPOCH: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    static TIMEDELTA: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let epoch = EPOCH.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        let dt = py.import("datetime")?;
        let utc = dt.getattr("timezone")?.getattr("utc")?;
        let kw = PyDict::new(py);
        kw.set_item("tzinfo", utc)?;
        Ok(dt
            .getattr("datetime")?
            .call((1970, 1, 1), Some(&kw))?
            .unbind())
    })?;
    let timedelta = TIMEDELTA.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        Ok(py.import("datetime")?.getattr("timedelta")?.unbind())
    })?;
    let kw = PyDict::new(py);
    kw.set_item("milliseconds", t.as_millis())?;
    let delta = timedelta.bind(py).call((), Some(&kw))?;
    Ok(epoch.bind(py).add(delta)?.unbind())
}

fn opt_datetime(py: Python<'_>, t: Option<Timestamp>) -> PyResult<Option<Py<PyAny>>> {
    t.map(|t| datetime(py, t)).transpose()
}

/// A JSON value as plain Python (dict, list, str, int, float, bool, None).
pub(crate) fn json(py: Python<'_>, v: &Value) -> PyResult<Py<PyAny>> {
    Ok(pythonize::pythonize(py, v)
        .map_err(|e| errors::unavailable(format!("cannot convert an answer: {e}")))?
        .unbind())
}

/// Anything serializable, as the JSON the CLI prints, in plain Python.
pub(crate) fn json_of<T: serde::Serialize>(py: Python<'_>, v: &T) -> PyResult<Py<PyAny>> {
    let v = serde_json::to_value(v)
        .map_err(|e| errors::unavailable(format!("cannot convert an answer: {e}")))?;
    json(py, &v)
}

/// A Python value (dict, list, str, number, bool, None) as JSON for `field`.
pub(crate) fn to_json(field: &str, v: &Bound<'_, PyAny>) -> PyResult<Value> {
    pythonize::depythonize(v).map_err(|e| {
        errors::invalid(
            field,
            format!("must be JSON: dicts with string keys, lists, strings, numbers, booleans and None ({e})"),
        )
    })
}

/// A JSON document given as a `str` (taken as it is) or as Python values
/// (written out as JSON), for core's own parser of that document.
pub(crate) fn json_text(field: &str, v: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = v.extract::<String>() {
        return Ok(s);
    }
    serde_json::to_string(&to_json(field, v)?).map_err(|e| errors::invalid(field, e.to_string()))
}

/// An id argument, checked by core's rule for ids.
pub(crate) fn id(field: &str, value: &str) -> PyResult<Id> {
    Id::parse(field, value).map_err(errors::to_py)
}

/// A duration argument in seconds (`int`, `float` or `datetime.timedelta`),
/// or as the CLI writes one (`"30s"`, `"1m30s"`), as whole milliseconds. Whether the length is allowed is core's rule;
/// this only refuses what is not a length of time at all.
pub(crate) fn millis(field: &str, v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    // A duration as the CLI writes one (`30s`, `1m30s`), by core's rule.
    if let Ok(text) = v.extract::<String>() {
        return baton_core::catalogue::text_ms(&text)
            .map(Some)
            .map_err(|_| {
                errors::invalid(
                    field,
                    format!(
                        "must be a duration, {}, or a number of seconds (got {text:?})",
                        baton_core::catalogue::DURATION_FORMS
                    ),
                )
            });
    }
    let secs: f64 = if v.hasattr("total_seconds")? {
        v.call_method0("total_seconds")?.extract()?
    } else if v.is_instance_of::<pyo3::types::PyBool>() {
        return Err(errors::invalid(
            field,
            "must be a number of seconds, not a bool",
        ));
    } else {
        v.extract().map_err(|_| {
            errors::invalid(
                field,
                "must be a number of seconds (int or float), a datetime.timedelta or a duration such as \"30s\"",
            )
        })?
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(errors::invalid(
            field,
            format!("must be a finite, non-negative number of seconds (got {secs})"),
        ));
    }
    let ms = (secs * 1000.0).round();
    if ms > u64::MAX as f64 {
        return Err(errors::invalid(field, format!("is too long ({secs} s)")));
    }
    // In range and whole: checked just above.
    Ok(Some(ms as u64))
}

/// A start (`not_before`): a timezone-aware `datetime.datetime`, an RFC
/// 3339 string or a duration from the add (`"10m"`), or seconds from the
/// add (a number or a `datetime.timedelta`).
pub(crate) fn start(
    field: &str,
    v: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<baton_core::graph::Start>> {
    use baton_core::graph::Start;
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    if let Ok(text) = v.extract::<String>() {
        return Start::parse(field, &text).map(Some).map_err(errors::to_py);
    }
    if v.hasattr("tzinfo")? && v.hasattr("timestamp")? {
        if v.getattr("tzinfo")?.is_none() {
            return Err(errors::invalid(
                field,
                "must be a timezone-aware datetime (a naive one names no moment)",
            ));
        }
        let secs: f64 = v.call_method0("timestamp")?.extract()?;
        let ms = (secs * 1000.0).round();
        if !ms.is_finite() || ms.abs() > 9.0e15 {
            return Err(errors::invalid(field, "is out of range"));
        }
        // Whole and well inside i64: checked just above.
        return Ok(Some(Start::At(baton_core::Timestamp(ms as i64))));
    }
    match millis(field, Some(v))? {
        Some(ms) => Start::AfterMs(ms)
            .checked(field)
            .map(Some)
            .map_err(errors::to_py),
        None => Ok(None),
    }
}

/// A duration argument of the catalogue's `kind` (a TTL, a lock delay, a
/// wait): seconds as [`millis`] reads them, within the bounds every front
/// end applies to the kind (`baton_core::catalogue`).
pub(crate) fn duration(
    kind: baton_core::catalogue::Kind,
    field: &str,
    v: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<u64>> {
    millis(field, v)?
        .map(|ms| baton_core::catalogue::check_ms(kind, field, ms).map_err(errors::to_py))
        .transpose()
}

/// `None` or the value, as Python writes them.
fn py_opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or("None".to_owned(), ToString::to_string)
}

fn py_bool(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

/// A grant: who may run the task, until when, under which fence.
#[pyclass(frozen, module = "baton")]
#[derive(Debug)]
pub struct Grant {
    #[pyo3(get)]
    pub task: String,
    #[pyo3(get)]
    pub owner: String,
    /// Count of logical tries of the task.
    #[pyo3(get)]
    pub attempt: u64,
    /// The fence token: every later report about the task must carry it.
    #[pyo3(get)]
    pub fence: u64,
    /// When the lease runs out unless renewed (aware, UTC).
    #[pyo3(get)]
    pub expiry: Py<PyAny>,
    #[pyo3(get)]
    pub claimed_at: Py<PyAny>,
    #[pyo3(get)]
    pub state: String,
    #[pyo3(get)]
    pub revision: u64,
    /// True when this answered a repeat of a request already applied.
    #[pyo3(get)]
    pub idempotent: bool,
    /// The steps recorded for the task so far (by earlier attempts, or
    /// this one), in order: dicts of `step`, `output`, `fence`, `at` (and
    /// `spawned`); the attempt skips them.
    /// The W3C trace context the task was added in, if any.
    #[pyo3(get)]
    pub traceparent: Option<String>,
    #[pyo3(get)]
    pub checkpoints: Py<PyAny>,
    /// The fence signed by the authority (`bf1...`) when it signs fences
    /// (`BATON_FENCE_KEY`, a server's `--fence-key`): what guards with
    /// the key admit. `None` otherwise.
    #[pyo3(get)]
    pub token: Option<String>,
    grant: CoreGrant,
    /// The authority whose claim, recover, renew or next made it: the one
    /// its own `complete`, `fail`, `release` and `renew` report to (held
    /// as a Python object, called by method name: `convert` never names
    /// `authority`'s types).
    auth: Option<Py<PyAny>>,
}

impl Grant {
    pub(crate) fn new(py: Python<'_>, g: &CoreGrant, idempotent: bool) -> PyResult<Grant> {
        Ok(Grant {
            auth: None,
            task: g.task.to_string(),
            owner: g.owner.to_string(),
            attempt: g.attempt,
            fence: g.fence,
            expiry: datetime(py, g.expiry)?,
            claimed_at: datetime(py, g.claimed_at)?,
            state: g.state.as_str().to_owned(),
            revision: g.revision,
            idempotent,
            checkpoints: json_of(py, &g.checkpoints)?,
            traceparent: g.traceparent.clone(),
            token: None,
            grant: g.clone(),
        })
    }
}

impl Grant {
    /// The authority to report to, or why there is none.
    fn reporter(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.auth.as_ref().map(|a| a.clone_ref(py)).ok_or_else(|| {
            errors::invalid(
                "grant",
                "reports only the grant of a bare task's claim, recover, renew or next; a declared task reports with task_succeed or task_fail and its run",
            )
        })
    }
}

#[pymethods]
impl Grant {
    /// Reports success with this grant's fence: `authority.complete(task,
    /// owner, fence)`. A `Record`, or a `Refusal` (a stale fence).
    fn complete(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.reporter(py)?
            .call_method1(py, "complete", (&self.task, &self.owner, self.fence))
    }

    /// Reports failure with this grant's fence (`error`: a dict, kept on
    /// the task). A `Record` (REGISTERED when its retry policy tries it
    /// again), or a `Refusal`.
    #[pyo3(signature = (error = None))]
    fn fail(&self, py: Python<'_>, error: Option<Py<PyAny>>) -> PyResult<Py<PyAny>> {
        self.reporter(py)?
            .call_method1(py, "fail", (&self.task, &self.owner, self.fence, error))
    }

    /// Gives the task back: it may be claimed again at once.
    fn release(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.reporter(py)?
            .call_method1(py, "release", (&self.task, &self.owner, self.fence))
    }

    /// Extends this lease by `ttl` seconds (default 30): a new `Grant`
    /// (same fence, a later expiry), or a `Refusal`.
    #[pyo3(signature = (ttl = None))]
    fn renew(&self, py: Python<'_>, ttl: Option<Py<PyAny>>) -> PyResult<Py<PyAny>> {
        self.reporter(py)?
            .call_method1(py, "renew", (&self.task, &self.owner, self.fence, ttl))
    }

    /// A guard on `conn` (a `sqlite3` or psycopg connection) for writing
    /// `resource` under this grant's fence (its signed `token` when it has
    /// one): `with grant.guard(conn, "invoice:42"): ...` admits the fence
    /// in a transaction, commits on a clean exit, and raises
    /// `GuardRefused` when a later attempt already wrote (see `baton.guard`).
    #[pyo3(signature = (conn, resource, key = None))]
    fn guard(
        &self,
        py: Python<'_>,
        conn: Py<PyAny>,
        resource: String,
        key: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        crate::guard::guard_of(py, conn, resource, self.token.clone(), self.fence, key)
    }

    /// The grant as the CLI prints it (times as RFC 3339 strings).
    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let mut v =
            serde_json::to_value(&self.grant).map_err(|e| errors::unavailable(e.to_string()))?;
        v["idempotent"] = Value::Bool(self.idempotent);
        if let Some(t) = &self.token {
            v["token"] = Value::String(t.clone());
        }
        json(py, &v)
    }

    fn __repr__(&self) -> String {
        format!(
            "Grant(task={:?}, owner={:?}, fence={}, attempt={}, expiry={:?}, state={:?})",
            self.task,
            self.owner,
            self.fence,
            self.attempt,
            self.grant.expiry.to_rfc3339(),
            self.state
        )
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<Grant>()
            .is_ok_and(|o| o.get().grant == self.grant && o.get().idempotent == self.idempotent)
    }
}

/// A task as it is stored now (derived: an expired lease shows as such).
#[pyclass(frozen, module = "baton")]
#[derive(Debug)]
pub struct Record {
    #[pyo3(get)]
    pub task: String,
    #[pyo3(get)]
    pub state: String,
    #[pyo3(get)]
    pub revision: u64,
    #[pyo3(get)]
    pub attempt: u64,
    #[pyo3(get)]
    pub iteration: u64,
    /// The last grant's owner and fence, if any grant was made.
    #[pyo3(get)]
    pub owner: Option<String>,
    #[pyo3(get)]
    pub fence: Option<u64>,
    #[pyo3(get)]
    pub expiry: Option<Py<PyAny>>,
    #[pyo3(get)]
    pub run_id: Option<String>,
    #[pyo3(get)]
    pub executor: Option<String>,
    #[pyo3(get)]
    pub current_step: u32,
    #[pyo3(get)]
    pub total_steps: u32,
    #[pyo3(get)]
    pub evidence: Py<PyAny>,
    #[pyo3(get)]
    pub error: Py<PyAny>,
    #[pyo3(get)]
    pub metadata: Py<PyAny>,
    #[pyo3(get)]
    pub created_at: Py<PyAny>,
    #[pyo3(get)]
    pub updated_at: Py<PyAny>,
    #[pyo3(get)]
    pub idempotent: bool,
    /// The steps the task's attempts recorded, in order (dicts of `step`,
    /// `output`, `fence`, `at`, and `spawned`).
    #[pyo3(get)]
    pub checkpoints: Py<PyAny>,
    record: TaskRecord,
}

impl Record {
    pub(crate) fn new(py: Python<'_>, r: &TaskRecord, idempotent: bool) -> PyResult<Record> {
        Ok(Record {
            task: r.task.to_string(),
            state: r.state.as_str().to_owned(),
            revision: r.revision,
            attempt: r.attempt,
            iteration: r.iteration,
            owner: r.lease.as_ref().map(|l| l.owner.to_string()),
            fence: r.current_fence(),
            expiry: opt_datetime(py, r.lease.as_ref().map(|l| l.expires_at))?,
            run_id: r.run_id.as_ref().map(ToString::to_string),
            executor: r.executor.as_ref().map(ToString::to_string),
            current_step: r.current_step,
            total_steps: r.total_steps(),
            evidence: json_of(py, &r.evidence)?,
            error: json_of(py, &r.error)?,
            metadata: json_of(py, &r.metadata)?,
            created_at: datetime(py, r.created_at)?,
            updated_at: datetime(py, r.updated_at)?,
            idempotent,
            checkpoints: json_of(py, &r.checkpoints)?,
            record: r.clone(),
        })
    }
}

#[pymethods]
impl Record {
    /// The whole record as the CLI prints it (times as RFC 3339 strings).
    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let mut v =
            serde_json::to_value(&self.record).map_err(|e| errors::unavailable(e.to_string()))?;
        v["idempotent"] = Value::Bool(self.idempotent);
        json(py, &v)
    }

    fn __repr__(&self) -> String {
        format!(
            "Record(task={:?}, state={:?}, revision={}, fence={})",
            self.task,
            self.state,
            self.revision,
            py_opt(&self.fence)
        )
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<Record>()
            .is_ok_and(|o| o.get().record == self.record && o.get().idempotent == self.idempotent)
    }
}

/// A typed "no": the request was answered and refused. It is falsy, so
/// `if grant := a.claim(...)` reads as "if granted". `reason` is the
/// refusal's name (`held`, `stale_fence`, ...); `details` every field the
/// CLI prints with it.
#[pyclass(frozen, module = "baton")]
#[derive(Debug)]
pub struct Refusal {
    #[pyo3(get)]
    pub reason: String,
    #[pyo3(get)]
    pub message: String,
    #[pyo3(get)]
    pub details: Py<PyAny>,
    /// The live holder (held, lease_live, not_holder), if the reason names one.
    #[pyo3(get)]
    pub holder: Option<String>,
    /// The fence the reason is about (the holder's for held and
    /// lease_live; the caller's for stale_fence and lease_expired).
    #[pyo3(get)]
    pub fence: Option<u64>,
    /// The task's current fence (stale_fence).
    #[pyo3(get)]
    pub current_fence: Option<u64>,
    /// When the live lease runs out (held, lease_live).
    #[pyo3(get)]
    pub expiry: Option<Py<PyAny>>,
    /// The task refused, where one request named many (add_graph).
    #[pyo3(get)]
    pub task: Option<String>,
    refusal: CoreRefusal,
}

impl Refusal {
    pub(crate) fn new(py: Python<'_>, r: &CoreRefusal, task: Option<String>) -> PyResult<Self> {
        let mut v = serde_json::to_value(r).map_err(|e| errors::unavailable(e.to_string()))?;
        if let Value::Object(m) = &mut v {
            m.remove("refused");
        }
        let expiry = match r {
            CoreRefusal::Held { expiry, .. } | CoreRefusal::LeaseLive { expiry, .. } => {
                Some(datetime(py, *expiry)?)
            }
            _ => None,
        };
        Ok(Refusal {
            reason: r.reason().to_owned(),
            message: r.to_string(),
            holder: v.get("holder").and_then(Value::as_str).map(str::to_owned),
            fence: v.get("fence").and_then(Value::as_u64),
            current_fence: v.get("current_fence").and_then(Value::as_u64),
            details: json(py, &v)?,
            expiry,
            task,
            refusal: r.clone(),
        })
    }
}

#[pymethods]
impl Refusal {
    fn __bool__(&self) -> bool {
        false
    }

    /// The refusal as the CLI prints it: `refused`, the details, `message`.
    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let mut v = baton_core::authority::refusal_json(&self.refusal);
        if let Some(t) = &self.task {
            v["task"] = Value::String(t.clone());
        }
        json(py, &v)
    }

    fn __repr__(&self) -> String {
        format!(
            "Refusal(reason={:?}, message={:?})",
            self.reason, self.message
        )
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<Refusal>()
            .is_ok_and(|o| o.get().refusal == self.refusal && o.get().task == self.task)
    }
}

/// `holder(task)`: the last grant, and whether its lease is live now.
#[pyclass(frozen, module = "baton")]
#[derive(Debug)]
pub struct Holder {
    #[pyo3(get)]
    pub grant: Py<Grant>,
    #[pyo3(get)]
    pub live: bool,
    #[pyo3(get)]
    pub owner: String,
    #[pyo3(get)]
    pub fence: u64,
    #[pyo3(get)]
    pub expiry: Py<PyAny>,
}

#[pymethods]
impl Holder {
    fn __repr__(&self) -> String {
        format!(
            "Holder(owner={:?}, fence={}, live={})",
            self.owner,
            self.fence,
            py_bool(self.live)
        )
    }
}

/// `verify(task, fence)`: may a resource server accept work under `fence`?
#[pyclass(frozen, module = "baton")]
#[derive(Debug)]
pub struct Verification {
    /// True only when `fence` is the fence of a live lease of a task that is not terminal.
    #[pyo3(get)]
    pub current: bool,
    #[pyo3(get)]
    pub live: bool,
    #[pyo3(get)]
    pub state: String,
    #[pyo3(get)]
    pub current_fence: Option<u64>,
}

#[pymethods]
impl Verification {
    fn __bool__(&self) -> bool {
        self.current
    }

    fn __repr__(&self) -> String {
        format!(
            "Verification(current={}, live={}, state={:?}, current_fence={})",
            py_bool(self.current),
            py_bool(self.live),
            self.state,
            py_opt(&self.current_fence)
        )
    }
}

/// One page of a listing; pass `next` as `after` for the following page
/// (`None`: this was the last).
#[pyclass(frozen, module = "baton", sequence)]
#[derive(Debug)]
pub struct Page {
    #[pyo3(get)]
    pub items: Py<PyList>,
    #[pyo3(get)]
    pub next: Option<String>,
}

#[pymethods]
impl Page {
    fn __len__(&self, py: Python<'_>) -> usize {
        self.items.bind(py).len()
    }

    fn __iter__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.items.bind(py).try_iter()?.into_any().unbind())
    }

    fn __getitem__(&self, py: Python<'_>, i: isize) -> PyResult<Py<PyAny>> {
        Ok(self.items.bind(py).as_any().get_item(i)?.unbind())
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Page(items=<{} items>, next={})",
            self.items.bind(py).len(),
            self.next
                .as_ref()
                .map_or("None".to_owned(), |n| format!("{n:?}"))
        )
    }
}

pub(crate) fn page(
    py: Python<'_>,
    items: Vec<Py<PyAny>>,
    next: Option<String>,
) -> PyResult<Py<PyAny>> {
    let items = PyList::new(py, items)?.unbind();
    Ok(Py::new(py, Page { items, next })?.into_any())
}

/// A reply as the value Python gets: a `Grant` for a request that grants
/// (when the record holds one), else a `Record`; a `Refusal` for a no.
pub(crate) fn reply(py: Python<'_>, r: &Reply, as_grant: bool) -> PyResult<Py<PyAny>> {
    reply_from(py, r, as_grant, None, None)
}

/// [`reply`], a grant bound to `auth` (the authority its own reports go to).
pub(crate) fn reply_from(
    py: Python<'_>,
    r: &Reply,
    as_grant: bool,
    auth: Option<Py<PyAny>>,
    token: Option<String>,
) -> PyResult<Py<PyAny>> {
    match r {
        Reply::Refused(refusal) => Ok(Py::new(py, Refusal::new(py, refusal, None)?)?.into_any()),
        reply => {
            let idem = reply.is_idempotent();
            match (as_grant, reply.grant(), reply.record()) {
                (true, Some(g), _) => {
                    let mut grant = Grant::new(py, &g, idem)?;
                    grant.auth = auth;
                    grant.token = token;
                    Ok(Py::new(py, grant)?.into_any())
                }
                (_, _, Some(rec)) => Ok(Py::new(py, Record::new(py, rec, idem)?)?.into_any()),
                // A reply that is not a refusal always carries its record.
                (_, _, None) => Err(errors::unavailable("the store answered without a record")),
            }
        }
    }
}

pub(crate) fn refusal(
    py: Python<'_>,
    r: &CoreRefusal,
    task: Option<String>,
) -> PyResult<Py<PyAny>> {
    Ok(Py::new(py, Refusal::new(py, r, task)?)?.into_any())
}

pub(crate) fn holder(py: Python<'_>, h: &CoreHolder) -> PyResult<Py<PyAny>> {
    let grant = Py::new(py, Grant::new(py, &h.grant, false)?)?;
    Ok(Py::new(
        py,
        Holder {
            grant,
            live: h.live,
            owner: h.grant.owner.to_string(),
            fence: h.grant.fence,
            expiry: datetime(py, h.grant.expiry)?,
        },
    )?
    .into_any())
}

pub(crate) fn verification(py: Python<'_>, v: &CoreVerification) -> PyResult<Py<PyAny>> {
    Ok(Py::new(
        py,
        Verification {
            current: v.current,
            live: v.live,
            state: v.state.as_str().to_owned(),
            current_fence: v.current_fence,
        },
    )?
    .into_any())
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Grant>()?;
    m.add_class::<Record>()?;
    m.add_class::<Refusal>()?;
    m.add_class::<Holder>()?;
    m.add_class::<Verification>()?;
    m.add_class::<Page>()?;
    Ok(())
}
