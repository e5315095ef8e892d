//! What every endpoint shares: the server's state, the caller a token
//! proves (the path a request then takes, admitted, re-timed, validated,
//! applied and counted, is `caller.rs`'s), and how an error is answered.

use crate::auth::Tokens;
use crate::metrics::Metrics;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use baton_core::access::Caller;
use baton_core::refusal::RefusalNote;
use baton_core::{Authority, Clock, Error, Store};
use baton_store_http::wire::{self, ErrorBody};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// The server's own sweeper, as the page shows it.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct SweepStatus {
    /// How often it sweeps.
    pub every_ms: u64,
    /// When it last finished a sweep.
    pub last_at: Option<baton_core::Timestamp>,
    /// Tasks it persisted a derived change for, in all.
    pub swept: u64,
    /// Sweeps it ran, in all.
    pub sweeps: u64,
    /// What the last sweep that failed said, until one succeeds.
    pub error: Option<String>,
}

/// What every handler shares.
pub(crate) struct App {
    /// The store, every decision made through it counted (`counted.rs`).
    pub store: Arc<dyn Store>,
    pub authority: Authority<Arc<dyn Store>>,
    pub clock: Arc<dyn Clock>,
    pub tokens: Option<Tokens>,
    pub metrics: Arc<Metrics>,
    /// Spans exported over OTLP, if asked (`--otlp`).
    pub spans: Arc<crate::spans::Spans>,
    /// Refusals answered and not yet written to the store's refusal log
    /// (the sweeper's beat writes them; the newest are kept if it cannot):
    /// `store` keeps them.
    pub unsaved: crate::counted::Unsaved,
    /// What the server's own sweeper last did (`None`: it does not sweep).
    pub sweeper: Mutex<Option<SweepStatus>>,
    /// Turns true when the server begins to stop: blocking queries end.
    pub stopping: watch::Receiver<bool>,
    /// Retention on the sweeper's beat (see `ServeOptions::prune_after_ms`).
    pub prune_after_ms: Option<u64>,
    /// Tombstones forgotten this long after they were made.
    pub forget_after_ms: Option<u64>,
    /// A line per request on standard error.
    pub request_log: bool,
    /// No tokens on a TCP (so loopback) listener: only loopback `Host`s
    /// are answered (`origin.rs`).
    pub check_host: bool,
    /// Blocking queries under way, by the name of the token that asked
    /// (`""` without tokens), each at most `max_blocking` at once: a
    /// quarter of the connection limit, so no one token's waits can hold
    /// every slot.
    pub blocking: Mutex<std::collections::HashMap<String, usize>>,
    pub max_blocking: usize,
    /// The longest one blocking query waits (`ServeOptions::max_wait`).
    pub max_wait: std::time::Duration,
    /// Signs the fences of live leases for their holders (`--fence-key`).
    pub fence_keys: Option<Arc<baton_core::fencing::FenceKeys>>,
    /// The outbox's deliverer (`--deliver`; its URL empty when none).
    pub deliveries: Mutex<crate::delivery_status::DeliveryStatus>,
}

/// One blocking query's place under its token's cap, given back on drop.
pub(crate) struct Blocking {
    app: Shared,
    name: String,
}

impl Drop for Blocking {
    fn drop(&mut self) {
        if let Ok(mut b) = self.app.blocking.lock()
            && let Some(n) = b.get_mut(&self.name)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                b.remove(&self.name);
            }
        }
    }
}

impl App {
    /// A place for one more blocking query of the token `name`, or `None`
    /// when it has [`App::max_blocking`] under way already.
    pub(crate) fn blocking(self: &Arc<Self>, name: &str) -> Option<Blocking> {
        let mut b = self.blocking.lock().ok()?;
        let n = b.entry(name.to_owned()).or_insert(0);
        if *n >= self.max_blocking {
            return None;
        }
        *n += 1;
        Some(Blocking {
            app: self.clone(),
            name: name.to_owned(),
        })
    }
}

/// The name of the token a request was made with, left on its response
/// for the request log.
#[derive(Debug, Clone)]
pub(crate) struct CallerName(pub String);

pub(crate) type Shared = Arc<App>;

/// The caller the request's bearer token proved (`None`: the server has
/// no tokens, or the route is public), left in the request by
/// [`authenticate`] for the gate a handler asks for.
#[derive(Debug, Clone)]
pub(crate) struct Who(pub Option<Caller>);

impl App {
    pub fn now(&self) -> baton_core::Timestamp {
        self.clock.now()
    }

    /// The caller the request's bearer token proves: `None` when the
    /// server has no tokens, 401 when it has and the token is missing or
    /// wrong.
    pub fn caller(&self, headers: &HeaderMap) -> Result<Option<Caller>, ApiError> {
        let Some(tokens) = &self.tokens else {
            return Ok(None);
        };
        // RFC 9110: the scheme is case-insensitive (`bearer` is `Bearer`).
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim_start().split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t);
        match token.and_then(|t| tokens.check(t.trim())) {
            Some(c) => Ok(Some(c)),
            None => Err(ApiError::unauthorized(token.is_some())),
        }
    }

    /// Writes the refusals answered since the last write to the store's
    /// refusal log, so they outlive this process; what the store does not
    /// take is kept for the next try.
    pub async fn save_refusals(&self) {
        let notes: Vec<RefusalNote> = match self.unsaved.lock() {
            Ok(mut u) => u.drain(..).collect(),
            Err(_) => return,
        };
        if notes.is_empty() {
            return;
        }
        if self.authority.note_refusals(notes.clone()).await.is_err()
            && let Ok(mut u) = self.unsaved.lock()
        {
            for n in notes.into_iter().rev() {
                u.push_front(n);
            }
            while u.len() > RefusalNote::KEPT {
                u.pop_front();
            }
        }
    }

    /// Waits `d` or until the server begins to stop.
    pub async fn pause(&self, d: Duration) {
        let mut stopping = self.stopping.clone();
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = stopping.wait_for(|s| *s) => {}
        }
    }

    pub fn is_stopping(&self) -> bool {
        *self.stopping.borrow()
    }
}

/// An answer that is not a success.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    body: ErrorBody,
}

impl ApiError {
    fn unauthorized(given: bool) -> ApiError {
        let message = if given {
            "the bearer token is not one this server accepts"
        } else {
            "this server needs a bearer token (BATON_TOKEN or --token)"
        };
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            body: ErrorBody::new(Error::not_permitted(message)),
        }
    }

    pub fn not_found(what: &str) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            body: ErrorBody::new(Error::invalid("path", format!("no such endpoint: {what}"))),
        }
    }
}

impl From<Error> for ApiError {
    fn from(error: Error) -> ApiError {
        let status = StatusCode::from_u16(wire::status_for(error.kind))
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        ApiError {
            status,
            body: ErrorBody::new(error),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body)).into_response()
    }
}

pub(crate) type Handled = Result<Response, ApiError>;

/// A JSON body, or an error naming `body` and what is wrong with it.
pub(crate) fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(bytes).map_err(|e| Error::invalid("body", format!("{e}")))
}

/// A body of the task API, read as every front end reads JSON input: no
/// key given twice at any depth, and no field the request does not know
/// (`{"ttl": 600000}` is not quietly a default TTL). Errors name the field.
pub(crate) fn parse_strict<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    let text =
        std::str::from_utf8(bytes).map_err(|_| Error::invalid("body", "must be UTF-8 JSON"))?;
    let value = baton_core::json::parse_strict("body", text)?;
    from_value_strict(value)
}

/// `value` as a `T`, refusing a field `T` does not know, by its path; a
/// value of the wrong type names its field by its path too (`ttl_ms`,
/// `node.priority`).
pub(crate) fn from_value_strict<T: DeserializeOwned>(value: serde_json::Value) -> Result<T, Error> {
    let mut unknown: Vec<String> = Vec::new();
    let mut note = |path: serde_ignored::Path<'_>| unknown.push(path.to_string());
    let ignoring = serde_ignored::Deserializer::new(value, &mut note);
    let t: T = serde_path_to_error::deserialize(ignoring).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string();
        // serde's own words for a struct that denies unknown fields.
        let field = message
            .strip_prefix("unknown field `")
            .and_then(|rest| rest.split_once('`'))
            .map(|(f, _)| f.to_owned())
            .or_else(|| (path != "." && !path.is_empty()).then_some(path))
            .unwrap_or_else(|| "body".to_owned());
        Error::invalid(&field, message)
    })?;
    match unknown.first() {
        Some(field) => Err(Error::invalid(
            field.as_str(),
            "is not a field of this request",
        )),
        None => Ok(t),
    }
}

pub(crate) fn json<T: Serialize>(value: &T) -> Handled {
    Ok(axum::Json(value).into_response())
}

/// Reads the whole request body before the handler runs, within one
/// deadline for all of it: the body layer's timeout is between chunks, so
/// a body trickled a byte at a time after valid headers would otherwise
/// hold its connection (and a slot) for as long as the client likes.
pub(crate) async fn whole_body(
    axum::extract::State((max_body, within)): axum::extract::State<(usize, std::time::Duration)>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let (parts, body) = req.into_parts();
    match tokio::time::timeout(within, axum::body::to_bytes(body, max_body)).await {
        Ok(Ok(bytes)) => {
            next.run(axum::extract::Request::from_parts(
                parts,
                axum::body::Body::from(bytes),
            ))
            .await
        }
        Ok(Err(e)) => {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            let (status, message) = if too_large {
                (
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("the body is larger than the server's limit of {max_body} bytes"),
                )
            } else {
                (
                    StatusCode::BAD_REQUEST,
                    format!("the body could not be read: {e}"),
                )
            };
            let mut res = ApiError::from(Error::invalid("body", message)).into_response();
            *res.status_mut() = status;
            res
        }
        Err(_) => {
            let mut res = ApiError::from(Error::unavailable(format!(
                "the request's body did not arrive within {} ms (--read-timeout)",
                within.as_millis()
            )))
            .into_response();
            *res.status_mut() = StatusCode::REQUEST_TIMEOUT;
            res.headers_mut().insert(
                header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
            res
        }
    }
}

/// Checks the bearer token before anything else of the request is read:
/// a request without a valid token is answered 401 and its body is never
/// read (a stranger's 31 MB body costs nothing). The page, `/healthz`,
/// `/readyz` and the OpenAPI document are public. The caller it proved is left in the request for
/// the gate a handler asks for (`caller.rs`).
pub(crate) async fn authenticate(
    axum::extract::State(app): axum::extract::State<Shared>,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let public = matches!(
        req.uri().path(),
        "/" | "/healthz" | "/readyz" | crate::openapi::PATH
    );
    let mut name = None;
    if !public {
        match app.caller(req.headers()) {
            Ok(caller) => {
                name = caller.as_ref().map(|c| c.name.as_str().to_owned());
                req.extensions_mut().insert(Who(caller));
            }
            Err(e) => return e.into_response(),
        }
    }
    let mut res = next.run(req).await;
    if let Some(n) = name {
        res.extensions_mut().insert(CallerName(n));
    }
    res
}

/// Every error the server answers is the same JSON (`{"error": {...}}`),
/// including those answered before a handler runs (a body over the limit,
/// a body too slow, a query string or path that does not parse, a method
/// not allowed): a client reads one shape, whatever went wrong.
pub(crate) async fn json_errors(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let res = next.run(req).await;
    let status = res.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return res;
    }
    let is_json = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("application/json"));
    if is_json {
        return res;
    }
    let text = axum::body::to_bytes(res.into_body(), 16 * 1024)
        .await
        .unwrap_or_default();
    let message = String::from_utf8_lossy(&text).trim().to_owned();
    let message = if message.is_empty() {
        status.canonical_reason().unwrap_or("error").to_owned()
    } else {
        message
    };
    let error = match status.as_u16() {
        401 | 403 => Error::not_permitted(message),
        408 | 503 | 504 => Error::unavailable(message),
        500..=599 => Error::indeterminate(message),
        _ => Error::invalid("request", message),
    };
    ApiError {
        status,
        body: ErrorBody::new(error),
    }
    .into_response()
}
