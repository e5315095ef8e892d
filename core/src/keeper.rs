//! The lease keeper: holds a grant for its holder. It renews in the
//! background, retries a renewal the store could not answer, and says —
//! before the lease can end — when the holder must stop: a refused renewal
//! at once, or no renewal confirmed by `expiry - grace - margin`. Time is
//! the authority's clock, so tests drive it with a [`crate::ManualClock`].
//!
//! The keeper only schedules and reports; what a renewal may do is the
//! decision's, like every other request.

use crate::authority::{Authority, Reply};
use crate::error::{Error, ErrorKind, Result};
use crate::id::Id;
use crate::model::Grant;
use crate::refusal::Refusal;
use crate::store::Store;
use crate::time::Timestamp;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How a keeper holds its grant. Every field has a default fitted to the
/// grant's TTL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeepOptions {
    /// The TTL each renewal asks for (default: the grant's own length).
    pub ttl_ms: Option<u64>,
    /// How often to renew (default: a third of the TTL).
    pub renew_every_ms: Option<u64>,
    /// How long the holder needs between being told to stop and being
    /// stopped (a child's SIGTERM to SIGKILL); at most a third of the TTL.
    pub grace_ms: u64,
    /// Kept between the holder's stop and the lease's end, for the time a
    /// kill takes and the store's clock running ahead (default: a tenth of
    /// the TTL, from 50 ms to 1 s; at most a fifth of the TTL).
    pub margin_ms: Option<u64>,
    /// The run a declared task's grant is bound to, which finishing
    /// succeeds or fails; `None` for a bare task.
    pub run_id: Option<Id>,
}

/// Why the holder must stop.
#[derive(Debug, Clone)]
pub enum Loss {
    /// The store refused a renewal: the grant is gone (stale, expired, ended).
    Refused(Refusal),
    /// No renewal was confirmed in time; the last error the store gave.
    Unrenewed { error: Option<Error> },
    /// The attempt reaches its run-time limit (the task's `timeout`) at
    /// `at`: no renewal can extend the lease, and the holder stops now.
    TimedOut { at: Timestamp },
}

impl Loss {
    /// One line for people.
    pub fn describe(&self) -> String {
        match self {
            Loss::Refused(r) => format!("the store refused a renewal: {r}"),
            Loss::Unrenewed { error: Some(e) } => {
                format!("no renewal was confirmed in time (last: {e})")
            }
            Loss::Unrenewed { error: None } => "no renewal was confirmed in time".to_owned(),
            Loss::TimedOut { at } => format!("the attempt reaches its run-time limit at {at}"),
        }
    }
}

/// How the holder's work ended, for [`Keeper::finish`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Done: completes a bare task, succeeds a declared one with this evidence.
    Success { evidence: BTreeMap<String, String> },
    /// Failed, described by a JSON object.
    Failure { error: Value },
}

/// What the keeper knows now.
#[derive(Debug, Clone)]
pub struct Kept {
    /// The grant as last confirmed (its expiry moves with each renewal).
    pub grant: Grant,
    /// Renewals the store confirmed.
    pub renewals: u64,
    /// Renewals the store could not answer (each retried).
    pub retries: u64,
    /// Set once, when the holder must stop; the keeper renews no more.
    pub lost: Option<Loss>,
    /// An operator asked the holder to stop (seen in a renewal's answer):
    /// the lease still holds, and the keeper keeps renewing it while the
    /// work stops; giving the task back ([`Keeper::release`]) cancels it.
    pub cancel_requested: Option<crate::model::CancelRequest>,
}

/// The schedule a keeper follows, resolved from [`KeepOptions`] and the grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    pub ttl_ms: u64,
    pub renew_every_ms: u64,
    pub grace_ms: u64,
    pub margin_ms: u64,
}

impl Schedule {
    /// The schedule for `grant` under `opts`: grace and margin are capped
    /// so that, after a confirmed renewal, a retry still has time before
    /// the holder is told to stop.
    pub fn new(grant: &Grant, opts: &KeepOptions) -> Schedule {
        let own =
            u64::try_from(grant.expiry.as_millis() - grant.claimed_at.as_millis()).unwrap_or(0);
        let ttl_ms = opts.ttl_ms.unwrap_or(own).max(1);
        let renew_every_ms = opts.renew_every_ms.unwrap_or(ttl_ms / 3).clamp(1, ttl_ms);
        let grace_ms = opts.grace_ms.min(ttl_ms / 3);
        let margin_ms = opts
            .margin_ms
            .unwrap_or((ttl_ms / 10).clamp(50, 1000))
            .min(ttl_ms / 5);
        Schedule {
            ttl_ms,
            renew_every_ms,
            grace_ms,
            margin_ms,
        }
    }

    /// When the holder is told to stop if nothing more is confirmed.
    pub fn stop_at(&self, expiry: Timestamp) -> Timestamp {
        minus(expiry, self.grace_ms.saturating_add(self.margin_ms))
    }

    /// When the holder must have stopped: `margin` before the lease ends.
    pub fn stopped_by(&self, expiry: Timestamp) -> Timestamp {
        minus(expiry, self.margin_ms)
    }
}

fn minus(t: Timestamp, ms: u64) -> Timestamp {
    Timestamp::from_millis(
        t.as_millis()
            .saturating_sub(i64::try_from(ms).unwrap_or(i64::MAX)),
    )
}

/// The longest the keeper sleeps before looking at the clock again, so a
/// clock moved by hand (tests) is noticed promptly.
const TICK: Duration = Duration::from_millis(20);
/// The first wait before retrying a renewal the store did not answer.
const FIRST_BACKOFF_MS: u64 = 25;

/// Keeps a grant renewed until it is released, finished, dropped or lost.
#[derive(Debug)]
pub struct Keeper<S: Store + 'static> {
    auth: Arc<Authority<S>>,
    schedule: Schedule,
    run_id: Option<Id>,
    state: watch::Receiver<Kept>,
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl<S: Store + 'static> Authority<S> {
    /// Starts keeping `grant` (from a claim or task claim of this
    /// authority) on the current tokio runtime.
    pub fn keep(self: &Arc<Self>, grant: Grant, opts: KeepOptions) -> Keeper<S> {
        let schedule = Schedule::new(&grant, &opts);
        let (tx, rx) = watch::channel(Kept {
            grant,
            renewals: 0,
            retries: 0,
            lost: None,
            cancel_requested: None,
        });
        let (stop, stop_rx) = watch::channel(false);
        let first = self.now().plus_ms(schedule.renew_every_ms);
        let task = tokio::spawn(renew_loop(
            Arc::clone(self),
            schedule,
            first,
            opts.ttl_ms,
            tx,
            stop_rx,
        ));
        Keeper {
            auth: Arc::clone(self),
            schedule,
            run_id: opts.run_id,
            state: rx,
            stop,
            task: Some(task),
        }
    }
}

impl<S: Store + 'static> Keeper<S> {
    pub fn schedule(&self) -> Schedule {
        self.schedule
    }

    /// What the keeper knows now.
    pub fn kept(&self) -> Kept {
        self.state.borrow().clone()
    }

    /// Whether an operator asked the holder to stop (cooperative cancellation).
    pub fn cancel_requested(&self) -> Option<crate::model::CancelRequest> {
        self.state.borrow().cancel_requested.clone()
    }

    /// The grant as last confirmed.
    pub fn grant(&self) -> Grant {
        self.state.borrow().grant.clone()
    }

    /// When the holder is told to stop unless a renewal is confirmed first.
    pub fn stop_at(&self) -> Timestamp {
        self.schedule.stop_at(self.state.borrow().grant.expiry)
    }

    /// When the holder must have stopped: before the lease can end.
    pub fn stopped_by(&self) -> Timestamp {
        self.schedule.stopped_by(self.state.borrow().grant.expiry)
    }

    /// Why the holder must stop, once it must.
    pub fn lost(&self) -> Option<Loss> {
        self.state.borrow().lost.clone()
    }

    /// Waits until the holder must stop, and says why.
    pub async fn wait_lost(&self) -> Loss {
        let mut rx = self.state.clone();
        loop {
            if let Some(l) = rx.borrow_and_update().lost.clone() {
                return l;
            }
            if rx.changed().await.is_err() {
                // The loop ended without a loss (stopped): nothing more will come.
                return std::future::pending().await;
            }
        }
    }

    /// Waits until a renewal's answer shows that an operator asked the
    /// holder to stop (pending forever if none ever does).
    pub async fn wait_cancel_requested(&self) -> crate::model::CancelRequest {
        let mut rx = self.state.clone();
        loop {
            if let Some(c) = rx.borrow_and_update().cancel_requested.clone() {
                return c;
            }
            if rx.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// Changes to what the keeper knows, as they happen.
    pub fn watch(&self) -> watch::Receiver<Kept> {
        self.state.clone()
    }

    /// Stops renewing and waits for the loop to end.
    async fn halt(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }

    /// Stops renewing and gives the task back.
    pub async fn release(mut self) -> Result<Reply> {
        self.halt().await;
        let g = self.grant();
        retry_report(|| self.auth.release(&g.task, &g.owner, g.fence)).await
    }

    /// Stops renewing and reports how the work ended: completes or fails a
    /// bare task, succeeds or fails a declared one. A report the store did
    /// not answer is sent again (a repeat is acknowledged, not applied twice).
    pub async fn finish(mut self, outcome: Outcome) -> Result<Reply> {
        self.halt().await;
        let g = self.grant();
        let a = &self.auth;
        match (&self.run_id, outcome) {
            (None, Outcome::Success { .. }) => {
                retry_report(|| a.complete(&g.task, &g.owner, g.fence)).await
            }
            (None, Outcome::Failure { error }) => {
                retry_report(|| a.fail(&g.task, &g.owner, g.fence, Some(error.clone()))).await
            }
            (Some(run), Outcome::Success { evidence }) => {
                retry_report(|| a.succeed(&g.task, run, &g.owner, g.fence, evidence.clone())).await
            }
            (Some(run), Outcome::Failure { error }) => {
                retry_report(|| a.task_fail(&g.task, run, &g.owner, g.fence, error.clone())).await
            }
        }
    }
}

/// How a kept grant ends when it ends with others ([`Keeper::report_all`]).
#[derive(Debug, Clone)]
pub enum Ending {
    /// Completed or failed, as [`Keeper::finish`] reports it.
    Finish(Outcome),
    /// Given back, as [`Keeper::release`].
    Release,
}

impl<S: Store + 'static> Keeper<S> {
    /// Stops renewing each grant and reports them all in one call
    /// ([`Authority::report_many`]: each decided on its own fence, one
    /// commit where the store batches). Bare grants only: a declared
    /// task's run reports alone. Sent again while the store does not
    /// answer (a repeat is acknowledged, not applied twice).
    pub async fn report_all(kept: Vec<(Keeper<S>, Ending)>) -> Result<Vec<Reply>> {
        let Some(auth) = kept.first().map(|(k, _)| Arc::clone(&k.auth)) else {
            return Ok(Vec::new());
        };
        let mut reports = Vec::with_capacity(kept.len());
        for (mut k, ending) in kept {
            if k.run_id.is_some() {
                return Err(crate::Error::invalid(
                    "reports",
                    "a declared task's run reports on its own (finish)",
                ));
            }
            k.halt().await;
            let g = k.grant();
            let request = match ending {
                Ending::Finish(Outcome::Success { .. }) => crate::Request::Complete {
                    owner: g.owner,
                    fence: g.fence,
                },
                Ending::Finish(Outcome::Failure { error }) => crate::Request::Fail {
                    owner: g.owner,
                    fence: g.fence,
                    error: Some(error),
                },
                Ending::Release => crate::Request::Release {
                    owner: g.owner,
                    fence: g.fence,
                },
            };
            reports.push((g.task, request));
        }
        retry_report(|| auth.report_many(reports.clone())).await
    }
}

impl<S: Store + 'static> Drop for Keeper<S> {
    /// Dropping a keeper stops its renewals.
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// How many times a report is sent while the store does not answer.
const REPORT_TRIES: u32 = 8;

/// Sends a report until the store answers it (bounded, with backoff).
async fn retry_report<T, F, Fut>(mut send: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut wait = FIRST_BACKOFF_MS * 2;
    let mut tries = 0;
    loop {
        match send().await {
            Err(e) if retryable(&e) && tries + 1 < REPORT_TRIES => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(jitter(wait))).await;
                wait = (wait * 2).min(2_000);
            }
            other => return other,
        }
    }
}

fn retryable(e: &Error) -> bool {
    matches!(e.kind, ErrorKind::Unavailable | ErrorKind::Indeterminate)
}

/// `ms` give or take a quarter, so holders that failed together do not retry together.
fn jitter(ms: u64) -> u64 {
    let spread = (ms / 2).max(1);
    // A fresh std hasher key is random enough to spread retries.
    let noise =
        std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), ms);
    let r = noise % (spread + 1);
    ms - ms / 4 + r
}

/// Sleeps until the authority's clock reaches `t` (or `stop` is set).
async fn sleep_until<S: Store>(auth: &Authority<S>, t: Timestamp) {
    loop {
        let now = auth.now();
        if now >= t {
            return;
        }
        let left = u64::try_from(t.as_millis() - now.as_millis()).unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(left).min(TICK)).await;
    }
}

async fn renew_loop<S: Store + 'static>(
    auth: Arc<Authority<S>>,
    schedule: Schedule,
    first: Timestamp,
    ttl_ms: Option<u64>,
    state: watch::Sender<Kept>,
    mut stop: watch::Receiver<bool>,
) {
    let mut next = first;
    let mut backoff = FIRST_BACKOFF_MS;
    let mut last_error: Option<Error> = None;
    let lose = |loss: Loss| {
        state.send_modify(|k| k.lost = Some(loss));
    };
    loop {
        let kept = state.borrow().clone();
        let stop_at = schedule.stop_at(kept.grant.expiry);
        if *stop.borrow() {
            return;
        }
        // Wait for the next renewal, unless the holder must stop first (a
        // stop asked for wins over anything else ready at the same time).
        tokio::select! {
            biased;
            _ = stop.changed() => return,
            _ = sleep_until(&auth, stop_at) => {
                lose(if kept.grant.at_limit() {
                    Loss::TimedOut { at: kept.grant.expiry }
                } else {
                    Loss::Unrenewed { error: last_error }
                });
                return;
            }
            _ = sleep_until(&auth, next) => {}
        }
        // The renewal runs as a task of its own: an embedded store may
        // block the thread that calls it (SQLite's busy wait inside
        // `block_in_place`), and that must not hold up this loop's
        // deadline, which another worker of the runtime then keeps.
        let mut renewal = {
            let auth = Arc::clone(&auth);
            let g = kept.grant.clone();
            let ttl = ttl_ms.or(Some(schedule.ttl_ms));
            tokio::spawn(async move { auth.renew(&g.task, &g.owner, g.fence, ttl).await })
        };
        let answer = tokio::select! {
            biased;
            _ = stop.changed() => {
                renewal.abort();
                return;
            }
            _ = sleep_until(&auth, stop_at) => {
                renewal.abort();
                lose(Loss::Unrenewed { error: last_error });
                return;
            }
            a = &mut renewal => a.unwrap_or_else(|e| {
                Err(Error::unavailable(format!("the renewal did not finish: {e}")))
            }),
        };
        match answer {
            Ok(reply) => match (reply.refusal().cloned(), reply.grant()) {
                (Some(r), _) => {
                    lose(Loss::Refused(r));
                    return;
                }
                (None, Some(grant)) => {
                    let asked = reply.record().and_then(|r| r.cancel_requested.clone());
                    state.send_modify(|k| {
                        k.grant = grant;
                        k.renewals += 1;
                        if k.cancel_requested.is_none() {
                            k.cancel_requested = asked;
                        }
                    });
                    backoff = FIRST_BACKOFF_MS;
                    last_error = None;
                    next = auth.now().plus_ms(schedule.renew_every_ms);
                }
                (None, None) => {
                    lose(Loss::Refused(Refusal::NotHolder { holder: None }));
                    return;
                }
            },
            Err(e) if retryable(&e) => {
                state.send_modify(|k| k.retries += 1);
                last_error = Some(e);
                next = auth.now().plus_ms(jitter(backoff));
                backoff = (backoff * 2).min((schedule.renew_every_ms / 2).max(FIRST_BACKOFF_MS));
            }
            // The store cannot be trusted or the request is wrong: renewing
            // again will not help, and the holder must stop.
            Err(e) => {
                lose(Loss::Unrenewed { error: Some(e) });
                return;
            }
        }
    }
}
