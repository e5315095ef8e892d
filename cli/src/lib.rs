//! # baton-cli
//!
//! The `baton` binary's work, as a library: [`authority_for`] builds a
//! store from a URL (the seam embedders use too), and [`run`] executes one
//! command line and returns its exit status. `main.rs` only calls [`run`].
//!
//! Exit status: 0 done (an idempotent repeat too), 1 refused, 2 invalid
//! input or usage, 3 unavailable (also a corrupt, foreign or too-new
//! store: nothing was applied, do not start work), 4 indeterminate (it may
//! have applied: read before retrying), 5 not found, 6 not permitted (a
//! server refused the token, or a worker's token asked an operator's
//! request).

pub mod args;
pub mod bench;
pub mod bench_next;
mod demo;
mod output;
mod supervise;
mod tree;

pub use baton_open::{
    DEFAULT_STORE, DynAuthority, StoreUrl, authority_for, authority_with_token, settle_stores,
    store_for, use_token,
};

use args::{Cli, Command, Format, GraphCommand, OutboxCommand, TaskCommand};
use baton_core::catalogue::{self, Kind};
use baton_core::graph::{NewNode, NodeSpec, Taker};
use baton_core::workgraph::GraphState;
use baton_core::{
    Actor, Error, ErrorKind, Id, Manifest, Preconditions, Refusal, Reply, Request, State,
};
use output::{Out, Status, View};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Read;

/// Exit statuses: the contract scripts act on.
pub mod exit {
    pub const OK: i32 = 0;
    pub const REFUSED: i32 = 1;
    pub const INVALID: i32 = 2;
    pub const UNAVAILABLE: i32 = 3;
    pub const INDETERMINATE: i32 = 4;
    pub const NOT_FOUND: i32 = 5;
    /// A server refused the caller: no valid token, or a worker's token
    /// on an operator's request.
    pub const NOT_PERMITTED: i32 = 6;
}

/// The exit status for an error the store or the input gave.
pub fn exit_code_for(e: &Error) -> i32 {
    match e.kind {
        ErrorKind::Invalid => exit::INVALID,
        ErrorKind::Indeterminate => exit::INDETERMINATE,
        ErrorKind::Unavailable | ErrorKind::Corrupt | ErrorKind::Unsupported => exit::UNAVAILABLE,
        ErrorKind::NotPermitted => exit::NOT_PERMITTED,
    }
}

/// Runs one command line (`argv[0]` included) and returns the exit status.
/// Output goes to standard output, errors to standard error as JSON.
pub fn run<I, T>(argv: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let argv: Vec<std::ffi::OsString> = argv.into_iter().map(Into::into).collect();
    let cli = match parse_cli(argv.clone()) {
        Ok(cli) => cli,
        Err(e) if asks_for_run(&argv) => return supervise::own(usage_error(e)),
        Err(e) => return usage_error(e),
    };
    // A bench worker is one sequential client (or a few): on one thread
    // its requests and their connections never wake each other across
    // threads. Postgres's commit waits on a runtime of its own, which it
    // can do on the caller's thread only from a multi-thread runtime (one
    // worker, then). Everything else gets two.
    let postgres = cli
        .store
        .as_deref()
        .is_some_and(|s| s.starts_with("postgres://") || s.starts_with("postgresql://"));
    let built = if matches!(cli.command, Command::BenchWorker(_)) && postgres {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
    } else if matches!(cli.command, Command::BenchWorker(_)) {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
    };
    let runtime = match built {
        Ok(rt) => rt,
        Err(e) => {
            return report_error(&Error::unavailable(format!(
                "cannot start the async runtime: {e}"
            )));
        }
    };
    if let Some(spec) = match run_spec(&cli) {
        Ok(spec) => spec,
        Err(e) => return supervise::own(report_error(&e)),
    } {
        // On the main thread, as `block_on` runs it: see `supervise::spawn`.
        let code = runtime.block_on(supervise::main(spec));
        settle(&runtime);
        return code;
    }
    let format = cli.format;
    let code = match runtime.block_on(execute(&cli)) {
        Ok(out) => out.print(format.unwrap_or(Format::Json)),
        Err(e) => report_error(&e),
    };
    settle(&runtime);
    code
}

fn settle(runtime: &tokio::runtime::Runtime) {
    runtime.block_on(settle_stores());
}

/// The supervised run a command line asks for, checked, if it asks for one.
fn run_spec(cli: &Cli) -> Result<Option<supervise::Spec>, Error> {
    let store = cli.store.as_deref().unwrap_or(DEFAULT_STORE);
    let (task, next, holder, ttl, evidence, opts) = match &cli.command {
        Command::Run {
            task,
            next,
            queue,
            owner,
            ttl,
            lock_delay,
            opts,
        } => (
            task.as_deref(),
            next.then(|| {
                queue
                    .iter()
                    .map(|q| id("queue", q))
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?,
            supervise::Holder::Bare {
                owner: id("owner", owner)?,
                lock_delay_ms: parse_lock_delay(lock_delay.as_deref())?,
            },
            ttl,
            &[][..],
            opts,
        ),
        Command::Task(TaskCommand::Run {
            task,
            run,
            executor,
            ttl,
            evidence,
            opts,
        }) => (
            Some(task.as_str()),
            None,
            supervise::Holder::Declared {
                run: id("run", run)?,
                executor: id("executor", executor)?,
            },
            ttl,
            &evidence[..],
            opts,
        ),
        _ => return Ok(None),
    };
    StoreUrl::parse(store)?;
    let mut spec = supervise::Spec::new(store, task, next, holder, ttl.as_deref(), evidence, opts)?;
    spec.human = cli.format == Some(Format::Human);
    Ok(Some(spec))
}

fn usage_error(e: clap::Error) -> i32 {
    match clap_error(e) {
        Ok(code) => code,
        Err(err) => report_error(&err),
    }
}

/// A clap error as baton's (naming the field), or, for help and version,
/// the exit status after printing them.
fn clap_error(e: clap::Error) -> Result<i32, Error> {
    use clap::error::ErrorKind as K;
    if matches!(
        e.kind(),
        K::DisplayHelp | K::DisplayVersion | K::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return Ok(if e.kind() == K::DisplayHelpOnMissingArgumentOrSubcommand {
            exit::INVALID
        } else {
            exit::OK
        });
    }
    Err(invalid_usage(&e))
}

fn invalid_usage(e: &clap::Error) -> Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind as K};
    let args: Vec<String> = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => vec![arg.clone()],
        Some(ContextValue::Strings(args)) => args.clone(),
        _ => Vec::new(),
    };
    let field = match e.kind() {
        // Not a field of baton's: the argument as it was given.
        K::UnknownArgument => args.first().cloned(),
        _ if args.is_empty() => None,
        _ => Some(
            args.iter()
                .map(|a| field_name(a))
                .collect::<Vec<_>>()
                .join(", "),
        ),
    };
    // The whole rule, on one line: clap lists missing arguments on the
    // lines after its first, and ends with usage and tips.
    let rendered = e.render().to_string();
    let message = rendered
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:"))
        .filter(|l| {
            !l.is_empty() && !l.starts_with("tip:") && !l.starts_with("For more information")
        })
        .collect::<Vec<_>>()
        .join(" ");
    let mut message = message.trim_start_matches("error: ").to_owned();
    if e.kind() == K::InvalidUtf8 {
        message = "must be valid UTF-8".to_owned();
    }
    let message = if message.is_empty() {
        "usage error".to_owned()
    } else {
        message
    };
    match field {
        Some(field) => Error::invalid(field, message),
        None => Error::new(ErrorKind::Invalid, message),
    }
}

/// Parses a command line. An argument that is not UTF-8 is an error naming
/// the field it was given for.
fn parse_cli(argv: Vec<std::ffi::OsString>) -> Result<Cli, clap::Error> {
    if let Some(bad) = argv.iter().position(|a| a.to_str().is_none()) {
        let lossy: Vec<String> = argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let field = field_given(&lossy, bad);
        let mut e = clap::Error::new(clap::error::ErrorKind::InvalidUtf8);
        e.insert(
            clap::error::ContextKind::InvalidArg,
            clap::error::ContextValue::String(field),
        );
        return Err(e);
    }
    use clap::{CommandFactory, FromArgMatches};
    let mut matches = Cli::command().try_get_matches_from(argv)?;
    let given = matches.value_source("store") == Some(clap::parser::ValueSource::CommandLine);
    let mut cli = Cli::from_arg_matches_mut(&mut matches)?;
    cli.store_given = given;
    Ok(cli)
}

/// Whether a command line that does not parse asks for a supervised run
/// (`run`, `task run`), read as far as it goes: its usage error is then
/// reported in `run`'s own range of statuses.
fn asks_for_run(argv: &[std::ffi::OsString]) -> bool {
    use clap::CommandFactory;
    let lossy = argv.iter().map(|a| a.to_string_lossy().into_owned());
    let Ok(m) = Cli::command()
        .ignore_errors(true)
        .try_get_matches_from(lossy)
    else {
        return false;
    };
    match m.subcommand() {
        Some(("run", _)) => true,
        Some(("task", t)) => t.subcommand_name() == Some("run"),
        _ => false,
    }
}

/// Which field the argument at `index` was given for: found by parsing the
/// line with the bad bytes replaced, and looking for where they landed.
fn field_given(lossy: &[String], index: usize) -> String {
    use clap::CommandFactory;
    fn find(m: &clap::ArgMatches, value: &str) -> Option<String> {
        for id in m.ids() {
            if let Ok(Some(mut raw)) = m.try_get_raw(id.as_str())
                && raw.any(|v| v.to_str() == Some(value))
            {
                return Some(id.as_str().to_owned());
            }
        }
        m.subcommand().and_then(|(_, sub)| find(sub, value))
    }
    let value = &lossy[index];
    if let Ok(m) = Cli::command().try_get_matches_from(lossy)
        && let Some(field) = find(&m, value)
    {
        return field;
    }
    match index.checked_sub(1).map(|i| lossy[i].as_str()) {
        Some(flag) if flag.starts_with("--") => field_name(flag),
        _ => value
            .split('=')
            .next()
            .map_or_else(|| "argument".to_owned(), field_name),
    }
}

/// Validates a command line (`argv[0]` included) exactly as [`run`] does,
/// without opening a store or printing anything: the input rules alone.
/// Help and version requests are valid.
pub fn check<I, T>(argv: I) -> Result<(), Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::error::ErrorKind as K;
    let cli = match parse_cli(argv.into_iter().map(Into::into).collect()) {
        Ok(cli) => cli,
        Err(e) if matches!(e.kind(), K::DisplayHelp | K::DisplayVersion) => return Ok(()),
        Err(e) => return Err(invalid_usage(&e)),
    };
    StoreUrl::parse(cli.store.as_deref().unwrap_or(DEFAULT_STORE))?;
    match &cli.command {
        Command::Demo
        | Command::Serve { .. }
        | Command::Bench(_)
        | Command::BenchWorker(_)
        | Command::Completions { .. } => Ok(()),
        // Declaring reads a manifest (a file or standard input): not an argument rule.
        Command::Task(TaskCommand::Declare { .. }) => Ok(()),
        Command::Run { .. } | Command::Task(TaskCommand::Run { .. }) => run_spec(&cli).map(|_| ()),
        other => plan(other).map(|_| ()),
    }
}

/// `--fence <FENCE>` and `<TASK>` name the fields `fence` and `task`.
fn field_name(arg: &str) -> String {
    let name = arg.split_whitespace().next().unwrap_or(arg);
    name.trim_start_matches('-')
        .trim_matches(|c| c == '<' || c == '>')
        .to_lowercase()
        .replace('-', "_")
}

pub(crate) fn report_error(e: &Error) -> i32 {
    let mut body = json!({"error": {
        "kind": e.kind.as_str(),
        "message": e.message,
        "field": e.field,
        "temporary": e.kind.is_temporary(),
    }});
    if let Some(store) = &e.context {
        body["error"]["store"] = json!(store);
    }
    if let Some(cause) = &e.source {
        body["error"]["cause"] = json!(cause.to_string());
    }
    output::write_stderr(&body.to_string());
    exit_code_for(e)
}

fn id(field: &str, value: &str) -> Result<Id, Error> {
    Id::parse(field, value)
}

/// Parses `--lock-delay DUR`: `0` (none) or a DUR (the catalogue's rule).
pub(crate) fn parse_lock_delay(value: Option<&str>) -> Result<Option<u64>, Error> {
    value
        .map(|v| catalogue::duration_ms(Kind::LockDelay, "lock_delay", v))
        .transpose()
}

/// Parses a TTL: a number with a unit (`750ms`, `30s`, `5m`, `2h`), 1 ms
/// to 7 days (the catalogue's rule, as every front end reads it).
pub fn parse_ttl(value: Option<&str>) -> Result<Option<u64>, Error> {
    value
        .map(|v| catalogue::duration_ms(Kind::Ttl, "ttl", v))
        .transpose()
}

fn parse_error_json(value: &str) -> Result<Value, Error> {
    let v = baton_core::json::parse_strict("error", value)?;
    baton_core::request::validate_error(&v)?;
    Ok(v)
}

fn parse_evidence(items: &[String]) -> Result<BTreeMap<String, String>, Error> {
    let mut out = BTreeMap::new();
    for item in items {
        let (k, v) = item.split_once('=').ok_or_else(|| {
            Error::invalid("evidence", format!("must be KEY=sha256:HEX (got {item:?})"))
        })?;
        if out.insert(k.to_owned(), v.to_owned()).is_some() {
            return Err(Error::invalid(
                "evidence",
                format!("key {k:?} is given twice"),
            ));
        }
    }
    baton_core::request::validate_evidence(&out)?;
    Ok(out)
}

fn parse_state(value: &str) -> Result<State, Error> {
    State::parse("state", value)
}

fn read_manifest(file: Option<&std::path::Path>) -> Result<Manifest, Error> {
    let limit = baton_core::manifest::MAX_MANIFEST_BYTES as u64 + 1;
    let mut text = String::new();
    let read = match file {
        Some(p) => std::fs::File::open(p)
            .and_then(|f| f.take(limit).read_to_string(&mut text))
            .map_err(|e| Error::invalid("file", format!("cannot read {}: {e}", p.display()))),
        None => std::io::stdin()
            .take(limit)
            .read_to_string(&mut text)
            .map_err(|e| Error::invalid("manifest", format!("cannot read standard input: {e}"))),
    };
    read?;
    Manifest::from_json(&text)
}

/// A graph node as printed: its fields, and the state a person reads
/// (READY and BLOCKED for claimable tasks).
fn graph_json(n: &baton_core::GraphNode) -> Value {
    let mut v = json!(n);
    v["shown"] = json!(n.shown_state());
    v
}

/// What a reply prints: the grant for claims, the record otherwise.
fn reply_out(reply: Reply, as_grant: bool) -> Out {
    match reply {
        Reply::Refused(r) => refused(r),
        reply => {
            let view = match (as_grant, reply.grant()) {
                (true, Some(_)) => View::Grant,
                _ => View::Record,
            };
            let mut out = Out::one(baton_core::authority::reply_json(&reply, as_grant));
            out.view = view;
            out
        }
    }
}

fn refused(r: Refusal) -> Out {
    let status = if r == Refusal::NotFound {
        Status::NotFound
    } else {
        Status::Refused
    };
    Out {
        items: vec![baton_core::authority::refusal_json(&r)],
        next: None,
        status,
        printed: false,
        wrote: false,
        view: View::Refusal,
    }
}

/// `baton serve`: checks everything, opens the store, serves until
/// SIGTERM or SIGINT.
/// `serve`'s limits, as given on its command line.
// Read only by the server, which a build without `serve` leaves out.
#[cfg_attr(not(feature = "serve"), allow(dead_code))]
struct ServeLimits<'a> {
    sweep_every: &'a str,
    prune_after: Option<&'a str>,
    max_connections: usize,
    read_timeout: &'a str,
    max_wait: &'a str,
    request_log: bool,
}

#[cfg(not(feature = "serve"))]
async fn serve(
    _cli: &Cli,
    _listen: &str,
    _tokens: Option<&std::path::Path>,
    _tls: Option<(&std::path::Path, &std::path::Path)>,
    _limits: ServeLimits<'_>,
) -> Result<Out, Error> {
    Err(Error::unsupported(
        "`baton serve` needs baton built with the `serve` feature (cargo build -p baton-cli --features serve)",
    ))
}

#[cfg(feature = "serve")]
async fn serve(
    cli: &Cli,
    listen: &str,
    tokens: Option<&std::path::Path>,
    tls: Option<(&std::path::Path, &std::path::Path)>,
    limits: ServeLimits<'_>,
) -> Result<Out, Error> {
    let listen = baton_server::Listen::parse(listen)?;
    if limits.max_connections == 0 {
        return Err(Error::invalid("max_connections", "must be at least 1"));
    }
    let read_timeout = parse_ttl(Some(limits.read_timeout))
        .map_err(|e| Error::invalid("read_timeout", e.message))?
        .map_or(baton_server::READ_TIMEOUT, std::time::Duration::from_millis);
    let max_wait = catalogue::duration_ms(Kind::Wait, "max_wait", limits.max_wait)?;
    let sweep_every = match limits.sweep_every {
        "off" => None,
        every => parse_ttl(Some(every))
            .map_err(|e| Error::invalid("sweep_every", format!("{} (or `off`)", e.message)))?
            .map(std::time::Duration::from_millis),
    };
    let prune_after = limits
        .prune_after
        .map(|v| catalogue::duration_ms(Kind::Retention, "prune_after", v))
        .transpose()?;
    let tokens = tokens.map(baton_server::Tokens::load).transpose()?;
    let tls = tls
        .map(|(cert, key)| baton_store_http::tls::server_config(cert, key))
        .transpose()?;
    let url = cli
        .store
        .clone()
        .unwrap_or_else(|| DEFAULT_STORE.to_owned());
    if let StoreUrl::Http { .. } = StoreUrl::parse(&url)? {
        return Err(Error::invalid(
            "store",
            "a server serves a store of its own, not another server",
        ));
    }
    let mut opts = baton_server::ServeOptions::new(listen);
    opts.tokens = tokens;
    opts.tls = tls;
    opts.sweep_every = sweep_every;
    opts.prune_after_ms = prune_after;
    opts.request_log = limits.request_log;
    opts.max_connections = limits.max_connections;
    opts.read_timeout = read_timeout;
    opts.max_wait = std::time::Duration::from_millis(max_wait);
    opts.check()?;
    let store = store_for(&url).await?;
    baton_server::serve(store, opts).await?;
    let mut out = Out::list(Vec::new(), None);
    out.printed = true;
    Ok(out)
}

async fn execute(cli: &Cli) -> Result<Out, Error> {
    let given = cli.store.as_deref().filter(|_| cli.store_given);
    if let Command::Completions { shell } = &cli.command {
        use clap::CommandFactory;
        let mut script = Vec::new();
        clap_complete::generate(*shell, &mut Cli::command(), "baton", &mut script);
        output::write_stdout(&String::from_utf8_lossy(&script));
        let mut out = Out::list(Vec::new(), None);
        out.printed = true;
        return Ok(out);
    }
    if let Some(t) = &cli.token {
        use_token(t.clone());
    }
    match &cli.command {
        Command::Demo => return demo::run(given, cli.format).await,
        Command::Serve {
            listen,
            tokens,
            tls_cert,
            tls_key,
            sweep_every,
            prune_after,
            max_connections,
            read_timeout,
            max_wait,
            request_log,
        } => {
            let tls = tls_cert.as_deref().zip(tls_key.as_deref());
            let limits = ServeLimits {
                sweep_every,
                prune_after: prune_after.as_deref(),
                max_connections: *max_connections,
                read_timeout,
                max_wait,
                request_log: *request_log,
            };
            return serve(cli, listen, tokens.as_deref(), tls, limits).await;
        }
        Command::Bench(b) => return bench::run(given, b, cli.format).await,
        _ => {}
    }
    // Check the input before opening the store: bad input changes nothing.
    let store = cli
        .store
        .clone()
        .unwrap_or_else(|| DEFAULT_STORE.to_owned());
    StoreUrl::parse(&store)?;
    if let Command::BenchWorker(w) = &cli.command {
        return bench::run_worker(&store, w).await;
    }
    let mut plan = plan(&cli.command)?;
    if let Plan::Feed { human, .. } = &mut plan {
        *human = cli.format == Some(args::Format::Human);
    }
    if cli.format == Some(Format::Dot) && !matches!(plan, Plan::Graph) {
        return Err(Error::invalid("format", "dot is for `graph show` only"));
    }
    let a = authority_for(&store).await?;
    plan.execute(&a).await
}

/// A validated command, ready to run against a store. Every write is one
/// request through [`baton_core::Authority::submit`]; reads keep their own arms.
// One Plan is made per process and moved once: boxing the request would
// only add an allocation.
#[allow(clippy::large_enum_variant)]
enum Plan {
    Write {
        task: Id,
        request: Request,
        /// Print the grant (claims and renewals) rather than the record.
        prints_grant: bool,
    },
    Holder(Id),
    Verify(Id, u64),
    Show(Id),
    Events(Id, args::Paging),
    Gate(Id),
    List(Option<State>, args::Paging),
    Sweep(bool),
    Pending(args::Paging),
    Ack(Vec<String>),
    AddGraph(Vec<NewNode>),
    CancelCascade {
        task: Id,
        by: Actor,
        force: bool,
    },
    Next {
        taker: Taker,
        queues: Vec<Id>,
        wait_ms: Option<u64>,
    },
    ListGraph(GraphState, Option<Id>, usize),
    Graph,
    Schedules,
    Tick,
    /// Tick every so many ms until stopped.
    ScheduleRun(u64),
    KeyShow(Id),
    Keys,
    /// `events`: every task's (or one task's), a page or followed.
    Feed {
        task: Option<Id>,
        page: args::Paging,
        follow: bool,
        human: bool,
    },
    QueueShow(Id),
    Prune {
        by: Actor,
        older_than_ms: u64,
        max: usize,
    },
}

/// A write that prints the record it leaves.
fn write(task: Id, request: Request) -> Plan {
    Plan::Write {
        task,
        request,
        prints_grant: false,
    }
}

/// A write that prints the grant it makes.
fn grant(task: Id, request: Request) -> Plan {
    Plan::Write {
        task,
        request,
        prints_grant: true,
    }
}

fn plan(cmd: &Command) -> Result<Plan, Error> {
    use Plan as P;
    use Request as R;
    let t = |s: &str| id("task", s);
    let o = |s: &str| id("owner", s);
    let run = |r: &str| id("run", r);
    let exec = |e: &str| id("executor", e);
    let operator = |s: &str| id("operator", s).map(Actor::Operator);
    Ok(match cmd {
        Command::Claim {
            task,
            owner,
            ttl,
            lock_delay,
        } => grant(
            t(task)?,
            R::Claim {
                owner: o(owner)?,
                ttl_ms: parse_ttl(ttl.as_deref())?,
                lock_delay_ms: parse_lock_delay(lock_delay.as_deref())?,
            },
        ),
        Command::Renew {
            task,
            owner,
            fence,
            ttl,
        } => grant(
            t(task)?,
            R::Renew {
                owner: o(owner)?,
                fence: *fence,
                ttl_ms: parse_ttl(ttl.as_deref())?,
            },
        ),
        Command::Release { task, owner, fence } => write(
            t(task)?,
            R::Release {
                owner: o(owner)?,
                fence: *fence,
            },
        ),
        Command::Recover { task, owner, ttl } => grant(
            t(task)?,
            R::Recover {
                owner: o(owner)?,
                ttl_ms: parse_ttl(ttl.as_deref())?,
            },
        ),
        Command::Complete { task, owner, fence } => write(
            t(task)?,
            R::Complete {
                owner: o(owner)?,
                fence: *fence,
            },
        ),
        Command::Fail {
            task,
            owner,
            fence,
            error,
        } => write(
            t(task)?,
            R::Fail {
                owner: o(owner)?,
                fence: *fence,
                error: error.as_deref().map(parse_error_json).transpose()?,
            },
        ),
        Command::Cancel {
            task,
            owner,
            fence,
            operator: op,
            force,
            cascade,
        } => match (owner, fence, op) {
            (Some(_), Some(_), None) if *cascade => {
                return Err(Error::invalid(
                    "cascade",
                    "is for an operator's cancel (--operator ID, no --owner or --fence)",
                ));
            }
            (Some(owner), Some(fence), None) => write(
                t(task)?,
                R::Cancel {
                    by: Actor::Worker(o(owner)?),
                    fence: Some(*fence),
                    force: false,
                },
            ),
            (None, None, Some(op)) if *cascade => P::CancelCascade {
                task: t(task)?,
                by: operator(op)?,
                force: *force,
            },
            (None, None, Some(op)) => write(
                t(task)?,
                R::Cancel {
                    by: operator(op)?,
                    fence: None,
                    force: *force,
                },
            ),
            _ => {
                return Err(Error::invalid(
                    "owner",
                    "cancel takes --owner ID --fence N, or --operator ID",
                ));
            }
        },
        Command::Holder { task } => P::Holder(t(task)?),
        Command::Verify { task, fence } => P::Verify(t(task)?, *fence),
        Command::Task(tc) => match tc {
            TaskCommand::Declare { file } => {
                let manifest = read_manifest(file.as_deref())?;
                write(manifest.task_id.clone(), R::Declare { manifest })
            }
            TaskCommand::Register { task, run: r } => {
                write(t(task)?, R::Register { run_id: run(r)? })
            }
            TaskCommand::Claim {
                task,
                run: r,
                executor,
                ttl,
            } => grant(
                t(task)?,
                R::TaskClaim {
                    run_id: run(r)?,
                    executor: exec(executor)?,
                    ttl_ms: parse_ttl(ttl.as_deref())?,
                },
            ),
            TaskCommand::Start { task, run: r } => write(
                t(task)?,
                R::Start {
                    run_id: run(&r.run)?,
                    executor: exec(&r.executor)?,
                    fence: r.fence,
                },
            ),
            TaskCommand::Heartbeat {
                task,
                run: r,
                step,
                ttl,
            } => write(
                t(task)?,
                R::Heartbeat {
                    run_id: run(&r.run)?,
                    executor: exec(&r.executor)?,
                    fence: r.fence,
                    step: *step,
                    ttl_ms: parse_ttl(ttl.as_deref())?,
                },
            ),
            TaskCommand::Succeed {
                task,
                run: r,
                evidence,
            } => write(
                t(task)?,
                R::Succeed {
                    run_id: run(&r.run)?,
                    executor: exec(&r.executor)?,
                    fence: r.fence,
                    evidence: parse_evidence(evidence)?,
                },
            ),
            TaskCommand::Fail {
                task,
                run: r,
                error,
            } => write(
                t(task)?,
                R::TaskFail {
                    run_id: run(&r.run)?,
                    executor: exec(&r.executor)?,
                    fence: r.fence,
                    error: parse_error_json(error)?,
                },
            ),
            TaskCommand::Retry { task, run: r } => write(t(task)?, R::Retry { run_id: run(r)? }),
            TaskCommand::Run { .. } => {
                return Err(Error::invalid("command", "run is run before planning"));
            }
            TaskCommand::Redispatch {
                task,
                operator: op,
                iteration,
            } => write(
                t(task)?,
                R::Redispatch {
                    by: operator(op)?,
                    iteration: *iteration,
                },
            ),
            TaskCommand::Finalize {
                task,
                operator: op,
                error,
            } => write(
                t(task)?,
                R::Finalize {
                    by: operator(op)?,
                    error: error.as_deref().map(parse_error_json).transpose()?,
                },
            ),
            TaskCommand::Show { task } => P::Show(t(task)?),
            TaskCommand::Events { task, page } => {
                let task = t(task)?;
                if let Some(after) = &page.after {
                    baton_core::authority::parse_cursor(Some(after))?;
                }
                P::Events(task, check_page(page)?)
            }
            TaskCommand::Gate { task } => P::Gate(t(task)?),
            TaskCommand::List { state, queue, page } => {
                let page = check_page(page)?;
                let queue = queue.as_deref().map(|q| id("queue", q)).transpose()?;
                match state.as_deref().map(str::to_ascii_uppercase).as_deref() {
                    Some("READY") => P::ListGraph(GraphState::Ready, queue, page.limit),
                    Some("BLOCKED") => P::ListGraph(GraphState::Blocked, queue, page.limit),
                    _ if queue.is_some() => {
                        return Err(Error::invalid(
                            "queue",
                            "filters only --state READY or BLOCKED",
                        ));
                    }
                    _ => P::List(state.as_deref().map(parse_state).transpose()?, page),
                }
            }
            TaskCommand::Next {
                executor,
                queue,
                ttl,
                wait,
            } => P::Next {
                taker: Taker::Executor {
                    executor: exec(executor)?,
                    ttl_ms: parse_ttl(ttl.as_deref())?,
                },
                queues: queues(queue)?,
                wait_ms: parse_wait(wait.as_deref())?,
            },
        },
        Command::Add {
            task: Some(task),
            node,
            not_before,
            file: None,
        } => {
            let task = t(task)?;
            let start = not_before
                .as_deref()
                .map(|v| baton_core::graph::Start::parse("not_before", v))
                .transpose()?;
            let node = node_spec(&task, node)?.with_start(start)?;
            write(task, R::Add { node })
        }
        Command::Add {
            task: None,
            node,
            not_before,
            file,
        } => {
            let given = node.queue.is_some()
                || node.priority != 0
                || !node.after.is_empty()
                || node.timeout.is_some()
                || not_before.is_some()
                || node.retry.given()
                || node.key.is_some();
            if given {
                return Err(Error::invalid(
                    "file",
                    "--queue, --priority, --after, --timeout, --not-before, --key and the retry options describe one TASK; a graph file gives each node its own",
                ));
            }
            P::AddGraph(read_graph(file.as_deref())?)
        }
        Command::Add { task: Some(_), .. } => {
            return Err(Error::invalid("file", "give a TASK or --file, not both"));
        }
        Command::Next {
            owner,
            queue,
            ttl,
            lock_delay,
            wait,
        } => P::Next {
            taker: Taker::Owner {
                owner: o(owner)?,
                ttl_ms: parse_ttl(ttl.as_deref())?,
                lock_delay_ms: parse_lock_delay(lock_delay.as_deref())?,
            },
            queues: queues(queue)?,
            wait_ms: parse_wait(wait.as_deref())?,
        },
        Command::Graph(GraphCommand::Show) => P::Graph,
        Command::Schedule(args::ScheduleCommand::Add {
            name,
            every,
            cron,
            node,
        }) => {
            let task = baton_core::workgraph::schedule_id(name)?;
            let template = node_spec(&task, node)?;
            let schedule = match (every, cron) {
                (Some(every), _) => baton_core::graph::Schedule::every(
                    catalogue::duration_ms(Kind::Period, "every", every)?,
                    template,
                ),
                (None, Some(cron)) => baton_core::graph::Schedule::cron(cron, template),
                // clap's `period` group asks for one of them.
                (None, None) => return Err(Error::invalid("every", "give --every or --cron")),
            };
            write(task, R::Schedule { schedule })
        }
        Command::Schedule(args::ScheduleCommand::List) => P::Schedules,
        Command::Schedule(args::ScheduleCommand::Tick) => P::Tick,
        Command::Schedule(args::ScheduleCommand::Run { tick }) => P::ScheduleRun(
            tick.as_deref()
                .map(|v| catalogue::duration_ms(Kind::Ttl, "tick", v))
                .transpose()?
                .unwrap_or(1000),
        ),
        Command::Limit(args::LimitCommand::Set {
            key,
            limit,
            operator: op,
        }) => {
            let key = id("key", key)?;
            let limit = match limit.as_str() {
                "none" => None,
                n => Some(n.parse::<u32>().map_err(|_| {
                    Error::invalid(
                        "limit",
                        format!("must be a whole number from 0 to 1000000, or none (got {n:?})"),
                    )
                })?),
            };
            write(
                baton_core::graph::key_record_id(&key)?,
                R::Limit {
                    by: operator(op)?,
                    limit,
                },
            )
        }
        Command::Limit(args::LimitCommand::Show { key }) => P::KeyShow(id("key", key)?),
        Command::Queue(args::QueueCommand::Set {
            queue,
            retry,
            operator: op,
        }) => write(
            baton_core::graph::queue_record_id(&id("queue", queue)?)?,
            R::QueuePolicy {
                by: operator(op)?,
                retry: retry_policy(retry)?,
            },
        ),
        Command::Queue(args::QueueCommand::Show { queue }) => P::QueueShow(id("queue", queue)?),
        Command::Events { task, page, follow } => {
            baton_core::authority::parse_cursor(page.after.as_deref())?;
            P::Feed {
                task: task.as_deref().map(t).transpose()?,
                page: page.clone(),
                follow: *follow,
                human: false,
            }
        }
        Command::Limit(args::LimitCommand::List) => P::Keys,
        Command::Sweep { dry_run } => P::Sweep(*dry_run),
        Command::Prune {
            finished_before,
            operator: op,
            max,
        } => P::Prune {
            by: operator(op)?,
            older_than_ms: catalogue::duration_ms(
                Kind::Retention,
                "finished_before",
                finished_before,
            )?,
            max: max.unwrap_or(usize::MAX),
        },
        Command::Outbox(OutboxCommand::Pending { page }) => P::Pending(check_page(page)?),
        Command::Outbox(OutboxCommand::Ack { intent_ids }) => {
            baton_core::model::validate_intent_ids(intent_ids)?;
            P::Ack(intent_ids.clone())
        }
        Command::Demo
        | Command::Serve { .. }
        | Command::Bench(_)
        | Command::BenchWorker(_)
        | Command::Completions { .. }
        | Command::Run { .. } => {
            return Err(Error::invalid(
                "command",
                "demo, serve, bench, completions and run are run before planning",
            ));
        }
    })
}

fn queues(names: &[String]) -> Result<Vec<Id>, Error> {
    names.iter().map(|q| id("queue", q)).collect()
}

fn parse_wait(value: Option<&str>) -> Result<Option<u64>, Error> {
    value
        .map(|v| catalogue::duration_ms(Kind::Wait, "wait", v))
        .transpose()
}

/// The largest graph file read, in bytes.
const MAX_GRAPH_BYTES: u64 = 64 * 1024 * 1024;

/// A task a scheduler's tick made, as one JSON line.
fn made_json(task: &Id, reply: &Reply) -> Value {
    json!({"task": task, "state": reply.record().map(|r| r.state), "made": true})
}

/// The spec of a task added (or made by a schedule) as `node` describes it.
fn node_spec(task: &baton_core::TaskId, node: &args::NodeArgs) -> Result<NodeSpec, Error> {
    let queue = node.queue.as_deref().map(|q| id("queue", q)).transpose()?;
    let after = node
        .after
        .iter()
        .map(|d| id("after", d))
        .collect::<Result<Vec<_>, _>>()?;
    let span = |v: &Option<String>, kind, field| {
        v.as_deref()
            .map(|v| catalogue::duration_ms(kind, field, v))
            .transpose()
    };
    NodeSpec::new(task, queue, node.priority, after)?
        .with_timeout(span(&node.timeout, Kind::Ttl, "timeout")?)?
        .with_retry(retry_policy(&node.retry)?)?
        .with_key(node.key.as_deref().map(|k| id("key", k)).transpose()?)
}

/// The retry policy the options give, if any is given.
fn retry_policy(r: &args::RetryArgs) -> Result<Option<baton_core::graph::RetryPolicy>, Error> {
    let span = |v: &Option<String>, kind, field| {
        v.as_deref()
            .map(|v| catalogue::duration_ms(kind, field, v))
            .transpose()
    };
    baton_core::graph::RetryPolicy::from_parts(
        r.max_attempts,
        span(&r.backoff, Kind::LockDelay, "backoff")?,
        r.backoff_factor,
        span(&r.backoff_max, Kind::Ttl, "max_backoff")?,
    )
}

fn read_graph(file: Option<&std::path::Path>) -> Result<Vec<NewNode>, Error> {
    let mut text = String::new();
    let read = match file {
        Some(p) => std::fs::File::open(p)
            .and_then(|f| f.take(MAX_GRAPH_BYTES + 1).read_to_string(&mut text))
            .map_err(|e| Error::invalid("file", format!("cannot read {}: {e}", p.display()))),
        None => std::io::stdin()
            .take(MAX_GRAPH_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| Error::invalid("graph", format!("cannot read standard input: {e}"))),
    }?;
    if read as u64 > MAX_GRAPH_BYTES {
        return Err(Error::invalid(
            "graph",
            format!("must be at most {MAX_GRAPH_BYTES} bytes"),
        ));
    }
    baton_core::workgraph::parse_graph(&text)
}

fn check_page(p: &args::Paging) -> Result<args::Paging, Error> {
    if p.limit == 0 || p.limit > baton_core::authority::MAX_PAGE {
        return Err(Error::invalid(
            "limit",
            format!("must be from 1 to {}", baton_core::authority::MAX_PAGE),
        ));
    }
    Ok(p.clone())
}

impl Plan {
    async fn execute(self, a: &DynAuthority) -> Result<Out, Error> {
        use Plan as P;
        Ok(match self {
            P::Write {
                task,
                request,
                prints_grant,
            } => {
                let evidence = match &request {
                    Request::Succeed { evidence, .. } => Some(evidence.clone()),
                    _ => None,
                };
                let reply = a.submit(&task, request, Preconditions::none()).await?;
                let ignored = evidence.map(|ev| reply.evidence_ignored(&ev));
                let mut out = reply_out(reply, prints_grant);
                out.wrote = true;
                if let Some(ignored) = ignored.filter(|i| !i.is_empty())
                    && let Some(v) = out.items.first_mut()
                {
                    v["evidence_ignored"] = json!(ignored);
                }
                out
            }
            P::Holder(t) => match a.holder(&t).await? {
                Err(r) => refused(r),
                Ok(None) => Out::one(json!({"task": t, "holder": null, "live": false})),
                Ok(Some(h)) => Out::one(json!(h)),
            },
            P::Verify(t, f) => match a.verify(&t, f).await? {
                Err(r) => refused(r),
                Ok(v) => {
                    let status = if v.current {
                        Status::Ok
                    } else {
                        Status::Refused
                    };
                    Out {
                        items: vec![json!(v)],
                        next: None,
                        status,
                        printed: false,
                        wrote: false,
                        view: View::Generic,
                    }
                }
            },
            P::Show(t) => match a.get(&t).await? {
                None => refused(Refusal::NotFound),
                Some(r) => {
                    let mut out = Out::one(json!(r));
                    out.view = View::Record;
                    out
                }
            },
            P::Events(t, page) => {
                if a.get(&t).await?.is_none() {
                    return Ok(refused(Refusal::NotFound));
                }
                let p = a
                    .events(Some(&t), page.after.as_deref(), page.limit)
                    .await?;
                let mut out = Out::list(p.items.iter().map(|e| json!(e)).collect(), p.next);
                out.view = View::Events;
                out
            }
            P::Gate(t) => match a.gate(&t).await? {
                Err(r) => refused(r),
                Ok(g) => {
                    let status = if g.passed {
                        Status::Ok
                    } else {
                        Status::Refused
                    };
                    Out {
                        items: vec![json!(g)],
                        next: None,
                        status,
                        printed: false,
                        wrote: false,
                        view: View::Generic,
                    }
                }
            },
            P::List(state, page) => {
                let p = a.list(state, page.after.as_deref(), page.limit).await?;
                let mut items = Vec::with_capacity(p.items.len());
                for r in &p.items {
                    let mut v = json!(r);
                    // A claimable graph task is shown as a person asks
                    // about it: READY, BLOCKED (behind a dependency that
                    // ended without success), or waiting (REGISTERED).
                    if r.state == State::Registered && !r.depends_on().is_empty() {
                        let shown = match a.readiness(r).await? {
                            baton_core::graph::Readiness::Ready => "READY",
                            baton_core::graph::Readiness::Blocked { .. }
                            | baton_core::graph::Readiness::Unknown { .. } => "BLOCKED",
                            baton_core::graph::Readiness::Waiting { .. } => "REGISTERED",
                        };
                        v["shown"] = json!(shown);
                    }
                    items.push(v);
                }
                let mut out = Out::list(items, p.next);
                out.view = View::Tasks;
                out
            }
            P::Sweep(dry_run) => {
                let swept = a.sweep(dry_run).await?;
                Out::list(swept.iter().map(|s| json!(s)).collect(), None)
            }
            P::Pending(page) => {
                let p = a.pending(page.after.as_deref(), page.limit).await?;
                Out::list(p.items.iter().map(|n| json!(n)).collect(), p.next)
            }
            P::Ack(ids) => Out::one(json!({"acknowledged": a.ack(&ids).await?, "intent_ids": ids})),
            P::CancelCascade { task, by, force } => {
                let (first, cascaded) = a.cancel_cascade(&task, by, force).await?;
                let proceeded = baton_core::authority::cascade_proceeded(&first, &cascaded);
                let shown = baton_core::authority::cascade_json(&first, &cascaded);
                let mut out = reply_out(first, false);
                if let Some(v) = out.items.first_mut() {
                    v["cascaded"] = shown["cascaded"].clone();
                }
                if proceeded {
                    out.status = Status::Ok;
                }
                out.wrote = true;
                out
            }
            P::AddGraph(nodes) => {
                let mut out = match a.add_graph(nodes).await? {
                    Ok(added) => Out::one(json!(added)),
                    Err((task, r)) => {
                        let mut out = refused(r);
                        if let Some(v) = out.items.first_mut() {
                            v["task"] = json!(task);
                            v["message"] = json!(format!(
                                "{task}: {}; nothing was added",
                                v["message"].as_str().unwrap_or_default()
                            ));
                        }
                        out
                    }
                };
                out.wrote = true;
                out
            }
            P::Next {
                taker,
                queues,
                wait_ms,
            } => {
                let reply = match wait_ms {
                    Some(ms) => a.next_waiting(taker, &queues, ms).await?,
                    None => a.next_for(taker, &queues).await?,
                };
                let mut out = reply_out(reply, true);
                out.wrote = true;
                out
            }
            P::ListGraph(state, queue, limit) => {
                let nodes = a.list_graph(state, queue.as_ref(), limit).await?;
                let mut out = Out::list(nodes.iter().map(graph_json).collect(), None);
                out.view = View::Graph;
                out
            }
            P::Graph => {
                let nodes = a.graph().await?;
                let mut out = Out::list(nodes.iter().map(graph_json).collect(), None);
                out.view = View::Graph;
                out
            }
            P::Schedules => Out::list(
                a.schedules()
                    .await?
                    .iter()
                    .map(|r| {
                        json!({
                            "schedule": r.task,
                            "state": r.state,
                            "every_ms": r.schedule.as_ref().map(|s| s.every_ms).filter(|ms| *ms > 0),
                            "cron": r.schedule.as_ref().and_then(|s| s.cron.as_deref()),
                            "queue": r.schedule.as_ref().map(|s| &s.template.queue),
                            "since": r.created_at,
                            // Why its last tick made no task, until one does.
                            "failure": r.schedule_failure,
                        })
                    })
                    .collect(),
                None,
            ),
            P::Prune {
                by,
                older_than_ms,
                max,
            } => {
                let pruned = a.prune(by, older_than_ms, max).await?;
                let mut out = Out::one(json!({"pruned": pruned}));
                out.wrote = pruned > 0;
                out
            }
            P::KeyShow(key) => match a.key_status(&key).await? {
                Some(s) => Out::one(json!(s)),
                None => Out::one(json!({"key": key, "limit": null, "holders": [], "parked": []})),
            },
            P::QueueShow(queue) => {
                let policy = a.queue_policy(&queue).await?.unwrap_or_default();
                Out::one(json!({"queue": queue, "retry": policy.retry}))
            }
            P::Keys => Out::list(
                a.keys()
                    .await?
                    .iter()
                    .map(|s| {
                        json!({
                            "key": s.key,
                            "limit": s.limit,
                            "holders": s.holders.len(),
                            "parked": s.parked.len(),
                        })
                    })
                    .collect(),
                None,
            ),
            P::Tick => {
                let made = a.tick_schedules().await?;
                let mut out = Out::list(made.iter().map(|(t, r)| made_json(t, r)).collect(), None);
                out.wrote = !made.is_empty();
                out
            }
            P::Feed {
                task,
                page,
                follow: false,
                ..
            } => {
                let p = a
                    .events(task.as_ref(), page.after.as_deref(), page.limit)
                    .await?;
                let mut out = Out::list(p.items.iter().map(|e| json!(e)).collect(), p.next);
                out.view = View::Events;
                out
            }
            P::Feed {
                task, page, human, ..
            } => {
                // Each event as a line once it is read; an empty read waits
                // a little longer each time, up to a second. A reader that
                // went away (a closed pipe) ends it.
                let mut after = page.after.clone();
                let mut pause = std::time::Duration::from_millis(50);
                let mut term =
                    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                        .map_err(|e| Error::unavailable(format!("cannot watch SIGTERM: {e}")))?;
                'follow: loop {
                    let p = a
                        .events(task.as_ref(), after.as_deref(), page.limit)
                        .await?;
                    for e in &p.items {
                        let v = json!(e);
                        let line = if human {
                            output::event_line(&v)
                        } else {
                            v.to_string()
                        };
                        if output::try_write_stdout(&format!("{line}\n")).is_err() {
                            break 'follow;
                        }
                        after = Some(e.seq.to_string());
                    }
                    if !p.items.is_empty() {
                        pause = std::time::Duration::from_millis(50);
                        continue;
                    }
                    if output::stdout_closed() {
                        break;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = tokio::signal::ctrl_c() => break,
                        _ = term.recv() => break,
                    }
                    pause = (pause * 2).min(std::time::Duration::from_secs(1));
                }
                let mut out = Out::list(Vec::new(), None);
                out.printed = true;
                out
            }
            P::ScheduleRun(tick_ms) => {
                // A scheduler of its own until SIGINT or SIGTERM: each task
                // it makes is a JSON line as it is made. A tick the store
                // cannot answer is reported and tried again at the next.
                let mut term =
                    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                        .map_err(|e| Error::unavailable(format!("cannot watch SIGTERM: {e}")))?;
                loop {
                    match a.tick_schedules().await {
                        Ok(made) => {
                            for (t, r) in &made {
                                output::write_stdout(&format!("{}\n", made_json(t, r)));
                            }
                        }
                        Err(e) => {
                            eprintln!("{}", json!({"error": e.to_string(), "tick": "failed"}));
                        }
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(std::time::Duration::from_millis(tick_ms)) => {}
                        _ = tokio::signal::ctrl_c() => break,
                        _ = term.recv() => break,
                    }
                }
                let mut out = Out::list(Vec::new(), None);
                out.printed = true;
                out
            }
        })
    }
}

/// The CLI fuzz target's property, shared with the tests that replay its
/// corpus: NUL-separated bytes as a command line are checked without a
/// panic, and anything refused is refused as invalid input.
#[doc(hidden)]
pub fn fuzz_args(data: &[u8]) {
    use std::os::unix::ffi::OsStringExt;
    let args = std::iter::once(std::ffi::OsString::from("baton")).chain(
        data.split(|b| *b == 0)
            .map(|a| std::ffi::OsString::from_vec(a.to_vec())),
    );
    if let Err(e) = check(args) {
        assert_eq!(e.kind, ErrorKind::Invalid, "{e}");
    }
}

#[cfg(test)]
#[path = "lib_tests.rs"]
mod tests;
