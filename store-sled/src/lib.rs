//! # baton-store-sled
//!
//! An embedded store on sled 0.34, for one process at a time.
//!
//! * Every decision runs inside one sled transaction across the trees it
//!   touches (record, state index, events, outbox, fence counter).
//! * **Durable before answering.** sled syncs by itself only every 500 ms,
//!   so the store flushes before it answers; one flush serves every change
//!   committed before it started ([`flush::GroupFlush`]). No answer, a
//!   refusal or a read included, reveals a change that is not flushed yet.
//! * sled locks its directory. Another process waits for the lock up to a
//!   busy timeout (default 5 s), then gets `Unavailable` naming the path and
//!   saying another process holds it: never a hang, never a panic.
//! * Restoring an old copy of the directory rewinds fences.

mod flush;
mod store;

pub use store::{SledOptions, SledStore};
