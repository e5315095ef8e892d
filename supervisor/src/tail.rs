//! The child's standard error: passed on to the wrapper's own as it comes
//! (a pipe between them, so the child does not see a terminal there), its
//! last [`STDERR_TAIL_BYTES`] kept, so a failure's recorded error says why
//! the command failed and not only its exit status.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The most bytes of the child's standard error a failure records (its
/// last ones, from the first whole line among them).
pub const STDERR_TAIL_BYTES: usize = 4096;

/// The most bytes the kept tail takes as a JSON string (control
/// characters escape to six bytes each): what is over is cut from its
/// front. Well under core's limit on a recorded error.
const TAIL_JSON_BYTES: usize = 8 * 1024;

#[derive(Default)]
struct Kept {
    bytes: VecDeque<u8>,
    total: u64,
}

/// Copies a child's standard error while it runs.
pub(crate) struct StderrTail {
    kept: Arc<Mutex<Kept>>,
    done: tokio::task::JoinHandle<()>,
}

/// The end of what the child wrote to its standard error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tail {
    pub text: String,
    /// Bytes written before `text` and left out.
    pub cut: u64,
}

impl StderrTail {
    pub(crate) fn start(mut from: tokio::process::ChildStderr) -> StderrTail {
        let kept = Arc::new(Mutex::new(Kept::default()));
        let keep = kept.clone();
        let done = tokio::spawn(async move {
            let mut out = tokio::io::stderr();
            let mut buf = [0u8; 8192];
            let mut passing = true;
            loop {
                let n = match from.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                let chunk = &buf[..n];
                // The wrapper's standard error gone is no reason to stop
                // reading: a child whose pipe fills would block.
                if passing {
                    passing = out.write_all(chunk).await.is_ok() && out.flush().await.is_ok();
                }
                if let Ok(mut k) = keep.lock() {
                    k.total += n as u64;
                    k.bytes.extend(chunk);
                    let over = k.bytes.len().saturating_sub(STDERR_TAIL_BYTES);
                    k.bytes.drain(..over);
                }
            }
        });
        StderrTail { kept, done }
    }

    /// What was kept, once the pipe closed (every process that held it
    /// ended) or `wait` passed (one that left the child's tree holds it);
    /// `None` when the child wrote nothing.
    pub(crate) async fn finish(self, wait: Duration) -> Option<Tail> {
        let _ = tokio::time::timeout(wait, self.done).await;
        let k = self.kept.lock().ok()?;
        if k.total == 0 {
            return None;
        }
        let bytes: Vec<u8> = k.bytes.iter().copied().collect();
        Some(tail_of(&bytes, k.total))
    }
}

/// The tail of `total` bytes written, of which `bytes` are the last.
fn tail_of(bytes: &[u8], total: u64) -> Tail {
    let mut cut = total - bytes.len() as u64;
    let mut from = 0;
    // A tail that begins inside a line begins at the next whole one.
    if cut > 0
        && let Some(nl) = bytes.iter().position(|b| *b == b'\n')
        && nl + 1 < bytes.len()
    {
        from = nl + 1;
    }
    let text = String::from_utf8_lossy(&bytes[from..]);
    cut += from as u64;
    // Within the JSON budget, counted from the end.
    let mut size = 2;
    let mut start = text.len();
    for (i, c) in text.char_indices().rev() {
        size += escaped_len(c);
        if size > TAIL_JSON_BYTES {
            break;
        }
        start = i;
    }
    cut += text[..start].len() as u64;
    Tail {
        text: text[start..].to_owned(),
        cut,
    }
}

/// How many bytes `c` takes inside a JSON string.
fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_begins_at_a_whole_line_and_fits_its_json_budget() {
        let t = tail_of(b"all of it\n", 10);
        assert_eq!((t.text.as_str(), t.cut), ("all of it\n", 0));
        // Cut inside a line: from the next one, the rest counted as cut.
        let t = tail_of(b"tial line\nlast line\n", 100);
        assert_eq!((t.text.as_str(), t.cut), ("last line\n", 90));
        // Control characters escape long: the tail is cut to its budget,
        // and what it says it cut adds up.
        let noisy = vec![1u8; STDERR_TAIL_BYTES];
        let t = tail_of(&noisy, noisy.len() as u64);
        let json = serde_json::to_string(&t.text).unwrap();
        assert!(json.len() <= TAIL_JSON_BYTES, "{}", json.len());
        assert!(json.len() > TAIL_JSON_BYTES - 6, "{}", json.len());
        assert_eq!(t.cut + t.text.len() as u64, noisy.len() as u64);
        // Bytes that are not UTF-8 are kept as replacement characters.
        let t = tail_of(&[b'o', 0xff, b'k'], 3);
        assert_eq!(t.text, "o\u{fffd}k");
    }
}
