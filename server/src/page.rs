//! The status page: one HTML document with no external assets that
//! polls `/v1/status` (counts by state, per-queue depth, failures with
//! their error, live and recently expired leases, grants and failures per
//! minute, recent refusals and events) and shows a task's own page (its
//! record, fence history, evidence and events) from the task API. Its
//! actions (retry, cancel, finalize; each confirmed by a second click)
//! are the task API's operator requests, so a server with tokens takes
//! them only with an operator's token. Every input is bounded.

use crate::app::{Handled, Shared, json};
use axum::Router;
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use baton_core::next::Standing;
use baton_core::{Error, State as TaskState};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The most live leases and events the page shows.
const SHOWN: usize = 200;

pub(crate) fn routes() -> Router<Shared> {
    Router::new()
        .route("/", get(index))
        .route("/v1/status", get(status))
}

/// The page itself: static but for whether the server has tokens (then
/// every action is recorded as the token's name, and the page hides its
/// "Operator" box), so it is served without a token; the data it fetches
/// needs one when the server has tokens.
async fn index(State(app): State<Shared>) -> Response {
    let tokens = if app.tokens.is_some() { "yes" } else { "no" };
    (
        [
            (header::CACHE_CONTROL, "no-store"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'; form-action 'none'",
            ),
            (header::X_FRAME_OPTIONS, "DENY"),
        ],
        Html(PAGE.replacen("data-tokens=\"no\"", &format!("data-tokens=\"{tokens}\""), 1)),
    )
        .into_response()
}

/// A lease the page lists: live, or ended unreleased within
/// [`RECENTLY_EXPIRED_MS`] (`left_ms` below zero).
#[derive(Debug, Serialize)]
pub(crate) struct Lease {
    task: String,
    owner: String,
    fence: u64,
    state: TaskState,
    expires_at: baton_core::Timestamp,
    left_ms: i64,
    live: bool,
    /// An operator asked its holder to stop: it ends when the holder gives
    /// it back or the lease ends.
    cancel_requested: Option<baton_core::model::CancelRequest>,
}

/// How long after its end an unreleased lease is still listed.
const RECENTLY_EXPIRED_MS: i64 = 15 * 60 * 1000;

/// A task that ended without success (or waits to be tried again after a
/// failure): what failed, how often, and when.
#[derive(Debug, Serialize)]
pub(crate) struct Failure {
    task: String,
    state: TaskState,
    attempt: u64,
    iteration: u64,
    error: Option<serde_json::Value>,
    at: baton_core::Timestamp,
    queue: Option<String>,
    /// The retry it waits for, if it is to be tried again.
    retry: Option<baton_core::model::RetryWait>,
}

/// One queue's tasks by state, and how long its oldest waiting task has
/// waited and where its waiting tasks stand (ready, waiting, retrying,
/// blocked: known while no more than [`READ_BOUND`] tasks wait in all).
#[derive(Debug, Default, Serialize)]
pub(crate) struct QueueDepth {
    pub counts: std::collections::BTreeMap<String, u64>,
    pub oldest_waiting: Option<baton_core::Timestamp>,
    pub standing: Option<std::collections::BTreeMap<&'static str, u64>>,
}

#[derive(Debug, Default)]
pub(crate) struct Census {
    pub counts: Vec<(TaskState, u64)>,
    /// By queue (tasks outside the work graph under ""), then by state.
    pub queues: std::collections::BTreeMap<String, QueueDepth>,
    pub leases: Vec<Lease>,
    pub failures: Vec<Failure>,
    pub truncated: bool,
    /// The waiting tasks by where they stand (READY, WAITING, RETRYING,
    /// BLOCKED), while no more than [`READ_BOUND`] wait.
    pub standing: Option<std::collections::BTreeMap<&'static str, u64>>,
}

/// The most records of one kind the page reads beside the counts: live
/// leases, and the waiting tasks whose age it shows (only while no more
/// wait than this).
const READ_BOUND: usize = 1000;

/// What the page shows of the tasks, without reading every task: the
/// counts the store keeps with its commits (with what changed by itself
/// since moved, [`baton_core::counts`]), the live leases (as many as are
/// held, at most [`READ_BOUND`]), and the expired leases and failures of
/// the newest events (`recent`), topped up from the failed states' index.
pub(crate) async fn census(app: &Shared, recent: &[baton_core::Event]) -> Result<Census, Error> {
    use baton_core::EventKind as K;
    let now = app.now();
    let counts = app.authority.counts().await?;
    let mut queues: std::collections::BTreeMap<String, QueueDepth> = counts
        .queues
        .iter()
        .map(|(q, states)| {
            let counts = states
                .iter()
                .map(|(s, n)| (s.as_str().to_owned(), *n))
                .collect();
            let depth = QueueDepth {
                counts,
                ..QueueDepth::default()
            };
            (q.clone(), depth)
        })
        .collect();
    let totals = counts.totals();
    let total = |s: TaskState| totals.iter().find(|(t, _)| *t == s).map_or(0, |(_, n)| *n);
    let waiting = total(TaskState::Registered) + total(TaskState::Declared);
    let mut standings: Option<std::collections::BTreeMap<&'static str, u64>> = None;
    if usize::try_from(waiting).is_ok_and(|w| w <= READ_BOUND)
        && let Some(waiting) = app.authority.standings(READ_BOUND).await?
    {
        let zero = || Standing::ALL.iter().map(|s| (s.as_str(), 0)).collect();
        let all = standings.get_or_insert_with(zero);
        for depth in queues.values_mut() {
            depth.standing = Some(zero());
        }
        for (r, standing) in waiting {
            *all.entry(standing.as_str()).or_default() += 1;
            let Some(depth) = r.census_queue().and_then(|q| queues.get_mut(q)) else {
                continue;
            };
            if let Some(by) = depth.standing.as_mut() {
                *by.entry(standing.as_str()).or_default() += 1;
            }
            let since = r.deadline_from.unwrap_or(r.created_at);
            depth.oldest_waiting = Some(depth.oldest_waiting.map_or(since, |o| o.min(since)));
        }
    }
    let mut leases = Vec::new();
    let mut listed = std::collections::BTreeSet::new();
    let mut lease_of = |r: &baton_core::TaskRecord, leases: &mut Vec<Lease>| {
        let left = |l: &baton_core::Lease| l.expires_at.as_millis() - now.as_millis();
        if let Some(l) = &r.lease
            && (r.state.is_held() || (l.expired && -left(l) < RECENTLY_EXPIRED_MS))
            && listed.insert(r.task.to_string())
        {
            leases.push(Lease {
                task: r.task.to_string(),
                owner: l.owner.to_string(),
                fence: l.fence,
                state: r.state,
                expires_at: l.expires_at,
                left_ms: left(l),
                live: r.state.is_held(),
                cancel_requested: r.cancel_requested.clone().filter(|_| r.state.is_held()),
            });
        }
    };
    for state in [TaskState::Claimed, TaskState::Running] {
        for r in app
            .authority
            .list(Some(state), None, READ_BOUND)
            .await?
            .items
        {
            lease_of(&r, &mut leases);
        }
    }
    // Expired and not yet swept: among the due records the counts read.
    for r in &counts.due {
        lease_of(r, &mut leases);
    }
    // Expired and swept, and the newest failures: the tasks the newest
    // events name, each read once, newest first.
    let mut failures = Vec::new();
    let mut read = std::collections::BTreeSet::new();
    for e in recent.iter().rev() {
        let expiry = matches!(e.kind, K::Stalled | K::TimedOut);
        let failure = expiry || matches!(e.kind, K::Failed | K::NotStarted | K::RetryScheduled);
        if !failure || read.len() >= 2 * SHOWN || !read.insert(e.task.clone()) {
            continue;
        }
        if let Some(r) = app.authority.get(&e.task).await? {
            lease_of(&r, &mut leases);
            push_failure(&r, &mut failures);
        }
    }
    // Older failures, while the page has room, from the failed states.
    for state in TaskState::ALL.into_iter().filter(|s| s.is_dead_letter()) {
        if failures.len() >= SHOWN {
            break;
        }
        for r in app.authority.list(Some(state), None, SHOWN).await?.items {
            if !read.contains(&r.task) {
                push_failure(&r, &mut failures);
            }
        }
    }
    // Live leases first, the nearest to ending first; then the ended,
    // the latest first. The newest failures first.
    leases.sort_by_key(|l| (!l.live, if l.live { l.left_ms } else { -l.left_ms }));
    leases.truncate(SHOWN);
    failures.sort_by_key(|f| std::cmp::Reverse(f.at));
    failures.truncate(SHOWN);
    Ok(Census {
        counts: totals,
        queues,
        leases,
        failures,
        truncated: counts.truncated,
        standing: standings,
    })
}

/// Adds `r` to the failures if it ended without success (or waits to be
/// tried again after a failure) and is not pruned.
fn push_failure(r: &baton_core::TaskRecord, failures: &mut Vec<Failure>) {
    let failed = matches!(
        r.state,
        TaskState::Failed | TaskState::Stalled | TaskState::NotStarted
    ) || (r.state == TaskState::Registered && r.error.is_some());
    if failed && r.pruned_at.is_none() {
        failures.push(Failure {
            task: r.task.to_string(),
            state: r.state,
            attempt: r.attempt,
            iteration: r.iteration,
            error: r.error.clone(),
            at: r.finished_at.unwrap_or(r.updated_at),
            queue: r.node.as_ref().map(|n| n.spec.queue.to_string()),
            retry: r.retry_wait(),
        });
    }
}

/// The sequence number of the newest event: found with a few indexed
/// reads, since the store offers events only after a cursor.
async fn newest_seq(app: &Shared) -> Result<u64, Error> {
    let has_after = |after: u64| async move {
        app.store
            .events(None, after, 1)
            .await
            .map(|e| !e.is_empty())
    };
    if !has_after(0).await? {
        return Ok(0);
    }
    // Invariant: an event after `lo`, none after `hi`.
    let (mut lo, mut hi) = (0u64, 1u64);
    while has_after(hi).await? {
        lo = hi;
        hi = hi.saturating_mul(2);
        if hi == u64::MAX {
            break;
        }
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if has_after(mid).await? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(hi)
}

#[derive(Deserialize)]
struct StatusQuery {
    events: Option<usize>,
}

/// `GET /v1/status`: what the page shows.
async fn status(
    State(app): State<Shared>,
    Query(q): Query<StatusQuery>,
    // Authenticated like every route but the page itself.
    _caller: crate::caller::AsCaller,
) -> Handled {
    let n = q.events.unwrap_or(30).clamp(1, SHOWN);
    let newest = newest_seq(&app).await?;
    let newest_events = recent_events(&app, newest).await?;
    let census = census(&app, &newest_events).await?;
    let events = app
        .store
        .events(None, newest.saturating_sub(n as u64), n)
        .await?;
    // The refusal log in the store (a server without a sweeper writes
    // what it answered now), with what could not be written yet; newest first.
    if app.sweeper.lock().is_ok_and(|s| s.is_none()) {
        app.save_refusals().await;
    }
    let mut recent = app.authority.refusals().await?;
    if let Ok(u) = app.unsaved.lock() {
        recent.extend(u.iter().cloned());
    }
    recent.reverse();
    recent.truncate(baton_core::refusal::RefusalNote::KEPT);
    let counts: serde_json::Map<String, serde_json::Value> = census
        .counts
        .iter()
        .map(|(s, n)| (s.as_str().to_owned(), json!(n)))
        .collect();
    let now = app.now();
    let activity = per_minute(&newest_events, newest, now);
    // Schedules whose last tick could not make their period's task.
    let failing: Vec<serde_json::Value> = app
        .authority
        .schedules()
        .await?
        .into_iter()
        .filter_map(|r| {
            let f = r.schedule_failure?;
            Some(json!({"schedule": r.task, "task": f.task, "error": f.error, "since": f.since}))
        })
        .collect();
    // The settings an operator runs the fleet by: schedules (with their
    // next run), key limits (holders, parked), queue policies; as their
    // reads answer them, at most SHOWN of each.
    let mut schedules = baton_core::call::Call::Schedules
        .run(&app.authority)
        .await?
        .items;
    schedules.truncate(SHOWN);
    let mut keys = baton_core::call::Call::Keys
        .run(&app.authority)
        .await?
        .items;
    keys.truncate(SHOWN);
    let policies: Vec<serde_json::Value> = app
        .authority
        .queue_policies()
        .await?
        .iter()
        .take(SHOWN)
        .map(|(q, p)| baton_core::call::queue_view(q, p))
        .collect();
    let deliveries = app
        .deliveries
        .lock()
        .ok()
        .filter(|d| !d.url.is_empty())
        .map(|d| d.view());
    json(&json!({
        "now": now,
        "deliveries": deliveries,
        "settings": {"schedules": schedules, "keys": keys, "queues": policies},
        "counts": counts,
        "queues": census.queues,
        "truncated": census.truncated,
        "standing": census.standing,
        "leases": census.leases,
        "failures": census.failures,
        "refusals": recent,
        "sweeper": app.sweeper.lock().ok().and_then(|s| s.clone()),
        "schedules_failing": failing,
        "events": events.iter().rev().collect::<Vec<_>>(),
        "per_minute": activity,
    }))
}

/// The most events read back for the per-minute chart.
const CHART_EVENTS: u64 = 5000;
/// The chart's span, in minutes.
const CHART_MINUTES: usize = 60;

/// The newest events, at most [`CHART_EVENTS`], oldest first.
async fn recent_events(app: &Shared, newest: u64) -> Result<Vec<baton_core::Event>, Error> {
    let mut after = newest.saturating_sub(CHART_EVENTS);
    let mut out = Vec::new();
    loop {
        let page = app
            .store
            .events(None, after, baton_core::authority::MAX_PAGE)
            .await?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        let whole = page.len() < baton_core::authority::MAX_PAGE;
        out.extend(page);
        if whole {
            break;
        }
    }
    Ok(out)
}

/// Grants and failures in each of the last hour's minutes (the oldest
/// first), from the newest events (`recent`: the events after
/// `newest - CHART_EVENTS`; the chart says whether that is all of them).
fn per_minute(
    recent: &[baton_core::Event],
    newest: u64,
    now: baton_core::Timestamp,
) -> serde_json::Value {
    use baton_core::EventKind as K;
    let mut grants = vec![0u64; CHART_MINUTES];
    let mut failures = vec![0u64; CHART_MINUTES];
    let complete_from = newest <= CHART_EVENTS;
    let minute = |at: baton_core::Timestamp| -> Option<usize> {
        let ago = (now.as_millis() - at.as_millis()) / 60_000;
        usize::try_from(ago)
            .ok()
            .filter(|a| *a < CHART_MINUTES)
            .map(|a| CHART_MINUTES - 1 - a)
    };
    for e in recent {
        let Some(m) = minute(e.at) else { continue };
        if matches!(e.kind, K::Claimed | K::Recovered) {
            grants[m] += 1;
        } else if e.kind.is_failure(&e.actor) {
            failures[m] += 1;
        }
    }
    json!({"grants": grants, "failures": failures, "whole": complete_from})
}

const PAGE: &str = r##"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>baton</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #1d232a; background: #fafbfc; }
  h1 { font-size: 1.3rem; margin: 0 0 .2rem; } h1 a { color: inherit; text-decoration: none; }
  h2 { font-size: 1rem; margin: 1.4rem 0 .4rem; }
  #meta, .muted { color: #5b6570; }
  .counts { display: flex; flex-wrap: wrap; gap: .5rem; }
  .count { background: #fff; border: 1px solid #d8dde3; border-radius: 6px; padding: .4rem .7rem; min-width: 6.5rem; }
  .count b { display: block; font-size: 1.3rem; }
  .count[data-standing] { border-style: dashed; }
  table { border-collapse: collapse; background: #fff; width: 100%; max-width: 80rem; }
  th, td { text-align: left; padding: .25rem .6rem; border-bottom: 1px solid #e6e9ed; font-variant-numeric: tabular-nums; vertical-align: top; }
  th { background: #f0f2f5; }
  .error summary { cursor: pointer; }
  div.error, pre { font-family: ui-monospace, monospace; font-size: 12px; white-space: pre-wrap; word-break: break-all; max-width: 40rem; }
  .empty { color: #8a939c; font-style: italic; }
  .bar { display: flex; flex-wrap: wrap; gap: .6rem; align-items: center; margin: .8rem 0; }
  #auth { display: none; }
  .err { color: #a3281b; } .ok { color: #1b6e2e; }
  button { font: inherit; padding: .1rem .5rem; cursor: pointer; }
  .paused { color: #a3281b; font-weight: 600; }
  button.confirm { background: #a3281b; color: #fff; border: 1px solid #7d1f15; }
  a.task { color: #0b57d0; cursor: pointer; display: inline-block; max-width: 22rem; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; vertical-align: bottom; }
  td.t { white-space: nowrap; }
  .expired { color: #a3281b; }
  svg { background: #fff; border: 1px solid #d8dde3; }
</style>
</head>
<body data-tokens="no">
<h1><a href="#">baton</a></h1>
<div id="meta">loading&hellip;</div>
<div id="sweeper"></div>
<div id="schedules-failing" class="err"></div>
<div class="bar">
  <form id="auth"><label>This server needs a token: <input id="token" type="password" autocomplete="off"></label> <button>Use</button></form>
  <label>Search <input id="search" type="search" placeholder="task, owner, error&hellip;"></label>
  <label>State <select id="state"><option value="">any</option></select></label>
  <span id="as-token" class="muted" hidden>actions are recorded as your token's name</span>
  <label id="operator-box">Operator <input id="operator" value="status-page" size="12" title="who the actions are recorded as (a server with tokens records the token's name)"></label>
  <span id="notice"></span>
</div>
<div id="list">
<h2>Tasks by state</h2>
<div class="counts" id="counts"></div>
<h2>Queues</h2>
<table><thead><tr><th>queue</th><th>waiting</th><th>ready</th><th>retrying</th><th>blocked</th><th>held</th><th>succeeded</th><th>failed</th><th>other</th><th>oldest waiting</th><th>actions</th></tr></thead><tbody id="queues"></tbody></table>
<h2>Failures</h2>
<table><thead><tr><th>task</th><th>state</th><th>attempt</th><th>error</th><th>when</th><th>actions</th></tr></thead><tbody id="failures"></tbody></table>
<h2>Leases: live, and recently expired</h2>
<table><thead><tr><th>task</th><th>owner</th><th>fence</th><th>state</th><th>time left</th><th>actions</th></tr></thead><tbody id="leases"></tbody></table>
<h2>Grants and failures per minute, the last hour</h2>
<div id="chart"></div>
<h2>Schedules</h2>
<table><thead><tr><th>schedule</th><th>period</th><th>queue</th><th>next run</th><th>state</th><th>failure</th></tr></thead><tbody id="schedules"></tbody></table>
<h2>Key limits</h2>
<table><thead><tr><th>key</th><th>limit</th><th>holders</th><th>parked</th></tr></thead><tbody id="keys"></tbody></table>
<div id="deliveries-box" hidden><h2>Webhook deliveries</h2>
<p id="deliveries"></p>
<table><thead><tr><th>task</th><th>seq</th><th>event</th><th>tries</th><th>error</th><th>when</th></tr></thead><tbody id="deliveries-dead"></tbody></table></div>
<h2>Queue policies</h2>
<table><thead><tr><th>queue</th><th>retry</th><th>paused</th></tr></thead><tbody id="policies"></tbody></table>
<h2>Recent refusals <span class="muted">(the newest 50, kept in the store)</span></h2>
<table><thead><tr><th>task</th><th>request</th><th>reason</th><th>message</th></tr></thead><tbody id="refusals"></tbody></table>
<h2>Recent events</h2>
<table><thead><tr><th>seq</th><th>task</th><th>event</th><th>actor</th><th>fence</th><th>details</th><th>at</th></tr></thead><tbody id="events"></tbody></table>
</div>
<div id="task" hidden>
<h2 id="task-head"></h2>
<div id="task-actions" class="bar"></div>
<table><tbody id="task-facts"></tbody></table>
<h2>Fence history</h2>
<table><thead><tr><th>seq</th><th>event</th><th>fence</th><th>actor</th><th>at</th></tr></thead><tbody id="task-fences"></tbody></table>
<h2>Evidence</h2>
<table><thead><tr><th>key</th><th>hash</th></tr></thead><tbody id="task-evidence"></tbody></table>
<h2>Checkpoints <span class="muted">(steps recorded; the next attempt skips them)</span></h2>
<table><thead><tr><th>step</th><th>fence</th><th>output</th><th>spawned</th><th>at</th></tr></thead><tbody id="task-checkpoints"></tbody></table>
<h2>Events</h2>
<table><thead><tr><th>seq</th><th>event</th><th>from &rarr; to</th><th>actor</th><th>fence</th><th>details</th><th>at</th></tr></thead><tbody id="task-events"></tbody></table>
</div>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const STATES = ["DECLARED","REGISTERED","CLAIMED","RUNNING","SUCCEEDED","FAILED","CANCELLED","NOT_STARTED","STALLED"];
for (const s of STATES) { const o = document.createElement("option"); o.value = s; o.textContent = s; $("state").appendChild(o); }
function text(v) { return v == null ? "" : (typeof v === "object" ? JSON.stringify(v) : String(v)); }
// An error as it printed: its one-line fields together, each text with
// line breaks (a traceback, a stderr tail) preformatted, folded past
// FOLD_LINES lines with its last line showing; `label` above it.
const FOLD_LINES = 8;
// The folded texts opened, by `key`: a refresh draws them open again.
const opened = new Set();
function errorView(e, label, key) {
  const box = document.createElement("div"); box.className = "error";
  if (label) { const l = document.createElement("div"); l.className = "muted"; l.textContent = label; box.appendChild(l); }
  const short = [], long = [];
  const multi = (v) => typeof v === "string" && v.includes("\n");
  if (e && typeof e === "object" && !Array.isArray(e)) { for (const [k, v] of Object.entries(e)) (multi(v) ? long : short).push([k, v]); }
  else (multi(e) ? long : short).push(["", e]);
  const head = short.length === 1 && short[0][0] === "" ? text(short[0][1]) : short.length ? JSON.stringify(Object.fromEntries(short)) : "";
  if (head) { const d = document.createElement("div"); d.textContent = head; box.appendChild(d); }
  for (const [k, v] of long) {
    const pre = document.createElement("pre"); pre.textContent = v;
    const lines = v.replace(/\n+$/, "").split("\n");
    if (lines.length > FOLD_LINES) {
      const det = document.createElement("details"), sum = document.createElement("summary");
      sum.textContent = (k ? k + ", " : "") + lines.length + " lines: " + lines[lines.length - 1];
      det.append(sum, pre); box.appendChild(det);
      const id = key + "/" + k; det.open = opened.has(id);
      det.addEventListener("toggle", () => { if (det.open) opened.add(id); else opened.delete(id); });
    } else {
      if (k) { const n = document.createElement("div"); n.className = "muted"; n.textContent = k; box.appendChild(n); }
      box.appendChild(pre);
    }
  }
  return box;
}
// A task's error is its last attempt's while the task stands failed;
// otherwise (waiting for a retry, running again, succeeded) an earlier one's.
// A live lease an operator asked to stop, and who asked when.
function cancelText(c) { return "cancel requested by " + actor(c.by) + " at " + c.at + "; it ends when its holder gives it back or its lease ends"; }
// A failure's attempt, and when one waits to be tried again, when.
function retryText(f, now) {
  const r = f.retry; if (!r) return f.attempt;
  const next = r.next_at && Date.parse(r.next_at) > Date.parse(now) ? "next try in " + span(Date.parse(r.next_at) - Date.parse(now)) : "next try now";
  return "attempt " + r.attempt + " of " + r.max_attempts + ", " + next;
}
function errorLabel(state) { return ["FAILED", "STALLED", "NOT_STARTED", "CANCELLED"].includes(state) ? null : "from an earlier attempt"; }
function span(ms) {
  ms = Math.abs(ms); const s = Math.floor(ms / 1000);
  if (s < 1) return ms + "ms"; if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s";
  if (s < 86400) return Math.floor(s / 3600) + "h" + String(Math.floor(s % 3600 / 60)).padStart(2, "0") + "m";
  return Math.floor(s / 86400) + "d" + String(Math.floor(s % 86400 / 3600)).padStart(2, "0") + "h";
}
function ago(at, now) { const d = Date.parse(now) - Date.parse(at); return d >= 0 ? span(d) + " ago" : "in " + span(d); }
function actor(a) { if (!a) return ""; return a.id ? a.role + ":" + a.id : a.role; }
function taskLink(id) { const a = document.createElement("a"); a.className = "task"; a.textContent = id; a.title = id; a.href = "#task=" + encodeURIComponent(id); return a; }
// A time (as the API writes them, RFC 3339 in UTC) is kept on one line.
const TIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/;
function td(tr, v, cls) { const c = document.createElement("td"); if (v instanceof Node) c.appendChild(v); else c.textContent = text(v); if (cls) c.className = cls; else if (typeof v === "string" && TIME.test(v)) c.className = "t"; tr.appendChild(c); return c; }
function rows(id, items, cols, stateOf) {
  const body = $(id); body.replaceChildren();
  const q = $("search").value.trim().toLowerCase(), st = $("state").value;
  let shown = 0;
  for (const it of items) {
    if (st && stateOf && stateOf(it) !== st) continue;
    if (q && !JSON.stringify(it).toLowerCase().includes(q)) continue;
    const tr = document.createElement("tr"); for (const c of cols) td(tr, c(it)); body.appendChild(tr); shown++;
  }
  if (!shown) { const tr = document.createElement("tr"); const c = td(tr, items.length ? "none matches the filter" : "none", "empty"); c.colSpan = cols.length; body.appendChild(tr); }
}
function headers() { const h = { "Content-Type": "application/json" }; const t = sessionStorage.getItem("baton-token"); if (t) h["Authorization"] = "Bearer " + t; return h; }
async function api(path, body) {
  const res = await fetch(path, body === undefined ? { headers: headers(), cache: "no-store" } : { method: "POST", headers: headers(), body: JSON.stringify(body) });
  if (res.status === 401) { $("auth").style.display = "inline"; notice("this server needs a bearer token: give one above", false); $("notice").dataset.auth = "1"; }
  else if (res.ok) { $("auth").style.display = "none"; if ($("notice").dataset.auth) { notice("", true); delete $("notice").dataset.auth; } }
  let json = null; try { json = await res.json(); } catch (e) {}
  return { res, json };
}
// The time now as the tables write times: UTC.
function utcTime() { return new Date().toISOString().slice(11, 19) + " UTC"; }
function notice(msg, ok) { $("notice").textContent = msg; $("notice").className = ok ? "ok" : "err"; }
// An action asks to be confirmed by a second click; anything else re-arms it.
function action(label, task, run) {
  const b = document.createElement("button"); b.textContent = label; b.dataset.action = label; b.dataset.task = task;
  b.addEventListener("click", async () => {
    if (!b.classList.contains("confirm")) {
      disarm();
      b.classList.add("confirm"); b.textContent = "confirm " + label + " " + task + "?"; return;
    }
    b.disabled = true;
    const by = { role: "operator", id: $("operator").value.trim() || "status-page" };
    const { res, json } = await run(by);
    if (res.ok && json && !json.refused) notice(label + " " + task + ": " + (json.cancel_requested && (json.state === "CLAIMED" || json.state === "RUNNING")
      ? "cancel requested; it stops when its holder gives it back or its lease ends (now " + json.state + ")"
      : "retried" in json || "discarded" in json ? bulkText(json)
      : "queue" in json ? (json.paused_at ? "paused: next passes over its tasks" : "running") : "now " + (json.state || "done")), true);
    else notice(label + " " + task + ": " + ((json && (json.message || (json.error && json.error.message))) || res.statusText), false);
    refresh();
  });
  return b;
}
const path = (t, verb) => "/v1/tasks/" + encodeURIComponent(t) + "/" + verb;
const retry = (t, iteration) => action("retry", t, (by) => api(path(t, "redispatch"), { by, iteration: iteration + 1 }));
const cancel = (t) => action("cancel", t, (by) => api(path(t, "cancel"), { by, fence: null }));
const queuePath = (q, verb) => "/v1/queues/" + encodeURIComponent(q) + "/" + verb;
const pauseQueue = (q) => action("pause", q, (by) => api(queuePath(q, "pause"), { operator: by.id }));
const resumeQueue = (q) => action("resume", q, (by) => api(queuePath(q, "resume"), { operator: by.id }));
const retryFailed = (q) => action("retry failed", q, (by) => api(queuePath(q, "retry-failed"), { operator: by.id }));
const discardFailed = (q) => action("discard failed", q, (by) => api(queuePath(q, "discard-failed"), { operator: by.id }));
function bulkText(j) {
  const n = "retried" in j ? j.retried + " retried" : j.discarded + " discarded";
  return n + (j.refusals.length ? ", " + j.refusals.length + " refused (" + j.refusals.map(r => r.task + ": " + r.refusal).join("; ") + ")" : "") + (j.more ? "; more are left: again for the rest" : "");
}
const finalize = (t) => action("finalize", t, (by) => api(path(t, "finalize"), { by, error: { reason: "finalized from the status page" } }));
function actions(...buttons) { const d = document.createElement("span"); for (const b of buttons) { d.appendChild(b); d.appendChild(document.createTextNode(" ")); } return d; }
function chart(pm) {
  const W = 720, H = 120, n = pm.grants.length, bw = W / n, max = Math.max(1, ...pm.grants, ...pm.failures);
  const NS = "http://www.w3.org/2000/svg", svg = document.createElementNS(NS, "svg");
  svg.setAttribute("width", W); svg.setAttribute("height", H + 34); svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "grants and failures per minute");
  pm.grants.forEach((g, i) => {
    const f = pm.failures[i];
    for (const [v, colour, x] of [[g, "#3b6fd8", i * bw], [f, "#c0392b", i * bw + bw / 2]]) {
      if (!v) continue;
      const r = document.createElementNS(NS, "rect"), h = Math.max(1, v / max * H);
      r.setAttribute("x", x); r.setAttribute("y", H - h); r.setAttribute("width", Math.max(1, bw / 2 - 1)); r.setAttribute("height", h); r.setAttribute("fill", colour);
      const t = document.createElementNS(NS, "title"); t.textContent = (n - i) + " min ago: " + g + " grants, " + f + " failures"; r.appendChild(t); svg.appendChild(r);
    }
  });
  // The axes: a baseline with a tick every 15 minutes, and the scale's top.
  const mark = (x, y, words, anchor) => { const t = document.createElementNS(NS, "text"); t.setAttribute("x", x); t.setAttribute("y", y); t.setAttribute("font-size", "11"); t.setAttribute("text-anchor", anchor); t.setAttribute("class", "axis"); t.textContent = words; svg.appendChild(t); };
  const rule = (x1, y1, x2, y2) => { const l = document.createElementNS(NS, "line"); l.setAttribute("x1", x1); l.setAttribute("y1", y1); l.setAttribute("x2", x2); l.setAttribute("y2", y2); l.setAttribute("stroke", "#8a939c"); svg.appendChild(l); };
  rule(0, H, W, H); rule(0, 0, 0, H);
  for (const m of [60, 45, 30, 15, 0]) { const x = (n - m) * bw; rule(x, H, x, H + 4); mark(x, H + 15, m ? m + " min ago" : "now", m === 60 ? "start" : m ? "middle" : "end"); }
  rule(0, 0, 4, 0); mark(6, 10, max + " per minute", "start");
  const label = document.createElementNS(NS, "text"); label.setAttribute("x", 4); label.setAttribute("y", H + 30); label.setAttribute("font-size", "11");
  label.textContent = "grants (blue) " + pm.grants.reduce((a, b) => a + b, 0) + ", failures (red) " + pm.failures.reduce((a, b) => a + b, 0) + (pm.whole ? "" : " (the newest 5000 events)");
  svg.appendChild(label);
  $("chart").replaceChildren(svg);
}
// A refresh that answers while an action waits for its confirmation (a
// periodic one, or the one an earlier action asked for) leaves the page as
// it is: re-drawn, the armed button would be a new one, and the confirming
// click a first click again. A confirmed action's button is disabled.
const armed = () => !!document.querySelector("button.confirm:not(:disabled)");
function disarm() { for (const o of document.querySelectorAll("button.confirm")) { o.classList.remove("confirm"); o.textContent = o.dataset.action; } }
async function showList() {
  const { res, json: s } = await api("/v1/status");
  if (armed()) return;
  if (!res.ok) { notice((s && s.error && s.error.message) || res.statusText, false); return; }
  $("auth").style.display = "none";
  $("meta").textContent = "updated " + utcTime() + (s.truncated ? " (more tasks are due a change than one reading derives: some count in their stored state)" : "");
  const sw = s.sweeper;
  $("sweeper").textContent = !sw ? "this server does not sweep (expired leases are persisted by `baton sweep`)"
    : sw.error ? "sweeping every " + sw.every_ms + " ms; the last sweep failed: " + sw.error
    : "sweeping every " + sw.every_ms + " ms: " + sw.swept + " tasks swept in " + sw.sweeps + " sweeps" + (sw.last_at ? ", last at " + sw.last_at : "");
  $("sweeper").className = sw && sw.error ? "err" : "";
  $("schedules-failing").replaceChildren(...(s.schedules_failing || []).map(f => { const d = document.createElement("div"); d.textContent = f.schedule + " makes no task since " + f.since + " (" + f.task + "): " + f.error; return d; }));
  const counts = $("counts"); counts.replaceChildren();
  const card = (n, name, key, value) => { const d = document.createElement("div"); d.className = "count"; d.dataset[key] = value; const b = document.createElement("b"); b.textContent = n; d.appendChild(b); d.appendChild(document.createTextNode(name)); counts.appendChild(d); };
  for (const [state, n] of Object.entries(s.counts)) card(n, state, "state", state);
  // Where the waiting tasks stand (known while few enough wait to read).
  for (const [standing, n] of Object.entries(s.standing || {})) if (standing !== "WAITING") card(n, standing, "standing", standing);
  const set = s.settings || {};
  const pausedAt = {}; for (const p of set.queues || []) if (p.paused_at) pausedAt[p.queue] = p.paused_at;
  // A queue's actions: running (pause) or paused since when (resume);
  // with failed tasks, retry or discard them all.
  const failed = (d) => c(d, "FAILED", "STALLED", "NOT_STARTED");
  const queueActions = (d) => { const name = d.name; if (!name) return ""; const at = pausedAt[name]; const out = document.createElement("span");
    if (at) { const w = document.createElement("span"); w.className = "paused"; w.textContent = "paused " + ago(at, s.now) + " "; out.appendChild(w); out.appendChild(resumeQueue(name)); }
    else out.appendChild(pauseQueue(name));
    if (failed(d) > 0) for (const b of [retryFailed(name), discardFailed(name)]) { out.appendChild(document.createTextNode(" ")); out.appendChild(b); }
    return out; };
  const q = Object.entries(s.queues).map(([name, d]) => ({ name, ...d }));
  for (const name of Object.keys(pausedAt)) if (!q.some(d => d.name === name)) q.push({ name, counts: {} });
  const c = (d, ...ks) => ks.reduce((a, k) => a + (d.counts[k] || 0), 0);
  const st = (d, k) => d.standing ? (d.standing[k] || 0) : "-";
  rows("queues", q, [d => d.name || "(outside the graph)", d => c(d, "DECLARED", "REGISTERED"), d => st(d, "READY"), d => st(d, "RETRYING"), d => st(d, "BLOCKED"), d => c(d, "CLAIMED", "RUNNING"), d => c(d, "SUCCEEDED"), d => failed(d), d => c(d, "CANCELLED"), d => d.oldest_waiting ? ago(d.oldest_waiting, s.now) : "-", d => queueActions(d)]);
  rows("failures", s.failures, [f => taskLink(f.task), f => f.state, f => retryText(f, s.now), f => errorView(f.error, errorLabel(f.state), "failures/" + f.task), f => ago(f.at, s.now),
    f => f.state === "REGISTERED" ? actions(finalize(f.task)) : actions(retry(f.task, f.iteration), finalize(f.task))], f => f.state);
  rows("leases", s.leases, [l => taskLink(l.task), l => l.owner, l => l.fence, l => l.state + (l.cancel_requested ? ", cancel requested" : ""),
    l => l.live ? span(l.left_ms) : "expired " + span(l.left_ms) + " ago", l => !l.live ? "" : l.cancel_requested ? cancelText(l.cancel_requested) : actions(cancel(l.task))], l => l.state);
  for (const tr of $("leases").rows) if (tr.cells[4] && tr.cells[4].textContent.startsWith("expired")) tr.cells[4].className = "expired";
  chart(s.per_minute);
  rows("schedules", set.schedules || [], [x => x.schedule, x => x.every_ms ? "every " + span(x.every_ms) : "cron " + x.cron, x => x.queue, x => x.next_run ? x.next_run + " (" + ago(x.next_run, s.now) + ")" : "-", x => x.state, x => x.failure ? x.failure.error : ""]);
  rows("keys", set.keys || [], [k => k.key, k => k.limit == null ? "none" : k.limit, k => k.holders, k => k.parked]);
  rows("policies", set.queues || [], [p => p.queue, p => !p.retry ? "none" : p.retry.max_attempts + " attempts, backoff " + span(p.retry.backoff_ms) + " x" + p.retry.factor + " up to " + span(p.retry.max_backoff_ms), p => p.paused_at ? "since " + p.paused_at : "no"]);
  const dl = s.deliveries;
  $("deliveries-box").hidden = !dl;
  if (dl) {
    $("deliveries").textContent = "to " + dl.url + ": " + dl.delivered + " delivered, " + dl.failing.length + " failing"
      + (dl.failing.length ? " (" + dl.failing.map(f => f.task + " #" + f.seq + " try " + f.failures + ": " + f.error).join("; ") + ")" : "")
      + ", " + dl.dead_total + " dead since the server started" + (dl.error ? "; " + dl.error : "");
    rows("deliveries-dead", dl.dead, [x => taskLink(x.task), x => x.seq, x => x.kind, x => x.failures, x => x.error, x => x.at]);
  }
  rows("refusals", s.refusals, [r => taskLink(r.task), r => r.request, r => r.refusal.refused, r => r.refusal.message]);
  rows("events", s.events, [e => e.seq, e => taskLink(e.task), e => e.kind, e => actor(e.actor), e => e.fence, e => Object.keys(e.details || {}).length ? e.details : "", e => e.at]);
}
async function showTask(id) {
  const { res, json: r } = await api("/v1/tasks/" + encodeURIComponent(id));
  if (!res.ok) { $("task-head").textContent = id + ": " + ((r && (r.message || (r.error && r.error.message))) || res.statusText); $("task-facts").replaceChildren(); return; }
  const ev = (await api("/v1/tasks/" + encodeURIComponent(id) + "/events?limit=1000")).json;
  const events = (ev && ev.items) || [];
  if (armed()) return;
  $("meta").textContent = "updated " + utcTime();
  $("task-head").textContent = r.task + " \u2014 " + r.state + ", attempt " + r.attempt + (r.iteration > 1 ? ", iteration " + r.iteration : "");
  const live = r.state === "CLAIMED" || r.state === "RUNNING", ended = ["FAILED", "STALLED", "NOT_STARTED", "CANCELLED"].includes(r.state);
  const acts = [];
  if (ended) acts.push(retry(r.task, r.iteration));
  if (!["SUCCEEDED", "FAILED", "CANCELLED", "STALLED", "NOT_STARTED"].includes(r.state)) acts.push(cancel(r.task), finalize(r.task));
  $("task-actions").replaceChildren(...acts);
  const facts = [["state", r.state + (live && r.cancel_requested ? ", cancel requested" : "")], ["cancel", live && r.cancel_requested ? cancelText(r.cancel_requested) : null], ["error", r.error], ["lease", r.lease ? "fence " + r.lease.fence + ", " + (live ? "held by " : "last held by ") + r.lease.owner + (live ? ", expires " + r.lease.expires_at : "") : null],
    ["ended by", r.closure ? r.closure.request + " by " + actor(r.closure.actor) + (r.closure.fence != null ? " under fence " + r.closure.fence : "") : null],
    ["queue", r.node ? r.node.queue + ", priority " + r.node.priority + (r.node.depends_on && r.node.depends_on.length ? ", after " + r.node.depends_on.join(", ") : "") : null],
    ["steps", r.manifest ? r.current_step + "/" + r.manifest.steps.length + ": " + r.manifest.steps.join(", ") : null],
    ["run", r.run_id ? r.run_id + " (executor " + r.executor + ")" : null], ["created", r.created_at], ["started", r.started_at], ["finished", r.finished_at], ["pruned", r.pruned_at]];
  const body = $("task-facts"); body.replaceChildren();
  for (const [k, v] of facts) { if (v == null || v === "") continue; const tr = document.createElement("tr"); td(tr, k); td(tr, k === "error" ? errorView(v, errorLabel(r.state), "task/" + r.task) : v); body.appendChild(tr); }
  rows("task-fences", events.filter(e => e.fence != null), [e => e.seq, e => e.kind, e => e.fence, e => actor(e.actor), e => e.at]);
  rows("task-evidence", Object.entries(r.evidence || {}).map(([k, h]) => ({ k, h })), [x => x.k, x => x.h]);
  rows("task-checkpoints", r.checkpoints || [], [c => c.step, c => c.fence, c => text(c.output), c => (c.spawned || []).join(", "), c => c.at]);
  rows("task-events", events, [e => e.seq, e => e.kind, e => (e.from || "new") + " \u2192 " + e.to, e => actor(e.actor), e => e.fence, e => Object.keys(e.details || {}).length ? e.details : "", e => e.at]);
}
async function refresh() {
  const m = /^#task=(.+)$/.exec(location.hash);
  $("list").hidden = !!m; $("task").hidden = !m;
  try { if (m) await showTask(decodeURIComponent(m[1])); else await showList(); }
  catch (e) { $("meta").textContent = "the server does not answer (" + e + ")"; }
}
// A server with tokens records every action as the token's name.
if (document.body.dataset.tokens === "yes") { $("operator-box").hidden = true; $("as-token").hidden = false; }
$("auth").addEventListener("submit", (ev) => { ev.preventDefault(); sessionStorage.setItem("baton-token", $("token").value); refresh(); });
$("search").addEventListener("input", () => { disarm(); refresh(); });
$("state").addEventListener("change", () => { disarm(); refresh(); });
window.addEventListener("hashchange", () => { disarm(); refresh(); });
refresh();
// Refreshes every 2 s, but never while an action waits for its confirmation.
setInterval(() => { if (!armed()) refresh(); }, 2000);
</script>
</body>
</html>
"##;
