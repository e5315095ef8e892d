//! # baton-core
//!
//! The rules of baton, with no IO: who may run a task, under which fence,
//! and what every request does to a task's record.
//!
//! * [`model`]: task records, grants, events, notifications.
//! * [`mod@decide`]: the one pure decision every write passes through.
//! * [`store`]: the small contract a backend implements.
//! * [`Authority`]: the public API, generic over any store.
//! * [`MemoryStore`]: an in-memory backend.
//! * [`catalogue`]: every operation the front ends offer, with its inputs and their rules;
//!   `call` (feature `keeper`): an operation as a value, run on an authority;
//!   `given`: a Call made from what a person gave it.
//! * [`fencing`]: the rule a guard in the user's storage applies, and signed fence tokens.
//! * `conformance` (feature): the suite every backend must pass.

pub mod access;
pub mod authority;
#[cfg(feature = "committer")]
pub mod blocking;
// Runs `next --wait`, which waits on tokio.
#[cfg(feature = "keeper")]
pub mod call;
pub mod catalogue;
#[cfg(feature = "committer")]
pub mod commit;
pub mod counts;
pub mod decide;
pub mod delivery;
pub mod engine;
pub mod error;
pub mod fault;
pub mod fencing;
// Makes a Call, which runs with `keeper`.
#[cfg(feature = "keeper")]
pub mod given;
pub mod graph;
pub mod id;
pub mod invariants;
pub mod json;
#[cfg(feature = "keeper")]
pub mod keeper;
pub mod kinds;
pub mod manifest;
pub mod memory;
pub mod model;
pub mod next;
pub mod refusal;
pub mod request;
#[cfg(feature = "schema")]
mod schema;
pub mod scope;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;
pub mod time;
pub mod workgraph;

#[cfg(feature = "conformance")]
pub mod conformance;

pub use authority::{Authority, Holder, Page, Pruned, ReleaseGate, Reply, Swept, Verification};
pub use decide::{
    Change, Decision, Judged, LeaseEffect, LeaseRules, TimerEffect, Verdict, decide, decide_in,
    decide_with, derive, live_lease, settle,
};
pub use error::{Error, ErrorKind, Result};
pub use graph::{Census, Lane, NextQuery, Node, NodeSpec, Readiness, Taker, Upstream};
pub use id::{Id, OwnerId, TaskId};
#[cfg(feature = "keeper")]
pub use keeper::{Ending, KeepOptions, Keeper, Kept, Loss, Outcome, Schedule};
pub use manifest::Manifest;
pub use memory::MemoryStore;
pub use model::{
    Actor, Checkpoint, Event, EventKind, Grant, Lease, Notification, State, TaskRecord,
};
pub use refusal::Refusal;
pub use request::{Operation, Preconditions, Request, RequestKind};
pub use store::{Capabilities, ClockKind, ListQuery, Snapshot, Store};
pub use time::{Clock, CommitClock, ManualClock, SystemClock, Timed, Timestamp};
pub use workgraph::{Added, GraphNode, GraphState, Step};
