//! Checking a whole history: each task's operations against the model with
//! the linearizability checker (a history is linearizable exactly when
//! each object's is, so tasks are checked one at a time), and, outside the
//! checker, the store-wide facts about fences.

use crate::history::{Observed, Op, Req};
use crate::model::{Limits, Step, TaskSpec};
use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// What a check found.
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub ops: usize,
    pub tasks: usize,
    /// Grants whose answer came.
    pub grants: usize,
    /// Operations whose answer never came or said "may have applied".
    pub unknown: usize,
    pub unavailable: usize,
    /// Guarded writes to the clients' own storage that were admitted.
    pub writes: usize,
    /// Steps recorded (`checkpoint` answered as a new record).
    pub steps: usize,
    /// Steps sent again by their holder: acknowledged (the same output) or
    /// refused `checkpoint_conflict` (another).
    pub step_repeats: usize,
    /// How many answers of each kind (refusals by reason).
    pub answers: BTreeMap<String, usize>,
    pub violations: Vec<String>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }

    /// How many answers were refusals for `reason`.
    pub fn refused(&self, reason: &str) -> usize {
        self.answers.get(reason).copied().unwrap_or(0)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} operations on {} tasks: {} grants, {} unknown outcomes, {} unavailable",
            self.ops, self.tasks, self.grants, self.unknown, self.unavailable
        )?;
        let answers: Vec<String> = self
            .answers
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        writeln!(f, "answers: {}", answers.join(", "))?;
        if self.writes > 0 {
            writeln!(f, "{} guarded writes admitted", self.writes)?;
        }
        if self.steps > 0 {
            writeln!(
                f,
                "{} steps recorded, {} sent again by their holder",
                self.steps, self.step_repeats
            )?;
        }
        if self.ok() {
            writeln!(f, "linearizable; fences unique and in real-time order")
        } else {
            for v in &self.violations {
                writeln!(f, "VIOLATION: {v}")?;
            }
            Ok(())
        }
    }
}

/// Checks `ops` (every client's, every task's) under `limits`.
pub fn check(ops: &[Op], limits: Limits) -> Report {
    let mut report = Report {
        ops: ops.len(),
        ..Report::default()
    };
    let mut owners: HashMap<String, u32> = HashMap::new();
    let mut number = |o: &str| -> u32 {
        let next = u32::try_from(owners.len()).unwrap_or(u32::MAX);
        *owners.entry(o.to_owned()).or_insert(next)
    };
    let mut by_task: BTreeMap<&str, Vec<Step>> = BTreeMap::new();
    for op in ops {
        let kind = match &op.returned {
            None => "no answer".to_owned(),
            Some((_, Observed::Refused { reason, .. })) => reason.clone(),
            Some((_, a)) => answer_kind(a).to_owned(),
        };
        *report.answers.entry(kind).or_default() += 1;
        match (&op.req, &op.returned) {
            (Req::Checkpoint { .. }, Some((_, Observed::Done { ack: false, .. }))) => {
                report.steps += 1;
            }
            (Req::Checkpoint { .. }, Some((_, Observed::Done { ack: true, .. }))) => {
                report.step_repeats += 1;
            }
            (Req::Checkpoint { .. }, Some((_, a))) if a.reason() == Some("checkpoint_conflict") => {
                report.step_repeats += 1;
            }
            _ => {}
        }
        match &op.returned {
            Some((_, Observed::Unavailable { .. })) => {
                report.unavailable += 1;
                continue;
            }
            Some((_, Observed::Error { kind, message })) => {
                report.violations.push(format!(
                    "{} (client {} #{}, {:?}) answered an error: {kind}: {message}",
                    op.task, op.client, op.n, op.req
                ));
                continue;
            }
            _ => {}
        }
        if op.req.is_write_downstream() {
            continue; // the guard's model checks these, below
        }
        let known = op.known();
        if known.is_none() {
            report.unknown += 1;
            // A read whose answer never came changed nothing.
            if op.req.is_read() {
                continue;
            }
        }
        let returned = match (&op.returned, known) {
            (Some((t, _)), Some(_)) => *t,
            _ => u64::MAX,
        };
        let owner = number(&op.owner);
        let step = Step::new(
            owner,
            op.req.clone(),
            known,
            op.invoked,
            returned,
            limits,
            &mut number,
        );
        if let Some(step) = step {
            by_task.entry(op.task.as_str()).or_default().push(step);
        }
    }
    report.tasks = by_task.len();
    for (task, steps) in &by_task {
        if !linearizable(steps) {
            report.violations.push(format!(
                "task {task}: no order of its {} operations is allowed by the model\n{}",
                steps.len(),
                describe(steps)
            ));
        }
    }
    let grants = grants(ops);
    report.grants = grants.len();
    report.violations.extend(fence_order(&grants));
    let (writes, violations) = crate::writes::check_writes(ops);
    report.writes = writes;
    report.violations.extend(violations);
    report
}

fn answer_kind(a: &Observed) -> &'static str {
    match a {
        Observed::Done { ack: false, .. } => "done",
        Observed::Done { ack: true, .. } => "acknowledged",
        Observed::Refused { .. } => "refused",
        Observed::Holder { .. } => "holder",
        Observed::Verified { .. } => "verified",
        Observed::Admitted { .. } => "admitted",
        Observed::Unavailable { .. } => "unavailable",
        Observed::Unknown { .. } => "unknown",
        Observed::Error { .. } => "error",
    }
}

/// Whether some order of `steps` consistent with their real-time order is
/// allowed by the model.
pub fn linearizable(steps: &[Step]) -> bool {
    crate::search::search::<TaskSpec>(steps, |s| (s.invoked, s.returned))
}

fn describe(steps: &[Step]) -> String {
    let base = steps.iter().map(|s| s.invoked).min().unwrap_or(0);
    let mut sorted: Vec<&Step> = steps.iter().collect();
    sorted.sort_by_key(|s| s.invoked);
    let mut out = String::new();
    for s in sorted.iter().take(400) {
        let ret = if s.returned == u64::MAX {
            "?".to_owned()
        } else {
            format!("{:.3}", (s.returned - base) as f64 / 1e6)
        };
        out.push_str(&format!(
            "  [{:.3} .. {ret}] owner {} {:?} -> {:?}\n",
            (s.invoked - base) as f64 / 1e6,
            s.owner,
            s.req,
            s.answer
        ));
    }
    out
}

/// A grant whose answer came: (invoked, returned, fence, task).
type Granted<'a> = (u64, u64, u64, &'a str);

fn grants(ops: &[Op]) -> Vec<Granted<'_>> {
    ops.iter()
        .filter_map(|op| match (&op.req, &op.returned) {
            (
                Req::Claim { .. },
                Some((
                    t,
                    Observed::Done {
                        ack: false,
                        lease: Some(l),
                        ..
                    },
                )),
            ) => Some((op.invoked, *t, l.fence, op.task.as_str())),
            _ => None,
        })
        .collect()
}

/// Fences are unique store-wide, and a grant that began after another
/// returned has the higher fence (whatever the tasks).
fn fence_order(grants: &[Granted<'_>]) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen: HashMap<u64, &str> = HashMap::new();
    for (_, _, fence, task) in grants {
        if let Some(other) = seen.insert(*fence, task) {
            out.push(format!("fence {fence} granted twice ({other} and {task})"));
        }
    }
    let mut by_return: Vec<&Granted<'_>> = grants.iter().collect();
    by_return.sort_by_key(|g| g.1);
    let mut by_invoke: Vec<&Granted<'_>> = grants.iter().collect();
    by_invoke.sort_by_key(|g| g.0);
    let mut i = 0;
    let mut highest: Option<&Granted<'_>> = None;
    for g in by_invoke {
        while i < by_return.len() && by_return[i].1 < g.0 {
            if highest.is_none_or(|h| by_return[i].2 > h.2) {
                highest = Some(by_return[i]);
            }
            i += 1;
        }
        if let Some(h) = highest
            && h.2 >= g.2
        {
            out.push(format!(
                "fence {} ({}) was granted after fence {} ({}) had returned, but is not higher",
                g.2, g.3, h.2, h.3
            ));
        }
    }
    out
}
