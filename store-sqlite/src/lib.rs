//! # baton-store-sqlite
//!
//! The embedded default store: one SQLite file in WAL mode with
//! `synchronous=FULL`, so a grant that was answered survives a crash or a
//! power loss. Every decision runs inside one `BEGIN IMMEDIATE` write
//! transaction, so read-decide-write is atomic across every process on the
//! host; the fence counter lives in the same transaction, so a fence is
//! never issued twice. Reads use their own connection and never take the
//! write lock.
//!
//! ## What it does not promise
//!
//! * **Local filesystems only.** SQLite's locking is a single-host
//!   guarantee; on a network share (NFS, SMB) two hosts can both believe
//!   they hold the write lock. No promise is made there: use the Fabric
//!   adapter for many hosts.
//! * **Restoring an old copy of the file rewinds fences.** A resource
//!   server that remembers the highest fence it has seen will then refuse
//!   the new, lower fences; do not restore a baton database from backup
//!   while workers hold grants from the newer one.
//!
//! ## Failing closed
//!
//! A path that cannot be created, a read-only file or directory, a file
//! that is not an SQLite database (or is truncated), a database file, log
//! or index deleted or replaced while open (checked in every transaction by
//! device and inode), a second name for the file (a hard link, a single-file
//! bind mount), a database file that is not the one its write-ahead log was
//! written for, a lock held past the busy timeout: each answers
//! `Unavailable` (or `Corrupt`) naming the path and the cause, and nothing
//! is granted. A schema written by a newer baton is `Unsupported`.

mod gate;
mod schema;
mod store;

pub use store::{SqliteOptions, SqliteStore};
