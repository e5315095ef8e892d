//! The work graph on the authority: add tasks with dependencies, take the
//! next ready one, and read the graph. The rules (readiness, order, what
//! blocks) are in [`crate::graph`] and [`mod@crate::decide`]; this is the API.

use crate::authority::{Authority, Reply, reply};
use crate::error::{Error, Result};
use crate::graph::{Census, NewNode, NextQuery, NodeSpec, Readiness, Taker, Upstream, plan};
use crate::id::{Id, OwnerId, TaskId};
use crate::model::{Grant, State, TaskRecord};
use crate::refusal::Refusal;
use crate::request::{Operation, Preconditions, Request};
use crate::store::{Clause, Due, ListQuery, Store};
use std::collections::{BTreeMap, BTreeSet};

#[path = "workgraph_wait.rs"]
mod wait;
pub use wait::{NEXT_WAIT_CAP_MS, NEXT_WAIT_FIRST_MS, NEXT_WAIT_WOKEN_SPREAD_MS};

/// The most records a census or a graph read looks at.
pub const GRAPH_READ_LIMIT: usize = 100_000;

/// What adding a graph came to.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Added {
    /// Nodes created.
    pub added: usize,
    /// Nodes that existed with the same definition (idempotent repeats).
    pub repeated: usize,
}

/// One node of [`Authority::graph`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GraphNode {
    pub task: TaskId,
    pub state: State,
    pub queue: Id,
    pub priority: i64,
    pub depends_on: Vec<TaskId>,
    /// For a claimable task: where its dependencies stand.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readiness: Option<Readiness>,
    /// The live grant's holder, if held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<Id>,
}

impl GraphNode {
    /// The state shown to a person: READY and BLOCKED for claimable tasks
    /// whose dependencies are all done or one failed, else the task's state.
    pub fn shown_state(&self) -> &'static str {
        match (&self.state, &self.readiness) {
            (State::Registered, Some(Readiness::Ready)) => "READY",
            (State::Registered, Some(Readiness::Blocked { .. } | Readiness::Unknown { .. })) => {
                "BLOCKED"
            }
            (s, _) => s.as_str(),
        }
    }
}

/// A concurrency key as read now ([`Authority::key_status`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KeyStatus {
    pub key: Id,
    /// `None`: no limit (holders are still counted).
    pub limit: Option<u32>,
    /// The tasks holding a live grant under the key.
    pub holders: Vec<crate::graph::KeyHolder>,
    /// Ready tasks waiting for a slot, oldest first.
    pub parked: Vec<TaskId>,
}

/// A filter of [`Authority::list_graph`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum GraphState {
    /// Claimable, every dependency SUCCEEDED.
    Ready,
    /// Claimable, behind a dependency that ended without success.
    Blocked,
}

impl<S: Store> Authority<S> {
    /// Sets the recurring schedule `name` (its record is `schedule:NAME`):
    /// one task from `template` every `every_ms`, made by whichever
    /// scheduler ticks first in each period ([`Authority::tick_schedules`]).
    /// The same schedule again is an acknowledgement, another one
    /// `manifest_conflict`; an operator's cancel of the record stops it.
    pub async fn schedule(&self, name: &str, every_ms: u64, template: NodeSpec) -> Result<Reply> {
        let task = schedule_id(name)?;
        let schedule = crate::graph::Schedule::every(every_ms, template);
        self.send(&task, Request::Schedule { schedule }).await
    }

    /// Sets the recurring schedule `name` like [`Authority::schedule`],
    /// with a period from each time the cron expression `cron` names (in
    /// UTC; 5 fields, or 6 with seconds first) to the next: one task per
    /// named time from the first one after the schedule is set.
    pub async fn schedule_cron(&self, name: &str, cron: &str, template: NodeSpec) -> Result<Reply> {
        self.set_schedule(name, crate::graph::Schedule::cron(cron, template))
            .await
    }

    /// Sets the recurring schedule `name` as `schedule` gives it (checked
    /// as [`crate::graph::Schedule::checked`] says: one period, `every`
    /// or `cron`).
    pub async fn set_schedule(
        &self,
        name: &str,
        schedule: crate::graph::Schedule,
    ) -> Result<Reply> {
        let task = schedule_id(name)?;
        self.send(&task, Request::Schedule { schedule }).await
    }

    /// The records whose id starts with `prefix` (a record kind of its own:
    /// `schedule:`, `key:`), in id order, at most [`GRAPH_READ_LIMIT`], as
    /// derived now.
    async fn with_prefix(&self, prefix: &str) -> Result<Vec<TaskRecord>> {
        let now = self.now();
        let mut out = Vec::new();
        let mut cursor = TaskId::parse("task", prefix)?;
        loop {
            let query = ListQuery {
                after: Some(cursor.clone()),
                limit: 100,
                clauses: None,
                now,
            };
            let batch = self.store.list(&query).await?;
            let exhausted = batch.len() < 100;
            for snap in batch {
                if !snap.record.task.as_str().starts_with(prefix) {
                    return Ok(out);
                }
                cursor = snap.record.task.clone();
                out.push(crate::decide::derive(&snap.record, snap.judged, now));
            }
            if exhausted || out.len() >= GRAPH_READ_LIMIT {
                return Ok(out);
            }
        }
    }

    /// Every schedule's record (`schedule:` ids, in name order, at most
    /// [`GRAPH_READ_LIMIT`]), as derived now.
    pub async fn schedules(&self) -> Result<Vec<TaskRecord>> {
        let mut out = self.with_prefix(crate::graph::SCHEDULE_PREFIX).await?;
        out.retain(|r| r.schedule.is_some());
        Ok(out)
    }

    /// One tick of the scheduler: for each live schedule, the add of its
    /// current period's task. However many schedulers tick (threads,
    /// processes, servers), the store decides the one add of each id;
    /// the others are acknowledgements. Returns the tasks this tick made
    /// (a period no scheduler ticked in is not made up).
    ///
    /// A schedule whose period's task cannot be made (its add refused or
    /// bad: a definition another put under that id, a dependency gone)
    /// stops no other schedule: the failure is kept on its record
    /// (`schedule_failure`, until a tick makes its task again) for lists
    /// and pages to show. Only a store that cannot answer ends the tick.
    pub async fn tick_schedules(&self) -> Result<Vec<(TaskId, Reply)>> {
        let now = self.now();
        let mut made = Vec::new();
        for rec in self.schedules().await? {
            let Some(schedule) = &rec.schedule else {
                continue;
            };
            if rec.state.is_terminal() {
                continue;
            }
            let Some((task, spec)) = schedule.due(&rec.task, rec.created_at, now) else {
                continue;
            };
            let failure = match self.add(&task, spec).await {
                Ok(r @ Reply::Committed(_)) => {
                    made.push((task.clone(), r));
                    None
                }
                Ok(Reply::Acknowledged(_)) => None,
                Ok(Reply::Refused(refusal)) => Some(format!("its task was refused: {refusal}")),
                Err(e) if e.kind == crate::error::ErrorKind::Invalid => Some(e.to_string()),
                Err(e) => return Err(e),
            };
            let failure = failure.map(|error| crate::graph::ScheduleFailure {
                task: task.clone(),
                error,
                since: now,
            });
            let kept = rec.schedule_failure.as_ref().map(|f| &f.error);
            if kept != failure.as_ref().map(|f| &f.error) {
                match self
                    .send(&rec.task, Request::ScheduleTicked { failure })
                    .await
                {
                    // A worker's scheduler (a server's token) may make the
                    // tasks but not keep the failure: the server's own beat,
                    // or an operator's tick, keeps it. It stops nothing.
                    Err(e) if e.kind == crate::error::ErrorKind::NotPermitted => {}
                    r => {
                        r?;
                    }
                }
            }
        }
        Ok(made)
    }

    /// Sets concurrency key `key`'s limit (`None`: none): at most `limit`
    /// tasks added with that key hold live grants at once, decided with
    /// each grant. A lower limit ends no grant; it holds new ones back
    /// until enough end. An operator's.
    pub async fn set_limit(
        &self,
        key: &Id,
        limit: Option<u32>,
        by: crate::model::Actor,
    ) -> Result<Reply> {
        let task = crate::graph::key_record_id(key)?;
        self.send(&task, Request::Limit { by, limit }).await
    }

    /// Concurrency key `key` as read now, if any task was ever granted
    /// under it or a limit set: its limit, live holders (each by its own
    /// record) and parked tasks.
    pub async fn key_status(&self, key: &Id) -> Result<Option<KeyStatus>> {
        let now = self.now();
        let task = crate::graph::key_record_id(key)?;
        let Some(snap) = self.store.read(&task, now).await? else {
            return Ok(None);
        };
        let Some(k) = snap.record.key_limit else {
            return Ok(None);
        };
        let mut holders = Vec::new();
        for t in &k.holders {
            if let Some(s) = self.store.read(t, now).await? {
                let r = crate::decide::derive(&s.record, s.judged, now);
                if r.state.is_held() {
                    holders.push(crate::graph::KeyHolder {
                        task: t.clone(),
                        fence: r.current_fence(),
                    });
                }
            }
        }
        Ok(Some(KeyStatus {
            key: key.clone(),
            limit: k.limit,
            holders,
            parked: k.parked,
        }))
    }

    /// Every concurrency key's status (`key:` records, in key order, at
    /// most [`GRAPH_READ_LIMIT`]).
    pub async fn keys(&self) -> Result<Vec<KeyStatus>> {
        let names: Vec<Id> = self
            .with_prefix(crate::graph::KEY_PREFIX)
            .await?
            .iter()
            .filter(|r| r.key_limit.is_some())
            .filter_map(|r| crate::graph::key_of_record(&r.task))
            .collect();
        let mut out = Vec::new();
        for k in names {
            if let Some(s) = self.key_status(&k).await? {
                out.push(s);
            }
        }
        Ok(out)
    }

    /// Sets queue `queue`'s policy: the retry policy a task added to the
    /// queue without its own takes (`None`: none). Fixed into each task
    /// when it is added; an operator's.
    pub async fn set_queue_policy(
        &self,
        queue: &Id,
        retry: Option<crate::graph::RetryPolicy>,
        by: crate::model::Actor,
    ) -> Result<Reply> {
        let task = crate::graph::queue_record_id(queue)?;
        self.send(&task, Request::QueuePolicy { by, retry }).await
    }

    /// Pauses queue `queue` (`paused`), or resumes it: while it is paused
    /// `next` passes over its tasks (a claim naming one still takes it;
    /// an attempt in flight runs on). An operator's.
    pub async fn pause_queue(
        &self,
        queue: &Id,
        paused: bool,
        by: crate::model::Actor,
    ) -> Result<Reply> {
        let task = crate::graph::queue_record_id(queue)?;
        self.send(&task, Request::QueuePause { by, paused }).await
    }

    /// Keeps `notes` (refusals a server answered) in the store's refusal
    /// log, which holds the newest [`crate::refusal::RefusalNote::KEPT`].
    pub async fn note_refusals(&self, notes: Vec<crate::refusal::RefusalNote>) -> Result<Reply> {
        self.send(
            &crate::refusal::refusals_record_id(),
            Request::NoteRefusals { notes },
        )
        .await
    }

    /// The refusal log, oldest first (empty before the first note).
    pub async fn refusals(&self) -> Result<Vec<crate::refusal::RefusalNote>> {
        Ok(self
            .store
            .read(&crate::refusal::refusals_record_id(), self.now())
            .await?
            .and_then(|s| s.record.refusal_log)
            .unwrap_or_default())
    }

    /// Every queue's policy that was ever set (`queue:` records, in queue
    /// order, at most [`GRAPH_READ_LIMIT`]).
    pub async fn queue_policies(&self) -> Result<Vec<(Id, crate::graph::QueuePolicy)>> {
        Ok(self
            .with_prefix(crate::graph::QUEUE_PREFIX)
            .await?
            .into_iter()
            .filter_map(|r| Some((crate::graph::queue_of_record(&r.task)?, r.queue_policy?)))
            .collect())
    }

    /// Queue `queue`'s policy, if one was ever set.
    pub async fn queue_policy(&self, queue: &Id) -> Result<Option<crate::graph::QueuePolicy>> {
        let task = crate::graph::queue_record_id(queue)?;
        Ok(self
            .store
            .read(&task, self.now())
            .await?
            .and_then(|s| s.record.queue_policy))
    }

    /// Adds a bare task to the work graph in REGISTERED (see [`crate::graph`]).
    /// An unknown dependency is bad input; the same definition again is an
    /// acknowledgement, another one `manifest_conflict`.
    pub async fn add(&self, task: &TaskId, spec: NodeSpec) -> Result<Reply> {
        self.send(task, Request::Add { node: spec }).await
    }

    /// Adds a whole graph in one commit (where the store can): ordered so
    /// each node follows the ones it depends on; a cycle, an unknown
    /// dependency, or any node refused (an existing task defined
    /// differently) adds nothing.
    pub async fn add_graph(
        &self,
        nodes: Vec<NewNode>,
    ) -> Result<std::result::Result<Added, (TaskId, Refusal)>> {
        let inside: BTreeSet<TaskId> = nodes.iter().map(|n| n.task.clone()).collect();
        let outside: BTreeSet<TaskId> = nodes
            .iter()
            .flat_map(|n| n.spec.depends_on.iter())
            .filter(|d| !inside.contains(*d))
            .cloned()
            .collect();
        let now = self.now();
        let mut known = BTreeSet::new();
        for d in outside {
            if self.store.read(&d, now).await?.is_some() {
                known.insert(d);
            }
        }
        let ops = self.adds(nodes, &known, now)?;
        for op in &ops {
            op.request.validate()?;
        }
        let decisions = self.store.apply_all(ops.clone()).await?;
        let mut added = Added {
            added: 0,
            repeated: 0,
        };
        for (op, d) in ops.iter().zip(decisions) {
            match reply(d)? {
                Reply::Committed(_) => added.added += 1,
                Reply::Acknowledged(_) => added.repeated += 1,
                Reply::Refused(r) => return Ok(Err((op.task.clone(), r))),
            }
        }
        Ok(Ok(added))
    }

    /// The adds of `nodes` in dependency order (each after the nodes it
    /// depends on; `known` the tasks outside them that exist), at `now`.
    fn adds(
        &self,
        nodes: Vec<NewNode>,
        known: &BTreeSet<TaskId>,
        now: crate::time::Timestamp,
    ) -> Result<Vec<Operation>> {
        Ok(plan(nodes, |t| known.contains(t))?
            .into_iter()
            .map(|n| Operation {
                task: n.task,
                request: Request::Add { node: n.spec },
                pre: Preconditions::none(),
                now,
                clock: self.commit_clock(),
            })
            .collect())
    }

    /// Records a step of the holder's attempt (`step.fence`) on `task`,
    /// with the tasks it spawns added in the same commit: all of it or
    /// nothing, so a crash between the two never adds them twice or loses
    /// them, and a superseded attempt's step adds nothing. The reply is the
    /// checkpoint's (an acknowledgement when the same step was recorded
    /// with the same output and tasks); `Err((task, refusal))` names an
    /// added task that was refused (one of that id exists as another
    /// task), and then nothing was recorded.
    pub async fn checkpoint(
        &self,
        task: &TaskId,
        step: Step,
    ) -> Result<std::result::Result<Reply, (TaskId, Refusal)>> {
        let spawned: Vec<TaskId> = step.spawn.iter().map(|n| n.task.clone()).collect();
        let request = Request::Checkpoint {
            owner: step.owner,
            fence: step.fence,
            step: step.step,
            output: step.output,
            spawned,
            wait: step.wait,
        };
        if step.spawn.is_empty() {
            return self
                .submit(task, request, Preconditions::none())
                .await
                .map(Ok);
        }
        request.validate()?;
        let inside: BTreeSet<TaskId> = step.spawn.iter().map(|n| n.task.clone()).collect();
        let now = self.now();
        let mut known = BTreeSet::new();
        for d in step
            .spawn
            .iter()
            .flat_map(|n| n.spec.depends_on.iter())
            .filter(|d| !inside.contains(*d))
            .collect::<BTreeSet<_>>()
        {
            if d == task || self.store.read(d, now).await?.is_some() {
                known.insert(d.clone());
            }
        }
        let mut ops = self.adds(step.spawn, &known, now)?;
        ops.push(Operation {
            task: task.clone(),
            request,
            pre: Preconditions::none(),
            now,
            clock: self.commit_clock(),
        });
        let ops = match &self.permits {
            Some(p) => ops
                .into_iter()
                .map(|op| p.admit(op))
                .collect::<Result<Vec<_>>>()?,
            None => ops,
        };
        for op in &ops {
            op.request.validate()?;
        }
        let mut decisions = self.store.apply_all(ops.clone()).await?;
        // The step's own answer first: a stale fence refuses the whole.
        if decisions.len() == ops.len()
            && let Some(last) = decisions.pop()
        {
            let answer = reply(last)?;
            if answer.is_refused() {
                return Ok(Ok(answer));
            }
            for (op, d) in ops.iter().zip(decisions) {
                if let Reply::Refused(r) = reply(d)? {
                    return Ok(Err((op.task.clone(), r)));
                }
            }
            return Ok(Ok(answer));
        }
        for (op, d) in ops.iter().zip(decisions) {
            if let Reply::Refused(r) = reply(d)? {
                return Ok(Err((op.task.clone(), r)));
            }
        }
        Err(Error::corrupt(format!(
            "{task}: the store answered a checkpoint's commit without the checkpoint's decision"
        )))
    }

    /// Grants the ready bare task of `queues` with the highest priority,
    /// then the earliest ready time, then the smallest id. Nothing ready:
    /// `none_ready`, or `drained` when nothing in the queues can become
    /// ready without an operator.
    pub async fn next(
        &self,
        owner: &OwnerId,
        queues: &[Id],
        ttl_ms: Option<u64>,
        lock_delay_ms: Option<u64>,
    ) -> Result<Reply> {
        let taker = Taker::Owner {
            owner: owner.clone(),
            ttl_ms,
            lock_delay_ms,
        };
        self.next_for(taker, queues).await
    }

    /// [`Authority::next`] for declared tasks: claims the ready one for the
    /// run registered for it, as `executor`.
    pub async fn task_next(
        &self,
        executor: &Id,
        queues: &[Id],
        ttl_ms: Option<u64>,
    ) -> Result<Reply> {
        let taker = Taker::Executor {
            executor: executor.clone(),
            ttl_ms,
        };
        self.next_for(taker, queues).await
    }

    /// The query a `next` by `taker` on `queues` makes now (the default
    /// queue when none is named).
    pub fn next_query(&self, taker: Taker, queues: &[Id]) -> Result<NextQuery> {
        let mut queues: Vec<Id> = queues.to_vec();
        if queues.is_empty() {
            queues.push(Id::parse("queue", crate::graph::DEFAULT_QUEUE)?);
        }
        queues.sort();
        queues.dedup();
        let check = match &taker {
            Taker::Owner {
                owner,
                ttl_ms,
                lock_delay_ms,
            } => Request::Claim {
                owner: owner.clone(),
                ttl_ms: *ttl_ms,
                lock_delay_ms: *lock_delay_ms,
            },
            Taker::Executor { executor, ttl_ms } => Request::TaskClaim {
                run_id: executor.clone(),
                executor: executor.clone(),
                ttl_ms: *ttl_ms,
            },
        };
        check.validate()?;
        Ok(NextQuery {
            taker,
            queues,
            now: self.now(),
            clock: self.commit_clock(),
            count: 1,
            within: None,
        })
    }

    /// `next` or `task next`, by who takes.
    pub async fn next_for(&self, taker: Taker, queues: &[Id]) -> Result<Reply> {
        let mut replies = self.next_many_for(taker, queues, 1).await?;
        replies
            .pop()
            .ok_or_else(|| Error::unavailable("a `next` came to no answer"))
    }

    /// Up to `count` grants of the ready tasks of `queues` (1 to
    /// [`crate::graph::MAX_NEXT_COUNT`]), in the order that many `next`s
    /// one after another would make them, in one commit where the store
    /// can (`next --count`). Nothing ready: one refusal, as `next`'s.
    pub async fn next_many_for(
        &self,
        taker: Taker,
        queues: &[Id],
        count: u32,
    ) -> Result<Vec<Reply>> {
        if !(1..=crate::graph::MAX_NEXT_COUNT).contains(&count) {
            return Err(Error::invalid(
                "count",
                format!(
                    "must be from 1 to {} (got {count})",
                    crate::graph::MAX_NEXT_COUNT
                ),
            ));
        }
        let mut query = self.next_query(taker, queues)?;
        query.count = count;
        let granted = if count == 1 {
            self.store.next(&query).await?.into_iter().collect()
        } else {
            self.store.next_many(&query).await?
        };
        if !granted.is_empty() {
            return granted.into_iter().map(reply).collect();
        }
        let mut census = match self.census_from_counts(&query).await? {
            Some(c) => c,
            None => self.census(&query).await?,
        };
        for q in &query.queues {
            if self
                .queue_policy(q)
                .await?
                .is_some_and(|p| p.paused_at.is_some())
            {
                census.paused += 1;
            }
        }
        Ok(vec![Reply::Refused(if census.drained() {
            Refusal::Drained { census }
        } else {
            Refusal::NoneReady { census }
        })])
    }

    /// The census of queues the store's counts show empty of every task
    /// `next` could ever take (none DECLARED, REGISTERED, CLAIMED or
    /// RUNNING): all zeros, drained, read without a task. `None` when the
    /// store keeps no counts or the queues hold such a task (then
    /// [`Authority::census`] tells where each stands). The idle worker's
    /// poll of an empty queue costs one read of the counts, however many
    /// tasks other queues hold.
    pub async fn census_from_counts(&self, query: &NextQuery) -> Result<Option<Census>> {
        let Some(counts) = self.store.counts().await? else {
            return Ok(None);
        };
        let live = [
            State::Declared,
            State::Registered,
            State::Claimed,
            State::Running,
        ];
        let any = counts.iter().any(|c| {
            c.n > 0 && live.contains(&c.state) && query.queues.iter().any(|q| q.as_str() == c.queue)
        });
        Ok((!any).then(Census::default))
    }

    /// Counts the tasks `query` could take, by where they stand (at most
    /// [`GRAPH_READ_LIMIT`] records are looked at; past that the counts are
    /// a lower bound and never `drained`).
    pub async fn census(&self, query: &NextQuery) -> Result<Census> {
        let clauses = [
            State::Declared,
            State::Registered,
            State::Claimed,
            State::Running,
        ]
        .into_iter()
        .map(|state| Clause {
            state,
            due: Due::Any,
        })
        .collect();
        let records = self.scan(Some(clauses)).await?;
        let full = records.len() >= GRAPH_READ_LIMIT;
        let mut cache = BTreeMap::new();
        let mut read = Vec::with_capacity(records.len());
        for r in records {
            let up = self.upstream(&r, &mut cache).await?;
            read.push((r, up));
        }
        let mut census = Census::of(query, &read);
        if full {
            census.queued = census.queued.max(1);
        }
        Ok(census)
    }

    /// Every waiting task (REGISTERED or DECLARED, as derived now) with
    /// where it stands ([`crate::next::standing`]: ready, waiting,
    /// retrying or blocked at any depth; ready in a paused queue is
    /// paused), reading at most `limit` of them;
    /// `None` when more wait than that (the store's counts still say how
    /// many). What the status page shows by queue.
    pub async fn standings(
        &self,
        limit: usize,
    ) -> Result<Option<Vec<(TaskRecord, crate::next::Standing)>>> {
        let clauses = [State::Declared, State::Registered]
            .into_iter()
            .flat_map(Clause::for_derived)
            .collect();
        let records: Vec<TaskRecord> = self
            .scan_upto(Some(clauses), limit.saturating_add(1))
            .await?
            .into_iter()
            .filter(|r| {
                matches!(r.state, State::Declared | State::Registered) && r.census_queue().is_some()
            })
            .collect();
        if records.len() > limit {
            return Ok(None);
        }
        let mut cache = BTreeMap::new();
        let mut read = Vec::with_capacity(records.len());
        for r in records {
            let up = self.upstream(&r, &mut cache).await?;
            read.push((r, up));
        }
        let stuck = crate::next::stuck(&read);
        let now = self.now();
        let paused: std::collections::BTreeSet<Id> = self
            .queue_policies()
            .await?
            .into_iter()
            .filter(|(_, p)| p.paused_at.is_some())
            .map(|(q, _)| q)
            .collect();
        Ok(Some(
            read.into_iter()
                .filter_map(|(r, up)| {
                    let s = crate::next::standing(&r, &up, stuck.contains(&r.task), now)?;
                    let in_paused = r
                        .node
                        .as_ref()
                        .is_some_and(|n| paused.contains(&n.spec.queue));
                    Some((r, s.in_queue(in_paused)))
                })
                .collect(),
        ))
    }

    /// Where `record`'s dependencies stand now. Waiting behind a task that
    /// is itself blocked, at any depth, is blocked (as in [`Self::graph`]
    /// and the census): the walk up reads at most [`GRAPH_READ_LIMIT`]
    /// records, and past that answers waiting.
    pub async fn readiness(&self, record: &TaskRecord) -> Result<Readiness> {
        let now = self.now();
        let mut cache = BTreeMap::new();
        let up = self.upstream(record, &mut cache).await?;
        let direct = up.readiness(record.depends_on());
        let Readiness::Waiting { on } = &direct else {
            return Ok(direct);
        };
        let mut seen = std::collections::BTreeSet::new();
        for first in on {
            let mut todo = vec![first.clone()];
            while let Some(t) = todo.pop() {
                if !seen.insert(t.clone()) || seen.len() > GRAPH_READ_LIMIT {
                    continue;
                }
                let Some(snap) = self.store.read(&t, now).await? else {
                    continue;
                };
                let r = crate::decide::derive(&snap.record, snap.judged, now);
                if !matches!(r.state, State::Registered | State::Declared) {
                    continue;
                }
                let above = self.upstream(&r, &mut cache).await?;
                match above.readiness(r.depends_on()) {
                    Readiness::Blocked { .. } | Readiness::Unknown { .. } => {
                        return Ok(Readiness::Blocked {
                            upstream: first.clone(),
                            state: cache
                                .get(first)
                                .copied()
                                .flatten()
                                .unwrap_or(State::Registered),
                        });
                    }
                    Readiness::Waiting { on } => todo.extend(on),
                    Readiness::Ready => {}
                }
            }
        }
        Ok(direct)
    }

    /// The graph: every task with a place in it (at most
    /// [`GRAPH_READ_LIMIT`]), with state, readiness, holder and edges.
    pub async fn graph(&self) -> Result<Vec<GraphNode>> {
        let now = self.now();
        let records = self.scan(None).await?;
        let mut cache = BTreeMap::new();
        let mut read = Vec::with_capacity(records.len());
        for r in records {
            let up = match (&r.node, r.state) {
                (Some(_), State::Registered | State::Declared) => {
                    Some(self.upstream(&r, &mut cache).await?)
                }
                _ => None,
            };
            read.push((r, up));
        }
        // Waiting behind a task that is itself blocked, at any depth, is
        // blocked too (the census's rule).
        let waiting: Vec<(TaskRecord, Upstream)> = read
            .iter()
            .filter_map(|(r, up)| up.clone().map(|up| (r.clone(), up)))
            .collect();
        let stuck = crate::next::stuck(&waiting);
        let mut out = Vec::new();
        for (r, up) in read {
            let Some(node) = r.node.clone() else {
                continue;
            };
            let readiness = match (r.state, up) {
                (State::Registered, Some(up)) => Some(match up.readiness(&node.spec.depends_on) {
                    Readiness::Waiting { on } if stuck.contains(&r.task) => {
                        match on.iter().find(|d| stuck.contains(*d)) {
                            Some(d) => Readiness::Blocked {
                                upstream: d.clone(),
                                state: cache.get(d).copied().flatten().unwrap_or(State::Registered),
                            },
                            None => Readiness::Waiting { on },
                        }
                    }
                    // Put off to a start that has not come: not ready yet.
                    Readiness::Ready if node.not_before.is_some_and(|t| t > now) => {
                        Readiness::Waiting { on: Vec::new() }
                    }
                    other => other,
                }),
                _ => None,
            };
            let holder = r
                .state
                .is_held()
                .then(|| Grant::of(&r).map(|g| g.owner))
                .flatten();
            out.push(GraphNode {
                task: r.task.clone(),
                state: r.state,
                queue: node.spec.queue,
                priority: node.spec.priority,
                depends_on: node.spec.depends_on,
                readiness,
                holder,
            });
        }
        Ok(out)
    }

    /// Claimable graph tasks that are ready, or blocked, in `queue` if
    /// given, in task-id order.
    pub async fn list_graph(
        &self,
        state: GraphState,
        queue: Option<&Id>,
        limit: usize,
    ) -> Result<Vec<GraphNode>> {
        let limit = limit.clamp(1, crate::authority::MAX_PAGE);
        let nodes = self.graph().await?;
        Ok(nodes
            .into_iter()
            .filter(|n| queue.is_none_or(|q| &n.queue == q))
            .filter(|n| match state {
                GraphState::Ready => n.shown_state() == "READY",
                GraphState::Blocked => n.shown_state() == "BLOCKED",
            })
            .take(limit)
            .collect())
    }

    /// Derived records matching `clauses` (all when `None`), in id order.
    async fn scan(&self, clauses: Option<Vec<Clause>>) -> Result<Vec<TaskRecord>> {
        self.scan_upto(clauses, GRAPH_READ_LIMIT).await
    }

    /// As [`Self::scan`], stopping once `limit` records are read.
    async fn scan_upto(
        &self,
        clauses: Option<Vec<Clause>>,
        limit: usize,
    ) -> Result<Vec<TaskRecord>> {
        let now = self.now();
        let mut out = Vec::new();
        let mut cursor: Option<TaskId> = None;
        loop {
            let query = ListQuery {
                after: cursor.clone(),
                limit: 1000,
                clauses: clauses.clone(),
                now,
            };
            let batch = self.store.list(&query).await?;
            let exhausted = batch.len() < 1000;
            for snap in batch {
                cursor = Some(snap.record.task.clone());
                out.push(crate::decide::derive(&snap.record, snap.judged, now));
            }
            if exhausted || out.len() >= limit {
                return Ok(out);
            }
        }
    }

    async fn upstream(
        &self,
        record: &TaskRecord,
        cache: &mut BTreeMap<TaskId, Option<State>>,
    ) -> Result<Upstream> {
        let now = self.now();
        let mut states = Vec::new();
        for d in record.depends_on() {
            let state = match cache.get(d) {
                Some(s) => *s,
                None => {
                    let s = self
                        .store
                        .read(d, now)
                        .await?
                        .map(|s| crate::decide::derive(&s.record, s.judged, now).state);
                    cache.insert(d.clone(), s);
                    s
                }
            };
            states.push((d.clone(), state));
        }
        Ok(Upstream::of_states(states))
    }
}

/// A step the holder of a task records ([`Authority::checkpoint`]).
#[derive(Debug, Clone)]
pub struct Step {
    pub owner: OwnerId,
    pub fence: u64,
    pub step: Id,
    /// Any JSON value, at most [`crate::request::MAX_CHECKPOINT_BYTES`].
    pub output: serde_json::Value,
    /// The tasks to add with it, in the same commit.
    pub spawn: Vec<NewNode>,
    /// Whether the task waits for them: it depends on each, and is granted
    /// again once they have all succeeded.
    pub wait: bool,
}

/// The largest graph file read, in bytes.
pub const MAX_GRAPH_BYTES: u64 = 64 * 1024 * 1024;

/// Parses a graph file: a JSON object `{"nodes": [{"task": ID, "queue": Q,
/// "priority": N, "after": [ID...]}...]}` or a bare list of such nodes.
pub fn parse_graph(text: &str) -> Result<Vec<NewNode>> {
    let value = crate::json::parse_strict("graph", text)?;
    let list = match &value {
        serde_json::Value::Array(a) => a,
        serde_json::Value::Object(o) => match o.get("nodes") {
            Some(serde_json::Value::Array(a)) if o.len() == 1 => a,
            _ => {
                return Err(Error::invalid(
                    "graph",
                    "must be a list of nodes or an object with one field, \"nodes\"",
                ));
            }
        },
        _ => return Err(Error::invalid("graph", "must be a JSON list or object")),
    };
    list.iter()
        .enumerate()
        .map(|(i, v)| {
            parse_node(v).map_err(|mut e| {
                e.message = format!("nodes[{i}]: {}", e.message);
                e
            })
        })
        .collect()
}

fn parse_node(v: &serde_json::Value) -> Result<NewNode> {
    const FIELDS: &[&str] = &[
        "task",
        "queue",
        "priority",
        "after",
        "timeout",
        "not_before",
        "retry",
        "key",
        "traceparent",
    ];
    let o = v
        .as_object()
        .ok_or_else(|| Error::invalid("node", "must be an object"))?;
    if let Some(k) = o.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(Error::invalid(
            k.as_str(),
            format!("unknown node field (known: {})", FIELDS.join(", ")),
        ));
    }
    let task = match o.get("task") {
        Some(serde_json::Value::String(s)) => Id::parse("task", s)?,
        _ => return Err(Error::invalid("task", "is required (a task id)")),
    };
    let queue = match o.get("queue") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(Id::parse("queue", s)?),
        Some(_) => return Err(Error::invalid("queue", "must be a string")),
    };
    let priority = match o.get("priority") {
        None | Some(serde_json::Value::Null) => 0,
        Some(p) => p
            .as_i64()
            .ok_or_else(|| Error::invalid("priority", "must be a whole number"))?,
    };
    let after = match o.get("after") {
        None | Some(serde_json::Value::Null) => Vec::new(),
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .map(|d| match d {
                serde_json::Value::String(s) => Id::parse("after", s),
                _ => Err(Error::invalid("after", "entries must be task ids")),
            })
            .collect::<Result<Vec<_>>>()?,
        Some(_) => return Err(Error::invalid("after", "must be a list of task ids")),
    };
    let timeout = match o.get("timeout") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(crate::catalogue::duration_ms(
            crate::catalogue::Kind::Ttl,
            "timeout",
            s,
        )?),
        Some(_) => {
            return Err(Error::invalid(
                "timeout",
                format!("must be a duration, {}", crate::time::DURATION_FORMS),
            ));
        }
    };
    let start = match o.get("not_before") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(crate::graph::Start::parse("not_before", s)?),
        Some(_) => {
            return Err(Error::invalid(
                "not_before",
                "must be an RFC 3339 time or a duration such as \"10m\"",
            ));
        }
    };
    let retry = crate::graph::parse_retry(o.get("retry"))?;
    let traceparent = match o.get("traceparent") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(Error::invalid("traceparent", "must be a string")),
    };
    let key = match o.get("key") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(Id::parse("key", s)?),
        Some(_) => return Err(Error::invalid("key", "must be a string")),
    };
    let spec = NodeSpec::new(&task, queue, priority, after)?
        .with_timeout(timeout)?
        .with_start(start)?
        .with_retry(retry)?
        .with_key(key)?
        .with_traceparent(traceparent)?;
    Ok(NewNode { task, spec })
}

/// The record id of the schedule `name`.
pub fn schedule_id(name: &str) -> Result<TaskId> {
    let name = name
        .strip_prefix(crate::graph::SCHEDULE_PREFIX)
        .unwrap_or(name);
    if name.is_empty() {
        return Err(Error::invalid("name", "must not be empty"));
    }
    // Each period's task is `NAME@START`, and must be an id too.
    let longest =
        crate::id::MAX_ID_BYTES - "@".len() - crate::time::Timestamp::MAX.to_string().len();
    if name.len() > longest {
        return Err(Error::invalid(
            "name",
            format!(
                "must be at most {longest} bytes, so that each period's task NAME@START is an id (got {})",
                name.len()
            ),
        ));
    }
    TaskId::parse("name", &format!("{}{name}", crate::graph::SCHEDULE_PREFIX))
}
