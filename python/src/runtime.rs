//! The process's runtime, the guard that keeps what one process made from
//! being used (or dropped) by a child of `fork`, and how a call of the
//! Rust API runs on that runtime with the GIL released.

use crate::errors;
use baton_open::DynAuthority;
use pyo3::prelude::*;
use std::future::Future;
use std::sync::{Arc, Mutex};

/// The process's tokio runtime, made on first use. One per process: a
/// child of `fork` finds the parent's recorded under another pid and makes
/// its own. Runtimes are leaked on purpose, never dropped: dropping one in
/// a forked child would wait for worker threads that do not exist there.
pub(crate) fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
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

/// Runs one call of the Rust API on `a` with the GIL released.
pub(crate) fn call<T, F, Fut>(py: Python<'_>, a: Arc<DynAuthority>, f: F) -> PyResult<T>
where
    T: Send,
    F: FnOnce(Arc<DynAuthority>) -> Fut + Send,
    Fut: Future<Output = baton_core::Result<T>>,
{
    let rt = runtime()?;
    py.detach(move || rt.block_on(f(a))).map_err(errors::to_py)
}

/// Like `call`, for a call that may wait long (`next` with `wait`):
/// a signal Python has a handler for (Ctrl-C's `KeyboardInterrupt`)
/// ends the wait, checked every 50 ms. A grant being made at that
/// instant may still land, as with any interrupted call.
pub(crate) fn call_interruptible<T, F, Fut>(
    py: Python<'_>,
    a: Arc<DynAuthority>,
    f: F,
) -> PyResult<T>
where
    T: Send,
    F: FnOnce(Arc<DynAuthority>) -> Fut + Send,
    Fut: Future<Output = baton_core::Result<T>>,
{
    let rt = runtime()?;
    let answer: PyResult<baton_core::Result<T>> = py.detach(move || {
        rt.block_on(async move {
            let call = f(a);
            tokio::pin!(call);
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(50));
            loop {
                tokio::select! {
                    r = &mut call => return Ok(r),
                    _ = tick.tick() => Python::attach(|py| py.check_signals())?,
                }
            }
        })
    });
    answer?.map_err(errors::to_py)
}
