//! The manifest of a declared task (SPEC §6): what was declared, validated
//! and normalised so that two manifests are the same exactly when their
//! normalised forms are equal.

use crate::error::Error;
use crate::id::{Id, TaskId};
use crate::kinds::EventKind;
use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// The largest manifest accepted, in bytes of JSON.
pub const MAX_MANIFEST_BYTES: usize = 64 * 1024;
/// The most steps a manifest may list.
pub const MAX_STEPS: usize = 1000;
/// The most evidence keys a manifest may require or a success may carry.
pub const MAX_EVIDENCE_KEYS: usize = 100;
/// The longest `heartbeat_timeout_seconds` and `start_deadline_seconds`:
/// 7 days, the same ceiling as a lease TTL.
pub const MAX_DURATION_SECONDS: u64 = 7 * 24 * 3600;
/// The only manifest version this build understands.
pub const MANIFEST_VERSION: &str = "baton.task.v1";

const FIELDS: &[&str] = &[
    "task_id",
    "executor",
    "source_branch",
    "source_oid",
    "target_version",
    "steps",
    "start_deadline_seconds",
    "heartbeat_timeout_seconds",
    "required_evidence",
    "notification_events",
    "owner_notification_ref",
    "manifest_version",
    "max_attempts",
    "lock_delay_seconds",
    "timeout_seconds",
    "depends_on",
    "queue",
    "priority",
    "retry",
    "key",
];

/// A validated, normalised manifest. Build one with [`Manifest::from_json`]
/// or [`Manifest::from_value`]; every field obeys SPEC §6.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    pub task_id: TaskId,
    pub executor: Id,
    /// Where the work comes from and what it makes, for work that has a
    /// source (CI, releases); empty when not given.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source_branch: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source_oid: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub target_version: String,
    pub steps: Vec<String>,
    pub start_deadline_seconds: u64,
    pub heartbeat_timeout_seconds: u64,
    pub required_evidence: BTreeSet<String>,
    pub notification_events: BTreeSet<EventKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_notification_ref: Option<String>,
    pub manifest_version: String,
    pub max_attempts: u32,
    /// After a lease expires without being released, how long no one may
    /// be granted the task (0: none), so a holder that vanished has time to die.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lock_delay_seconds: u64,
    /// The most one attempt may run, from the grant that starts it, however
    /// often it is renewed (0: no limit).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub timeout_seconds: u64,
    /// Tasks that must SUCCEED before this one is ready (sorted, no repeats).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<TaskId>,
    /// The queue `task next` takes it from (`None`: the default queue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<Id>,
    /// Higher runs first among ready tasks of its queue.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub priority: i64,
    /// How a failed attempt (`task fail`) is tried again, as a graph
    /// node's `retry` (`None`: a failure is final). Stalls stay counted by
    /// `max_attempts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<crate::graph::RetryPolicy>,
    /// A concurrency key, as a graph node's `key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<Id>,
}

fn is_zero_i64(n: &i64) -> bool {
    *n == 0
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Manifest {
    /// Parses and validates a manifest from JSON text.
    pub fn from_json(text: &str) -> Result<Manifest, Error> {
        if text.len() > MAX_MANIFEST_BYTES {
            return Err(Error::invalid(
                "manifest",
                format!(
                    "must be at most {MAX_MANIFEST_BYTES} bytes (got {})",
                    text.len()
                ),
            ));
        }
        let value = crate::json::parse_strict("manifest", text)?;
        Manifest::from_value(&value)
    }

    /// Validates and normalises a manifest given as a JSON value.
    pub fn from_value(value: &Value) -> Result<Manifest, Error> {
        let size = serde_json::to_string(value)
            .map(|s| s.len())
            .unwrap_or(usize::MAX);
        if size > MAX_MANIFEST_BYTES {
            return Err(Error::invalid(
                "manifest",
                format!("must be at most {MAX_MANIFEST_BYTES} bytes (got {size})"),
            ));
        }
        let obj = value
            .as_object()
            .ok_or_else(|| Error::invalid("manifest", "must be a JSON object"))?;
        if let Some(unknown) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(Error::invalid(
                unknown.as_str(),
                format!("unknown manifest field (known: {})", FIELDS.join(", ")),
            ));
        }
        // Every required field that is missing, named at once.
        let missing: Vec<&str> = ["task_id", "executor", "steps"]
            .into_iter()
            .filter(|f| obj.get(*f).is_none_or(Value::is_null))
            .collect();
        if let Some(first) = missing.first() {
            let rest = &missing[1..];
            let also = if rest.is_empty() {
                String::new()
            } else {
                format!("; also missing: {}", rest.join(", "))
            };
            return Err(Error::invalid(
                *first,
                format!(
                    "is required (a manifest needs task_id, executor and steps; see docs/manifest.json){also}"
                ),
            ));
        }
        let task_id = Id::parse("task_id", &required_string(obj, "task_id")?)?;
        let executor = Id::parse("executor", &required_string(obj, "executor")?)?;
        let steps = match obj.get("steps") {
            None => return Err(Error::invalid("steps", "is required (1 to 1000 steps)")),
            Some(v) => string_list(v, "steps")?,
        };
        if steps.is_empty() {
            return Err(Error::invalid("steps", "must list at least one step"));
        }
        if steps.len() > MAX_STEPS {
            return Err(Error::invalid(
                "steps",
                format!("must list at most {MAX_STEPS} steps (got {})", steps.len()),
            ));
        }
        let required_evidence: BTreeSet<String> = match obj.get("required_evidence") {
            None => BTreeSet::new(),
            Some(v) => string_list(v, "required_evidence")?
                .into_iter()
                .map(|k| Id::parse("required_evidence", &k).map(|id| id.as_str().to_owned()))
                .collect::<Result<_, _>>()?,
        };
        if required_evidence.len() > MAX_EVIDENCE_KEYS {
            return Err(Error::invalid(
                "required_evidence",
                format!("must name at most {MAX_EVIDENCE_KEYS} keys"),
            ));
        }
        let notification_events = match obj.get("notification_events") {
            None => [EventKind::Started, EventKind::Succeeded, EventKind::Failed].into(),
            Some(v) => string_list(v, "notification_events")?
                .iter()
                .map(|name| {
                    EventKind::from_name(name).ok_or_else(|| {
                        Error::invalid(
                            "notification_events",
                            format!("unknown event type {name:?}"),
                        )
                    })
                })
                .collect::<Result<BTreeSet<_>, _>>()?,
        };
        let owner_notification_ref = match obj.get("owner_notification_ref") {
            None | Some(Value::Null) => None,
            Some(_) => Some(required_string(obj, "owner_notification_ref")?),
        };
        let manifest_version = match obj.get("manifest_version") {
            None => MANIFEST_VERSION.to_owned(),
            Some(_) => required_string(obj, "manifest_version")?,
        };
        if manifest_version != MANIFEST_VERSION {
            return Err(Error::invalid(
                "manifest_version",
                format!("must be {MANIFEST_VERSION:?} (got {manifest_version:?})"),
            ));
        }
        let max_attempts = positive(obj, "max_attempts", 1)?;
        let max_attempts = u32::try_from(max_attempts)
            .map_err(|_| Error::invalid("max_attempts", "must be at most 4294967295"))?;
        let depends_on = match obj.get("depends_on") {
            None | Some(Value::Null) => Vec::new(),
            Some(v) => string_list(v, "depends_on")?
                .iter()
                .map(|d| Id::parse("depends_on", d))
                .collect::<Result<Vec<_>, _>>()?,
        };
        let queue = match obj.get("queue") {
            None | Some(Value::Null) => None,
            Some(_) => Some(Id::parse("queue", &required_string(obj, "queue")?)?),
        };
        let priority = match obj.get("priority") {
            None | Some(Value::Null) => 0,
            Some(v) => v
                .as_i64()
                .ok_or_else(|| Error::invalid("priority", "must be a whole number"))?,
        };
        let key = match obj.get("key") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(Id::parse("key", s)?),
            Some(_) => return Err(Error::invalid("key", "must be a string")),
        };
        let node = crate::graph::NodeSpec::new(&task_id, queue, priority, depends_on)?
            .with_retry(crate::graph::parse_retry(obj.get("retry"))?)?
            .with_key(key)?;
        Ok(Manifest {
            task_id,
            executor,
            source_branch: optional_string(obj, "source_branch")?,
            source_oid: optional_string(obj, "source_oid")?,
            target_version: optional_string(obj, "target_version")?,
            steps,
            start_deadline_seconds: duration_seconds(obj, "start_deadline_seconds", 300)?,
            heartbeat_timeout_seconds: duration_seconds(obj, "heartbeat_timeout_seconds", 180)?,
            required_evidence,
            notification_events,
            owner_notification_ref,
            manifest_version,
            max_attempts,
            lock_delay_seconds: lock_delay_seconds(obj)?,
            timeout_seconds: timeout_seconds(obj)?,
            depends_on: node.depends_on,
            queue: (node.queue.as_str() != crate::graph::DEFAULT_QUEUE).then_some(node.queue),
            priority: node.priority,
            retry: node.retry,
            key: node.key,
        })
    }

    /// The task's place in the work graph.
    pub fn node_spec(&self) -> crate::graph::NodeSpec {
        let queue = match &self.queue {
            Some(q) => q.clone(),
            // The default queue's name is a valid id.
            None => Id::parse("queue", crate::graph::DEFAULT_QUEUE).expect("a valid id"),
        };
        crate::graph::NodeSpec {
            queue,
            priority: self.priority,
            depends_on: self.depends_on.clone(),
            timeout_ms: self.timeout_ms(),
            start: None,
            retry: self.retry,
            key: self.key.clone(),
            traceparent: None,
        }
    }

    /// The run-time limit of each attempt, if any.
    pub fn timeout_ms(&self) -> Option<u64> {
        (self.timeout_seconds > 0).then(|| self.timeout_seconds.saturating_mul(1000))
    }

    /// The lease TTL of this task in milliseconds: one clock for stalling.
    pub fn heartbeat_timeout_ms(&self) -> u64 {
        self.heartbeat_timeout_seconds.saturating_mul(1000)
    }

    pub fn start_deadline_ms(&self) -> u64 {
        self.start_deadline_seconds.saturating_mul(1000)
    }

    pub fn lock_delay_ms(&self) -> u64 {
        self.lock_delay_seconds.saturating_mul(1000)
    }

    /// Whether `other` differs from `self` in `source_oid` alone.
    pub fn differs_only_in_source_oid(&self, other: &Manifest) -> bool {
        let mut a = self.clone();
        a.source_oid.clone_from(&other.source_oid);
        &a == other && self.source_oid != other.source_oid
    }
}

/// A string that may be left out (empty then); given, it obeys the rule
/// of a required one.
fn optional_string(obj: &Map<String, Value>, field: &str) -> Result<String, Error> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(_) => required_string(obj, field),
    }
}

fn required_string(obj: &Map<String, Value>, field: &str) -> Result<String, Error> {
    match obj.get(field) {
        None | Some(Value::Null) => Err(Error::invalid(field, "is required")),
        Some(Value::String(s)) => {
            let t = s.trim();
            if t.is_empty() {
                Err(Error::invalid(field, "must not be empty"))
            } else {
                Ok(t.to_owned())
            }
        }
        Some(_) => Err(Error::invalid(field, "must be a string")),
    }
}

fn string_list(v: &Value, field: &str) -> Result<Vec<String>, Error> {
    let items = v
        .as_array()
        .ok_or_else(|| Error::invalid(field, "must be a list of strings"))?;
    items
        .iter()
        .map(|item| match item {
            Value::String(s) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
            Value::String(_) => Err(Error::invalid(field, "entries must not be empty")),
            _ => Err(Error::invalid(field, "entries must be strings")),
        })
        .collect()
}

fn positive(obj: &Map<String, Value>, field: &str, default: u64) -> Result<u64, Error> {
    match obj.get(field) {
        None => Ok(default),
        Some(v) => match v.as_u64() {
            Some(0) => Err(Error::invalid(field, "must be greater than 0")),
            Some(n) => Ok(n),
            None => Err(Error::invalid(field, "must be a positive whole number")),
        },
    }
}

/// A duration in whole seconds, from 1 to [`MAX_DURATION_SECONDS`].
fn duration_seconds(obj: &Map<String, Value>, field: &str, default: u64) -> Result<u64, Error> {
    let n = positive(obj, field, default)?;
    if n > MAX_DURATION_SECONDS {
        return Err(Error::invalid(
            field,
            format!("must be at most {MAX_DURATION_SECONDS} (7 days; got {n})"),
        ));
    }
    Ok(n)
}

/// `lock_delay_seconds`: 0 (the default) to [`MAX_DURATION_SECONDS`].
fn lock_delay_seconds(obj: &Map<String, Value>) -> Result<u64, Error> {
    const FIELD: &str = "lock_delay_seconds";
    match obj.get(FIELD) {
        None => Ok(0),
        Some(v) => match v.as_u64() {
            Some(n) if n <= MAX_DURATION_SECONDS => Ok(n),
            Some(n) => Err(Error::invalid(
                FIELD,
                format!("must be at most {MAX_DURATION_SECONDS} (7 days; got {n})"),
            )),
            None => Err(Error::invalid(FIELD, "must be a whole number of seconds")),
        },
    }
}

fn timeout_seconds(obj: &Map<String, Value>) -> Result<u64, Error> {
    const FIELD: &str = "timeout_seconds";
    match obj.get(FIELD) {
        None | Some(Value::Null) => Ok(0),
        Some(v) => match v.as_u64() {
            Some(n) if (1..=MAX_DURATION_SECONDS).contains(&n) => Ok(n),
            Some(n) => Err(Error::invalid(
                FIELD,
                format!("must be from 1 to {MAX_DURATION_SECONDS} (7 days; got {n})"),
            )),
            None => Err(Error::invalid(FIELD, "must be a whole number of seconds")),
        },
    }
}

/// Checks an evidence hash: `sha256:` followed by 64 lowercase or uppercase hex digits.
pub fn validate_evidence_hash(field: &str, hash: &str) -> Result<(), Error> {
    let hex = hash
        .strip_prefix("sha256:")
        .ok_or_else(|| Error::invalid(field, "must be sha256: followed by 64 hex digits"))?;
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::invalid(
            field,
            "must be sha256: followed by 64 hex digits",
        ));
    }
    Ok(())
}

/// The manifest fuzz target's property, shared with the tests that replay
/// its corpus: parsing never panics, and what it accepts obeys the rules and
/// parses back to itself.
#[doc(hidden)]
pub fn fuzz_manifest(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(m) = Manifest::from_json(text) else {
        return;
    };
    assert!(!m.steps.is_empty() && m.steps.len() <= MAX_STEPS);
    assert!(m.max_attempts >= 1 && m.start_deadline_seconds > 0 && m.heartbeat_timeout_seconds > 0);
    assert!(
        m.start_deadline_seconds <= MAX_DURATION_SECONDS
            && m.heartbeat_timeout_seconds <= MAX_DURATION_SECONDS
    );
    let again = serde_json::to_string(&m)
        .ok()
        .and_then(|j| Manifest::from_json(&j).ok());
    assert_eq!(
        again.as_ref(),
        Some(&m),
        "a normalised manifest parses back to itself"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> Value {
        json!({
            "task_id": "t1", "executor": "ci", "source_branch": "main",
            "source_oid": "abc", "target_version": "1.0", "steps": ["build", "test"],
        })
    }

    fn with(field: &str, v: Value) -> Value {
        let mut m = base();
        m[field] = v;
        m
    }

    fn field_of(v: Value) -> String {
        Manifest::from_value(&v).unwrap_err().field.unwrap()
    }

    #[test]
    fn a_generic_task_needs_no_source_fields_and_missing_ones_are_named_at_once() {
        let m = Manifest::from_value(&json!({
            "task_id": "nightly-report", "executor": "cron", "steps": ["collect", "send"],
        }))
        .unwrap();
        assert_eq!(m.source_oid, "");
        let json = serde_json::to_value(&m).unwrap();
        assert!(json.get("source_oid").is_none(), "{json}");
        assert_eq!(Manifest::from_value(&json).unwrap(), m);
        let e = Manifest::from_value(&json!({"task_id": "t"})).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("executor"));
        assert!(e.message.contains("also missing: steps"), "{e}");
        assert_eq!(field_of(with("source_oid", json!("  "))), "source_oid");
        let example = include_str!("../../docs/manifest.json");
        let m = Manifest::from_json(example).expect("docs/manifest.json is a valid manifest");
        assert_eq!(m.task_id.as_str(), "rel-1");
    }

    #[test]
    fn defaults_and_normalisation() {
        let m = Manifest::from_value(&with("required_evidence", json!(["b", "a", "b"]))).unwrap();
        assert_eq!(m.start_deadline_seconds, 300);
        assert_eq!(m.heartbeat_timeout_seconds, 180);
        assert_eq!(m.max_attempts, 1);
        assert_eq!(m.manifest_version, MANIFEST_VERSION);
        assert_eq!(m.required_evidence.iter().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(m.notification_events.len(), 3);
        let a = Manifest::from_value(&with("required_evidence", json!(["a", "b"]))).unwrap();
        assert_eq!(a, m, "sets are compared after sorting and de-duplication");
        let padded = Manifest::from_value(&with("source_branch", json!("  main "))).unwrap();
        assert_eq!(padded.source_branch, "main");
    }

    #[test]
    fn each_rule_names_its_field() {
        assert_eq!(field_of(with("colour", json!("red"))), "colour");
        assert_eq!(
            field_of(with("source_branch", json!("  "))),
            "source_branch"
        );
        assert_eq!(field_of(with("steps", json!([]))), "steps");
        assert_eq!(field_of(with("steps", json!(["a", " "]))), "steps");
        assert_eq!(
            field_of(with("start_deadline_seconds", json!(0))),
            "start_deadline_seconds"
        );
        assert_eq!(
            field_of(with("heartbeat_timeout_seconds", json!(-3))),
            "heartbeat_timeout_seconds"
        );
        assert_eq!(
            field_of(with("heartbeat_timeout_seconds", json!(300_000_000_000u64))),
            "heartbeat_timeout_seconds"
        );
        assert_eq!(
            field_of(with("start_deadline_seconds", json!(604_801))),
            "start_deadline_seconds"
        );
        assert!(Manifest::from_value(&with("heartbeat_timeout_seconds", json!(604_800))).is_ok());
        assert_eq!(
            field_of(with("timeout_seconds", json!(0))),
            "timeout_seconds"
        );
        assert_eq!(
            field_of(with("timeout_seconds", json!(604_801))),
            "timeout_seconds"
        );
        assert_eq!(
            field_of(with("timeout_seconds", json!("10m"))),
            "timeout_seconds"
        );
        let limited = Manifest::from_value(&with("timeout_seconds", json!(90))).unwrap();
        assert_eq!(limited.node_spec().timeout_ms, Some(90_000));
        assert_eq!(field_of(with("max_attempts", json!(0))), "max_attempts");
        assert_eq!(
            field_of(with("manifest_version", json!("v9"))),
            "manifest_version"
        );
        assert_eq!(
            field_of(with("notification_events", json!(["BOGUS"]))),
            "notification_events"
        );
        assert_eq!(field_of(with("task_id", json!("a\u{1}b"))), "task_id");
        let steps: Vec<String> = (0..1001).map(|i| format!("s{i}")).collect();
        assert_eq!(field_of(with("steps", json!(steps))), "steps");
        let keys: Vec<String> = (0..101).map(|i| format!("k{i}")).collect();
        assert_eq!(
            field_of(with("required_evidence", json!(keys))),
            "required_evidence"
        );
        let mut m = base();
        m.as_object_mut().unwrap().remove("executor");
        assert_eq!(field_of(m), "executor");
        let huge = with("target_version", json!("x".repeat(70_000)));
        assert_eq!(field_of(huge), "manifest");
        assert_eq!(
            Manifest::from_json("{").unwrap_err().field.as_deref(),
            Some("manifest")
        );
    }

    #[test]
    fn supersede_rule_compares_everything_but_source_oid() {
        let a = Manifest::from_value(&base()).unwrap();
        let b = Manifest::from_value(&with("source_oid", json!("def"))).unwrap();
        let c = Manifest::from_value(&with("target_version", json!("2.0"))).unwrap();
        assert!(a.differs_only_in_source_oid(&b));
        assert!(!a.differs_only_in_source_oid(&c));
        assert!(!a.differs_only_in_source_oid(&a));
    }

    #[test]
    fn evidence_hashes() {
        let good = format!("sha256:{}", "a".repeat(64));
        assert!(validate_evidence_hash("evidence.k", &good).is_ok());
        for bad in [
            "",
            "sha256:",
            "md5:abc",
            &format!("sha256:{}", "g".repeat(64)),
        ] {
            let e = validate_evidence_hash("evidence.k", bad).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("evidence.k"));
        }
        assert!(validate_evidence_hash("e", &format!("sha256:{}", "a".repeat(63))).is_err());
    }
}
