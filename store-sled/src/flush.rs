//! Group flush: one fsync serves every commit that finished before it began.

use std::sync::{Condvar, Mutex};

#[derive(Debug, Default)]
struct State {
    /// Transactions finished (committed or aborted) so far.
    finished: u64,
    /// Transactions begun but not finished.
    in_flight: u64,
    /// Every transaction numbered up to here is durable.
    durable: u64,
    flushing: bool,
}

/// How many 100 µs waits a flush gives in-flight transactions to join it.
const LINGER_STEPS: u32 = 10;

/// Tracks what is durable and runs as few flushes as callers need.
#[derive(Debug, Default)]
pub struct GroupFlush {
    state: Mutex<State>,
    changed: Condvar,
    /// Off: every caller runs a flush of its own, one after another.
    shared: bool,
    flushes: std::sync::atomic::AtomicU64,
}

/// A lock that cannot be taken because a holder panicked: report, don't guess.
pub struct Poisoned;

impl GroupFlush {
    pub fn new(shared: bool) -> Self {
        GroupFlush {
            shared,
            ..Default::default()
        }
    }

    /// How many flushes have completed.
    pub fn flushes(&self) -> u64 {
        self.flushes.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, State>, Poisoned> {
        self.state.lock().map_err(|_| Poisoned)
    }

    /// Marks a transaction as begun; it is finished when the guard is
    /// finished or dropped (a panic mid-transaction included), so a flush
    /// never waits for a transaction that will not come.
    pub fn begin(&self) -> Result<InFlight<'_>, Poisoned> {
        self.lock()?.in_flight += 1;
        Ok(InFlight {
            flush: self,
            done: false,
        })
    }

    fn end(&self) -> Result<u64, Poisoned> {
        let mut s = self.lock()?;
        s.in_flight -= 1;
        s.finished += 1;
        let finished = s.finished;
        drop(s);
        // Wake waiters: an in-flight transaction may have been awaited.
        self.changed.notify_all();
        Ok(finished)
    }

    /// What an answer that has just read the store must wait for: every
    /// transaction finished so far and every one still in flight (which
    /// may already be visible to the read).
    pub fn horizon(&self) -> Result<u64, Poisoned> {
        let s = self.lock()?;
        Ok(s.finished + s.in_flight)
    }

    /// Returns once transaction `upto` is durable, flushing if nobody else
    /// is. `own_write`: the caller committed `upto` itself; with sharing off
    /// it then always runs a flush of its own.
    pub fn wait_durable<E>(
        &self,
        upto: u64,
        own_write: bool,
        flush: impl Fn() -> Result<(), E>,
    ) -> Result<(), FlushError<E>> {
        let mut s = self.lock().map_err(|_| FlushError::Poisoned)?;
        let mut must_flush = own_write && !self.shared;
        loop {
            if s.durable >= upto && !must_flush {
                return Ok(());
            }
            if s.flushing || s.finished < upto {
                // Someone else's flush is running, or `upto` is still in flight.
                s = self.changed.wait(s).map_err(|_| FlushError::Poisoned)?;
                continue;
            }
            // Transactions already under way finish in microseconds; a flush
            // is milliseconds. Give them a moment (bounded) to ride along.
            let mut lingered = 0;
            while s.in_flight > 0 && lingered < LINGER_STEPS {
                let (guard, _) = self
                    .changed
                    .wait_timeout(s, std::time::Duration::from_micros(100))
                    .map_err(|_| FlushError::Poisoned)?;
                s = guard;
                lingered += 1;
            }
            if s.flushing {
                continue;
            }
            // A flush that starts now covers every transaction finished so far.
            let target = s.finished;
            s.flushing = true;
            drop(s);
            let result = flush();
            s = self.lock().map_err(|_| FlushError::Poisoned)?;
            s.flushing = false;
            if result.is_ok() {
                s.durable = s.durable.max(target);
                self.flushes
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                must_flush = false;
            }
            self.changed.notify_all();
            result.map_err(FlushError::Flush)?;
        }
    }
}

/// A transaction under way, from [`GroupFlush::begin`].
#[derive(Debug)]
pub struct InFlight<'a> {
    flush: &'a GroupFlush,
    done: bool,
}

impl InFlight<'_> {
    /// The transaction has finished (committed or aborted); returns the
    /// count a flush must reach to cover it.
    pub fn finish(mut self) -> Result<u64, Poisoned> {
        self.done = true;
        self.flush.end()
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.flush.end();
        }
    }
}

#[derive(Debug)]
pub enum FlushError<E> {
    Poisoned,
    Flush(E),
}
