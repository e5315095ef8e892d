//! One open SQLite transaction as core's engine sees it (`Txn` and
//! `NextSource`), and the statements it runs.

use super::*;

/// One open transaction, as core's commit helpers see it.
pub(super) struct SqlTx<'a> {
    inner: &'a Inner,
    tx: &'a rusqlite::Transaction<'a>,
    /// Whether anything was written (so the commit is needed).
    pub(super) wrote: bool,
    /// The records this transaction has read or written, as they stand in
    /// it: one commit reads the same task again and again (a `next` reads
    /// its candidate from the index and then decides it; a success's
    /// dependents each read it as their dependency), and each read would
    /// be a lookup and a decode. Nothing else writes while the transaction
    /// holds the write lock (or, on a snapshot, can be seen), so a record
    /// changes here only through [`Txn::write`], which replaces it.
    seen: HashMap<TaskId, TaskRecord>,
}

impl<'a> SqlTx<'a> {
    pub(super) fn new(inner: &'a Inner, tx: &'a rusqlite::Transaction<'a>) -> Self {
        SqlTx {
            inner,
            tx,
            wrote: false,
            seen: HashMap::new(),
        }
    }
}

impl Txn for SqlTx<'_> {
    fn load(&mut self, task: &TaskId, now: Timestamp) -> Result<Option<Snapshot>> {
        if let Some(r) = self.seen.get(task) {
            return Ok(Some(Snapshot::at(r.clone(), now)));
        }
        let Some(json) = load(self.tx, task).map_err(|e| self.inner.err(e))? else {
            return Ok(None);
        };
        let record: TaskRecord = self.inner.decode(&json)?;
        self.seen.insert(task.clone(), record.clone());
        Ok(Some(Snapshot::at(record, now)))
    }

    fn write(&mut self, d: &mut Decision) -> Result<()> {
        self.wrote = true;
        self.inner.write_decision(self.tx, d)?;
        if let Some(r) = d.record_to_write() {
            if d.forgets() {
                self.seen.remove(&r.task);
            } else {
                self.seen.insert(r.task.clone(), r.clone());
            }
        }
        Ok(())
    }
}

impl SqlTx<'_> {
    /// The first `limit` records a range query over an index yields, in its
    /// order. The limit is not bound into the statement: SQLite plans a
    /// bound LIMIT by its value (0 and 1 apart from the rest) and prepares
    /// the statement again whenever a new binding crosses between them (a
    /// `next` asks for one candidate on its snapshot and two in its
    /// commit: a parse on every call). Rows are read one at a time, so
    /// stopping early reads no more.
    fn records(
        &mut self,
        sql: &str,
        p: &[&dyn rusqlite::ToSql],
        limit: usize,
        now: Timestamp,
    ) -> Result<Vec<Snapshot>> {
        let err = |e| self.inner.err(e);
        let mut s = self.tx.prepare_cached(sql).map_err(err)?;
        let rows = s.query_map(p, |r| r.get::<_, String>(0)).map_err(err)?;
        let mut out = Vec::new();
        for json in rows.take(limit) {
            let json = json.map_err(err)?;
            let record: TaskRecord = self.inner.decode(&json)?;
            self.seen.insert(record.task.clone(), record.clone());
            out.push(Snapshot::at(record, now));
        }
        Ok(out)
    }
}

/// The highest fence minted: carried by the last event since schema 5, in
/// the `fence` row before it (and when a decision minted one but appended
/// no event).
pub(super) const FENCE_TOP_SQL: &str = "SELECT max(
        coalesce((SELECT fence_top FROM events ORDER BY seq DESC LIMIT 1), 0),
        (SELECT value FROM fence WHERE id = 1))";

/// An event, carrying the fence counter (`?5`: the highest fence minted).
pub(super) const INSERT_EVENT_SQL: &str =
    "INSERT INTO events (task_id, kind, conflict_key, body, fence_top)
    VALUES (?1, ?2, ?3, ?4, ?5)";

/// A queue's ready index in `next`'s order (see [`SqlTx::records`]).
pub(super) const READY_SQL: &str = "SELECT record FROM tasks INDEXED BY tasks_ready
     WHERE ready_key > ?1 AND ready_key < ?2 ORDER BY ready_key";
/// A queue's held tasks by lease expiry.
pub(super) const HELD_SQL: &str = "SELECT record FROM tasks INDEXED BY tasks_held
     WHERE held_key > ?1 AND held_key < ?2 ORDER BY held_key";

impl NextSource for SqlTx<'_> {
    fn ready(&mut self, page: IndexPage<'_>) -> Result<Vec<Snapshot>> {
        match page.ready_keys() {
            Some((from, end)) => self.records(READY_SQL, &[&from, &end], page.limit, page.now),
            None => Ok(Vec::new()),
        }
    }

    fn expired(&mut self, page: IndexPage<'_>) -> Result<Vec<Snapshot>> {
        let (start, end) = page.held_keys();
        self.records(HELD_SQL, &[&start, &end], page.limit, page.now)
    }
}

pub(super) fn load(
    tx: &rusqlite::Transaction<'_>,
    task: &TaskId,
) -> rusqlite::Result<Option<String>> {
    tx.prepare_cached("SELECT record FROM tasks WHERE task_id = ?1")?
        .query_row([task.as_str()], |r| r.get(0))
        .optional()
}

/// Events as `(seq, count, body)` rows, for `sql` with `p`.
pub(super) fn event_rows(
    tx: &rusqlite::Transaction<'_>,
    sql: &str,
    p: &[&dyn rusqlite::ToSql],
) -> rusqlite::Result<Vec<(i64, i64, String)>> {
    let mut s = tx.prepare_cached(sql)?;
    let rows = s.query_map(p, |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    rows.collect()
}
