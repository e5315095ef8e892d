//! The linearizability search every model of the checker runs:
//! `todc-utils`' Wing–Gong–Lowe search over operations placed by when each
//! was invoked and when it returned.

use todc_utils::{Action, History, WGLChecker};

/// Whether some order of `ops` consistent with their real-time order
/// (`span`: when each was invoked and returned) is allowed by `S`.
pub fn search<S>(ops: &[S::Operation], span: impl Fn(&S::Operation) -> (u64, u64)) -> bool
where
    S: todc_utils::Specification,
    S::Operation: Clone,
{
    if ops.is_empty() {
        return true;
    }
    // Each operation is its own process: the checker pairs a process's
    // calls and returns in order, and one whose answer never came returns
    // at the end of time. At one instant a call is placed before a return
    // (the two overlap), which allows more orders, never fewer.
    let mut events: Vec<(u64, u8, usize)> = Vec::with_capacity(ops.len() * 2);
    for (i, o) in ops.iter().enumerate() {
        let (invoked, returned) = span(o);
        events.push((invoked, 0, i));
        events.push((returned, 1, i));
    }
    events.sort_unstable();
    let actions = events
        .into_iter()
        .map(|(_, kind, i)| {
            let o = ops[i].clone();
            (
                i,
                if kind == 0 {
                    Action::Call(o)
                } else {
                    Action::Response(o)
                },
            )
        })
        .collect();
    WGLChecker::<S>::is_linearizable(History::from_actions(actions))
}
