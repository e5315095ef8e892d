//! The HTTP guard: a tower layer that admits the fence a request carries
//! before the service behind it sees the request.
//!
//! A request names its resource in `Baton-Resource` (or the layer derives
//! it, [`FenceLayer::resource_from`]) and its fence in `Baton-Fence` (a
//! bare fence or a signed token). The layer holds the resource's lock from
//! the admission until the inner service has answered, so an earlier
//! attempt's request admitted first finishes its write before a later
//! attempt's begins, and one arriving after a later attempt's is refused
//! before it reaches the service:
//!
//! * `428` without a fence, `400` for a malformed one or a bad resource;
//! * `409` `stale_fence` for an earlier attempt's fence;
//! * `403` `unsigned_fence` / `forged_fence` when the layer has keys;
//! * `503` when the marks cannot be read or written (nothing admitted).
//!
//! Marks are kept in memory, or in a SQLite file ([`Marks::open`]) so they
//! outlive a restart and are shared by the processes that open the same file.

use crate::{GuardError, Presented};
use baton_core::fencing::{self, Admitted, FenceKeys, Refused};
use http::{HeaderMap, Request, Response, StatusCode};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

/// The header carrying the fence or signed token.
pub const FENCE_HEADER: &str = "baton-fence";
/// The header naming the resource written.
pub const RESOURCE_HEADER: &str = "baton-resource";

/// The highest fence admitted per resource, and a lock per resource held
/// while a guarded request runs.
#[derive(Debug, Default)]
pub struct Marks {
    memory: Mutex<HashMap<String, u64>>,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    #[cfg(feature = "sqlite")]
    file: Option<Mutex<rusqlite::Connection>>,
}

impl Marks {
    /// Marks kept in this process's memory.
    pub fn memory() -> Marks {
        Marks::default()
    }

    /// Marks kept in a SQLite file (created with the guard's table).
    #[cfg(feature = "sqlite")]
    pub fn open(path: &std::path::Path) -> Result<Marks, GuardError> {
        let conn = rusqlite::Connection::open(path)
            .map_err(|e| GuardError::Unavailable(format!("opening {}: {e}", path.display())))?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(|e| GuardError::Unavailable(format!("sqlite: {e}")))?;
        crate::sqlite::install(&conn)?;
        Ok(Marks {
            file: Some(Mutex::new(conn)),
            ..Marks::default()
        })
    }

    fn lock_for(&self, resource: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(locks.entry(resource.to_string()).or_default())
    }

    /// Admits `presented` for `resource` (core's rule), raising the mark.
    pub fn admit(
        &self,
        resource: &str,
        presented: &Presented,
        keys: Option<&FenceKeys>,
    ) -> Result<Admitted, GuardError> {
        #[cfg(feature = "sqlite")]
        if let Some(file) = &self.file {
            let mut conn = file.lock().unwrap_or_else(|p| p.into_inner());
            let tx = conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(|e| GuardError::Unavailable(format!("sqlite: {e}")))?;
            let admitted = crate::sqlite::admit(&tx, resource, presented, keys)?;
            tx.commit()
                .map_err(|e| GuardError::Unavailable(format!("sqlite: {e}")))?;
            return Ok(admitted);
        }
        let fence = presented.fence(keys)?;
        let mut memory = self.memory.lock().unwrap_or_else(|p| p.into_inner());
        let admitted = fencing::admit(resource, memory.get(resource).copied(), fence)?;
        memory.insert(resource.to_string(), fence);
        Ok(admitted)
    }
}

type Derive = Arc<dyn Fn(&http::request::Parts) -> Option<String> + Send + Sync>;

/// The layer: wraps a service so every request is admitted first.
#[derive(Clone)]
pub struct FenceLayer {
    marks: Arc<Marks>,
    keys: Option<Arc<FenceKeys>>,
    resource: Option<Derive>,
}

impl std::fmt::Debug for FenceLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FenceLayer")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl FenceLayer {
    pub fn new(marks: Arc<Marks>) -> FenceLayer {
        FenceLayer {
            marks,
            keys: None,
            resource: None,
        }
    }

    /// Admits only tokens these keys signed.
    pub fn with_keys(mut self, keys: FenceKeys) -> FenceLayer {
        self.keys = Some(Arc::new(keys));
        self
    }

    /// Derives the resource from the request (its path, say) instead of
    /// reading `Baton-Resource`.
    pub fn resource_from(
        mut self,
        f: impl Fn(&http::request::Parts) -> Option<String> + Send + Sync + 'static,
    ) -> FenceLayer {
        self.resource = Some(Arc::new(f));
        self
    }
}

impl<S> tower_layer::Layer<S> for FenceLayer {
    type Service = Fenced<S>;
    fn layer(&self, inner: S) -> Fenced<S> {
        Fenced {
            inner,
            layer: self.clone(),
        }
    }
}

/// A service whose requests are admitted by their fence first.
#[derive(Clone, Debug)]
pub struct Fenced<S> {
    inner: S,
    layer: FenceLayer,
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, Refused> {
    match h.get(name) {
        None => Ok(None),
        Some(v) => v.to_str().map(Some).map_err(|_| Refused::Invalid {
            field: if name == FENCE_HEADER {
                "fence"
            } else {
                "resource"
            },
            rule: format!("the {name} header is visible ASCII"),
        }),
    }
}

/// The response for a refusal: its status and `{"code","message"}`.
pub fn refusal_response<B: From<String>>(e: &GuardError) -> Response<B> {
    let status = match e {
        GuardError::Refused(Refused::Stale { .. }) => StatusCode::CONFLICT,
        GuardError::Refused(Refused::Unsigned(_) | Refused::Forged) => StatusCode::FORBIDDEN,
        GuardError::Refused(Refused::Invalid {
            field: "fence",
            rule,
        }) if rule.starts_with("required") => StatusCode::PRECONDITION_REQUIRED,
        GuardError::Refused(Refused::Invalid { .. }) => StatusCode::BAD_REQUEST,
        GuardError::NotInstalled(_) | GuardError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    let body = serde_json::json!({"code": e.code(), "message": e.to_string()}).to_string();
    let mut r = Response::new(B::from(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

impl<S, ReqBody, ResBody> tower_service::Service<Request<ReqBody>> for Fenced<S>
where
    S: tower_service::Service<Request<ReqBody>, Response = Response<ResBody>>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    ReqBody: Send + 'static,
    ResBody: From<String>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        // The clone is the one made ready by poll_ready's caller's contract:
        // take the ready one, leave the clone.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let layer = self.layer.clone();
        let (parts, body) = req.into_parts();
        let read = (|| -> Result<(String, Presented), GuardError> {
            let fence = header(&parts.headers, FENCE_HEADER)?.ok_or(Refused::Invalid {
                field: "fence",
                rule: format!("required: send the attempt's fence or token in {FENCE_HEADER}"),
            })?;
            let resource = match &layer.resource {
                Some(f) => f(&parts),
                None => header(&parts.headers, RESOURCE_HEADER)?.map(str::to_string),
            }
            .ok_or(Refused::Invalid {
                field: "resource",
                rule: format!("required: name what is written in {RESOURCE_HEADER}"),
            })?;
            fencing::check_resource(&resource)?;
            Ok((resource, Presented::parse(fence)?))
        })();
        Box::pin(async move {
            let (resource, presented) = match read {
                Ok(r) => r,
                Err(e) => return Ok(refusal_response(&e)),
            };
            let lock = layer.marks.lock_for(&resource);
            let _held = lock.lock_owned().await;
            if let Err(e) = layer
                .marks
                .admit(&resource, &presented, layer.keys.as_deref())
            {
                return Ok(refusal_response(&e));
            }
            inner.call(Request::from_parts(parts, body)).await
        })
    }
}
