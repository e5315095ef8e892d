//! Reading a command line's values: ids, durations by the catalogue's
//! rules, error objects, evidence, states, manifests.

use baton_core::catalogue::{self, Kind};
use baton_core::{Error, Id, Manifest, State};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Read;

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
/// to 7 days (the catalogue's rule, as every front end reads it).
pub fn parse_ttl(value: Option<&str>) -> Result<Option<u64>, Error> {
    value
        .map(|v| catalogue::duration_ms(Kind::Ttl, "ttl", v))
        .transpose()
}

pub(crate) fn parse_error_json(value: &str) -> Result<Value, Error> {
    let v = baton_core::json::parse_strict("error", value)?;
    baton_core::request::validate_error(&v)?;
    Ok(v)
}

pub(crate) fn parse_evidence(items: &[String]) -> Result<BTreeMap<String, String>, Error> {
    let mut out = BTreeMap::new();
    for item in items {
        let (k, v) = item.split_once('=').ok_or_else(|| {
            Error::invalid("evidence", format!("must be KEY=sha256:HEX (got {item:?})"))
        })?;
        if out.insert(k.to_owned(), v.to_owned()).is_some() {
            return Err(Error::invalid(
                "evidence",
                format!("key {k:?} is given twice"),
            ));
        }
    }
    baton_core::request::validate_evidence(&out)?;
    Ok(out)
}

pub(crate) fn parse_state(value: &str) -> Result<State, Error> {
    State::parse("state", value)
}

pub(crate) fn read_manifest(file: Option<&std::path::Path>) -> Result<Manifest, Error> {
    let limit = baton_core::manifest::MAX_MANIFEST_BYTES as u64 + 1;
    let mut text = String::new();
    let read = match file {
        Some(p) => std::fs::File::open(p)
            .and_then(|f| f.take(limit).read_to_string(&mut text))
            .map_err(|e| Error::invalid("file", format!("cannot read {}: {e}", p.display()))),
        None => std::io::stdin()
            .take(limit)
            .read_to_string(&mut text)
            .map_err(|e| Error::invalid("manifest", format!("cannot read standard input: {e}"))),
    };
    read?;
    Manifest::from_json(&text)
}
