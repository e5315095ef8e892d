//! The recorder: a client that hammers a few task ids of a store with
//! every lease operation (and deliberate stale-fence writes, and writes
//! under another owner's fence), writing each invocation before it is sent
//! and each answer as it returns.

use crate::history::{Line, Observed, Req, Writer, now_us};
use baton_core::{Actor, Authority, Id, OwnerId, Store, SystemClock, TaskId};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// What one client does.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub client: u32,
    pub owner: String,
    /// Task ids are `{prefix}-{generation}-{k}` for `k` below `tasks`.
    pub prefix: String,
    pub tasks: u32,
    /// Every client moves to fresh ids together, each `generation_ms`, so
    /// that a task's history stays short enough to check and tasks keep
    /// being granted rather than all ending early.
    pub generation_ms: u64,
    /// The run's start and end on the monotonic clock ([`now_us`]).
    pub start_us: u64,
    pub until_us: u64,
    pub seed: u64,
    /// Lease TTLs are drawn from this range (ms).
    pub ttl_ms: (u64, u64),
    /// An answer that takes longer than this is recorded as unknown.
    pub timeout_ms: u64,
    /// A SQLite database with the guard installed, shared by every client:
    /// clients also write to it under their fences (and, as zombies, under
    /// lapsed and old ones), each write admitted or refused by the guard.
    #[serde(default)]
    pub guard: Option<PathBuf>,
    /// The guard broken on purpose: every write lands unchecked (and is
    /// recorded as admitted). Its histories must fail.
    #[serde(default)]
    pub guard_broken: bool,
}

impl Plan {
    /// A plan for client `client` of a run that starts now and lasts `secs`.
    pub fn new(client: u32, prefix: &str, secs: f64) -> Plan {
        let start_us = now_us();
        Plan {
            client,
            owner: format!("c{client}"),
            prefix: prefix.to_owned(),
            tasks: 4,
            generation_ms: 1500,
            start_us,
            until_us: start_us + (secs * 1e6) as u64,
            seed: u64::from(client) * 7919 + start_us,
            ttl_ms: (200, 700),
            timeout_ms: 15_000,
            guard: None,
            guard_broken: false,
        }
    }
}

/// Runs one client until the plan's end, writing to `out`. Returns how
/// many operations it made.
pub async fn run_client<S: Store>(
    auth: &Authority<S>,
    plan: &Plan,
    out: &mut Writer,
) -> std::io::Result<u64> {
    let mut c = Client {
        plan,
        rng: fastrand::Rng::with_seed(plan.seed),
        owner: match OwnerId::parse("owner", &plan.owner) {
            Ok(o) => o,
            Err(e) => return Err(std::io::Error::other(e.to_string())),
        },
        held: HashMap::new(),
        fences: HashMap::new(),
        n: 0,
        guard: None,
    };
    while now_us() < plan.until_us {
        c.step(auth, out).await?;
        let pause = c.rng.u64(5..40);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
    Ok(c.n)
}

struct Client<'a> {
    plan: &'a Plan,
    rng: fastrand::Rng,
    owner: OwnerId,
    /// The grant this client believes it holds, per task, and the TTL it
    /// last asked for it.
    held: HashMap<String, (u64, u64)>,
    /// Fences seen per task (its own old ones, others' from refusals).
    fences: HashMap<String, Vec<u64>>,
    n: u64,
    /// The guard's database, once opened.
    guard: Option<rusqlite::Connection>,
}

impl Client<'_> {
    async fn step<S: Store>(
        &mut self,
        auth: &Authority<S>,
        out: &mut Writer,
    ) -> std::io::Result<()> {
        let p = self.plan;
        let generation = (now_us().saturating_sub(p.start_us)) / (p.generation_ms.max(1) * 1000);
        let task = format!(
            "{}-{generation}-{}",
            p.prefix,
            self.rng.u32(0..p.tasks.max(1))
        );
        let ttl_ms = self.rng.u64(p.ttl_ms.0..=p.ttl_ms.1.max(p.ttl_ms.0));
        let old = self
            .fences
            .get(&task)
            .and_then(|v| (!v.is_empty()).then(|| v[self.rng.usize(0..v.len())]));
        let roll = self.rng.u32(0..100);
        let req = match self.held.get(&task).copied() {
            Some((fence, held_ttl)) => match roll {
                0..14 => Req::Renew { fence, ttl_ms },
                14..32 => Req::Release { fence },
                32..35 => Req::Complete { fence },
                35..36 => Req::Fail { fence },
                36..37 => Req::Cancel { fence },
                37..40 => Req::Verify { fence },
                40..62 => self.checkpoint(fence),
                62..65 => Req::Holder,
                65..78 => match old {
                    Some(f) if f != fence => self.stale(f, ttl_ms),
                    _ => Req::Verify { fence },
                },
                78..85 => Req::Claim {
                    ttl_ms,
                    lock_delay_ms: 0,
                },
                85..92 if p.guard.is_some() => self.write(fence),
                92..95 if p.guard.is_some() => {
                    // A zombie: its lease lapses, then it writes anyway.
                    tokio::time::sleep(Duration::from_millis(held_ttl + 20)).await;
                    self.write(fence)
                }
                _ => {
                    // Let the lease lapse, then write under it anyway.
                    tokio::time::sleep(Duration::from_millis(held_ttl + 20)).await;
                    Req::Renew { fence, ttl_ms }
                }
            },
            None => match roll {
                0..55 => Req::Claim {
                    ttl_ms,
                    lock_delay_ms: if self.rng.u32(0..4) == 0 {
                        self.rng.u64(50..300)
                    } else {
                        0
                    },
                },
                55..70 => Req::Holder,
                70..80 => Req::Verify {
                    fence: old.unwrap_or(1 + self.rng.u64(0..1000)),
                },
                80..83 if self.rng.u32(0..8) == 0 => Req::OperatorCancel,
                80..83 => Req::Holder,
                83..90 if p.guard.is_some() => match old {
                    // A write under an old grant's fence.
                    Some(f) => self.write(f),
                    None => Req::Holder,
                },
                _ => match old {
                    Some(f) => self.stale(f, ttl_ms),
                    None => Req::Holder,
                },
            },
        };
        self.call(auth, out, &task, req).await
    }

    /// A guarded write to one of two resources every task shares (fences
    /// are store-wide, so one mark per resource holds across tasks).
    fn write(&mut self, fence: u64) -> Req {
        Req::Write {
            resource: format!("{}-r{}", self.plan.prefix, self.rng.u32(0..2)),
            fence,
        }
    }

    /// Writes through the SQLite guard: the admission and the write (a row
    /// per admitted write) in one `IMMEDIATE` transaction.
    fn guarded_write(&mut self, resource: &str, fence: u64) -> Observed {
        use baton_guard::{GuardError, Presented, Refused};
        let Some(path) = self.plan.guard.as_deref() else {
            return Observed::Error {
                kind: "invalid".into(),
                message: "a guarded write with no guard".into(),
            };
        };
        if self.guard.is_none() {
            match baton_guard::sqlite::open(path) {
                Ok(c) => self.guard = Some(c),
                Err(e) => {
                    return Observed::Unavailable {
                        message: e.to_string(),
                    };
                }
            }
        }
        let Some(conn) = self.guard.as_mut() else {
            return Observed::Unavailable {
                message: "no guard connection".into(),
            };
        };
        let client = self.plan.client;
        let broken = self.plan.guard_broken;
        let wrote = (|| -> Result<u64, GuardError> {
            let tx = conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(|e| GuardError::Unavailable(e.to_string()))?;
            if !broken {
                baton_guard::sqlite::admit(&tx, resource, &Presented::Fence(fence), None)?;
            }
            tx.execute(
                "INSERT INTO guarded_writes (resource, fence, client) VALUES (?1, ?2, ?3)",
                rusqlite::params![resource, fence as i64, client],
            )
            .map_err(|e| GuardError::Unavailable(e.to_string()))?;
            tx.commit()
                .map_err(|e| GuardError::Unavailable(e.to_string()))?;
            Ok(fence)
        })();
        match wrote {
            Ok(mark) => Observed::Admitted { mark },
            Err(GuardError::Refused(Refused::Stale { fence, highest, .. })) => Observed::Refused {
                reason: "stale_fence".into(),
                current_fence: Some(highest),
                holder: None,
                fence: Some(fence),
            },
            Err(e) => Observed::Unavailable {
                message: e.to_string(),
            },
        }
    }

    /// A write under a fence that is (or soon will be) not this client's
    /// current one: its own old grant's, or another owner's.
    fn stale(&mut self, fence: u64, ttl_ms: u64) -> Req {
        match self.rng.u32(0..4) {
            0 => Req::Renew { fence, ttl_ms },
            1 => Req::Complete { fence },
            2 => self.checkpoint(fence),
            _ => Req::Release { fence },
        }
    }

    /// A step of two, with one of two outputs: the same one again is an
    /// acknowledgement, the other a conflict.
    fn checkpoint(&mut self, fence: u64) -> Req {
        Req::Checkpoint {
            fence,
            step: format!("s{}", self.rng.u32(0..2)),
            output: format!("{{\"v\":{}}}", self.rng.u32(0..2)),
        }
    }

    async fn call<S: Store>(
        &mut self,
        auth: &Authority<S>,
        out: &mut Writer,
        task: &str,
        req: Req,
    ) -> std::io::Result<()> {
        let n = self.n;
        self.n += 1;
        let client = self.plan.client;
        out.put(&Line::Invoke {
            client,
            n,
            t: now_us(),
            task: task.to_owned(),
            owner: self.plan.owner.clone(),
            req: req.clone(),
        })?;
        let answer = if let Req::Write { resource, fence } = &req {
            self.guarded_write(resource, *fence)
        } else {
            match tokio::time::timeout(
                Duration::from_millis(self.plan.timeout_ms),
                self.ask(auth, task, &req),
            )
            .await
            {
                Ok(a) => a,
                Err(_) => Observed::Unknown {
                    message: format!("no answer within {} ms", self.plan.timeout_ms),
                },
            }
        };
        out.put(&Line::Return {
            client,
            n,
            t: now_us(),
            answer: answer.clone(),
        })?;
        self.learn(task, &req, &answer);
        Ok(())
    }

    async fn ask<S: Store>(&self, auth: &Authority<S>, task: &str, req: &Req) -> Observed {
        let task = match TaskId::parse("task", task) {
            Ok(t) => t,
            Err(e) => return Observed::of_error(e),
        };
        let o = &self.owner;
        let write = match req {
            Req::Write { .. } => {
                return Observed::Error {
                    kind: "invalid".into(),
                    message: "a guarded write is not asked of the store".into(),
                };
            }
            Req::Claim {
                ttl_ms,
                lock_delay_ms: 0,
            } => auth.claim(&task, o, Some(*ttl_ms)).await,
            Req::Claim {
                ttl_ms,
                lock_delay_ms,
            } => {
                auth.claim_with_lock_delay(&task, o, Some(*ttl_ms), *lock_delay_ms)
                    .await
            }
            Req::Renew { fence, ttl_ms } => auth.renew(&task, o, *fence, Some(*ttl_ms)).await,
            Req::Checkpoint {
                fence,
                step,
                output,
            } => {
                let step = match (Id::parse("step", step), serde_json::from_str(output)) {
                    (Ok(step), Ok(output)) => baton_core::Step {
                        owner: o.clone(),
                        fence: *fence,
                        step,
                        output,
                        spawn: Vec::new(),
                        wait: false,
                    },
                    _ => {
                        return Observed::Error {
                            kind: "invalid".into(),
                            message: format!("a malformed step {step:?} {output:?}"),
                        };
                    }
                };
                match auth.checkpoint(&task, step).await {
                    Ok(Ok(r)) => Ok(r),
                    Ok(Err((_, r))) => Ok(baton_core::Reply::Refused(r)),
                    Err(e) => Err(e),
                }
            }
            Req::Release { fence } => auth.release(&task, o, *fence).await,
            Req::Complete { fence } => auth.complete(&task, o, *fence).await,
            Req::Fail { fence } => {
                auth.fail(
                    &task,
                    o,
                    *fence,
                    Some(serde_json::json!({"code": "history"})),
                )
                .await
            }
            Req::Cancel { fence } => auth.cancel(&task, o, *fence).await,
            Req::OperatorCancel => match Id::parse("operator", &format!("op-{}", o.as_str())) {
                Ok(id) => auth.cancel_as(&task, Actor::Operator(id)).await,
                Err(e) => Err(e),
            },
            Req::Holder => {
                return match auth.holder(&task).await {
                    Ok(Ok(h)) => Observed::Holder {
                        live: h.as_ref().is_some_and(|h| h.live),
                        lease: h.map(|h| crate::history::Seen {
                            owner: h.grant.owner.as_str().to_owned(),
                            fence: h.grant.fence,
                            expired: false,
                        }),
                    },
                    Ok(Err(r)) => Observed::refused(&r),
                    Err(e) => Observed::of_error(e),
                };
            }
            Req::Verify { fence } => {
                return match auth.verify(&task, *fence).await {
                    Ok(Ok(v)) => Observed::Verified {
                        current: v.current,
                        live: v.live,
                        state: v.state,
                        current_fence: v.current_fence,
                    },
                    Ok(Err(r)) => Observed::refused(&r),
                    Err(e) => Observed::of_error(e),
                };
            }
        };
        Observed::of_reply(write)
    }

    /// What the answer teaches the client about its grants and others'.
    fn learn(&mut self, task: &str, req: &Req, answer: &Observed) {
        if req.is_write_downstream() {
            // The guard's answer is about the resource, not the task.
            return;
        }
        let mut learned = Vec::new();
        match (req, answer) {
            (
                Req::Claim { .. },
                Observed::Done {
                    lease: Some(l),
                    ack: false,
                    ..
                },
            ) => {
                let ttl = match req {
                    Req::Claim { ttl_ms, .. } => *ttl_ms,
                    _ => 0,
                };
                if let Some((old, _)) = self.held.insert(task.to_owned(), (l.fence, ttl)) {
                    learned.push(old);
                }
                learned.push(l.fence);
            }
            (Req::Renew { fence, ttl_ms }, Observed::Done { .. })
                if self.held.get(task).map(|h| h.0) == Some(*fence) =>
            {
                self.held.insert(task.to_owned(), (*fence, *ttl_ms));
            }
            // A step recorded (or refused as another output for it): the
            // grant holds on.
            (Req::Checkpoint { .. }, Observed::Done { .. }) => {}
            (Req::Checkpoint { .. }, Observed::Refused { reason, .. })
                if reason == "checkpoint_conflict" => {}
            (
                _,
                Observed::Refused {
                    current_fence: Some(f),
                    ..
                },
            ) => {
                learned.push(*f);
                self.forget(task, req);
            }
            (Req::Holder | Req::Verify { .. }, _) => {}
            _ => self.forget(task, req),
        }
        let seen = self.fences.entry(task.to_owned()).or_default();
        seen.extend(learned);
        if seen.len() > 16 {
            seen.remove(0);
        }
    }

    /// The write under this client's grant ended it, was refused, or may
    /// have done either: it no longer counts on the grant.
    fn forget(&mut self, task: &str, req: &Req) {
        let fence = match req {
            Req::Renew { fence, .. }
            | Req::Release { fence }
            | Req::Complete { fence }
            | Req::Fail { fence }
            | Req::Cancel { fence }
            | Req::Checkpoint { fence, .. } => Some(*fence),
            Req::Claim { .. } | Req::OperatorCancel => None,
            Req::Holder | Req::Verify { .. } | Req::Write { .. } => return,
        };
        if fence.is_none() || self.held.get(task).map(|h| h.0) == fence {
            self.held.remove(task);
        }
    }
}

/// Makes `path` a guard database for [`Plan::guard`]: the guard's table
/// and a row per admitted write.
pub fn install_guard(path: &Path) -> Result<(), String> {
    let conn = baton_guard::sqlite::open(path).map_err(|e| e.to_string())?;
    baton_guard::sqlite::install(&conn).map_err(|e| e.to_string())?;
    conn.execute_batch(
        "PRAGMA journal_mode=WAL;
         CREATE TABLE IF NOT EXISTS guarded_writes (
             seq INTEGER PRIMARY KEY AUTOINCREMENT, resource TEXT, fence INTEGER, client INTEGER)",
    )
    .map_err(|e| e.to_string())
}

/// Records `plans` as threads of this process sharing `store` (each
/// thread its own runtime), into one file per client under `dir`.
pub fn record_threads(
    store: Arc<dyn Store>,
    plans: &[Plan],
    dir: &Path,
) -> std::io::Result<Vec<PathBuf>> {
    let mut handles = Vec::new();
    let mut files = Vec::new();
    for plan in plans {
        let path = dir.join(format!("client-{}.jsonl", plan.client));
        files.push(path.clone());
        let store = store.clone();
        let plan = plan.clone();
        handles.push(std::thread::spawn(move || -> std::io::Result<u64> {
            let mut out = Writer::create(&path)?;
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let auth = Authority::new(store, Arc::new(SystemClock));
            rt.block_on(run_client(&auth, &plan, &mut out))
        }));
    }
    for h in handles {
        h.join()
            .map_err(|_| std::io::Error::other("a recording thread panicked"))??;
    }
    Ok(files)
}
