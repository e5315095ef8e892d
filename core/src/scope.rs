//! What a scoped token may act on ([`Scope`]): a word of its own, so the
//! requests that carry it, the `next` queries and the access rule that
//! sets it all name it without depending on each other.

use crate::error::{Error, Result};
use crate::id::Id;

/// The tasks a scoped token may act on: those in one of its queues, or
/// whose id starts with one of its prefixes (`scope=queue:ci,prefix:agent-*`
/// on a token line). Checked in core's decision against the record the
/// commit read (`Preconditions::within`),
/// so a worker's claim, report or `next` and an operator's act all meet
/// the same rule; a task outside it is not permitted, and nothing is written.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Scope {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queues: Vec<Id>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prefixes: Vec<String>,
}

impl Scope {
    /// `queue:Q` and `prefix:P*` rules, comma-separated (at least one).
    pub fn parse(text: &str) -> Result<Scope> {
        let bad = |rule: String| Error::invalid("scope", rule);
        let mut scope = Scope {
            queues: Vec::new(),
            prefixes: Vec::new(),
        };
        for rule in text.split(',') {
            if let Some(q) = rule.strip_prefix("queue:") {
                scope.queues.push(Id::parse("scope", q)?);
            } else if let Some(p) = rule.strip_prefix("prefix:") {
                let p = p
                    .strip_suffix('*')
                    .ok_or_else(|| bad(format!("a prefix rule ends with `*` (got {rule:?})")))?;
                Id::parse("scope", p)?;
                scope.prefixes.push(p.to_owned());
            } else {
                return Err(bad(format!(
                    "a rule is queue:QUEUE or prefix:PREFIX* (got {rule:?})"
                )));
            }
        }
        Ok(scope)
    }

    /// Whether a task with id `task`, in queue `queue` (`None`: outside
    /// the work graph, or not there yet), is in this scope.
    pub fn admits(&self, task: &str, queue: Option<&str>) -> bool {
        self.prefixes.iter().any(|p| task.starts_with(p.as_str()))
            || queue.is_some_and(|q| self.queues.iter().any(|s| s.as_str() == q))
    }

    /// Whether `next` may name `queue` for this scope: one of its queues,
    /// or any when it has prefixes (then only their tasks are taken).
    pub fn admits_queue(&self, queue: &Id) -> bool {
        !self.prefixes.is_empty() || self.queues.contains(queue)
    }

    /// The refusal of `task` outside this scope.
    pub fn refusal(&self, task: &str) -> Error {
        let rules: Vec<String> = self
            .queues
            .iter()
            .map(|q| format!("queue:{q}"))
            .chain(self.prefixes.iter().map(|p| format!("prefix:{p}*")))
            .collect();
        Error::not_permitted(format!(
            "{task} is outside the scope of this token ({})",
            rules.join(",")
        ))
    }
}
