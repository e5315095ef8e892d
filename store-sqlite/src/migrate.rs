//! The schema moved forward on open (`schema.rs` holds the migrations),
//! and a file that is not a baton store, or is a newer one, refused.

use super::*;

pub(super) fn migrate(conn: &mut Connection, path: &Path, file: FileId) -> Result<()> {
    let err = |e| map_err(path, e);
    let (version, _, _) = schema_facts(conn).map_err(err)?;
    if version == CURRENT_VERSION {
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(err)?;
    // Another process may have migrated while we waited for the lock.
    let (version, app_id, tables) = schema_facts(&tx).map_err(err)?;
    check_schema(path, version, app_id, tables)?;
    let start = usize::try_from(version).unwrap_or(0);
    for sql in &MIGRATIONS[start..] {
        tx.execute_batch(sql).map_err(err)?;
    }
    if start < 2 {
        record_identity(&tx, file).map_err(err)?;
    }
    if start < 8 {
        count_existing(&tx, path)?;
    }
    tx.pragma_update(None, "application_id", APPLICATION_ID)
        .map_err(err)?;
    tx.pragma_update(None, "user_version", CURRENT_VERSION)
        .map_err(err)?;
    tx.commit().map_err(err)
}

/// Schema 8: every row written before it gets the queue it is counted
/// under (core's rule, so from the record), which the triggers count.
pub(super) fn count_existing(tx: &rusqlite::Transaction<'_>, path: &Path) -> Result<()> {
    let err = |e| map_err(path, e);
    let mut read = tx
        .prepare("SELECT task_id, record FROM tasks")
        .map_err(err)?;
    let rows = read
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
        .map_err(err)?;
    let mut write = tx
        .prepare("UPDATE tasks SET counted_queue = ?2 WHERE task_id = ?1")
        .map_err(err)?;
    for row in rows {
        let (task, json) = row.map_err(err)?;
        let record: TaskRecord = baton_core::json::decode_stored(json.as_bytes()).map_err(|e| {
            Error::corrupt(format!(
                "{}: task {task} does not decode: {e}",
                path.display()
            ))
        })?;
        write
            .execute(params![task, record.census_queue()])
            .map_err(err)?;
    }
    Ok(())
}

pub(super) fn schema_facts(conn: &Connection) -> rusqlite::Result<(i64, i64, i64)> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let app_id: i64 = conn.pragma_query_value(None, "application_id", |r| r.get(0))?;
    let tables: i64 = conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))?;
    Ok((version, app_id, tables))
}

pub(super) fn check_schema(path: &Path, version: i64, app_id: i64, tables: i64) -> Result<()> {
    let foreign = if app_id == 0 {
        tables > 0
    } else {
        app_id != APPLICATION_ID
    };
    if foreign {
        return Err(Error::corrupt(format!(
            "{}: an SQLite database, but not a baton store (application_id {app_id:#x})",
            path.display()
        )));
    }
    if version > CURRENT_VERSION {
        return Err(Error::unsupported(format!(
            "{}: schema version {version} was written by a newer baton; this build reads up to version {CURRENT_VERSION}",
            path.display()
        )));
    }
    Ok(())
}
