//! The store's directory and layout: sled's own lock, a directory that is
//! not a store refused, snapshots a crash left half written removed, and
//! the layout checked and moved forward on open (layout 3's counts).

use super::*;

/// The layout version this build writes.
/// 2: the work graph's `ready` and `held` trees (a version 1 store has no
/// graph tasks, so it is upgraded in place by writing the version).
/// 3: counts by (queue, stored state) in `meta` under [`COUNT_PREFIX`],
/// changed in the transaction of every record write (a version 2 store is
/// counted once when opened).
pub(super) const SCHEMA_VERSION: u64 = 3;

/// Where `meta` keeps the counts: `count/QUEUE\0STATE` to an i64, big-endian.
pub(super) const COUNT_PREFIX: &[u8] = b"count/";

pub(super) fn count_key(queue: &str, state: baton_core::State) -> Vec<u8> {
    let mut k = COUNT_PREFIX.to_vec();
    k.extend_from_slice(&prefixed_key(queue, state.as_str().as_bytes()));
    k
}

/// A count's key back to its queue and state; `None` for a key no
/// build wrote.
pub(super) fn count_of_key(key: &[u8]) -> Option<(String, baton_core::State)> {
    let rest = key.strip_prefix(COUNT_PREFIX)?;
    let cut = rest.iter().position(|b| *b == 0)?;
    let queue = std::str::from_utf8(&rest[..cut]).ok()?;
    let state = std::str::from_utf8(&rest[cut + 1..]).ok()?;
    Some((
        queue.to_owned(),
        baton_core::State::parse("state", state).ok()?,
    ))
}

pub(super) fn read_i64(v: &[u8]) -> Option<i64> {
    Some(i64::from_be_bytes(v.try_into().ok()?))
}
pub(super) const MAGIC: &[u8] = b"baton";

/// Takes sled's own directory lock (an exclusive `flock` on `PATH/db`) if
/// nobody holds it. `Ok(None)`: somebody does.
pub(super) fn try_lock_dir(path: &Path) -> std::io::Result<Option<std::fs::File>> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path.join("db"))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

/// What sled keeps in its directory: a store directory holding anything
/// else is somebody else's, and is refused rather than written into.
pub(super) fn is_sled_entry(name: &str) -> bool {
    matches!(name, "conf" | "db" | "blobs") || name.starts_with("snap.")
}

/// Refuses a path whose parent does not exist (sled would create the whole
/// path) and a non-empty directory that is not a sled store.
pub(super) fn check_directory(path: &Path) -> Result<()> {
    let p = path.display();
    match std::fs::metadata(path) {
        Err(_) => {
            let parent = match path.parent() {
                Some(d) if d.as_os_str().is_empty() => Path::new("."),
                Some(d) => d,
                None => Path::new("/"),
            };
            // A folder that is not there will not appear by itself: bad
            // input naming the store (as SQLite's), not a store to retry.
            if !parent.is_dir() {
                return Err(Error::invalid(
                    "store",
                    format!(
                        "{p}: cannot create the store: no such folder {} (the directory does not exist; create it first)",
                        parent.display()
                    ),
                ));
            }
            Ok(())
        }
        Ok(m) if !m.is_dir() => Err(Error::unavailable(format!(
            "{p}: is not a directory (a sled store is a directory)"
        ))),
        Ok(_) => {
            let entries = std::fs::read_dir(path)
                .map_err(|e| Error::unavailable(format!("{p}: cannot read the directory: {e}")))?;
            for entry in entries {
                let entry = entry.map_err(|e| {
                    Error::unavailable(format!("{p}: cannot read the directory: {e}"))
                })?;
                let name = entry.file_name();
                if !name.to_str().is_some_and(is_sled_entry) {
                    return Err(Error::corrupt(format!(
                        "{p}: a non-empty directory that is not a sled store (it holds {:?}); give baton an empty or new directory",
                        name
                    )));
                }
            }
            Ok(())
        }
    }
}

/// A snapshot sled was writing when its process died (`snap.LSN.generating`)
/// is not data: sled writes it whole, syncs it and only then renames it to
/// `snap.LSN`. sled 0.34 reads a leftover one as corruption and refuses to
/// open. Removed only while holding sled's directory lock, so no running
/// process can be writing it.
pub(super) fn remove_interrupted_snapshots(path: &Path) -> Result<()> {
    let Ok(Some(_lock)) = try_lock_dir(path) else {
        return Ok(());
    };
    let Ok(entries) = std::fs::read_dir(path) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with("snap.") && name.ends_with(".generating") {
            std::fs::remove_file(entry.path()).map_err(|e| {
                Error::unavailable(format!(
                    "{}: cannot remove the interrupted snapshot {name}: {e}",
                    path.display()
                ))
            })?;
        }
    }
    Ok(())
}

/// Marks a new store as baton's; refuses a foreign or newer one.
/// Layout 3: the counts of a store written before it, from its records
/// (any counts a crash left half written are replaced; the version is
/// written only after them).
pub(super) fn count_existing(path: &Path, trees: &Trees) -> Result<()> {
    let err = |e| map_err(path, e);
    for item in trees.meta.scan_prefix(COUNT_PREFIX) {
        let (k, _) = item.map_err(err)?;
        trees.meta.remove(k).map_err(err)?;
    }
    let mut sums = BTreeMap::new();
    for item in trees.tasks.iter() {
        let (k, v) = item.map_err(err)?;
        let record: TaskRecord = baton_core::json::decode_stored(&v).map_err(|e| {
            Error::corrupt(format!(
                "{}: task {} does not decode: {e}",
                path.display(),
                String::from_utf8_lossy(&k)
            ))
        })?;
        baton_core::counts::tally(&mut sums, Some(&record), 1);
    }
    for ((queue, state), n) in sums {
        trees
            .meta
            .insert(count_key(&queue, state), &n.to_be_bytes())
            .map_err(err)?;
    }
    Ok(())
}

pub(super) fn check_layout(path: &Path, db: &sled::Db, trees: &Trees) -> Result<()> {
    let err = |e| map_err(path, e);
    let magic = trees.meta.get("magic").map_err(err)?;
    match magic {
        Some(m) if m.as_ref() == MAGIC => {
            let version =
                read_u64(trees.meta.get("schema").map_err(err)?).map_err(|a| a.into_error(path))?;
            if version > SCHEMA_VERSION {
                return Err(Error::unsupported(format!(
                    "{}: layout version {version} was written by a newer baton; this build reads up to {SCHEMA_VERSION}",
                    path.display()
                )));
            }
            if version < 3 {
                count_existing(path, trees)?;
            }
            if version < SCHEMA_VERSION {
                trees
                    .meta
                    .insert("schema", &be(SCHEMA_VERSION))
                    .map_err(err)?;
                db.flush().map_err(err)?;
            }
            Ok(())
        }
        Some(_) => Err(Error::corrupt(format!(
            "{}: a sled database, but not a baton store",
            path.display()
        ))),
        None => {
            let foreign =
                db.tree_names().len() > 12 || !trees.tasks.is_empty() || !trees.events.is_empty();
            if foreign || !db.is_empty() {
                return Err(Error::corrupt(format!(
                    "{}: a sled database, but not a baton store",
                    path.display()
                )));
            }
            trees.meta.insert("magic", MAGIC).map_err(err)?;
            trees
                .meta
                .insert("schema", &be(SCHEMA_VERSION))
                .map_err(err)?;
            db.flush().map_err(err)?;
            Ok(())
        }
    }
}
