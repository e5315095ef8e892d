//! The transaction planner: what one etcd transaction compares and writes
//! for a commit's decisions, as plain values, without a connection. Both
//! the single-decision path and the work-graph path plan here, so a key a
//! decision touches is guarded and written by one piece of code, and the
//! plan is tested without etcd (the tests at the end).
//!
//! A plan leaves one thing open: the etcd leases the holder and timer keys
//! go on, which are granted (a round trip) after planning; [`Plan::txn`]
//! binds them.

use super::*;
use std::collections::BTreeMap;

/// One compare of the transaction: `key` last changed at `revision`, or
/// (`None`) absent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Guard {
    pub(super) key: String,
    pub(super) revision: Option<i64>,
}

impl Guard {
    fn read(key: String, read: Option<&KeyRead>) -> Guard {
        Guard {
            key,
            revision: read.map(|k| k.mod_revision),
        }
    }

    fn compare(&self) -> Compare {
        match self.revision {
            Some(rev) => Compare::mod_revision(self.key.clone(), CompareOp::Equal, rev),
            None => Compare::create_revision(self.key.clone(), CompareOp::Equal, 0),
        }
    }
}

/// One write of the transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Write {
    Put {
        key: String,
        value: Vec<u8>,
    },
    Delete {
        key: String,
    },
    /// Every key under `key` (a task's events, on a prune).
    DeletePrefix {
        key: String,
    },
}

/// Which of a task's keys on an etcd lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    Holder,
    Deadline,
    LockDelay,
}

/// A key put on a lease of `secs` seconds, granted after planning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Leased {
    pub(super) task: TaskId,
    pub(super) slot: Slot,
    pub(super) secs: u64,
    pub(super) key: String,
    pub(super) value: Vec<u8>,
    /// The lease the key was on when read (replaced by this write).
    pub(super) replaces: Option<i64>,
}

/// What one transaction compares and writes.
#[derive(Debug, Default)]
pub(super) struct Plan {
    pub(super) guards: Vec<Guard>,
    pub(super) writes: Vec<Write>,
    pub(super) leased: Vec<Leased>,
    /// The leases of keys this transaction deletes (a holder or timer that
    /// ends), which hold nothing once it lands.
    pub(super) freed: Vec<i64>,
}

/// What a commit decided, for the planner: the records each task was
/// decided on (each compared), the decisions that write, in order, and,
/// for a counted refusal's event, the stored event under its conflict key
/// as read (with its revision), keyed by that key.
pub(super) struct Decided<'a> {
    pub(super) read: &'a BTreeMap<TaskId, Found>,
    pub(super) wrote: &'a [(TaskId, Decision)],
    pub(super) counted: &'a BTreeMap<String, Option<(Stored<Event>, i64)>>,
    /// The id every record written carries, to tell later whether this
    /// transaction landed when its reply is lost.
    pub(super) request_id: &'a str,
}

/// What a commit does to one key on a lease (a holder or a timer).
#[derive(Clone, Copy, PartialEq, Eq)]
enum KeyAct {
    Put { secs: u64 },
    Delete,
    Keep,
}

fn holder_act(e: LeaseEffect, was: KeyAct) -> KeyAct {
    match e {
        LeaseEffect::Granted { ttl_ms } | LeaseEffect::Extended { ttl_ms } => KeyAct::Put {
            secs: lease_secs(ttl_ms),
        },
        LeaseEffect::Ended => KeyAct::Delete,
        LeaseEffect::Unchanged => was,
    }
}

fn timer_act(e: TimerEffect, was: KeyAct) -> KeyAct {
    match e {
        TimerEffect::Set { in_ms } => KeyAct::Put {
            secs: lease_secs(in_ms),
        },
        TimerEffect::Cleared => KeyAct::Delete,
        TimerEffect::Unchanged => was,
    }
}

/// Plans the transaction that writes `decided`: every record read guarded
/// at the revision read (a record, a holder or timer key that changed
/// since fails it, and the commit is decided again); each task's last
/// record written with its index, state and count keys moved; the holder
/// and timer keys put on leases or deleted; the events and notifications
/// stored. Refused (`Unsupported`, nothing sent) past etcd's per-transaction
/// limits, or for a counted refusal whose stored event was not read.
pub(super) fn plan(keys: &Keys, decided: &Decided<'_>) -> Result<Plan> {
    let mut plan = Plan::default();
    for (task, found) in decided.read {
        let t = task.as_str();
        plan.guards.push(Guard {
            key: keys.task(t),
            revision: found.record.as_ref().map(|(_, rev)| *rev),
        });
        plan.guards
            .push(Guard::read(keys.holder(t), found.holder.as_ref()));
        plan.guards
            .push(Guard::read(keys.deadline(t), found.deadline.as_ref()));
        plan.guards
            .push(Guard::read(keys.lock_delay(t), found.lock_delay.as_ref()));
    }
    // Each task's last record, and what happens to its keys on leases.
    let mut written: BTreeMap<&TaskId, &TaskRecord> = BTreeMap::new();
    let mut forgotten: BTreeMap<&TaskId, bool> = BTreeMap::new();
    let mut acts: BTreeMap<&TaskId, [KeyAct; 3]> = BTreeMap::new();
    for (task, d) in decided.wrote {
        if let Some(r) = d.record_to_write() {
            written.insert(task, r);
            forgotten.insert(task, d.forgets());
        }
        let a = acts.entry(task).or_insert([KeyAct::Keep; 3]);
        a[0] = holder_act(d.lease, a[0]);
        a[1] = timer_act(d.deadline, a[1]);
        a[2] = timer_act(d.lock_delay, a[2]);
    }
    for (task, a) in &acts {
        let t = task.as_str();
        let owner = written
            .get(*task)
            .and_then(|r| r.lease.as_ref())
            .map_or(String::new(), |l| l.owner.to_string());
        let found = decided.read.get(*task);
        let slots = [
            (Slot::Holder, keys.holder(t), found.and_then(|f| f.holder)),
            (
                Slot::Deadline,
                keys.deadline(t),
                found.and_then(|f| f.deadline),
            ),
            (
                Slot::LockDelay,
                keys.lock_delay(t),
                found.and_then(|f| f.lock_delay),
            ),
        ];
        for (act, (slot, key, read)) in a.iter().zip(slots) {
            match act {
                KeyAct::Put { secs } => plan.leased.push(Leased {
                    task: (*task).clone(),
                    slot,
                    secs: *secs,
                    key,
                    value: if slot == Slot::Holder {
                        owner.clone().into_bytes()
                    } else {
                        Vec::new()
                    },
                    replaces: read.map(|k| k.lease).filter(|l| *l != 0),
                }),
                KeyAct::Delete => {
                    if let Some(read) = read {
                        plan.writes.push(Write::Delete { key });
                        if read.lease != 0 {
                            plan.freed.push(read.lease);
                        }
                    }
                }
                KeyAct::Keep => {}
            }
        }
    }
    for (task, r) in &written {
        let old = decided
            .read
            .get(*task)
            .and_then(|f| f.record.as_ref())
            .map(|(r, _)| r);
        if forgotten.get(*task).copied().unwrap_or(false) {
            // A tombstone forgotten: its key and its index and count
            // entries go (its history went at its prune).
            plan.writes.push(Write::Delete {
                key: keys.task(task.as_str()),
            });
            index_writes(keys, old, None, &mut plan.writes);
            continue;
        }
        let env = Envelope {
            record: (*r).clone(),
            request: decided.request_id.to_owned(),
        };
        plan.writes.push(Write::Put {
            key: keys.task(task.as_str()),
            value: encode(&env)?,
        });
        index_writes(keys, old, Some(r), &mut plan.writes);
    }
    let (mut events, mut notes) = (0u64, 0u64);
    for (task, d) in decided.wrote {
        let t = task.as_str();
        let revision = written.get(task).map_or(0, |r| r.revision);
        if d.drops_history() {
            // A prune: every event of the task (events are numbered by
            // etcd's revisions, which never go back; acknowledged
            // notifications were deleted when acknowledged).
            plan.writes.push(Write::DeletePrefix {
                key: keys.events_of(t),
            });
        }
        for e in d.events() {
            let idx = events;
            events += 1;
            let Some(ck) = &e.conflict_key else {
                plan.writes.push(Write::Put {
                    key: keys.event(t, revision, idx as usize),
                    value: encode(&Stored {
                        item: Event::from_draft(0, e.clone()),
                        idx,
                    })?,
                });
                continue;
            };
            // A counted refusal: one stored event per conflict, its count
            // raised by each repeat, guarded as read.
            let key = keys.conflict(t, ck);
            let Some(existing) = decided.counted.get(&key) else {
                return Err(Error::unsupported(format!(
                    "etcd: {t}: a counted refusal whose stored event was not read (inside a work-graph transaction)"
                )));
            };
            let (stored, revision) = match existing {
                Some((stored, rev)) => (
                    Stored {
                        item: Event {
                            count: stored.item.count + 1,
                            ..stored.item.clone()
                        },
                        idx: stored.idx,
                    },
                    Some(*rev),
                ),
                None => (
                    Stored {
                        item: Event::from_draft(0, e.clone()),
                        idx,
                    },
                    None,
                ),
            };
            plan.guards.push(Guard {
                key: key.clone(),
                revision,
            });
            plan.writes.push(Write::Put {
                key,
                value: encode(&stored)?,
            });
        }
        for n in d.notifications() {
            let idx = notes;
            notes += 1;
            plan.writes.push(Write::Put {
                key: keys.outbox(&n.intent_id),
                value: encode(&Stored {
                    item: n.clone(),
                    idx,
                })?,
            });
        }
    }
    let size = plan.writes.len() + plan.leased.len();
    if events >= PER_TXN || notes >= PER_TXN || size > MAX_TXN_OPS {
        return Err(Error::unsupported(format!(
            "etcd: one transaction would write {size} keys ({events} events); add fewer nodes at once"
        )));
    }
    Ok(plan)
}

/// The ready- and held-index, state-index and count keys a record write
/// moves: what `old` had and `new` has not is deleted, what `new` has and
/// `old` had not is put.
pub(super) fn index_writes(
    keys: &Keys,
    old: Option<&TaskRecord>,
    new: Option<&TaskRecord>,
    writes: &mut Vec<Write>,
) {
    let ready = |r: Option<&TaskRecord>| r.and_then(TaskRecord::ready_entry).map(|e| e.key());
    let held = |r: Option<&TaskRecord>| r.and_then(TaskRecord::held_key);
    let task = new.or(old).map_or(String::new(), |r| r.task.to_string());
    // Each index entry moved: the ready and held entries name their task,
    // the state-index and count entries are the task in their key.
    let mut moved = |before: Option<String>, after: Option<String>, value: &[u8]| {
        if before == after {
            return;
        }
        if let Some(key) = before {
            writes.push(Write::Delete { key });
        }
        if let Some(key) = after {
            writes.push(Write::Put {
                key,
                value: value.to_vec(),
            });
        }
    };
    let named = task.as_bytes();
    moved(
        ready(old).map(|k| keys.ready(&k)),
        ready(new).map(|k| keys.ready(&k)),
        named,
    );
    moved(
        held(old).map(|k| keys.held(&k)),
        held(new).map(|k| keys.held(&k)),
        named,
    );
    // The state index and the counts (see counts.rs).
    let state = |r: Option<&TaskRecord>| r.map(|r| keys.in_state(r.state, &task));
    moved(state(old), state(new), b"");
    let counted = |r: Option<&TaskRecord>| {
        r.and_then(|r| Some(keys.count_entry(r.census_queue()?, r.state, &task)))
    };
    moved(counted(old), counted(new), b"");
}

impl Plan {
    /// The leases to grant, in order (their seconds).
    pub(super) fn wanted(&self) -> Vec<Option<u64>> {
        self.leased.iter().map(|l| Some(l.secs)).collect()
    }

    /// The etcd transaction, its leased keys put on `granted` (one per
    /// [`Plan::wanted`], in order; a key whose lease is missing is not put).
    pub(super) fn txn(&self, granted: &[Option<i64>]) -> Txn {
        let compares: Vec<Compare> = self.guards.iter().map(Guard::compare).collect();
        let mut ops: Vec<TxnOp> = Vec::with_capacity(self.writes.len() + self.leased.len());
        for w in &self.writes {
            ops.push(match w {
                Write::Put { key, value } => TxnOp::put(key.clone(), value.clone(), None),
                Write::Delete { key } => TxnOp::delete(key.clone(), None),
                Write::DeletePrefix { key } => {
                    TxnOp::delete(key.clone(), Some(DeleteOptions::new().with_prefix()))
                }
            });
        }
        for (l, lease) in self.leased.iter().zip(granted) {
            if let Some(id) = lease {
                ops.push(TxnOp::put(
                    l.key.clone(),
                    l.value.clone(),
                    Some(PutOptions::new().with_lease(*id)),
                ));
            }
        }
        Txn::new().when(compares).and_then(ops)
    }

    /// `task`'s holder, deadline and lock-delay leases as `granted` bound
    /// them (`None` where this plan puts no such key).
    pub(super) fn leases_of(&self, task: &TaskId, granted: &[Option<i64>]) -> [Option<i64>; 3] {
        let mut out = [None; 3];
        for (l, lease) in self.leased.iter().zip(granted) {
            if l.task == *task {
                out[l.slot as usize] = *lease;
            }
        }
        out
    }

    /// The leases the keys this transaction replaces or deletes were on,
    /// none of them among `made`: they hold nothing once it lands.
    pub(super) fn left_over(&self, made: &[i64]) -> Vec<i64> {
        self.leased
            .iter()
            .filter_map(|l| l.replaces)
            .chain(self.freed.iter().copied())
            .filter(|l| !made.contains(l))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking
    use super::*;
    use baton_core::{Id, Request, decide_with};

    fn op(task: &str, request: Request, now: i64) -> Operation {
        Operation {
            task: TaskId::parse("task", task).unwrap(),
            request,
            pre: Default::default(),
            now: Timestamp::from_millis(now),
            clock: Default::default(),
        }
    }

    fn claim(owner: &str) -> Request {
        Request::Claim {
            owner: Id::parse("owner", owner).unwrap(),
            ttl_ms: Some(10_000),
            lock_delay_ms: None,
        }
    }

    fn rules() -> baton_core::decide::LeaseRules {
        baton_core::decide::LeaseRules {
            granularity_ms: 1_000,
            min_ms: 2_000,
        }
    }

    fn decide(o: &Operation, found: &Found) -> Decision {
        let record = found.record.as_ref().map(|(r, _)| r);
        decide_with(o, record, found.judged(), rules())
    }

    fn planned(keys: &Keys, t: &TaskId, found: &Found, d: &Decision) -> Plan {
        let read = BTreeMap::from([(t.clone(), found.clone())]);
        let wrote = [(t.clone(), d.clone())];
        let counted = BTreeMap::new();
        plan(
            keys,
            &Decided {
                read: &read,
                wrote: &wrote,
                counted: &counted,
                request_id: "r1",
            },
        )
        .unwrap()
    }

    fn nothing() -> Found {
        Found {
            record: None,
            holder: None,
            deadline: None,
            lock_delay: None,
            written_by: None,
        }
    }

    fn puts(p: &Plan) -> Vec<&str> {
        p.writes
            .iter()
            .filter_map(|w| match w {
                Write::Put { key, .. } => Some(key.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_first_claim_guards_every_key_absent_and_puts_the_holder_on_a_lease() {
        let keys = Keys::new("/p");
        let o = op("t1", claim("w"), 1_000);
        let found = nothing();
        let d = decide(&o, &found);
        let p = planned(&keys, &o.task, &found, &d);
        // Record, holder, deadline and lock delay: each must still be absent.
        assert_eq!(p.guards.len(), 4, "{:?}", p.guards);
        assert!(p.guards.iter().all(|g| g.revision.is_none()));
        assert!(p.guards.iter().any(|g| g.key == keys.task("t1")));
        assert!(p.guards.iter().any(|g| g.key == keys.holder("t1")));
        // The record, carrying the request id, and its state and event.
        let record = p
            .writes
            .iter()
            .find_map(|w| match w {
                Write::Put { key, value } if *key == keys.task("t1") => Some(value),
                _ => None,
            })
            .expect("the record is written");
        let env: Envelope = serde_json::from_slice(record).unwrap();
        assert_eq!(env.request, "r1");
        assert!(
            puts(&p)
                .iter()
                .any(|k| k.starts_with(&keys.in_state(env.record.state, "")))
        );
        assert!(
            puts(&p)
                .iter()
                .any(|k| k.starts_with(&keys.events_of("t1")))
        );
        // The holder key, on a lease of the grant's TTL, naming the owner.
        assert_eq!(p.leased.len(), 1, "{:?}", p.leased);
        assert_eq!(p.leased[0].slot, Slot::Holder);
        assert_eq!(p.leased[0].secs, 10);
        assert_eq!(p.leased[0].value, b"w");
        assert_eq!(p.leases_of(&o.task, &[Some(7)]), [Some(7), None, None]);
        assert!(p.left_over(&[7]).is_empty());
    }

    #[test]
    fn a_release_guards_what_was_read_and_frees_the_holder_lease() {
        let keys = Keys::new("/p");
        let first = op("t1", claim("w"), 1_000);
        let mut d = decide(&first, &nothing());
        d.assign_fence(5);
        let record = d.record_to_write().unwrap().clone();
        let held = KeyRead {
            mod_revision: 5,
            lease: 42,
        };
        let found = Found {
            record: Some((record.clone(), 5)),
            holder: Some(held),
            deadline: None,
            lock_delay: None,
            written_by: None,
        };
        let fence = record.current_fence().unwrap();
        let o = op(
            "t1",
            Request::Release {
                owner: Id::parse("owner", "w").unwrap(),
                fence,
            },
            2_000,
        );
        let d = decide(&o, &found);
        let p = planned(&keys, &o.task, &found, &d);
        assert!(p.guards.contains(&Guard {
            key: keys.task("t1"),
            revision: Some(5)
        }));
        assert!(p.guards.contains(&Guard {
            key: keys.holder("t1"),
            revision: Some(5)
        }));
        assert!(p.writes.contains(&Write::Delete {
            key: keys.holder("t1")
        }));
        assert!(p.leased.is_empty());
        assert_eq!(p.left_over(&[]), vec![42]);
    }

    #[test]
    fn a_stale_fence_is_counted_once_per_conflict_under_its_guard() {
        let keys = Keys::new("/p");
        let first = op("t1", claim("w"), 1_000);
        let mut d = decide(&first, &nothing());
        d.assign_fence(5);
        let record = d.record_to_write().unwrap().clone();
        let found = Found {
            record: Some((record.clone(), 5)),
            holder: Some(KeyRead {
                mod_revision: 5,
                lease: 42,
            }),
            deadline: None,
            lock_delay: None,
            written_by: None,
        };
        // A zombie's release with the fence before this one: refused, and
        // recorded as a counted conflict, the task's record untouched.
        let o = op(
            "t1",
            Request::Release {
                owner: Id::parse("owner", "w").unwrap(),
                fence: record.current_fence().unwrap() - 1,
            },
            2_000,
        );
        let d = decide(&o, &found);
        assert!(d.writes() && d.record_to_write().is_none(), "{d:?}");
        let ck = d.events().find_map(|e| e.conflict_key.clone()).unwrap();
        let key = keys.conflict("t1", &ck);
        let read = BTreeMap::from([(o.task.clone(), found.clone())]);
        let wrote = [(o.task.clone(), d.clone())];
        let unread = BTreeMap::new();
        let decided = Decided {
            read: &read,
            wrote: &wrote,
            counted: &unread,
            request_id: "r2",
        };
        // Its stored event not read (a work-graph transaction): refused,
        // never written blind.
        let e = plan(&keys, &decided).unwrap_err();
        assert_eq!(e.kind, baton_core::ErrorKind::Unsupported, "{e:?}");
        // The first such refusal: stored once, guarded absent.
        let first_time = BTreeMap::from([(key.clone(), None)]);
        let p = plan(
            &keys,
            &Decided {
                counted: &first_time,
                ..decided
            },
        )
        .unwrap();
        assert!(p.guards.contains(&Guard {
            key: key.clone(),
            revision: None
        }));
        assert!(!puts(&p).contains(&keys.task("t1").as_str()));
        assert!(p.leased.is_empty() && p.left_over(&[]).is_empty());
        // A repeat: its count raised, guarded at the revision read.
        let stored = Stored {
            item: Event::from_draft(0, d.events().next().unwrap().clone()),
            idx: 0,
        };
        let again = BTreeMap::from([(key.clone(), Some((stored, 9)))]);
        let p = plan(
            &keys,
            &Decided {
                counted: &again,
                ..decided
            },
        )
        .unwrap();
        assert!(p.guards.contains(&Guard {
            key: key.clone(),
            revision: Some(9)
        }));
        let value = p
            .writes
            .iter()
            .find_map(|w| match w {
                Write::Put { key: k, value } if *k == key => Some(value),
                _ => None,
            })
            .unwrap();
        let stored: Stored<Event> = serde_json::from_slice(value).unwrap();
        assert_eq!(stored.item.count, 2);
    }
}
