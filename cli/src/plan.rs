//! What each command does: the catalogue's operation core makes from the
//! command's fields (`plan`), or one of the CLI's loops over one, run on
//! an authority (`Plan::execute`).

use crate::args::{Command, ScheduleCommand};
use crate::output::{self, Out};
use baton_core::call::{Call, made_json};
use baton_core::catalogue::{self, Kind};
use baton_core::given::Given;
use baton_core::{Error, Id};
use baton_open::DynAuthority;
use serde_json::{Value, json};
use std::io::Read;

/// A validated command, ready to run against a store: one operation of
/// core's catalogue ([`Call`]), or one of the CLI's own loops over one.
// One Plan is made per process and moved once: boxing the call would
// only add an allocation.
#[allow(clippy::large_enum_variant)]
pub(super) enum Plan {
    Call(Call),
    /// `events --follow`: every event as a line once it is read.
    Follow {
        task: Option<Id>,
        after: Option<String>,
        limit: usize,
        human: bool,
    },
    /// Tick every so many ms until stopped.
    ScheduleRun(u64),
}

/// What `cmd` does: the catalogue's operation its command names, made by
/// core from the command's fields (by the catalogue's input names), or
/// one of the CLI's own loops.
pub(super) fn plan(cmd: &Command) -> Result<Plan, Error> {
    match cmd {
        Command::Events { follow: true, .. } => {
            let Call::Events { task, after, limit } = made(cmd)? else {
                return Err(Error::invalid("command", "events is the catalogue's feed"));
            };
            Ok(Plan::Follow {
                task,
                after,
                limit,
                human: false,
            })
        }
        Command::Schedule(ScheduleCommand::Run { tick }) => Ok(Plan::ScheduleRun(
            tick.as_deref()
                .map(|v| catalogue::duration_ms(Kind::Ttl, "tick", v))
                .transpose()?
                .unwrap_or(1000),
        )),
        _ => made(cmd).map(Plan::Call),
    }
}

/// The catalogue's operation `cmd` names, made by core from its fields.
fn made(cmd: &Command) -> Result<Call, Error> {
    let (op, mut fields) = op_of(cmd)?;
    for input in op.inputs.iter().filter(|i| i.kind == Kind::Evidence) {
        hash_named_files(&mut fields, input.name)?;
    }
    let given = Given::new(fields)?.reading(Box::new(read_input));
    baton_core::given::call(op.name, given)
}

/// Each `KEY=@PATH` of the evidence input `name` as `KEY=sha256:HEX` of
/// the file's bytes (reading files is the command line's part; the
/// evidence's rules are core's).
fn hash_named_files(fields: &mut Value, name: &str) -> Result<(), Error> {
    let Some(Value::Array(items)) = fields.get_mut(name) else {
        return Ok(());
    };
    for item in items.iter_mut() {
        let Some((key, path)) = item.as_str().and_then(|s| s.split_once("=@")) else {
            continue;
        };
        let hash = baton_supervisor::hash_file(std::path::Path::new(path))
            .map_err(|e| Error::invalid(name, format!("{key}: cannot read {path}: {e}")))?;
        *item = Value::String(format!("{key}={hash}"));
    }
    Ok(())
}

/// Whether `cmd` only reads the store (the catalogue's operation it names
/// changes nothing, or it follows the event feed): it must not create one.
pub(super) fn only_reads(cmd: &Command) -> bool {
    match cmd {
        Command::Events { .. } => true,
        Command::Schedule(ScheduleCommand::Run { .. }) => false,
        _ => op_of(cmd).is_ok_and(|(op, _)| !op.write),
    }
}

/// The catalogue's entry `cmd` names, and the command's fields.
fn op_of(cmd: &Command) -> Result<(&'static catalogue::Op, Value), Error> {
    let not_one = || {
        Error::invalid(
            "command",
            "demo, serve, bench, completions, run and schedule run are not the catalogue's",
        )
    };
    let mut fields = serde_json::to_value(cmd).map_err(|_| not_one())?;
    // A command serializes as its words down to its fields:
    // {"task": {"claim": {...}}}, or {"graph": "show"} with none.
    let mut words: Vec<String> = Vec::new();
    loop {
        let (word, inner) = match fields {
            Value::String(word) => (word, json!({})),
            Value::Object(o) if o.len() == 1 => o.into_iter().next().ok_or_else(not_one)?,
            _ => return Err(not_one()),
        };
        words.push(word);
        fields = inner;
        let path = words.join(" ");
        if let Some(op) = catalogue::OPERATIONS
            .iter()
            .find(|o| o.cli == Some(path.as_str()))
        {
            return Ok((op, fields));
        }
    }
}

/// Reads what input `name` takes from the file `file` names, or from
/// standard input, at most `limit` bytes.
fn read_input(name: &str, file: Option<&str>, limit: u64) -> Result<String, Error> {
    let mut text = String::new();
    match file {
        Some(p) => std::fs::File::open(p)
            .and_then(|f| f.take(limit).read_to_string(&mut text))
            .map_err(|e| Error::invalid("file", format!("cannot read {p}: {e}"))),
        None => std::io::stdin()
            .take(limit)
            .read_to_string(&mut text)
            .map_err(|e| Error::invalid(name, format!("cannot read standard input: {e}"))),
    }?;
    Ok(text)
}

impl Plan {
    pub(super) async fn execute(self, a: &DynAuthority) -> Result<Out, Error> {
        Ok(match self {
            Plan::Call(call) => Out::from(call.run(a).await?),
            Plan::Follow {
                task,
                after,
                limit,
                human,
            } => {
                // Each event as a line once it is read; an empty read waits
                // a little longer each time, up to a second. A reader that
                // went away (a closed pipe) ends it.
                let mut after = after;
                let mut pause = std::time::Duration::from_millis(50);
                let mut term =
                    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                        .map_err(|e| Error::unavailable(format!("cannot watch SIGTERM: {e}")))?;
                'follow: loop {
                    let p = a.events(task.as_ref(), after.as_deref(), limit).await?;
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
                Out::printed()
            }
            Plan::ScheduleRun(tick_ms) => {
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
                Out::printed()
            }
        })
    }
}
