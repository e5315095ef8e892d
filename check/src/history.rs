//! What a history is made of: one line when a client invokes an operation
//! and one when its answer returns, each stamped with the host's monotonic
//! clock (shared by every process on the host, and left alone by
//! `faketime` when `FAKETIME_DONT_FAKE_MONOTONIC=1`), written as JSON lines.

use baton_core::{Error, ErrorKind, Lease, Refusal, Reply, State};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

/// An operation a client asks of one task (its owner is the client's).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Req {
    Claim {
        ttl_ms: u64,
        lock_delay_ms: u64,
    },
    Renew {
        fence: u64,
        ttl_ms: u64,
    },
    Release {
        fence: u64,
    },
    Complete {
        fence: u64,
    },
    Fail {
        fence: u64,
    },
    /// The holder cancels its own grant.
    Cancel {
        fence: u64,
    },
    /// An operator cancels whatever holds the task.
    OperatorCancel,
    Holder,
    Verify {
        fence: u64,
    },
    /// The holder records step `step` with `output` (JSON text) under `fence`.
    Checkpoint {
        fence: u64,
        step: String,
        output: String,
    },
    /// A write to the client's own storage through a guard, under `fence`
    /// (the task's grant's, or an older one's: a zombie's). Checked by the
    /// guard's model (`writes`), not the task's.
    Write {
        resource: String,
        fence: u64,
    },
}

impl Req {
    /// Reads change nothing: one whose answer never came is left out.
    pub fn is_read(&self) -> bool {
        matches!(self, Req::Holder | Req::Verify { .. })
    }

    /// A guarded write to the client's storage (not an operation on a task).
    pub fn is_write_downstream(&self) -> bool {
        matches!(self, Req::Write { .. })
    }
}

/// The lease an answer showed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Seen {
    pub owner: String,
    pub fence: u64,
    /// The store marked the lease as ended by time (a write saw it expired).
    pub expired: bool,
}

impl Seen {
    fn of(lease: &Lease) -> Seen {
        Seen {
            owner: lease.owner.as_str().to_owned(),
            fence: lease.fence,
            expired: lease.expired,
        }
    }
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum Observed {
    /// Committed (`ack: false`) or acknowledged as a repeat (`ack: true`).
    Done {
        ack: bool,
        state: State,
        lease: Option<Seen>,
        /// The steps the answer's record holds (`checkpoint`), in order.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        steps: Vec<String>,
    },
    /// A typed no, with the fields the model compares.
    Refused {
        reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        current_fence: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        holder: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fence: Option<u64>,
    },
    /// `holder`: the last grant (if any) and whether it is live.
    Holder { lease: Option<Seen>, live: bool },
    /// `verify`.
    Verified {
        current: bool,
        live: bool,
        state: State,
        current_fence: Option<u64>,
    },
    /// A guard admitted a write; `mark` is the resource's mark after it.
    Admitted { mark: u64 },
    /// The store could not answer and applied nothing.
    Unavailable { message: String },
    /// The request may or may not have been applied (indeterminate, a
    /// timeout, a reset connection).
    Unknown { message: String },
    /// Any other error: the recorder asked something malformed, or the
    /// store broke its contract. The checker reports it.
    Error { kind: String, message: String },
}

impl Observed {
    /// The answer to a write.
    pub fn of_reply(result: Result<Reply, Error>) -> Observed {
        match result {
            Ok(Reply::Committed(r)) => Observed::Done {
                ack: false,
                state: r.state,
                lease: r.lease.as_ref().map(Seen::of),
                steps: r.checkpoints.iter().map(|c| c.step.clone()).collect(),
            },
            Ok(Reply::Acknowledged(r)) => Observed::Done {
                ack: true,
                state: r.state,
                lease: r.lease.as_ref().map(Seen::of),
                steps: r.checkpoints.iter().map(|c| c.step.clone()).collect(),
            },
            Ok(Reply::Refused(r)) => Observed::refused(&r),
            Err(e) => Observed::of_error(e),
        }
    }

    /// A refusal, with the fields the model compares.
    pub fn refused(r: &Refusal) -> Observed {
        let (mut current_fence, mut holder, mut fence) = (None, None, None);
        match r {
            Refusal::Held {
                holder: h,
                fence: f,
                ..
            } => {
                holder = Some(h.as_str().to_owned());
                current_fence = Some(*f);
            }
            Refusal::StaleFence {
                fence: f,
                current_fence: c,
            } => {
                fence = Some(*f);
                current_fence = *c;
            }
            Refusal::NotHolder { holder: h } => holder = h.as_ref().map(|h| h.as_str().to_owned()),
            Refusal::LeaseExpired { fence: f, .. } | Refusal::LockDelay { fence: f, .. } => {
                fence = Some(*f)
            }
            _ => {}
        }
        Observed::Refused {
            reason: r.reason().to_owned(),
            current_fence,
            holder,
            fence,
        }
    }

    pub fn of_error(e: Error) -> Observed {
        match e.kind {
            ErrorKind::Unavailable => Observed::Unavailable { message: e.message },
            ErrorKind::Indeterminate => Observed::Unknown { message: e.message },
            k => Observed::Error {
                kind: k.as_str().to_owned(),
                message: e.message,
            },
        }
    }

    /// The refusal's reason, if it is one.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Observed::Refused { reason, .. } => Some(reason),
            _ => None,
        }
    }
}

/// One line of a history file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "at", rename_all = "snake_case")]
pub enum Line {
    Invoke {
        client: u32,
        n: u64,
        /// Microseconds on the host's monotonic clock.
        t: u64,
        task: String,
        owner: String,
        req: Req,
    },
    Return {
        client: u32,
        n: u64,
        t: u64,
        answer: Observed,
    },
}

/// One operation: its invocation and, when it came, its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    pub client: u32,
    pub n: u64,
    pub task: String,
    pub owner: String,
    pub req: Req,
    pub invoked: u64,
    /// `None`: no answer came (the client was killed mid-call).
    pub returned: Option<(u64, Observed)>,
}

impl Op {
    /// The answer, where one came and says what happened; `None` when the
    /// operation may or may not have been applied.
    pub fn known(&self) -> Option<&Observed> {
        match &self.returned {
            Some((_, Observed::Unknown { .. })) | None => None,
            Some((_, a)) => Some(a),
        }
    }
}

/// Pairs invocations with their answers, by client and number.
pub fn ops(lines: impl IntoIterator<Item = Line>) -> Result<Vec<Op>, String> {
    let mut ops: Vec<Op> = Vec::new();
    let mut open: HashMap<(u32, u64), usize> = HashMap::new();
    for line in lines {
        match line {
            Line::Invoke {
                client,
                n,
                t,
                task,
                owner,
                req,
            } => {
                if open.insert((client, n), ops.len()).is_some() {
                    return Err(format!("client {client} invoked operation {n} twice"));
                }
                ops.push(Op {
                    client,
                    n,
                    task,
                    owner,
                    req,
                    invoked: t,
                    returned: None,
                });
            }
            Line::Return {
                client,
                n,
                t,
                answer,
            } => {
                let Some(i) = open.remove(&(client, n)) else {
                    return Err(format!(
                        "client {client} answered operation {n}, which it never invoked"
                    ));
                };
                if t < ops[i].invoked {
                    return Err(format!(
                        "client {client} operation {n} returned before it was invoked"
                    ));
                }
                ops[i].returned = Some((t, answer));
            }
        }
    }
    Ok(ops)
}

/// Reads every line of a history file. A last line cut short (its writer
/// was killed mid-write) is left out; any other bad line is an error.
pub fn read_file(path: &Path) -> Result<Vec<Line>, String> {
    let f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let all: Vec<String> = BufReader::new(f)
        .lines()
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = Vec::with_capacity(all.len());
    for (i, l) in all.iter().enumerate() {
        match serde_json::from_str(l) {
            Ok(line) => out.push(line),
            Err(_) if i + 1 == all.len() => {}
            Err(e) => return Err(format!("{} line {}: {e}", path.display(), i + 1)),
        }
    }
    Ok(out)
}

/// Writes lines as they happen: each one whole, with one `write`, so a
/// client killed mid-call leaves every line before its last intact.
#[derive(Debug)]
pub struct Writer {
    file: File,
}

impl Writer {
    pub fn create(path: &Path) -> std::io::Result<Writer> {
        Ok(Writer {
            file: File::options().create(true).append(true).open(path)?,
        })
    }

    pub fn put(&mut self, line: &Line) -> std::io::Result<()> {
        let mut s = serde_json::to_string(line).map_err(std::io::Error::other)?;
        s.push('\n');
        self.file.write_all(s.as_bytes())
    }
}

/// Microseconds on the host's monotonic clock (the same in every process).
pub fn now_us() -> u64 {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC) {
        Ok(t) => {
            let us = t.tv_sec() as i128 * 1_000_000 + t.tv_nsec() as i128 / 1000;
            u64::try_from(us).unwrap_or(0)
        }
        // CLOCK_MONOTONIC exists on every Linux; were it refused, every
        // time would read 0 and the checker would find overlaps, not order.
        Err(_) => 0,
    }
}
