use super::*;
use serde_json::json;

fn made(op: &str, v: Value) -> Result<Call> {
    call(op, Given::new(v)?)
}

fn refused_on(op: &str, v: Value) -> String {
    match made(op, v) {
        Err(e) => e.field.unwrap_or_default(),
        Ok(c) => panic!("{op} made {c:?}"),
    }
}

#[test]
fn a_duration_is_text_or_milliseconds_under_its_kinds_bounds() {
    let by_text = made("claim", json!({"task": "t", "owner": "w", "ttl": "1m30s"})).unwrap();
    let by_ms = made("claim", json!({"task": "t", "owner": "w", "ttl": 90_000})).unwrap();
    assert_eq!(by_text, by_ms);
    let Call::Write {
        request: Request::Claim { ttl_ms, .. },
        ..
    } = by_ms
    else {
        panic!("a claim is a write")
    };
    assert_eq!(ttl_ms, Some(90_000));
    assert_eq!(
        refused_on("claim", json!({"task": "t", "owner": "w", "ttl": "8d"})),
        "ttl"
    );
    assert_eq!(
        refused_on("next", json!({"owner": "w", "wait": 3_600_001})),
        "wait"
    );
}

#[test]
fn an_input_the_operation_does_not_take_is_refused_by_name() {
    assert_eq!(
        refused_on("holder", json!({"task": "t", "fence": 3})),
        "fence"
    );
    // A null is not given.
    assert!(made("holder", json!({"task": "t", "fence": null})).is_ok());
    assert_eq!(refused_on("claim", json!({"owner": "w"})), "task");
    assert_eq!(
        refused_on("renew", json!({"task": "t", "owner": "w", "fence": 0})),
        "fence"
    );
    assert_eq!(refused_on("no_such_op", json!({})), "op");
}

#[test]
fn a_cancel_is_the_holders_or_an_operators_never_both() {
    let worker = made("cancel", json!({"task": "t", "owner": "w", "fence": 2})).unwrap();
    assert!(matches!(
        worker,
        Call::Write {
            request: Request::Cancel {
                by: Actor::Worker(_),
                fence: Some(2),
                force: false
            },
            ..
        }
    ));
    let cascade = made(
        "cancel",
        json!({"task": "t", "operator": "ops", "cascade": true}),
    )
    .unwrap();
    assert!(matches!(cascade, Call::CancelCascade { force: false, .. }));
    // What only an operator may ask, asked by a holder.
    assert_eq!(
        refused_on(
            "cancel",
            json!({"task": "t", "owner": "w", "fence": 2, "force": true})
        ),
        "force"
    );
    assert_eq!(
        refused_on(
            "cancel",
            json!({"task": "t", "owner": "w", "fence": 2, "cascade": true})
        ),
        "cascade"
    );
    assert_eq!(
        refused_on(
            "cancel",
            json!({"task": "t", "owner": "w", "operator": "ops"})
        ),
        "owner"
    );
}

#[test]
fn an_add_is_one_task_or_a_graph_file_read_by_the_front_end() {
    let one = made(
        "add",
        json!({"task": "b", "after": ["a"], "priority": 3, "timeout": "10m"}),
    );
    assert!(matches!(
        one,
        Ok(Call::Write {
            request: Request::Add { .. },
            ..
        })
    ));
    // A graph with no reader has nothing to read.
    assert_eq!(refused_on("add", json!({})), "graph");
    let mut asked = Vec::new();
    let given = Given::new(json!({"file": "g.json", "priority": 0, "after": []}))
        .unwrap()
        .reading(Box::new(|name, file, limit| {
            asked.push((name.to_owned(), file.map(str::to_owned), limit));
            Ok(r#"{"nodes": [{"task": "a"}, {"task": "b", "after": ["a"]}]}"#.to_owned())
        }));
    let Call::AddGraph { nodes } = call("add", given).unwrap() else {
        panic!("a graph")
    };
    assert_eq!(nodes.len(), 2);
    assert_eq!(
        asked,
        [(
            "graph".to_owned(),
            Some("g.json".to_owned()),
            crate::workgraph::MAX_GRAPH_BYTES + 1
        )]
    );
    // A node's place given beside a graph describes no node of it.
    let given = Given::new(json!({"queue": "ci"}))
        .unwrap()
        .reading(Box::new(|_, _, _| Ok("[]".to_owned())));
    assert_eq!(
        call("add", given).unwrap_err().field.as_deref(),
        Some("queue")
    );
    assert_eq!(
        refused_on("add", json!({"task": "b", "file": "g.json"})),
        "file"
    );
}

#[test]
fn a_limit_is_a_number_or_none_and_errors_and_evidence_take_either_form() {
    let none = made(
        "limit",
        json!({"key": "k", "limit": "none", "operator": "ops"}),
    )
    .unwrap();
    assert!(matches!(
        none,
        Call::Write {
            request: Request::Limit { limit: None, .. },
            ..
        }
    ));
    assert_eq!(
        refused_on(
            "limit",
            json!({"key": "k", "limit": "-1", "operator": "ops"})
        ),
        "limit"
    );
    let text = made(
        "fail",
        json!({"task": "t", "owner": "w", "fence": 1, "error": "{\"why\": \"disk\"}"}),
    )
    .unwrap();
    let object = made(
        "fail",
        json!({"task": "t", "owner": "w", "fence": 1, "error": {"why": "disk"}}),
    )
    .unwrap();
    assert_eq!(text, object);
    let hash = format!("sha256:{}", "a".repeat(64));
    let pairs = made(
        "succeed",
        json!({"task": "t", "run": "r", "executor": "e", "fence": 1, "evidence": [format!("log={hash}")]}),
    )
    .unwrap();
    let map = made(
        "succeed",
        json!({"task": "t", "run": "r", "executor": "e", "fence": 1, "evidence": {"log": hash}}),
    )
    .unwrap();
    assert_eq!(pairs, map);
    assert_eq!(
        refused_on(
            "succeed",
            json!({"task": "t", "run": "r", "executor": "e", "fence": 1, "evidence": ["log"]})
        ),
        "evidence"
    );
}

#[test]
fn a_list_takes_a_queue_with_any_state_or_none() {
    assert!(matches!(
        made("list", json!({"state": "ready", "queue": "ci"})),
        Ok(Call::ListGraph {
            state: GraphState::Ready,
            ..
        })
    ));
    let ci = Id::parse("queue", "ci").unwrap();
    assert_eq!(
        made("list", json!({"state": "SUCCEEDED", "queue": "ci"})).unwrap(),
        Call::List {
            state: Some(State::Succeeded),
            queue: Some(ci.clone()),
            after: None,
            limit: 100
        }
    );
    assert_eq!(
        made("list", json!({"queue": "ci"})).unwrap(),
        Call::List {
            state: None,
            queue: Some(ci),
            after: None,
            limit: 100
        }
    );
    assert_eq!(refused_on("list", json!({"queue": ""})), "queue");
    // A state that is none: the error names READY and BLOCKED too.
    let e = made("list", json!({"state": "STUCK"})).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("state"));
    assert!(
        e.message.contains("BLOCKED") && e.message.contains("READY"),
        "{e}"
    );
    assert_eq!(refused_on("list", json!({"limit": 0})), "limit");
    // An event cursor is a sequence number; a list's is an id.
    assert!(made("list", json!({"after": "page-1"})).is_ok());
    assert_eq!(refused_on("feed", json!({"after": "page-1"})), "after");
}

#[test]
fn every_operation_of_the_catalogue_is_made_here() {
    for op in crate::catalogue::OPERATIONS {
        if let Err(e) = made(op.name, json!({})) {
            assert_ne!(e.field.as_deref(), Some("op"), "{}: {e}", op.name);
        }
    }
}
