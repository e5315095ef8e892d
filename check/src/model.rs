//! The sequential model of one bare task, as a [`Specification`] for the
//! linearizability checker.
//!
//! A step is an operation with its answer and the window of real time in
//! which the store decided it (`[invoked, returned]`, or up to the end of
//! time when no answer came). The store reads its clock inside that window
//! and before the step takes effect (a read may be stale by the time it
//! does: a writer waiting for a lock). The model keeps, besides the task's
//! lease, `t`: the earliest real time the last step placed so far can have
//! taken effect, so that steps placed later take effect later, and each
//! lease's end as a window (`end_lo` ≤ end ≤ `end_hi`: the TTL after the
//! earliest and the latest clock read of the grant or renewal that set it).
//! A lease is judged live by a clock read no earlier than the step's
//! invocation, and over by one no later than its return. A store may judge a lease over up to `skew` before
//! its end by the real clock (the clock skew the run allows), and live up to
//! `overstay` after (a lease the engine keeps a little longer); a grant to
//! another owner before `end_lo + lock delay - skew` is never linearizable.
//!
//! The rules are SPEC §4's for bare tasks: a claim is granted when no other
//! owner's lease is live and the task is not terminal, with a fence higher
//! than any the task had; the holder's own claim while live is a regrant;
//! a request under a fence is checked fence first, owner next, then the
//! closure it repeats, then the lease (expired by time, or given back).

use crate::history::{Observed, Req};
use baton_core::State;
use todc_utils::Specification;

/// What a run allows its store, in microseconds, and the store's TTL rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limits {
    /// How much before a lease's end a store may judge it over (clock skew
    /// between the clocks that stamp and judge leases).
    pub skew_us: u64,
    /// How much after its end a store may still judge a lease live.
    pub overstay_us: u64,
    /// The store's TTL granularity and shortest TTL (its capabilities), in ms.
    pub granularity_ms: u64,
    pub min_ttl_ms: u64,
}

impl Limits {
    /// The TTL the store gives a request for `ttl_ms` (as
    /// `baton_core::decide::LeaseRules::effective`).
    pub fn effective_ttl_ms(&self, ttl_ms: u64) -> u64 {
        let g = self.granularity_ms.max(1);
        ttl_ms.div_ceil(g).saturating_mul(g).max(self.min_ttl_ms)
    }

    fn ttl_us(&self, ttl_ms: u64) -> u64 {
        self.effective_ttl_ms(ttl_ms).saturating_mul(1000)
    }
}

impl From<baton_core::Capabilities> for Limits {
    /// A store's TTL rules, with no skew or overstay allowed.
    fn from(c: baton_core::Capabilities) -> Limits {
        Limits {
            skew_us: 0,
            overstay_us: 0,
            granularity_ms: c.ttl_granularity_ms,
            min_ttl_ms: c.min_ttl_ms,
        }
    }
}

/// A lease as an answer showed it, with its owner as a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shown {
    pub owner: u32,
    pub fence: u64,
    pub expired: bool,
}

/// An answer with owners as numbers; `None` in [`Step::answer`] is "may
/// have applied".
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Obs {
    Done {
        ack: bool,
        /// The answer's record is CANCELLED.
        cancelled: bool,
        lease: Option<Shown>,
        /// The steps the answer's record holds.
        steps: Vec<String>,
    },
    Refused {
        reason: String,
        current_fence: Option<u64>,
        holder: Option<u32>,
    },
    Holder {
        lease: Option<Shown>,
        live: bool,
    },
    Verified {
        current: bool,
        live: bool,
        state: State,
        current_fence: Option<u64>,
    },
}

/// One operation of one task as the checker sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Step {
    pub owner: u32,
    pub req: Req,
    pub answer: Option<Obs>,
    pub invoked: u64,
    /// `u64::MAX` when no answer came.
    pub returned: u64,
    pub limits: Limits,
}

impl Step {
    /// The step for an answer, with `owner_of` numbering owners; `None`
    /// for an answer that says nothing happened (unavailable).
    pub fn new(
        owner: u32,
        req: Req,
        answer: Option<&Observed>,
        invoked: u64,
        returned: u64,
        limits: Limits,
        mut owner_of: impl FnMut(&str) -> u32,
    ) -> Option<Step> {
        let mut shown = |s: &Option<crate::history::Seen>| {
            s.as_ref().map(|s| Shown {
                owner: owner_of(&s.owner),
                fence: s.fence,
                expired: s.expired,
            })
        };
        let answer = match answer {
            None => None,
            Some(Observed::Done {
                ack,
                lease,
                state,
                steps,
            }) => Some(Obs::Done {
                ack: *ack,
                cancelled: *state == State::Cancelled,
                lease: shown(lease),
                steps: steps.clone(),
            }),
            Some(Observed::Holder { lease, live }) => Some(Obs::Holder {
                lease: shown(lease),
                live: *live,
            }),
            Some(Observed::Verified {
                current,
                live,
                state,
                current_fence,
            }) => Some(Obs::Verified {
                current: *current,
                live: *live,
                state: *state,
                current_fence: *current_fence,
            }),
            Some(Observed::Refused {
                reason,
                current_fence,
                holder,
                ..
            }) => Some(Obs::Refused {
                reason: reason.clone(),
                current_fence: *current_fence,
                holder: holder.as_deref().map(owner_of),
            }),
            Some(
                Observed::Unavailable { .. }
                | Observed::Error { .. }
                | Observed::Unknown { .. }
                | Observed::Admitted { .. },
            ) => {
                return None;
            }
        };
        Some(Step {
            owner,
            req,
            answer,
            invoked,
            returned,
            limits,
        })
    }
}

/// Where the task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Phase {
    /// Never granted, given back, or its lease settled as expired.
    #[default]
    Free,
    /// A grant whose lease has not been seen to end by a write.
    Held,
    Succeeded,
    Failed,
    Cancelled,
}

impl Phase {
    fn terminal(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed | Phase::Cancelled)
    }
}

/// Whether a write has marked the lease as ended by time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tri {
    No,
    Yes,
    /// An operator's cancel whose answer never came: either.
    Maybe,
}

/// The last grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeaseState {
    pub owner: u32,
    /// `None` for a grant whose answer never came, until a later answer shows it.
    pub fence: Option<u64>,
    pub end_lo: u64,
    pub end_hi: u64,
    pub delay_us: u64,
    pub expired: Tri,
    pub released: bool,
}

/// The request that closed the task, and its fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Close {
    Complete,
    Fail,
    Cancel,
    /// A release by a holder asked to stop: the cancel.
    Release,
}

/// One task's state in the model.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct TaskState {
    pub t: u64,
    pub exists: bool,
    pub phase: Phase,
    pub lease: Option<LeaseState>,
    pub max_fence: u64,
    pub closure: Option<(Close, Option<u64>)>,
    /// An operator asked the holder to stop: the task is CANCELLED once
    /// the holder gives it back or its lease ends.
    pub cancel_requested: bool,
    /// The steps recorded (`checkpoint`), by name.
    pub steps: std::collections::BTreeMap<String, Recorded>,
}

/// A step as recorded: its output (JSON text), the fence it was recorded
/// under, and whether an answer showed it (`false`: its checkpoint's
/// answer never came, so it may not have been applied).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Recorded {
    pub output: String,
    pub fence: u64,
    pub sure: bool,
}

/// The specification the checker runs.
#[derive(Debug)]
pub struct TaskSpec;

impl Specification for TaskSpec {
    type State = TaskState;
    type Operation = Step;

    fn init() -> TaskState {
        TaskState::default()
    }

    fn apply(step: &Step, state: &TaskState) -> (bool, TaskState) {
        match step.apply(state) {
            Some(next) => (true, next),
            None => (false, state.clone()),
        }
    }
}

fn check(ok: bool) -> Option<()> {
    ok.then_some(())
}

impl TaskState {
    /// The lease may still be live by a clock read at or after `at`.
    fn may_live(&self, at: u64, lim: &Limits) -> bool {
        self.phase == Phase::Held
            && self
                .lease
                .is_some_and(|l| at < l.end_hi.saturating_add(lim.overstay_us))
    }

    /// The lease may be over by `ret` (or is not held at all).
    fn may_end(&self, ret: u64, lim: &Limits) -> bool {
        self.phase != Phase::Held
            || self
                .lease
                .is_some_and(|l| ret.saturating_add(lim.skew_us) >= l.end_lo)
    }

    /// The earliest a step at `lo` can take effect once it found the lease
    /// over: its clock read (made before it took effect) was past the end.
    fn after_end(&self, lo: u64, lim: &Limits) -> u64 {
        match (self.phase, self.lease) {
            (Phase::Held, Some(l)) => lo.max(l.end_lo.saturating_sub(lim.skew_us)),
            _ => lo,
        }
    }

    /// A write found the lease over: the store marked it expired.
    fn settle(&mut self) {
        if self.phase == Phase::Held {
            self.phase = Phase::Free;
            if let Some(l) = self.lease.as_mut() {
                l.expired = Tri::Yes;
                if self.cancel_requested {
                    self.phase = Phase::Cancelled;
                    self.closure = Some((Close::Cancel, l.fence));
                }
            }
        }
    }

    /// The lease is held by a holder asked to stop: once it ends, the task
    /// is CANCELLED rather than free.
    fn ends_cancelled(&self) -> bool {
        self.phase == Phase::Held && self.cancel_requested
    }

    /// An answer showed the lease's fence: it must be the one the model has,
    /// or, for a grant whose answer never came, become it.
    fn pin(&mut self, fence: u64) -> Option<()> {
        let max = self.max_fence;
        let l = self.lease.as_mut()?;
        match l.fence {
            Some(f) => check(f == fence),
            None => {
                check(fence > max)?;
                l.fence = Some(fence);
                self.max_fence = fence;
                Some(())
            }
        }
    }

    /// An answer's record showed `shown` steps: every step known to be
    /// recorded is among them, and each of them was recorded (a step
    /// whose answer never came is now known either way).
    fn carried(&mut self, shown: &[String]) -> Option<()> {
        check(shown.iter().all(|st| self.steps.contains_key(st)))?;
        check(
            self.steps
                .iter()
                .all(|(st, r)| !r.sure || shown.contains(st)),
        )?;
        self.steps.retain(|st, _| shown.contains(st));
        for r in self.steps.values_mut() {
            r.sure = true;
        }
        Some(())
    }

    /// Whether the lease's fence may be `fence` (without pinning it).
    fn fence_may_be(&self, fence: u64) -> bool {
        self.lease.is_some_and(|l| match l.fence {
            Some(f) => f == fence,
            None => fence > self.max_fence,
        })
    }
}

impl Step {
    fn apply(&self, s: &TaskState) -> Option<TaskState> {
        let lo = s.t.max(self.invoked);
        check(lo <= self.returned)?;
        let mut n = s.clone();
        n.t = lo;
        match &self.req {
            Req::Claim {
                ttl_ms,
                lock_delay_ms,
            } => self.claim(s, n, lo, *ttl_ms, *lock_delay_ms),
            Req::Renew { fence, ttl_ms } => self.under_fence(s, n, lo, *fence, None, Some(*ttl_ms)),
            Req::Release { fence } => {
                let close = (s.cancel_requested
                    || s.closure == Some((Close::Release, Some(*fence))))
                .then_some(Close::Release);
                self.under_fence(s, n, lo, *fence, close, None)
            }
            Req::Complete { fence } => {
                self.under_fence(s, n, lo, *fence, Some(Close::Complete), None)
            }
            Req::Fail { fence } => self.under_fence(s, n, lo, *fence, Some(Close::Fail), None),
            Req::Cancel { fence } => self.under_fence(s, n, lo, *fence, Some(Close::Cancel), None),
            Req::OperatorCancel => self.operator_cancel(s, n, lo),
            Req::Holder => self.read(s, n, lo, None),
            Req::Verify { fence } => self.read(s, n, lo, Some(*fence)),
            Req::Checkpoint {
                fence,
                step,
                output,
            } => self.checkpoint(s, n, lo, *fence, step, output),
            // Checked by the guard's model; the task's record is untouched.
            Req::Write { .. } => Some(n),
        }
    }

    fn claim(
        &self,
        s: &TaskState,
        mut n: TaskState,
        lo: u64,
        ttl_ms: u64,
        delay_ms: u64,
    ) -> Option<TaskState> {
        let lim = &self.limits;
        let live_regrant =
            s.may_live(self.invoked, lim) && s.lease.is_some_and(|l| l.owner == self.owner);
        // The earliest time a grant to anyone can be made once the lease
        // ended, lock delay included; `None` when the window rules it out.
        let grant_at = |ret: u64| -> Option<u64> {
            check(s.may_end(ret, lim) && !s.ends_cancelled())?;
            let mut at = s.after_end(lo, lim);
            if let Some(l) = s.lease {
                let expired = s.phase == Phase::Held || l.expired == Tri::Yes;
                if l.delay_us > 0 && !l.released && expired {
                    let free = l.end_lo.saturating_add(l.delay_us);
                    check(ret.saturating_add(lim.skew_us) >= free)?;
                    at = at.max(free.saturating_sub(lim.skew_us));
                }
            }
            Some(at)
        };
        let ttl = lim.ttl_us(ttl_ms);
        let grant = |n: &mut TaskState, at: u64, fence: Option<u64>| {
            n.t = at;
            n.exists = true;
            n.phase = Phase::Held;
            n.closure = None;
            if let Some(f) = fence {
                n.max_fence = f;
            }
            n.lease = Some(LeaseState {
                owner: self.owner,
                fence,
                end_lo: self.invoked.saturating_add(ttl),
                end_hi: self.returned.saturating_add(ttl),
                delay_us: delay_ms.saturating_mul(1000),
                expired: Tri::No,
                released: false,
            });
        };
        match &self.answer {
            None => {
                if !s.phase.terminal() {
                    let at = if live_regrant {
                        Some(lo)
                    } else {
                        grant_at(self.returned)
                    };
                    if let Some(at) = at {
                        grant(&mut n, at, None);
                    }
                }
                Some(n)
            }
            Some(Obs::Done {
                ack: false,
                lease: Some(g),
                steps,
                ..
            }) => {
                check(!s.phase.terminal() && g.owner == self.owner && !g.expired)?;
                check(g.fence > s.max_fence)?;
                // A grant carries every step recorded before it, and only those.
                n.carried(steps)?;
                let at = if live_regrant {
                    lo
                } else {
                    grant_at(self.returned)?
                };
                grant(&mut n, at, Some(g.fence));
                Some(n)
            }
            Some(Obs::Refused {
                reason,
                current_fence,
                holder,
            }) => match reason.as_str() {
                "held" => {
                    let l = s.lease?;
                    check(s.may_live(self.invoked, lim) && Some(l.owner) == *holder)?;
                    check(l.owner != self.owner)?;
                    n.pin((*current_fence)?)?;
                    Some(n)
                }
                "completed" => check(s.phase == Phase::Succeeded).map(|_| n),
                "illegal_transition" if s.ends_cancelled() => {
                    check(s.may_end(self.returned, lim))?;
                    n.t = s.after_end(lo, lim);
                    n.settle();
                    Some(n)
                }
                "illegal_transition" => {
                    check(matches!(s.phase, Phase::Failed | Phase::Cancelled)).map(|_| n)
                }
                "lock_delay" => {
                    let l = s.lease?;
                    let ended = (s.phase == Phase::Held && s.may_end(self.returned, lim))
                        || (s.phase == Phase::Free && l.expired == Tri::Yes);
                    check(ended && l.delay_us > 0 && !l.released && !s.cancel_requested)?;
                    let until = l.end_hi.saturating_add(l.delay_us);
                    check(self.invoked < until.saturating_add(lim.overstay_us))?;
                    n.t = s.after_end(lo, lim);
                    n.settle();
                    Some(n)
                }
                _ => None,
            },
            _ => None,
        }
    }

    /// Renew (`ttl`), release, and the closes (`close`) by the holder.
    fn under_fence(
        &self,
        s: &TaskState,
        mut n: TaskState,
        lo: u64,
        fence: u64,
        close: Option<Close>,
        ttl: Option<u64>,
    ) -> Option<TaskState> {
        let lim = &self.limits;
        let repeats = close.is_some_and(|c| s.closure == Some((c, Some(fence))));
        let success = |n: &mut TaskState| -> Option<()> {
            let l = n.lease.as_mut()?;
            match (close, ttl) {
                (None, Some(ttl_ms)) => {
                    let ttl = lim.ttl_us(ttl_ms);
                    l.end_lo = self.invoked.saturating_add(ttl);
                    l.end_hi = self.returned.saturating_add(ttl);
                }
                (None, None) => {
                    l.released = true;
                    n.phase = Phase::Free;
                }
                (Some(c), _) => {
                    n.phase = match c {
                        Close::Complete => Phase::Succeeded,
                        Close::Fail => Phase::Failed,
                        Close::Cancel | Close::Release => Phase::Cancelled,
                    };
                    n.closure = Some((c, Some(fence)));
                }
            }
            Some(())
        };
        let ours = s.lease.is_some_and(|l| l.owner == self.owner);
        match &self.answer {
            None => {
                if ours && !repeats && s.fence_may_be(fence) && s.may_live(self.invoked, lim) {
                    n.pin(fence)?;
                    success(&mut n)?;
                }
                Some(n)
            }
            Some(Obs::Done { ack, lease, .. }) => {
                check(ours)?;
                n.pin(fence)?;
                if *ack {
                    check(repeats).map(|_| n)
                } else {
                    check(!repeats && s.may_live(self.invoked, lim))?;
                    if let Some(g) = lease {
                        check(g.fence == fence && g.owner == self.owner)?;
                    }
                    success(&mut n)?;
                    Some(n)
                }
            }
            Some(Obs::Refused {
                reason,
                current_fence,
                holder,
            }) => match reason.as_str() {
                "not_holder" if holder.is_none() => check(s.lease.is_none()).map(|_| n),
                "not_holder" => {
                    let l = s.lease?;
                    check(Some(l.owner) == *holder && l.owner != self.owner)?;
                    n.pin(fence)?;
                    Some(n)
                }
                "stale_fence" => {
                    let current = (*current_fence)?;
                    check(current != fence)?;
                    n.pin(current)?;
                    Some(n)
                }
                "lease_expired" => {
                    check(ours && !repeats)?;
                    n.pin(fence)?;
                    let l = s.lease?;
                    if s.phase == Phase::Held {
                        check(s.may_end(self.returned, lim))?;
                        n.t = s.after_end(lo, lim);
                        n.settle();
                    } else {
                        check(l.expired != Tri::No)?;
                        if let Some(nl) = n.lease.as_mut() {
                            nl.expired = Tri::Yes;
                        }
                    }
                    Some(n)
                }
                "illegal_transition" => {
                    check(ours && !repeats && s.phase != Phase::Held)?;
                    n.pin(fence)?;
                    check(s.lease?.expired != Tri::Yes)?;
                    if let Some(nl) = n.lease.as_mut() {
                        nl.expired = Tri::No;
                    }
                    Some(n)
                }
                _ => None,
            },
            _ => None,
        }
    }

    /// A checkpoint: the holder's checks as every request under a fence
    /// (`under_fence`), then the step's rule: recorded once, never
    /// overwritten (the same output again is an acknowledgement, another a
    /// conflict).
    fn checkpoint(
        &self,
        s: &TaskState,
        mut n: TaskState,
        lo: u64,
        fence: u64,
        step: &str,
        output: &str,
    ) -> Option<TaskState> {
        let lim = &self.limits;
        let ours = s.lease.is_some_and(|l| l.owner == self.owner);
        let had = s.steps.get(step);
        let holds = |n: &mut TaskState| -> Option<()> {
            check(ours && s.phase == Phase::Held && s.may_live(self.invoked, lim))?;
            n.pin(fence)
        };
        match &self.answer {
            None => {
                if ours
                    && s.phase == Phase::Held
                    && s.fence_may_be(fence)
                    && s.may_live(self.invoked, lim)
                    && had.is_none_or(|r| !r.sure)
                {
                    n.pin(fence)?;
                    n.steps.insert(
                        step.to_owned(),
                        Recorded {
                            output: output.to_owned(),
                            fence,
                            sure: false,
                        },
                    );
                }
                Some(n)
            }
            Some(Obs::Done {
                ack: false, steps, ..
            }) => {
                holds(&mut n)?;
                // A recorded step is never overwritten.
                check(had.is_none_or(|r| !r.sure))?;
                n.steps.insert(
                    step.to_owned(),
                    Recorded {
                        output: output.to_owned(),
                        fence,
                        sure: true,
                    },
                );
                n.carried(steps)?;
                Some(n)
            }
            Some(Obs::Done {
                ack: true, steps, ..
            }) => {
                holds(&mut n)?;
                check(had.is_some_and(|r| r.output == output))?;
                n.carried(steps)?;
                Some(n)
            }
            Some(Obs::Refused { reason, .. }) if reason == "checkpoint_conflict" => {
                holds(&mut n)?;
                check(had.is_some_and(|r| r.output != output))?;
                if let Some(r) = n.steps.get_mut(step) {
                    r.sure = true;
                }
                Some(n)
            }
            // The holder's checks refused it, as any request under a fence.
            Some(Obs::Refused { .. }) => self.under_fence(s, n, lo, fence, None, Some(0)),
            _ => None,
        }
    }

    /// An operator's cancel (never forced by the recorder): a live lease's
    /// holder is asked to stop; a task nobody holds is CANCELLED.
    fn operator_cancel(&self, s: &TaskState, mut n: TaskState, lo: u64) -> Option<TaskState> {
        let lim = &self.limits;
        let cancel = |n: &mut TaskState| {
            n.phase = Phase::Cancelled;
            n.closure = Some((Close::Cancel, None));
        };
        match &self.answer {
            None => {
                if s.exists && s.phase == Phase::Held {
                    n.cancel_requested = true;
                } else if s.exists && s.phase == Phase::Free {
                    cancel(&mut n);
                }
                Some(n)
            }
            Some(Obs::Refused { reason, .. }) => match reason.as_str() {
                "not_found" => check(!s.exists).map(|_| n),
                "illegal_transition" => {
                    check(matches!(s.phase, Phase::Succeeded | Phase::Failed)).map(|_| n)
                }
                _ => None,
            },
            Some(Obs::Done { ack: true, .. }) => {
                check(s.phase == Phase::Cancelled || s.ends_cancelled()).map(|_| n)
            }
            Some(Obs::Done {
                ack: false,
                cancelled: false,
                lease,
                ..
            }) => {
                // The request, recorded: the holder's lease was live.
                check(s.phase == Phase::Held && !s.cancel_requested)?;
                check(s.may_live(self.invoked, lim))?;
                let (l, g) = (s.lease?, (*lease)?);
                check(l.owner == g.owner && !g.expired)?;
                n.pin(g.fence)?;
                n.cancel_requested = true;
                Some(n)
            }
            Some(Obs::Done {
                ack: false,
                cancelled: true,
                lease,
                ..
            }) => {
                check(s.exists && matches!(s.phase, Phase::Free | Phase::Held))?;
                check(!s.cancel_requested)?;
                match (s.lease, lease) {
                    (None, None) => {}
                    (Some(l), Some(g)) => {
                        check(l.owner == g.owner)?;
                        n.pin(g.fence)?;
                        if s.phase == Phase::Held {
                            // Not live, or it would have been a request.
                            check(g.expired && s.may_end(self.returned, lim))?;
                            n.t = s.after_end(lo, lim);
                        } else {
                            check(l.expired == if g.expired { Tri::Yes } else { Tri::No })?;
                        }
                        if let Some(nl) = n.lease.as_mut() {
                            nl.expired = if g.expired { Tri::Yes } else { Tri::No };
                        }
                    }
                    _ => return None,
                }
                cancel(&mut n);
                Some(n)
            }
            _ => None,
        }
    }

    /// `holder` (`fence` is `None`) and `verify`.
    fn read(
        &self,
        s: &TaskState,
        mut n: TaskState,
        lo: u64,
        fence: Option<u64>,
    ) -> Option<TaskState> {
        let lim = &self.limits;
        let live_at = |n: &mut TaskState, live: bool| -> Option<()> {
            if live {
                check(s.may_live(self.invoked, lim))
            } else {
                check(s.may_end(self.returned, lim))?;
                n.t = s.after_end(lo, lim);
                Some(())
            }
        };
        match &self.answer {
            Some(Obs::Refused { reason, .. }) if reason == "not_found" => {
                check(!s.exists).map(|_| n)
            }
            Some(Obs::Holder { lease, live }) if fence.is_none() => {
                check(s.exists)?;
                match (s.lease, lease) {
                    (None, None) => check(!live).map(|_| n),
                    (Some(l), Some(g)) => {
                        check(l.owner == g.owner)?;
                        n.pin(g.fence)?;
                        live_at(&mut n, *live)?;
                        Some(n)
                    }
                    _ => None,
                }
            }
            Some(Obs::Verified {
                current,
                live,
                state,
                current_fence,
            }) => {
                let asked = fence?;
                check(s.exists)?;
                match (s.lease, current_fence) {
                    (None, None) => {}
                    (Some(_), Some(f)) => n.pin(*f)?,
                    _ => return None,
                }
                live_at(&mut n, *live)?;
                check(*current == (*live && *current_fence == Some(asked)))?;
                let expected = match s.phase {
                    _ if *live => State::Claimed,
                    Phase::Held if s.cancel_requested => State::Cancelled,
                    Phase::Free | Phase::Held => State::Registered,
                    Phase::Succeeded => State::Succeeded,
                    Phase::Failed => State::Failed,
                    Phase::Cancelled => State::Cancelled,
                };
                check(*state == expected).map(|_| n)
            }
            _ => None,
        }
    }
}
