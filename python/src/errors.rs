//! baton's errors as Python exceptions: one class per error kind, under
//! `baton.Error`. A refusal is never one of these: it is a return value.

use baton_core::{Error as CoreError, ErrorKind};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    baton,
    Error,
    PyException,
    "Every error baton raises. `kind` names it (as the CLI's JSON does), `field` the input \
     field for bad input, `context` the store it came from."
);
create_exception!(
    baton,
    Unavailable,
    Error,
    "The store could not answer. Nothing was applied and nothing was granted: do not start \
     work; retrying is safe."
);
create_exception!(
    baton,
    Corrupt,
    Unavailable,
    "The store's contents cannot be trusted (not a baton store, damaged). Nothing was applied."
);
create_exception!(
    baton,
    Unsupported,
    Unavailable,
    "The store or this build cannot do this (a newer schema). Nothing was applied."
);
create_exception!(
    baton,
    Indeterminate,
    Error,
    "A write may or may not have landed: read (get, holder) before anything else."
);
create_exception!(
    baton,
    InvalidInput,
    Error,
    "The input broke a rule; `field` names which. Nothing was applied."
);
create_exception!(
    baton,
    NotPermitted,
    Error,
    "A server refused the caller: no valid token, or a worker's token on an operator's request."
);
create_exception!(
    baton,
    UsedAfterFork,
    Error,
    "An authority (or lease) was used in a child of the process that opened it. SQLite \
     handles and runtimes do not survive fork(): open a new authority in the child."
);
create_exception!(
    baton,
    Refused,
    Error,
    "Raised only where no value can be returned (entering a lease, finishing one at the end \
     of a `with` block); `refusal` is the Refusal."
);

create_exception!(
    baton,
    GuardRefused,
    Error,
    "A guard in your storage refused the write: `code` is stale_fence (a later attempt \
     already wrote `resource`; stop, do not retry), unsigned_fence or forged_fence; \
     `fence` is what was presented and `highest` the mark. Nothing was written."
);

/// `GuardRefused` for a guard's refusal.
pub(crate) fn guard_refused(py: Python<'_>, r: &baton_core::fencing::Refused) -> PyErr {
    use baton_core::fencing::Refused;
    let err = GuardRefused::new_err(r.to_string());
    let v = err.value(py);
    let _ = v.setattr("code", r.code());
    let (resource, fence, highest) = match r {
        Refused::Stale {
            resource,
            fence,
            highest,
        } => (Some(resource.clone()), Some(*fence), Some(*highest)),
        Refused::Unsigned(f) => (None, Some(*f), None),
        _ => (None, None, None),
    };
    let _ = v.setattr("resource", resource);
    let _ = v.setattr("fence", fence);
    let _ = v.setattr("highest", highest);
    err
}

/// The exception for one of core's errors, with `kind`, `field` and `context` set.
pub(crate) fn to_py(e: CoreError) -> PyErr {
    let err = match e.kind {
        ErrorKind::Unavailable => Unavailable::new_err(e.to_string()),
        ErrorKind::Corrupt => Corrupt::new_err(e.to_string()),
        ErrorKind::Unsupported => Unsupported::new_err(e.to_string()),
        ErrorKind::Indeterminate => Indeterminate::new_err(e.to_string()),
        ErrorKind::Invalid => InvalidInput::new_err(e.to_string()),
        ErrorKind::NotPermitted => NotPermitted::new_err(e.to_string()),
    };
    Python::attach(|py| {
        let v = err.value(py);
        // Setting an attribute on a fresh exception instance cannot fail
        // short of memory; the exception is raised either way.
        let _ = v.setattr("kind", e.kind.as_str());
        let _ = v.setattr("field", e.field.clone());
        let _ = v.setattr("context", e.context.clone());
    });
    err
}

/// Bad input found while converting an argument (a type the rule cannot
/// even be asked about), naming the field.
pub(crate) fn invalid(field: &str, message: impl Into<String>) -> PyErr {
    to_py(CoreError::invalid(field, message))
}

pub(crate) fn unavailable(message: impl Into<String>) -> PyErr {
    to_py(CoreError::unavailable(message))
}

pub(crate) fn used_after_fork(what: &str, opened_in: u32, now: u32) -> PyErr {
    UsedAfterFork::new_err(format!(
        "this {what} was opened in process {opened_in} and cannot be used in process {now} \
         (a child of fork): open a new one here with baton.authority_for(url)"
    ))
}

/// `Refused` carrying `refusal`.
pub(crate) fn refused(py: Python<'_>, message: String, refusal: Py<PyAny>) -> PyErr {
    let err = Refused::new_err(message);
    let _ = err.value(py).setattr("refusal", refusal);
    err
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("Unavailable", py.get_type::<Unavailable>())?;
    m.add("Corrupt", py.get_type::<Corrupt>())?;
    m.add("Unsupported", py.get_type::<Unsupported>())?;
    m.add("Indeterminate", py.get_type::<Indeterminate>())?;
    m.add("InvalidInput", py.get_type::<InvalidInput>())?;
    m.add("NotPermitted", py.get_type::<NotPermitted>())?;
    m.add("UsedAfterFork", py.get_type::<UsedAfterFork>())?;
    m.add("Refused", py.get_type::<Refused>())?;
    m.add("GuardRefused", py.get_type::<GuardRefused>())?;
    Ok(())
}
