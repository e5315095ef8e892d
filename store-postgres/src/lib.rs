//! # baton-store-postgres
//!
//! A baton store on PostgreSQL, for teams with several hosts and a database
//! they already run: `postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?schema=NAME&...]`.
//!
//! * **One writer at a time, store-wide.** Every transaction that writes
//!   locks the store's one counter row first (`SELECT ... FOR UPDATE`) and
//!   holds it to its commit. Fences, event and outbox sequence numbers are
//!   taken from that row, so they increase in commit order across every
//!   host: a resource that keeps the highest fence it saw never refuses a
//!   current holder, and a reader paging events by sequence never skips one
//!   that commits late (a `SEQUENCE` hands out numbers in the order they
//!   are asked for, not the order they commit). Inside that lock the task
//!   rows a decision reads are those of the last commit; core's decision
//!   runs there and its writes commit with the counters.
//! * **The server's clock.** Each transaction takes `now` from the database
//!   server (`clock_timestamp()`, read with the lock) and decides and
//!   judges every lease, deadline and lock delay with it; the caller's
//!   clock is not used. Clients on hosts whose clocks disagree see the
//!   same expiries.
//! * **Durable answers.** Sessions run with `synchronous_commit=on`; a
//!   commit is visible to other sessions only once its log is flushed, so
//!   an answer decided on a read snapshot (a refusal that writes nothing)
//!   reveals only durable commits.
//! * **Group commit.** Callers in one process that write at the same time
//!   share one transaction (core's committer), as on SQLite.
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

mod options;
mod schema;
mod store;
#[cfg(feature = "testing")]
pub mod testing;

pub use options::PostgresOptions;
pub use store::PostgresStore;
