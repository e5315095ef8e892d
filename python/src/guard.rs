//! What `baton.guard` (python/baton/guard.py) asks of core: the guard's
//! rule and the signed fence's check. The Python side only moves the mark
//! in and out of the user's connection.

use crate::errors;
use baton_core::fencing::{self, Admitted, FenceKeys, Presented, Refused};
use pyo3::prelude::*;
use std::path::PathBuf;

/// What a writer presents: an int fence or a str (a token, or a fence as text).
fn read_presented(value: &Bound<'_, PyAny>) -> PyResult<Presented> {
    // `True` is an int to Python, never a fence.
    if value.is_instance_of::<pyo3::types::PyBool>() {
        return Err(errors::invalid(
            "fence",
            "an int fence or a str token, not a bool",
        ));
    }
    if let Ok(n) = value.extract::<i64>() {
        let n = u64::try_from(n).map_err(|_| {
            errors::invalid("fence", format!("a whole number from 1 to {}", i64::MAX))
        })?;
        fencing::check_fence(n).map_err(|e| to_py(value.py(), e))?;
        return Ok(Presented::Fence(n));
    }
    let text: String = value.extract().map_err(|_| {
        errors::invalid(
            "fence",
            "an int fence or a str token (a grant's `token`, or BATON_FENCE_TOKEN)",
        )
    })?;
    Presented::parse(&text).map_err(|e| to_py(value.py(), e))
}

fn keys(path: Option<PathBuf>) -> PyResult<Option<FenceKeys>> {
    let Some(path) = path else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| errors::invalid("key", format!("cannot read {}: {e}", path.display())))?;
    FenceKeys::parse(&text)
        .map(Some)
        .map_err(|e| errors::invalid("key", format!("{e} ({})", path.display())))
}

/// A refusal as Python sees it: `InvalidInput` for bad input, else
/// `GuardRefused` with `code`, `resource`, `fence` and `highest`.
fn to_py(py: Python<'_>, r: Refused) -> PyErr {
    match r {
        Refused::Invalid { field, rule } => errors::invalid(field, rule),
        r => errors::guard_refused(py, &r),
    }
}

/// The fence `presented` carries, checked against the key file `key` (with
/// a key, only a token it signed).
#[pyfunction]
#[pyo3(signature = (presented, key = None))]
pub(crate) fn _fence_of(presented: &Bound<'_, PyAny>, key: Option<PathBuf>) -> PyResult<u64> {
    let p = read_presented(presented)?;
    p.fence(keys(key)?.as_ref())
        .map_err(|e| to_py(presented.py(), e))
}

/// What `presented` is, as core reads it: `(fence, None)` for a bare
/// fence, `(None, token)` for a token (not yet verified: a Postgres guard
/// verifies it in the database).
#[pyfunction]
pub(crate) fn _fence_or_token(
    presented: &Bound<'_, PyAny>,
) -> PyResult<(Option<u64>, Option<String>)> {
    Ok(match read_presented(presented)? {
        Presented::Fence(n) => (Some(n), None),
        Presented::Token(t) => (None, Some(t)),
    })
}

/// The guard's rule for `resource` whose mark is `highest`: the fence to
/// store and whether the mark moves, or `GuardRefused`.
#[pyfunction]
#[pyo3(signature = (resource, highest, presented, key = None))]
pub(crate) fn _fence_admit(
    resource: &str,
    highest: Option<i64>,
    presented: &Bound<'_, PyAny>,
    key: Option<PathBuf>,
) -> PyResult<(u64, bool)> {
    let py = presented.py();
    let fence = _fence_of(presented, key)?;
    let highest = highest.map(|h| u64::try_from(h).unwrap_or(0));
    match fencing::admit(resource, highest, fence) {
        Ok(Admitted::Equal) => Ok((fence, false)),
        Ok(_) => Ok((fence, true)),
        Err(e) => Err(to_py(py, e)),
    }
}

/// The SQLite guard's statements (the Rust guard's own), for a `sqlite3`
/// connection: `install`, `select` (`?1` the resource) and `upsert` (`?1`,
/// `?2` the fence).
#[pyfunction]
pub(crate) fn _sqlite_guard_sql() -> (&'static str, &'static str, &'static str) {
    use baton_guard::sqlite;
    (sqlite::INSTALL_SQL, sqlite::SELECT_SQL, sqlite::UPSERT_SQL)
}

/// `baton.guard.guard(conn, resource, presented, key=key)`: what
/// `Grant.guard` and `Lease.guard` return.
pub(crate) fn guard_of(
    py: Python<'_>,
    conn: Py<PyAny>,
    resource: String,
    token: Option<String>,
    fence: u64,
    key: Option<Py<PyAny>>,
) -> PyResult<Py<PyAny>> {
    let presented: Py<PyAny> = match token {
        Some(t) => t.into_pyobject(py)?.into_any().unbind(),
        None => fence.into_pyobject(py)?.into_any().unbind(),
    };
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("key", key)?;
    Ok(py
        .import("baton.guard")?
        .getattr("guard")?
        .call((conn, resource, presented), Some(&kwargs))?
        .unbind())
}
