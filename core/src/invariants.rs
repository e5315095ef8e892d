//! What every write keeps, checked where decisions are written (the
//! engine's seam) in debug and test builds, in the manner of TigerBeetle's
//! assertions: a decision that breaks one is a bug in core, and the commit
//! fails closed (`Corrupt`, naming the invariant) instead of writing it.
//!
//! * a revision is the one before plus one (a task's first is 1);
//! * a fence never goes down;
//! * a held task (CLAIMED or RUNNING) has its grant: an unexpired lease
//!   (elsewhere a lease is only the last grant's history);
//! * time never runs backwards within a task (`updated_at`).

use crate::error::{Error, Result};
use crate::model::TaskRecord;

/// Checks that `after` may follow `before` (the record as stored, or as
/// the same commit left it; `None` for a task this write creates).
pub fn check_write(before: Option<&TaskRecord>, after: &TaskRecord) -> Result<()> {
    let broken = |what: String| {
        Err(Error::corrupt(format!(
            "{}: a write breaks an invariant: {what}",
            after.task
        )))
    };
    let expected = before.map_or(1, |b| b.revision + 1);
    if after.revision != expected {
        return broken(format!(
            "revision {} follows {} (want {expected})",
            after.revision,
            before.map_or(0, |b| b.revision)
        ));
    }
    // A fence still pending is one the store assigns as it commits (etcd:
    // the revision that writes it), above every fence before it.
    let pending = after.current_fence() == Some(crate::model::PENDING_FENCE);
    if let (Some(b), a) = (
        before.and_then(TaskRecord::current_fence),
        after.current_fence(),
    ) && !pending
        && a.is_none_or(|a| a < b)
    {
        return broken(format!("fence {a:?} after {b}"));
    }
    // Held means granted: a lease, unexpired. (Outside a held state a
    // lease is the last grant's history, never a grant.)
    let granted = after.lease.as_ref().is_some_and(|l| !l.expired);
    if after.state.is_held() && !granted {
        return broken(format!("state {} with no grant", after.state.as_str()));
    }
    if let Some(b) = before
        && after.updated_at < b.updated_at
    {
        return broken(format!(
            "updated_at {} before {}",
            after.updated_at, b.updated_at
        ));
    }
    Ok(())
}

/// [`check_write`] for what one decision writes: its settlement on the
/// stored record, then its change on what that left.
pub fn check_decision(stored: Option<&TaskRecord>, d: &crate::decide::Decision) -> Result<()> {
    let mut before = stored;
    if let Some(s) = &d.settle {
        check_write(before, &s.record)?;
        before = Some(&s.record);
    }
    if let crate::decide::Verdict::Commit(c) = &d.verdict {
        check_write(before, &c.record)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests fail by panicking
    use super::*;
    use crate::decide::{Judged, Verdict, decide};
    use crate::id::Id;
    use crate::request::{Operation, Preconditions, Request};
    use crate::time::Timestamp;

    const T0: Timestamp = Timestamp(1_767_225_600_000);

    fn claim(now: Timestamp) -> Operation {
        Operation {
            task: Id::parse("task", "t").unwrap(),
            request: Request::Claim {
                owner: Id::parse("owner", "w").unwrap(),
                ttl_ms: Some(60_000),
                lock_delay_ms: None,
            },
            pre: Preconditions::default(),
            now,
            clock: Default::default(),
        }
    }

    /// A claimed task's record, its fence assigned.
    fn claimed() -> TaskRecord {
        let mut d = decide(&claim(T0), None, Judged::default());
        d.assign_fence(7);
        let Verdict::Commit(c) = d.verdict else {
            panic!("a claim of a new task commits")
        };
        check_write(None, &c.record).unwrap();
        c.record
    }

    #[test]
    fn each_invariant_refuses_the_write_that_breaks_it() {
        let before = claimed();
        let mut next = before.clone();
        next.revision += 1;
        check_write(Some(&before), &next).unwrap();
        let refused = |after: &TaskRecord, what: &str| {
            let e = check_write(Some(&before), after).unwrap_err();
            assert_eq!(e.kind, crate::ErrorKind::Corrupt);
            assert!(e.message.contains(what), "{what}: {e}");
        };
        let mut skipped = next.clone();
        skipped.revision += 1;
        refused(&skipped, "revision");
        let mut lower = next.clone();
        lower.lease.as_mut().unwrap().fence = 6;
        refused(&lower, "fence");
        let mut ungranted = next.clone();
        ungranted.lease.as_mut().unwrap().expired = true;
        refused(&ungranted, "no grant");
        let mut earlier = next.clone();
        earlier.updated_at = Timestamp(T0.0 - 1);
        refused(&earlier, "updated_at");
    }

    /// A caller whose clock is behind the record's last write decides at
    /// that write's time: what it stamps never runs backwards.
    #[test]
    fn a_clock_behind_the_record_stamps_the_records_time() {
        let before = claimed();
        let mut release = claim(Timestamp(T0.0 - 5_000));
        release.request = Request::Release {
            owner: Id::parse("owner", "w").unwrap(),
            fence: 7,
        };
        let d = decide(&release, Some(&before), Judged::at(&before, release.now));
        let Verdict::Commit(c) = &d.verdict else {
            panic!("the holder's release commits: {d:?}")
        };
        assert_eq!(c.record.updated_at, before.updated_at);
        assert!(c.events.iter().all(|e| e.at >= before.updated_at));
        check_decision(Some(&before), &d).unwrap();
    }
}
