//! Python's arguments shaped as core reads them (`baton_core::given`):
//! queues, evidence, errors, cursors, and a graph node's place.

use crate::convert::{millis, to_json};
use crate::errors;
use pyo3::prelude::*;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

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

/// How a task added to the work graph waits and runs, as `add` and
/// `schedule` take it.
pub(crate) struct Place<'a, 'py> {
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

impl Place<'_, '_> {
    /// The shape as core's inputs of a node's place (`baton_core::given`),
    /// its durations read as Python gives them (seconds, or text).
    pub(crate) fn given(self) -> PyResult<Map<String, Value>> {
        let mut g = Map::new();
        g.insert("queue".into(), json!(self.queue));
        g.insert("priority".into(), json!(self.priority));
        g.insert("after".into(), json!(self.after));
        g.insert("timeout".into(), json!(millis("timeout", self.timeout)?));
        g.insert("max_attempts".into(), json!(self.max_attempts));
        g.insert("backoff".into(), json!(millis("backoff", self.backoff)?));
        g.insert("backoff_factor".into(), json!(self.backoff_factor));
        g.insert(
            "backoff_max".into(),
            json!(millis("backoff_max", self.backoff_max)?),
        );
        g.insert("key".into(), json!(self.key));
        Ok(g)
    }
}
