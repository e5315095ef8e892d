//! The write gate: an exclusive `flock` on `PATH-gate` that every baton
//! process takes before SQLite's write lock. SQLite cannot block on its
//! locks on Linux, so a process that finds the write lock taken polls it
//! (several `fcntl` calls and a sleep per try); with eight processes on two
//! cores that polling took the CPU from the writer. Waiting on the gate
//! sleeps in the kernel until the writer leaves instead.
//!
//! The gate only orders baton's writers; SQLite's own lock still decides
//! who writes, so a process without the gate (another program, a file
//! reached under another name) is still safe, only slower. A wait is
//! bounded by the busy timeout, like a wait on SQLite's lock.

use std::fs::File;
use std::path::Path;
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Where a wait for the gate stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    Waiting,
    Granted,
    /// The caller stopped waiting: the helper releases the gate when it gets it.
    Abandoned,
    /// The lock call failed: the caller goes on without the gate.
    Failed,
}

#[derive(Debug)]
struct Ticket {
    turn: Mutex<Turn>,
    changed: Condvar,
}

/// The gate of one open store.
#[derive(Debug)]
pub(crate) struct Gate {
    file: Arc<File>,
    /// To the thread that blocks on the gate for a caller, so the caller's
    /// own wait can end at the busy timeout.
    waiter: Mutex<Sender<Arc<Ticket>>>,
}

/// The gate, held until dropped (`None` inside: going on without it).
#[derive(Debug)]
pub(crate) struct Held<'a>(Option<&'a File>);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Some(f) = self.0 {
            let _ = f.unlock();
        }
    }
}

/// The gate stayed taken for the whole timeout.
#[derive(Debug)]
pub(crate) struct Elapsed;

impl Gate {
    /// Opens (creating it if needed) the gate beside the store file `db`.
    pub(crate) fn open(db: &Path) -> std::io::Result<Gate> {
        let mut name = db.as_os_str().to_owned();
        name.push("-gate");
        let file = Arc::new(
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(name)?,
        );
        let (tx, rx) = channel::<Arc<Ticket>>();
        let held = file.clone();
        std::thread::Builder::new()
            .name("baton-sqlite-gate".into())
            .spawn(move || {
                for ticket in rx {
                    let locked = held.lock();
                    let mut turn = ticket.turn.lock().unwrap_or_else(PoisonError::into_inner);
                    match (locked.is_ok(), *turn) {
                        (true, Turn::Waiting) => *turn = Turn::Granted,
                        (true, _) => {
                            let _ = held.unlock();
                        }
                        (false, _) => *turn = Turn::Failed,
                    }
                    ticket.changed.notify_all();
                }
            })?;
        Ok(Gate {
            file,
            waiter: Mutex::new(tx),
        })
    }

    /// Takes the gate, waiting at most `timeout` for another process to
    /// leave it. Callers in one process are already one at a time (the
    /// store's writer connection), so one wait is outstanding at most.
    pub(crate) fn enter(&self, timeout: Duration) -> Result<Held<'_>, Elapsed> {
        match self.file.try_lock() {
            Ok(()) => return Ok(Held(Some(&self.file))),
            Err(std::fs::TryLockError::WouldBlock) => {}
            // The gate cannot be used: SQLite's lock still orders the writers.
            Err(std::fs::TryLockError::Error(_)) => return Ok(Held(None)),
        }
        let ticket = Arc::new(Ticket {
            turn: Mutex::new(Turn::Waiting),
            changed: Condvar::new(),
        });
        let sent = self
            .waiter
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(ticket.clone());
        if sent.is_err() {
            return Ok(Held(None));
        }
        let deadline = Instant::now() + timeout;
        let mut turn = ticket.turn.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            match *turn {
                Turn::Granted => return Ok(Held(Some(&self.file))),
                Turn::Failed => return Ok(Held(None)),
                Turn::Waiting | Turn::Abandoned => {}
            }
            let now = Instant::now();
            if now >= deadline {
                *turn = Turn::Abandoned;
                return Err(Elapsed);
            }
            turn = ticket
                .changed
                .wait_timeout(turn, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}
