//! Checked histories: real clients record every operation they make on a
//! store (invocation, answer, and when each happened), and the history is
//! checked against a model of one task with a linearizability checker
//! (`todc-utils`' Wing–Gong–Lowe search), plus the store-wide facts about
//! fences that no one task shows.
//!
//! - [`record`]: the client that hammers a few task ids with every lease
//!   operation, short TTLs, stale fences and another owner's fences.
//! - [`history`]: the lines a client writes, and pairing them into
//!   operations. An unavailable answer means "not applied"; an
//!   indeterminate one, a timeout, or no answer at all (the client was
//!   killed) means "may have applied".
//! - [`model`]: the rules of SPEC §4 for a bare task, in real time within
//!   a stated clock-skew bound.
//! - [`checker`]: the check itself and its [`checker::Report`].
//! - [`search`]: the linearizability search both models run.
//! - [`writes`]: guarded writes to the clients' own storage, checked
//!   against the guard's model (a write admitted with a fence lower than
//!   one already admitted is a violation).
//! - [`broken`]: stores broken on purpose; their histories must fail.

pub mod broken;
pub mod checker;
pub mod history;
pub mod model;
pub mod record;
pub mod search;
pub mod writes;

pub use checker::{Report, check};
pub use history::{Line, Observed, Op, Req, Writer, ops, read_file};
pub use model::Limits;
pub use record::{Plan, install_guard, record_threads, run_client};

/// Reads and pairs every history file in `files` and checks them as one history.
pub fn check_files(files: &[std::path::PathBuf], limits: Limits) -> Result<Report, String> {
    let mut lines = Vec::new();
    for f in files {
        lines.extend(read_file(f)?);
    }
    Ok(check(&ops(lines)?, limits))
}
