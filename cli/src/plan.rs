//! What each command does: its input mapped to core's requests and
//! reads (`plan`), and run on an authority (`Plan::execute`).

use crate::args::{self, Command, GraphCommand, OutboxCommand, TaskCommand};
use crate::output::{self, Out};
use crate::parse::*;
use baton_core::call::{Call, made_json};
use baton_core::catalogue::{self, Kind};
use baton_core::graph::{NewNode, NodeSpec, Taker};
use baton_core::workgraph::GraphState;
use baton_core::{Actor, Error, Id, Request};
use baton_open::DynAuthority;
use serde_json::json;
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
        page: args::Paging,
        human: bool,
    },
    /// Tick every so many ms until stopped.
    ScheduleRun(u64),
}

/// A write: one request through core's [`Call::Write`].
pub(super) fn write(task: Id, request: Request) -> Plan {
    Plan::Call(Call::Write {
        task,
        request,
        pre: baton_core::Preconditions::none(),
    })
}

pub(super) fn plan(cmd: &Command) -> Result<Plan, Error> {
    use Call as C;
    use Plan::Call as P;
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
        } => write(
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
        } => write(
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
        Command::Recover { task, owner, ttl } => write(
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
            (None, None, Some(op)) if *cascade => P(C::CancelCascade {
                task: t(task)?,
                by: operator(op)?,
                force: *force,
            }),
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
        Command::Holder { task } => P(C::Holder { task: t(task)? }),
        Command::Verify { task, fence } => P(C::Verify {
            task: t(task)?,
            fence: *fence,
        }),
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
            } => write(
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
            TaskCommand::Show { task } => P(C::Show { task: t(task)? }),
            TaskCommand::Events { task, page } => {
                let task = t(task)?;
                if let Some(after) = &page.after {
                    baton_core::authority::parse_cursor(Some(after))?;
                }
                let page = check_page(page)?;
                P(C::TaskEvents {
                    task,
                    after: page.after,
                    limit: page.limit,
                })
            }
            TaskCommand::Gate { task } => P(C::Gate { task: t(task)? }),
            TaskCommand::List { state, queue, page } => {
                let page = check_page(page)?;
                let queue = queue.as_deref().map(|q| id("queue", q)).transpose()?;
                match state.as_deref().map(str::to_ascii_uppercase).as_deref() {
                    Some("READY") => P(C::ListGraph {
                        state: GraphState::Ready,
                        queue,
                        limit: page.limit,
                    }),
                    Some("BLOCKED") => P(C::ListGraph {
                        state: GraphState::Blocked,
                        queue,
                        limit: page.limit,
                    }),
                    _ if queue.is_some() => {
                        return Err(Error::invalid(
                            "queue",
                            "filters only --state READY or BLOCKED",
                        ));
                    }
                    _ => P(C::List {
                        state: state.as_deref().map(parse_state).transpose()?,
                        after: page.after,
                        limit: page.limit,
                    }),
                }
            }
            TaskCommand::Next {
                executor,
                queue,
                ttl,
                wait,
                keep_waiting,
            } => P(C::Next {
                taker: Taker::Executor {
                    executor: exec(executor)?,
                    ttl_ms: parse_ttl(ttl.as_deref())?,
                },
                queues: queues(queue)?,
                wait_ms: parse_wait(wait.as_deref())?,
                keep_waiting: *keep_waiting,
            }),
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
            P(C::AddGraph {
                nodes: read_graph(file.as_deref())?,
            })
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
            keep_waiting,
        } => P(C::Next {
            taker: Taker::Owner {
                owner: o(owner)?,
                ttl_ms: parse_ttl(ttl.as_deref())?,
                lock_delay_ms: parse_lock_delay(lock_delay.as_deref())?,
            },
            queues: queues(queue)?,
            wait_ms: parse_wait(wait.as_deref())?,
            keep_waiting: *keep_waiting,
        }),
        Command::Graph(GraphCommand::Show) => P(C::Graph),
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
        Command::Schedule(args::ScheduleCommand::List) => P(C::Schedules),
        Command::Schedule(args::ScheduleCommand::Tick) => P(C::Tick),
        Command::Schedule(args::ScheduleCommand::Run { tick }) => Plan::ScheduleRun(
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
        Command::Limit(args::LimitCommand::Show { key }) => P(C::KeyShow {
            key: id("key", key)?,
        }),
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
        Command::Queue(args::QueueCommand::Show { queue }) => P(C::QueueShow {
            queue: id("queue", queue)?,
        }),
        Command::Events { task, page, follow } => {
            baton_core::authority::parse_cursor(page.after.as_deref())?;
            let task = task.as_deref().map(t).transpose()?;
            if *follow {
                Plan::Follow {
                    task,
                    page: page.clone(),
                    human: false,
                }
            } else {
                P(C::Events {
                    task,
                    after: page.after.clone(),
                    limit: page.limit,
                })
            }
        }
        Command::Limit(args::LimitCommand::List) => P(C::Keys),
        Command::Sweep { dry_run } => P(C::Sweep { dry_run: *dry_run }),
        Command::Prune {
            finished_before,
            operator: op,
            max,
        } => P(C::Prune {
            by: operator(op)?,
            older_than_ms: catalogue::duration_ms(
                Kind::Retention,
                "finished_before",
                finished_before,
            )?,
            max: max.unwrap_or(usize::MAX),
        }),
        Command::Outbox(OutboxCommand::Pending { page }) => {
            let page = check_page(page)?;
            P(C::Pending {
                after: page.after,
                limit: page.limit,
            })
        }
        Command::Outbox(OutboxCommand::Ack { intent_ids }) => {
            baton_core::model::validate_intent_ids(intent_ids)?;
            P(C::Ack {
                intent_ids: intent_ids.clone(),
            })
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

pub(super) fn queues(names: &[String]) -> Result<Vec<Id>, Error> {
    names.iter().map(|q| id("queue", q)).collect()
}

pub(super) fn parse_wait(value: Option<&str>) -> Result<Option<u64>, Error> {
    value
        .map(|v| catalogue::duration_ms(Kind::Wait, "wait", v))
        .transpose()
}

/// The largest graph file read, in bytes.
pub(super) const MAX_GRAPH_BYTES: u64 = 64 * 1024 * 1024;

/// The spec of a task added (or made by a schedule) as `node` describes it.
pub(super) fn node_spec(
    task: &baton_core::TaskId,
    node: &args::NodeArgs,
) -> Result<NodeSpec, Error> {
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
pub(super) fn retry_policy(
    r: &args::RetryArgs,
) -> Result<Option<baton_core::graph::RetryPolicy>, Error> {
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

pub(super) fn read_graph(file: Option<&std::path::Path>) -> Result<Vec<NewNode>, Error> {
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

pub(super) fn check_page(p: &args::Paging) -> Result<args::Paging, Error> {
    if p.limit == 0 || p.limit > baton_core::authority::MAX_PAGE {
        return Err(Error::invalid(
            "limit",
            format!("must be from 1 to {}", baton_core::authority::MAX_PAGE),
        ));
    }
    Ok(p.clone())
}

impl Plan {
    pub(super) async fn execute(self, a: &DynAuthority) -> Result<Out, Error> {
        Ok(match self {
            Plan::Call(call) => Out::from(call.run(a).await?),
            Plan::Follow { task, page, human } => {
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
