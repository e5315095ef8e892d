//! The server: listening (TCP with or without TLS, a Unix socket), the
//! router, health and metrics, and graceful shutdown.

use crate::app::{ApiError, App, Handled, Shared};
use crate::auth::Tokens;
use crate::conns::{Conn, Conns};
use crate::metrics::Metrics;
use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use baton_core::{Authority, Clock, Error, Store, SystemClock};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Where a server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl Listen {
    /// `HOST:PORT` (an IP address) or `unix:PATH`.
    pub fn parse(text: &str) -> Result<Listen, Error> {
        if let Some(path) = text.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(Error::invalid("listen", "unix: needs a socket path"));
            }
            return Ok(Listen::Unix(PathBuf::from(path)));
        }
        text.parse().map(Listen::Tcp).map_err(|_| {
            Error::invalid(
                "listen",
                format!("is IP:PORT (127.0.0.1:7440) or unix:PATH (got {text:?})"),
            )
        })
    }
}

/// How a server runs.
#[derive(Debug)]
pub struct ServeOptions {
    pub listen: Listen,
    /// `None`: no authentication (loopback and Unix sockets only).
    pub tokens: Option<Tokens>,
    /// The largest request body, in bytes.
    pub max_body: usize,
    /// How long a client may take to send a request's headers or body
    /// (and to finish a TLS handshake).
    pub read_timeout: Duration,
    /// Serve HTTPS with this configuration ([`baton_store_http::tls::server_config`]).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// The most connections held at once; past it a new connection takes
    /// the place of the one idle longest (see `conns`).
    pub max_connections: usize,
    /// How often the server sweeps on its own (persists expired leases and
    /// passed deadlines, with their events); `None`: never.
    pub sweep_every: Option<Duration>,
    /// Retention on the sweep's beat: tasks that ended more than this many
    /// ms ago are pruned, at most 640 a beat; `None`: never.
    pub prune_after_ms: Option<u64>,
    /// With `prune_after_ms`: each tombstone is forgotten this long after
    /// it was made (its id free again).
    pub forget_after_ms: Option<u64>,
    /// Write a line per request on standard error (method, path, status,
    /// latency, the token's name; never the token).
    pub request_log: bool,
    /// The longest one blocking query waits (`GET /v1/events?wait=`, a
    /// `next --wait` through the server): a longer wait is cut to it, and
    /// the client asks again.
    pub max_wait: Duration,
    /// What the store tells of its work: the size of each group commit
    /// becomes the `/metrics` batch histogram.
    pub meter: Option<Arc<dyn baton_core::store::Meter>>,
    /// Sign every fence granted through the server (`--fence-key`): the
    /// task API's grants carry `token`, and `http://` clients ask for it.
    pub fence_keys: Option<Arc<baton_core::fencing::FenceKeys>>,
    /// Post every outbox notification to a webhook (`--deliver URL`).
    pub deliver: Option<crate::deliver::Deliver>,
    /// Export spans to this OTLP gRPC collector (`--otlp URL`; needs the
    /// `otlp` feature).
    pub otlp: Option<String>,
}

/// The most tasks one beat of the sweeper prunes.
pub const PRUNE_PER_BEAT: usize = 640;

impl ServeOptions {
    /// Refuses options a server must not run with: a non-loopback
    /// address without tokens. Checked again by [`spawn`].
    pub fn check(&self) -> Result<(), Error> {
        if let Listen::Tcp(addr) = &self.listen
            && !addr.ip().is_loopback()
            && self.tokens.is_none()
        {
            return Err(Error::invalid(
                "listen",
                format!(
                    "{addr} is not a loopback address: give --tokens so that only holders of a token are answered"
                ),
            ));
        }
        if let Some(endpoint) = &self.otlp {
            crate::spans::Spans::check(endpoint)?;
        }
        if self.tls.is_some() && matches!(self.listen, Listen::Unix(_)) {
            return Err(Error::invalid(
                "tls-cert",
                "TLS is for a TCP listener; a Unix socket's permissions are its boundary",
            ));
        }
        Ok(())
    }

    pub fn new(listen: Listen) -> ServeOptions {
        ServeOptions {
            listen,
            tokens: None,
            max_body: MAX_BODY,
            read_timeout: READ_TIMEOUT,
            tls: None,
            sweep_every: Some(SWEEP_EVERY),
            prune_after_ms: None,
            forget_after_ms: None,
            request_log: false,
            max_connections: MAX_CONNECTIONS,
            max_wait: MAX_WAIT,
            meter: None,
            fence_keys: None,
            deliver: None,
            otlp: None,
        }
    }
}

/// The default largest request body: a graph of about 100 000 nodes.
pub const MAX_BODY: usize = 32 * 1024 * 1024;
/// The most connections a server holds by default.
pub const MAX_CONNECTIONS: usize = 1024;
/// The longest a blocking query waits by default.
pub const MAX_WAIT: Duration = Duration::from_millis(baton_store_http::wire::MAX_WATCH_MS);
/// How often a server sweeps by default.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// The default time a client has to send its request.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
// ---- health, metrics ----

async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready when the store answers a read.
async fn readyz(State(app): State<Shared>) -> Response {
    let probe = baton_core::TaskId::parse("task", "baton-readyz-probe");
    let answered = match probe {
        Ok(t) => app.store.read(&t, app.now()).await.map(|_| ()),
        Err(e) => Err(e),
    };
    match answered {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(e) => ApiError::from(Error::unavailable(format!(
            "the store does not answer: {e}"
        )))
        .into_response(),
    }
}

async fn metrics(State(app): State<Shared>, _caller: crate::caller::AsCaller) -> Handled {
    if let Ok(d) = app.deliveries.lock()
        && !d.url.is_empty()
    {
        let (delivered, dead) = d.state.totals();
        app.metrics.deliveries(delivered, dead, d.state.failing());
    }
    if let Ok(counts) = app.authority.counts().await {
        let (named, may_wait) = app.metrics.census(
            counts
                .queues
                .iter()
                .flat_map(|(q, states)| states.iter().map(move |(s, n)| (q.as_str(), *s, *n))),
        );
        // Each named queue's longest wait, through the store's indexes (a
        // queue the store cannot answer for is left out of this scrape).
        let now = app.now();
        let mut waits = Vec::new();
        for queue in may_wait {
            let Ok(id) = baton_core::Id::parse("queue", &queue) else {
                continue;
            };
            match app.authority.oldest_waiting(&id).await {
                Ok(Some(since)) => {
                    let ms = now.as_millis().saturating_sub(since.as_millis()).max(0);
                    waits.push((queue, Some(ms as f64 / 1000.0)));
                }
                Ok(None) => {}
                Err(_) => waits.push((queue, None)),
            }
        }
        app.metrics.oldest_waiting(&named, &waits);
    }
    Ok((
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        app.metrics.encode(),
    )
        .into_response())
}

/// Times every request, by its route's pattern (never the raw path).
async fn track(
    State(app): State<Shared>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let started = Instant::now();
    let began = std::time::SystemTime::now();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let traceparent = req
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let res = next.run(req).await;
    let elapsed = started.elapsed();
    app.metrics
        .answered(&route, res.status().as_u16(), elapsed.as_secs_f64());
    app.spans.request(
        method.as_str(),
        &route,
        res.status().as_u16(),
        traceparent.as_deref(),
        began,
    );
    if app.request_log {
        // The caller's name, left by `authenticate`; the token itself is
        // never in reach here.
        let token = res
            .extensions()
            .get::<crate::app::CallerName>()
            .map(|c| c.0.as_str());
        let line = serde_json::json!({
            "at": app.now(),
            "method": method.as_str(),
            "path": path,
            "status": res.status().as_u16(),
            "ms": (elapsed.as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0,
            "token": token,
        });
        use std::io::Write;
        // A log that cannot be written is not a reason to fail the request.
        let _ = writeln!(std::io::stderr().lock(), "{line}");
    }
    res
}

fn panicked(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked; the request is answered indeterminate");
    ApiError::from(Error::indeterminate(
        "the server failed while answering; read before retrying",
    ))
    .into_response()
}

async fn fallback(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(uri.path())
}

fn router(app: Shared, max_body: usize, read_timeout: Duration) -> Router {
    crate::protocol::routes()
        .merge(crate::api::routes())
        .merge(crate::page::routes())
        .route(crate::openapi::PATH, get(crate::openapi::serve))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(fallback)
        // After authentication (a stranger's body is never read): the whole
        // body within --read-timeout, however it trickles.
        .layer(axum::middleware::from_fn_with_state(
            (max_body, read_timeout),
            crate::app::whole_body,
        ))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            crate::app::authenticate,
        ))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            crate::origin::same_origin,
        ))
        .layer(axum::middleware::from_fn_with_state(app.clone(), track))
        .layer(DefaultBodyLimit::max(max_body))
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
            read_timeout,
        ))
        // A bug that panics in one request answers that request 500 and
        // leaves the server serving every other.
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(panicked))
        // Outermost: whatever answered an error, it is answered as JSON.
        .layer(axum::middleware::from_fn(crate::app::json_errors))
        .with_state(app)
}

/// A running server: where it listens, and how to stop it.
#[derive(Debug)]
pub struct Served {
    /// The bound address (`None` on a Unix socket).
    pub addr: Option<SocketAddr>,
    /// Whether it answers HTTPS.
    pub tls: bool,
    stop: watch::Sender<bool>,
    done: tokio::task::JoinHandle<()>,
    spans: Arc<crate::spans::Spans>,
}

impl Served {
    /// Stops accepting, answers what is in flight, and returns when the
    /// last connection has closed.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.done.await;
        self.spans.stop().await;
    }

    /// The URL a client uses for it.
    pub fn url(&self) -> Option<String> {
        let scheme = if self.tls { "https" } else { "http" };
        self.addr.map(|a| format!("{scheme}://{a}"))
    }
}

/// Binds as `opts` says and serves `store` on the current runtime until
/// [`Served::stop`].
pub async fn spawn(store: Arc<dyn Store>, opts: ServeOptions) -> Result<Served, Error> {
    opts.check()?;
    let (stop, stopping) = watch::channel(false);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let metrics = Arc::new(Metrics::new());
    let unsaved = crate::counted::Unsaved::default();
    let spans = Arc::new(crate::spans::Spans::to(opts.otlp.as_deref())?);
    // Every decision the server makes, for a caller or on its own beat,
    // is made through this one store, and counted (and spanned) there.
    let store: Arc<dyn Store> = Arc::new(crate::counted::Counted::new(
        store,
        metrics.clone(),
        unsaved.clone(),
        clock.clone(),
        spans.clone(),
    ));
    let check_host = opts.tokens.is_none() && matches!(opts.listen, Listen::Tcp(_));
    let app = Arc::new(App {
        authority: Authority::new(store.clone(), clock.clone()),
        store,
        clock,
        tokens: opts.tokens,
        metrics,
        spans: spans.clone(),
        unsaved,
        sweeper: Mutex::new(opts.sweep_every.map(|every| crate::app::SweepStatus {
            every_ms: u64::try_from(every.as_millis()).unwrap_or(u64::MAX),
            ..Default::default()
        })),
        stopping: stopping.clone(),
        prune_after_ms: opts.prune_after_ms,
        forget_after_ms: opts.forget_after_ms,
        request_log: opts.request_log,
        check_host,
        blocking: Mutex::new(std::collections::HashMap::new()),
        max_blocking: (opts.max_connections / 4).max(1),
        max_wait: opts.max_wait,
        fence_keys: opts.fence_keys,
        deliveries: Mutex::new(match &opts.deliver {
            Some(d) => crate::delivery_status::DeliveryStatus::new(&d.url, d.policy),
            None => crate::delivery_status::DeliveryStatus::default(),
        }),
    });
    if let Some(every) = opts.sweep_every {
        tokio::spawn(sweep_loop(app.clone(), every, stopping.clone()));
    }
    if let Some(d) = opts.deliver {
        tokio::spawn(crate::deliver::deliver_loop(
            app.clone(),
            d,
            stopping.clone(),
        ));
    }
    if let Some(meter) = &opts.meter {
        let observed = Arc::downgrade(&app);
        meter.observe_batches(Arc::new(move |n| {
            if let Some(app) = observed.upgrade() {
                app.metrics.batch(n);
            }
        }));
    }
    let router = router(app, opts.max_body, opts.read_timeout);
    let (addr, done) = match &opts.listen {
        Listen::Tcp(addr) => {
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| Error::unavailable(format!("cannot listen on {addr}: {e}")))?;
            let bound = l.local_addr().ok();
            let done = tokio::spawn(accept_tcp(
                l,
                router,
                stopping,
                (opts.read_timeout, opts.max_connections),
                opts.tls.clone(),
            ));
            (bound, done)
        }
        Listen::Unix(path) => {
            clear_stale_socket(path)?;
            let l = tokio::net::UnixListener::bind(path).map_err(|e| {
                Error::unavailable(format!("cannot listen on {}: {e}", path.display()))
            })?;
            let done = tokio::spawn(accept_unix(
                l,
                router,
                stopping,
                (opts.read_timeout, opts.max_connections),
            ));
            (None, done)
        }
    };
    Ok(Served {
        addr,
        tls: opts.tls.is_some(),
        stop,
        done,
        spans,
    })
}

/// Sweeps every `every` until the server stops: what a client would see
/// derived (an expired lease, a passed deadline) is persisted with its
/// event without anyone running `baton sweep`. A sweep that fails is
/// recorded for the page and tried again at the next tick.
async fn sweep_loop(app: Shared, every: Duration, mut stopping: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
        let result = app.authority.sweep(false).await;
        // The same beat makes each live schedule's task for its period:
        // however many servers (or `baton schedule run`s) tick, the store
        // makes each once. One the store cannot answer is made at a later tick.
        // One schedule's failure is kept on its record and stops no
        // other; a store that cannot answer is this beat's error.
        let ticked = app.authority.tick_schedules().await;
        // Retention, when asked for: a bounded batch a beat, as the system.
        if let Some(ms) = app.prune_after_ms {
            let _ = app
                .authority
                .prune_and_forget(
                    baton_core::Actor::System,
                    ms,
                    app.forget_after_ms,
                    PRUNE_PER_BEAT,
                )
                .await;
        }
        // The refusals answered since the last beat, into the store.
        app.save_refusals().await;
        let at = app.now();
        if let Ok(mut s) = app.sweeper.lock()
            && let Some(status) = s.as_mut()
        {
            status.sweeps += 1;
            match (result, ticked) {
                (Ok(swept), Ok(_)) => {
                    status.swept += swept.len() as u64;
                    status.last_at = Some(at);
                    status.error = None;
                }
                (Err(e), _) => status.error = Some(e.to_string()),
                (Ok(_), Err(e)) => status.error = Some(format!("the schedules' tick failed: {e}")),
            }
        }
    }
}

/// Makes way for a socket at `path`: nothing there is fine; a socket that
/// nobody answers on (left by a server that is gone) is removed; a live
/// socket, or anything that is not a socket (a store, a log), is left as it
/// is and refused, naming the path.
fn clear_stale_socket(path: &std::path::Path) -> Result<(), Error> {
    use std::os::unix::fs::FileTypeExt;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(Error::unavailable(format!(
                "cannot listen on {}: {e}",
                path.display()
            )));
        }
    };
    if !meta.file_type().is_socket() {
        return Err(Error::invalid(
            "listen",
            format!(
                "{} exists and is not a socket; it is left as it is (name a path where nothing is)",
                path.display()
            ),
        ));
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(Error::unavailable(format!(
            "cannot listen on {}: a server is already listening there",
            path.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => std::fs::remove_file(path)
            .map_err(|e| {
                Error::unavailable(format!(
                    "cannot remove the stale socket {}: {e}",
                    path.display()
                ))
            }),
        Err(e) => Err(Error::unavailable(format!(
            "cannot listen on {}: {e}",
            path.display()
        ))),
    }
}

/// The (device, inode) of the socket at `path`, to know it is still ours.
fn socket_identity(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.file_type().is_socket())
        .map(|m| (m.dev(), m.ino()))
}

/// Serves until SIGTERM or SIGINT, then stops gracefully: every request
/// in flight is answered before this returns.
pub async fn serve(store: Arc<dyn Store>, opts: ServeOptions) -> Result<(), Error> {
    use tokio::signal::unix::{SignalKind, signal};
    let listen = opts.listen.clone();
    let served = spawn(store, opts).await?;
    let ours = match &listen {
        Listen::Unix(p) => socket_identity(p),
        Listen::Tcp(_) => None,
    };
    let mut term = signal(SignalKind::terminate())
        .map_err(|e| Error::unavailable(format!("cannot watch SIGTERM: {e}")))?;
    let mut int = signal(SignalKind::interrupt())
        .map_err(|e| Error::unavailable(format!("cannot watch SIGINT: {e}")))?;
    let shown = match (&listen, served.url()) {
        (_, Some(url)) => url,
        (Listen::Unix(p), None) => format!("http+unix://{}", p.display()),
        (Listen::Tcp(a), None) => a.to_string(),
    };
    tracing::info!("baton serve: listening on {shown}");
    eprintln!("baton serve: listening on {shown}");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    eprintln!("baton serve: stopping; answering requests in flight");
    served.stop().await;
    // Only the socket this server bound: not a file put there since.
    if let Listen::Unix(p) = &listen
        && ours.is_some()
        && socket_identity(p) == ours
    {
        let _ = std::fs::remove_file(p);
    }
    Ok(())
}

async fn accept_tcp(
    l: tokio::net::TcpListener,
    router: Router,
    stopping: watch::Receiver<bool>,
    (read_timeout, max_connections): (Duration, usize),
    tls: Option<Arc<rustls::ServerConfig>>,
) {
    let next = || async {
        l.accept().await.map(|(s, _)| {
            let _ = s.set_nodelay(true);
            s
        })
    };
    match tls {
        None => {
            accept(
                next,
                |s| async move { Ok(s) },
                router,
                stopping,
                read_timeout,
                max_connections,
            )
            .await
        }
        Some(config) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(config);
            let handshake = move |s| {
                let acceptor = acceptor.clone();
                async move {
                    tokio::time::timeout(read_timeout, acceptor.accept(s))
                        .await
                        .map_err(|_| std::io::Error::other("the TLS handshake took too long"))?
                }
            };
            accept(
                next,
                handshake,
                router,
                stopping,
                read_timeout,
                max_connections,
            )
            .await;
        }
    }
}

async fn accept_unix(
    l: tokio::net::UnixListener,
    router: Router,
    stopping: watch::Receiver<bool>,
    (read_timeout, max_connections): (Duration, usize),
) {
    accept(
        || async { l.accept().await.map(|(s, _)| s) },
        |s| async move { Ok(s) },
        router,
        stopping,
        read_timeout,
        max_connections,
    )
    .await;
}

/// The accept loop: each connection set up by `wrap` (a TLS handshake, or
/// nothing) and served by hyper in a task of its own, with a deadline on
/// its request headers (a slow client is dropped); every connection told
/// to finish when the server stops, and the loop returning once they have.
async fn accept<S, T, F, Fut, W, WFut>(
    mut next: F,
    wrap: W,
    router: Router,
    mut stopping: watch::Receiver<bool>,
    read_timeout: Duration,
    max_connections: usize,
) where
    S: Send + 'static,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::io::Result<S>>,
    W: Fn(S) -> WFut + Clone + Send + 'static,
    WFut: std::future::Future<Output = std::io::Result<T>> + Send + 'static,
{
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    use hyper_util::server::conn::auto::Builder;
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(read_timeout);
    let builder = Arc::new(builder);
    let conns = Arc::new(Conns::new(max_connections, read_timeout));
    loop {
        let stream = tokio::select! {
            s = next() => s,
            _ = stopping.wait_for(|s| *s) => break,
        };
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                // Out of file descriptors, a reset during accept: keep serving.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Every connection held has a request in flight: this one is
        // closed at once rather than queued behind them.
        let Some(conn) = conns.admit() else {
            tracing::debug!("connection refused: every one of {max_connections} is busy");
            continue;
        };
        let (wrap, builder, router) = (wrap.clone(), builder.clone(), router.clone());
        let conns = conns.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let set_up = tokio::select! {
                io = wrap(stream) => Some(io),
                _ = conns.until_closed(&conn) => None,
            };
            let io = match set_up {
                Some(Ok(io)) => io,
                Some(Err(e)) => {
                    tracing::debug!("connection set-up failed: {e}");
                    conns.leave(&conn);
                    return;
                }
                None => {
                    conns.leave(&conn);
                    return;
                }
            };
            let inner = hyper_util::service::TowerToHyperService::new(router);
            let counted = {
                let (conn, conns) = (conn.clone(), conns.clone());
                hyper::service::service_fn(move |req| {
                    let in_flight = InFlight::begin(conn.clone(), conns.clone());
                    let answer = hyper::service::Service::call(&inner, req);
                    async move {
                        let answer = answer.await;
                        drop(in_flight);
                        answer
                    }
                })
            };
            let served = builder.serve_connection_with_upgrades(TokioIo::new(io), counted);
            tokio::select! {
                r = watcher.watch(served.into_owned()) => {
                    if let Err(e) = r {
                        tracing::debug!("connection ended: {e}");
                    }
                }
                // Idle past its limit, or its place given to a new one:
                // dropping the connection closes it.
                _ = conns.until_closed(&conn) => {}
            }
            conns.leave(&conn);
        });
    }
    graceful.shutdown().await;
}

/// A request in flight on a connection, counted until it is answered (or
/// dropped with its connection).
struct InFlight(Arc<Conn>, Arc<Conns>);

impl InFlight {
    fn begin(conn: Arc<Conn>, conns: Arc<Conns>) -> InFlight {
        conn.begin();
        InFlight(conn, conns)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.end(self.1.now_ms());
    }
}
