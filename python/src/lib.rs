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
mod guard;
mod lease;
mod runtime;
mod shape;
mod work;

pub(crate) use runtime::{ProcessBound, runtime};

use pyo3::prelude::*;

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
    m.add_function(wrap_pyfunction!(guard::_fence_admit, m)?)?;
    m.add_function(wrap_pyfunction!(guard::_fence_of, m)?)?;
    m.add_function(wrap_pyfunction!(guard::_fence_or_token, m)?)?;
    m.add_function(wrap_pyfunction!(guard::_sqlite_guard_sql, m)?)?;
    m.add_class::<authority::Authority>()?;
    m.add_class::<lease::Lease>()?;
    convert::register(m)?;
    errors::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("DEFAULT_STORE", baton_open::DEFAULT_STORE)?;
    Ok(())
}
