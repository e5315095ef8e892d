//! Downstream writes: what a guard in the user's storage admitted, checked
//! against the guard's model. A resource's mark is a register that only
//! rises: a write admitted under fence `f` needs `f` at least the mark
//! (and the mark becomes `f`); a write refused `stale_fence` needs `f`
//! below the mark, and the mark it reported is the mark. A history where
//! no order of a resource's writes, consistent with their real-time order,
//! fits that model has a write admitted with a fence lower than one
//! already admitted (or a refusal no admitted write explains): a violation.

use crate::history::{Observed, Op, Req};
use std::collections::BTreeMap;
use todc_utils::Specification;

/// One guarded write as the model sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WriteStep {
    pub fence: u64,
    pub outcome: Outcome,
    pub invoked: u64,
    /// `u64::MAX` when no answer came.
    pub returned: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Outcome {
    Admitted,
    /// Refused stale, with the mark the guard reported (if it did).
    Stale(Option<u64>),
    /// No answer, or one that says it may have landed.
    Unknown,
}

/// The guard's model: the mark (0: none yet).
#[derive(Debug)]
pub struct GuardSpec;

impl Specification for GuardSpec {
    type State = u64;
    type Operation = WriteStep;

    fn init() -> u64 {
        0
    }

    fn apply(w: &WriteStep, mark: &u64) -> (bool, u64) {
        match w.outcome {
            Outcome::Admitted => (w.fence >= *mark, w.fence.max(*mark)),
            Outcome::Stale(reported) => (
                w.fence < *mark && reported.is_none_or(|r| r == *mark),
                *mark,
            ),
            // Placed last (it returns at the end of time) where it changes
            // nothing another write saw.
            Outcome::Unknown => (true, w.fence.max(*mark)),
        }
    }
}

/// The guarded writes of `ops` by resource; writes the guard could not
/// answer (nothing written) are left out.
fn by_resource(ops: &[Op]) -> BTreeMap<&str, Vec<WriteStep>> {
    let mut out: BTreeMap<&str, Vec<WriteStep>> = BTreeMap::new();
    for op in ops {
        let Req::Write { resource, fence } = &op.req else {
            continue;
        };
        let (outcome, returned) = match &op.returned {
            Some((t, Observed::Admitted { .. })) => (Outcome::Admitted, *t),
            Some((
                t,
                Observed::Refused {
                    reason,
                    current_fence,
                    ..
                },
            )) if reason == "stale_fence" => (Outcome::Stale(*current_fence), *t),
            Some((_, Observed::Unavailable { .. } | Observed::Refused { .. })) => continue,
            _ => (Outcome::Unknown, u64::MAX),
        };
        out.entry(resource.as_str()).or_default().push(WriteStep {
            fence: *fence,
            outcome,
            invoked: op.invoked,
            returned,
        });
    }
    out
}

/// What the check of downstream writes found: how many writes were
/// admitted, and the violations.
pub fn check_writes(ops: &[Op]) -> (usize, Vec<String>) {
    let mut admitted = 0;
    let mut violations = Vec::new();
    for (resource, steps) in by_resource(ops) {
        admitted += steps
            .iter()
            .filter(|s| s.outcome == Outcome::Admitted)
            .count();
        if !linearizable(&steps) {
            let mut sorted = steps.clone();
            sorted.sort_by_key(|s| s.invoked);
            let shown: Vec<String> = sorted
                .iter()
                .take(60)
                .map(|s| {
                    format!(
                        "  fence {} {:?} [{} .. {}]",
                        s.fence, s.outcome, s.invoked, s.returned
                    )
                })
                .collect();
            violations.push(format!(
                "resource {resource}: no order of its {} guarded writes fits the guard (a write admitted with a fence lower than one already admitted?)\n{}",
                steps.len(),
                shown.join("\n")
            ));
        }
    }
    (admitted, violations)
}

fn linearizable(steps: &[WriteStep]) -> bool {
    crate::search::search::<GuardSpec>(steps, |s| (s.invoked, s.returned))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(n: u64, fence: u64, invoked: u64, returned: Option<(u64, Observed)>) -> Op {
        Op {
            client: 0,
            n,
            task: "t".into(),
            owner: "o".into(),
            req: Req::Write {
                resource: "r".into(),
                fence,
            },
            invoked,
            returned,
        }
    }

    fn admitted(t: u64, fence: u64) -> Option<(u64, Observed)> {
        Some((t, Observed::Admitted { mark: fence }))
    }

    fn stale(t: u64, fence: u64, mark: u64) -> Option<(u64, Observed)> {
        Some((
            t,
            Observed::Refused {
                reason: "stale_fence".into(),
                current_fence: Some(mark),
                holder: None,
                fence: Some(fence),
            },
        ))
    }

    #[test]
    fn a_lower_fence_admitted_after_a_higher_one_is_a_violation() {
        let ops = vec![op(0, 5, 10, admitted(20, 5)), op(1, 3, 30, admitted(40, 3))];
        let (n, v) = check_writes(&ops);
        assert_eq!(n, 2);
        assert_eq!(v.len(), 1, "{v:?}");
    }

    #[test]
    fn fences_in_order_equal_repeats_and_explained_refusals_pass() {
        let ops = vec![
            op(0, 3, 10, admitted(20, 3)),
            op(1, 3, 25, admitted(30, 3)),
            op(2, 5, 35, admitted(40, 5)),
            op(3, 3, 45, stale(50, 3, 5)),
            // Overlapping: 4 may have been admitted before 6.
            op(4, 6, 60, admitted(90, 6)),
            op(5, 4, 61, stale(89, 4, 6)),
            // A write whose answer never came.
            op(6, 2, 95, None),
        ];
        let (n, v) = check_writes(&ops);
        assert_eq!(n, 4);
        assert!(v.is_empty(), "{v:?}");
    }

    #[test]
    fn a_refusal_no_admitted_write_explains_is_a_violation() {
        let ops = vec![op(0, 3, 10, admitted(20, 3)), op(1, 7, 30, stale(40, 7, 9))];
        assert_eq!(check_writes(&ops).1.len(), 1);
        // Refused with the wrong mark reported.
        let ops = vec![op(0, 9, 10, admitted(20, 9)), op(1, 7, 30, stale(40, 7, 8))];
        assert_eq!(check_writes(&ops).1.len(), 1);
    }
}
