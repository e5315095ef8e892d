//! What a web page can make a browser send. A browser on the same host
//! reaches a loopback server as well as a terminal does, and a page from
//! any site may ask it to: a `text/plain` or form POST needs no CORS
//! permission, and a DNS name rebound to 127.0.0.1 makes the page's own
//! origin the server's. So, before anything else is read:
//!
//! * a request that changes anything (any method but GET, HEAD and
//!   OPTIONS) carries `Content-Type: application/json`, which a page can
//!   send only with a CORS preflight this server never grants;
//! * a request whose `Origin` is not the server's own (its `Host`), or is
//!   `null`, is refused: a script elsewhere gets nothing, even a read;
//! * a server without tokens on a loopback address answers only requests
//!   whose `Host` names a loopback address (`localhost`, `127.0.0.0/8`,
//!   `[::1]`): a rebound name is refused.
//!
//! The page itself is served with `frame-ancestors 'none'` (`page.rs`).

use crate::app::ApiError;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use baton_core::Error;

/// Refuses what a page elsewhere could have made a browser send, before
/// anything else is read (`origin.rs`).
pub(crate) async fn same_origin(
    axum::extract::State(app): axum::extract::State<crate::app::Shared>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let authority = req.uri().authority().map(|a| a.as_str().to_owned());
    match refusal(
        req.method(),
        req.headers(),
        authority.as_deref(),
        app.check_host,
    ) {
        Some(refused) => refused,
        None => next.run(req).await,
    }
}

/// Refuses what a page elsewhere (or a rebound name) could have sent;
/// `check_host`: the server has no tokens and listens on a loopback address.
/// `authority`: the request's `:authority` (HTTP/2), read where it has no `Host`.
pub(crate) fn refusal(
    method: &Method,
    headers: &HeaderMap,
    authority: Option<&str>,
    check_host: bool,
) -> Option<Response> {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or(authority);
    if check_host && !host.is_some_and(is_loopback_host) {
        return Some(forbidden(
            "host",
            format!(
                "{:?} is not a loopback name: a server without tokens answers requests to localhost, 127.0.0.0/8 or [::1] only",
                host.unwrap_or("")
            ),
        ));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("null");
        let own = origin
            .split_once("://")
            .is_some_and(|(_, authority)| Some(authority) == host);
        if !own {
            return Some(forbidden(
                "origin",
                format!("{origin:?} is not this server's origin: a page elsewhere may not use it"),
            ));
        }
    }
    let reads = matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|c| c.to_str().ok())
        .and_then(|c| c.split(';').next())
        .is_some_and(|c| c.trim().eq_ignore_ascii_case("application/json"));
    if !reads && !json {
        let mut res = ApiError::from(Error::invalid(
            "content-type",
            "must be application/json for a request that changes anything",
        ))
        .into_response();
        *res.status_mut() = StatusCode::UNSUPPORTED_MEDIA_TYPE;
        return Some(res);
    }
    None
}

fn forbidden(field: &str, message: String) -> Response {
    let mut e = Error::not_permitted(message);
    e.field = Some(field.to_owned());
    let mut res = ApiError::from(e).into_response();
    *res.status_mut() = StatusCode::FORBIDDEN;
    res
}

/// `localhost`, an address in 127.0.0.0/8 or `[::1]`, with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        // [::1]:7440
        Some(rest) => match rest.split_once(']') {
            Some((ip, port)) if port.is_empty() || port.starts_with(':') => ip,
            _ => return false,
        },
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn loopback_names() {
        for ok in [
            "localhost",
            "localhost:7440",
            "127.0.0.1",
            "127.9.9.9:80",
            "[::1]",
            "[::1]:7440",
            "LOCALHOST:1",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:7440",
            "127.0.0.1.evil.example",
            "[::2]:1",
            "0.0.0.0:7440",
            "[::1]x",
            "",
            "localhost.:1",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }

    #[test]
    fn what_a_page_elsewhere_sends_is_refused() {
        let host = (header::HOST, "127.0.0.1:7440");
        let json = (header::CONTENT_TYPE, "application/json");
        let post = Method::POST;
        // A client's request, and the page's own.
        assert!(refusal(&post, &headers(&[host.clone(), json.clone()]), None, true).is_none());
        let own = (header::ORIGIN, "http://127.0.0.1:7440");
        assert!(
            refusal(
                &post,
                &headers(&[host.clone(), json.clone(), own]),
                None,
                true
            )
            .is_none()
        );
        // A text/plain or form POST, with or without an Origin.
        for ct in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
        ] {
            let r = refusal(
                &post,
                &headers(&[host.clone(), (header::CONTENT_TYPE, ct)]),
                None,
                true,
            )
            .unwrap();
            assert_eq!(r.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE, "{ct}");
        }
        assert!(refusal(&post, &headers(std::slice::from_ref(&host)), None, true).is_some());
        // A foreign or null origin, even for a read.
        for origin in [
            "http://evil.example",
            "null",
            "http://127.0.0.1:7441",
            "https://127.0.0.1:7440.evil",
        ] {
            let h = headers(&[host.clone(), json.clone(), (header::ORIGIN, origin)]);
            assert_eq!(
                refusal(&Method::GET, &h, None, true).unwrap().status(),
                StatusCode::FORBIDDEN,
                "{origin}"
            );
        }
        // A rebound name, without tokens; with tokens the name is the client's.
        let rebound = headers(&[(header::HOST, "evil.example:7440")]);
        assert_eq!(
            refusal(&Method::GET, &rebound, None, true)
                .unwrap()
                .status(),
            StatusCode::FORBIDDEN
        );
        assert!(refusal(&Method::GET, &rebound, None, false).is_none());
        assert!(
            refusal(&Method::GET, &HeaderMap::new(), None, true).is_some(),
            "no Host at all"
        );
        // HTTP/2 names the host in its :authority.
        assert!(
            refusal(
                &Method::GET,
                &HeaderMap::new(),
                Some("localhost:7440"),
                true
            )
            .is_none()
        );
    }
}
