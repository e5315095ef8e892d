//! The bodies the task API's routes decode that are not core's requests:
//! each refuses a field it does not know, and the OpenAPI document is
//! generated from them (`openapi.rs`).

use baton_core::Id;
use serde::Deserialize;

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NextBody {
    pub(crate) owner: Option<Id>,
    pub(crate) executor: Option<Id>,
    pub(crate) ttl_ms: Option<u64>,
    pub(crate) lock_delay_ms: Option<u64>,
    #[serde(default)]
    pub(crate) queues: Vec<Id>,
    /// Up to this many grants in one commit (the answer is then a list).
    pub(crate) count: Option<u32>,
}

/// The body of `POST /v1/tasks/{task}/checkpoint`: the holder's step, its
/// output (any JSON value), and the tasks it adds (graph nodes) in the
/// same commit. Read by core's catalogue rules, as every front end's.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Its schema documents the body; core reads the fields.
pub(crate) struct CheckpointBody {
    pub(crate) owner: Id,
    pub(crate) fence: u64,
    pub(crate) step: Id,
    pub(crate) output: serde_json::Value,
    #[serde(default)]
    pub(crate) spawn: Vec<serde_json::Map<String, serde_json::Value>>,
    #[serde(default)]
    pub(crate) wait: bool,
}

/// The body of `POST /v1/reports`: a holder's reports of many grants,
/// each `{"task", "owner", "fence", "outcome", "error"}`. Read by core's
/// catalogue rules.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Its schema documents the body; core reads the fields.
pub(crate) struct ReportsBody {
    pub(crate) reports: Vec<serde_json::Map<String, serde_json::Value>>,
}

/// The body of a request that takes none: empty, or an object with no
/// field (a field is refused, never ignored).
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NoBody {}

/// The body of `POST /v1/schedules/{name}`: the period, and the task
/// each period makes (its queue, priority, dependencies, limit, retries).
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScheduleBody {
    #[serde(default)]
    pub(crate) every_ms: Option<u64>,
    #[serde(default)]
    pub(crate) cron: Option<String>,
    #[serde(default)]
    pub(crate) template: Option<baton_core::NodeSpec>,
}

/// The body of `POST /v1/limits/{key}`: the limit (`null`: none) and the
/// operator setting it.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LimitBody {
    pub(crate) limit: Option<u32>,
    pub(crate) operator: String,
}

/// The body of `POST /v1/queues/{queue}/policy`: the retry policy
/// (`null`: none) and the operator setting it.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct QueuePolicyBody {
    pub(crate) retry: Option<baton_core::graph::RetryPolicy>,
    pub(crate) operator: String,
}

/// The body of `POST /v1/queues/{queue}/pause` and `.../resume`.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OperatorBody {
    pub(crate) operator: String,
}

/// The body of `POST /v1/queues/{queue}/retry-failed` and `.../discard-failed`.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BulkBody {
    pub(crate) operator: String,
    #[serde(default)]
    pub(crate) max: Option<usize>,
}

/// The body of `POST /v1/prune`.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PruneBody {
    pub(crate) finished_before_ms: u64,
    #[serde(default)]
    pub(crate) forget_after_ms: Option<u64>,
    pub(crate) operator: String,
    #[serde(default)]
    pub(crate) max: Option<usize>,
}

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AckBody {
    pub(crate) intent_ids: Vec<String>,
}
