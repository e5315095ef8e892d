//! Waiting: `next` tried again while nothing is ready (or, kept waiting,
//! while the queues are drained too), and a claim tried again while
//! another holds the task. Every deadline is the authority's clock's.

#[cfg(feature = "keeper")]
use crate::{
    authority::{Authority, Reply},
    error::Result,
    graph::Taker,
    id::{Id, TaskId},
    refusal::Refusal,
    store::Store,
};

/// The longest pause between two tries of a waiting `next`.
pub const NEXT_WAIT_CAP_MS: u64 = 1_000;
/// The first pause of a waiting `next`; each one after doubles, to the cap.
pub const NEXT_WAIT_FIRST_MS: u64 = 25;
/// On a store that watches (etcd): how far apart waiters woken by one
/// change try again, at most.
pub const NEXT_WAIT_WOKEN_SPREAD_MS: u64 = 50;

#[cfg(feature = "keeper")]
impl<S: Store> Authority<S> {
    /// [`Authority::next_for`], tried again while it answers `none_ready`,
    /// for up to `wait_ms`. On a store that watches ([`Store::watch_ready`]:
    /// etcd) it waits for a task to enter a ready index (at most
    /// [`NEXT_WAIT_CAP_MS`] at a time), then tries within a random
    /// [`NEXT_WAIT_WOKEN_SPREAD_MS`], or four times as long as its last
    /// try took if that is longer (a loaded store); elsewhere it pauses
    /// [`NEXT_WAIT_FIRST_MS`] doubling to [`NEXT_WAIT_CAP_MS`], each
    /// jittered by a quarter either way, so waiting workers do not try in
    /// step. `drained` ends the wait at once.
    pub async fn next_waiting(&self, taker: Taker, queues: &[Id], wait_ms: u64) -> Result<Reply> {
        self.next_as_asked(taker, queues, Some(wait_ms), false)
            .await
    }

    /// [`Authority::next_waiting`] that also waits out `drained`: a worker
    /// waiting for work, which an add (or an operator's act) brings. A
    /// drained queue is polled as an empty one is, each try answered from
    /// the store's counts ([`Authority::census_from_counts`]).
    pub async fn next_keep_waiting(
        &self,
        taker: Taker,
        queues: &[Id],
        wait_ms: u64,
    ) -> Result<Reply> {
        self.next_as_asked(taker, queues, Some(wait_ms), true).await
    }

    /// `next` as a front end asks it: at once, waiting up to `wait_ms`
    /// while nothing is ready, or (`keep_waiting`) through `drained` too.
    /// `keep_waiting` without a wait is refused: it says how long to wait.
    pub async fn next_as_asked(
        &self,
        taker: Taker,
        queues: &[Id],
        wait_ms: Option<u64>,
        keep_waiting: bool,
    ) -> Result<Reply> {
        self.next_many_as_asked(taker, queues, wait_ms, keep_waiting, 1)
            .await?
            .pop()
            .ok_or_else(|| crate::error::Error::unavailable("a `next` came to no answer"))
    }

    /// [`Authority::next_as_asked`] for up to `count` grants in one commit
    /// ([`Authority::next_many_for`]): it waits until there is at least one.
    pub async fn next_many_as_asked(
        &self,
        taker: Taker,
        queues: &[Id],
        wait_ms: Option<u64>,
        keep_waiting: bool,
        count: u32,
    ) -> Result<Vec<Reply>> {
        match (wait_ms, keep_waiting) {
            (Some(ms), keep) => self.next_waiting_in(taker, queues, ms, keep, count).await,
            (None, false) => self.next_many_for(taker, queues, count).await,
            (None, true) => Err(crate::error::Error::invalid(
                "keep_waiting",
                "goes with a wait: how long to keep waiting for work",
            )),
        }
    }

    async fn next_waiting_in(
        &self,
        taker: Taker,
        queues: &[Id],
        wait_ms: u64,
        through_drained: bool,
        count: u32,
    ) -> Result<Vec<Reply>> {
        // The deadline is the authority's clock's, as every time in core.
        let until = self.clock.now().plus_ms(wait_ms);
        let mut pause = NEXT_WAIT_FIRST_MS;
        loop {
            let tried = self.clock.now();
            let replies = self.next_many_for(taker.clone(), queues, count).await?;
            let now = self.clock.now();
            // How long a try takes here now: a spread narrower than a few
            // tries lets woken waiters try before the first one's grant
            // is seen (a loaded store, a slow network).
            let try_ms = now.millis_since(tried);
            let waits = match replies.as_slice() {
                [Reply::Refused(Refusal::NoneReady { .. })] => true,
                [Reply::Refused(Refusal::Drained { .. })] => through_drained,
                _ => false,
            };
            if !waits || now >= until {
                return Ok(replies);
            }
            let noise = std::hash::BuildHasher::hash_one(
                &std::collections::hash_map::RandomState::new(),
                pause,
            );
            let left_ms = until.millis_since(now);
            let query = self.next_query(taker.clone(), queues)?;
            let pause_ms = if self
                .store
                .watch_ready(&query, NEXT_WAIT_CAP_MS.min(left_ms))
                .await?
            {
                // Woken with every other waiter: a spread, so they do not
                // all go for the one task that became ready.
                noise % (NEXT_WAIT_WOKEN_SPREAD_MS.max(try_ms.saturating_mul(4)) + 1)
            } else {
                pause - pause / 4 + noise % (pause / 2 + 1)
            };
            let left_ms = until.millis_since(self.clock.now());
            tokio::time::sleep(std::time::Duration::from_millis(pause_ms.min(left_ms))).await;
            pause = (pause * 2).min(NEXT_WAIT_CAP_MS);
        }
    }
}

#[cfg(feature = "keeper")]
impl<S: Store> Authority<S> {
    /// [`Authority::claim`], tried again while it is refused because
    /// another holds the task (or a lock delay holds it), for up to
    /// `wait_ms`: pauses of 100 ms doubling to 1 s, each jittered by a
    /// quarter either way. Any other answer (a grant, another refusal, an
    /// error) ends the wait at once.
    pub async fn claim_waiting(
        &self,
        task: &TaskId,
        owner: &Id,
        ttl_ms: Option<u64>,
        wait_ms: u64,
    ) -> Result<Reply> {
        let until = self.clock.now().plus_ms(wait_ms);
        let mut pause: u64 = 100;
        loop {
            let reply = self.claim(task, owner, ttl_ms).await?;
            let now = self.clock.now();
            let waits = matches!(
                reply,
                Reply::Refused(Refusal::Held { .. } | Refusal::LockDelay { .. })
            );
            if !waits || now >= until {
                return Ok(reply);
            }
            let noise = std::hash::BuildHasher::hash_one(
                &std::collections::hash_map::RandomState::new(),
                pause,
            );
            let pause_ms = pause - pause / 4 + noise % (pause / 2 + 1);
            let left_ms = until.millis_since(now);
            tokio::time::sleep(std::time::Duration::from_millis(pause_ms.min(left_ms))).await;
            pause = (pause * 2).min(1000);
        }
    }
}
