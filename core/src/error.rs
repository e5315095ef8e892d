//! One error type for everything a store or the API cannot answer.
//!
//! A refusal (a lost race, a stale fence, an illegal transition) is *not* an
//! error: it is an ordinary [`crate::Refusal`] value. `Err` means the question
//! could not be answered, and its [`ErrorKind`] says what the caller may do.

use std::fmt;

/// What went wrong, and so what a caller may do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The store could not answer. Nothing was applied; retrying is safe.
    /// A caller that gets this must not start work.
    Unavailable,
    /// A write may or may not have landed. Re-read before anything else.
    Indeterminate,
    /// The store's contents cannot be trusted (not a baton store, damaged).
    Corrupt,
    /// The input broke a rule; `field` names which. Nothing was applied.
    Invalid,
    /// The store or build cannot do this (a newer schema, a compiled-out backend).
    Unsupported,
    /// The caller is not permitted to ask this (a server with tokens: no
    /// valid token, or a worker's token on an operator's request).
    /// Nothing was applied.
    NotPermitted,
}

impl ErrorKind {
    /// The name used in JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Indeterminate => "indeterminate",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::Invalid => "invalid",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::NotPermitted => "not_permitted",
        }
    }

    /// Whether retrying the same call later can succeed without changing it.
    pub fn is_temporary(self) -> bool {
        matches!(self, ErrorKind::Unavailable | ErrorKind::Indeterminate)
    }
}

/// An answer the store or the API could not give.
///
/// `message` says what happened in baton's words; `context` names the store
/// it happened in (attached once, by the backend's one mapping function);
/// `source` keeps the native error (SQLite's, sled's, etcd's) for whoever
/// needs more than the message. Two errors are equal when kind, message,
/// field and context are: the source is detail.
#[derive(Debug, Clone, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[serde(from = "ErrorWire", into = "ErrorWire")]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    /// For `Invalid`: the input field that broke a rule.
    pub field: Option<String>,
    /// The store the error came from (`sqlite /var/lib/baton.db`), if known.
    pub context: Option<String>,
    #[source]
    pub source: Option<std::sync::Arc<dyn std::error::Error + Send + Sync>>,
}

/// An error as it crosses a wire (a server's answer): everything but the
/// native source, which stays where it happened.
#[derive(serde::Serialize, serde::Deserialize)]
struct ErrorWire {
    kind: ErrorKind,
    message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    field: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    context: Option<String>,
}

impl From<ErrorWire> for Error {
    fn from(w: ErrorWire) -> Error {
        Error {
            kind: w.kind,
            message: w.message,
            field: w.field,
            context: w.context,
            source: None,
        }
    }
}

impl From<Error> for ErrorWire {
    fn from(e: Error) -> ErrorWire {
        ErrorWire {
            kind: e.kind,
            message: e.message,
            field: e.field,
            context: e.context,
        }
    }
}

impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind
            && self.message == other.message
            && self.field == other.field
            && self.context == other.context
    }
}

impl Eq for Error {}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(field) => write!(f, "{}: {}: {}", self.kind.as_str(), field, self.message),
            None => write!(f, "{}: {}", self.kind.as_str(), self.message),
        }
    }
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            field: None,
            context: None,
            source: None,
        }
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }

    pub fn indeterminate(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Indeterminate, message)
    }

    pub fn corrupt(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Corrupt, message)
    }

    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unsupported, message)
    }

    pub fn not_permitted(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotPermitted, message)
    }

    /// Bad input: names the field and the rule it broke.
    pub fn invalid(field: impl Into<String>, rule: impl Into<String>) -> Self {
        Error {
            field: Some(field.into()),
            ..Self::new(ErrorKind::Invalid, rule)
        }
    }

    /// A store URL as an error may repeat it: without its query and
    /// without credentials, either of which may hold a secret.
    pub fn shown_url(url: &str) -> String {
        let base = url.split('?').next().unwrap_or(url);
        match base.split_once("://") {
            Some((scheme, rest)) if rest.contains('@') => {
                let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
                format!("{scheme}://…@{host}")
            }
            _ => base.to_owned(),
        }
    }

    /// A store URL's parameter that its backend does not take, named by
    /// its key alone: its value is never echoed (it may be a secret a user
    /// put in the wrong place, such as `?token=`).
    pub fn unknown_url_parameter(pair: &str) -> Self {
        let key = pair.split_once('=').map_or(pair, |(k, _)| k);
        let hint = if key.eq_ignore_ascii_case("token") {
            " (a server's token goes in --token or BATON_TOKEN, never in the URL)"
        } else {
            ""
        };
        let key: String = key.chars().take(64).collect();
        Error::invalid(
            "store",
            format!("unknown store URL parameter {key:?}; its value is not shown{hint}"),
        )
    }

    /// Keeps the native error this one was made from.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(std::sync::Arc::new(source));
        self
    }

    /// Names the store the error came from, unless it is named already.
    pub fn with_context(mut self, context: impl Into<String>) -> Self {
        if self.context.is_none() {
            self.context = Some(context.into());
        }
        self
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
