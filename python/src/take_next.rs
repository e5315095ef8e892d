//! `next` and `task_next` as the package runs them: at once, or waiting
//! (interruptibly) while nothing is ready, or through `drained` too.

use crate::authority::Authority;
use crate::convert;
use crate::shape::queue_ids;
use baton_core::graph::Taker;
use pyo3::prelude::*;

impl Authority {
    pub(crate) fn take_next(
        &self,
        py: Python<'_>,
        taker: Taker,
        queues: Vec<String>,
        (wait_ms, keep_waiting): (Option<u64>, bool),
        auth: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let queues = queue_ids(queues)?;
        let reply = match wait_ms {
            Some(w) if w > 0 => self.call_interruptible(py, move |a| async move {
                a.next_as_asked(taker, &queues, Some(w), keep_waiting).await
            })?,
            _ => self.call(py, move |a| async move {
                a.next_as_asked(taker, &queues, None, keep_waiting && wait_ms.is_none())
                    .await
            })?,
        };
        convert::reply_from(py, &reply, true, auth)
    }
}
