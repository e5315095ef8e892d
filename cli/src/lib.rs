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
pub use baton_supervisor::exit;
mod guard;
mod output;
mod parse;
mod plan;
use baton_supervisor as supervise;
pub use exit::exit_code_for;
use output::report_error;
use parse::*;
use plan::*;

pub use baton_open::{
    DEFAULT_STORE, DynAuthority, StoreUrl, authority_for, authority_with_token, finish_stores,
    store_for, use_token,
};

use args::{Cli, Command, Format, TaskCommand};
use baton_core::call::Call;
#[cfg(feature = "serve")]
use baton_core::catalogue::{self, Kind};
use baton_core::{Error, ErrorKind};
use output::Out;

/// Runs one command line (`argv[0]` included) and returns the exit status.
/// Output goes to standard output (for people on a terminal, JSON
/// otherwise or with `--format json`), errors to standard error (text on a
/// terminal, JSON otherwise).
pub fn run<I, T>(argv: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let argv: Vec<std::ffi::OsString> = argv.into_iter().map(Into::into).collect();
    // A person at a terminal reads errors as text (clap's usage errors with
    // their "did you mean"); a script, or `--format json`, reads JSON.
    let json_asked = argv
        .windows(2)
        .any(|w| w[0] == "--format" && w[1] == "json")
        || argv.iter().any(|a| a == "--format=json");
    supervise::term::errors_as_text(
        !json_asked && std::io::IsTerminal::is_terminal(&std::io::stderr()),
    );
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
        finish(&runtime);
        return code;
    }
    let format = cli.format;
    let code = match runtime.block_on(execute(&cli)) {
        Ok(out) => out.print(format.unwrap_or_else(default_format)),
        Err(e) => report_error(&e),
    };
    finish(&runtime);
    code
}

/// The output format when none is asked for: for a person on a terminal,
/// JSON when standard output is a pipe or a file (what scripts read).
fn default_format() -> Format {
    if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        Format::Human
    } else {
        Format::Json
    }
}

fn finish(runtime: &tokio::runtime::Runtime) {
    runtime.block_on(finish_stores());
}

/// The supervised run a command line asks for, checked, if it asks for one.
fn run_spec(cli: &Cli) -> Result<Option<supervise::Spec>, Error> {
    let store = cli.store.as_deref().unwrap_or(DEFAULT_STORE);
    let (task, next, holder, ttl, evidence, opts) = match &cli.command {
        Command::Run {
            task,
            next,
            queue,
            count: _,
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
    spec.human = cli.format.unwrap_or_else(default_format) == Format::Human;
    if let Command::Run { count: Some(n), .. } = &cli.command {
        spec.count = *n;
    }
    Ok(Some(spec))
}

fn usage_error(e: clap::Error) -> i32 {
    // On a terminal, clap's own words: what was wrong, what was meant
    // ("a similar subcommand exists"), the usage.
    if supervise::term::errors_are_text()
        && !matches!(
            e.kind(),
            clap::error::ErrorKind::DisplayHelp
                | clap::error::ErrorKind::DisplayVersion
                | clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
        )
    {
        let _ = e.print();
        return exit::INVALID;
    }
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
    let mut matches = grouped_help(Cli::command()).try_get_matches_from(argv)?;
    let given = matches.value_source("store") == Some(clap::parser::ValueSource::CommandLine);
    let mut cli = Cli::from_arg_matches_mut(&mut matches)?;
    cli.store_given = given;
    Ok(cli)
}

/// The top-level help's commands, by what they are for; a command no
/// group names is listed under "Other", so none is left out.
const HELP_GROUPS: [(&str, &[&str]); 5] = [
    (
        "Leases (a worker's)",
        &[
            "claim",
            "renew",
            "release",
            "recover",
            "complete",
            "fail",
            "report",
            "checkpoint",
            "run",
            "holder",
            "verify",
        ],
    ),
    ("The work graph", &["add", "next", "graph"]),
    ("The registry (declared tasks)", &["task"]),
    (
        "Operators",
        &[
            "cancel", "sweep", "prune", "limit", "queue", "schedule", "outbox", "events",
        ],
    ),
    (
        "Server and tools",
        &["serve", "guard", "demo", "bench", "completions", "help"],
    ),
];

/// `baton --help` with its commands grouped ([`HELP_GROUPS`]), each with
/// the first sentence of what it does, wrapped to the terminal (100
/// columns when the help is not shown on one).
fn grouped_help(mut cmd: clap::Command) -> clap::Command {
    cmd.build();
    let width = std::io::IsTerminal::is_terminal(&std::io::stdout())
        .then(terminal_size::terminal_size)
        .flatten()
        .map_or(100, |(w, _)| usize::from(w.0).clamp(40, 200));
    let visible: Vec<&clap::Command> = cmd.get_subcommands().filter(|c| !c.is_hide_set()).collect();
    let name_width = visible
        .iter()
        .map(|c| c.get_name().len())
        .max()
        .unwrap_or(0);
    let line = |c: &clap::Command| {
        let about = c.get_about().map(|a| a.to_string()).unwrap_or_default();
        let first = about
            .split(". ")
            .next()
            .unwrap_or_default()
            .trim_end_matches('.');
        let indent = 2 + name_width + 2;
        let mut out = format!("  {:<name_width$}  ", c.get_name());
        let mut col = indent;
        for word in first.split_whitespace() {
            if col > indent && col + 1 + word.len() > width {
                out.push('\n');
                out.push_str(&" ".repeat(indent));
                col = indent;
            } else if col > indent {
                out.push(' ');
                col += 1;
            }
            out.push_str(word);
            col += word.len();
        }
        out.push('\n');
        out
    };
    let mut text = String::new();
    let mut listed = std::collections::BTreeSet::new();
    for (heading, names) in HELP_GROUPS {
        let found: Vec<&&clap::Command> = names
            .iter()
            .filter_map(|n| visible.iter().find(|c| c.get_name() == *n))
            .collect();
        if found.is_empty() {
            continue;
        }
        text.push_str(&format!("{heading}:\n"));
        for c in found {
            listed.insert(c.get_name().to_owned());
            text.push_str(&line(c));
        }
        text.push('\n');
    }
    let others: Vec<&&clap::Command> = visible
        .iter()
        .filter(|c| !listed.contains(c.get_name()))
        .collect();
    if !others.is_empty() {
        text.push_str("Other:\n");
        for c in others {
            text.push_str(&line(c));
        }
        text.push('\n');
    }
    let template = format!(
        "{{about-with-newline}}\n{{usage-heading}} {{usage}}\n\n{text}Options:\n{{options}}{{after-help}}"
    );
    cmd.help_template(template)
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
        | Command::Completions { .. }
        | Command::Guard(_) => Ok(()),
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

/// `baton serve`: checks everything, opens the store, serves until
/// SIGTERM or SIGINT.
/// `serve`'s limits, as given on its command line.
// Read only by the server, which a build without `serve` leaves out.
#[cfg_attr(not(feature = "serve"), allow(dead_code))]
struct ServeLimits<'a> {
    sweep_every: &'a str,
    prune_after: Option<&'a str>,
    forget_after: Option<&'a str>,
    max_connections: usize,
    read_timeout: &'a str,
    max_wait: &'a str,
    request_log: bool,
    fence_key: Option<&'a std::path::Path>,
    deliver: Option<(&'a str, &'a std::path::Path, u32, &'a str)>,
    otlp: Option<&'a str>,
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
    let forget_after = limits
        .forget_after
        .map(|v| catalogue::duration_ms(Kind::Retention, "forget_after", v))
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
    opts.forget_after_ms = forget_after;
    opts.request_log = limits.request_log;
    opts.max_connections = limits.max_connections;
    opts.read_timeout = read_timeout;
    opts.max_wait = std::time::Duration::from_millis(max_wait);
    opts.fence_keys = limits
        .fence_key
        .map(baton_open::read_fence_keys)
        .transpose()?;
    opts.deliver = limits
        .deliver
        .map(|(url, key, tries, timeout)| {
            let keys = baton_open::read_fence_keys(key)
                .map_err(|e| Error::invalid("deliver_key", e.message))?;
            let policy = baton_core::delivery::DeliveryPolicy::with_tries(tries)?;
            let mut d = baton_server::Deliver::new(url, keys, policy)?;
            d.timeout = parse_ttl(Some(timeout))
                .map_err(|e| Error::invalid("deliver_timeout", e.message))?
                .map_or(baton_server::POST_TIMEOUT, std::time::Duration::from_millis);
            Ok::<_, Error>(d)
        })
        .transpose()?;
    opts.otlp = limits.otlp.map(str::to_owned);
    opts.check()?;
    let opened = baton_open::open_url(&url).await?;
    opts.meter = opened.meter;
    baton_server::serve(opened.store, opts).await?;
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
        Command::Demo => {
            let json = cli.format == Some(Format::Json);
            return baton_harness::demo::run(given, json).await.map(Out::from);
        }
        Command::Serve {
            listen,
            tokens,
            tls_cert,
            tls_key,
            sweep_every,
            prune_after,
            forget_after,
            max_connections,
            read_timeout,
            max_wait,
            request_log,
            fence_key,
            deliver,
            deliver_key,
            deliver_tries,
            deliver_timeout,
            otlp,
        } => {
            let tls = tls_cert.as_deref().zip(tls_key.as_deref());
            let limits = ServeLimits {
                sweep_every,
                prune_after: prune_after.as_deref(),
                forget_after: forget_after.as_deref(),
                max_connections: *max_connections,
                read_timeout,
                max_wait,
                request_log: *request_log,
                fence_key: fence_key.as_deref(),
                deliver: deliver
                    .as_deref()
                    .zip(deliver_key.as_deref())
                    .map(|(url, key)| (url, key, *deliver_tries, deliver_timeout.as_str())),
                otlp: otlp.as_deref(),
            };
            return serve(cli, listen, tokens.as_deref(), tls, limits).await;
        }
        Command::Guard(g) => return guard::run(g).await,
        Command::Bench(b) => {
            let human = cli.format == Some(Format::Human);
            return baton_harness::run(given, b, human).await.map(Out::from);
        }
        _ => {}
    }
    // Check the input before opening the store: bad input changes nothing.
    let store = cli
        .store
        .clone()
        .unwrap_or_else(|| DEFAULT_STORE.to_owned());
    StoreUrl::parse(&store)?;
    if let Command::BenchWorker(w) = &cli.command {
        return baton_harness::run_worker(&store, w).await.map(Out::from);
    }
    let mut plan = plan(&cli.command)?;
    if let Plan::Follow { human, .. } = &mut plan {
        *human = cli.format.unwrap_or_else(default_format) == Format::Human;
    }
    if cli.format == Some(Format::Dot) && !matches!(plan, Plan::Call(Call::Graph)) {
        return Err(Error::invalid("format", "dot is for `graph show` only"));
    }
    // A read of a local store that is not there yet creates none: it is
    // answered as the empty store a write would create, and says so.
    let absent = if only_reads(&cli.command) {
        baton_open::absent_store(&store)?
    } else {
        None
    };
    let a = match absent {
        Some(path) => {
            output::write_stderr(
                &serde_json::json!({"note": format!(
                    "no store at {path} yet: answered as an empty store (a read creates none; a write such as `baton add` or `baton claim` makes it)"
                )})
                .to_string(),
            );
            authority_for("memory:").await?
        }
        None => authority_for(&store).await?,
    };
    plan.execute(&a).await
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
