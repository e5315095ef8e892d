//! The options `run` and `task run` share, as clap reads them.

use clap::Args;
use std::path::PathBuf;

/// What `run` and `task run` share.
#[derive(Debug, Args, Clone)]
pub struct RunOptions {
    /// Retry a refused claim (held by another) with jittered backoff for up to DUR (at most 1h).
    #[arg(long, allow_hyphen_values = true)]
    pub wait: Option<String>,
    /// With --next and --wait: keep waiting when the queues are drained
    /// (nothing left that could become ready) until work is added.
    #[arg(long, requires = "wait")]
    pub keep_waiting: bool,
    /// Between SIGTERM and SIGKILL (default 5s; at most a third of the TTL).
    #[arg(long, default_value = "5s", allow_hyphen_values = true)]
    pub grace: String,
    /// How often to renew (default: a third of the TTL).
    #[arg(long, allow_hyphen_values = true)]
    pub renew_every: Option<String>,
    /// Write the run's report (one JSON object) here instead of standard error.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}
