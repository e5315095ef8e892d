//! `baton serve --deliver URL`: posts each outbox notification to a
//! webhook, signed, and acknowledges it once the receiver took it (a 2xx).
//! Which notifications go when, and what a failure comes to, is core's
//! ([`baton_core::delivery`]); this is the transport.

use crate::app::Shared;
use baton_core::delivery::{
    ATTEMPT_HEADER, AfterFailure, DeliveryPolicy, INTENT_HEADER, SIGNATURE_HEADER,
};
use baton_core::{Error, Notification};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Where and how a server delivers its outbox.
#[derive(Debug, Clone)]
pub struct Deliver {
    /// `http://` or `https://` (the system's roots), the whole URL posted to.
    pub url: String,
    /// Signs each post with its first key (`baton guard keygen` makes one).
    pub keys: Arc<baton_core::fencing::FenceKeys>,
    pub policy: DeliveryPolicy,
    /// How long a post may take before it counts as failed (a receiver
    /// that stalls): [`POST_TIMEOUT`] unless set.
    pub timeout: Duration,
}

impl Deliver {
    /// Checks the URL (http or https, a host, no credentials in it).
    pub fn new(
        url: &str,
        keys: Arc<baton_core::fencing::FenceKeys>,
        policy: DeliveryPolicy,
    ) -> Result<Deliver, Error> {
        let uri: hyper::Uri = url
            .parse()
            .map_err(|e| Error::invalid("deliver", format!("not a URL: {e} (got {url:?})")))?;
        match (uri.scheme_str(), uri.host()) {
            (Some("http" | "https"), Some(_)) => {}
            _ => {
                return Err(Error::invalid(
                    "deliver",
                    format!("an http:// or https:// URL with a host (got {url:?})"),
                ));
            }
        }
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            return Err(Error::invalid(
                "deliver",
                "a URL without credentials: the receiver checks the signature",
            ));
        }
        Ok(Deliver {
            url: url.to_owned(),
            keys,
            policy,
            timeout: POST_TIMEOUT,
        })
    }
}

/// How long a post may take before it counts as failed, by default.
pub const POST_TIMEOUT: Duration = Duration::from_secs(10);
/// The most posts under way at once (each a different task's).
const AT_ONCE: usize = 16;
/// How much of the outbox one round reads (pages of 100).
const PAGES: usize = 10;
/// The pause after a round that posted nothing.
const IDLE: Duration = Duration::from_millis(200);

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

fn client(timeout: Duration) -> Result<HttpsClient, Error> {
    let config = baton_store_http::tls::client_config(None)?;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(timeout));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new()).build(https))
}

/// Posts `n` as its `attempt`-th try: `Ok` when the receiver answered 2xx.
async fn post(
    client: &HttpsClient,
    d: &Deliver,
    n: &Notification,
    attempt: u32,
) -> Result<(), String> {
    let body = serde_json::to_vec(n).map_err(|e| format!("cannot write the notification: {e}"))?;
    let key = d.keys.secrets().next().unwrap_or_default();
    let req = hyper::Request::post(&d.url)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .header(
            SIGNATURE_HEADER,
            baton_core::delivery::signature(key, &body),
        )
        .header(INTENT_HEADER, &n.intent_id)
        .header(ATTEMPT_HEADER, attempt.to_string())
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| format!("cannot make the request: {e}"))?;
    let answered = tokio::time::timeout(d.timeout, async {
        let res = client.request(req).await.map_err(|e| e.to_string())?;
        let status = res.status();
        // Read (and drop) the answer, so the connection can be reused.
        let _ = res.into_body().collect().await;
        if status.is_success() {
            Ok(())
        } else {
            Err(format!("the receiver answered {status}"))
        }
    })
    .await;
    match answered {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {} ms", d.timeout.as_millis())),
    }
}

/// Delivers the outbox until the server stops.
pub(crate) async fn deliver_loop(app: Shared, d: Deliver, mut stopping: watch::Receiver<bool>) {
    let client = match client(d.timeout) {
        Ok(c) => c,
        Err(e) => {
            if let Ok(mut s) = app.deliveries.lock() {
                s.error = Some(format!("cannot make an HTTPS client: {e}"));
            }
            return;
        }
    };
    let d = Arc::new(d);
    loop {
        let posted = round(&app, &client, &d).await;
        if posted {
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep(IDLE) => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
    }
}

/// One round: reads the outbox, posts what is due, acknowledges what went
/// (or died). Whether it posted anything.
async fn round(app: &Shared, client: &HttpsClient, d: &Arc<Deliver>) -> bool {
    let mut pending = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..PAGES {
        match app.authority.pending(after.as_deref(), 100).await {
            Ok(page) => {
                pending.extend(page.items);
                match page.next {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
            Err(e) => {
                if let Ok(mut s) = app.deliveries.lock() {
                    s.error = Some(format!("cannot read the outbox: {e}"));
                }
                return false;
            }
        }
    }
    let now = app.now();
    let due: Vec<(Notification, u32)> = match app.deliveries.lock() {
        Ok(mut s) => {
            s.error = None;
            s.state.keep_only(&pending);
            let due = s.state.due(&pending, now);
            due.into_iter()
                .take(AT_ONCE)
                .map(|n| (n.clone(), s.state.attempt(n)))
                .collect()
        }
        Err(_) => return false,
    };
    if due.is_empty() {
        return false;
    }
    let mut posts = tokio::task::JoinSet::new();
    for (n, attempt) in due {
        let (client, d) = (client.clone(), d.clone());
        posts.spawn(async move {
            let r = post(&client, &d, &n, attempt).await;
            (n, r)
        });
    }
    while let Some(joined) = posts.join_next().await {
        let Ok((n, result)) = joined else { continue };
        let ack = match result {
            Ok(()) => {
                if let Ok(mut s) = app.deliveries.lock() {
                    s.state.delivered(&n);
                }
                true
            }
            Err(error) => {
                let now = app.now();
                match app.deliveries.lock() {
                    Ok(mut s) => s.state.failed(&n, error, now) == AfterFailure::Dead,
                    Err(_) => false,
                }
            }
        };
        // Not acknowledged (the store could not answer): posted again.
        if ack
            && let Err(e) = app.authority.ack(std::slice::from_ref(&n.intent_id)).await
            && let Ok(mut s) = app.deliveries.lock()
        {
            s.error = Some(format!("cannot acknowledge {}: {e}", n.intent_id));
        }
    }
    true
}
