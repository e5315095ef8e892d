//! The ready and held indexes' keys: order-preserving bytes (lane,
//! queue, priority, ready time, id; lane, queue, expiry, id) that every
//! store keeps with each record write.

use super::*;

/// Bare tasks and declared tasks are offered by different requests
/// (`next` and `task next`), so each has its own lane of the index.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Lane {
    Bare,
    Declared,
}

impl Lane {
    /// One letter, for index keys.
    pub fn letter(self) -> char {
        match self {
            Lane::Bare => 'b',
            Lane::Declared => 'd',
        }
    }
}

/// A task's entry in the ready index: stores keep one per record for which
/// [`crate::model::TaskRecord::ready_entry`] is `Some`, ordered by [`ReadyEntry::cmp`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ReadyEntry {
    pub lane: Lane,
    pub queue: Id,
    /// `i64::MAX - priority`, so ascending order is highest priority first.
    pub rank: u64,
    pub ready_at: Timestamp,
    pub task: TaskId,
}

impl ReadyEntry {
    /// The priority back from the rank.
    pub fn priority(&self) -> i64 {
        rank_to_priority(self.rank)
    }

    /// An order-preserving byte key (lane, queue, rank, ready time, task),
    /// for stores that sort keys as bytes (sled, etcd). The queue ends
    /// with a 0 byte, which no id contains.
    pub fn key(&self) -> Vec<u8> {
        let mut k = Self::prefix(self.lane, &self.queue);
        k.extend_from_slice(&self.rank.to_be_bytes());
        k.extend_from_slice(&millis_key(self.ready_at));
        k.extend_from_slice(self.task.as_str().as_bytes());
        k
    }

    /// The key prefix of one queue of one lane.
    pub fn prefix(lane: Lane, queue: &Id) -> Vec<u8> {
        let mut k = Vec::with_capacity(queue.as_str().len() + 20);
        k.push(lane.letter() as u8);
        k.extend_from_slice(queue.as_str().as_bytes());
        k.push(0);
        k
    }
}

/// A time as 8 order-preserving bytes (before the epoch: 0).
pub fn millis_key(t: Timestamp) -> [u8; 8] {
    u64::try_from(t.as_millis().max(0))
        .unwrap_or(0)
        .to_be_bytes()
}

/// The held-index keys of `lane`/`queue` whose lease expired by `now`:
/// `[start, end)`.
pub fn held_range(lane: Lane, queue: &Id, now: Timestamp) -> (Vec<u8>, Vec<u8>) {
    let start = ReadyEntry::prefix(lane, queue);
    let mut end = start.clone();
    // Keys at exactly `now` have expired (`now >= expires_at`).
    end.extend_from_slice(&millis_key(now.plus_ms(1)));
    (start, end)
}

/// The ready-index keys of `lane`/`queue` after `after` (from the queue's
/// first key when `None`): `(from, end)`, both exclusive. Every key is
/// longer than its queue's prefix, so excluding the prefix skips nothing.
pub fn ready_range(lane: Lane, queue: &Id, after: Option<&ReadyEntry>) -> (Vec<u8>, Vec<u8>) {
    let prefix = ReadyEntry::prefix(lane, queue);
    let end = prefix_end(&prefix);
    (after.map_or(prefix, ReadyEntry::key), end)
}

/// The end (exclusive) of the keys that start with `prefix`, a queue
/// prefix (which ends in the 0 byte).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    if let Some(last) = end.last_mut() {
        *last = 1;
    }
    end
}

/// `i64::MAX - priority` as an unsigned rank (highest priority, lowest rank).
pub fn priority_rank(priority: i64) -> u64 {
    // Two's complement shifted: i64::MIN..=i64::MAX maps onto 0..=u64::MAX
    // increasing; inverting makes it decreasing.
    !((priority as u64) ^ (1 << 63))
}

pub(super) fn rank_to_priority(rank: u64) -> i64 {
    ((!rank) ^ (1 << 63)) as i64
}

/// The two indexes of a lane and queue that [`OldestReady`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexName {
    /// [`ReadyEntry::key`]s.
    Ready,
    /// [`crate::TaskRecord::held_key`]s.
    Held,
}

impl IndexName {
    /// The column SQL stores keep the index's keys in.
    pub fn column(self) -> &'static str {
        match self {
            IndexName::Ready => "ready_key",
            IndexName::Held => "held_key",
        }
    }
}

/// How long the longest-waiting task of a lane and queue has waited: the
/// earliest time at or before `now` since which one of its tasks could be
/// granted. In the ready index that is the earliest ready time, found by
/// reading the first key of each priority (the index orders a queue's
/// entries by priority, then ready time), so a read costs one seek a
/// priority in use, not one a task; in the held index (a start put off,
/// a lease run out) it is its first key, if that time has come. At most
/// [`OldestReady::SEEKS`] priorities are read; past them the answer is
/// the oldest among those (`truncated`). A store gives the first key in
/// each range it is asked.
#[derive(Debug, Clone)]
pub struct OldestReady {
    prefix: Vec<u8>,
    end: Vec<u8>,
    /// The next range: in the ready index while `Some`, then the held
    /// index once (`held_done`).
    from: Option<Vec<u8>>,
    held_done: bool,
    now: Timestamp,
    seeks: usize,
    oldest: Option<Timestamp>,
    /// More priorities were in use than [`OldestReady::SEEKS`].
    pub truncated: bool,
}

impl OldestReady {
    /// The most priorities one read looks at.
    pub const SEEKS: usize = 64;

    pub fn new(lane: Lane, queue: &Id, now: Timestamp) -> OldestReady {
        let prefix = ReadyEntry::prefix(lane, queue);
        OldestReady {
            end: prefix_end(&prefix),
            from: Some(prefix.clone()),
            held_done: false,
            prefix,
            now,
            seeks: 0,
            oldest: None,
            truncated: false,
        }
    }

    /// The index and range whose first key to read next, `(from, end)`
    /// both exclusive; `None` when the read is done.
    pub fn range(&self) -> Option<(IndexName, Vec<u8>, Vec<u8>)> {
        match &self.from {
            Some(f) => Some((IndexName::Ready, f.clone(), self.end.clone())),
            None if !self.held_done => {
                // Every key is longer than the prefix, so excluding it
                // skips nothing; keys at exactly `now` have come.
                let mut end = self.prefix.clone();
                end.extend_from_slice(&millis_key(self.now.plus_ms(1)));
                Some((IndexName::Held, self.prefix.clone(), end))
            }
            None => None,
        }
    }

    fn saw(&mut self, at: Timestamp) {
        if at <= self.now && self.oldest.is_none_or(|o| at < o) {
            self.oldest = Some(at);
        }
    }

    /// The first key in the last [`OldestReady::range`], if any.
    pub fn found(&mut self, key: Option<&[u8]>) {
        let p = self.prefix.len();
        let number = |k: &[u8], at: usize| -> Option<u64> {
            Some(u64::from_be_bytes(k.get(at..at + 8)?.try_into().ok()?))
        };
        let time = |ms: u64| i64::try_from(ms).ok().map(Timestamp);
        if self.from.is_none() {
            self.held_done = true;
            if let Some(at) = key.and_then(|k| number(k, p)).and_then(time) {
                self.saw(at);
            }
            return;
        }
        let parts = key.and_then(|k| Some((number(k, p)?, time(number(k, p + 8)?)?)));
        let Some((rank, ready)) = parts else {
            self.from = None;
            return;
        };
        self.saw(ready);
        self.seeks += 1;
        // Past every key of this priority: its prefix and the next rank
        // (a key of exactly that length is no entry's, all are longer).
        self.from = match rank.checked_add(1) {
            Some(next) if self.seeks < Self::SEEKS => {
                let mut from = self.prefix.clone();
                from.extend_from_slice(&next.to_be_bytes());
                Some(from)
            }
            Some(_) => {
                self.truncated = true;
                None
            }
            None => None,
        };
    }

    /// The earliest time found at or before `now`.
    pub fn oldest(&self) -> Option<Timestamp> {
        self.oldest
    }

    /// The whole read, for a store that reads keys without waiting:
    /// `first` gives the first key of an index in `(from, end)`.
    pub fn read(
        mut self,
        mut first: impl FnMut(IndexName, &[u8], &[u8]) -> crate::Result<Option<Vec<u8>>>,
    ) -> crate::Result<Option<Timestamp>> {
        while let Some((index, from, end)) = self.range() {
            let k = first(index, &from, &end)?;
            self.found(k.as_deref());
        }
        Ok(self.oldest)
    }
}
