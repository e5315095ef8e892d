//! The `http://` store: a [`Store`] whose every method is one request to
//! a `baton serve`. A decision comes back as its caller needs it
//! ([`Decision::answer_only`]): the verdict and its record; the events and
//! notifications the server's store wrote beside it are read with
//! `events` and `pending`. A refused connection is `Unavailable` (nothing was
//! sent); a write whose reply is lost (a reset, a timeout, a reply that
//! does not parse) is `Indeterminate`; a read that fails is `Unavailable`.

use crate::wire::{self, AckBody, ErrorBody, EventsBody, PendingBody, ReadBody, WatchBody};
use async_trait::async_trait;
use baton_core::decide::Decision;
use baton_core::graph::NextQuery;
use baton_core::store::{Capabilities, ListQuery, Snapshot};
use baton_core::{Error, Event, Notification, Operation, Result, Store, TaskId, Timestamp};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::path::PathBuf;
use std::time::Duration;

/// The default deadline of one request (a blocking wait gets its wait on top).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest answer read.
const MAX_ANSWER: usize = 256 * 1024 * 1024;

/// How an `http://` store talks to its server.
#[derive(Clone, Default)]
pub struct HttpOptions {
    /// Sent as `Authorization: Bearer ...` (never logged or shown).
    pub token: Option<String>,
    /// The deadline of each request; `None` for the default (10 s).
    pub timeout: Option<Duration>,
}

impl std::fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpOptions")
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

#[derive(Clone)]
enum Transport {
    Tcp {
        client: Client<HttpConnector, Full<Bytes>>,
        /// `HOST:PORT`.
        authority: String,
    },
    Tls {
        client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
        authority: String,
    },
    Unix {
        client: Client<hyperlocal::UnixConnector, Full<Bytes>>,
        path: PathBuf,
    },
}

/// A store that is a `baton serve` elsewhere.
#[derive(Clone)]
pub struct HttpStore {
    transport: Transport,
    /// How the store is named in errors (`http://127.0.0.1:7440`).
    name: String,
    token: Option<String>,
    timeout: Duration,
    caps: Capabilities,
}

impl std::fmt::Debug for HttpStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpStore")
            .field("server", &self.name)
            .field("timeout", &self.timeout)
            .finish()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scheme {
    Http,
    Https,
    Unix,
}

impl Scheme {
    fn prefix(self) -> &'static str {
        match self {
            Scheme::Http => "http://",
            Scheme::Https => "https://",
            Scheme::Unix => "http+unix://",
        }
    }
}

/// A parsed server URL.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ServerUrl {
    scheme: Scheme,
    /// `HOST:PORT`, or the socket's path.
    place: String,
    timeout: Option<Duration>,
    /// `https://`: the CA certificates (PEM) to trust instead of the system's.
    ca: Option<PathBuf>,
}

/// `http://HOST:PORT[?timeout=DUR]`, `https://HOST:PORT[?timeout=DUR&ca=PATH]`
/// or `http+unix://PATH[?timeout=DUR]`.
fn parse_url(url: &str) -> Result<ServerUrl> {
    let shown = Error::shown_url(url);
    let bad = |rule: &str| Error::invalid("store", format!("{rule} (got {shown:?})"));
    let Some((scheme, rest)) = [Scheme::Unix, Scheme::Https, Scheme::Http]
        .into_iter()
        .find_map(|s| url.strip_prefix(s.prefix()).map(|r| (s, r)))
    else {
        return Err(bad(
            "a server's URL is http://HOST:PORT, https://HOST:PORT or http+unix://PATH",
        ));
    };
    let (place, query) = rest.split_once('?').unwrap_or((rest, ""));
    let unix = scheme == Scheme::Unix;
    let place = if unix {
        place
    } else {
        place.trim_end_matches('/')
    };
    if place.is_empty() {
        return Err(bad("the URL names no server"));
    }
    // `http://user:TOKEN@host` would be dropped without a word, and a URL
    // ends up in logs: refused, without repeating what was given.
    if !unix && place.contains('@') {
        return Err(bad(
            "credentials in the URL are not used (and would be logged); give the token with --token or BATON_TOKEN",
        ));
    }
    if !unix && (place.contains('/') || !place.contains(':')) {
        return Err(bad("http://HOST:PORT names a server, with no path"));
    }
    let mut out = ServerUrl {
        scheme,
        place: place.to_owned(),
        timeout: None,
        ca: None,
    };
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("timeout", v)) => {
                let d = humantime::parse_duration(v).map_err(|e| {
                    bad(&format!(
                        "timeout must be a duration like 500ms or 30s ({e})"
                    ))
                })?;
                if d < Duration::from_millis(10) || d > Duration::from_secs(600) {
                    return Err(bad("timeout must be from 10ms to 10m"));
                }
                out.timeout = Some(d);
            }
            Some(("ca", v)) if scheme == Scheme::Https && !v.is_empty() => {
                out.ca = Some(PathBuf::from(v));
            }
            Some(("ca", _)) => return Err(bad("ca names a PEM file, for https:// only")),
            _ => return Err(Error::unknown_url_parameter(pair)),
        }
    }
    Ok(out)
}

/// Whether a URL is a server's.
pub fn is_http_url(url: &str) -> bool {
    ["http://", "https://", "http+unix://"]
        .iter()
        .any(|p| url.starts_with(p))
}

impl HttpStore {
    /// Connects to the server `url` names and reads its capabilities.
    pub async fn connect(url: &str, opts: HttpOptions) -> Result<HttpStore> {
        let u = parse_url(url)?;
        let timeout = u.timeout.or(opts.timeout).unwrap_or(DEFAULT_TIMEOUT);
        let tcp = || {
            let mut http = HttpConnector::new();
            http.set_nodelay(true);
            http.set_connect_timeout(Some(timeout));
            http
        };
        let pooled = || {
            let mut b = Client::builder(TokioExecutor::new());
            b.pool_idle_timeout(Duration::from_secs(30));
            b
        };
        let transport = match u.scheme {
            Scheme::Unix => Transport::Unix {
                client: Client::builder(TokioExecutor::new()).build(hyperlocal::UnixConnector),
                path: PathBuf::from(&u.place),
            },
            Scheme::Http => Transport::Tcp {
                client: pooled().build(tcp()),
                authority: u.place.clone(),
            },
            Scheme::Https => {
                let config = crate::tls::client_config(u.ca.as_deref())?;
                let mut http = tcp();
                http.enforce_http(false);
                let https = hyper_rustls::HttpsConnectorBuilder::new()
                    .with_tls_config(config)
                    .https_only()
                    .enable_http1()
                    .wrap_connector(http);
                Transport::Tls {
                    client: pooled().build(https),
                    authority: u.place.clone(),
                }
            }
        };
        let name = format!("{}{}", u.scheme.prefix(), u.place);
        let mut store = HttpStore {
            transport,
            name,
            token: opts.token,
            timeout,
            caps: Capabilities {
                clock: baton_core::ClockKind::Engine,
                durable: false,
                multi_process: true,
                min_ttl_ms: 1,
                ttl_granularity_ms: 1,
                signs_fences: false,
                reads_ready_index: false,
            },
        };
        store.caps = store
            .call::<(), Capabilities>(Method::GET, wire::CAPABILITIES, None, false, None)
            .await?;
        // The server's store reads its index; this client does not.
        store.caps.reads_ready_index = false;
        Ok(store)
    }

    /// The server, as errors name it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// One request. `writes`: a lost reply may mean the write landed.
    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
        writes: bool,
        extra: Option<Duration>,
    ) -> Result<T> {
        let payload = match body {
            Some(b) => serde_json::to_vec(b)
                .map_err(|e| Error::invalid("request", format!("cannot be encoded: {e}")))?,
            None => Vec::new(),
        };
        let uri: hyper::Uri = match &self.transport {
            Transport::Tcp { authority, .. } => format!("http://{authority}{path}")
                .parse()
                .map_err(|e| Error::invalid("store", format!("{}: {e}", self.name)))?,
            Transport::Tls { authority, .. } => format!("https://{authority}{path}")
                .parse()
                .map_err(|e| Error::invalid("store", format!("{}: {e}", self.name)))?,
            Transport::Unix { path: socket, .. } => hyperlocal::Uri::new(socket, path).into(),
        };
        let mut req = Request::builder()
            .method(method)
            .uri(uri)
            .header(hyper::header::CONTENT_TYPE, "application/json");
        if let Some(t) = &self.token {
            req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let req = req
            .body(Full::new(Bytes::from(payload)))
            .map_err(|e| Error::invalid("request", format!("{e}")))?;
        let lost = |what: String| -> Error {
            let e = if writes {
                Error::indeterminate(format!(
                    "{what}: the request may have been applied; read before retrying"
                ))
            } else {
                Error::unavailable(what)
            };
            e.with_context(self.name.clone())
        };
        let deadline = self.timeout + extra.unwrap_or_default();
        let sent = match &self.transport {
            Transport::Tcp { client, .. } => {
                tokio::time::timeout(deadline, client.request(req)).await
            }
            Transport::Tls { client, .. } => {
                tokio::time::timeout(deadline, client.request(req)).await
            }
            Transport::Unix { client, .. } => {
                tokio::time::timeout(deadline, client.request(req)).await
            }
        };
        let res = match sent {
            Err(_) => {
                return Err(lost(format!(
                    "no answer within {}",
                    humantime::format_duration(deadline)
                )));
            }
            Ok(Err(e)) if e.is_connect() => {
                return Err(Error::unavailable(format!("cannot reach the server: {e}"))
                    .with_context(self.name.clone())
                    .with_source(e));
            }
            Ok(Err(e)) => return Err(lost(format!("the connection failed: {e}"))),
            Ok(Ok(res)) => res,
        };
        let status = res.status();
        let body = tokio::time::timeout(
            deadline,
            http_body_util::Limited::new(res.into_body(), MAX_ANSWER).collect(),
        )
        .await
        .map_err(|_| lost("the answer did not arrive in time".to_owned()))?
        .map_err(|e| lost(format!("the answer was cut off: {e}")))?
        .to_bytes();
        if status == StatusCode::OK {
            return baton_core::json::decode_stored(&body)
                .map_err(|e| lost(format!("the answer is not what this client expects: {e}")));
        }
        match serde_json::from_slice::<ErrorBody>(&body) {
            Ok(b) => Err(b.error),
            Err(_) if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN => Err(
                Error::not_permitted(format!("the server answered {status}"))
                    .with_context(self.name.clone()),
            ),
            Err(_) if status.is_server_error() && status != StatusCode::SERVICE_UNAVAILABLE => {
                Err(lost(format!("the server answered {status}")))
            }
            Err(_) => Err(Error::unavailable(format!("the server answered {status}"))
                .with_context(self.name.clone())),
        }
    }

    async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        writes: bool,
    ) -> Result<T> {
        self.call(Method::POST, path, Some(body), writes, None)
            .await
    }
}

#[async_trait]
impl Store for HttpStore {
    fn capabilities(&self) -> Capabilities {
        self.caps
    }

    async fn fence_token(&self, task: &TaskId, fence: u64) -> Result<Option<String>> {
        let body = wire::FenceTokenBody {
            task: task.clone(),
            fence,
        };
        self.post(wire::FENCE_TOKEN, &body, false).await
    }

    async fn read(&self, task: &TaskId, _now: Timestamp) -> Result<Option<Snapshot>> {
        self.post(wire::READ, &ReadBody { task: task.clone() }, false)
            .await
    }

    async fn apply(&self, op: Operation) -> Result<Decision> {
        self.post(wire::APPLY, &op, true).await
    }

    async fn apply_all(&self, ops: Vec<Operation>) -> Result<Vec<Decision>> {
        self.post(wire::APPLY_ALL, &ops, true).await
    }

    async fn apply_each(&self, ops: Vec<Operation>) -> Result<Vec<Decision>> {
        self.post(wire::APPLY_EACH, &ops, true).await
    }

    async fn next(&self, query: &NextQuery) -> Result<Option<Decision>> {
        self.post(wire::NEXT, &query.one(), true).await
    }

    async fn next_many(&self, query: &NextQuery) -> Result<Vec<Decision>> {
        self.post(wire::NEXT_MANY, query, true).await
    }

    async fn watch_ready(&self, query: &NextQuery, max_ms: u64) -> Result<bool> {
        let max_ms = max_ms.min(wire::MAX_WATCH_MS);
        let body = WatchBody {
            query: query.clone(),
            max_ms,
        };
        self.call(
            Method::POST,
            wire::WATCH_READY,
            Some(&body),
            false,
            Some(Duration::from_millis(max_ms)),
        )
        .await
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<Snapshot>> {
        self.post(wire::LIST, query, false).await
    }

    async fn events(&self, task: Option<&TaskId>, after: u64, limit: usize) -> Result<Vec<Event>> {
        let body = EventsBody {
            task: task.cloned(),
            after,
            limit,
        };
        self.post(wire::EVENTS, &body, false).await
    }

    async fn pending(&self, after: u64, limit: usize) -> Result<Vec<Notification>> {
        self.post(wire::PENDING, &PendingBody { after, limit }, false)
            .await
    }

    async fn counts(&self) -> Result<Option<Vec<baton_core::counts::Count>>> {
        self.post(wire::COUNTS, &(), false).await
    }

    async fn ack(&self, intent_ids: &[String], _now: Timestamp) -> Result<u64> {
        let body = AckBody {
            intent_ids: intent_ids.to_vec(),
        };
        self.post(wire::ACK, &body, true).await
    }
}

/// The server decides whether this store's token may do an act.
#[async_trait]
impl baton_core::access::Permits for HttpStore {
    async fn permit(&self, act: baton_core::access::Act) -> Result<()> {
        self.post(wire::PERMIT, &act, false).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn server_urls() {
        let u = parse_url("http://127.0.0.1:7440").unwrap();
        assert_eq!(
            (u.scheme, u.place.as_str(), u.timeout),
            (Scheme::Http, "127.0.0.1:7440", None)
        );
        let u = parse_url("http+unix:///run/baton.sock?timeout=2s").unwrap();
        assert_eq!(
            (u.scheme, u.place.as_str(), u.timeout),
            (
                Scheme::Unix,
                "/run/baton.sock",
                Some(Duration::from_secs(2))
            )
        );
        let u = parse_url("https://baton.internal:7440?ca=/etc/baton/ca.pem").unwrap();
        assert_eq!(
            (u.scheme, u.ca),
            (Scheme::Https, Some(PathBuf::from("/etc/baton/ca.pem")))
        );
        for bad in [
            "http://",
            "http://host",
            "http://h:1/path",
            "http://h:1?colour=red",
            "http://h:1?timeout=forever",
            "http://h:1?timeout=1h",
            "http://h:1?ca=x.pem",
            "https://h:1?ca=",
            "http+unix://",
            "ftp://h:1",
        ] {
            let e = parse_url(bad).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("store"), "{bad}");
        }
    }
}
