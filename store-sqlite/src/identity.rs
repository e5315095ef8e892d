//! Whether the files a path names are the store's own: SQLite finds its
//! locks and its write-ahead log by name, so a second name for the file,
//! a copy put in place of a live store, a file moved away from its log or
//! a log deleted under live processes would each grant twice. Each is
//! refused before anything is read from it.

use super::*;

/// Where SQLite keeps the write-ahead log and its index: beside the file
/// SQLite resolved `path` to (it follows symbolic links).
pub(super) fn sidecars(conn: &Connection, path: &Path) -> (PathBuf, PathBuf) {
    let main = conn
        .path()
        .filter(|p| !p.is_empty())
        .map_or_else(|| path.to_path_buf(), PathBuf::from);
    let with = |suffix: &str| {
        let mut s = main.clone().into_os_string();
        s.push(suffix);
        PathBuf::from(s)
    };
    (with("-wal"), with("-shm"))
}

/// SQLite's locks and its write-ahead log are found by the file's name. A
/// second name for the same file (a hard link) gets a log of its own, and
/// two logs for one database grant twice and corrupt it.
pub(super) fn check_links(path: &Path) -> Result<()> {
    let m = std::fs::metadata(path).map_err(|e| {
        Error::unavailable(format!(
            "{}: cannot stat the database file: {e}",
            path.display()
        ))
    })?;
    if m.nlink() > 1 {
        return Err(Error::unavailable(format!(
            "{}: the database file has {} hard links; SQLite finds its lock and write-ahead log by name, so a second name grants twice. Keep one name (a symbolic link is safe)",
            path.display(),
            m.nlink()
        )));
    }
    Ok(())
}

/// A single file bind-mounted over `path` (a container mounting `host.db`
/// as `/data/x.db`) is the same database under another name, with a log
/// the host never sees. Refused when this process can see the mount.
pub(super) fn refuse_mount_point(path: &Path) -> Result<()> {
    let Ok(real) = std::fs::canonicalize(path) else {
        return Ok(());
    };
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Ok(());
    };
    let is_mount = mounts.lines().any(|line| {
        line.split(' ')
            .nth(4)
            .is_some_and(|m| Path::new(&unescape_mount(m)) == real)
    });
    if is_mount && real.is_file() {
        return Err(Error::unavailable(format!(
            "{}: the database file is a bind mount of a single file; SQLite keeps its write-ahead log beside the name, so the other side of the mount would use another log and grant twice. Mount the directory instead",
            path.display()
        )));
    }
    Ok(())
}

/// `/proc/self/mountinfo` writes space, tab, newline and backslash as `\ooo`.
pub(super) fn unescape_mount(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let n = bytes[i + 1..i + 4]
                .iter()
                .fold(0u32, |n, b| n * 8 + u32::from(b - b'0'));
            out.push(u8::try_from(n).unwrap_or(b'?'));
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether the write-ahead log at `wal` holds at least one frame written
/// since its last reset (its first frame carries the header's salts).
/// The layout is SQLite's file format: a 32-byte header, then frames of a
/// 24-byte header and one page.
pub(super) fn wal_has_frames(wal: &Path) -> bool {
    use std::io::Read;
    let Ok(mut f) = std::fs::File::open(wal) else {
        return false;
    };
    let mut head = [0u8; 56];
    if f.read_exact(&mut head).is_err() {
        return false;
    }
    let magic = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    if magic & !1 != 0x377f_0682 {
        return false;
    }
    // Header salts at 16..24; the first frame's at 32 + 8..32 + 16.
    head[16..24] == head[40..48]
}

/// Refuses to open a store whose write-ahead log was deleted or truncated
/// while other processes held it: the shared-memory index they keep says
/// the log has frames the file at the log's path does not have, and a
/// process that trusted either would read a database without them.
/// Reads SQLite's documented wal-index header (two copies of 48 bytes, in
/// native byte order) without a lock, so a copy torn by a concurrent commit
/// is read again, and the check is skipped if it stays torn.
///
/// Unlocked, the check also sees SQLite's own last close between its two
/// steps: the last connection deletes the log, then unlinks the index. So
/// a mismatch is reported only when it holds for [`SETTLE`]: a close
/// unlinks the index microseconds after the log, a deleted log stays.
pub(super) fn check_log_matches_index(path: &Path) -> Result<()> {
    let main = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let with = |suffix: &str| {
        let mut s = main.clone().into_os_string();
        s.push(suffix);
        PathBuf::from(s)
    };
    let (wal, shm) = (with("-wal"), with("-shm"));
    let started = std::time::Instant::now();
    loop {
        match log_against_index(&wal, &shm) {
            Sight::Consistent => return Ok(()),
            Sight::Torn if started.elapsed() > SETTLE => return Ok(()),
            Sight::Torn => {}
            Sight::Short {
                frames,
                needed,
                have,
            } if started.elapsed() >= SETTLE => {
                return Err(Error::unavailable(format!(
                    "{}: its write-ahead log {} was deleted or truncated while the store was in use: the index {} lists {frames} frames ({needed} bytes) and the log has {have} bytes. Commits in those frames are only in processes still holding the old log: stop every process using the store (once none has it open, the index is stale and SQLite rebuilds it if it is removed)",
                    path.display(),
                    wal.display(),
                    shm.display()
                )));
            }
            Sight::Short { .. } => {}
        }
        std::thread::sleep(SETTLE / 8);
    }
}

/// How long a log shorter than its index says must stay so, under an
/// unchanged index, before the store is refused.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(80);

enum Sight {
    Consistent,
    Torn,
    Short { frames: u32, needed: u64, have: u64 },
}

fn log_against_index(wal: &Path, shm: &Path) -> Sight {
    let Ok(index) = read_index_header(shm) else {
        return Sight::Consistent;
    };
    if index.len() < 96 || index[..48] != index[48..96] {
        return Sight::Torn;
    }
    let initialised = index[12] == 1;
    let page = u32::from(u16::from_ne_bytes([index[14], index[15]]));
    let page = if page == 1 { 65_536 } else { page };
    let frames = u32::from_ne_bytes([index[16], index[17], index[18], index[19]]);
    if !initialised || frames == 0 {
        return Sight::Consistent;
    }
    let needed = 32 + u64::from(frames) * (24 + u64::from(page));
    let have = std::fs::metadata(wal).map(|m| m.len()).unwrap_or(0);
    if have >= needed {
        return Sight::Consistent;
    }
    Sight::Short {
        frames,
        needed,
        have,
    }
}

/// Reads the first 96 bytes of the shared-memory index at `shm` through a
/// descriptor this process keeps open for good. SQLite's locks on the index
/// are POSIX record locks, which the kernel drops for the whole process
/// when any descriptor of the file is closed: reading it through a fresh
/// descriptor and closing that, in a process that has the store open
/// already, would release SQLite's own locks and let another process
/// rebuild the index under it.
fn read_index_header(shm: &Path) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::{FileExt, MetadataExt};
    static KEPT: std::sync::Mutex<Vec<(u64, u64, std::fs::File)>> =
        std::sync::Mutex::new(Vec::new());
    let meta = std::fs::metadata(shm)?;
    let id = (meta.dev(), meta.ino());
    let mut kept = KEPT.lock().unwrap_or_else(|p| p.into_inner());
    let at = match kept.iter().position(|(d, i, _)| (*d, *i) == id) {
        Some(at) => at,
        None => {
            let file = std::fs::File::open(shm)?;
            let m = file.metadata()?;
            // The name may have been replaced between the two looks: key
            // the descriptor by what it opened.
            kept.push((m.dev(), m.ino(), file));
            kept.len() - 1
        }
    };
    let mut buf = vec![0u8; 96];
    let n = kept[at].2.read_at(&mut buf, 0)?;
    buf.truncate(n);
    Ok(buf)
}

/// Refuses a database file that is not the one its write-ahead log was
/// written for. The store records the identity of its file; a process that
/// finds another file at the path while a log with frames sits beside it
/// is looking at a copy put in place of a live store, and replaying that
/// log onto it would corrupt it. With no frames to replay, the new file is
/// adopted (a restore done while nothing ran).
pub(super) fn check_wal_belongs(conn: &mut Connection, path: &Path, actual: FileId) -> Result<()> {
    let err = |e| map_err(path, e);
    let stored = || -> rusqlite::Result<Option<FileId>> {
        let has_table: i64 = conn.query_row(
            "SELECT count(*) FROM sqlite_master WHERE name = 'file_identity'",
            [],
            |r| r.get(0),
        )?;
        if has_table == 0 {
            return Ok(None);
        }
        conn.query_row("SELECT dev, ino FROM file_identity WHERE id = 1", [], |r| {
            Ok(FileId {
                dev: r.get::<_, i64>(0)? as u64,
                ino: r.get::<_, i64>(1)? as u64,
            })
        })
        .optional()
    };
    let Some(stored) = stored().map_err(err)? else {
        return Ok(());
    };
    if stored == actual {
        return Ok(());
    }
    let (wal, _) = sidecars(conn, path);
    if wal_has_frames(&wal) {
        return Err(Error::corrupt(format!(
            "{}: the database file is not the one its write-ahead log {} was written for (the file was replaced while the log remained); nothing was read or written. See README.md, \"Backup and restore\"",
            path.display(),
            wal.display()
        )));
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(err)?;
    record_identity(&tx, actual).map_err(err)?;
    tx.commit().map_err(err)
}

/// The check of [`check_log_not_left_behind`], reading only: run before
/// anything is written at this name (adopting a copy's new inode writes,
/// and those frames of its own would hide where it came from). Returns
/// this path as it is to be recorded, `None` when it is recorded already.
pub(super) fn refuse_log_left_behind(conn: &Connection, path: &Path) -> Result<Option<String>> {
    let here = std::fs::canonicalize(path).map_err(|e| {
        Error::unavailable(format!("{}: cannot resolve the path: {e}", path.display()))
    })?;
    let here_text = here.to_string_lossy().into_owned();
    // A store from before the path was recorded (schema 5) has no column:
    // nothing recorded.
    let recorded: Option<String> = conn
        .query_row("SELECT path FROM file_identity WHERE id = 1", [], |r| {
            r.get(0)
        })
        .ok()
        .flatten();
    if recorded.as_deref() == Some(here_text.as_str()) {
        return Ok(None);
    }
    if let Some(old) = recorded.as_deref().map(PathBuf::from) {
        let old_wal = PathBuf::from(format!("{}-wal", old.display()));
        let (own_wal, _) = sidecars(conn, path);
        if !wal_has_frames(&own_wal) && wal_has_frames(&old_wal) {
            return Err(Error::corrupt(format!(
                "{}: this store was last opened as {}, and its write-ahead log {} still holds commits that may not be in this file (it was moved, or copied, without its log); nothing was read or written. Move it back with its log (mv {} {}), or stop every process using it, checkpoint it at its old name (sqlite3 {} \"PRAGMA wal_checkpoint(TRUNCATE)\") and move it again; see README.md, \"Backup and restore\"",
                path.display(),
                old.display(),
                old_wal.display(),
                path.display(),
                old.display(),
                old.display(),
            )));
        }
    }
    Ok(Some(here_text))
}

/// Refuses a database file moved or copied away from a write-ahead log
/// that still holds commits: the store records the path it was last
/// opened at, and a process that opens it under another name, with no
/// frames of its own beside it while the log at the old name has frames,
/// may read the database without those commits and grant their fences
/// again. Whatever is at the old name (the original, after a `cp`; nothing,
/// after a move to another filesystem) and whatever the inode: a copy
/// that has every commit (an online backup) cannot be told from one that
/// lacks some, so both are refused until the original's log is
/// checkpointed. Otherwise the new path is recorded, and checkpointed into
/// the file so that a move right after finds it there.
pub(super) fn check_log_not_left_behind(
    conn: &mut Connection,
    path: &Path,
    actual: FileId,
) -> Result<()> {
    let err = |e| map_err(path, e);
    let Some(here_text) = refuse_log_left_behind(conn, path)? else {
        return Ok(());
    };
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(err)?;
    tx.execute(
        "INSERT INTO file_identity (id, dev, ino, path) VALUES (1, ?1, ?2, ?3)
         ON CONFLICT (id) DO UPDATE SET path = excluded.path",
        params![actual.dev as i64, actual.ino as i64, here_text],
    )
    .map_err(err)?;
    tx.commit().map_err(err)?;
    // Best effort: a checkpoint that readers hold back finishes later.
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
        .map_err(err)
}

pub(super) fn record_identity(tx: &rusqlite::Transaction<'_>, id: FileId) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO file_identity (id, dev, ino) VALUES (1, ?1, ?2)
         ON CONFLICT (id) DO UPDATE SET dev = excluded.dev, ino = excluded.ino",
        params![id.dev as i64, id.ino as i64],
    )
    .map(|_| ())
}

pub(super) fn file_id(path: &Path) -> Result<FileId> {
    let m = std::fs::metadata(path)
        .map_err(|e| Error::unavailable(format!("{}: cannot stat {e}", path.display())))?;
    Ok(FileId {
        dev: m.dev(),
        ino: m.ino(),
    })
}
