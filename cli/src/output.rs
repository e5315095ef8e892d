//! Printing: one JSON object per line (or readable tables), and the exit
//! status that goes with it. A closed output pipe is a normal exit.

use crate::args::Format;
use crate::exit;
pub use baton_supervisor::term::{
    duration, escape_unprintable, report_error, stdout_closed, try_write_stdout, write_stderr,
    write_stdout,
};
use serde_json::Value;

/// How a command ended, for the exit status; how `--format human` shows
/// its items: core's words for what came of an operation.
pub use baton_core::call::{Shape as View, Status};

/// What a command prints: what came of its operation, and whether it
/// printed as it went.
#[derive(Debug)]
pub struct Out {
    pub output: baton_core::call::Output,
    /// Already printed (the demo's timeline): print nothing more.
    pub printed: bool,
}

impl std::ops::Deref for Out {
    type Target = baton_core::call::Output;
    fn deref(&self) -> &Self::Target {
        &self.output
    }
}

impl std::ops::DerefMut for Out {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.output
    }
}

impl From<baton_core::call::Output> for Out {
    fn from(output: baton_core::call::Output) -> Out {
        Out {
            output,
            printed: false,
        }
    }
}

impl From<baton_harness::Report> for Out {
    /// A harness run: its output, or the table it made printed now in
    /// place of it.
    fn from(r: baton_harness::Report) -> Out {
        let mut out = Out::from(r.output);
        if let Some(text) = r.text {
            write_stdout(&text);
            out.printed = true;
        }
        out
    }
}

impl Out {
    pub fn list(items: Vec<Value>, next: Option<String>) -> Out {
        Out::from(baton_core::call::Output::list(items, next))
    }

    /// What a command that printed as it went leaves to print: nothing.
    pub fn printed() -> Out {
        let mut out = Out::list(Vec::new(), None);
        out.printed = true;
        out
    }

    /// Prints and returns the exit status.
    pub fn print(&self, format: Format) -> i32 {
        let text = match format {
            _ if self.printed => String::new(),
            Format::Json => {
                let mut s = String::new();
                for v in &self.items {
                    s.push_str(&v.to_string());
                    s.push('\n');
                }
                if let Some(n) = &self.next {
                    s.push_str(&serde_json::json!({ "next": n }).to_string());
                    s.push('\n');
                }
                s
            }
            Format::Human => {
                let now = baton_core::Clock::now(&baton_core::SystemClock);
                let colour = Colour::for_stdout();
                match self.shape {
                    View::Generic => human(&self.items, self.next.as_deref()),
                    View::Grant => lines(&self.items, |v| grant_line(v, now, colour)),
                    View::Refusal => lines(&self.items, |v| refusal_line(v, colour)),
                    View::Tasks => task_table(&self.items, self.next.as_deref(), now, colour),
                    View::Events => event_table(&self.items, self.next.as_deref()),
                    View::Record => lines(&self.items, |v| record_view(v, now, colour)),
                    View::Graph => graph_table(&self.items),
                    View::Setting => setting_view(&self.items, now),
                }
            }
            Format::Dot => dot(&self.items),
        };
        if let Err(e) = try_write_stdout(&text) {
            let applied = self.wrote && self.status == Status::Ok;
            let (kind, code, what) = if applied {
                (
                    "indeterminate",
                    exit::INDETERMINATE,
                    "the request was applied, but its answer could not be written",
                )
            } else {
                (
                    "unavailable",
                    exit::UNAVAILABLE,
                    "the answer could not be written",
                )
            };
            let body = serde_json::json!({"error": {
                "kind": kind,
                "message": format!("{what} to standard output: {e}"),
                "field": null,
                "temporary": true,
            }});
            write_stderr(&body.to_string());
            return code;
        }
        match self.status {
            Status::Ok => exit::OK,
            Status::Refused => exit::REFUSED,
            Status::NotFound => exit::NOT_FOUND,
        }
    }
}

/// Readable tables: one object as key/value rows, a list as columns.
pub fn human(items: &[Value], next: Option<&str>) -> String {
    let mut out = String::new();
    if items.len() == 1
        && next.is_none()
        && let Some(obj) = items[0].as_object()
    {
        let width = obj.keys().map(|k| k.len()).max().unwrap_or(0);
        for (k, v) in obj {
            let k = escape_unprintable(k);
            out.push_str(&format!("{k:<width$}  {}\n", text(v)));
        }
        return out;
    }
    let mut columns: Vec<String> = Vec::new();
    for item in items {
        // Every field, nested ones as their JSON, nothing cut short.
        for (k, _) in item.as_object().into_iter().flatten() {
            if !columns.contains(k) {
                columns.push(k.clone());
            }
        }
    }
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|i| {
            columns
                .iter()
                .map(|c| text(i.get(c).unwrap_or(&Value::Null)))
                .collect()
        })
        .collect();
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([c.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[String]| -> String {
        let mut l = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ");
        l.truncate(l.trim_end().len());
        l.push('\n');
        l
    };
    if items.is_empty() {
        out.push_str("(none)\n");
    } else {
        let header: Vec<String> = columns.iter().map(|c| escape_unprintable(c)).collect();
        out.push_str(&line(&header));
        for r in &rows {
            out.push_str(&line(r));
        }
    }
    if let Some(n) = next {
        out.push_str(&format!("next page: --after {}\n", escape_unprintable(n)));
    }
    out
}

/// Whether to colour: only on a terminal, and never with `NO_COLOR` set to
/// anything (no-color.org).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Colour(bool);

impl Colour {
    pub fn for_stdout() -> Colour {
        use std::io::IsTerminal;
        Colour::decide(
            std::io::stdout().is_terminal(),
            std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()),
        )
    }

    pub fn decide(terminal: bool, no_color: bool) -> Colour {
        Colour(terminal && !no_color)
    }

    fn paint(self, code: &str, text: &str) -> String {
        if self.0 {
            format!("\u{1b}[{code}m{text}\u{1b}[0m")
        } else {
            text.to_owned()
        }
    }

    /// A state, coloured by what it means for a worker.
    fn state(self, state: &str) -> String {
        let code = match state {
            "SUCCEEDED" => "32",
            "FAILED" | "STALLED" | "NOT_STARTED" | "CANCELLED" => "31",
            "CLAIMED" | "RUNNING" => "33",
            _ => "0",
        };
        self.paint(code, state)
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".to_owned(),
        Value::String(s) => escape_unprintable(s),
        other => escape_unprintable(&other.to_string()),
    }
}

/// "in 24s", "3s ago", "now": a time as a person reads it beside `now`.
pub fn relative(at: &Value, now: baton_core::Timestamp) -> String {
    let Some(t) = at
        .as_str()
        .and_then(|s| baton_core::Timestamp::parse_rfc3339(s).ok())
    else {
        return "-".to_owned();
    };
    let ms = t.as_millis() - now.as_millis();
    if ms.unsigned_abs() < 1 {
        "now".to_owned()
    } else if ms > 0 {
        format!("in {}", duration(ms.unsigned_abs()))
    } else {
        format!("{} ago", duration(ms.unsigned_abs()))
    }
}

/// A retry policy in one line: "3 attempts, backoff 30s x2 up to 1h".
fn retry_text(retry: &Value) -> String {
    let ms = |v: &Value| v.as_u64().map_or_else(|| "-".to_owned(), duration);
    format!(
        "{} attempts, backoff {} x{} up to {}",
        text(&retry["max_attempts"]),
        ms(&retry["backoff_ms"]),
        text(&retry["factor"]),
        ms(&retry["max_backoff_ms"]),
    )
}

/// One field of a setting as a person reads it: a duration (`every_ms`)
/// as one (`every 30s`), a time with how far it is, a retry policy as a
/// sentence, a key's holders and parked tasks by id.
fn setting_field(key: &str, v: &Value, now: baton_core::Timestamp) -> (String, String) {
    if let Some(name) = key.strip_suffix("_ms")
        && let Some(ms) = v.as_u64()
    {
        return (name.to_owned(), duration(ms));
    }
    let shown = match (key, v) {
        ("retry", Value::Object(_)) => retry_text(v),
        ("retry", Value::Null) => "none".to_owned(),
        ("holders" | "parked", Value::Array(a)) if a.is_empty() => "-".to_owned(),
        ("holders", Value::Array(a)) => a
            .iter()
            .map(|h| match h["fence"].as_u64() {
                Some(f) => format!("{} (fence {f})", text(&h["task"])),
                None => text(h),
            })
            .collect::<Vec<_>>()
            .join(", "),
        ("parked", Value::Array(a)) => a.iter().map(text).collect::<Vec<_>>().join(", "),
        ("since" | "next_run" | "paused_at", Value::String(_)) => when(v, now),
        ("paused_at", Value::Null) => "- (running)".to_owned(),
        _ => text(v),
    };
    (escape_unprintable(key), shown)
}

/// Settings for a person: one as rows of its fields, several as a table.
fn setting_view(items: &[Value], now: baton_core::Timestamp) -> String {
    let fields = |v: &Value| -> Vec<(String, String)> {
        v.as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.as_str() != "idempotent")
            .map(|(k, v)| setting_field(k, v, now))
            .collect()
    };
    if let [one] = items {
        let rows = fields(one);
        let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        return rows
            .iter()
            .map(|(k, v)| format!("{k:<width$}  {v}\n"))
            .collect();
    }
    if items.is_empty() {
        return "(none)\n".to_owned();
    }
    let rows: Vec<Vec<(String, String)>> = items.iter().map(fields).collect();
    let header: Vec<&str> = rows[0].iter().map(|(k, _)| k.as_str()).collect();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|(_, v)| v.clone()).collect())
        .collect();
    table(&header, &cells, None)
}

/// A time as written, with how far it is from `now`.
fn when(at: &Value, now: baton_core::Timestamp) -> String {
    format!("{} ({})", text(at), relative(at, now))
}

/// A task's record for a person: the headline, then each part that says
/// something, in full (nothing cut).
fn record_view(v: &Value, now: baton_core::Timestamp, colour: Colour) -> String {
    let Some(obj) = v
        .as_object()
        .filter(|o| o.contains_key("state") && o.contains_key("task"))
    else {
        return human(std::slice::from_ref(v), None);
    };
    let state = text(&v["state"]);
    let mut head = format!(
        "{}  {}  revision {}, attempt {}",
        text(&v["task"]),
        colour.state(&state),
        text(&v["revision"]),
        text(&v["attempt"]),
    );
    if v["iteration"].as_u64().is_some_and(|i| i > 1) {
        head.push_str(&format!(", iteration {}", text(&v["iteration"])));
    }
    if v["idempotent"] == Value::Bool(true) {
        head.push_str(" (a repeat: nothing changed)");
    }
    let mut rows: Vec<(&str, String)> = Vec::new();
    let held = matches!(state.as_str(), "CLAIMED" | "RUNNING");
    let lease = &v["lease"];
    if lease.is_object() {
        rows.push((
            "lease",
            if held {
                format!(
                    "fence {}, held by {}, expires {}",
                    text(&lease["fence"]),
                    text(&lease["owner"]),
                    when(&lease["expires_at"], now)
                )
            } else {
                format!(
                    "fence {}, last held by {} (not live)",
                    text(&lease["fence"]),
                    text(&lease["owner"])
                )
            },
        ));
    }
    if let Some(c) = obj.get("cancel_requested").filter(|c| c.is_object()) {
        rows.push((
            "cancel",
            format!("asked by {} at {}", actor(&c["by"]), text(&c["at"])),
        ));
    }
    if let Some(c) = obj.get("closure").filter(|c| c.is_object()) {
        let fence = match &c["fence"] {
            Value::Null => String::new(),
            f => format!(" under fence {f}"),
        };
        rows.push((
            "ended by",
            format!("{} by {}{fence}", text(&c["request"]), actor(&c["actor"])),
        ));
    }
    if !v["error"].is_null() {
        rows.push(("error", text(&v["error"])));
    }
    if let Some(m) = obj.get("manifest").filter(|m| m.is_object()) {
        let steps: Vec<String> = m["steps"]
            .as_array()
            .map(|s| s.iter().map(text).collect())
            .unwrap_or_default();
        rows.push((
            "steps",
            format!(
                "{}/{}: {}",
                text(&v["current_step"]),
                steps.len(),
                steps.join(", ")
            ),
        ));
        rows.push(("executor", text(&m["executor"])));
        if let Some(req) = m["required_evidence"].as_array().filter(|r| !r.is_empty()) {
            let keys: Vec<String> = req.iter().map(text).collect();
            rows.push(("requires", keys.join(", ")));
        }
        for f in ["source_branch", "source_oid", "target_version"] {
            if m[f].is_string() {
                rows.push((f, text(&m[f])));
            }
        }
    }
    if !v["run_id"].is_null() {
        rows.push((
            "run",
            format!("{} (executor {})", text(&v["run_id"]), text(&v["executor"])),
        ));
    }
    if let Some(e) = v["evidence"].as_object().filter(|e| !e.is_empty()) {
        for (k, h) in e {
            rows.push((
                "evidence",
                format!("{} = {}", escape_unprintable(k), text(h)),
            ));
        }
    }
    if let Some(n) = obj.get("node").filter(|n| n.is_object()) {
        let mut s = format!("{}, priority {}", text(&n["queue"]), text(&n["priority"]));
        if let Some(d) = n["depends_on"].as_array().filter(|d| !d.is_empty()) {
            let d: Vec<String> = d.iter().map(text).collect();
            s.push_str(&format!(", after {}", d.join(", ")));
        }
        if n["key"].is_string() {
            s.push_str(&format!(", key {}", text(&n["key"])));
        }
        rows.push(("queue", s));
        if !n["not_before"].is_null() {
            rows.push(("not before", when(&n["not_before"], now)));
        }
        if n["parked"] == Value::Bool(true) {
            rows.push(("parked", "waiting for a slot of its key".to_owned()));
        }
        let retry = if n["retry"].is_object() {
            &n["retry"]
        } else {
            &n["queue_retry"]
        };
        if retry.is_object() {
            rows.push(("retry", retry_text(retry)));
        }
    }
    if let Some(d) = v["dependents"].as_array().filter(|d| !d.is_empty()) {
        let d: Vec<String> = d.iter().map(text).collect();
        rows.push(("dependents", d.join(", ")));
    }
    for c in v["checkpoints"].as_array().into_iter().flatten() {
        let mut s = format!(
            "{} under fence {}: {}",
            escape_unprintable(&text(&c["step"])),
            text(&c["fence"]),
            escape_unprintable(&c["output"].to_string())
        );
        if let Some(t) = c["spawned"].as_array().filter(|t| !t.is_empty()) {
            let t: Vec<String> = t.iter().map(text).collect();
            s.push_str(&format!(", added {}", t.join(", ")));
        }
        rows.push(("step", s));
    }
    for (label, field) in [
        ("created", "created_at"),
        ("started", "started_at"),
        ("finished", "finished_at"),
        ("pruned", "pruned_at"),
        ("updated", "updated_at"),
    ] {
        if !v[field].is_null() {
            rows.push((label, when(&v[field], now)));
        }
    }
    if let Some(m) = v["metadata"].as_object().filter(|m| !m.is_empty()) {
        rows.push(("metadata", Value::Object(m.clone()).to_string()));
    }
    for field in ["schedule", "schedule_failure", "key_limit", "queue_policy"] {
        if obj.get(field).is_some_and(|x| !x.is_null()) {
            rows.push((field, text(&v[field])));
        }
    }
    let width = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
    let mut out = head;
    for (l, r) in rows {
        out.push_str(&format!("\n  {l:<width$}  {r}"));
    }
    out
}

/// Who acted, as the event table writes it.
fn actor(a: &Value) -> String {
    match (a["role"].as_str(), a["id"].as_str()) {
        (Some("operator"), Some(id)) => format!("operator:{}", escape_unprintable(id)),
        (_, Some(id)) => escape_unprintable(id),
        (Some(role), None) => role.to_owned(),
        _ => "-".to_owned(),
    }
}

fn lines(items: &[Value], line: impl Fn(&Value) -> String) -> String {
    items.iter().map(|v| line(v) + "\n").collect()
}

fn grant_line(v: &Value, now: baton_core::Timestamp, colour: Colour) -> String {
    if v.get("fence").is_none() || v.get("owner").is_none() {
        return human(std::slice::from_ref(v), None);
    }
    let again = if v["idempotent"] == Value::Bool(true) {
        " (a repeat)"
    } else {
        ""
    };
    format!(
        "{} {} to {}: fence {}, attempt {}, {}, expires {} ({}){again}",
        colour.paint("32", "granted"),
        text(&v["task"]),
        text(&v["owner"]),
        text(&v["fence"]),
        text(&v["attempt"]),
        colour.state(&text(&v["state"])),
        relative(&v["expiry"], now),
        text(&v["expiry"]),
    )
}

fn refusal_line(v: &Value, colour: Colour) -> String {
    format!(
        "{} {}: {}",
        colour.paint("31", "refused"),
        text(&v["refused"]),
        text(&v["message"]),
    )
}

fn table(header: &[&str], rows: &[Vec<String>], next: Option<&str>) -> String {
    let widths: Vec<usize> = header
        .iter()
        .enumerate()
        .map(|(i, h)| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([h.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[String]| -> String {
        let mut l = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ");
        l.truncate(l.trim_end().len());
        l + "\n"
    };
    let mut out = String::new();
    if rows.is_empty() {
        out.push_str("(none)\n");
    } else {
        let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
        out.push_str(&line(&header));
        for r in rows {
            out.push_str(&line(r));
        }
    }
    if let Some(n) = next {
        out.push_str(&format!("next page: --after {}\n", escape_unprintable(n)));
    }
    out
}

fn graph_table(items: &[Value]) -> String {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|v| {
            let after: Vec<String> = v["depends_on"]
                .as_array()
                .into_iter()
                .flatten()
                .map(text)
                .collect();
            vec![
                text(&v["task"]),
                text(&v["shown"]),
                text(&v["queue"]),
                text(&v["priority"]),
                text(&v["holder"]),
                after.join(","),
            ]
        })
        .collect();
    table(
        &["TASK", "STATE", "QUEUE", "PRIORITY", "HOLDER", "AFTER"],
        &rows,
        None,
    )
}

/// A graph as Graphviz dot: a node per task labelled with its state (and
/// holder), an edge from each dependency to its dependent.
fn dot(items: &[Value]) -> String {
    let q = |s: &str| {
        let escaped: String = escape_unprintable(s)
            .chars()
            .flat_map(|c| match c {
                '"' | '\\' => vec!['\\', c],
                c => vec![c],
            })
            .collect();
        format!("\"{escaped}\"")
    };
    let mut out = String::from("digraph baton {\n  rankdir=LR;\n  node [shape=box];\n");
    for v in items {
        let task = text(&v["task"]);
        let mut label = format!("{task}\\n{}", text(&v["shown"]));
        if let Some(h) = v["holder"].as_str() {
            label.push_str(&format!("\\n{h}"));
        }
        let colour = match v["shown"].as_str().unwrap_or_default() {
            "SUCCEEDED" => "palegreen",
            "READY" => "lightblue",
            "CLAIMED" | "RUNNING" => "khaki",
            "BLOCKED" | "FAILED" | "CANCELLED" | "STALLED" | "NOT_STARTED" => "lightpink",
            _ => "white",
        };
        out.push_str(&format!(
            "  {} [label={}, style=filled, fillcolor={colour}];\n",
            q(&task),
            q(&label).replace("\\\\n", "\\n")
        ));
        for d in v["depends_on"].as_array().into_iter().flatten() {
            out.push_str(&format!("  {} -> {};\n", q(&text(d)), q(&task)));
        }
    }
    out.push_str("}\n");
    out
}

fn task_table(
    items: &[Value],
    next: Option<&str>,
    now: baton_core::Timestamp,
    colour: Colour,
) -> String {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|r| {
            let lease = &r["lease"];
            let held = matches!(r["state"].as_str(), Some("CLAIMED" | "RUNNING"));
            let steps = r["manifest"]["steps"].as_array().map(Vec::len);
            vec![
                text(&r["task"]),
                // The shown state of a graph task (READY, BLOCKED) if any.
                text(if r["shown"].is_string() {
                    &r["shown"]
                } else {
                    &r["state"]
                }),
                if held {
                    text(&lease["owner"])
                } else {
                    "-".to_owned()
                },
                text(&lease["fence"]),
                if held {
                    relative(&lease["expires_at"], now)
                } else {
                    "-".to_owned()
                },
                text(&r["attempt"]),
                match steps {
                    Some(n) => format!("{}/{n}", text(&r["current_step"])),
                    None => "-".to_owned(),
                },
            ]
        })
        .collect();
    let t = table(
        &[
            "TASK", "STATE", "OWNER", "FENCE", "EXPIRES", "ATTEMPT", "STEP",
        ],
        &rows,
        next,
    );
    paint_column(t, 1, &rows, colour)
}

fn event_table(items: &[Value], next: Option<&str>) -> String {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|e| {
            let count = e["count"].as_u64().filter(|c| *c > 1);
            let kind = match count {
                Some(c) => format!("{} x{c}", text(&e["kind"])),
                None => text(&e["kind"]),
            };
            vec![
                text(&e["seq"]),
                text(&e["at"]),
                text(&e["task"]),
                kind,
                event_move(e),
                actor(&e["actor"]),
                text(&e["fence"]),
                match &e["details"] {
                    Value::Object(d) if d.is_empty() => "-".to_owned(),
                    Value::Null => "-".to_owned(),
                    d => text(d),
                },
            ]
        })
        .collect();
    table(
        &[
            "SEQ", "AT", "TASK", "KIND", "FROM->TO", "ACTOR", "FENCE", "DETAILS",
        ],
        &rows,
        next,
    )
}

/// An event's move: `REGISTERED->CLAIMED`, `new->DECLARED` for a task's
/// first event.
fn event_move(e: &Value) -> String {
    let from = match &e["from"] {
        Value::Null => "new".to_owned(),
        f => text(f),
    };
    format!("{from}->{}", text(&e["to"]))
}

/// One event on one line, for `events --follow` (no table to align).
pub fn event_line(e: &Value) -> String {
    let mut l = format!(
        "{}  {}  {}  {}  {}  {}",
        text(&e["seq"]),
        text(&e["at"]),
        text(&e["task"]),
        text(&e["kind"]),
        event_move(e),
        actor(&e["actor"]),
    );
    if !e["fence"].is_null() {
        l.push_str(&format!("  fence {}", text(&e["fence"])));
    }
    if let Some(d) = e["details"].as_object().filter(|d| !d.is_empty()) {
        l.push_str(&format!("  {}", Value::Object(d.clone())));
    }
    l
}

/// Colours the state column of a finished table (widths were measured
/// on the plain text, so alignment holds).
fn paint_column(table: String, column: usize, rows: &[Vec<String>], colour: Colour) -> String {
    if !colour.0 || rows.is_empty() {
        return table;
    }
    let mut out = String::new();
    for (i, line) in table.lines().enumerate() {
        match i.checked_sub(1).and_then(|r| rows.get(r)) {
            Some(row) => {
                let state = &row[column];
                out.push_str(&line.replacen(state.as_str(), &colour.state(state), 1));
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn colour_only_on_a_terminal_and_never_with_no_color() {
        assert_eq!(Colour::decide(true, false), Colour(true));
        assert_eq!(Colour::decide(false, false), Colour(false));
        assert_eq!(Colour::decide(true, true), Colour(false));
    }

    #[test]
    fn relative_times() {
        let now = baton_core::Timestamp::from_millis(1_767_225_600_000);
        let at = |ms: i64| json!(baton_core::Timestamp::from_millis(now.as_millis() + ms));
        assert_eq!(relative(&at(24_000), now), "in 24s");
        assert_eq!(relative(&at(-3_000), now), "3s ago");
        assert_eq!(relative(&at(0), now), "now");
        assert_eq!(relative(&at(600_000), now), "in 10m00s");
        assert_eq!(relative(&at(117_000), now), "in 1m57s");
        assert_eq!(relative(&at(-3 * 86_400_000), now), "3d00h ago");
        assert_eq!(duration(750), "750ms");
        assert_eq!(duration(7_500_000), "2h05m");
        assert_eq!(relative(&json!(null), now), "-");
    }
}
