//! # baton-store-sled
//!
//! An embedded store on sled 0.34, for one process at a time.
//!
//! * Every decision runs inside one sled transaction across the trees it
//!   touches (record, state index, events, outbox, fence counter).
//! * **Durable before answering.** sled syncs by itself only every 500 ms,
//!   so the store flushes before it answers; one flush serves every change
//!   committed before it started (`GroupFlush`). No answer, a
//!   refusal or a read included, reveals a change that is not flushed yet.
//! * sled locks its directory. Another process waits for the lock up to a
//!   busy timeout (default 5 s), then gets `Unavailable` naming the path and
//!   saying another process holds it: never a hang, never a panic.
//! * A snapshot sled was writing when its process was killed
//!   (`snap.LSN.generating`) is removed on open, under sled's own lock: it
//!   is not data, and sled 0.34 would otherwise refuse to open the store.
//! * The path's parent must exist, and an existing directory must be empty
//!   or a sled store: nothing is created or written anywhere else.
//! * Dropping the last handle returns only once sled's directory lock is
//!   free, so the next open does not find it held.
//! * Restoring an old copy of the directory rewinds fences.

mod flush;
mod store;

pub use store::{SledOptions, SledStore};
