//! # baton-supervisor
//!
//! `baton run` and `baton task run`: a command under a lease this crate
//! keeps for it ([`supervised`], [`main`]), its whole process tree
//! stopped before the lease could end (`tree`), its outcome reported with
//! the fence. The CLI parses [`RunOptions`] and hands a [`Spec`] here; the
//! demo drives [`supervised`] in-process. The rules (who may renew, what a
//! report does) stay in core's decision: this is process plumbing.
//!
//! Also here, as `run` needs them and the CLI shares them: the exit
//! statuses scripts act on ([`exit`]) and how a line reaches a terminal
//! ([`term`]).

pub mod exit;
mod options;
mod supervise;
mod tail;
pub mod term;
mod tree;

pub use options::RunOptions;
pub use supervise::*;
pub use tail::STDERR_TAIL_BYTES;
