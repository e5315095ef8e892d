//! Reaching the cluster: which member to ask, the retries of a call
//! within its deadline, and what etcd's errors mean.

use super::*;

/// gRPC's status code OUT_OF_RANGE: etcd's answer for a read at a revision
/// it has compacted (or not reached yet).
pub(super) const GRPC_OUT_OF_RANGE: i32 = 11;

/// A read at a pinned revision: `Ok(None)` when etcd no longer has that
/// revision, so the caller can read again at the current one.
pub(super) fn not_compacted<T>(
    r: std::result::Result<T, etcd_client::Error>,
) -> std::result::Result<Option<T>, etcd_client::Error> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(etcd_client::Error::GRpcStatus(s)) if i32::from(s.code()) == GRPC_OUT_OF_RANGE => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// gRPC's status code UNAVAILABLE (etcd-client does not re-export tonic's `Code`).
pub(super) const GRPC_UNAVAILABLE: i32 = 14;
/// etcd's `rpctypes.ErrGRPCNoLeader`: a member with no leader refuses a
/// request before proposing it.
pub(super) const ETCD_NO_LEADER: &str = "etcdserver: no leader";
/// etcd's `rpctypes.ErrGRPCLeaseExist`: a lease with that id was granted.
pub(super) const ETCD_LEASE_EXISTS: &str = "etcdserver: lease already exists";

/// etcd's `rpctypes.ErrGRPCLeaseNotFound`: a put named a lease the
/// cluster does not have, and the whole transaction was refused.
pub(super) const ETCD_LEASE_NOT_FOUND: &str = "etcdserver: requested lease not found";

pub(super) fn names_a_lost_lease(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s) if s.message() == ETCD_LEASE_NOT_FOUND)
}

/// What an etcd error proves about a request, from its gRPC status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cause {
    /// It never reached a leader: no connection could be made, or a member
    /// with no leader refused it. Nothing was applied.
    NeverSent,
    /// It may have been applied (a timeout, a lost reply, a connection that
    /// broke after the request went out, anything else).
    Unknown,
}

pub(super) fn cause_of(e: &etcd_client::Error) -> Cause {
    match e {
        etcd_client::Error::TransportError(_) => Cause::NeverSent,
        etcd_client::Error::GRpcStatus(s) if i32::from(s.code()) == GRPC_UNAVAILABLE => {
            if s.message() == ETCD_NO_LEADER || never_connected(s) {
                Cause::NeverSent
            } else {
                Cause::Unknown
            }
        }
        _ => Cause::Unknown,
    }
}

/// Whether a transport failure under gRPC is one of connecting (refused,
/// unreachable): the request never went out. A connection that broke
/// after it did (a member killed after it committed, before it answered)
/// proves nothing, and a write's leases must not be let go on it.
fn never_connected(s: &tonic::Status) -> bool {
    let mut cause = std::error::Error::source(s);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::AddrNotAvailable
                    | std::io::ErrorKind::HostUnreachable
                    | std::io::ErrorKind::NetworkUnreachable
            )
        {
            return true;
        }
        let text = c.to_string();
        if text.contains("tcp connect error") || text.contains("error trying to connect") {
            return true;
        }
        cause = c.source();
    }
    false
}

/// An etcd error as one short cause a person can act on; the whole gRPC
/// and transport chain stays in the error's source.
pub(super) fn describe(e: &etcd_client::Error) -> String {
    match e {
        etcd_client::Error::TransportError(_) => "cannot connect".to_owned(),
        etcd_client::Error::GRpcStatus(s) => {
            if cause_of(e) == Cause::NeverSent && never_connected(s) {
                "cannot connect (connection refused or unreachable: is etcd running at that address?)"
                    .to_owned()
            } else if s.message().is_empty() {
                s.code().description().to_owned()
            } else {
                format!("{}: {}", s.code().description(), s.message())
            }
        }
        other => other.to_string(),
    }
}

/// The one place etcd's errors become baton's: `Unavailable` naming the
/// cluster and what was being done, with the native error as the source.
pub(super) fn map_etcd(
    endpoints_text: &str,
    context: &str,
    what: &str,
    e: etcd_client::Error,
) -> Error {
    Error::unavailable(format!("etcd {endpoints_text}: {what}: {}", describe(&e)))
        .with_context(context.to_owned())
        .with_source(e)
}

/// Whether `e` says the member could not be reached at all (the call was
/// never delivered): a refused or failed connection.
pub(super) fn unreachable(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
        etcd_client::Error::GRpcStatus(s) => {
            s.code() == tonic::Code::Unavailable && s.message().contains("connect")
        }
        _ => false,
    }
}

/// The endpoints as a person writes them.
pub(super) fn endpoints(list: &[String]) -> String {
    list.join(",")
}

impl FabricStore {
    /// Runs one call with the deadline, retrying it on another member (a
    /// member that died keeps receiving some requests for a while): for
    /// calls whose repeat is harmless, reads and a lease grant (a lease a
    /// lost answer left behind expires on its own).
    pub(super) async fn call_retrying<T, F, Fut>(&self, what: &str, f: F) -> Result<T>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let deadline = tokio::time::Instant::now() + self.opts.timeout;
        let mut last = None;
        let start = self.next_turn();
        for attempt in 0..10u64 {
            let now = tokio::time::Instant::now();
            if now >= deadline {
                break;
            }
            let (client, member) = self.client_for(start, attempt);
            // The last member not passed over may take the rest of the
            // deadline: on a loaded machine a first connection can take
            // longer than one attempt's share.
            let until = if self.others_suspect(member) {
                deadline
            } else {
                (now + self.attempt_timeout()).min(deadline)
            };
            match tokio::time::timeout_at(until, f(client)).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => {
                    // A member that refuses the connection is down: ask the
                    // others first for a while.
                    if unreachable(&e) {
                        self.suspect(member);
                    }
                    last = Some(e);
                }
                // A member that does not answer: ask the next.
                Err(_) => {
                    self.suspect(member);
                    continue;
                }
            }
            tokio::time::sleep(Duration::from_millis(10 * attempt)).await;
        }
        Err(match last {
            Some(e) => self.map_err(what, e),
            None => Error::unavailable(format!(
                "etcd {}: {what}: no answer within {:?}",
                endpoints(&self.opts.endpoints),
                self.opts.timeout
            ))
            .with_context(self.context()),
        })
    }

    /// How long one call may take before it is sent again (to whichever
    /// member the client picks next): a third of the deadline, so a member
    /// that hangs costs one short wait, not the whole deadline.
    /// The client for attempt `n` of a call that starts at `start`: the
    /// balanced client when there are no per-member ones, else each member
    /// in turn.
    pub(super) fn client_for(&self, start: u64, n: u64) -> (Client, Option<usize>) {
        if self.members.is_empty() {
            return (self.client.clone(), None);
        }
        let len = self.members.len();
        let now = self.since_born_ms();
        let first = usize::try_from((start + n) % len as u64).unwrap_or(0);
        // The first member in turn that has not just failed to answer; if
        // every one has, the one in turn.
        let i = (0..len)
            .map(|k| (first + k) % len)
            .find(|i| self.suspect[*i].load(Ordering::Relaxed) <= now)
            .unwrap_or(first);
        (self.members[i].clone(), Some(i))
    }

    /// Whether every member but `i` is being passed over now.
    pub(super) fn others_suspect(&self, i: Option<usize>) -> bool {
        let now = self.since_born_ms();
        (0..self.members.len())
            .filter(|k| Some(*k) != i)
            .all(|k| self.suspect[k].load(Ordering::Relaxed) > now)
    }

    /// Passes over member `i` for a while: a call to it went unanswered.
    pub(super) fn suspect(&self, i: Option<usize>) {
        if let Some(i) = i {
            let until = self.since_born_ms() + 5_000;
            self.suspect[i].store(until, Ordering::Relaxed);
        }
    }

    pub(super) fn since_born_ms(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    pub(super) fn next_turn(&self) -> u64 {
        self.turn.fetch_add(1, Ordering::Relaxed)
    }

    pub(super) fn attempt_timeout(&self) -> Duration {
        (self.opts.timeout / 3).max(Duration::from_millis(100))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unavailable(cause: std::io::ErrorKind) -> etcd_client::Error {
        let mut s = tonic::Status::unavailable("transport error");
        s.set_source(std::sync::Arc::new(std::io::Error::new(
            cause,
            "under gRPC",
        )));
        etcd_client::Error::GRpcStatus(s)
    }

    #[test]
    fn only_a_connection_never_made_proves_a_write_was_not_applied() {
        use std::io::ErrorKind as K;
        assert_eq!(
            cause_of(&unavailable(K::ConnectionRefused)),
            Cause::NeverSent
        );
        // A member killed after it committed, before it answered: the
        // connection broke after the request went out.
        assert_eq!(cause_of(&unavailable(K::ConnectionReset)), Cause::Unknown);
        assert_eq!(cause_of(&unavailable(K::BrokenPipe)), Cause::Unknown);
        let no_leader = tonic::Status::unavailable(ETCD_NO_LEADER);
        assert_eq!(
            cause_of(&etcd_client::Error::GRpcStatus(no_leader)),
            Cause::NeverSent
        );
    }
}
