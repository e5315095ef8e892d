//! The write gate: an exclusive `flock` on `PATH-gate` that every baton
//! process takes before SQLite's write lock. SQLite cannot block on its
//! locks on Linux, so a process that finds the write lock taken polls it
//! (several `fcntl` calls and a sleep per try); with eight processes on two
//! cores that polling took the CPU from the writer. Waiting on the gate
//! sleeps in the kernel until the writer leaves instead.
//!
//! A process whose read snapshot was taken while another process was
//! writing does not queue for the gate at once: it waits for that writer
//! to leave (a shared lock on the gate, granted to every such waiter at
//! once) and decides again on a fresh snapshot, which usually answers
//! without writing (the task it wanted was just granted). Only a request
//! that still needs to write queues for the gate.
//!
//! A process keeps the gate for a short while after its commit (`LINGER`),
//! so that its next write (a worker completes what it was just granted)
//! does not hand the gate to another process and wait for it back, for at
//! most `BURST_ENTRIES` transactions or `BURST` in a row. Every hand-off
//! wakes the waiting processes, and on two cores their waking took the CPU
//! from the writer; a burst writes at one process's speed, and the
//! processes that waited then find most of what they wanted decided in
//! their snapshot. The burst bounds what a waiter waits for.
//!
//! The gate only orders baton's writers; SQLite's own lock still decides
//! who writes, so a process without the gate (another program, a file
//! reached under another name) is still safe, only slower. A wait is
//! bounded by the busy timeout, like a wait on SQLite's lock, and by
//! `PATIENCE`: no writer keeps the gate that long (a burst is a few
//! milliseconds), so a gate held past it is held by a process that stopped
//! (SIGSTOP, a debugger, a paused VM) while keeping it after a commit. It
//! holds no SQLite lock then, so the waiter goes on without the gate (and
//! so does every later write of this process, without waiting, until the
//! gate is free again) rather than failing `Unavailable` for as long as
//! the stopped process stays stopped.

use std::fs::File;
use std::path::Path;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a process keeps the gate after a commit for its next one.
const LINGER: Duration = Duration::from_micros(500);
/// The most transactions one process runs in the gate in a row...
const BURST_ENTRIES: u32 = 16;
/// ... and the longest it keeps the gate in one go.
const BURST: Duration = Duration::from_millis(4);
/// After a burst the process queues behind whoever waited (it does not
/// take the gate at once) for this long.
const YIELD: Duration = Duration::from_millis(1);
/// The longest a writer waits for the gate before it goes on without it.
const PATIENCE: Duration = Duration::from_millis(250);

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
    /// Only waiting for the writer to leave: the helper takes the gate
    /// shared and lets it go at once.
    shared: bool,
    turn: Mutex<Turn>,
    changed: Condvar,
}

/// What the helper thread is asked to do.
#[derive(Debug)]
enum Ask {
    /// Block on the gate for a caller.
    Wait(Arc<Ticket>),
    /// The process holds the gate: let it go once it lingers past its time.
    Watch,
}

/// Whether this process holds the gate.
#[derive(Debug, Clone, Copy)]
enum Hold {
    Free,
    /// A burst ended: until `until` this process queues for the gate.
    Yielded {
        until: Instant,
    },
    /// A transaction is in the gate; `entries` transactions since `since`.
    InUse {
        since: Instant,
        entries: u32,
    },
    /// Kept between transactions until `until`.
    Lingering {
        since: Instant,
        entries: u32,
        until: Instant,
    },
}

/// The lock file and this process's hold on it, shared with the helper.
#[derive(Debug)]
struct Shared {
    file: File,
    hold: Mutex<Hold>,
    /// A wait outlasted `PATIENCE` and the helper is still blocked on the
    /// gate for it: writers go on without the gate until it comes free.
    stuck: std::sync::atomic::AtomicBool,
}

impl Shared {
    fn stuck(&self) -> bool {
        self.stuck.load(std::sync::atomic::Ordering::Acquire)
    }

    fn set_stuck(&self, stuck: bool) {
        self.stuck
            .store(stuck, std::sync::atomic::Ordering::Release);
    }
}

impl Shared {
    fn hold(&self) -> std::sync::MutexGuard<'_, Hold> {
        self.hold.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The gate of one open store.
#[derive(Debug)]
pub(crate) struct Gate {
    shared: Arc<Shared>,
    /// To the thread that blocks on the gate for a caller, so the caller's
    /// own wait can end at the busy timeout, and lets a lingering gate go.
    helper: Mutex<Sender<Ask>>,
}

/// The gate, held until dropped (`gate` `None`: going on without it).
#[derive(Debug)]
pub(crate) struct Held<'a> {
    gate: Option<&'a Gate>,
    /// The transaction committed: keep the gate for this process's next.
    committed: bool,
}

impl Held<'_> {
    fn of(gate: Option<&Gate>) -> Held<'_> {
        Held {
            gate,
            committed: false,
        }
    }

    /// The transaction in the gate committed (so the process writes, and
    /// its next write is likely close behind).
    pub(crate) fn committed(&mut self) {
        self.committed = true;
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Some(gate) = self.gate {
            gate.leave(self.committed);
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
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(name)?;
        let shared = Arc::new(Shared {
            file,
            hold: Mutex::new(Hold::Free),
            stuck: std::sync::atomic::AtomicBool::new(false),
        });
        let (tx, rx) = channel::<Ask>();
        let on_helper = shared.clone();
        std::thread::Builder::new()
            .name("baton-sqlite-gate".into())
            .spawn(move || helper(&on_helper, &rx))?;
        Ok(Gate {
            shared,
            helper: Mutex::new(tx),
        })
    }

    fn ask(&self, what: Ask) -> bool {
        self.helper
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(what)
            .is_ok()
    }

    /// The gate this process kept from its last transaction, if its burst
    /// allows one more. A burst used up lets the gate go.
    pub(crate) fn take_kept(&self) -> Option<Held<'_>> {
        let mut hold = self.shared.hold();
        match *hold {
            Hold::Lingering { since, entries, .. }
                if entries < BURST_ENTRIES && since.elapsed() < BURST =>
            {
                *hold = Hold::InUse {
                    since,
                    entries: entries + 1,
                };
                Some(Held::of(Some(self)))
            }
            Hold::Lingering { .. } => {
                let _ = self.shared.file.unlock();
                *hold = Hold::Yielded {
                    until: Instant::now() + YIELD,
                };
                None
            }
            Hold::Free | Hold::Yielded { .. } | Hold::InUse { .. } => None,
        }
    }

    /// A burst begins: this process just took the gate.
    fn begin(&self) -> Held<'_> {
        *self.shared.hold() = Hold::InUse {
            since: Instant::now(),
            entries: 1,
        };
        self.ask(Ask::Watch);
        Held::of(Some(self))
    }

    /// A transaction left the gate: after a commit keep it a little for
    /// the next; after a transaction that wrote nothing let it go.
    fn leave(&self, committed: bool) {
        let mut hold = self.shared.hold();
        if let Hold::InUse { since, entries } = *hold {
            if committed {
                *hold = Hold::Lingering {
                    since,
                    entries,
                    until: Instant::now() + LINGER,
                };
            } else {
                let _ = self.shared.file.unlock();
                *hold = Hold::Free;
            }
        }
    }

    /// Whether this process just ended a burst and must queue.
    pub(crate) fn yielding(&self) -> bool {
        matches!(*self.shared.hold(), Hold::Yielded { until } if Instant::now() < until)
    }

    /// Takes the gate if no other process holds it (`None`: one does, or
    /// this process must queue after a burst).
    pub(crate) fn try_enter(&self) -> Option<Held<'_>> {
        if let Some(kept) = self.take_kept() {
            return Some(kept);
        }
        if self.yielding() {
            return None;
        }
        match self.shared.file.try_lock() {
            Ok(()) => Some(self.begin()),
            Err(std::fs::TryLockError::WouldBlock) => None,
            // The gate cannot be used: SQLite's lock still orders the writers.
            Err(std::fs::TryLockError::Error(_)) => Some(Held::of(None)),
        }
    }

    /// Takes the gate, waiting at most `timeout` for another process to
    /// leave it. Callers in one process are already one at a time (the
    /// store's writer connection), so one wait is outstanding at most.
    pub(crate) fn enter(&self, timeout: Duration) -> Result<Held<'_>, Elapsed> {
        if let Some(held) = self.try_enter() {
            return Ok(held);
        }
        if self.shared.stuck() {
            return Ok(Held::of(None));
        }
        match self.wait(false, timeout)? {
            Turn::Granted => Ok(self.begin()),
            _ => Ok(Held::of(None)),
        }
    }

    /// Waits, at most `timeout`, until the process holding the gate has
    /// left it, without taking it: then whatever that writer committed is
    /// in a fresh read snapshot. (If the lock call fails this returns at
    /// once, and the caller queues for the gate as usual.)
    pub(crate) fn wait_for_writer(&self, timeout: Duration) -> Result<(), Elapsed> {
        if self.shared.stuck() {
            return Ok(());
        }
        self.wait(true, timeout).map(|_| ())
    }

    /// Hands a wait to the helper thread and waits for its turn, at most
    /// `timeout`: `Granted`, or `Failed` (the lock call failed, or the gate
    /// was held past `PATIENCE`: go on without it).
    fn wait(&self, shared: bool, timeout: Duration) -> Result<Turn, Elapsed> {
        let ticket = Arc::new(Ticket {
            shared,
            turn: Mutex::new(Turn::Waiting),
            changed: Condvar::new(),
        });
        if !self.ask(Ask::Wait(ticket.clone())) {
            return Ok(Turn::Failed);
        }
        let start = Instant::now();
        let deadline = start + timeout;
        let patience = start + PATIENCE;
        let mut turn = ticket.turn.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            match *turn {
                t @ (Turn::Granted | Turn::Failed) => return Ok(t),
                Turn::Waiting | Turn::Abandoned => {}
            }
            let now = Instant::now();
            if now >= patience && patience < deadline {
                // Held past any writer's burst: its holder stopped.
                *turn = Turn::Abandoned;
                self.shared.set_stuck(true);
                return Ok(Turn::Failed);
            }
            if now >= deadline {
                *turn = Turn::Abandoned;
                return Err(Elapsed);
            }
            turn = ticket
                .changed
                .wait_timeout(turn, deadline.min(patience.max(now)) - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// The helper thread: blocks on the gate for callers, and lets the gate go
/// when this process has kept it past its time. It ends when the gate is
/// dropped.
fn helper(shared: &Shared, asks: &Receiver<Ask>) {
    let mut watching = false;
    loop {
        let ask = if watching {
            match asks.recv_timeout(LINGER) {
                Ok(ask) => Some(ask),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        } else {
            match asks.recv() {
                Ok(ask) => Some(ask),
                Err(_) => return,
            }
        };
        match ask {
            Some(Ask::Wait(ticket)) => block_for(shared, &ticket),
            Some(Ask::Watch) => watching = true,
            None => {}
        }
        if watching {
            let mut hold = shared.hold();
            match *hold {
                Hold::Lingering { until, .. } if Instant::now() >= until => {
                    let _ = shared.file.unlock();
                    *hold = Hold::Free;
                    watching = false;
                }
                Hold::Free | Hold::Yielded { .. } => watching = false,
                Hold::Lingering { .. } | Hold::InUse { .. } => {}
            }
        }
    }
}

/// Blocks on the gate for `ticket`'s caller (who does not hold it).
fn block_for(shared: &Shared, ticket: &Ticket) {
    let file = &shared.file;
    let locked = if ticket.shared {
        file.lock_shared().and_then(|()| file.unlock())
    } else {
        file.lock()
    };
    // Free again (or unusable): writers wait for it as usual.
    shared.set_stuck(false);
    let mut turn = ticket.turn.lock().unwrap_or_else(PoisonError::into_inner);
    match (locked.is_ok(), *turn) {
        (true, Turn::Waiting) => *turn = Turn::Granted,
        (true, _) if !ticket.shared => {
            let _ = file.unlock();
        }
        (true, _) => {}
        (false, _) => *turn = Turn::Failed,
    }
    ticket.changed.notify_all();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two opens of one gate hold separate `flock`s, as two processes do.
    fn two(dir: &tempfile::TempDir) -> (Gate, Gate) {
        let db = dir.path().join("x.db");
        (Gate::open(&db).unwrap(), Gate::open(&db).unwrap())
    }

    /// Polls `f` until it holds, for at most `limit`.
    fn within(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if f() {
                return true;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        false
    }

    /// Two holders, the first just after a commit: it keeps the gate, so
    /// the other cannot take it.
    fn kept_by_the_first(dir: &tempfile::TempDir) -> (Gate, Gate) {
        let (a, b) = two(dir);
        let mut held = a.try_enter().expect("free");
        held.committed();
        drop(held);
        assert!(b.try_enter().is_none(), "kept after a commit");
        (a, b)
    }

    #[test]
    fn a_commit_keeps_the_gate_briefly_and_it_is_let_go() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = kept_by_the_first(&dir);
        // `a` takes it back without waiting.
        let again = a.take_kept().expect("kept for the next transaction");
        drop(again); // wrote nothing: let go at once
        assert!(
            b.try_enter().is_some(),
            "a transaction without a commit lets the gate go"
        );
    }

    #[test]
    fn a_kept_gate_is_let_go_when_its_process_goes_quiet() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = kept_by_the_first(&dir);
        // The helper lets it go after LINGER; allow a busy machine's delay.
        assert!(within(Duration::from_secs(2), || b.try_enter().is_some()));
        assert!(a.take_kept().is_none(), "no longer this process's");
    }

    #[test]
    fn a_burst_ends_and_the_waiter_gets_the_gate() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = two(&dir);
        let mut held = a.try_enter().expect("free");
        // `b` waits for the gate on another thread, as a process would.
        let waiter = std::thread::spawn(move || b.enter(Duration::from_secs(10)).is_ok());
        std::thread::sleep(Duration::from_millis(20));
        held.committed();
        drop(held);
        let mut kept = 1;
        while kept < 1000
            && let Some(mut h) = a.take_kept()
        {
            kept += 1;
            h.committed();
        }
        assert!(
            kept <= BURST_ENTRIES,
            "a burst is bounded: {kept} transactions"
        );
        // The burst is over: `a` queues rather than taking the gate back.
        assert!(a.yielding());
        assert!(a.try_enter().is_none());
        assert!(waiter.join().unwrap(), "the waiter got the gate");
    }

    #[test]
    fn waiting_for_the_writer_ends_when_it_leaves() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = two(&dir);
        let (taken, on_taken) = std::sync::mpsc::channel();
        let writer = std::thread::spawn(move || {
            let held = a.try_enter().expect("free");
            taken.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(100));
            drop(held); // wrote nothing: let go at once
        });
        on_taken.recv().unwrap();
        let started = Instant::now();
        b.wait_for_writer(Duration::from_secs(10)).unwrap();
        assert!(started.elapsed() >= Duration::from_millis(50));
        writer.join().unwrap();
        // Waiting did not take the gate: it is free to take.
        assert!(b.try_enter().is_some());
    }

    #[test]
    fn a_wait_ends_at_its_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = two(&dir);
        let _held = a.try_enter().expect("free");
        assert!(b.enter(Duration::from_millis(100)).is_err());
        assert!(b.wait_for_writer(Duration::from_millis(100)).is_err());
    }

    #[test]
    fn a_gate_held_past_patience_is_gone_around_until_it_is_free() {
        // `a` took the gate and stopped (it never leaves): `b` waits
        // `PATIENCE`, not its whole timeout, goes on without the gate, and
        // its later writes do not wait at all until the gate is free.
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = two(&dir);
        let held = a.try_enter().expect("free");
        let t = Instant::now();
        let without = b.enter(Duration::from_secs(10)).expect("no Unavailable");
        let waited = t.elapsed();
        assert!(without.gate.is_none(), "went on without the gate");
        assert!(
            waited >= PATIENCE && waited < Duration::from_secs(5),
            "{waited:?}"
        );
        drop(without);
        let t = Instant::now();
        assert!(b.enter(Duration::from_secs(10)).unwrap().gate.is_none());
        assert!(b.wait_for_writer(Duration::from_secs(10)).is_ok());
        assert!(t.elapsed() < PATIENCE, "later writes go around at once");
        // A timeout shorter than the patience still ends as before.
        drop(held); // `a` resumes and leaves the gate
        assert!(within(Duration::from_secs(2), || !b.shared.stuck()));
        assert!(within(Duration::from_secs(2), || b.try_enter().is_some()));
    }
}
