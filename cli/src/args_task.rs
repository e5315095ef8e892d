//! `baton task ...`: the declared tasks' commands (the registry, runs,
//! steps, evidence and the release gate).

use super::*;

#[derive(Debug, Subcommand, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskCommand {
    /// Declare a task from a JSON manifest (FILE, or standard input).
    ///
    /// A manifest needs `task_id`, `executor` (who is meant to run it) and
    /// `steps` (1 to 1000 names); the rest is optional:
    /// `required_evidence` (keys `task succeed` must prove),
    /// `start_deadline_seconds` (default 300), `heartbeat_timeout_seconds`
    /// (default 180), `max_attempts` (stalls allowed, default 1), `retry`,
    /// `timeout_seconds`, `lock_delay_seconds`, `depends_on`, `queue`,
    /// `priority`, `key`, `notification_events`, `owner_notification_ref`,
    /// and for work with a source `source_branch`, `source_oid`,
    /// `target_version`. The same manifest again is acknowledged; another
    /// one for the same id is refused `manifest_conflict`.
    ///
    /// Example manifest (docs/manifest.json):
    ///   {"task_id": "rel-1", "executor": "ci", "steps": ["build", "test"],
    ///    "required_evidence": ["build.log"]}
    ///
    /// Example: baton task declare docs/manifest.json
    /// Example: echo '{"task_id":"r2","executor":"ci","steps":["run"]}' | baton task declare
    #[command(verbatim_doc_comment)]
    Declare {
        /// The manifest file (default: standard input).
        file: Option<PathBuf>,
    },
    /// Bind a declared task to an executor run: it becomes claimable (REGISTERED) by that run.
    ///
    /// Example: baton task register rel-1 --run run-9
    Register {
        /// The task's id.
        #[arg(env = "BATON_TASK")]
        task: String,
        /// The executor run the task is registered to.
        #[arg(long, env = "BATON_RUN")]
        run: String,
    },
    /// Claim a registered declared task for its run: the grant carries the fence.
    ///
    /// Example: baton task claim rel-1 --run run-9 --executor ci-3
    Claim {
        /// The task's id.
        #[arg(env = "BATON_TASK")]
        task: String,
        /// The executor run the task is registered to.
        #[arg(long, env = "BATON_RUN")]
        run: String,
        /// Your executor id: who holds the lease.
        #[arg(long, env = "BATON_EXECUTOR")]
        executor: String,
        /// Default and maximum: the manifest's heartbeat_timeout_seconds.
        #[arg(long, allow_hyphen_values = true)]
        ttl: Option<String>,
    },
    /// Start the claimed task (RUNNING, step 1).
    ///
    /// Example: baton task start rel-1 --run run-9 --executor ci-3 --fence 2
    Start {
        /// The task's id.
        #[arg(env = "BATON_TASK")]
        task: String,
        #[command(flatten)]
        #[serde(flatten)]
        run: Run,
    },
    /// Claim and start the declared task, run a command under its lease,
    /// and succeed (with the evidence files hashed) or fail it.
    ///
    /// Example: baton task run rel-1 --run run-9 --executor ci-3 --evidence build.log=out/build.log -- make release
    #[serde(skip)]
    Run {
        /// The declared task's id.
        task: String,
        /// The executor run the task is registered to.
        #[arg(long)]
        run: String,
        /// Your executor id: who holds the lease.
        #[arg(long)]
        executor: String,
        /// Default and maximum: the manifest's heartbeat_timeout_seconds.
        #[arg(long, allow_hyphen_values = true)]
        ttl: Option<String>,
        /// KEY=PATH: the file the command leaves as evidence KEY, hashed once it exits 0.
        #[arg(long)]
        evidence: Vec<String>,
        #[command(flatten)]
        #[serde(flatten)]
        opts: RunOptions,
    },
    /// Renew the running task's lease and report the step now being worked on.
    ///
    /// Example: baton task heartbeat rel-1 --run run-9 --executor ci-3 --fence 2 --step 2
    Heartbeat {
        /// The task's id.
        #[arg(env = "BATON_TASK")]
        task: String,
        #[command(flatten)]
        #[serde(flatten)]
        run: Run,
        /// The 1-based step now being worked on.
        #[arg(long, allow_negative_numbers = true)]
        step: u32,
        /// The renewed lease's length (default and maximum: the manifest's heartbeat_timeout_seconds).
        #[arg(long, allow_hyphen_values = true)]
        ttl: Option<String>,
    },
    /// Succeed the running task at its last step, with every required piece of evidence.
    ///
    /// Example: baton task succeed rel-1 --run run-9 --executor ci-3 --fence 2 --evidence build.log=sha256:$(sha256sum build.log | cut -d' ' -f1)
    Succeed {
        /// The task's id.
        #[arg(env = "BATON_TASK")]
        task: String,
        #[command(flatten)]
        #[serde(flatten)]
        run: Run,
        /// KEY=sha256:HEX, or KEY=@PATH (the file's bytes hashed, as `task run` does), once per key.
        #[arg(long)]
        evidence: Vec<String>,
    },
    /// Fail the running task (tried again if its retry policy has attempts left).
    ///
    /// Example: baton task fail rel-1 --run run-9 --executor ci-3 --fence 2 --error '{"step": "test"}'
    Fail {
        /// The task's id.
        #[arg(env = "BATON_TASK")]
        task: String,
        #[command(flatten)]
        #[serde(flatten)]
        run: Run,
        /// A JSON object saying what went wrong (at most 16 KiB), kept on the task.
        #[arg(long)]
        error: String,
    },
    /// Register a task that never started (NOT_STARTED) again, to a new run.
    ///
    /// Example: baton task retry rel-1 --run run-10
    Retry {
        /// The task's id.
        #[arg(env = "BATON_TASK")]
        task: String,
        /// The executor run the task is registered to.
        #[arg(long, env = "BATON_RUN")]
        run: String,
    },
    /// Run a task again as a new iteration, whatever it ended in (an operator's act).
    ///
    /// Example: baton task redispatch rel-1 --operator alice --iteration 2
    Redispatch {
        /// The task's id.
        #[arg(env = "BATON_TASK")]
        task: String,
        /// Your operator id (an operator's act; on a server with tokens, an operator's token).
        #[arg(long)]
        operator: String,
        /// The new iteration: higher than the task's current one (`task show`), so the same redispatch sent twice runs once.
        #[arg(long, allow_negative_numbers = true)]
        iteration: u64,
    },
    /// End a task as FAILED from any state that has not ended (an operator's act).
    ///
    /// Example: baton task finalize rel-1 --operator alice --error '{"reason": "abandoned"}'
    Finalize {
        /// The task's id.
        #[arg(env = "BATON_TASK")]
        task: String,
        /// Your operator id (an operator's act; on a server with tokens, an operator's token).
        #[arg(long)]
        operator: String,
        /// A JSON object saying what went wrong (at most 16 KiB), kept on the task.
        #[arg(long)]
        error: Option<String>,
    },
    /// The task's record: state, lease, how it ended, error, steps, evidence, times.
    ///
    /// Example: baton --format human task show rel-1
    Show {
        /// The task's id.
        #[arg(env = "BATON_TASK")]
        task: String,
    },
    /// One task's events in order, from a cursor (`baton events` for every task's).
    ///
    /// Example: baton --format human task events rel-1
    Events {
        /// The task's id.
        #[arg(env = "BATON_TASK")]
        task: String,
        #[command(flatten)]
        #[serde(flatten)]
        page: Paging,
    },
    /// Passes only for SUCCEEDED (exit 1 when blocking).
    ///
    /// Example: baton task gate rel-1 && ./publish.sh
    Gate {
        /// The task's id.
        #[arg(env = "BATON_TASK")]
        task: String,
    },
    /// Tasks, by derived state (and queue), in id order, paged.
    ///
    /// Example: baton --format human task list --state FAILED
    ///
    /// Example: baton task list --state READY --queue ci
    List {
        /// Derived state: DECLARED, REGISTERED, CLAIMED, RUNNING, SUCCEEDED, FAILED, CANCELLED, NOT_STARTED, STALLED;
        /// or READY, BLOCKED for graph tasks.
        #[arg(long)]
        state: Option<String>,
        /// Only the tasks placed in this queue (bare tasks have none).
        #[arg(long)]
        queue: Option<String>,
        #[command(flatten)]
        #[serde(flatten)]
        page: Paging,
    },
    /// Claim the ready declared task (for the run registered for it), as `next` does for bare ones.
    ///
    /// Example: baton task next --executor ci-3 --queue release --wait 10m
    Next {
        /// Your executor id: who holds the lease.
        #[arg(long, env = "BATON_EXECUTOR")]
        executor: String,
        /// A queue to take from (repeatable; default: default).
        #[arg(long)]
        #[serde(rename = "queues")]
        queue: Vec<String>,
        /// Lease length: 750ms, 30s, 5m, 2h (1 ms to 7 days; default 30s; for `task next`, the manifest's heartbeat timeout).
        #[arg(long, allow_hyphen_values = true)]
        ttl: Option<String>,
        /// Keep trying while nothing is ready, for up to DUR (at most 1h; backoff to 1s, jittered).
        #[arg(long, allow_hyphen_values = true)]
        wait: Option<String>,
        /// With --wait: keep waiting when the queues are drained (nothing
        /// left that could become ready) until work is added, instead of
        /// answering `drained` at once: the worker's wait for work.
        #[arg(long, requires = "wait")]
        keep_waiting: bool,
        /// Up to N grants in one commit (1 to 1000), one line each, in the
        /// order N `next`s would make them.
        #[arg(long)]
        count: Option<u32>,
    },
}
