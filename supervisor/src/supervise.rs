//! `baton run` and `baton task run`: a command under a lease the wrapper
//! keeps for it. The wrapper claims, starts the child in its own process
//! group (dying with the wrapper), renews from here (never from the child,
//! so a busy child cannot starve renewal), and stops the child before the
//! lease could end: SIGTERM when no renewal was confirmed by
//! `expiry - grace - margin`, SIGKILL at `expiry - margin`, SIGKILL at once
//! when a renewal is refused. Then it reports the outcome with the fence.
//! The rules (who may renew, what a report does) stay in core's decision;
//! this is process plumbing.

use crate::RunOptions;
use crate::exit::{self, exit_code_for};
use crate::term as output;
use crate::term::report_error;
use crate::tree::{Root, Stopper, Tree, Watchdog};
use baton_core::{
    Error, Grant, Id, KeepOptions, Keeper, Loss, Outcome, Refusal, Reply, Store, TaskId, Timestamp,
};
use baton_open::authority_for;

/// A lease's length as every front end reads one (the catalogue's rule).
fn parse_ttl(value: Option<&str>) -> Result<Option<u64>, Error> {
    value
        .map(|v| baton_core::catalogue::duration_ms(baton_core::catalogue::Kind::Ttl, "ttl", v))
        .transpose()
}
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::signal::unix::{SignalKind, signal};

/// How long past its SIGKILL the tree may take to die before the wrapper
/// reports anyway (a process stuck in the kernel does not die at once).
const GIVE_UP: Duration = Duration::from_secs(5);

/// baton's own exit statuses under `run` are this plus the CLI's (201
/// refused, 202 invalid, 203 unavailable, 204 indeterminate, 205 not
/// found, 206 not permitted), so that none of them can be read as the
/// child's: a child that exits 3 must not look like "unavailable, do not
/// start work".
pub const OWN: i32 = 200;
/// Exit status when the lease was lost or the report refused: the child was
/// stopped, or its outcome is not recorded.
pub const LOST: i32 = OWN;

/// Exit status when an operator cancelled the task while it ran: the
/// child was stopped (SIGTERM, SIGKILL after the grace) and the task is
/// CANCELLED.
pub const CANCELLED: i32 = OWN + 7;

/// Exit status when the attempt reached the task's run-time limit (its
/// `timeout`): the child was stopped (SIGTERM, SIGKILL after the grace,
/// before the lease ends there) and the attempt counts as a stall.
pub const TIMED_OUT: i32 = OWN + 8;

/// Exit status when the child itself exited with a status in `run`'s own
/// range (200 to 209), which would read as one of `run`'s: its outcome is
/// recorded as usual and the report's `child.exit_code` has its status.
pub const CHILD_IN_OWN_RANGE: i32 = OWN + 9;

/// The status `run` exits with for the CLI's status `code` (0 stays 0).
pub fn own(code: i32) -> i32 {
    if code == 0 { 0 } else { OWN + code }
}
/// Exit status when the command exists but cannot be run.
pub const CANNOT_RUN: i32 = 126;
/// Exit status when the command does not exist.
pub const NO_COMMAND: i32 = 127;

/// Who holds the task: a bare task's owner, or a declared task's run and executor.
#[derive(Debug, Clone)]
pub enum Holder {
    Bare {
        owner: Id,
        lock_delay_ms: Option<u64>,
    },
    Declared {
        run: Id,
        executor: Id,
    },
}

/// A validated `run` or `task run`, ready to go.
#[derive(Debug, Clone)]
pub struct Spec {
    pub store: String,
    /// The task to claim, or `None` with `next`.
    pub task: Option<TaskId>,
    /// `run --next`: take whatever `next` grants from these queues.
    pub next: Option<Vec<Id>>,
    pub holder: Holder,
    pub ttl_ms: Option<u64>,
    pub wait_ms: Option<u64>,
    /// `run --next --wait --keep-waiting`: a drained queue is waited out too.
    pub keep_waiting: bool,
    pub grace_ms: u64,
    pub renew_every_ms: Option<u64>,
    pub report: Option<PathBuf>,
    pub evidence: Vec<(String, PathBuf)>,
    pub command: Vec<OsString>,
    /// Write the report on standard error as a sentence (`--format
    /// human`) rather than JSON; a `--report` file is JSON always.
    pub human: bool,
    /// `run --next --count N`: up to N grants in one commit, the command
    /// run once for each, all at once (1: one grant, one run).
    pub count: u32,
}

impl Spec {
    /// Checks every input before anything is claimed.
    pub fn new(
        store: &str,
        task: Option<&str>,
        next: Option<Vec<Id>>,
        holder: Holder,
        ttl: Option<&str>,
        evidence: &[String],
        opts: &RunOptions,
    ) -> Result<Spec, Error> {
        let field = |name: &str, e: Error| Error::invalid(name, e.message);
        let wait_ms = opts
            .wait
            .as_deref()
            .map(|w| {
                baton_core::catalogue::duration_ms(baton_core::catalogue::Kind::Wait, "wait", w)
            })
            .transpose()?;
        let grace_ms = parse_ttl(Some(&opts.grace))
            .map_err(|e| field("grace", e))?
            .unwrap_or(0);
        let renew_every_ms =
            parse_ttl(opts.renew_every.as_deref()).map_err(|e| field("renew_every", e))?;
        let mut files = Vec::new();
        for item in evidence {
            match item.split_once('=') {
                Some((k, p)) if !k.is_empty() && !p.is_empty() => {
                    files.push((k.to_owned(), PathBuf::from(p)));
                }
                _ => {
                    return Err(Error::invalid(
                        "evidence",
                        format!("must be KEY=PATH (got {item:?})"),
                    ));
                }
            }
        }
        if opts.command.is_empty() {
            return Err(Error::invalid("command", "give the command after `--`"));
        }
        Ok(Spec {
            human: false,
            count: 1,
            store: store.to_owned(),
            task: match (task, &next) {
                (Some(t), None) => Some(Id::parse("task", t)?),
                (None, Some(_)) => None,
                _ => {
                    return Err(Error::invalid(
                        "task",
                        "give a task, or --next to take the next ready one (not both)",
                    ));
                }
            },
            next,
            holder,
            ttl_ms: parse_ttl(ttl)?,
            wait_ms,
            keep_waiting: opts.keep_waiting,
            grace_ms,
            renew_every_ms,
            report: opts.report.clone(),
            evidence: files,
            command: opts.command.clone(),
        })
    }
}

/// Why the wrapper is stopping the child.
#[derive(Debug, Clone)]
enum Stopping {
    Lost(Loss),
    Signal(Signal),
    /// An operator asked the holder to stop (cooperative cancellation).
    Cancelled(baton_core::model::CancelRequest),
}

/// What the run came to, for the report.
struct Report {
    outcome: &'static str,
    exit: i32,
    reason: Option<String>,
}

/// Runs the spec on the store its URL names and returns the wrapper's exit status.
pub async fn main(spec: Spec) -> i32 {
    let auth = match authority_for(&spec.store).await {
        Ok(a) => Arc::new(a),
        Err(e) => return own(report_error(&e)),
    };
    supervised(&auth, &spec).await.exit
}

/// How a supervised run ended: the wrapper's exit status, and the report
/// (`None` when nothing was claimed).
#[derive(Debug)]
pub struct Finished {
    pub exit: i32,
    pub report: Option<Value>,
}

/// Runs the spec on `auth`: claim, run, keep, stop in time, report.
pub async fn supervised<S: Store + 'static>(
    auth: &Arc<baton_core::Authority<S>>,
    spec: &Spec,
) -> Finished {
    let started = Instant::now();
    let nothing = |exit| Finished { exit, report: None };
    let grants = match claim(auth, spec).await {
        Ok(Ok(g)) => g,
        Ok(Err(refusal)) => {
            let mut body = serde_json::to_value(&refusal)
                .unwrap_or_else(|_| json!({"refused": refusal.reason()}));
            body["message"] = json!(refusal.to_string());
            output::write_stderr(&body.to_string());
            return nothing(own(if refusal == Refusal::NotFound {
                exit::NOT_FOUND
            } else {
                exit::REFUSED
            }));
        }
        Err(e) => return nothing(own(report_error(&e))),
    };
    if let [grant] = grants.as_slice() {
        return run_one(auth, spec, grant.clone(), started).await;
    }
    // A batch: every run at once, in this future (so each child is forked
    // from the main thread, as `spawn` needs); the wrapper's status is the
    // first run's in grant order that did not end 0. A `--report` file
    // gets one line per run, appended as each ends.
    if let Some(path) = &spec.report
        && let Err(e) = std::fs::write(path, "")
    {
        output::write_stderr(&format!(
            "{{\"warning\": \"cannot write the report to {}: {e}\"}}",
            path.display()
        ));
    }
    let runs = futures_util::future::join_all(
        grants
            .into_iter()
            .map(|g| run_one(auth, spec, g, Instant::now())),
    )
    .await;
    let exit = runs.iter().map(|f| f.exit).find(|&e| e != 0).unwrap_or(0);
    Finished {
        exit,
        report: Some(Value::Array(
            runs.into_iter().filter_map(|f| f.report).collect(),
        )),
    }
}

/// Runs the command under one grant: keep, stop in time, report.
async fn run_one<S: Store + 'static>(
    auth: &Arc<baton_core::Authority<S>>,
    spec: &Spec,
    grant: Grant,
    started: Instant,
) -> Finished {
    let opened_at = auth.now();
    // What is left of the lease when it was answered, counted down from
    // then by this process's monotonic clock: a grant answered (or a
    // child about to start) with no more than the keeper's safety margin
    // left starts nothing, and is given back.
    let answered = Instant::now();
    let left_at_answer_ms = grant.expiry.as_millis() - opened_at.as_millis();
    let margin_ms = baton_core::keeper::Schedule::new(
        &grant,
        &KeepOptions {
            ttl_ms: spec.ttl_ms,
            renew_every_ms: spec.renew_every_ms,
            grace_ms: spec.grace_ms,
            margin_ms: None,
            run_id: None,
        },
    )
    .margin_ms;
    let too_late = move || {
        let waited = i64::try_from(answered.elapsed().as_millis()).unwrap_or(i64::MAX);
        let left = left_at_answer_ms.saturating_sub(waited);
        (left <= i64::try_from(margin_ms).unwrap_or(i64::MAX)).then(|| {
            format!(
                "the lease had {left} ms left, no more than its {margin_ms} ms safety margin: nothing was started"
            )
        })
    };
    if let Some(reason) = too_late() {
        return give_back(auth, spec, &grant, LOST, reason, opened_at, started).await;
    }
    let run_id = match &spec.holder {
        Holder::Declared { run, .. } => Some(run.clone()),
        Holder::Bare { .. } => None,
    };
    // The attempt's signed fence, for guards in the child's own storage
    // (none when nothing signs; a signer that cannot answer leaves the
    // child without one, and a guard with keys refuses its writes).
    let token = auth
        .fence_token(&grant.task, grant.fence)
        .await
        .ok()
        .flatten();
    // What the child leaves behind comes to the wrapper, and a guardian
    // kills the child's group if the wrapper dies (see `tree`).
    crate::tree::become_subreaper();
    // The guardian and the child are held as roots from their start until
    // the run ends: another run of the same wrapper (`--count`) leaves
    // them alone.
    let (mut guardian, _guardian_root) =
        match Root::start(crate::tree::Guardian::start, |g| g.pid()) {
            Ok(g) => g,
            Err(e) => {
                let reason = format!("cannot start the guardian of the command's processes: {e}");
                return give_back(auth, spec, &grant, CANNOT_RUN, reason, opened_at, started).await;
            }
        };
    if let Some(reason) = too_late() {
        return give_back(auth, spec, &grant, LOST, reason, opened_at, started).await;
    }
    // The steps earlier attempts recorded, for the child to skip: a file
    // only this user reads, removed when the run ends.
    let checkpoints = match checkpoints_file(&grant) {
        Ok(f) => f,
        Err(e) => {
            let reason = format!("cannot write the task's checkpoints for the command: {e}");
            return give_back(auth, spec, &grant, CANNOT_RUN, reason, opened_at, started).await;
        }
    };
    let started_child = Root::start(
        || spawn(spec, &grant, token.as_deref(), checkpoints.path()),
        |c| {
            c.id()
                .and_then(|p| i32::try_from(p).ok())
                .map(Pid::from_raw)
        },
    );
    let (mut child, _child_root) = match started_child {
        Ok(c) => c,
        Err(e) => {
            // Nothing ran: give the task back rather than fail it.
            let exit = if e.kind() == std::io::ErrorKind::NotFound {
                NO_COMMAND
            } else {
                CANNOT_RUN
            };
            let reason = format!("cannot run {:?}: {e}", spec.command[0]);
            return give_back(auth, spec, &grant, exit, reason, opened_at, started).await;
        }
    };
    // Its standard error, passed on and its tail kept for a failure's error.
    let stderr_tail = child.stderr.take().map(crate::tail::StderrTail::start);
    // The child's process group is its pid (`process_group(0)`).
    let group = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .map(Pid::from_raw);
    let tree = group.map(|group| Tree {
        group,
        guardian: guardian.pid(),
    });
    if let Some(t) = &tree
        && let Err(e) = guardian.guard(t.group)
    {
        // Without its guardian the tree could outlive a killed wrapper:
        // stop it now and give the task back.
        t.signal(Signal::SIGKILL);
        let _ = child.wait().await;
        end_tree(*t, Instant::now()).await;
        let reason = format!("cannot guard the command's processes: {e}");
        return give_back(auth, spec, &grant, CANNOT_RUN, reason, opened_at, started).await;
    }
    let keeper = auth.keep(
        grant.clone(),
        KeepOptions {
            ttl_ms: spec.ttl_ms,
            renew_every_ms: spec.renew_every_ms,
            grace_ms: spec.grace_ms,
            margin_ms: None,
            run_id,
        },
    );
    let stopper = tree.map(|t| Arc::new(Stopper::new(t)));
    // The keeper's deadlines, kept from a thread of its own as well, so
    // they hold while a store call blocks the runtime's threads.
    let watchdog = stopper.as_ref().and_then(|s| {
        let clock = Arc::clone(auth);
        let (schedule, kept) = (keeper.schedule(), keeper.watch());
        Watchdog::start(move || clock.now(), schedule, kept, Arc::clone(s)).ok()
    });
    let status = supervise(&mut child, stopper.as_deref(), &keeper, auth, spec.grace_ms).await;
    let fired = watchdog.as_ref().is_some_and(Watchdog::fired);
    drop(watchdog);
    // Whatever the child left running is stopped (SIGTERM, SIGKILL after
    // the grace, never past the lease's margin) and reaped before anything
    // is reported.
    if let Some(t) = tree {
        let by = auth.now().plus_ms(spec.grace_ms).min(keeper.stopped_by());
        let left = u64::try_from(by.as_millis() - auth.now().as_millis()).unwrap_or(0);
        end_tree(t, Instant::now() + Duration::from_millis(left)).await;
    }
    guardian.stand_down();
    // The tree has ended, so the pipe has closed, unless a process that
    // left the tree holds it: that one is not waited for long.
    let stderr_tail = match stderr_tail {
        Some(t) => t.finish(Duration::from_millis(500)).await,
        None => None,
    };
    let status = match status {
        Ok((s, None)) if fired => Ok((s, Some(Stopping::Lost(Loss::Unrenewed { error: None })))),
        other => other,
    };
    let (status, stopping) = match status {
        Ok(s) => s,
        Err(e) => {
            // The child cannot be waited on (its tree is stopped above): let the lease go.
            let report = Report {
                outcome: "lost",
                exit: LOST,
                reason: Some(format!("cannot wait for the command: {e}")),
            };
            let report = write_report(
                spec,
                &keeper.grant(),
                None,
                &report,
                opened_at,
                auth.now(),
                started,
                keeper.kept().renewals,
            );
            return Finished {
                exit: LOST,
                report: Some(report),
            };
        }
    };
    let child_json = child_status(&status);
    let child_exit = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    let renewals = keeper.kept().renewals;
    let last = keeper.grant();
    let report = match stopping {
        Some(Stopping::Lost(loss)) if timed_out(&loss) => Report {
            outcome: "timed_out",
            exit: TIMED_OUT,
            reason: Some(loss.describe()),
        },
        Some(Stopping::Lost(loss)) => Report {
            outcome: "lost",
            exit: LOST,
            reason: Some(loss.describe()),
        },
        Some(Stopping::Cancelled(asked)) => match keeper.release().await {
            Ok(r) => match r.refusal() {
                None => Report {
                    outcome: "cancelled",
                    exit: CANCELLED,
                    reason: Some(format!("{} asked it to stop", asked.by)),
                },
                Some(refusal) => Report {
                    outcome: "refused",
                    exit: LOST,
                    reason: Some(format!("the release was refused: {refusal}")),
                },
            },
            Err(e) => indeterminate(&e),
        },
        Some(Stopping::Signal(sig)) => match keeper.release().await {
            Ok(r) => match r.refusal() {
                None => Report {
                    outcome: "released",
                    exit: child_exit,
                    reason: Some(format!("the wrapper got {}", sig.as_str())),
                },
                Some(refusal) => Report {
                    outcome: "refused",
                    exit: LOST,
                    reason: Some(format!("the release was refused: {refusal}")),
                },
            },
            Err(e) => indeterminate(&e),
        },
        None => {
            let outcome = match status.code() {
                Some(0) => match hash_evidence(&spec.evidence) {
                    Ok(evidence) => Outcome::Success { evidence },
                    Err(error) => Outcome::Failure { error },
                },
                Some(_) | None => Outcome::Failure {
                    error: with_tail(child_json.clone(), stderr_tail.as_ref()),
                },
            };
            let failed = matches!(outcome, Outcome::Failure { .. });
            // An exit of 0 whose evidence cannot be read is a failure: exit 1.
            // A child's status in `run`'s own range is never passed on as
            // it is: it would read as `run`'s.
            let exit = if failed && child_exit == 0 {
                1
            } else if (OWN..=CHILD_IN_OWN_RANGE).contains(&child_exit) {
                CHILD_IN_OWN_RANGE
            } else {
                child_exit
            };
            match keeper.finish(outcome).await {
                Ok(r) => match r.refusal() {
                    None => Report {
                        outcome: if failed { "failed" } else { "completed" },
                        exit,
                        reason: r
                            .record()
                            .and_then(|rec| rec.error.as_ref())
                            .map(|e| e.to_string()),
                    },
                    Some(refusal) => Report {
                        outcome: "refused",
                        exit: LOST,
                        reason: Some(format!("the report was refused: {refusal}")),
                    },
                },
                Err(e) => indeterminate(&e),
            }
        }
    };
    let exit = report.exit;
    let written = write_report(
        spec,
        &last,
        Some(child_json),
        &report,
        opened_at,
        auth.now(),
        started,
        renewals,
    );
    Finished {
        exit,
        report: Some(written),
    }
}

/// Stops and reaps what is left of the tree (see [`Tree::end`]), off the
/// runtime's threads, warning when some of it would not die.
async fn end_tree(tree: Tree, kill_by: Instant) {
    let ended = tokio::task::spawn_blocking(move || tree.end(kill_by, kill_by + GIVE_UP)).await;
    let remain = ended.unwrap_or(1);
    if remain > 0 {
        output::write_stderr(&format!(
            "{{\"warning\": \"{remain} of the command's processes did not die of SIGKILL\"}}"
        ));
    }
}

/// Nothing ran (or nothing may run): gives the task back rather than fail
/// it, and reports `released` with `exit`.
#[allow(clippy::too_many_arguments)]
async fn give_back<S: Store + 'static>(
    auth: &Arc<baton_core::Authority<S>>,
    spec: &Spec,
    grant: &Grant,
    exit: i32,
    reason: String,
    opened_at: Timestamp,
    started: Instant,
) -> Finished {
    let released = auth.release(&grant.task, &grant.owner, grant.fence).await;
    let report = Report {
        outcome: "released",
        exit,
        reason: Some(format!(
            "{reason}{}",
            released
                .err()
                .map(|r| format!(" (and the release failed: {r})"))
                .unwrap_or_default()
        )),
    };
    let report = write_report(
        spec,
        grant,
        None,
        &report,
        opened_at,
        auth.now(),
        started,
        0,
    );
    Finished {
        exit,
        report: Some(report),
    }
}

fn indeterminate(e: &Error) -> Report {
    Report {
        outcome: "indeterminate",
        exit: own(exit_code_for(e)),
        reason: Some(e.to_string()),
    }
}

/// Claims (and, for a declared task, starts) the task, retrying a claim
/// refused because another holds it while `--wait` lasts.
async fn claim<S: Store + 'static>(
    a: &Arc<baton_core::Authority<S>>,
    spec: &Spec,
) -> Result<Result<Vec<Grant>, Refusal>, Error> {
    let deadline = spec
        .wait_ms
        .map(|ms| std::time::Instant::now() + Duration::from_millis(ms));
    let mut backoff = 100u64;
    loop {
        let reply = match (&spec.task, &spec.next, &spec.holder) {
            (
                _,
                Some(queues),
                Holder::Bare {
                    owner,
                    lock_delay_ms,
                },
            ) if spec.count > 1 => {
                let taker = baton_core::Taker::Owner {
                    owner: owner.clone(),
                    ttl_ms: spec.ttl_ms,
                    lock_delay_ms: *lock_delay_ms,
                };
                let replies = a.next_many_for(taker, queues, spec.count).await?;
                let grants: Vec<Grant> = replies.iter().filter_map(Reply::grant).collect();
                if !grants.is_empty() {
                    return Ok(Ok(grants));
                }
                // Nothing granted: the one refusal `next` answers.
                match replies.into_iter().next() {
                    Some(r) => r,
                    None => Reply::Refused(Refusal::NotFound),
                }
            }
            (
                _,
                Some(queues),
                Holder::Bare {
                    owner,
                    lock_delay_ms,
                },
            ) => a.next(owner, queues, spec.ttl_ms, *lock_delay_ms).await?,
            (
                Some(task),
                _,
                Holder::Bare {
                    owner,
                    lock_delay_ms: None,
                },
            ) => a.claim(task, owner, spec.ttl_ms).await?,
            (
                Some(task),
                _,
                Holder::Bare {
                    owner,
                    lock_delay_ms: Some(d),
                },
            ) => {
                a.claim_with_lock_delay(task, owner, spec.ttl_ms, *d)
                    .await?
            }
            (Some(task), _, Holder::Declared { run, executor }) => {
                a.task_claim(task, run, executor, spec.ttl_ms).await?
            }
            (None, _, _) => {
                return Err(Error::invalid(
                    "next",
                    "only `run` takes --next (a declared task's run is named with it)",
                ));
            }
        };
        match (reply.grant(), reply.refusal()) {
            (Some(g), None) => {
                if let Holder::Declared { run, executor } = &spec.holder {
                    let started = a.start(&g.task, run, executor, g.fence).await?;
                    if let Some(r) = started.refusal() {
                        let _ = a.release(&g.task, &g.owner, g.fence).await;
                        return Ok(Err(r.clone()));
                    }
                }
                return Ok(Ok(vec![g]));
            }
            (_, Some(r)) => {
                let waitable = matches!(
                    r,
                    Refusal::Held { .. }
                        | Refusal::LeaseLive { .. }
                        | Refusal::LockDelay { .. }
                        | Refusal::NoneReady { .. }
                ) || (spec.keep_waiting && matches!(r, Refusal::Drained { .. }));
                let now = std::time::Instant::now();
                match deadline {
                    Some(d) if waitable && now < d => {
                        let pause = Duration::from_millis(jitter(backoff)).min(d - now);
                        tokio::time::sleep(pause).await;
                        backoff = (backoff * 2).min(2_000);
                    }
                    _ => return Ok(Err(r.clone())),
                }
            }
            (None, None) => return Ok(Err(Refusal::NotFound)),
        }
    }
}

/// Whether the lease was lost to the task's run-time limit.
fn timed_out(loss: &Loss) -> bool {
    matches!(
        loss,
        Loss::TimedOut { .. } | Loss::Refused(Refusal::TimedOut { .. })
    )
}

/// `ms` give or take a quarter.
fn jitter(ms: u64) -> u64 {
    let noise =
        std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), ms);
    ms - ms / 4 + noise % (ms / 2 + 1)
}

/// Starts the command in its own process group with the lease in its
/// environment (and its signed fence, `BATON_FENCE_TOKEN`, when there is one). Called from the future `block_on` runs, so on the main
/// thread: the parent-death signal fires when the thread that forked the
/// child ends, and the main thread ends only with the wrapper.
fn spawn(
    spec: &Spec,
    grant: &Grant,
    token: Option<&str>,
    checkpoints: &std::path::Path,
) -> std::io::Result<tokio::process::Child> {
    let mut cmd = tokio::process::Command::new(&spec.command[0]);
    // The signing key stays with the authority: a child that could read
    // where it is could sign any fence.
    cmd.env_remove(baton_open::FENCE_KEY_ENV);
    match token {
        Some(t) => cmd.env("BATON_FENCE_TOKEN", t),
        None => cmd.env_remove("BATON_FENCE_TOKEN"),
    };
    cmd.args(&spec.command[1..])
        .env("BATON_STORE", &spec.store)
        .env("BATON_TASK", grant.task.as_str())
        .env("BATON_FENCE", grant.fence.to_string())
        .env("BATON_ATTEMPT", grant.attempt.to_string())
        .env("BATON_EXPIRY", grant.expiry.to_string())
        .env("BATON_CHECKPOINTS", checkpoints);
    // The trace the task was added in, for the child's spans to join
    // (without one, whatever the wrapper was given is left as it is).
    if let Some(tp) = &grant.traceparent {
        cmd.env("TRACEPARENT", tp);
    }
    match &spec.holder {
        Holder::Bare { owner, .. } => {
            cmd.env("BATON_OWNER", owner.as_str());
        }
        // The lease's holder is the executor: `baton checkpoint` takes it
        // as its owner.
        Holder::Declared { run, executor } => {
            cmd.env("BATON_RUN", run.as_str())
                .env("BATON_EXECUTOR", executor.as_str())
                .env("BATON_OWNER", executor.as_str());
        }
    }
    // The child keeps stdin and stdout; its stderr is passed on through
    // a pipe (`tail.rs`), where baton's own lines go too.
    cmd.stderr(std::process::Stdio::piped());
    cmd.kill_on_drop(false);
    contain(&mut cmd);
    cmd.spawn()
}

/// The grant's checkpoints (the steps earlier attempts recorded, in
/// order: `[{"step", "output", "fence", "at"}]`, `[]` for none) in a new
/// file readable by this user only, removed when the handle is dropped.
fn checkpoints_file(grant: &Grant) -> std::io::Result<tempfile::NamedTempFile> {
    use std::io::Write;
    let mut f = tempfile::Builder::new()
        .prefix("baton-checkpoints-")
        .suffix(".json")
        .tempfile()?;
    serde_json::to_writer(&mut f, &grant.checkpoints)?;
    f.write_all(b"\n")?;
    f.flush()?;
    Ok(f)
}

/// Puts the child in a process group of its own, and has the kernel kill
/// it if the wrapper dies (`PR_SET_PDEATHSIG`), even by SIGKILL.
#[allow(unsafe_code)]
fn contain(cmd: &mut tokio::process::Command) {
    let parent = nix::unistd::getpid();
    cmd.process_group(0);
    // SAFETY: the closure runs in the forked child before exec. It makes
    // two async-signal-safe system calls (prctl, getppid), allocates
    // nothing and touches no lock, as `pre_exec` requires.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Some(Signal::SIGKILL))?;
            // The wrapper died between fork and prctl: do not run orphaned.
            if nix::unistd::getppid() != parent {
                return Err(std::io::Error::other("the wrapper is gone"));
            }
            Ok(())
        });
    }
}

/// Waits for the child, stopping it when the lease is lost or the wrapper
/// is signalled. Returns its status and why the wrapper stopped it, if it did.
async fn supervise<S: Store + 'static>(
    child: &mut tokio::process::Child,
    stopper: Option<&Stopper>,
    keeper: &Keeper<S>,
    auth: &baton_core::Authority<S>,
    grace_ms: u64,
) -> std::io::Result<(std::process::ExitStatus, Option<Stopping>)> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    let mut stopping: Option<Stopping> = None;
    let mut lost = false;
    let mut kill_at: Option<Timestamp> = None;
    loop {
        let forwarded = tokio::select! {
            biased;
            status = child.wait() => return Ok((status?, stopping)),
            loss = keeper.wait_lost(), if !lost => {
                lost = true;
                match &loss {
                    // The grant is gone: the store may grant it again now.
                    Loss::Refused(_) => stopper.iter().for_each(|s| s.kill()),
                    Loss::Unrenewed { .. } | Loss::TimedOut { .. } => {
                        stopper.iter().for_each(|s| s.term());
                        let by = keeper.stopped_by();
                        kill_at = Some(kill_at.map_or(by, |k| k.min(by)));
                    }
                }
                stopping = Some(Stopping::Lost(loss));
                None
            }
            asked = keeper.wait_cancel_requested(), if stopping.is_none() => {
                // Stopped as for a signal: SIGTERM now, SIGKILL after the
                // grace (never later than the lease allows); the lease is
                // kept meanwhile, and given back once the child is gone.
                stopper.iter().for_each(|s| s.term());
                let by = auth.now().plus_ms(grace_ms).min(keeper.stopped_by());
                kill_at = Some(kill_at.map_or(by, |k| k.min(by)));
                stopping = Some(Stopping::Cancelled(asked));
                None
            }
            _ = sleep_until(auth, kill_at) => {
                stopper.iter().for_each(|s| s.kill());
                kill_at = None;
                None
            }
            _ = term.recv() => Some(Signal::SIGTERM),
            _ = int.recv() => Some(Signal::SIGINT),
            _ = hup.recv() => Some(Signal::SIGHUP),
        };
        if let Some(sig) = forwarded {
            stopper.iter().for_each(|s| s.forward(sig));
            if stopping.is_none() {
                stopping = Some(Stopping::Signal(sig));
            }
            // SIGKILL after the grace, and never later than the lease allows.
            let by = auth.now().plus_ms(grace_ms).min(keeper.stopped_by());
            kill_at = Some(kill_at.map_or(by, |k| k.min(by)));
        }
    }
}

/// Sleeps until the authority's clock reaches `t`; forever when `None`.
async fn sleep_until<S: Store>(auth: &baton_core::Authority<S>, t: Option<Timestamp>) {
    let Some(t) = t else {
        return std::future::pending().await;
    };
    loop {
        let now = auth.now();
        if now >= t {
            return;
        }
        let left = u64::try_from(t.as_millis() - now.as_millis()).unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(left.min(20))).await;
    }
}

fn child_status(status: &std::process::ExitStatus) -> Value {
    match (status.code(), status.signal()) {
        (Some(code), _) => json!({"exit_code": code}),
        (None, Some(sig)) => {
            let name = Signal::try_from(sig)
                .map_or_else(|_| format!("SIG{sig}"), |s| s.as_str().to_owned());
            json!({"signal": name})
        }
        (None, None) => Value::Null,
    }
}

/// A failure's error: the child's status, with the end of what it wrote
/// to its standard error (`stderr_tail`; `stderr_cut` bytes before it left
/// out).
fn with_tail(status: Value, tail: Option<&crate::tail::Tail>) -> Value {
    let Some(t) = tail else {
        return status;
    };
    let mut error = match status {
        Value::Object(m) => m,
        other => serde_json::Map::from_iter([("status".to_owned(), other)]),
    };
    error.insert("stderr_tail".to_owned(), Value::from(t.text.clone()));
    if t.cut > 0 {
        error.insert("stderr_cut".to_owned(), Value::from(t.cut));
    }
    Value::Object(error)
}

/// Hashes each evidence file (`sha256:HEX`), or says which cannot be read.
fn hash_evidence(files: &[(String, PathBuf)]) -> Result<BTreeMap<String, String>, Value> {
    let mut out = BTreeMap::new();
    for (key, path) in files {
        match hash_file(path) {
            Ok(hash) => {
                out.insert(key.clone(), hash);
            }
            Err(e) => {
                return Err(json!({
                    "code": "evidence_unreadable",
                    "key": key,
                    "path": path.display().to_string(),
                    "message": e.to_string(),
                }));
            }
        }
    }
    Ok(out)
}

/// The file at `path` as a piece of evidence: `sha256:HEX` of its bytes.
pub fn hash_file(path: &std::path::Path) -> std::io::Result<String> {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    std::fs::File::open(path).and_then(|mut f| std::io::copy(&mut f, &mut hasher))?;
    Ok(format!(
        "sha256:{}",
        hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    ))
}

/// The run's report as a person reads it: what happened, under which
/// grant, how long it took.
fn report_sentence(r: &Value) -> String {
    let s = |v: &Value| match v {
        Value::String(s) => output::escape_unprintable(s),
        Value::Null => "-".to_owned(),
        v => v.to_string(),
    };
    let child = match (&r["child"]["exit_code"], &r["child"]["signal"]) {
        (Value::Number(n), _) => format!("the command exited {n}"),
        (_, Value::String(sig)) => format!("the command was ended by {sig}"),
        _ => "the command did not run".to_owned(),
    };
    let who = match (&r["owner"], &r["executor"]) {
        (Value::String(o), _) => output::escape_unprintable(o),
        (_, e) => s(e),
    };
    let mut line = format!(
        "baton run: {} {}: {child}; fence {}, attempt {}, held by {who}, {} with {} renewals (exit {})",
        s(&r["task"]),
        s(&r["outcome"]),
        s(&r["fence"]),
        s(&r["attempt"]),
        r["duration_ms"]
            .as_u64()
            .map_or_else(|| "-".to_owned(), output::duration),
        s(&r["renewals"]),
        s(&r["exit"]),
    );
    if let Some(reason) = r["reason"].as_str().filter(|r| !r.starts_with('{')) {
        line.push_str(&format!(": {}", output::escape_unprintable(reason)));
    }
    line
}

#[allow(clippy::too_many_arguments)]
fn write_report(
    spec: &Spec,
    grant: &Grant,
    child: Option<Value>,
    report: &Report,
    opened_at: Timestamp,
    ended_at: Timestamp,
    started: Instant,
    renewals: u64,
) -> Value {
    let mut body = json!({
        "outcome": report.outcome,
        "task": grant.task.as_str(),
        "fence": grant.fence,
        "attempt": grant.attempt,
        "lease_expiry": grant.expiry,
        "child": child,
        "exit": report.exit,
        "renewals": renewals,
        "started_at": opened_at,
        "ended_at": ended_at,
        "duration_ms": u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    });
    match &spec.holder {
        Holder::Bare { owner, .. } => body["owner"] = json!(owner.as_str()),
        Holder::Declared { run, executor } => {
            body["run"] = json!(run.as_str());
            body["executor"] = json!(executor.as_str());
        }
    }
    if let Some(r) = &report.reason {
        body["reason"] = json!(r);
    }
    let line = if spec.human && spec.report.is_none() {
        report_sentence(&body)
    } else {
        body.to_string()
    };
    match &spec.report {
        Some(path) => {
            let written = if spec.count > 1 {
                use std::io::Write;
                std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(path)
                    .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()))
            } else {
                std::fs::write(path, format!("{line}\n"))
            };
            if let Err(e) = written {
                output::write_stderr(&format!(
                    "{{\"warning\": \"cannot write the report to {}: {e}\"}}",
                    path.display()
                ));
                output::write_stderr(&line);
            }
        }
        None => output::write_stderr(&line),
    }
    body
}
