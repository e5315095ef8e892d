//! Python arguments shaped into the Rust API's: ids, queues, evidence,
//! errors, cursors, retry policies, and the keyword arguments a method
//! takes.

use crate::convert::{duration, id, to_json};
use crate::errors;
use baton_core::catalogue::Kind;
use baton_core::graph::NodeSpec;
use baton_core::{Actor, Id};
use pyo3::prelude::*;
use std::collections::BTreeMap;

pub(crate) fn operator(name: &str) -> PyResult<Actor> {
    Ok(Actor::Operator(id("operator", name)?))
}

/// A declared task's call names its task, run and executor.
pub(crate) fn run_ids(task: &str, run_id: &str, executor: &str) -> PyResult<(Id, Id, Id)> {
    Ok((
        id("task", task)?,
        id("run_id", run_id)?,
        id("executor", executor)?,
    ))
}

/// `queues` as given: one queue's name, or a list (or tuple) of them;
/// anything else is bad input naming the field.
pub(crate) fn queue_list(queues: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<String>> {
    use pyo3::types::{PyList, PyString, PyTuple};
    let Some(q) = queues.filter(|q| !q.is_none()) else {
        return Ok(Vec::new());
    };
    if let Ok(s) = q.cast::<PyString>() {
        return Ok(vec![s.extract::<String>()?]);
    }
    let bad = |what: String| {
        errors::invalid(
            "queues",
            format!("must be a queue's name or a list of them (got {what})"),
        )
    };
    let type_name = |v: &Bound<'_, PyAny>| {
        v.get_type()
            .name()
            .map_or_else(|_| "an object".to_owned(), |n| n.to_string())
    };
    let items: Vec<Bound<'_, PyAny>> = if let Ok(l) = q.cast::<PyList>() {
        l.iter().collect()
    } else if let Ok(t) = q.cast::<PyTuple>() {
        t.iter().collect()
    } else {
        return Err(bad(type_name(q)));
    };
    items
        .iter()
        .map(|i| {
            i.cast::<PyString>()
                .map_err(|_| bad(format!("a list holding {}", type_name(i))))
                .and_then(|s| s.extract::<String>())
        })
        .collect()
}

pub(crate) fn queue_ids(queues: Vec<String>) -> PyResult<Vec<Id>> {
    queues.iter().map(|q| id("queue", q)).collect()
}

pub(crate) fn evidence(v: Option<&Bound<'_, PyAny>>) -> PyResult<BTreeMap<String, String>> {
    match v.filter(|v| !v.is_none()) {
        None => Ok(BTreeMap::new()),
        Some(v) => v
            .extract()
            .map_err(|_| errors::invalid("evidence", "must be a dict of str keys to str hashes")),
    }
}

pub(crate) fn error_json(v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<serde_json::Value>> {
    v.filter(|v| !v.is_none())
        .map(|v| to_json("error", v))
        .transpose()
}

/// A page cursor: the `next` of the previous page (a str), or an int.
pub(crate) fn cursor(v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<String>> {
    match v.filter(|v| !v.is_none()) {
        None => Ok(None),
        Some(v) => {
            if let Ok(s) = v.extract::<String>() {
                Ok(Some(s))
            } else if let Ok(n) = v.extract::<u64>() {
                Ok(Some(n.to_string()))
            } else {
                Err(errors::invalid(
                    "after",
                    "must be the `next` of the previous page",
                ))
            }
        }
    }
}

/// The retry policy the arguments give, if any is given.
pub(crate) fn retry_policy(
    max_attempts: Option<u32>,
    backoff: Option<&Bound<'_, PyAny>>,
    backoff_factor: Option<f64>,
    backoff_max: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<baton_core::graph::RetryPolicy>> {
    baton_core::graph::RetryPolicy::from_parts(
        max_attempts,
        duration(Kind::LockDelay, "backoff", backoff)?,
        backoff_factor,
        duration(Kind::Ttl, "max_backoff", backoff_max)?,
    )
    .map_err(errors::to_py)
}

/// How a task added to the work graph waits and runs, as `add` and
/// `schedule` take it.
pub(crate) struct Shape<'a, 'py> {
    pub(crate) queue: Option<&'a str>,
    pub(crate) priority: i64,
    pub(crate) after: Option<Vec<String>>,
    pub(crate) timeout: Option<&'a Bound<'py, PyAny>>,
    pub(crate) max_attempts: Option<u32>,
    pub(crate) backoff: Option<&'a Bound<'py, PyAny>>,
    pub(crate) backoff_factor: Option<f64>,
    pub(crate) backoff_max: Option<&'a Bound<'py, PyAny>>,
    pub(crate) key: Option<&'a str>,
}

impl Shape<'_, '_> {
    /// The spec of `task` in this shape.
    pub(crate) fn spec(self, task: &Id) -> PyResult<NodeSpec> {
        let q = self.queue.map(|q| id("queue", q)).transpose()?;
        let deps = self
            .after
            .unwrap_or_default()
            .iter()
            .map(|d| id("after", d))
            .collect::<PyResult<Vec<_>>>()?;
        let retry = retry_policy(
            self.max_attempts,
            self.backoff,
            self.backoff_factor,
            self.backoff_max,
        )?;
        let timeout = duration(Kind::Ttl, "timeout", self.timeout)?;
        let key = self.key.map(|k| id("key", k)).transpose()?;
        NodeSpec::new(task, q, self.priority, deps)
            .and_then(|s| s.with_timeout(timeout))
            .and_then(|s| s.with_retry(retry))
            .and_then(|s| s.with_key(key))
            .map_err(errors::to_py)
    }
}
