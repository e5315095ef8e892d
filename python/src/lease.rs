//! `baton.Lease`: a grant held by core's lease keeper for a `with` block.

use crate::convert;
use crate::{ProcessBound, errors, runtime};
use baton_core::graph::NewNode;
use baton_core::keeper::{KeepOptions, Keeper, Outcome};
use baton_core::{Checkpoint, Grant, Id, Reply, Step, Store};
use baton_open::DynAuthority;
use pyo3::prelude::*;
use pyo3::types::PyType;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// What `Authority.lease` was asked for.
#[derive(Debug)]
pub(crate) struct Options {
    pub task: Id,
    pub owner: Id,
    pub ttl_ms: Option<u64>,
    pub renew_every_ms: Option<u64>,
    pub grace_ms: u64,
    /// How long entering waits for a task another holds (0: not at all).
    pub wait_ms: u64,
}

#[derive(Debug)]
enum Phase {
    /// Not entered yet.
    Waiting,
    /// Entered: the keeper holds the grant.
    Held(Keeper<Arc<dyn Store>>),
    /// Finished or released: how it ended.
    Ended {
        grant: Grant,
        loss: Option<String>,
        renewals: u64,
        result: Option<Py<PyAny>>,
        report_error: Option<String>,
    },
}

/// A lease kept for the `with` block it guards. Renewals run in the
/// background (core's keeper); `lost` is a `threading.Event` set as soon
/// as the work must stop (a renewal refused, or none confirmed in time),
/// before the lease can run out. A clean exit completes the task, an
/// exception fails it with `{"type": ..., "message": ...}`, and Ctrl-C
/// (`KeyboardInterrupt`) gives it back; `release()` gives it back too.
#[pyclass(frozen, module = "baton")]
#[derive(Debug)]
pub struct Lease {
    opts: Options,
    lost: Py<PyAny>,
    /// Set when an operator asks the holder to stop (cooperative cancel).
    cancelled: Py<PyAny>,
    /// The authority it was made from (kept open while the lease lives),
    /// and where the lease is.
    inner: ProcessBound<(Arc<DynAuthority>, Mutex<Phase>)>,
    /// The steps this attempt recorded (a renewal's grant carries them
    /// too, but only from its next renewal on).
    recorded: Mutex<Vec<Checkpoint>>,
}

impl Lease {
    pub(crate) fn new(
        py: Python<'_>,
        authority: Arc<DynAuthority>,
        opts: Options,
    ) -> PyResult<Lease> {
        let lost = py.import("threading")?.getattr("Event")?.call0()?.unbind();
        let cancelled = py.import("threading")?.getattr("Event")?.call0()?.unbind();
        Ok(Lease {
            opts,
            lost,
            cancelled,
            inner: ProcessBound::new((authority, Mutex::new(Phase::Waiting))),
            recorded: Mutex::new(Vec::new()),
        })
    }

    fn authority(&self) -> PyResult<Arc<DynAuthority>> {
        Ok(Arc::clone(&self.inner.get("lease")?.0))
    }

    fn phase(&self) -> PyResult<std::sync::MutexGuard<'_, Phase>> {
        Ok(self
            .inner
            .get("lease")?
            .1
            .lock()
            .unwrap_or_else(|p| p.into_inner()))
    }

    /// Takes the keeper out, leaving the lease ended with `grant`.
    fn take_keeper(&self) -> PyResult<Option<Keeper<Arc<dyn Store>>>> {
        let mut phase = self.phase()?;
        match &*phase {
            Phase::Held(k) => {
                let kept = k.kept();
                let ended = Phase::Ended {
                    grant: kept.grant,
                    loss: kept.lost.map(|l| l.describe()),
                    renewals: kept.renewals,
                    result: None,
                    report_error: None,
                };
                match std::mem::replace(&mut *phase, ended) {
                    Phase::Held(k) => Ok(Some(k)),
                    // Matched as Held just above, under the same lock.
                    _ => Ok(None),
                }
            }
            Phase::Waiting => Err(errors::invalid(
                "lease",
                "is not held: use it as `with authority.lease(...) as lease:`",
            )),
            Phase::Ended { .. } => Ok(None),
        }
    }

    fn record_end(&self, result: Option<Py<PyAny>>, report_error: Option<String>) -> PyResult<()> {
        if let Phase::Ended {
            result: r,
            report_error: e,
            ..
        } = &mut *self.phase()?
        {
            *r = result;
            *e = report_error;
        }
        Ok(())
    }

    /// Every step recorded for the task: the grant's, then this
    /// attempt's own since.
    fn steps(&self) -> PyResult<Vec<Checkpoint>> {
        let mut all = self.grant()?.checkpoints;
        let own = self.recorded.lock().unwrap_or_else(|p| p.into_inner());
        for c in own.iter() {
            if !all.iter().any(|k| k.step == c.step) {
                all.push(c.clone());
            }
        }
        Ok(all)
    }

    /// Records `step` under this lease's fence (with the tasks `spawn`
    /// adds), raising `Refused` when the store refuses it.
    fn record(
        &self,
        py: Python<'_>,
        step: Id,
        output: serde_json::Value,
        spawn: Vec<NewNode>,
        wait: bool,
    ) -> PyResult<()> {
        let (task, fence) = (self.opts.task.clone(), self.grant()?.fence);
        let s = Step {
            owner: self.opts.owner.clone(),
            fence,
            step: step.clone(),
            output,
            spawn,
            wait,
        };
        let t = task.clone();
        let answer = runtime::call(py, self.authority()?, move |a| async move {
            a.checkpoint(&t, s).await
        })?;
        let record = match answer {
            Ok(Reply::Refused(r)) => {
                let value = convert::refusal(py, &r, None)?;
                return Err(errors::refused(
                    py,
                    format!("step {step} of {task} was refused: {r}"),
                    value,
                ));
            }
            Err((child, r)) => {
                let value = convert::refusal(py, &r, Some(child.to_string()))?;
                return Err(errors::refused(
                    py,
                    format!(
                        "step {step} of {task} would add {child}, which was refused: {r}; nothing was added or recorded"
                    ),
                    value,
                ));
            }
            Ok(reply) => reply.record().cloned(),
        };
        if let Some(c) =
            record.and_then(|r| r.checkpoints.into_iter().find(|c| c.step == step.as_str()))
        {
            let mut own = self.recorded.lock().unwrap_or_else(|p| p.into_inner());
            if !own.iter().any(|k| k.step == c.step) {
                own.push(c);
            }
        }
        Ok(())
    }

    /// `Refused` when the keeper already knows the lease is lost: the
    /// step must not run for a task that is another's.
    fn refuse_if_lost(&self, py: Python<'_>, step: &Id) -> PyResult<()> {
        if self.lost.call_method0(py, "is_set")?.extract::<bool>(py)? {
            let why = self.loss()?.unwrap_or_else(|| "the lease was lost".into());
            return Err(errors::refused(
                py,
                format!("step {step} of {} did not run: {why}", self.opts.task),
                py.None(),
            ));
        }
        Ok(())
    }

    fn grant(&self) -> PyResult<Grant> {
        match &*self.phase()? {
            Phase::Held(k) => Ok(k.grant()),
            Phase::Ended { grant, .. } => Ok(grant.clone()),
            Phase::Waiting => Err(errors::invalid(
                "lease",
                "is not held yet: enter it with `with`",
            )),
        }
    }
}

#[pymethods]
impl Lease {
    fn __enter__(slf: Py<Self>, py: Python<'_>) -> PyResult<Py<Self>> {
        let this = slf.get();
        if !matches!(*this.phase()?, Phase::Waiting) {
            return Err(errors::invalid("lease", "can be entered only once"));
        }
        let auth = this.authority()?;
        let rt = runtime()?;
        let (task, owner, ttl, wait) = (
            this.opts.task.clone(),
            this.opts.owner.clone(),
            this.opts.ttl_ms,
            this.opts.wait_ms,
        );
        let a = Arc::clone(&auth);
        let reply = py
            .detach(move || {
                rt.block_on(async move {
                    if wait > 0 {
                        a.claim_waiting(&task, &owner, ttl, wait).await
                    } else {
                        a.claim(&task, &owner, ttl).await
                    }
                })
            })
            .map_err(errors::to_py)?;
        let grant = match &reply {
            Reply::Refused(r) => {
                let value = convert::refusal(py, r, None)?;
                return Err(errors::refused(
                    py,
                    format!("the claim of {} was refused: {r}", this.opts.task),
                    value,
                ));
            }
            other => other
                .grant()
                .ok_or_else(|| errors::unavailable("the store granted without a lease"))?,
        };
        let opts = KeepOptions {
            ttl_ms: this.opts.ttl_ms,
            renew_every_ms: this.opts.renew_every_ms,
            grace_ms: this.opts.grace_ms,
            margin_ms: None,
            run_id: None,
        };
        let keeper = {
            let _in_runtime = rt.enter();
            auth.keep(grant, opts)
        };
        let mut rx = keeper.watch();
        let event = this.lost.clone_ref(py);
        let asked = this.cancelled.clone_ref(py);
        rt.spawn(async move {
            let mut told = false;
            loop {
                let (lost, cancel) = {
                    let k = rx.borrow_and_update();
                    (k.lost.is_some(), k.cancel_requested.is_some())
                };
                if cancel && !told {
                    told = true;
                    Python::try_attach(|py| {
                        let _ = asked.call_method0(py, "set");
                    });
                }
                if lost {
                    // At interpreter shutdown there is no one left to tell.
                    Python::try_attach(|py| {
                        let _ = event.call_method0(py, "set");
                    });
                    return;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        });
        *this.phase()? = Phase::Held(keeper);
        Ok(slf)
    }

    #[pyo3(signature = (exc_type, exc, _traceback))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyType>>,
        exc: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let Some(keeper) = self.take_keeper()? else {
            // Released (or ended) inside the block: nothing more to report.
            return Ok(false);
        };
        // Ctrl-C is the person stopping the work, not the work failing:
        // the task is given back, as `baton run` gives it back on SIGINT.
        if let Some(t) = exc_type
            && t.is_subclass_of::<pyo3::exceptions::PyKeyboardInterrupt>()?
        {
            let rt = runtime()?;
            match py.detach(move || rt.block_on(keeper.release())) {
                Ok(reply) => {
                    let value = convert::reply(py, &reply, false)?;
                    self.record_end(Some(value), None)?;
                }
                Err(e) => self.record_end(None, Some(e.to_string()))?,
            }
            return Ok(false);
        }
        let outcome = match exc_type {
            None => Outcome::Success {
                evidence: BTreeMap::new(),
            },
            Some(t) => {
                let name: String = t.getattr("__name__")?.extract()?;
                let message = match exc {
                    Some(e) => e.str()?.to_string(),
                    None => String::new(),
                };
                Outcome::Failure {
                    error: serde_json::json!({"type": name, "message": message}),
                }
            }
        };
        let rt = runtime()?;
        let answer = py.detach(move || rt.block_on(keeper.finish(outcome)));
        let clean = exc_type.is_none();
        match answer {
            Ok(Reply::Refused(r)) => {
                let value = convert::refusal(py, &r, None)?;
                self.record_end(Some(value.clone_ref(py)), None)?;
                if clean {
                    return Err(errors::refused(
                        py,
                        format!("completing {} was refused: {r}", self.opts.task),
                        value,
                    ));
                }
            }
            Ok(reply) => {
                let value = convert::reply(py, &reply, false)?;
                self.record_end(Some(value), None)?;
            }
            Err(e) => {
                self.record_end(None, Some(e.to_string()))?;
                if clean {
                    return Err(errors::to_py(e));
                }
            }
        }
        // The block's own exception, if any, goes on as it was.
        Ok(false)
    }

    /// Stops renewing and gives the task back (it may be claimed again at
    /// once); the `with` block's end then reports nothing. Returns the
    /// `Record` or the `Refusal`.
    fn release(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let Some(keeper) = self.take_keeper()? else {
            return Err(errors::invalid("lease", "has already ended"));
        };
        let rt = runtime()?;
        let answer = py.detach(move || rt.block_on(keeper.release()));
        match answer {
            Ok(reply) => {
                let value = convert::reply(py, &reply, false)?;
                self.record_end(Some(value.clone_ref(py)), None)?;
                Ok(value)
            }
            Err(e) => {
                self.record_end(None, Some(e.to_string()))?;
                Err(errors::to_py(e))
            }
        }
    }

    #[getter]
    fn task(&self) -> String {
        self.opts.task.to_string()
    }

    #[getter]
    fn owner(&self) -> String {
        self.opts.owner.to_string()
    }

    /// The fence of the grant: send it with everything written under this lease.
    #[getter]
    fn fence(&self) -> PyResult<u64> {
        Ok(self.grant()?.fence)
    }

    /// The fence signed by the authority when it signs fences
    /// (`BATON_FENCE_KEY`, a server's `--fence-key`), else `None`: what
    /// guards holding the key admit.
    #[getter]
    fn token(&self, py: Python<'_>) -> PyResult<Option<String>> {
        let g = self.grant()?;
        runtime::call(py, self.authority()?, move |a| async move {
            a.fence_token(&g.task, g.fence).await
        })
    }

    /// A guard on `conn` (a `sqlite3` or psycopg connection) for writing
    /// `resource` under this lease's fence (its token when signed): see
    /// `baton.guard`.
    #[pyo3(signature = (conn, resource, key = None))]
    fn guard(
        &self,
        py: Python<'_>,
        conn: Py<PyAny>,
        resource: String,
        key: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let token = self.token(py)?;
        crate::guard::guard_of(py, conn, resource, token, self.fence()?, key)
    }

    /// The steps recorded for the task so far, by earlier attempts and
    /// this one, in order: dicts of `step`, `output`, `fence`, `at` (and
    /// `spawned`).
    #[getter]
    fn checkpoints(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        convert::json_of(py, &self.steps()?)
    }

    /// One durable step: the output recorded for `name` if an attempt
    /// recorded it already (`fn` does not run), else `fn(*args, **kwargs)`,
    /// whose result (JSON: dicts, lists, strings, numbers, booleans, None)
    /// is recorded under this lease's fence before it is returned. Either
    /// way the value returned is the one recorded, as JSON gives it back
    /// (a tuple comes back a list), so a resumed attempt sees what the
    /// first one saw. Raises `Refused` (and records nothing) when the
    /// lease was lost or superseded: stop, the task is another's.
    #[pyo3(signature = (name, r#fn, *args, **kwargs))]
    fn step(
        &self,
        py: Python<'_>,
        name: &str,
        r#fn: &Bound<'_, PyAny>,
        args: &Bound<'_, pyo3::types::PyTuple>,
        kwargs: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        let step = convert::id("name", name)?;
        if let Some(c) = self.steps()?.into_iter().find(|c| c.step == step.as_str()) {
            return convert::json(py, &c.output);
        }
        self.refuse_if_lost(py, &step)?;
        let result = r#fn.call(args.clone(), kwargs)?;
        let output = convert::to_json("output", &result)?;
        self.record(py, step, output.clone(), Vec::new(), false)?;
        convert::json(py, &output)
    }

    /// Adds `nodes` (graph nodes, as `add_graph` takes them) in the same
    /// commit as step `name`'s record (its output `output`), once however
    /// often it is called; `wait=True` (the default): this task depends on
    /// them, so once it gives its grant back (`release()`) it is granted
    /// again when they have all succeeded, the step recorded. Returns the
    /// step's output; raises `Refused` when the store refuses the step (a
    /// lost lease) or one of the tasks (one of its id exists as another).
    #[pyo3(signature = (name, nodes, *, output = None, wait = true))]
    fn spawn(
        &self,
        py: Python<'_>,
        name: &str,
        nodes: &Bound<'_, PyAny>,
        output: Option<&Bound<'_, PyAny>>,
        wait: bool,
    ) -> PyResult<Py<PyAny>> {
        let step = convert::id("name", name)?;
        if let Some(c) = self.steps()?.into_iter().find(|c| c.step == step.as_str()) {
            return convert::json(py, &c.output);
        }
        self.refuse_if_lost(py, &step)?;
        let output = match output {
            Some(o) => convert::to_json("output", o)?,
            None => serde_json::Value::Null,
        };
        let text = convert::json_text("spawn", nodes)?;
        let nodes = baton_core::workgraph::parse_graph(&text).map_err(|mut e| {
            e.field = Some("spawn".into());
            errors::to_py(e)
        })?;
        self.record(py, step, output.clone(), nodes, wait)?;
        convert::json(py, &output)
    }

    /// The grant as last renewed.
    #[getter(grant)]
    fn grant_now(&self, py: Python<'_>) -> PyResult<convert::Grant> {
        convert::Grant::new(py, &self.grant()?, false)
    }

    /// When the lease runs out unless renewed again.
    #[getter]
    fn expiry(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        convert::datetime(py, self.grant()?.expiry)
    }

    /// A `threading.Event`, set when the work must stop.
    #[getter]
    fn lost(&self, py: Python<'_>) -> Py<PyAny> {
        self.lost.clone_ref(py)
    }

    /// A `threading.Event` set when an operator asks the holder to stop
    /// (seen on a renewal; the lease still holds): stop the work and
    /// `release()`, which cancels the task.
    #[getter]
    fn cancelled(&self, py: Python<'_>) -> Py<PyAny> {
        self.cancelled.clone_ref(py)
    }

    /// Why the work must stop, once it must (else `None`).
    #[getter]
    fn loss(&self) -> PyResult<Option<String>> {
        Ok(match &*self.phase()? {
            Phase::Held(k) => k.lost().map(|l| l.describe()),
            Phase::Ended { loss, .. } => loss.clone(),
            Phase::Waiting => None,
        })
    }

    /// Renewals the store confirmed.
    #[getter]
    fn renewals(&self) -> PyResult<u64> {
        Ok(match &*self.phase()? {
            Phase::Held(k) => k.kept().renewals,
            Phase::Ended { renewals, .. } => *renewals,
            Phase::Waiting => 0,
        })
    }

    /// How the lease ended: the `Record` or `Refusal` its final report got
    /// (`None` while held, or when the report could not be made).
    #[getter]
    fn result(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        Ok(match &*self.phase()? {
            Phase::Ended { result, .. } => result.as_ref().map(|r| r.clone_ref(py)),
            _ => None,
        })
    }

    /// The error the final report met, when the store could not take it.
    #[getter]
    fn report_error(&self) -> PyResult<Option<String>> {
        Ok(match &*self.phase()? {
            Phase::Ended { report_error, .. } => report_error.clone(),
            _ => None,
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "Lease(task={:?}, owner={:?})",
            self.opts.task.as_str(),
            self.opts.owner.as_str()
        )
    }
}
