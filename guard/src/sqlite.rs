//! The SQLite guard: a table of resource -> highest fence in the user's
//! database, and [`admit`], which the user calls inside the transaction
//! that writes (begun `IMMEDIATE`, so no other writer slips between the
//! check and the write). A refusal leaves the transaction for the caller
//! to roll back.

use crate::{GuardError, Presented};
use baton_core::fencing::{self, Admitted, FenceKeys};
use rusqlite::{Connection, OptionalExtension, params};

/// The guard's table.
pub const TABLE: &str = "baton_guard_fences";

/// The statement that creates the guard's table (idempotent).
pub const INSTALL_SQL: &str = "CREATE TABLE IF NOT EXISTS baton_guard_fences (
    resource TEXT PRIMARY KEY NOT NULL,
    fence INTEGER NOT NULL CHECK (fence >= 1),
    admitted_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
)";

/// Reads a resource's mark (`?1`: the resource).
pub const SELECT_SQL: &str = "SELECT fence FROM baton_guard_fences WHERE resource = ?1";

/// Raises a resource's mark (`?1`: the resource, `?2`: the fence admitted).
pub const UPSERT_SQL: &str = "INSERT INTO baton_guard_fences (resource, fence) VALUES (?1, ?2)
     ON CONFLICT (resource) DO UPDATE SET fence = excluded.fence,
         admitted_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";

/// Creates the guard's table in `conn`'s database.
pub fn install(conn: &Connection) -> Result<(), GuardError> {
    conn.execute_batch(INSTALL_SQL).map_err(unavailable)
}

fn unavailable(e: rusqlite::Error) -> GuardError {
    if let rusqlite::Error::SqliteFailure(_, Some(m)) = &e
        && m.contains("no such table")
    {
        return GuardError::NotInstalled(format!(
            "no table {TABLE} in this database (`baton guard install PATH`, or baton_guard::sqlite::install)"
        ));
    }
    GuardError::Unavailable(format!("sqlite: {e}"))
}

/// Admits `presented` for `resource` in the transaction open on `conn`, or
/// refuses it. With `keys`, only a signed token is admitted. Called outside
/// a transaction it refuses: the admission and the write must commit together.
pub fn admit(
    conn: &Connection,
    resource: &str,
    presented: &Presented,
    keys: Option<&FenceKeys>,
) -> Result<Admitted, GuardError> {
    fencing::check_resource(resource)?;
    let fence = presented.fence(keys)?;
    if conn.is_autocommit() {
        return Err(fencing::Refused::Invalid {
            field: "transaction",
            rule: "admit inside the transaction that writes (BEGIN IMMEDIATE), so both commit or neither".into(),
        }
        .into());
    }
    let admitted = fencing::admit(resource, highest(conn, resource)?, fence)?;
    if !matches!(admitted, Admitted::Equal) {
        // check_fence bounds a fence by i64::MAX.
        conn.execute(UPSERT_SQL, params![resource, fence as i64])
            .map_err(unavailable)?;
    }
    Ok(admitted)
}

/// Opens the database at `path` for a guarded write (waiting up to 10 s
/// for another writer's lock).
pub fn open(path: &std::path::Path) -> Result<Connection, GuardError> {
    let conn = Connection::open(path)
        .map_err(|e| GuardError::Unavailable(format!("opening {}: {e}", path.display())))?;
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .map_err(unavailable)?;
    Ok(conn)
}

/// Runs `sql` in one `IMMEDIATE` transaction after admitting `presented`
/// for `resource`: on a refusal nothing of it is applied.
pub fn run_guarded(
    conn: &mut Connection,
    resource: &str,
    presented: &Presented,
    keys: Option<&FenceKeys>,
    sql: &str,
) -> Result<Admitted, GuardError> {
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(unavailable)?;
    let admitted = admit(&tx, resource, presented, keys)?;
    tx.execute_batch(sql)
        .map_err(|e| GuardError::Unavailable(format!("your SQL failed: {e}")))?;
    tx.commit().map_err(unavailable)?;
    Ok(admitted)
}

/// The highest fence admitted for `resource`, if any.
pub fn highest(conn: &Connection, resource: &str) -> Result<Option<u64>, GuardError> {
    let h: Option<i64> = conn
        .query_row(SELECT_SQL, params![resource], |r| r.get(0))
        .optional()
        .map_err(unavailable)?;
    Ok(h.map(|h| h.max(0) as u64))
}
