//! The connections a server holds, and how it lets go of them: a client
//! that connects and sends nothing, sends only an HTTP/2 preface, or
//! trickles its headers never reaches a handler, so no handler's timeout
//! covers it. Here:
//! - a connection that has not begun a request within the read timeout of
//!   being accepted (or of its last answer, after keep-alive idle) is
//!   closed; one with a request in flight is never closed for idleness (a
//!   blocking query may wait a minute);
//! - at most `max` connections are held; a new one beyond that takes the
//!   place of the connection that has been idle longest, and is refused
//!   only when every connection has a request in flight. So connections
//!   that send nothing cannot keep a client with a request out.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// One connection's state.
#[derive(Debug)]
pub(crate) struct Conn {
    id: u64,
    /// Requests in flight on it.
    active: AtomicUsize,
    /// Since when it has had no request in flight (ms since the registry's epoch).
    idle_since: AtomicI64,
    /// Whether it has answered a request (then keep-alive idle applies).
    served: AtomicBool,
    /// Told when the registry needs its place.
    evict: Notify,
}

impl Conn {
    /// A request began on it.
    pub fn begin(&self) {
        self.active.fetch_add(1, Ordering::SeqCst);
    }

    /// A request on it was answered at `now_ms`.
    pub fn end(&self, now_ms: i64) {
        self.served.store(true, Ordering::SeqCst);
        self.idle_since.store(now_ms, Ordering::SeqCst);
        self.active.fetch_sub(1, Ordering::SeqCst);
    }

    fn idle(&self) -> bool {
        self.active.load(Ordering::SeqCst) == 0
    }
}

/// Every connection a server holds.
#[derive(Debug)]
pub(crate) struct Conns {
    max: usize,
    /// How long a connection may go without beginning a request, from its
    /// accept or its last answer.
    first: Duration,
    /// The same after it has answered a request: longer than a client
    /// keeps an idle pooled connection (the `http://` store: 30 s), so the
    /// client lets go first and never sends on a connection being closed.
    keep_alive: Duration,
    epoch: Instant,
    next: AtomicU64,
    all: Mutex<HashMap<u64, Arc<Conn>>>,
}

/// How long an idle connection that has answered a request is kept.
pub const KEEP_ALIVE: Duration = Duration::from_secs(60);

impl Conns {
    pub fn new(max: usize, first: Duration) -> Conns {
        Conns {
            max: max.max(1),
            first,
            keep_alive: KEEP_ALIVE.max(first),
            epoch: Instant::now(),
            next: AtomicU64::new(0),
            all: Mutex::new(HashMap::new()),
        }
    }

    pub fn now_ms(&self) -> i64 {
        i64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(i64::MAX)
    }

    /// A place for a new connection: `None` when every connection held has
    /// a request in flight. At the limit, the connection idle longest is
    /// told to close and leaves the registry now.
    pub fn admit(&self) -> Option<Arc<Conn>> {
        let mut all = self.all.lock().ok()?;
        if all.len() >= self.max {
            let oldest = all
                .values()
                .filter(|c| c.idle())
                .min_by_key(|c| c.idle_since.load(Ordering::SeqCst))
                .map(|c| c.id)?;
            if let Some(c) = all.remove(&oldest) {
                c.evict.notify_one();
            }
        }
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let conn = Arc::new(Conn {
            id,
            active: AtomicUsize::new(0),
            idle_since: AtomicI64::new(self.now_ms()),
            served: AtomicBool::new(false),
            evict: Notify::new(),
        });
        all.insert(id, conn.clone());
        Some(conn)
    }

    /// The connection has closed.
    pub fn leave(&self, conn: &Conn) {
        if let Ok(mut all) = self.all.lock() {
            all.remove(&conn.id);
        }
    }

    /// Resolves when `conn` should be closed: idle past its limit, or
    /// evicted to make room.
    pub async fn until_closed(&self, conn: &Conn) {
        let evicted = conn.evict.notified();
        tokio::pin!(evicted);
        loop {
            let limit = if conn.served.load(Ordering::SeqCst) {
                self.keep_alive
            } else {
                self.first
            };
            let limit_ms = i64::try_from(limit.as_millis()).unwrap_or(i64::MAX);
            let wait_ms = if conn.idle() {
                let idle_for = self.now_ms() - conn.idle_since.load(Ordering::SeqCst);
                if idle_for >= limit_ms {
                    return;
                }
                limit_ms - idle_for
            } else {
                limit_ms
            };
            let wait = Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0).max(1));
            tokio::select! {
                _ = &mut evicted => return,
                _ = tokio::time::sleep(wait.min(Duration::from_secs(1))) => {}
            }
        }
    }
}
