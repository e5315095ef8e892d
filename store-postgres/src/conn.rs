//! The store's connection layer: what every transaction and read shares
//! (the pool, the store's own runtime, the settings), and the one function
//! that maps Postgres's errors to baton's.

use baton_core::commit::Job;
use baton_core::{Error, Result, Timestamp};
use deadpool_postgres::{Object, Pool, PoolError};
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use tokio_postgres::error::SqlState;

/// The store's own runtime, for the driver's connections: it lives as
/// long as the store, whatever runtime (or none) its callers use, and is
/// shut down without blocking, so dropping the store inside an async task
/// is fine.
pub(crate) struct OwnRuntime(pub(crate) Option<tokio::runtime::Runtime>);

impl Drop for OwnRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

pub(crate) struct Inner {
    pub(crate) name: String,
    /// The store's Postgres schema.
    pub(crate) schema: String,
    /// How to connect (the committer's own connection).
    pub(crate) config: tokio_postgres::Config,
    pub(crate) pool: Pool,
    pub(crate) handle: tokio::runtime::Handle,
    pub(crate) min_ttl_ms: u64,
    pub(crate) commits: AtomicU64,
    pub(crate) write_transactions: AtomicU64,
    /// Requests this handle committed since it last folded the count
    /// deltas (see `PostgresStore::job`).
    pub(crate) since_fold: AtomicU64,
    /// The advisory lock the sequencer of events and notifications holds.
    pub(crate) sequencer_key: i64,
    pub(crate) watch: Watch,
    // Last: dropped after the pool, whose connections run on it.
    pub(crate) _rt: OwnRuntime,
}

/// `watch_ready`'s side: a connection of its own that `LISTEN`s on the
/// ready channel (made on the first watch, again after it broke), and a
/// waiting point per lane and queue that each notification wakes one
/// waiter of per task that became ready: no herd.
#[derive(Default)]
pub(crate) struct Watch {
    pub(crate) listener: tokio::sync::Mutex<Option<tokio_postgres::Client>>,
    pub(crate) waiting: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Notify>>>,
}

/// Where a failure happened, which decides what it means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum At {
    /// Before the commit was sent: nothing was applied.
    Before,
    /// While the commit was on its way: it may have been applied.
    Commit,
}

/// What failed.
pub(crate) enum Cause<'a> {
    Db(&'a tokio_postgres::Error),
    Pool(&'a PoolError),
}

/// The one place Postgres's failures become baton's errors.
pub(crate) fn classify(name: &str, cause: Cause<'_>, at: At) -> Error {
    let e = match cause {
        Cause::Pool(PoolError::Backend(e)) => e,
        Cause::Pool(PoolError::Timeout(_)) => {
            return Error::unavailable(format!(
                "{name}: no connection to the database server within the connect timeout (is it running and reachable?)"
            ));
        }
        Cause::Pool(other) => {
            return Error::unavailable(format!("{name}: no connection: {other}"));
        }
        Cause::Db(e) => e,
    };
    let Some(db) = e.as_db_error() else {
        // No answer from the server: the connection broke or never came up.
        return if at == At::Commit {
            Error::indeterminate(format!(
                "{name}: the connection was lost while the commit was on its way; it may or may not have been applied: read the task before anything else ({e})"
            ))
        } else {
            Error::unavailable(format!(
                "{name}: cannot reach the database server ({e}); nothing was applied"
            ))
        };
    };
    let code = db.code();
    let msg = db.message();
    // A session ended (FATAL: an operator's kill, a shutdown) while COMMIT
    // was on its way: the server may have committed before it ended the
    // session, so the answer is unknown. An ERROR at COMMIT rolled back.
    let session_ended = matches!(db.severity(), "FATAL" | "PANIC")
        || [SqlState::ADMIN_SHUTDOWN, SqlState::CRASH_SHUTDOWN].contains(code)
        || code.code().starts_with("08");
    if at == At::Commit && session_ended {
        return Error::indeterminate(format!(
            "{name}: the session ended while the commit was on its way ({msg}); it may or may not have been applied: read the task before anything else"
        ));
    }
    let detail = if *code == SqlState::READ_ONLY_SQL_TRANSACTION {
        format!("the server is read-only (a replica, or default_transaction_read_only) ({msg})")
    } else if *code == SqlState::QUERY_CANCELED {
        format!(
            "a statement ran past statement_timeout (another writer holds the store's lock, or the server is slow) ({msg})"
        )
    } else if *code == SqlState::LOCK_NOT_AVAILABLE {
        format!("a lock wait ran past its timeout ({msg})")
    } else if [
        SqlState::ADMIN_SHUTDOWN,
        SqlState::CRASH_SHUTDOWN,
        SqlState::CANNOT_CONNECT_NOW,
    ]
    .contains(code)
    {
        format!("the server is shutting down or starting up ({msg})")
    } else if *code == SqlState::T_R_SERIALIZATION_FAILURE
        || *code == SqlState::T_R_DEADLOCK_DETECTED
    {
        format!("the transaction was aborted by the server; retry ({msg})")
    } else if *code == SqlState::INVALID_PASSWORD
        || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
    {
        format!("the server refused the login ({msg})")
    } else if *code == SqlState::INVALID_CATALOG_NAME {
        format!("the database does not exist ({msg})")
    } else if *code == SqlState::DISK_FULL {
        format!("the server's disk is full ({msg})")
    } else if *code == SqlState::UNDEFINED_TABLE || *code == SqlState::UNDEFINED_COLUMN {
        return Error::corrupt(format!(
            "{name}: the schema is not the one baton wrote ({msg})"
        ));
    } else {
        format!("{msg} (SQLSTATE {})", code.code())
    };
    // The server answered with an error before COMMIT, or COMMIT itself
    // failed with an ERROR: either way the transaction did not commit.
    Error::unavailable(format!("{name}: {detail}; nothing was applied"))
}

impl Inner {
    /// Runs `f` on the store's runtime and waits for it from any runtime.
    pub(crate) async fn spawn<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        self.handle
            .spawn(f)
            .await
            .map_err(|e| Error::unavailable(format!("{}: a store task failed: {e}", self.name)))?
    }

    /// Waits for `f` on the store's runtime from a thread outside it (the
    /// committer, a blocking thread).
    pub(crate) fn wait<T>(&self, f: impl Future<Output = T>) -> T {
        self.handle.block_on(f)
    }

    pub(crate) fn db(&self, e: &tokio_postgres::Error) -> Error {
        classify(&self.name, Cause::Db(e), At::Before)
    }

    pub(crate) async fn client(&self) -> Result<Object> {
        self.pool
            .get()
            .await
            .map_err(|e| classify(&self.name, Cause::Pool(&e), At::Before))
    }

    pub(crate) fn decode<T: serde::de::DeserializeOwned>(&self, json: &str) -> Result<T> {
        baton_core::json::decode_stored(json.as_bytes()).map_err(|e| {
            Error::corrupt(format!("{}: a stored row does not decode: {e}", self.name))
        })
    }

    pub(crate) fn stored_u64(&self, what: &str, n: i64) -> Result<u64> {
        u64::try_from(n)
            .map_err(|_| Error::corrupt(format!("{}: {what} is negative ({n})", self.name)))
    }
}

/// `job` as decided at `now` (the server's time, read once its locks are
/// held).
pub(crate) fn at(job: &Job, now: Timestamp) -> Job {
    let mut job = job.clone();
    job.timed_by_store(now);
    job
}

pub(crate) fn encode<T: serde::Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::corrupt(format!("cannot encode a row: {e}")))
}
