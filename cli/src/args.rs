//! The command-line forms. They are a contract scripts depend on: add to
//! them, never change them.

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Serialize;
use std::path::PathBuf;

pub use baton_harness::{BenchArgs, BenchWorkerArgs, Order};
pub use baton_supervisor::RunOptions;

#[path = "args_task.rs"]
mod task;
pub use task::*;

#[derive(Debug, Parser)]
#[command(
    name = "baton",
    version,
    about = "Decides who may run a piece of work: leases, fences, and the truth about each task."
)]
pub struct Cli {
    /// Store URL: sqlite:PATH, sled:PATH, etcd://HOST:PORT,.../PREFIX,
    /// postgres://USER@HOST:PORT/DB?schema=NAME (port and schema optional),
    /// http://HOST:PORT (a `baton serve`), http+unix://PATH or memory:.
    /// Without it or BATON_STORE: sqlite:baton.db, in the working directory.
    #[arg(long, global = true, env = "BATON_STORE")]
    pub store: Option<String>,
    /// The bearer token sent to a `baton serve` (http:// stores).
    #[arg(long, global = true, env = "BATON_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Whether `--store` was given on the command line (not taken from
    /// `BATON_STORE`): `demo` and `bench` write only into a store named so.
    #[arg(skip)]
    pub store_given: bool,
    /// Output format: human on a terminal, json when piped or redirected
    /// (`demo` prints human unless json is asked for).
    #[arg(long, global = true, value_enum)]
    pub format: Option<Format>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Json,
    Human,
    /// Graphviz dot (`graph show` only).
    Dot,
}

#[derive(Debug, Subcommand, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    /// Claim a bare task (created if nobody declared it).
    ///
    /// Example: baton claim build-42 --owner worker-a --ttl 5m
    Claim {
        /// The task's id.
        #[arg(env = "BATON_TASK")]
        task: String,
        /// Your worker id: who holds (or asks for) the lease.
        #[arg(long, env = "BATON_OWNER")]
        owner: String,
        /// Lease length: 750ms, 30s, 5m, 2h (1 ms to 7 days; default 30s).
        #[arg(long, allow_hyphen_values = true)]
        ttl: Option<String>,
        /// If the lease expires without a release, no one is granted the task
        /// for this long after (0 to 7 days; default none).
        #[arg(long, allow_hyphen_values = true)]
        lock_delay: Option<String>,
    },
    /// Extend the holder's lease.
    ///
    /// Example: baton renew build-42 --owner worker-a --fence 1 --ttl 5m
    Renew {
        /// The task's id.
        #[arg(env = "BATON_TASK")]
        task: String,
        /// Your worker id: who holds (or asks for) the lease.
        #[arg(long, env = "BATON_OWNER")]
        owner: String,
        /// The fence your grant carried, as the claim printed it.
        #[arg(long, allow_negative_numbers = true, env = "BATON_FENCE")]
        fence: u64,
        /// The renewed lease's length, from now: 750ms, 30s, 5m, 2h (default 30s).
        #[arg(long, allow_hyphen_values = true)]
        ttl: Option<String>,
    },
    /// Give the task back without charging a stall.
    ///
    /// Example: baton release build-42 --owner worker-a --fence 1
    Release {
        /// The task's id.
        #[arg(env = "BATON_TASK")]
        task: String,
        /// Your worker id: who holds (or asks for) the lease.
        #[arg(long, env = "BATON_OWNER")]
        owner: String,
        /// The fence your grant carried, as the claim printed it.
        #[arg(long, allow_negative_numbers = true, env = "BATON_FENCE")]
        fence: u64,
    },
    /// Take over a task whose lease expired.
    ///
    /// Example: baton recover build-42 --owner worker-b --ttl 5m
    Recover {
        /// The task's id.
        #[arg(env = "BATON_TASK")]
        task: String,
        /// Your worker id: who holds (or asks for) the lease.
        #[arg(long, env = "BATON_OWNER")]
        owner: String,
        /// Lease length: 750ms, 30s, 5m, 2h (1 ms to 7 days; default 30s).
        #[arg(long, allow_hyphen_values = true)]
        ttl: Option<String>,
    },
    /// Report many grants at once (holder only): a JSON list of
    /// {"task", "owner", "fence", "outcome": "complete"|"fail"|"release",
    /// "error"}, each accepted or refused on its own fence, all in one
    /// commit; one line each. Exit 1 when one was refused.
    ///
    /// Example: baton report --file reports.json
    Report {
        /// The reports (default: standard input).
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// Mark a bare task done (holder only).
    ///
    /// Example: baton complete build-42 --owner worker-a --fence 1
    Complete {
        /// The task's id.
        #[arg(env = "BATON_TASK")]
        task: String,
        /// Your worker id: who holds (or asks for) the lease.
        #[arg(long, env = "BATON_OWNER")]
        owner: String,
        /// The fence your grant carried, as the claim printed it.
        #[arg(long, allow_negative_numbers = true, env = "BATON_FENCE")]
        fence: u64,
    },
    /// Record a step's output under your fence (holder only). Every later
    /// grant of the task carries the recorded steps (`checkpoints`), so
    /// the next attempt skips them; the same step again is acknowledged,
    /// another output for it refused (`checkpoint_conflict`), and a
    /// superseded attempt's step refused (`stale_fence`). With --spawn,
    /// the step adds tasks in the same commit (once, however often it is
    /// sent); with --wait too, this task waits for them: release it, and
    /// it is granted again once they have all succeeded.
    ///
    /// Example: baton checkpoint build-42 --owner worker-a --fence 1 --step fetch --output '{"rows": 10}'
    ///
    /// Example: baton checkpoint --step fan-out --output '{}' --spawn @children.json --wait
    Checkpoint {
        /// The task's id.
        #[arg(env = "BATON_TASK")]
        task: String,
        /// Your worker id: who holds (or asks for) the lease.
        #[arg(long, env = "BATON_OWNER")]
        owner: String,
        /// The fence your grant carried, as the claim printed it.
        #[arg(long, allow_negative_numbers = true, env = "BATON_FENCE")]
        fence: u64,
        /// The step's name (an id).
        #[arg(long)]
        step: String,
        /// The step's output: JSON text, or @FILE (@- reads standard
        /// input); at most 64 KiB, a task's steps at most 256 KiB.
        #[arg(long, allow_hyphen_values = true)]
        output: String,
        /// Tasks to add with the step, as a graph file gives them: @FILE
        /// or JSON text.
        #[arg(long)]
        spawn: Option<String>,
        /// Wait for the spawned tasks: this task depends on them.
        #[arg(long, requires = "spawn")]
        wait: bool,
    },
    /// Mark a bare task failed (holder only).
    ///
    /// Example: baton fail build-42 --owner worker-a --fence 1 --error '{"exit": 2}'
    Fail {
        /// The task's id.
        #[arg(env = "BATON_TASK")]
        task: String,
        /// Your worker id: who holds (or asks for) the lease.
        #[arg(long, env = "BATON_OWNER")]
        owner: String,
        /// The fence your grant carried, as the claim printed it.
        #[arg(long, allow_negative_numbers = true, env = "BATON_FENCE")]
        fence: u64,
        /// A JSON object describing the failure.
        #[arg(long)]
        error: Option<String>,
    },
    /// Cancel: by the holder with its fence, or by an operator. An
    /// operator's cancel of a task whose lease is live asks its holder to
    /// stop (`cancel_requested`, seen on its next renewal; `baton run`
    /// stops its child); the task is CANCELLED when the holder gives it
    /// back or its lease ends. A task nobody holds is cancelled at once.
    ///
    /// Example: baton cancel build-42 --operator alice --cascade
    ///
    /// Example: baton cancel build-42 --owner worker-a --fence 1
    Cancel {
        /// The task's id.
        #[arg(env = "BATON_TASK")]
        task: String,
        /// The holder's id (with --fence): the holder gives the task up.
        #[arg(long, requires = "fence", conflicts_with = "operator")]
        owner: Option<String>,
        /// The holder's fence (with --owner).
        #[arg(long, requires = "owner", allow_negative_numbers = true)]
        fence: Option<u64>,
        /// Your operator id (an operator's act; on a server with tokens, an operator's token).
        #[arg(long, required_unless_present = "owner")]
        operator: Option<String>,
        /// End a live lease at once instead of asking its holder to stop.
        #[arg(long, requires = "operator")]
        force: bool,
        /// Also cancel every task that depends on it, at any depth, that
        /// has not ended (also from a task that already failed).
        #[arg(long, requires = "operator")]
        cascade: bool,
    },
    /// Run a command under a lease kept for it: claim, renew while it runs,
    /// stop it before the lease could end, report its outcome.
    ///
    /// Example: baton run nightly-backup --owner host-7 --ttl 30s -- ./backup.sh --full
    ///
    /// Example: baton run --next --queue ci --owner w1 -- ./job.sh
    ///
    /// Example: baton run --next --count 8 --queue ci --owner w1 -- ./job.sh
    #[serde(skip)]
    Run {
        /// The task (or `--next` for the next ready one).
        #[arg(required_unless_present = "next", conflicts_with = "next")]
        task: Option<String>,
        /// Run under whatever `next` grants (the queues of `--queue`).
        #[arg(long)]
        next: bool,
        /// With `--next`: a queue to take from (repeatable; default: default).
        #[arg(long, requires = "next")]
        queue: Vec<String>,
        /// With `--next`: take up to N grants in one commit (1 to 1000) and
        /// run the command once for each, all at once, each under its own
        /// kept lease and reported on its own.
        #[arg(long, requires = "next", value_parser = clap::value_parser!(u32).range(1..=1000))]
        count: Option<u32>,
        /// Your worker id: who holds (or asks for) the lease.
        #[arg(long)]
        owner: String,
        /// Lease length (default 30s); renewed every third of it.
        #[arg(long, allow_hyphen_values = true)]
        ttl: Option<String>,
        /// If the lease expires without a release, no one is granted the task
        /// for this long after (0 to 7 days; default none).
        #[arg(long, allow_hyphen_values = true)]
        lock_delay: Option<String>,
        #[command(flatten)]
        #[serde(flatten)]
        opts: RunOptions,
    },
    /// Add a bare task to the work graph (REGISTERED, claimable once every
    /// `--after` task SUCCEEDED), or a whole graph from `--file` (or
    /// standard input when no TASK is given), in one commit.
    ///
    /// Example: baton add test --queue ci --after build --max-attempts 3 --backoff 30s
    ///
    /// Example: baton add --file graph.json
    Add {
        /// The task's id.
        #[arg(conflicts_with = "file")]
        task: Option<String>,
        #[command(flatten)]
        #[serde(flatten)]
        node: NodeArgs,
        /// Not granted before this: an RFC 3339 time (2026-12-24T18:00:00Z)
        /// or a delay from the add (`90s`, `10m`, `400d`), ending by year 9999.
        /// An add repeated with another start is the same add.
        #[arg(long)]
        not_before: Option<String>,
        /// A graph: {"nodes": [{"task": ID, "queue": Q, "priority": N, "after": [ID...], "timeout": "10m", "not_before": "1h", "retry": {"max_attempts": 3, "backoff": "1s", "factor": 2, "max": "1m"}, "key": "repo"}...]}.
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// Claim the ready task with the highest priority (then the earliest
    /// ready, then the smallest id): what `claim` answers. Nothing ready:
    /// exit 1 with `none_ready`, or `drained` when nothing can become ready.
    ///
    /// Example: baton next --owner w1 --queue ci --ttl 10m --wait 5m --keep-waiting
    Next {
        /// Your worker id: who holds (or asks for) the lease.
        #[arg(long, env = "BATON_OWNER")]
        owner: String,
        /// A queue to take from (repeatable; default: default).
        #[arg(long)]
        #[serde(rename = "queues")]
        queue: Vec<String>,
        /// Lease length: 750ms, 30s, 5m, 2h (1 ms to 7 days; default 30s; for `task next`, the manifest's heartbeat timeout).
        #[arg(long, allow_hyphen_values = true)]
        ttl: Option<String>,
        /// If the lease expires without a release, no one is granted the task for this long after (0 to 7 days; default none).
        #[arg(long, allow_hyphen_values = true)]
        lock_delay: Option<String>,
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
    /// The work graph.
    #[command(subcommand)]
    Graph(GraphCommand),
    /// The last grant, and whether it is live.
    ///
    /// Example: baton holder build-42
    Holder {
        /// The task's id.
        #[arg(env = "BATON_TASK")]
        task: String,
    },
    /// Whether FENCE is the fence of a live grant (exit 1 when not).
    ///
    /// Example: baton verify build-42 --fence 7
    Verify {
        /// The task's id.
        #[arg(env = "BATON_TASK")]
        task: String,
        /// The fence to check, as a report would carry it.
        #[arg(long, allow_negative_numbers = true, env = "BATON_FENCE")]
        fence: u64,
    },
    /// Declared tasks: the registry.
    #[command(subcommand)]
    Task(TaskCommand),
    /// Every task's events in the order they were written (one task's
    /// with `--task`), a page from a cursor; `--follow` keeps printing
    /// new ones as they are written, until interrupted.
    ///
    /// Example: baton events --follow --format human
    /// Example: baton events --after 120 --limit 50
    #[command(verbatim_doc_comment)]
    Events {
        /// Only this task's events.
        #[arg(long)]
        task: Option<String>,
        #[command(flatten)]
        #[serde(flatten)]
        page: Paging,
        /// Wait for new events and print each as it is written (polled,
        /// at most a second apart); stop with Ctrl-C.
        #[arg(long)]
        #[serde(skip)]
        follow: bool,
    },
    /// Persist expired leases and passed deadlines (with their notifications).
    ///
    /// Example: baton sweep --dry-run
    Sweep {
        /// Say what would be persisted, writing nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Retention: tasks that ended before `--finished-before` ago lose
    /// their body and events; each keeps a tombstone (its state, fences and
    /// times), so its id is never granted again. In commits of 64 tasks.
    ///
    /// Example: baton prune --finished-before 30d --operator alice
    Prune {
        /// How long ago a task must have ended (`7d`, `12h`, `0s` for every ended task).
        #[arg(long)]
        finished_before: String,
        /// Forget the tombstones this run makes this much later (`90d`):
        /// a run with the same `--finished-before` that much later removes
        /// them, and every run removes those whose time came. The cost: a
        /// forgotten id can be granted again (default: keep them for ever).
        #[arg(long)]
        forget_after: Option<String>,
        /// Who prunes (an operator's act).
        #[arg(long)]
        operator: String,
        /// The most tasks this run prunes (default: all it finds).
        #[arg(long)]
        max: Option<usize>,
    },
    /// The notification outbox.
    #[command(subcommand)]
    Outbox(OutboxCommand),
    /// Recurring schedules: one task per period, enqueued once however
    /// many schedulers run.
    #[command(subcommand)]
    Schedule(ScheduleCommand),
    /// Concurrency limits: at most N live grants at once of the tasks
    /// added with a key (`add --key KEY`), across queues, processes and hosts.
    #[command(subcommand)]
    Limit(LimitCommand),
    /// Queue policies: the retry policy of the tasks added to a queue
    /// without their own.
    #[command(subcommand)]
    Queue(QueueCommand),
    /// Watch baton arbitrate: 8 workers race over 200 tasks on a fresh store.
    ///
    /// Example: baton demo
    #[serde(skip)]
    Demo,
    /// Serve the store over HTTP: one authority for many hosts and languages.
    ///
    /// Example: baton serve --store sqlite:/var/lib/baton/baton.db --listen 127.0.0.1:7440
    ///
    /// Example: baton serve --listen 0.0.0.0:7440 --tokens /etc/baton/tokens --tls-cert cert.pem --tls-key key.pem
    #[serde(skip)]
    Serve {
        /// Where to listen: IP:PORT, or unix:PATH.
        #[arg(long, default_value = "127.0.0.1:7440")]
        listen: String,
        /// A token file: one `NAME ROLE TOKEN` a line (ROLE worker or
        /// operator). Needed to listen on a non-loopback address.
        #[arg(long)]
        tokens: Option<PathBuf>,
        /// Serve HTTPS with this certificate chain (PEM); needs --tls-key.
        #[arg(long, requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// The certificate's private key (PEM).
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// How often the server sweeps on its own, persisting expired leases
        /// and passed deadlines with their events, and ticks the recurring
        /// schedules (DUR, or `off`).
        #[arg(long, default_value = "1s")]
        sweep_every: String,
        /// Retention on the sweep's beat: prune tasks that ended more than
        /// this long ago (`30d`), at most 640 a beat (default: keep everything).
        #[arg(long)]
        prune_after: Option<String>,
        /// With --prune-after: forget each tombstone this long after it was
        /// made (`90d`), so the store stops growing; a forgotten id can be
        /// granted again (default: keep tombstones for ever).
        #[arg(long, requires = "prune_after")]
        forget_after: Option<String>,
        /// The most connections held at once; past it a new connection takes
        /// the place of the one idle longest.
        #[arg(long, default_value_t = 1024)]
        max_connections: usize,
        /// How long a client has to begin a request after connecting (or
        /// after its last answer), and to send its headers and body.
        #[arg(long, default_value = "10s")]
        read_timeout: String,
        /// The longest one blocking query waits (`GET /v1/events?wait=`, a
        /// `next --wait` through the server); a longer wait is cut to it.
        #[arg(long, default_value = "60s")]
        max_wait: String,
        /// Write a JSON line per request on standard error: time, method,
        /// path, status, latency in ms, and the token's name (never the token).
        #[arg(long)]
        request_log: bool,
        /// Sign every fence granted with this key file's first key (`baton
        /// guard keygen`): grants carry `token`, which guards holding the
        /// key require.
        #[arg(long, env = "BATON_FENCE_KEY")]
        fence_key: Option<PathBuf>,
        /// Post every outbox notification to this webhook (http:// or
        /// https://), signed (`x-baton-signature: sha256=HMAC`), in order per
        /// task, acknowledged on a 2xx, tried again with backoff, dead after
        /// --deliver-tries failures (shown on the page). At least once: the
        /// receiver de-duplicates on `x-baton-intent`.
        #[arg(long, requires = "deliver_key")]
        deliver: Option<String>,
        /// The key file that signs each post (its first key; `baton guard
        /// keygen` makes one; the receiver keeps the same).
        #[arg(long, requires = "deliver")]
        deliver_key: Option<PathBuf>,
        /// Failures after which a notification is dead (1 to 100).
        #[arg(long, default_value_t = 10, requires = "deliver")]
        deliver_tries: u32,
        /// How long the receiver has to answer a post before it counts as
        /// failed (1 ms to 7 days).
        #[arg(long, default_value = "10s", requires = "deliver")]
        deliver_timeout: String,
        /// Export spans to this OpenTelemetry collector over OTLP gRPC
        /// (`http://127.0.0.1:4317`): one a request (the child of its
        /// `traceparent` header), and one a decision on a task added with a
        /// traceparent (the child of it). Needs the `otlp` feature.
        #[arg(long)]
        otlp: Option<String>,
    },
    /// The contention harness: W workers race for T tasks and complete what they win.
    ///
    /// Example: baton bench --workers 8 --tasks 1000 --processes --order disjoint
    #[serde(skip)]
    Bench(BenchArgs),
    /// Print a shell completion script: `baton completions bash > /etc/bash_completion.d/baton`.
    ///
    /// Example: baton completions bash > /etc/bash_completion.d/baton
    #[serde(skip)]
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Fence your own storage: a write made with an earlier attempt's fence
    /// is refused where it lands (Postgres, SQLite, a file).
    ///
    /// Example: baton guard install postgres://app@db/app --key /etc/baton/fence.key
    ///
    /// Example: baton guard write out/report.txt --resource report
    #[command(subcommand)]
    #[serde(skip)]
    Guard(GuardCommand),
    /// One worker of `bench --processes` (started by the harness).
    ///
    /// Example: baton bench-worker (started by `baton bench --processes`)
    #[command(hide = true)]
    #[serde(skip)]
    BenchWorker(BenchWorkerArgs),
}

/// Where a guarded write lands, and with which fence.
#[derive(Debug, Args, Clone)]
pub struct Fenced {
    /// What is written, as every writer of it names it (`invoice:42`):
    /// each resource keeps the highest fence admitted.
    #[arg(long)]
    pub resource: String,
    /// The fence or signed token to present (default: BATON_FENCE_TOKEN,
    /// else BATON_FENCE, as `baton run` sets them).
    #[arg(long, allow_hyphen_values = true)]
    pub fence: Option<String>,
    /// Admit only fences signed with a key in this file (one key a line).
    #[arg(long, env = "BATON_GUARD_KEY")]
    pub key: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum GuardCommand {
    /// Print a new random key for a fence key file (64 hex digits).
    ///
    /// Example: baton guard keygen > /etc/baton/fence.key
    Keygen,
    /// Install the guard in a database: a Postgres URL (schema
    /// `baton_guard`: a table and the functions `admit(resource, fence)`
    /// and `admit_token(resource, token)`) or a SQLite file (table
    /// `baton_guard_fences`). Idempotent; with --key, the file's keys
    /// replace the installed ones and only signed fences are admitted.
    ///
    /// Example: baton guard install postgres://app@127.0.0.1/app --key fence.key
    ///
    /// Example: baton guard install sqlite:app.db
    Install {
        /// postgres://... or sqlite:PATH (a bare path is a SQLite file).
        target: String,
        /// Keys to install (Postgres; a SQLite guard's keys are its caller's).
        #[arg(long)]
        key: Option<PathBuf>,
    },
    /// Replace a file with standard input if the fence is admitted: written
    /// beside, synced, and renamed under the resource's lock only if no
    /// later fence was admitted; a refused write leaves the file as it was
    /// (exit 1, stale_fence).
    ///
    /// Example: baton guard write out/report.html --resource report
    Write {
        /// The file to replace.
        path: PathBuf,
        #[command(flatten)]
        fenced: Fenced,
        /// Where the resource's marks live (default `.baton-guard` beside
        /// the file); every writer of a resource must use the same.
        #[arg(long)]
        marks: Option<PathBuf>,
    },
    /// Run SQL from standard input in one transaction after admitting the
    /// fence: the whole transaction rolls back on a stale fence.
    ///
    /// Example: baton guard sql sqlite:app.db --resource t
    Sql {
        /// postgres://... or sqlite:PATH.
        target: String,
        #[command(flatten)]
        fenced: Fenced,
    },
    /// The highest fence admitted for a resource (null if none).
    ///
    /// Example: baton guard show sqlite:app.db --resource t
    Show {
        /// postgres://..., sqlite:PATH, or a marks directory (a file guard's).
        target: String,
        /// The resource whose mark to show.
        #[arg(long)]
        resource: String,
    },
}

#[derive(Debug, Subcommand, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GraphCommand {
    /// Every graph task with its state, holder and edges (`--format dot`
    /// for Graphviz: `baton graph show --format dot | dot -Tsvg`).
    ///
    /// Example: baton --format human graph show
    ///
    /// Example: baton graph show --format dot | dot -Tsvg > graph.svg
    Show,
}

#[derive(Debug, Args, Serialize)]
pub struct Run {
    /// The executor run the task is registered to.
    #[arg(long, env = "BATON_RUN")]
    pub run: String,
    /// Your executor id: who holds the lease.
    #[arg(long, env = "BATON_EXECUTOR")]
    pub executor: String,
    /// The fence your grant carried, as the claim printed it.
    #[arg(long, allow_negative_numbers = true, env = "BATON_FENCE")]
    pub fence: u64,
}

#[derive(Debug, Args, Clone, Serialize)]
pub struct Paging {
    /// Page size (default 100).
    #[arg(long, default_value_t = 100, allow_negative_numbers = true)]
    pub limit: usize,
    /// The cursor a previous page ended with.
    #[arg(long, allow_hyphen_values = true)]
    pub after: Option<String>,
}

/// How a task added to the work graph waits and runs (`add`, and the
/// tasks a schedule makes).
#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct NodeArgs {
    /// The queue `next` takes it from (default: default).
    #[arg(long)]
    pub queue: Option<String>,
    /// Higher runs first among the ready tasks of its queue (default 0).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub priority: i64,
    /// A task that must SUCCEED first (repeatable).
    #[arg(long)]
    pub after: Vec<String>,
    /// The most one attempt may run (`90s`, `10m`, `2h`), however often
    /// its holder renews: the lease ends there, the attempt counts as a
    /// stall (TIMED_OUT), and `baton run` stops its child before it.
    #[arg(long)]
    pub timeout: Option<String>,
    #[command(flatten)]
    #[serde(flatten)]
    pub retry: RetryArgs,
    /// A concurrency key: at most the key's limit (`baton limit set KEY
    /// N`) of the tasks with this key hold live grants at once; the rest
    /// wait, refused `key_full`, and `next` passes over them.
    #[arg(long)]
    pub key: Option<String>,
    /// The W3C trace context the task joins (`00-TRACEID-PARENTID-01`):
    /// kept with it and carried on each grant; `baton run` gives it to its
    /// child as `TRACEPARENT`.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// A retry policy: how often a failed or stalled attempt is tried again,
/// and after how long.
#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct RetryArgs {
    /// Attempts in all: a failure (or a stall, or a time-out) before the
    /// last is tried again after a backoff (`--backoff`), the last one's
    /// is final (default 1).
    #[arg(long)]
    pub max_attempts: Option<u32>,
    /// The wait after the first failed attempt (default 1s); each
    /// wait after is `--backoff-factor` times longer, at most
    /// `--backoff-max`, give or take a quarter.
    #[arg(long)]
    pub backoff: Option<String>,
    /// How many times longer each wait is than the one before: 1 to 10,
    /// to a thousandth (default 2; `1.5`).
    #[arg(long)]
    pub backoff_factor: Option<f64>,
    /// The longest wait (default 1h).
    #[arg(long)]
    pub backoff_max: Option<String>,
}

impl RetryArgs {
    /// Whether any retry option was given.
    pub fn given(&self) -> bool {
        self.max_attempts.is_some()
            || self.backoff.is_some()
            || self.backoff_factor.is_some()
            || self.backoff_max.is_some()
    }
}

#[derive(Debug, Subcommand, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueCommand {
    /// Set a queue's retry policy: a task added to QUEUE without retry
    /// options of its own takes it, fixed when it is added (a task added
    /// before, or with its own options, keeps what it has). With no retry
    /// option the queue's policy is removed.
    ///
    /// Example: baton queue set builds --max-attempts 5 --backoff 30s --operator alice
    Set {
        /// The queue's id (as `add --queue` names it).
        queue: String,
        #[command(flatten)]
        #[serde(flatten)]
        retry: RetryArgs,
        /// Who sets it (an operator's act).
        #[arg(long)]
        operator: String,
    },
    /// Pause a queue: `next` (and `run --next`) passes over its tasks
    /// until it is resumed. A claim that names a task still takes it, and
    /// attempts in flight run on. Pausing a paused queue changes nothing.
    ///
    /// Example: baton queue pause builds --operator alice
    Pause {
        /// The queue's id (as `add --queue` names it).
        queue: String,
        /// Who pauses it (an operator's act).
        #[arg(long)]
        operator: String,
    },
    /// Resume a paused queue: `next` takes its tasks again (waiting
    /// workers see it within a second).
    ///
    /// Example: baton queue resume builds --operator alice
    Resume {
        /// The queue's id (as `add --queue` names it).
        queue: String,
        /// Who resumes it (an operator's act).
        #[arg(long)]
        operator: String,
    },
    /// Retry every task of QUEUE that failed for good (FAILED, STALLED,
    /// NOT_STARTED): each is redispatched as its next iteration, decided
    /// on its own record (one changed meanwhile is refused, the rest go
    /// on). Answers how many, the refused, and whether more are left.
    ///
    /// Example: baton queue retry-failed builds --operator alice
    #[serde(rename = "retry-failed")]
    RetryFailed {
        /// The queue's id (as `add --queue` names it).
        queue: String,
        /// Who retries them (an operator's act).
        #[arg(long)]
        operator: String,
        /// At most this many (default 1000).
        #[arg(long)]
        max: Option<u64>,
    },
    /// Discard every task of QUEUE that failed for good: each is forgotten
    /// now (its body and events go, its tombstone stays, as `prune` does).
    ///
    /// Example: baton queue discard-failed builds --operator alice
    #[serde(rename = "discard-failed")]
    DiscardFailed {
        /// The queue's id (as `add --queue` names it).
        queue: String,
        /// Who discards them (an operator's act).
        #[arg(long)]
        operator: String,
        /// At most this many (default 1000).
        #[arg(long)]
        max: Option<u64>,
    },
    /// A queue's policy (`{"retry": null}` when none was set) and when it
    /// was paused (`paused_at`, null while it runs).
    ///
    /// Example: baton queue show builds
    Show {
        /// The queue's id (as `add --queue` names it).
        queue: String,
    },
}

#[derive(Debug, Subcommand, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitCommand {
    /// Set a key's limit: at most N live grants at once of the tasks added
    /// with `--key KEY` (0 holds every new grant back; `none` removes the
    /// limit, its holders still counted). A lower limit ends no grant; it
    /// holds new ones back until enough end.
    ///
    /// Example: baton limit set repo-api 2 --operator alice
    Set {
        /// The concurrency key, as `add --key` names it.
        key: String,
        /// The most live grants at once (0 to 1000000), or `none`.
        limit: String,
        /// Your operator id (an operator's act; on a server with tokens, an operator's token).
        #[arg(long)]
        operator: String,
    },
    /// A key's limit, its live holders and the tasks waiting for a slot.
    ///
    /// Example: baton limit show repo-api
    Show {
        /// The concurrency key, as `add --key` names it.
        key: String,
    },
    /// Every key with its limit and counts.
    ///
    /// Example: baton --format human limit list
    List,
}

// Parsed once per process: the size of `Add` costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleCommand {
    /// Set a recurring schedule: one task `NAME@START` per period, of
    /// `--every` from now or from each time `--cron` names (UTC) to the
    /// next, made by whichever scheduler ticks first in the period (`baton
    /// serve`, `schedule run`, `schedule tick`): the store decides, so any
    /// number may run. Stop it with `cancel schedule:NAME --operator ID`.
    ///
    /// Example: baton schedule add nightly --every 1d --queue reports --max-attempts 3
    ///
    /// Example: baton schedule add backup --cron "0 2 * * MON-FRI" --queue ops
    #[command(group(clap::ArgGroup::new("period").required(true).args(["every", "cron"])))]
    Add {
        /// The schedule's name: each period's task is NAME@START.
        name: String,
        /// The period (`30s`, `1h`, `1d`; from 1 s to a year), counted from now.
        #[arg(long)]
        every: Option<String>,
        /// Instead of --every: a cron expression, read in UTC (5 fields,
        /// minute hour day-of-month month day-of-week, or 6 with seconds
        /// first); each time it names starts a period.
        #[arg(long)]
        cron: Option<String>,
        #[command(flatten)]
        #[serde(flatten)]
        node: NodeArgs,
    },
    /// Every schedule, with its period and state.
    ///
    /// Example: baton schedule list
    List,
    /// Make each live schedule's task for the current period, once.
    ///
    /// Example: baton schedule tick
    Tick,
    #[serde(skip)]
    /// Tick every `--tick` until stopped (a scheduler of its own).
    ///
    /// Example: baton schedule run --tick 1s
    Run {
        /// How often to tick (default 1s).
        #[arg(long)]
        tick: Option<String>,
    },
}

#[derive(Debug, Subcommand, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutboxCommand {
    /// Notifications not yet acknowledged, in the order they were committed.
    ///
    /// Example: baton outbox pending --limit 50
    Pending {
        #[command(flatten)]
        #[serde(flatten)]
        page: Paging,
    },
    /// Acknowledge notifications once delivered (an operator's act on a server with tokens).
    ///
    /// Example: baton outbox ack 3f2b8c1e-0000-4000-8000-000000000000
    Ack {
        /// The notifications' intent ids, as `outbox pending` printed them.
        #[arg(required = true)]
        intent_ids: Vec<String>,
    },
}
