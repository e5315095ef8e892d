//! # baton-guard
//!
//! baton refuses a late worker's word (a stale fence cannot complete, fail
//! or renew). The guards here refuse its deeds: each keeps, in the user's
//! own storage, the highest fence admitted per resource, and admits a write
//! only with a fence at least that high, atomically with the write.
//!
//! * [`postgres`]: a schema in any database and an admit function the
//!   user's transaction calls before it writes; a lower fence raises
//!   SQLSTATE `BG001` and the whole transaction rolls back.
//! * [`sqlite`]: the same as a table and a helper for the user's connection.
//! * [`mod@file`]: a fenced replace (written beside, synced, renamed only if
//!   the fence is admitted under a lock).
//! * [`http`]: a tower layer admitting the fence a request carries.
//!
//! The rule itself is core's ([`baton_core::fencing::admit`]); signed
//! fences ([`FenceKeys`]) stop a forged huge fence from locking a resource
//! for every honest writer.

use std::path::Path;

pub use baton_core::fencing::{Admitted, FenceKeys, Presented, Refused, Token, admit};

#[cfg(feature = "sqlite")]
pub mod sqlite;

#[cfg(feature = "postgres")]
pub mod postgres;

pub mod file;

#[cfg(feature = "http")]
pub mod http;

/// Why a guarded write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    /// The guard refused the fence (stale, unsigned, forged, or bad input).
    #[error(transparent)]
    Refused(#[from] Refused),
    /// The guard's table, schema or function is missing.
    #[error("guard_not_installed: {0}")]
    NotInstalled(String),
    /// The storage could not answer; nothing was admitted.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

impl GuardError {
    /// The error's code: a refusal's, `guard_not_installed` or `unavailable`.
    pub fn code(&self) -> &'static str {
        match self {
            GuardError::Refused(r) => r.code(),
            GuardError::NotInstalled(_) => "guard_not_installed",
            GuardError::Unavailable(_) => "unavailable",
        }
    }

    /// Whether a later attempt already wrote (the caller is a zombie and
    /// must stop, not retry).
    pub fn is_stale(&self) -> bool {
        matches!(self, GuardError::Refused(Refused::Stale { .. }))
    }
}

/// The environment variable `baton run` sets to the attempt's signed
/// token, when the authority signs fences.
pub const ENV_TOKEN: &str = "BATON_FENCE_TOKEN";
/// The environment variable `baton run` sets to the attempt's fence.
pub const ENV_FENCE: &str = "BATON_FENCE";
/// The key file guards read when none is given.
pub const ENV_KEY: &str = "BATON_FENCE_KEY";

/// What `baton run`'s child presents: its signed token when there is one,
/// else its bare fence.
pub fn from_env() -> Result<Presented, GuardError> {
    let read = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    match (read(ENV_TOKEN), read(ENV_FENCE)) {
        (Some(t), _) => Ok(Presented::parse(&t)?),
        (None, Some(f)) => Ok(Presented::parse(&f)?),
        (None, None) => Err(Refused::Invalid {
            field: "fence",
            rule: format!("give one, or run under `baton run` ({ENV_TOKEN} or {ENV_FENCE} unset)"),
        }
        .into()),
    }
}

/// Reads a key file ([`FenceKeys::parse`]); its error names the file.
pub fn read_keys(path: &Path) -> Result<FenceKeys, GuardError> {
    let text = std::fs::read_to_string(path).map_err(|e| Refused::Invalid {
        field: "fence key",
        rule: format!("cannot read {}: {e}", path.display()),
    })?;
    Ok(FenceKeys::parse(&text)?)
}

/// A new key for a key file: 32 random bytes from the kernel, as 64 hex
/// digits.
pub fn keygen() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
