//! Hand-made histories: the checker accepts what the rules allow and
//! rejects each kind of broken promise.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use baton_check::history::Seen;
use baton_check::{Limits, Line, Observed, Report, Req, check, ops};
use baton_core::State;

const MS: u64 = 1000;

fn limits() -> Limits {
    Limits {
        skew_us: 0,
        overstay_us: 0,
        granularity_ms: 1,
        min_ttl_ms: 1,
    }
}

/// A history under construction: operations with their windows (in ms).
#[derive(Default)]
struct H {
    lines: Vec<Line>,
    n: u64,
}

impl H {
    fn op(
        &mut self,
        client: u32,
        task: &str,
        from: u64,
        to: Option<u64>,
        req: Req,
        answer: Observed,
    ) -> &mut Self {
        self.n += 1;
        self.lines.push(Line::Invoke {
            client,
            n: self.n,
            t: 1_000_000 + from * MS,
            task: task.into(),
            owner: format!("c{client}"),
            req,
        });
        if let Some(to) = to {
            self.lines.push(Line::Return {
                client,
                n: self.n,
                t: 1_000_000 + to * MS,
                answer,
            });
        }
        self
    }

    fn check(&self) -> Report {
        let mut lines = self.lines.clone();
        // Returns and invocations in time order, as files interleave them.
        lines.sort_by_key(|l| match l {
            Line::Invoke { t, .. } | Line::Return { t, .. } => *t,
        });
        let r = check(&ops(lines).unwrap(), limits());
        println!("{r}");
        r
    }
}

fn claim(ttl_ms: u64) -> Req {
    Req::Claim {
        ttl_ms,
        lock_delay_ms: 0,
    }
}

fn granted(owner: u32, fence: u64) -> Observed {
    granted_with(owner, fence, &[])
}

/// A grant whose record holds `steps`.
fn granted_with(owner: u32, fence: u64, steps: &[&str]) -> Observed {
    Observed::Done {
        ack: false,
        state: State::Claimed,
        lease: Some(Seen {
            owner: format!("c{owner}"),
            fence,
            expired: false,
        }),
        steps: steps.iter().map(|s| s.to_string()).collect(),
    }
}

fn done(owner: u32, fence: u64, state: State) -> Observed {
    Observed::Done {
        ack: false,
        state,
        lease: Some(Seen {
            owner: format!("c{owner}"),
            fence,
            expired: false,
        }),
        steps: Vec::new(),
    }
}

fn step(fence: u64, name: &str, output: &str) -> Req {
    Req::Checkpoint {
        fence,
        step: name.into(),
        output: output.into(),
    }
}

/// A checkpoint's answer: the holder's record, with `steps`.
fn recorded(owner: u32, fence: u64, ack: bool, steps: &[&str]) -> Observed {
    Observed::Done {
        ack,
        state: State::Claimed,
        lease: Some(Seen {
            owner: format!("c{owner}"),
            fence,
            expired: false,
        }),
        steps: steps.iter().map(|s| s.to_string()).collect(),
    }
}

fn refused(reason: &str) -> Observed {
    Observed::Refused {
        reason: reason.into(),
        current_fence: None,
        holder: None,
        fence: None,
    }
}

fn held(owner: u32, fence: u64) -> Observed {
    Observed::Refused {
        reason: "held".into(),
        current_fence: Some(fence),
        holder: Some(format!("c{owner}")),
        fence: None,
    }
}

#[test]
fn a_grant_after_the_lease_ends_is_allowed() {
    let r = H::default()
        .op(0, "a", 0, Some(1), claim(100), granted(0, 1))
        .op(1, "a", 20, Some(21), claim(100), held(0, 1))
        .op(1, "a", 150, Some(151), claim(100), granted(1, 2))
        .op(
            0,
            "a",
            160,
            Some(161),
            Req::Renew {
                fence: 1,
                ttl_ms: 100,
            },
            Observed::Refused {
                reason: "stale_fence".into(),
                current_fence: Some(2),
                holder: None,
                fence: Some(1),
            },
        )
        .check();
    assert!(r.ok());
}

#[test]
fn overlapping_calls_may_take_effect_in_either_order() {
    // c1's refusal returned first but overlaps c0's grant: the grant took
    // effect first.
    let r = H::default()
        .op(0, "a", 0, Some(10), claim(100), granted(0, 1))
        .op(1, "a", 2, Some(5), claim(100), held(0, 1))
        .check();
    assert!(r.ok());
}

#[test]
fn two_live_grants_are_caught() {
    let r = H::default()
        .op(0, "a", 0, Some(1), claim(500), granted(0, 1))
        .op(1, "a", 5, Some(6), claim(500), granted(1, 2))
        .check();
    assert!(!r.ok());
}

#[test]
fn a_refusal_that_names_a_holder_that_never_held_is_caught() {
    let r = H::default()
        .op(0, "a", 0, Some(1), claim(500), granted(0, 1))
        .op(1, "a", 5, Some(6), claim(500), held(2, 1))
        .check();
    assert!(!r.ok());
}

#[test]
fn an_accepted_stale_renew_is_caught() {
    let r = H::default()
        .op(0, "a", 0, Some(1), claim(100), granted(0, 1))
        .op(1, "a", 150, Some(151), claim(100), granted(1, 2))
        .op(
            0,
            "a",
            160,
            Some(161),
            Req::Renew {
                fence: 1,
                ttl_ms: 100,
            },
            done(0, 1, State::Claimed),
        )
        .check();
    assert!(!r.ok());
}

#[test]
fn a_renew_after_the_lease_ended_is_caught() {
    let r = H::default()
        .op(0, "a", 0, Some(1), claim(100), granted(0, 1))
        .op(
            0,
            "a",
            300,
            Some(301),
            Req::Renew {
                fence: 1,
                ttl_ms: 100,
            },
            done(0, 1, State::Claimed),
        )
        .check();
    assert!(!r.ok());
}

#[test]
fn a_grant_after_success_is_caught() {
    let r = H::default()
        .op(0, "a", 0, Some(1), claim(100), granted(0, 1))
        .op(
            0,
            "a",
            10,
            Some(11),
            Req::Complete { fence: 1 },
            done(0, 1, State::Succeeded),
        )
        .op(1, "a", 300, Some(301), claim(100), granted(1, 2))
        .check();
    assert!(!r.ok());
}

#[test]
fn a_fence_that_does_not_rise_is_caught() {
    let r = H::default()
        .op(0, "a", 0, Some(1), claim(100), granted(0, 5))
        .op(1, "a", 300, Some(301), claim(100), granted(1, 3))
        .check();
    assert!(!r.ok());
}

#[test]
fn a_fence_granted_on_two_tasks_is_caught() {
    let r = H::default()
        .op(0, "a", 0, Some(1), claim(100), granted(0, 1))
        .op(1, "b", 0, Some(1), claim(100), granted(1, 1))
        .check();
    assert!(!r.ok());
    assert!(
        r.violations.iter().any(|v| v.contains("granted twice")),
        "{r}"
    );
}

#[test]
fn fences_out_of_real_time_order_across_tasks_are_caught() {
    let r = H::default()
        .op(0, "a", 0, Some(1), claim(100), granted(0, 9))
        .op(1, "b", 5, Some(6), claim(100), granted(1, 3))
        .check();
    assert!(!r.ok());
    assert!(r.violations.iter().any(|v| v.contains("not higher")), "{r}");
}

#[test]
fn the_lock_delay_is_held_to() {
    let delayed = Req::Claim {
        ttl_ms: 100,
        lock_delay_ms: 300,
    };
    let early = H::default()
        .op(0, "a", 0, Some(1), delayed.clone(), granted(0, 1))
        .op(1, "a", 250, Some(251), claim(100), granted(1, 2))
        .check();
    assert!(!early.ok());
    let after = H::default()
        .op(0, "a", 0, Some(1), delayed.clone(), granted(0, 1))
        .op(
            1,
            "a",
            250,
            Some(251),
            claim(100),
            Observed::Refused {
                reason: "lock_delay".into(),
                current_fence: None,
                holder: None,
                fence: Some(1),
            },
        )
        .op(1, "a", 450, Some(451), claim(100), granted(1, 2))
        .check();
    assert!(after.ok());
    // A release lets the next owner in at once.
    let released = H::default()
        .op(0, "a", 0, Some(1), delayed, granted(0, 1))
        .op(
            0,
            "a",
            10,
            Some(11),
            Req::Release { fence: 1 },
            done(0, 1, State::Registered),
        )
        .op(1, "a", 20, Some(21), claim(100), granted(1, 2))
        .check();
    assert!(released.ok());
}

#[test]
fn a_claim_whose_answer_never_came_may_have_been_granted() {
    // c0 was killed mid-claim; what others saw says the claim landed.
    let r = H::default()
        .op(0, "a", 0, None, claim(500), refused("unused"))
        .op(1, "a", 10, Some(11), claim(500), held(0, 7))
        .op(
            1,
            "a",
            20,
            Some(21),
            Req::Holder,
            Observed::Holder {
                lease: Some(Seen {
                    owner: "c0".into(),
                    fence: 7,
                    expired: false,
                }),
                live: true,
            },
        )
        .check();
    assert!(r.ok());
    // But it cannot have been granted twice, nor to someone else.
    let r = H::default()
        .op(0, "a", 0, None, claim(500), refused("unused"))
        .op(1, "a", 10, Some(11), claim(500), held(2, 7))
        .check();
    assert!(!r.ok());
}

#[test]
fn a_verify_that_calls_a_stale_fence_current_is_caught() {
    let r = H::default()
        .op(0, "a", 0, Some(1), claim(100), granted(0, 1))
        .op(1, "a", 150, Some(151), claim(100), granted(1, 2))
        .op(
            0,
            "a",
            160,
            Some(161),
            Req::Verify { fence: 1 },
            Observed::Verified {
                current: true,
                live: true,
                state: State::Claimed,
                current_fence: Some(1),
            },
        )
        .check();
    assert!(!r.ok());
}

#[test]
fn checkpoints_by_the_holder_are_kept_and_carried_by_the_next_grant() {
    let r = H::default()
        .op(0, "a", 0, Some(1), claim(100), granted(0, 1))
        .op(
            0,
            "a",
            2,
            Some(3),
            step(1, "s1", "1"),
            recorded(0, 1, false, &["s1"]),
        )
        .op(
            0,
            "a",
            4,
            Some(5),
            step(1, "s1", "1"),
            recorded(0, 1, true, &["s1"]),
        )
        .op(
            0,
            "a",
            6,
            Some(7),
            step(1, "s1", "2"),
            refused("checkpoint_conflict"),
        )
        // The answer of this one never came: recorded or not, either is fine.
        .op(0, "a", 8, None, step(1, "s2", "1"), refused("unused"))
        .op(
            1,
            "a",
            150,
            Some(151),
            claim(100),
            granted_with(1, 2, &["s1", "s2"]),
        )
        .op(
            0,
            "a",
            160,
            Some(161),
            step(1, "s3", "1"),
            Observed::Refused {
                reason: "stale_fence".into(),
                current_fence: Some(2),
                holder: None,
                fence: Some(1),
            },
        )
        .check();
    assert!(r.ok());
}

#[test]
fn a_checkpoint_admitted_under_a_superseded_fence_is_caught() {
    let r = H::default()
        .op(0, "a", 0, Some(1), claim(100), granted(0, 1))
        .op(1, "a", 150, Some(151), claim(100), granted(1, 2))
        .op(
            0,
            "a",
            160,
            Some(161),
            step(1, "s1", "1"),
            recorded(0, 1, false, &["s1"]),
        )
        .check();
    assert!(!r.ok());
}

#[test]
fn a_recorded_step_changed_or_lost_is_caught() {
    // Overwritten: the second output was committed.
    let r = H::default()
        .op(0, "a", 0, Some(1), claim(100), granted(0, 1))
        .op(
            0,
            "a",
            2,
            Some(3),
            step(1, "s1", "1"),
            recorded(0, 1, false, &["s1"]),
        )
        .op(
            0,
            "a",
            4,
            Some(5),
            step(1, "s1", "2"),
            recorded(0, 1, false, &["s1"]),
        )
        .check();
    assert!(!r.ok());
    // Lost: the next grant does not carry it.
    let r = H::default()
        .op(0, "a", 0, Some(1), claim(100), granted(0, 1))
        .op(
            0,
            "a",
            2,
            Some(3),
            step(1, "s1", "1"),
            recorded(0, 1, false, &["s1"]),
        )
        .op(1, "a", 150, Some(151), claim(100), granted(1, 2))
        .check();
    assert!(!r.ok());
    // A conflict for a step never recorded.
    let r = H::default()
        .op(0, "a", 0, Some(1), claim(100), granted(0, 1))
        .op(
            0,
            "a",
            2,
            Some(3),
            step(1, "s1", "1"),
            refused("checkpoint_conflict"),
        )
        .check();
    assert!(!r.ok());
}
