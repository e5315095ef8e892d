//! Reading the values of the CLI's own commands (`run`, `serve`): ids
//! and durations by the catalogue's rules. An operation of the catalogue
//! is read by core (`baton_core::given`).

use baton_core::catalogue::{self, Kind};
use baton_core::{Error, Id};

pub(crate) fn id(field: &str, value: &str) -> Result<Id, Error> {
    Id::parse(field, value)
}

/// Parses `--lock-delay DUR`: `0` (none) or a DUR (the catalogue's rule).
pub(crate) fn parse_lock_delay(value: Option<&str>) -> Result<Option<u64>, Error> {
    value
        .map(|v| catalogue::duration_ms(Kind::LockDelay, "lock_delay", v))
        .transpose()
}

/// Parses a TTL: a number with a unit (`750ms`, `30s`, `5m`, `2h`), 1 ms
/// to 7 days (the catalogue's rule, as every front end reads it). `serve`'s
/// durations; the client-only build has none.
#[cfg_attr(not(feature = "serve"), allow(dead_code))]
pub fn parse_ttl(value: Option<&str>) -> Result<Option<u64>, Error> {
    value
        .map(|v| catalogue::duration_ms(Kind::Ttl, "ttl", v))
        .transpose()
}
