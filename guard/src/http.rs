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
//! outlive a restart; processes sharing the file hold its write
//! transaction from the admission until their service answers, so their
//! guarded requests run one at a time, in fence order.

use crate::{GuardError, Presented};
use baton_core::fencing::{self, Admitted, FenceKeys, Refused};
use http::{HeaderMap, Request, Response, StatusCode};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

/// Idle per-resource locks are dropped once the map holds this many.
const LOCKS_KEPT: usize = 1024;

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
    file: Option<std::path::PathBuf>,
}

/// What a request holds from its admission until the inner service has
/// answered: the resource's lock, and with marks in a file, the file's
/// write transaction (committed when the answer is in).
struct Admission {
    _lock: tokio::sync::OwnedMutexGuard<()>,
    #[cfg(feature = "sqlite")]
    open: Option<rusqlite::Connection>,
}

impl Marks {
    /// Marks kept in this process's memory.
    pub fn memory() -> Marks {
        Marks::default()
    }

    /// Marks kept in a SQLite file (created with the guard's table), so
    /// they outlive a restart. Each admission holds the file's write
    /// transaction until the inner service answers, so processes sharing
    /// the file run their guarded requests one at a time, in fence order.
    #[cfg(feature = "sqlite")]
    pub fn open(path: &std::path::Path) -> Result<Marks, GuardError> {
        let conn = crate::sqlite::open(path)?;
        crate::sqlite::install(&conn)?;
        Ok(Marks {
            file: Some(path.to_path_buf()),
            ..Marks::default()
        })
    }

    fn lock_for(&self, resource: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        // Many resources seen once leave no locks behind: an entry only the
        // map holds has no request waiting on it or inside it (a clone is
        // taken under this mutex), so it can go.
        if locks.len() >= LOCKS_KEPT {
            locks.retain(|_, l| Arc::strong_count(l) > 1);
        }
        Arc::clone(locks.entry(resource.to_string()).or_default())
    }

    /// How many resources' locks the map holds before it drops idle ones.
    #[cfg(test)]
    fn locks_held(&self) -> usize {
        self.locks.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Admits `presented` for `resource` (core's rule), raising the mark.
    /// In a file, the transaction is committed before this returns.
    pub fn admit(
        &self,
        resource: &str,
        presented: &Presented,
        keys: Option<&FenceKeys>,
    ) -> Result<Admitted, GuardError> {
        #[cfg(feature = "sqlite")]
        if let Some(path) = &self.file {
            let (conn, admitted) = begin_in_file(path, resource, presented, keys)?;
            commit(conn)?;
            return Ok(admitted);
        }
        let fence = presented.fence(keys)?;
        let mut memory = self.memory.lock().unwrap_or_else(|p| p.into_inner());
        let admitted = fencing::admit(resource, memory.get(resource).copied(), fence)?;
        memory.insert(resource.to_string(), fence);
        Ok(admitted)
    }

    async fn enter(
        self: Arc<Self>,
        resource: String,
        presented: Presented,
        keys: Option<Arc<FenceKeys>>,
    ) -> Result<Admission, GuardError> {
        // An unsigned, forged or malformed fence is refused before it
        // takes a lock or leaves anything behind.
        presented.fence(keys.as_deref())?;
        let lock = self.lock_for(&resource).lock_owned().await;
        #[cfg(feature = "sqlite")]
        if let Some(path) = self.file.clone() {
            let conn = tokio::task::spawn_blocking(move || {
                begin_in_file(&path, &resource, &presented, keys.as_deref()).map(|(c, _)| c)
            })
            .await
            .map_err(|e| GuardError::Unavailable(format!("the marks' thread: {e}")))??;
            return Ok(Admission {
                _lock: lock,
                open: Some(conn),
            });
        }
        self.admit(&resource, &presented, keys.as_deref())?;
        Ok(Admission {
            _lock: lock,
            #[cfg(feature = "sqlite")]
            open: None,
        })
    }
}

impl Admission {
    /// Commits the file's transaction (the mark), if there is one.
    async fn finish(self) -> Result<(), GuardError> {
        #[cfg(feature = "sqlite")]
        if let Some(conn) = self.open {
            return tokio::task::spawn_blocking(move || commit(conn))
                .await
                .map_err(|e| GuardError::Unavailable(format!("the marks' thread: {e}")))?;
        }
        Ok(())
    }
}

/// Opens the marks file, begins its write transaction and admits; the
/// connection is returned with the transaction open.
#[cfg(feature = "sqlite")]
fn begin_in_file(
    path: &std::path::Path,
    resource: &str,
    presented: &Presented,
    keys: Option<&FenceKeys>,
) -> Result<(rusqlite::Connection, Admitted), GuardError> {
    let conn = crate::sqlite::open(path)?;
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(|e| GuardError::Unavailable(format!("sqlite: {e}")))?;
    // A refusal drops the connection, which rolls the transaction back.
    let admitted = crate::sqlite::admit(&conn, resource, presented, keys)?;
    Ok((conn, admitted))
}

#[cfg(feature = "sqlite")]
fn commit(conn: rusqlite::Connection) -> Result<(), GuardError> {
    conn.execute_batch("COMMIT")
        .map_err(|e| GuardError::Unavailable(format!("sqlite: {e}")))
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
    ResBody: From<String> + Send,
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
            let admission = match Arc::clone(&layer.marks)
                .enter(resource, presented, layer.keys.clone())
                .await
            {
                Ok(a) => a,
                Err(e) => return Ok(refusal_response(&e)),
            };
            let answer = inner.call(Request::from_parts(parts, body)).await?;
            // The write is done; a mark that cannot be kept now is the
            // service's answer still (its write landed), logged by status.
            if let Err(e) = admission.finish().await {
                let mut failed = refusal_response(&e);
                *failed.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                return Ok(failed);
            }
            Ok(answer)
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn resources_seen_once_leave_no_locks_and_refused_ones_none_at_all() {
        let marks = Arc::new(Marks::memory());
        let keys = Arc::new(FenceKeys::parse("lock-test-key-0123456789abcdef0123456789").unwrap());
        for i in 0..5000u64 {
            let a = Arc::clone(&marks)
                .enter(
                    format!("r{i}"),
                    Presented::Token(keys.sign("t", i + 1)),
                    Some(keys.clone()),
                )
                .await
                .unwrap();
            a.finish().await.unwrap();
        }
        assert!(marks.locks_held() <= LOCKS_KEPT, "{}", marks.locks_held());
        let before = marks.locks_held();
        for i in 0..100u64 {
            let refused = Arc::clone(&marks)
                .enter(
                    format!("bad{i}"),
                    Presented::Fence(i + 1),
                    Some(keys.clone()),
                )
                .await;
            assert!(refused.is_err());
        }
        assert_eq!(marks.locks_held(), before, "a refused fence took a lock");
    }
}
