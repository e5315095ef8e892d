//! The file guard: a fenced replace. The new content is written beside the
//! file and synced; then, under an exclusive lock on the resource, the
//! fence is checked against the resource's mark, the mark raised and
//! synced, and the new file renamed over the old (and the directory
//! synced). A refused fence removes what it wrote and leaves the file as
//! it was.
//!
//! Marks live in a directory of their own (by default `.baton-guard`
//! beside the file): one lock file and one mark file per resource, named by
//! the resource's SHA-256, so every writer of a resource must use the same
//! marks directory.

use crate::{GuardError, Presented};
use baton_core::fencing::{self, Admitted, FenceKeys, Refused};
use sha2::{Digest, Sha256};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// The marks directory used when none is given: `.baton-guard` beside `path`.
pub fn default_marks(path: &Path) -> PathBuf {
    parent(path).join(".baton-guard")
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn io_err(what: &str, path: &Path, e: io::Error) -> GuardError {
    GuardError::Unavailable(format!("{what} {}: {e}", path.display()))
}

fn names(marks: &Path, resource: &str) -> (PathBuf, PathBuf) {
    let h: String = Sha256::digest(resource.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    (
        marks.join(format!("{h}.lock")),
        marks.join(format!("{h}.fence")),
    )
}

/// The highest fence admitted for `resource` in `marks`, if any.
pub fn highest(marks: &Path, resource: &str) -> Result<Option<u64>, GuardError> {
    let (_, mark) = names(marks, resource);
    read_mark(&mark, resource)
}

fn read_mark(mark: &Path, resource: &str) -> Result<Option<u64>, GuardError> {
    let text = match fs::read_to_string(mark) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("reading the mark", mark, e)),
    };
    // "<fence>\n<resource>\n": the resource guards against a hash collision
    // and tells a reader what the mark is for.
    let mut lines = text.lines();
    match (
        lines.next().and_then(|f| f.parse::<u64>().ok()),
        lines.next(),
    ) {
        (Some(f), Some(r)) if r == resource => Ok(Some(f)),
        _ => Err(GuardError::Unavailable(format!(
            "the mark {} is not one this guard wrote for {resource:?}; refusing to guess",
            mark.display()
        ))),
    }
}

/// Syncs a directory, so a rename in it survives a crash.
fn sync_dir(dir: &Path) -> Result<(), GuardError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err("syncing", dir, e))
}

/// Writes `content` to `path` if `presented` is admitted for `resource`,
/// else leaves `path` as it was. `marks` defaults to [`default_marks`].
pub fn write(
    path: &Path,
    resource: &str,
    presented: &Presented,
    keys: Option<&FenceKeys>,
    marks: Option<&Path>,
    content: &mut dyn Read,
) -> Result<Admitted, GuardError> {
    fencing::check_resource(resource)?;
    let fence = presented.fence(keys)?;
    if path.file_name().is_none() {
        return Err(Refused::Invalid {
            field: "path",
            rule: format!("names a file, not {}", path.display()),
        }
        .into());
    }
    let marks = marks
        .map(Path::to_path_buf)
        .unwrap_or_else(|| default_marks(path));
    fs::create_dir_all(&marks).map_err(|e| io_err("creating the marks directory", &marks, e))?;
    let (lock_path, mark_path) = names(&marks, resource);

    // Beside the file, so the rename stays on one file system.
    let dir = parent(path);
    let mut tmp = tempfile_in(dir, path)?;
    let copied = io::copy(content, &mut tmp.1)
        .and_then(|_| tmp.1.sync_all())
        .map_err(|e| io_err("writing beside", path, e));
    if let Err(e) = copied {
        let _ = fs::remove_file(&tmp.0);
        return Err(e);
    }

    let outcome = (|| {
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| io_err("opening the lock", &lock_path, e))?;
        lock.lock().map_err(|e| io_err("locking", &lock_path, e))?;
        let highest = read_mark(&mark_path, resource)?;
        let admitted = fencing::admit(resource, highest, fence)?;
        if !matches!(admitted, Admitted::Equal) {
            let mut m = tempfile_in(&marks, &mark_path)?;
            let wrote =
                m.1.write_all(format!("{fence}\n{resource}\n").as_bytes())
                    .and_then(|_| m.1.sync_all())
                    .and_then(|_| fs::rename(&m.0, &mark_path));
            if let Err(e) = wrote {
                let _ = fs::remove_file(&m.0);
                return Err(io_err("raising the mark", &mark_path, e));
            }
            sync_dir(&marks)?;
        }
        fs::rename(&tmp.0, path).map_err(|e| io_err("renaming over", path, e))?;
        sync_dir(dir)?;
        // The lock is released when `lock` closes, after the rename.
        drop(lock);
        Ok(admitted)
    })();
    if outcome.is_err() {
        let _ = fs::remove_file(&tmp.0);
    }
    outcome
}

/// A new file beside `like`, named after it, opened for writing.
fn tempfile_in(dir: &Path, like: &Path) -> Result<(PathBuf, File), GuardError> {
    let base = like
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    for i in 0..100u32 {
        let p = dir.join(format!(".{base}.baton-{}-{i}", std::process::id()));
        match OpenOptions::new().write(true).create_new(true).open(&p) {
            Ok(f) => return Ok((p, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_err("creating a file in", dir, e)),
        }
    }
    Err(GuardError::Unavailable(format!(
        "no free temporary name beside {}",
        like.display()
    )))
}
