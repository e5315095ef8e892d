//! # baton (Python)
//!
//! The `baton` Python module: `baton.authority_for(url)` opens the store a
//! URL names through the same `authority_for` the CLI uses, and every call
//! of the returned `Authority` is one call of the Rust API, made with the
//! GIL released on a tokio runtime of the process's own.
//!
//! Nothing here decides anything: a refusal is core's, returned as a value;
//! an error is core's, raised as the exception its kind names. This crate
//! converts arguments and answers, and guards against `fork`.

mod authority;
mod convert;
mod errors;
mod lease;

use pyo3::prelude::*;
use std::sync::Mutex;

/// The process's tokio runtime, made on first use. One per process: a
/// child of `fork` finds the parent's recorded under another pid and makes
/// its own. Runtimes are leaked on purpose, never dropped: dropping one in
/// a forked child would wait for worker threads that do not exist there.
fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    static RUNTIME: Mutex<Option<(u32, &'static tokio::runtime::Runtime)>> = Mutex::new(None);
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((owner, rt)) = *slot
        && owner == pid
    {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        // Calls run on the caller's thread (block_on); the worker drives
        // timers, connections and lease keepers in the background.
        .worker_threads(1)
        .thread_name("baton")
        .enable_all()
        .build()
        .map_err(|e| errors::unavailable(format!("cannot start baton's runtime: {e}")))?;
    let rt: &'static tokio::runtime::Runtime = Box::leak(Box::new(rt));
    *slot = Some((pid, rt));
    Ok(rt)
}

/// A value that belongs to the process that made it. Used from another
/// process (a child of `fork`) it is refused; dropped there it is leaked,
/// so that the child never closes the parent's SQLite handle (which would
/// drop the parent's POSIX locks) nor tears down the parent's threads.
#[derive(Debug)]
pub(crate) struct ProcessBound<T> {
    pid: u32,
    /// Always `Some` until dropped.
    value: Option<T>,
}

impl<T> ProcessBound<T> {
    pub(crate) fn new(value: T) -> Self {
        ProcessBound {
            pid: std::process::id(),
            value: Some(value),
        }
    }

    /// The value, if this is the process that made it.
    pub(crate) fn get(&self, what: &str) -> PyResult<&T> {
        let now = std::process::id();
        match &self.value {
            Some(v) if now == self.pid => Ok(v),
            _ => Err(errors::used_after_fork(what, self.pid, now)),
        }
    }
}

impl<T> Drop for ProcessBound<T> {
    fn drop(&mut self) {
        if std::process::id() != self.pid {
            std::mem::forget(self.value.take());
        }
    }
}

/// baton: who may run a piece of work. `baton.authority_for(url)` opens a
/// store; a request the store answered returns a value (a `Grant`, a
/// `Record`, or a falsy `Refusal`); only what could not be answered raises
/// (`Unavailable`, `Indeterminate`, `Corrupt`, `InvalidInput`,
/// `NotPermitted`).
/// The operations every front end offers (core's catalogue), as dicts:
/// `name`, `summary`, `write`, `operator`, `cli`, `http` (`"GET /path"`),
/// `python` (the `Authority` method) and `inputs` (each `name`, `wire`,
/// `required` and `rule`).
#[pyfunction]
fn operations(py: Python<'_>) -> PyResult<Py<PyAny>> {
    let ops: Vec<serde_json::Value> = baton_core::catalogue::OPERATIONS
        .iter()
        .map(|o| {
            serde_json::json!({
                "name": o.name,
                "summary": o.summary,
                "write": o.write,
                "operator": o.operator,
                "cli": o.cli,
                "http": o.http.map(|r| format!("{} {}", r.method, r.path)),
                "python": o.python,
                "inputs": o.inputs.iter().map(|i| serde_json::json!({
                    "name": i.name,
                    "wire": i.wire,
                    "required": i.required,
                    "rule": i.kind.rule(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    convert::json_of(py, &ops)
}

#[pymodule]
fn baton(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(authority::authority_for, m)?)?;
    m.add_function(wrap_pyfunction!(operations, m)?)?;
    m.add_class::<authority::Authority>()?;
    m.add_class::<lease::Lease>()?;
    convert::register(m)?;
    errors::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("DEFAULT_STORE", baton_open::DEFAULT_STORE)?;
    Ok(())
}
