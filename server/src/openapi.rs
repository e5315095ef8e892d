//! The task API's OpenAPI document (`GET /v1/openapi.json`), generated:
//! the routes, their path and query parameters and the rule of every input
//! from core's catalogue of operations (what every front end applies); each
//! request body from the type the server decodes it as (`schemars`: core's
//! `Request` variant of a task verb with its preconditions, or the route's
//! own body type), so what is published is what the routes read. The two
//! bodies that are whole files read by hand (a manifest, a graph file) are
//! described by the catalogue's schema of them.

use crate::bodies::{
    AckBody, BulkBody, CheckpointBody, LimitBody, NextBody, NoBody, OperatorBody, PruneBody,
    QueuePolicyBody, ReportsBody, ScheduleBody,
};
use baton_core::catalogue::{Input, Kind, OPERATIONS, Op};
use baton_core::{Preconditions, Request};
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

/// Where the document is served (publicly, like the page).
pub(crate) const PATH: &str = "/v1/openapi.json";

/// Inputs read from the query string of a POST (the rest are its body).
fn in_query(i: &Input) -> bool {
    i.kind == Kind::Wait || i.wire == "dry_run" || i.wire == "keep_waiting"
}

fn parameter(i: &Input, place: &str) -> Value {
    json!({
        "name": i.wire,
        "in": place,
        "required": place == "path" || i.required,
        "description": i.kind.rule(),
        "schema": i.kind.schema(),
    })
}

/// The JSON Schema of `T`, every subschema inline.
fn schema_of<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    let mut v = generator.into_root_schema_for::<T>().to_value();
    if let Some(o) = v.as_object_mut() {
        o.remove("$schema");
        o.remove("title");
    }
    v
}

/// The body of `POST /v1/tasks/{task}/VERB`: the fields of core's
/// `Request` variant `verb` (its tag is the path's verb), with `pre`, and
/// `cascade` for a cancel. `None` for a verb that is not a variant.
fn task_verb_body(verb: &str) -> Option<Value> {
    let request = schema_of::<Request>();
    let mut body = request["oneOf"]
        .as_array()?
        .iter()
        .find(|v| v["properties"]["request"]["const"] == verb)?
        .clone();
    let o = body.as_object_mut()?;
    if let Some(p) = o.get_mut("properties").and_then(Value::as_object_mut) {
        p.remove("request");
        p.insert("pre".into(), schema_of::<Preconditions>());
        if verb == "cancel" {
            p.insert(
                "cascade".into(),
                json!({"type": "boolean", "description": "an operator's cancel of every dependent too"}),
            );
        }
    }
    if let Some(r) = o.get_mut("required").and_then(Value::as_array_mut) {
        r.retain(|f| f != "request");
    }
    o.insert("additionalProperties".into(), json!(false));
    Some(body)
}

/// The schema of the body the server decodes for `op` at `path`, if it
/// decodes one as a type.
fn decoded_body(op: &Op, path: &str) -> Option<Value> {
    let body = match op.name {
        "next" | "task_next" => schema_of::<NextBody>(),
        "schedule" => schema_of::<ScheduleBody>(),
        "limit" => schema_of::<LimitBody>(),
        "queue_policy" => schema_of::<QueuePolicyBody>(),
        "queue_pause" | "queue_resume" => schema_of::<OperatorBody>(),
        "queue_retry_failed" | "queue_discard_failed" => schema_of::<BulkBody>(),
        "prune" => schema_of::<PruneBody>(),
        "ack" => schema_of::<AckBody>(),
        "sweep" | "tick" => schema_of::<NoBody>(),
        "checkpoint" => schema_of::<CheckpointBody>(),
        "report" => schema_of::<ReportsBody>(),
        verb if path == format!("/v1/tasks/{{task}}/{verb}") => task_verb_body(verb)?,
        _ => return None,
    };
    Some(body)
}

/// Adds the catalogue's rule of each input to the property of that name
/// (its description, and its numeric bounds where it has them).
fn with_rules(mut body: Value, inputs: &[Input]) -> Value {
    let Some(props) = body.get_mut("properties").and_then(Value::as_object_mut) else {
        return body;
    };
    for i in inputs {
        let rule = i.kind.schema();
        let Some(p) = props.get_mut(i.wire) else {
            continue;
        };
        // A field decoded as any JSON value (`true`, the schema of
        // anything) is held to the shape the catalogue's rule gives it.
        if *p == json!(true) || *p == json!({}) {
            *p = rule.clone();
        }
        let Some(p) = p.as_object_mut() else {
            continue;
        };
        p.insert("description".into(), json!(i.kind.rule()));
        for bound in ["minimum", "maximum"] {
            if let Some(b) = rule.get(bound) {
                p.insert(bound.into(), b.clone());
            }
        }
    }
    body
}

fn operation(op: &Op, method: &str, path: &str) -> Value {
    let mut parameters = Vec::new();
    let mut whole_body: Option<&Input> = None;
    for i in op.inputs {
        if path.contains(&format!("{{{}}}", i.name)) {
            parameters.push(parameter(i, "path"));
        } else if method == "get" || in_query(i) {
            parameters.push(parameter(i, "query"));
        } else if matches!(i.kind, Kind::Manifest | Kind::Graph) {
            // The body is the manifest or the graph file itself.
            whole_body = Some(i);
        }
    }
    let mut o = json!({
        "operationId": op.name,
        "summary": op.summary,
        "parameters": parameters,
        "responses": {
            "200": {"description": "The answer, as the CLI prints it"},
            "400": {"description": "Invalid input: the error names the field and the rule"},
            "401": {"description": "No valid bearer token (a server with tokens)"},
            "403": {"description": "The token may not ask this"},
            "404": {"description": "No such task (`refused: not_found`)"},
            "409": {"description": "Refused: the reason and its details"},
            "503": {"description": "The store could not answer; nothing was applied"},
        },
    });
    if op.operator {
        o["description"] = json!("Needs an operator's token.");
    }
    if let Some(i) = whole_body {
        o["requestBody"] = json!({
            "required": true,
            "description": i.kind.rule(),
            "content": {"application/json": {"schema": i.kind.schema()}},
        });
    } else if method == "post"
        && let Some(body) = decoded_body(op, path)
    {
        let required = body["required"].as_array().is_some_and(|r| !r.is_empty());
        o["requestBody"] = json!({
            "required": required,
            "content": {"application/json": {"schema": with_rules(body, op.inputs)}},
        });
    }
    o
}

/// The document.
pub(crate) fn document() -> Value {
    let mut paths: Map<String, Value> = Map::new();
    for op in OPERATIONS {
        let Some(route) = op.http else { continue };
        let method = route.method.to_ascii_lowercase();
        let item = paths
            .entry(route.path.to_owned())
            .or_insert_with(|| json!({}));
        match item.get_mut(&method) {
            // Two operations on one route (`next` for an owner or an
            // executor): one entry that names both.
            Some(existing) => {
                let other = operation(op, &method, route.path);
                let schema = "/requestBody/content/application~1json/schema";
                if let (Some(mine), Some(theirs)) = (
                    existing.pointer(&format!("{schema}/properties")).cloned(),
                    other.pointer(&format!("{schema}/properties")),
                ) {
                    let mut both = mine.as_object().cloned().unwrap_or_default();
                    if let Some(t) = theirs.as_object() {
                        both.extend(t.clone());
                    }
                    if let Some(s) = existing.pointer_mut(schema) {
                        s["properties"] = json!(both);
                        // Either's inputs, so neither's are required.
                        s["required"] = json!([]);
                    }
                }
                let summary = format!(
                    "{}; or {}",
                    existing["summary"].as_str().unwrap_or_default(),
                    op.summary
                );
                existing["summary"] = json!(summary);
                existing["operationId"] = json!(format!(
                    "{}_or_{}",
                    existing["operationId"].as_str().unwrap_or_default(),
                    op.name
                ));
            }
            None => item[&method] = operation(op, &method, route.path),
        }
    }
    // The routes outside the catalogue: what the page reads, the metrics
    // a scraper reads, and the health probes.
    for (path, summary, public) in [
        (
            "/v1/status",
            "What the status page shows: counts by state, queues, leases, failures, refusals, failing schedules, the sweeper, recent events",
            false,
        ),
        ("/metrics", "Prometheus metrics (OpenMetrics text)", false),
        ("/healthz", "The server answers (no store read)", true),
        ("/readyz", "The store answers a read", true),
    ] {
        let mut get = json!({
            "operationId": path.trim_start_matches('/').replace('/', "_"),
            "summary": summary,
            "responses": {
                "200": {"description": "Answered"},
                "401": {"description": "No valid bearer token (a server with tokens)"},
                "503": {"description": "The store could not answer"},
            },
        });
        if public {
            get["security"] = json!([]);
        }
        paths.insert(path.to_owned(), json!({"get": get}));
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "baton task API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Every operation of baton's catalogue that the task API serves. Answers are the JSON the CLI prints.",
        },
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": paths,
    })
}

pub(crate) async fn serve() -> axum::Json<Value> {
    axum::Json(document())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests fail by panicking
    use super::*;

    fn body<'a>(doc: &'a Value, path: &str) -> &'a Value {
        &doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    }

    fn fields(schema: &Value) -> Vec<&str> {
        schema["properties"]
            .as_object()
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default()
    }

    /// Every POST documents the body the server decodes: a task verb's is
    /// its `Request` variant's fields (with `pre`), with the catalogue's rules.
    #[test]
    fn every_post_documents_the_body_the_server_decodes() {
        let doc = document();
        for (path, item) in doc["paths"].as_object().unwrap() {
            if let Some(op) = item.get("post") {
                assert!(body(&doc, path).is_object(), "{path}: {op}");
            }
        }
        let claim = body(&doc, "/v1/tasks/{task}/claim");
        assert_eq!(fields(claim), ["lock_delay_ms", "owner", "pre", "ttl_ms"]);
        assert_eq!(claim["required"], json!(["owner"]));
        assert_eq!(claim["additionalProperties"], json!(false));
        assert_eq!(
            claim["properties"]["ttl_ms"]["maximum"],
            json!(7 * 24 * 3_600_000u64)
        );
        let cancel = body(&doc, "/v1/tasks/{task}/cancel");
        assert_eq!(fields(cancel), ["by", "cascade", "fence", "force", "pre"]);
        let by = serde_json::to_string(&cancel["properties"]["by"]).unwrap();
        assert!(by.contains("\"role\"") && by.contains("operator"), "{by}");
        let limit = body(&doc, "/v1/limits/{key}");
        assert_eq!(fields(limit), ["limit", "operator"]);
        assert_eq!(limit["required"], json!(["operator"]));
    }
}
