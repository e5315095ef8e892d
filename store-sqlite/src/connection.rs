//! Opening a connection: the flags, the write-ahead log, and a busy
//! handler that waits in short even steps.

use super::*;

pub(super) fn open_connection(path: &Path, options: &SqliteOptions) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut conn = Connection::open_with_flags(path, flags).map_err(|e| map_err(path, e))?;
    // Until the store knows its files belong together, closing must not
    // checkpoint a log into a database it was not written for.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
        .map_err(|e| map_err(path, e))?;
    install_busy_handler(&mut conn, options.busy_timeout).map_err(|e| map_err(path, e))?;
    // Every statement the store runs stays prepared (rusqlite keeps 16 by
    // default; the store has more, and a miss parses the SQL again).
    conn.set_prepared_statement_cache_capacity(64);
    if conn
        .is_readonly(rusqlite::MAIN_DB)
        .map_err(|e| map_err(path, e))?
    {
        return Err(Error::unavailable(format!(
            "{}: the database is read-only (file or directory not writable)",
            path.display()
        )));
    }
    Ok(conn)
}

/// WAL lets readers run beside the writer; `synchronous=FULL` makes a
/// commit durable before it returns.
pub(super) fn use_wal(conn: &Connection, path: &Path) -> Result<()> {
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(|e| map_err(path, e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Error::unavailable(format!(
            "{}: cannot switch to WAL mode (journal mode is {mode})",
            path.display()
        )));
    }
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(|e| map_err(path, e))?;
    // Every write of a decision opens a statement journal (an upsert, the
    // count triggers): the page images that undo one statement, if it
    // fails, within the transaction. Durability is the log's; the journal
    // need not touch a disk. On a temporary file it cost a tenth of a
    // batch's commit in `pwrite` (profile in benches/README.md).
    conn.pragma_update(None, "temp_store", "MEMORY")
        .map_err(|e| map_err(path, e))
}

/// SQLite's own busy handler sleeps in growing steps (up to 100 ms), which
/// lets newcomers overtake processes that have waited longest. Polling in
/// short, even steps keeps the worst wait close to the typical one.
pub(super) fn install_busy_handler(
    conn: &mut Connection,
    timeout: Duration,
) -> rusqlite::Result<()> {
    let mut started = Instant::now();
    conn.busy_handler(Some(move |count: i32| {
        if count == 0 {
            started = Instant::now();
        }
        if started.elapsed() >= timeout {
            return false;
        }
        let jitter = u64::from(count.unsigned_abs() % 5);
        std::thread::sleep(Duration::from_micros(100 + jitter * 60));
        true
    }))
}
