//! # baton-open
//!
//! The crate a Rust program adds to use baton: [`authority_for`] opens
//! whichever store a URL names (`sqlite:`, `sled:`, `etcd://`,
//! `postgres://`, `http://` for a `baton serve`, `memory:`) and answers an
//! [`Authority`] over it, the way `object_store::parse_url` is that
//! crate's one entry. Each backend is a cargo feature (`sqlite` by
//! default; `sled`, `fabric` for etcd, `postgres`); a URL whose backend is
//! compiled out is an error naming the feature. Core's public types are
//! re-exported, so this is the only baton crate a program needs.
//!
//! ```no_run
//! # async fn example() -> baton_open::Result<()> {
//! let a = baton_open::authority_for("sqlite:baton.db").await?;
//! let task = baton_open::Id::parse("task", "nightly-build")?;
//! let owner = baton_open::Id::parse("owner", "worker-1")?;
//! let reply = a.claim(&task, &owner, Some(30_000)).await?;
//! if let Some(grant) = reply.grant() {
//!     println!("run it; report with fence {}", grant.fence);
//! }
//! # Ok(()) }
//! ```

mod url;

pub use baton_core::*;
pub use url::{
    DEFAULT_STORE, DynAuthority, FENCE_KEY_ENV, Opened, StoreUrl, absent_store, authority_for,
    authority_with_token, fence_keys_from_env, open_url, read_fence_keys, store_for, token,
    use_token,
};

/// Lets the work stores do after answering finish (at most 3 s): on etcd,
/// revoking the leases that ended grants left holding nothing and those a
/// dropped store kept for reuse. A process calls it before it exits, after
/// its stores are dropped.
pub async fn finish_stores() {
    #[cfg(feature = "fabric")]
    baton_adapter_fabric::finish_revokes(std::time::Duration::from_secs(3)).await;
}
