//! The store protocol: what an `http://` store sends a server and gets
//! back, one endpoint per [`baton_core::Store`] method. Bodies are JSON of
//! core's own types; the server decides nothing of its own.

use baton_core::graph::NextQuery;
use baton_core::{Error, ErrorKind, TaskId};
use serde::{Deserialize, Serialize};

/// The prefix of every store-protocol endpoint.
pub const STORE: &str = "/v1/store";

pub const CAPABILITIES: &str = "/v1/store/capabilities";
pub const READ: &str = "/v1/store/read";
pub const APPLY: &str = "/v1/store/apply";
pub const APPLY_ALL: &str = "/v1/store/apply_all";
pub const APPLY_EACH: &str = "/v1/store/apply_each";
pub const NEXT: &str = "/v1/store/next";
pub const NEXT_MANY: &str = "/v1/store/next_many";
pub const WATCH_READY: &str = "/v1/store/watch_ready";
pub const LIST: &str = "/v1/store/list";
pub const EVENTS: &str = "/v1/store/events";
pub const PENDING: &str = "/v1/store/pending";
pub const ACK: &str = "/v1/store/ack";
pub const PERMIT: &str = "/v1/store/permit";
pub const COUNTS: &str = "/v1/store/counts";
/// The signed token of a live lease's fence, for its holder.
pub const FENCE_TOKEN: &str = "/v1/store/fence_token";

/// The longest wait a `watch_ready` may ask for, in milliseconds.
pub const MAX_WATCH_MS: u64 = 60_000;

/// The body of [`FENCE_TOKEN`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FenceTokenBody {
    pub task: TaskId,
    pub fence: u64,
}

/// The body of [`READ`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadBody {
    pub task: TaskId,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WatchBody {
    pub query: NextQuery,
    pub max_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EventsBody {
    pub task: Option<TaskId>,
    pub after: u64,
    pub limit: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PendingBody {
    pub after: u64,
    pub limit: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AckBody {
    pub intent_ids: Vec<String>,
}

/// The body of every answer that is not a success: the error, and for an
/// indeterminate one a flag a client in any language can test.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: Error,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub indeterminate: bool,
}

impl ErrorBody {
    pub fn new(error: Error) -> ErrorBody {
        let indeterminate = error.kind == ErrorKind::Indeterminate;
        ErrorBody {
            error,
            indeterminate,
        }
    }
}

/// The HTTP status an error is answered with.
pub fn status_for(kind: ErrorKind) -> u16 {
    match kind {
        ErrorKind::Invalid => 400,
        ErrorKind::NotPermitted => 403,
        ErrorKind::Unavailable | ErrorKind::Corrupt | ErrorKind::Unsupported => 503,
        ErrorKind::Indeterminate => 500,
    }
}
