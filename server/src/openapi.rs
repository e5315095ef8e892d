//! The task API's OpenAPI document (`GET /v1/openapi.json`), generated
//! from core's catalogue of operations, so that what is published is what
//! the routes serve and every input carries the rule every front end
//! applies to it.

use baton_core::catalogue::{Input, Kind, OPERATIONS, Op};
use serde_json::{Map, Value, json};

/// Where the document is served (publicly, like the page).
pub(crate) const PATH: &str = "/v1/openapi.json";

/// Inputs read from the query string of a POST (the rest are its body).
fn in_query(i: &Input) -> bool {
    i.kind == Kind::Wait || i.wire == "dry_run"
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

fn operation(op: &Op, method: &str, path: &str) -> Value {
    let mut parameters = Vec::new();
    let mut body = Map::new();
    let mut required = Vec::new();
    let mut whole_body: Option<&Input> = None;
    for i in op.inputs {
        if path.contains(&format!("{{{}}}", i.name)) {
            parameters.push(parameter(i, "path"));
        } else if method == "get" || in_query(i) {
            parameters.push(parameter(i, "query"));
        } else if matches!(i.kind, Kind::Manifest | Kind::Graph) {
            // The body is the manifest or the graph file itself.
            whole_body = Some(i);
        } else {
            let mut schema = i.kind.schema();
            schema["description"] = json!(i.kind.rule());
            body.insert(i.wire.to_owned(), schema);
            if i.required {
                required.push(i.wire);
            }
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
    } else if method == "post" {
        o["requestBody"] = json!({
            "required": !required.is_empty(),
            "content": {"application/json": {"schema": {
                "type": "object",
                "properties": body,
                "required": required,
                "additionalProperties": false,
            }}},
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
