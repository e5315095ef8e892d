//! The process tree `baton run` answers for: the child, everything it
//! starts, and what keeps them from outliving the lease.
//!
//! Three pieces, each for a way the tree could escape:
//! - **the group**: the child leads a process group of its own, and what it
//!   starts stays in it unless it moves itself out (`setsid`, `setpgid`);
//! - **the subreaper**: the wrapper is a child subreaper, so whatever the
//!   child leaves behind (even in a session of its own) becomes the
//!   wrapper's child when its parent ends, and is found, stopped and reaped
//!   before the outcome is reported;
//! - **the guardian**: a small shell, outside both, holding a pipe from
//!   the wrapper; when the wrapper dies (SIGKILL included) the pipe closes
//!   and the guardian kills the child's group at once, long before the
//!   lease can end. A wrapper that ends normally tells it to stand down.
//!
//! And the **watchdog**: a thread of its own, outside the async runtime,
//! that stops the tree at the keeper's deadlines whatever the runtime's
//! threads are doing (a store call that blocks them, a store that hangs).
//!
//! Nothing here decides anything about the lease: the deadlines are the
//! keeper's schedule, read from its watch.

use baton_core::{Kept, Schedule, Timestamp};
use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How often the watchdog looks at the clock, and the tree is polled.
const TICK: Duration = Duration::from_millis(10);

/// Makes this process a child subreaper: orphans below it come to it.
pub fn become_subreaper() {
    // Best effort: without it, a grandchild that left the group is found
    // only while its parent lives (README says what holds where).
    let _ = nix::sys::prctl::set_child_subreaper(true);
}

/// The wrapper's own children that lead what a run answers for (each
/// run's child and its guardian), while that run lasts: `run --next
/// --count` runs several trees at once under one wrapper, and one run's
/// tree never takes in another's.
static ROOTS: std::sync::Mutex<BTreeSet<i32>> = std::sync::Mutex::new(BTreeSet::new());

/// A root held for as long as this lives.
#[derive(Debug)]
pub struct Root(Pid);

impl Root {
    /// Starts a process with `start` and holds it (its pid by `pid`) as a
    /// root from the moment it exists: another run's stop, which signals
    /// under the same lock, never sees it unheld.
    pub fn start<T>(
        start: impl FnOnce() -> std::io::Result<T>,
        pid: impl Fn(&T) -> Option<Pid>,
    ) -> std::io::Result<(T, Option<Root>)> {
        let mut held = roots();
        let started = start()?;
        let root = pid(&started).map(|p| {
            held.insert(p.as_raw());
            Root(p)
        });
        Ok((started, root))
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        roots().remove(&self.0.as_raw());
    }
}

fn roots() -> std::sync::MutexGuard<'static, BTreeSet<i32>> {
    // A panic while the set was held leaves it as it was: still usable.
    ROOTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Every process below `root` (not `root` itself), from `/proc`.
pub fn descendants(root: Pid) -> Vec<Pid> {
    let mut children: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for pid in all_pids() {
        if let Some(ppid) = parent_of(pid) {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    let mut todo = vec![root.as_raw()];
    while let Some(p) = todo.pop() {
        for &c in children.get(&p).map(Vec::as_slice).unwrap_or(&[]) {
            if seen.insert(c) {
                out.push(Pid::from_raw(c));
                todo.push(c);
            }
        }
    }
    out
}

/// What `/proc/PID/stat` says of a process, after the command's `)`.
struct Stat {
    state: char,
    parent: i32,
    group: i32,
}

fn stat_of(pid: i32) -> Option<Stat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
    let state = rest.next()?.chars().next()?;
    let parent = rest.next()?.parse().ok()?;
    let group = rest.next()?.parse().ok()?;
    Some(Stat {
        state,
        parent,
        group,
    })
}

fn parent_of(pid: i32) -> Option<i32> {
    stat_of(pid).map(|s| s.parent)
}

/// Every process's pid, from `/proc`.
fn all_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
                .collect()
        })
        .unwrap_or_default()
}

/// The child's tree: its group, and every process below it (or, once it
/// has ended, below the wrapper, which inherits its orphans).
#[derive(Debug, Clone, Copy)]
pub struct Tree {
    /// The child's pid, which is also its process group's id.
    pub group: Pid,
    /// The guardian, which is the wrapper's child too and is left alone.
    pub guardian: Option<Pid>,
}

impl Tree {
    /// Sends `sig` to the child's group and to every process below the
    /// child (and below the wrapper, but the guardian).
    pub fn signal(&self, sig: Signal) {
        // Who is below is read first, and those in the group get the
        // group's signal alone: each process gets one signal, and what a
        // signal handler starts after it (a shell trap's command
        // substitution) gets none.
        let roots = roots();
        let outside: Vec<Pid> = self
            .below(&roots)
            .into_iter()
            .filter(|p| stat_of(p.as_raw()).map(|s| s.group) != Some(self.group.as_raw()))
            .collect();
        // ESRCH (the group is gone) is what we want anyway.
        let _ = killpg(self.group, sig);
        for p in outside {
            let _ = kill(p, sig);
        }
        drop(roots);
    }

    /// The processes below the child (which, once reaped, has left them to
    /// the wrapper), the guardian and its own children excepted.
    fn below(&self, roots: &BTreeSet<i32>) -> Vec<Pid> {
        let mut out = descendants(self.group);
        // The guardian, and every other run's child and guardian, with
        // all below them.
        let others: Vec<Pid> = roots
            .iter()
            .map(|&p| Pid::from_raw(p))
            .filter(|p| *p != self.group)
            .chain(self.guardian)
            .collect();
        let guarded: BTreeSet<Pid> = others
            .iter()
            .flat_map(|&g| std::iter::once(g).chain(descendants(g)))
            .collect();
        out.extend(
            descendants(nix::unistd::getpid())
                .into_iter()
                .filter(|p| *p != self.group && !guarded.contains(p)),
        );
        out.sort();
        out.dedup();
        out
    }

    /// Once the child has ended: stops what it left behind (SIGTERM, then
    /// SIGKILL at `kill_by`) and reaps it, so that nothing of the tree runs
    /// when the outcome is reported. Gives up at `give_up` (a process that
    /// does not die of SIGKILL, stuck in the kernel), saying how many remain.
    pub fn end(&self, kill_by: Instant, give_up: Instant) -> usize {
        let mut killed = false;
        let mut termed = false;
        loop {
            self.reap();
            let left = self.remaining();
            if left == 0 {
                return 0;
            }
            let now = Instant::now();
            if now >= give_up {
                return left;
            }
            if !termed {
                self.signal(Signal::SIGTERM);
                termed = true;
            }
            if !killed && now >= kill_by {
                self.signal(Signal::SIGKILL);
                killed = true;
            }
            std::thread::sleep(TICK);
        }
    }

    /// Processes of the tree still running (zombies waiting to be reaped
    /// do not count).
    fn remaining(&self) -> usize {
        let mut members: BTreeSet<Pid> = self.below(&roots().clone()).into_iter().collect();
        if alive(self.group) {
            members.insert(self.group);
        }
        members.extend(group_members(self.group));
        members.into_iter().filter(|p| alive(*p)).count()
    }

    /// Reaps the wrapper's children that have ended (orphans it inherited),
    /// leaving the guardian's and tokio's own children to their owners.
    fn reap(&self) {
        let me = nix::unistd::getpid();
        let roots = roots().clone();
        for p in descendants(me) {
            if Some(p) == self.guardian
                || p == self.group
                || roots.contains(&p.as_raw())
                || parent_of(p.as_raw()) != Some(me.as_raw())
            {
                continue;
            }
            let _ = waitpid(p, Some(WaitPidFlag::WNOHANG));
        }
    }
}

/// Processes whose group is `group` (a grandchild whose parent ended
/// before the wrapper became its reaper, adopted by init, still counts).
fn group_members(group: Pid) -> Vec<Pid> {
    all_pids()
        .into_iter()
        .filter(|p| stat_of(*p).is_some_and(|s| s.group == group.as_raw()))
        .map(Pid::from_raw)
        .collect()
}

/// Running, as opposed to gone or a zombie waiting to be reaped.
fn alive(pid: Pid) -> bool {
    stat_of(pid.as_raw()).is_some_and(|s| !matches!(s.state, 'Z' | 'X'))
}

/// Kills the child's group if the wrapper dies: a shell in a process group
/// of its own that ignores the usual signals and waits for its standard
/// input to close. "done" on it first means the wrapper ended normally.
#[derive(Debug)]
pub struct Guardian {
    child: Child,
    stdin: Option<ChildStdin>,
    guarding: bool,
}

impl Guardian {
    /// Starts a guardian, which guards nothing until [`Guardian::guard`].
    pub fn start() -> std::io::Result<Guardian> {
        use std::os::unix::process::CommandExt;
        let mut child = Command::new("/bin/sh")
            .arg("-c")
            .arg(
                "trap '' INT TERM HUP QUIT; read -r group || exit 0; read -r line; \
                 [ \"$line\" = done ] || kill -9 \"-$group\" 2>/dev/null",
            )
            .arg("baton-guardian")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        let stdin = child.stdin.take();
        Ok(Guardian {
            child,
            stdin,
            guarding: false,
        })
    }

    /// From now on the guardian kills `group` if the wrapper dies.
    pub fn guard(&mut self, group: Pid) -> std::io::Result<()> {
        match self.stdin.as_mut() {
            Some(s) => {
                s.write_all(format!("{}\n", group.as_raw()).as_bytes())?;
                s.flush()?;
                self.guarding = true;
                Ok(())
            }
            None => Err(std::io::Error::other("the guardian's input is closed")),
        }
    }

    pub fn pid(&self) -> Option<Pid> {
        i32::try_from(self.child.id()).ok().map(Pid::from_raw)
    }

    /// The wrapper is done with the tree: the guardian leaves it alone.
    pub fn stand_down(mut self) {
        // Not guarding yet: closing its input ends it without a word.
        if let Some(mut s) = self.stdin.take()
            && self.guarding
        {
            let _ = s.write_all(b"done\n");
        }
        let _ = self.child.wait();
    }
}

/// Stops the tree once: the first SIGTERM, from whichever side sees the
/// deadline first (the watchdog, or the async keeper's loss), is the only
/// one, so a child that takes a second SIGTERM as "quit now" gets its grace.
#[derive(Debug)]
pub struct Stopper {
    pub tree: Tree,
    termed: AtomicBool,
}

impl Stopper {
    pub fn new(tree: Tree) -> Stopper {
        Stopper {
            tree,
            termed: AtomicBool::new(false),
        }
    }

    /// SIGTERM to the tree, unless it was sent already.
    pub fn term(&self) {
        if !self.termed.swap(true, Ordering::SeqCst) {
            self.tree.signal(Signal::SIGTERM);
        }
    }

    /// SIGKILL to the tree (again, if need be: it cannot be ignored).
    pub fn kill(&self) {
        self.termed.store(true, Ordering::SeqCst);
        self.tree.signal(Signal::SIGKILL);
    }

    /// A signal the wrapper forwards (its own SIGTERM, SIGINT, SIGHUP).
    pub fn forward(&self, sig: Signal) {
        if sig == Signal::SIGTERM {
            self.term();
        } else {
            self.tree.signal(sig);
        }
    }
}

/// Stops the tree at the keeper's deadlines from a thread of its own:
/// SIGTERM at `stop_at(expiry)`, SIGKILL at `stopped_by(expiry)`, the
/// expiry as last confirmed when the SIGTERM went.
#[derive(Debug)]
pub struct Watchdog {
    stop: Option<Sender<()>>,
    fired: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    pub fn start(
        now: impl Fn() -> Timestamp + Send + 'static,
        schedule: Schedule,
        kept: watch::Receiver<Kept>,
        stopper: Arc<Stopper>,
    ) -> std::io::Result<Watchdog> {
        let (stop, stopped) = channel::<()>();
        let fired = Arc::new(AtomicBool::new(false));
        let told = Arc::clone(&fired);
        let thread = std::thread::Builder::new()
            .name("baton-watchdog".to_owned())
            .spawn(move || {
                let mut kill_at: Option<Timestamp> = None;
                loop {
                    match stopped.recv_timeout(TICK) {
                        Err(RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                    let now = now();
                    match kill_at {
                        None => {
                            let expiry = kept.borrow().grant.expiry;
                            if now >= schedule.stop_at(expiry) {
                                told.store(true, Ordering::SeqCst);
                                stopper.term();
                                kill_at = Some(schedule.stopped_by(expiry));
                            }
                        }
                        Some(by) if now >= by => {
                            stopper.kill();
                            return;
                        }
                        Some(_) => {}
                    }
                }
            })?;
        Ok(Watchdog {
            stop: Some(stop),
            fired,
            thread: Some(thread),
        })
    }

    /// Whether the watchdog stopped the tree (no renewal confirmed in time).
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
