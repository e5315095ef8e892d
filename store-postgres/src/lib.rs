//! # baton-store-postgres
//!
//! A baton store on PostgreSQL, for teams with several hosts and a database
//! they already run: `postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?schema=NAME&...]`.
//!
//! * **No store-wide lock.** A writing transaction locks the rows of the
//!   tasks it decides on (`FOR UPDATE`, in id order; `next` passes over a
//!   candidate another holds with `SKIP LOCKED`), so writers of different
//!   tasks commit side by side, on every host, and share WAL flushes.
//!   Fences come from a `SEQUENCE`, taken once the rows are locked: the
//!   later grant of a task, and any grant asked for after another was
//!   answered, has the higher fence. Events and notifications are
//!   inserted unnumbered and numbered by their readers in commit order
//!   (one short numbering at a time), so paging by number never skips one
//!   that committed late. The decision and its writes take two round
//!   trips: the locks, clock and fences; the writes and `COMMIT`.
//! * **The server's clock.** Each transaction takes `now` from the database
//!   server (`clock_timestamp()`, read after the row locks) and decides and
//!   judges every lease, deadline and lock delay with it; the caller's
//!   clock is not used. Clients on hosts whose clocks disagree see the
//!   same expiries.
//! * **Durable answers.** Sessions run with `synchronous_commit=on`; a
//!   commit is visible to other sessions only once its log is flushed, so
//!   an answer that writes nothing (a refusal, rolled back) reveals only
//!   durable commits.
//! * **Group commit.** Callers in one process that write at the same time
//!   share one transaction (core's committer), as on SQLite; processes
//!   share the server's WAL flushes.
//!
//! ## Failing closed
//!
//! A server that is down or restarting, a connection lost before the
//! commit, a read-only server (a replica, `default_transaction_read_only`),
//! a statement or lock wait past `statement_timeout`: `Unavailable`, nothing
//! granted. A connection lost while the commit was on its way:
//! `Indeterminate`. A stored row that does not decode: `Corrupt`. A schema
//! written by a newer baton: `Unsupported`. All of it in one function,
//! `store`'s `classify`; the pool replaces a broken connection, so the
//! store works again once the fault is gone.

mod conn;
mod options;
mod schema;
mod store;
#[cfg(feature = "testing")]
pub mod testing;
mod txn;

pub use options::PostgresOptions;
pub use schema::CURRENT_VERSION as SCHEMA_VERSION;
pub use store::{FOLD_EVERY, PostgresStore};
