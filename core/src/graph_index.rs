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
