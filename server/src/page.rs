//! The status page: one HTML document with no external assets that
//! polls `/v1/status` (counts by state, live leases, recent refusals and
//! events). Read-only; every input is bounded.

use crate::app::{Answer, Shared, json};
use axum::Router;
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use baton_core::{Error, State as TaskState};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The most tasks a census reads (the page and `/metrics` say when it stopped short).
pub const CENSUS_BOUND: usize = 100_000;
/// The most live leases and events the page shows.
const SHOWN: usize = 200;

pub(crate) fn routes() -> Router<Shared> {
    Router::new()
        .route("/", get(index))
        .route("/v1/status", get(status))
}

/// The page itself: static, so it is served without a token; the data
/// it fetches needs one when the server has tokens.
async fn index() -> Response {
    (
        [
            (header::CACHE_CONTROL, "no-store"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'",
            ),
        ],
        Html(PAGE),
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
}

/// One queue's tasks by state, and how long its oldest waiting task has waited.
#[derive(Debug, Default, Serialize)]
pub(crate) struct QueueDepth {
    pub counts: std::collections::BTreeMap<String, u64>,
    pub oldest_waiting: Option<baton_core::Timestamp>,
}

#[derive(Debug, Default)]
pub(crate) struct Census {
    pub counts: Vec<(TaskState, u64)>,
    /// By queue (tasks outside the work graph under ""), then by state.
    pub queues: std::collections::BTreeMap<String, QueueDepth>,
    pub leases: Vec<Lease>,
    pub failures: Vec<Failure>,
    pub truncated: bool,
}

/// Every task's derived state, up to [`CENSUS_BOUND`] tasks.
pub(crate) async fn census(app: &Shared) -> Result<Census, Error> {
    let now = app.now();
    let mut counts = [0u64; TaskState::ALL.len()];
    let mut queues: std::collections::BTreeMap<String, QueueDepth> = Default::default();
    let mut failures = Vec::new();
    let mut leases = Vec::new();
    let mut after: Option<String> = None;
    let mut seen = 0usize;
    let mut truncated = false;
    loop {
        let page = app
            .authority
            .list(None, after.as_deref(), baton_core::authority::MAX_PAGE)
            .await?;
        for r in &page.items {
            // Records of keys, queues and schedules are not tasks to count.
            if r.key_limit.is_some() || r.queue_policy.is_some() || r.schedule.is_some() {
                continue;
            }
            if let Some(i) = TaskState::ALL.iter().position(|s| *s == r.state) {
                counts[i] += 1;
            }
            let queue = r.node.as_ref().map(|n| n.spec.queue.to_string());
            let depth = queues.entry(queue.clone().unwrap_or_default()).or_default();
            *depth.counts.entry(r.state.as_str().to_owned()).or_default() += 1;
            if matches!(r.state, TaskState::Registered | TaskState::Declared) {
                let since = r.deadline_from.unwrap_or(r.created_at);
                depth.oldest_waiting = Some(depth.oldest_waiting.map_or(since, |o| o.min(since)));
            }
            let left = |l: &baton_core::Lease| l.expires_at.as_millis() - now.as_millis();
            if let Some(l) = &r.lease
                && (r.state.is_held() || (l.expired && -left(l) < RECENTLY_EXPIRED_MS))
            {
                leases.push(Lease {
                    task: r.task.to_string(),
                    owner: l.owner.to_string(),
                    fence: l.fence,
                    state: r.state,
                    expires_at: l.expires_at,
                    left_ms: left(l),
                    live: r.state.is_held(),
                });
            }
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
                    queue,
                });
            }
        }
        seen += page.items.len();
        match page.next {
            Some(n) if seen < CENSUS_BOUND => after = Some(n),
            Some(_) => {
                truncated = true;
                break;
            }
            None => break,
        }
    }
    // Live leases first, the nearest to ending first; then the ended,
    // the latest first. The newest failures first.
    leases.sort_by_key(|l| (!l.live, if l.live { l.left_ms } else { -l.left_ms }));
    leases.truncate(SHOWN);
    failures.sort_by_key(|f| std::cmp::Reverse(f.at));
    failures.truncate(SHOWN);
    Ok(Census {
        counts: TaskState::ALL.iter().copied().zip(counts).collect(),
        queues,
        leases,
        failures,
        truncated,
    })
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
    _caller: crate::gate::Gate,
) -> Answer {
    let n = q.events.unwrap_or(30).clamp(1, SHOWN);
    let census = census(&app).await?;
    let newest = newest_seq(&app).await?;
    let events = app
        .store
        .events(None, newest.saturating_sub(n as u64), n)
        .await?;
    let recent: Vec<_> = app
        .recent
        .lock()
        .map(|r| r.iter().rev().cloned().collect())
        .unwrap_or_default();
    let counts: serde_json::Map<String, serde_json::Value> = census
        .counts
        .iter()
        .map(|(s, n)| (s.as_str().to_owned(), json!(n)))
        .collect();
    let now = app.now();
    let activity = per_minute(&app, newest, now).await?;
    json(&json!({
        "now": now,
        "counts": counts,
        "queues": census.queues,
        "truncated": census.truncated,
        "leases": census.leases,
        "failures": census.failures,
        "refusals": recent,
        "sweeper": app.sweeper.lock().ok().and_then(|s| s.clone()),
        "events": events.iter().rev().collect::<Vec<_>>(),
        "per_minute": activity,
    }))
}

/// The most events read back for the per-minute chart.
const CHART_EVENTS: u64 = 5000;
/// The chart's span, in minutes.
const CHART_MINUTES: usize = 60;

/// Grants and failures in each of the last hour's minutes (the oldest
/// first), from the newest events (at most [`CHART_EVENTS`] of them; the
/// chart says from which minute it is whole).
async fn per_minute(
    app: &Shared,
    newest: u64,
    now: baton_core::Timestamp,
) -> Result<serde_json::Value, Error> {
    use baton_core::EventKind as K;
    let mut grants = vec![0u64; CHART_MINUTES];
    let mut failures = vec![0u64; CHART_MINUTES];
    let mut after = newest.saturating_sub(CHART_EVENTS);
    let complete_from = after == 0;
    let minute = |at: baton_core::Timestamp| -> Option<usize> {
        let ago = (now.as_millis() - at.as_millis()) / 60_000;
        usize::try_from(ago)
            .ok()
            .filter(|a| *a < CHART_MINUTES)
            .map(|a| CHART_MINUTES - 1 - a)
    };
    loop {
        let page = app
            .store
            .events(None, after, baton_core::authority::MAX_PAGE)
            .await?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        for e in &page {
            let Some(m) = minute(e.at) else { continue };
            match e.kind {
                K::Claimed | K::Recovered => grants[m] += 1,
                K::Failed | K::Stalled | K::TimedOut | K::NotStarted => failures[m] += 1,
                // A holder's failure tried again (a stall's retry follows
                // its STALLED, counted already).
                K::RetryScheduled if e.actor != baton_core::Actor::System => failures[m] += 1,
                _ => {}
            }
        }
        if page.len() < baton_core::authority::MAX_PAGE {
            break;
        }
    }
    Ok(json!({"grants": grants, "failures": failures, "whole": complete_from}))
}

const PAGE: &str = r##"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>baton</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #1d232a; background: #fafbfc; }
  h1 { font-size: 1.3rem; margin: 0 0 .2rem; }
  h2 { font-size: 1rem; margin: 1.4rem 0 .4rem; }
  #meta { color: #5b6570; }
  .counts { display: flex; flex-wrap: wrap; gap: .5rem; }
  .count { background: #fff; border: 1px solid #d8dde3; border-radius: 6px; padding: .4rem .7rem; min-width: 6.5rem; }
  .count b { display: block; font-size: 1.3rem; }
  table { border-collapse: collapse; background: #fff; width: 100%; max-width: 70rem; }
  th, td { text-align: left; padding: .25rem .6rem; border-bottom: 1px solid #e6e9ed; font-variant-numeric: tabular-nums; }
  th { background: #f0f2f5; }
  .empty { color: #8a939c; font-style: italic; }
  #auth { display: none; margin: 1rem 0; }
  .err { color: #a3281b; }
</style>
</head>
<body>
<h1>baton</h1>
<div id="meta">loading&hellip;</div>
<div id="sweeper"></div>
<form id="auth"><label>This server needs a token: <input id="token" type="password" autocomplete="off"></label> <button>Use</button></form>
<h2>Tasks by state</h2>
<div class="counts" id="counts"></div>
<h2>Live leases</h2>
<table><thead><tr><th>task</th><th>owner</th><th>fence</th><th>state</th><th>time left</th></tr></thead><tbody id="leases"></tbody></table>
<h2>Recent refusals</h2>
<table><thead><tr><th>task</th><th>request</th><th>reason</th><th>message</th></tr></thead><tbody id="refusals"></tbody></table>
<h2>Recent events</h2>
<table><thead><tr><th>seq</th><th>task</th><th>event</th><th>actor</th><th>fence</th><th>at</th></tr></thead><tbody id="events"></tbody></table>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
function cell(row, text) { const td = document.createElement("td"); td.textContent = text == null ? "" : String(text); row.appendChild(td); }
function rows(id, items, cols, width) {
  const body = $(id); body.replaceChildren();
  if (!items.length) { const tr = document.createElement("tr"); const td = document.createElement("td"); td.colSpan = width; td.className = "empty"; td.textContent = "none"; tr.appendChild(td); body.appendChild(tr); return; }
  for (const it of items) { const tr = document.createElement("tr"); for (const c of cols) cell(tr, c(it)); body.appendChild(tr); }
}
function left(ms) { if (ms <= 0) return "expiring"; const s = ms / 1000; return s < 120 ? s.toFixed(1) + " s" : Math.round(s / 60) + " min"; }
function actor(a) { if (!a) return ""; return a.id ? a.role + ":" + a.id : a.role; }
async function refresh() {
  const headers = {};
  const token = sessionStorage.getItem("baton-token");
  if (token) headers["Authorization"] = "Bearer " + token;
  try {
    const res = await fetch("/v1/status", { headers, cache: "no-store" });
    if (res.status === 401 || res.status === 403) { $("auth").style.display = "block"; $("meta").textContent = "a token is needed"; return; }
    const s = await res.json();
    if (!res.ok) { $("meta").innerHTML = ""; const e = document.createElement("span"); e.className = "err"; e.textContent = (s.error && s.error.message) || res.statusText; $("meta").appendChild(e); return; }
    $("auth").style.display = "none";
    $("meta").textContent = "updated " + new Date().toLocaleTimeString() + (s.truncated ? " (counts stop at the census bound)" : "");
    const sw = s.sweeper;
    $("sweeper").textContent = !sw ? "this server does not sweep (expired leases are persisted by `baton sweep`)"
      : sw.error ? "sweeping every " + sw.every_ms + " ms; the last sweep failed: " + sw.error
      : "sweeping every " + sw.every_ms + " ms: " + sw.swept + " tasks swept in " + sw.sweeps + " sweeps" + (sw.last_at ? ", last at " + sw.last_at : "");
    $("sweeper").className = sw && sw.error ? "err" : "";
    const counts = $("counts"); counts.replaceChildren();
    for (const [state, n] of Object.entries(s.counts)) { const d = document.createElement("div"); d.className = "count"; d.dataset.state = state; const b = document.createElement("b"); b.textContent = n; d.appendChild(b); d.appendChild(document.createTextNode(state)); counts.appendChild(d); }
    rows("leases", s.leases, [l => l.task, l => l.owner, l => l.fence, l => l.state, l => left(l.left_ms)], 5);
    rows("refusals", s.refusals, [r => r.task, r => r.request, r => r.refusal.refused, r => r.refusal.message], 4);
    rows("events", s.events, [e => e.seq, e => e.task, e => e.kind, e => actor(e.actor), e => e.fence, e => e.at], 6);
  } catch (e) { $("meta").textContent = "the server does not answer (" + e + ")"; }
}
$("auth").addEventListener("submit", (ev) => { ev.preventDefault(); sessionStorage.setItem("baton-token", $("token").value); refresh(); });
refresh();
setInterval(refresh, 1000);
</script>
</body>
</html>
"##;
