//! `Authority.work`: the worker loop. Up to `count` grants a `next` (one
//! commit), each kept renewed by core's keeper while it waits its turn and
//! runs, the function called for each in turn, and the batch reported in
//! one call (`Keeper::report_all`: one commit, each grant decided on its
//! own fence). No rule is here: `next`'s inputs are read by the
//! catalogue, its answer and every report decided by core.

use crate::{convert, errors, runtime};
use baton_core::call::{Answer, Call};
use baton_core::keeper::{Ending, KeepOptions, Keeper, Outcome};
use baton_core::{Reply, Store};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What the loop did, returned as a dict.
#[derive(Debug, Default)]
struct Tally {
    completed: u64,
    failed: u64,
    /// Reports the store refused (a grant superseded meanwhile).
    refused: u64,
    /// Grants whose lease was lost before their turn: given back unrun.
    lost: u64,
    batches: u64,
}

/// The loop's arguments, as Python gave them.
pub(crate) struct Work<'py> {
    /// The store, and the Python authority its grants report through.
    pub authority: Arc<baton_open::DynAuthority>,
    pub bound: Py<PyAny>,
    pub func: &'py Bound<'py, PyAny>,
    /// `next` as the catalogue makes it, for up to this many grants.
    pub make_next: &'py dyn Fn(u64) -> PyResult<Call>,
    /// As Python gave them: checked here (a negative number is bad input
    /// naming its field, not an overflow).
    pub count: i64,
    pub ttl_ms: Option<u64>,
    pub waits: bool,
    pub max_tasks: Option<i64>,
    pub stop: Option<&'py Bound<'py, PyAny>>,
}

type Kept = Keeper<Arc<dyn Store>>;

pub(crate) fn work(py: Python<'_>, w: Work<'_>) -> PyResult<Py<PyAny>> {
    let count = match u32::try_from(w.count) {
        Ok(n @ 1..=1000) => n,
        _ => {
            return Err(errors::invalid(
                "count",
                format!("must be 1 to 1000 (got {})", w.count),
            ));
        }
    };
    let max_tasks = match w.max_tasks.map(u64::try_from).transpose() {
        Ok(m) => m,
        Err(_) => {
            return Err(errors::invalid(
                "max_tasks",
                format!("must be 0 or more (got {:?})", w.max_tasks),
            ));
        }
    };
    let rt = runtime()?;
    let auth = Arc::clone(&w.authority);
    let mut tally = Tally::default();
    let mut stopped: Py<PyAny> = py.None();
    loop {
        let ran = tally.completed + tally.failed + tally.refused + tally.lost;
        let left = max_tasks.map_or(u64::from(count), |m| m.saturating_sub(ran));
        let asked_to_stop = match w.stop {
            Some(s) => s.call_method0("is_set")?.is_truthy()?,
            None => false,
        };
        if left == 0 || asked_to_stop {
            break;
        }
        let call = (w.make_next)(left.min(u64::from(count)))?;
        let a = Arc::clone(&auth);
        let out = if w.waits {
            runtime::call_interruptible(py, a, move |a| async move { call.run(&a).await })?
        } else {
            runtime::call(py, a, move |a| async move { call.run(&a).await })?
        };
        let replies = match out.answer {
            Answer::Replies(r) => r,
            Answer::Reply(r) => vec![r],
            Answer::Refused(r, _) => vec![Reply::Refused(r)],
            _ => return Err(errors::unavailable("next answered something not a grant")),
        };
        let granted: Vec<(usize, baton_core::Grant)> = replies
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.grant().map(|g| (i, g)))
            .collect();
        if granted.is_empty() {
            if let Some(Reply::Refused(r)) = replies.first() {
                stopped = convert::refusal(py, r, None)?;
            }
            break;
        }
        tally.batches += 1;
        let mut waiting: Vec<(usize, Kept)> = {
            let _in_runtime = rt.enter();
            granted
                .into_iter()
                .map(|(i, g)| {
                    let opts = KeepOptions {
                        ttl_ms: w.ttl_ms,
                        ..KeepOptions::default()
                    };
                    (i, auth.keep(g, opts))
                })
                .collect()
        };
        waiting.reverse();
        let mut ended: Vec<(Kept, Ending)> = Vec::new();
        let mut lost = 0;
        let mut interrupted = None;
        while let Some((i, keeper)) = waiting.pop() {
            if keeper.lost().is_some() {
                // Its turn came too late: given back, never run.
                lost += 1;
                ended.push((keeper, Ending::Release));
                continue;
            }
            let token = out
                .items
                .get(i)
                .and_then(|v| v["token"].as_str())
                .map(str::to_owned);
            let bound = Some(w.bound.clone_ref(py));
            let grant = convert::reply_from(py, &replies[i], true, bound, token)?;
            match w.func.call1((grant,)) {
                Ok(_) => ended.push((
                    keeper,
                    Ending::Finish(Outcome::Success {
                        evidence: BTreeMap::new(),
                    }),
                )),
                Err(e) if e.is_instance_of::<pyo3::exceptions::PyException>(py) => {
                    let name: String = e.get_type(py).getattr("__name__")?.extract()?;
                    let message = e.value(py).str()?.to_string();
                    ended.push((
                        keeper,
                        Ending::Finish(Outcome::Failure {
                            error: serde_json::json!({"type": name, "message": message}),
                        }),
                    ));
                }
                Err(e) => {
                    // Ctrl-C, SystemExit: the person stopping the work. This
                    // grant and those not run yet are given back with the
                    // batch's reports, then the exception goes on.
                    ended.push((keeper, Ending::Release));
                    interrupted = Some(e);
                    break;
                }
            }
        }
        ended.extend(waiting.into_iter().rev().map(|(_, k)| (k, Ending::Release)));
        let finished: Vec<bool> = ended
            .iter()
            .map(|(_, e)| matches!(e, Ending::Finish(Outcome::Failure { .. })))
            .collect();
        let releases: Vec<bool> = ended
            .iter()
            .map(|(_, e)| matches!(e, Ending::Release))
            .collect();
        let answered = py.detach(move || rt.block_on(Keeper::report_all(ended)));
        if let Some(e) = interrupted {
            return Err(e);
        }
        let answered = answered.map_err(errors::to_py)?;
        tally.lost += lost;
        for ((reply, failed), released) in answered.iter().zip(finished).zip(releases) {
            match reply {
                _ if released => {}
                Reply::Refused(_) => tally.refused += 1,
                _ if failed => tally.failed += 1,
                _ => tally.completed += 1,
            }
        }
    }
    let d = PyDict::new(py);
    d.set_item("completed", tally.completed)?;
    d.set_item("failed", tally.failed)?;
    d.set_item("refused", tally.refused)?;
    d.set_item("lost", tally.lost)?;
    d.set_item("batches", tally.batches)?;
    d.set_item("stopped", stopped)?;
    Ok(d.into_any().unbind())
}
