//! # baton-adapter-fabric
//!
//! The distributed store: baton on an etcd v3 cluster, for many hosts.
//!
//! * **The engine's clock decides liveness.** Each grant puts a holder key
//!   bound to an etcd lease; a grant is live exactly while that key exists.
//!   The task record is never lease-bound, so expiry deletes no history;
//!   the STALLED bookkeeping is written by the next write that touches the
//!   task, or by `sweep`, once the holder key is gone.
//! * **Fences are etcd revisions**: the revision of the transaction that
//!   made the grant (for a fresh grant, the holder key's `create_revision`),
//!   strictly increasing across the cluster and across leader changes, at no
//!   extra write. The record stores a placeholder that the adapter fills in
//!   from the key's revision when it reads it.
//! * **Every decision is one transaction** guarded by compares on what the
//!   decision read (the record's and the holder key's revisions), in a
//!   bounded read-decide-compare loop: a concurrent change makes it retry or
//!   refuse, never overwrite.
//! * **Leases are reused, never shortened.** A lease a grant left holding
//!   nothing is kept a few seconds for the store's next grant of the same
//!   length and refreshed to its whole TTL before use, the refresh proven
//!   by a linearizable read answered in the keep-alive's term (a keep-alive
//!   a deposed leader answered is lost at the next election); dropping the store
//!   revokes what it kept, and [`finish_revokes`] waits for those revokes.
//! * **Lease TTLs are whole seconds** with a minimum (2 s with etcd's default
//!   election timeout): a TTL is rounded up, and the grant reports the
//!   effective expiry.
//! * **Fail closed.** Every call has a deadline (`timeout`, default 3 s).
//!   Without quorum, operations answer `Unavailable`. A write whose reply was
//!   lost is resolved by re-reading the request id it stored; if that cannot
//!   be settled, the answer is `Indeterminate`.
//!
//! etcd's limits: a request of at most 1.5 MiB and 128 operations per
//! transaction. A decision writes at most a record (a manifest is at most
//! 64 KiB, an error 16 KiB), a holder key, three events and two
//! notifications, well inside both.
//!
//! Run etcd with `--auto-compaction-retention` (history is never compacted
//! otherwise) and `--experimental-enable-lease-checkpoint` (without it a
//! leader change resets every lease to its full TTL).

mod keys;
mod store;

pub use store::{FabricOptions, FabricStore, finish_revokes};

#[doc(hidden)]
#[cfg(feature = "testing")]
pub mod testing;
