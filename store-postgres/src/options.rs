//! The store URL: `postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?schema=NAME&...]`.

use baton_core::{Error, Result};
use std::time::Duration;

/// How a store is opened. [`PostgresOptions::from_url`] builds one from a URL.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// The connection settings (host, port, user, password, database).
    pub config: tokio_postgres::Config,
    /// The Postgres schema the store's tables live in (`baton` by default):
    /// several stores can share one database.
    pub schema: String,
    /// Connections in the pool.
    pub pool_size: usize,
    /// Run the decisions of callers who write at the same time inside one
    /// transaction (on by default).
    pub group_commit: bool,
    /// The longest any statement, lock wait included, may take before the
    /// store answers `Unavailable`; also how long a session may sit idle
    /// inside a transaction before the server ends it (a frozen client
    /// holding the store's lock).
    pub statement_timeout: Duration,
    /// How long connecting (or waiting for a pooled connection) may take.
    pub connect_timeout: Duration,
    /// The shortest lease granted (shorter TTLs are rounded up and the
    /// grant reports the TTL it got): 2 s by default, as on etcd, since a
    /// lease on a shared server must outlast a few round trips and a
    /// commit to mean anything to its holder.
    pub min_ttl: Duration,
}

/// `statement_timeout`: long enough for a commit, short enough to fail closed.
const STATEMENT_TIMEOUT_RANGE: (Duration, Duration) =
    (Duration::from_millis(10), Duration::from_secs(600));
const MIN_TTL_RANGE: (Duration, Duration) = (Duration::from_millis(1), Duration::from_secs(3600));
const CONNECT_TIMEOUT_RANGE: (Duration, Duration) =
    (Duration::from_millis(10), Duration::from_secs(600));

fn bad(rule: impl std::fmt::Display) -> Error {
    Error::invalid("store", rule.to_string())
}

fn duration(name: &str, value: &str, (lo, hi): (Duration, Duration)) -> Result<Duration> {
    let d = humantime::parse_duration(value).map_err(|e| {
        bad(format!(
            "{name} must be a duration like 500ms, 2s or 1m (got {value:?}: {e})"
        ))
    })?;
    if d < lo || d > hi {
        return Err(bad(format!(
            "{name} must be from {} to {} (got {value:?})",
            humantime::format_duration(lo),
            humantime::format_duration(hi)
        )));
    }
    Ok(d)
}

/// A schema name baton creates and names in every session's `search_path`
/// without quoting: lower-case ASCII letters, digits and `_`, not starting
/// with a digit, at most 63 bytes (Postgres's identifier limit).
fn check_schema(name: &str) -> Result<()> {
    let ok_start = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b == b'_');
    let ok_rest = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !ok_start || !ok_rest || name.len() > 63 || name.starts_with("pg_") {
        return Err(bad(format!(
            "schema must be 1 to 63 lower-case letters, digits or _, not starting with a digit or pg_ (got {name:?})"
        )));
    }
    Ok(())
}

impl PostgresOptions {
    /// Parses `postgres://USER[:PASSWORD]@HOST[:PORT]/DB` (or `postgresql://`)
    /// with baton's parameters `schema=NAME`, `pool=N`, `group_commit=on|off`,
    /// `statement_timeout=DUR`, `connect_timeout=DUR`, `min_ttl=DUR`; any other parameter
    /// (`application_name`, `sslmode=disable`, ...) goes to the driver.
    /// Errors name the field `store` and the rule.
    pub fn from_url(url: &str) -> Result<PostgresOptions> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(bad(format!(
                "a Postgres store URL is postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?schema=NAME] (got {:?})",
                redact(url)
            )));
        }
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut schema = "baton".to_owned();
        let mut pool_size = 8usize;
        let mut group_commit = true;
        let mut statement_timeout = Duration::from_secs(5);
        let mut connect_timeout = Duration::from_secs(5);
        let mut min_ttl = Duration::from_secs(2);
        let mut passed = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("schema", v)) => {
                    check_schema(v)?;
                    schema = v.to_owned();
                }
                Some(("pool", v)) => {
                    pool_size = v
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=256).contains(n))
                        .ok_or_else(|| bad(format!("pool must be from 1 to 256 (got {v:?})")))?;
                }
                Some(("group_commit", "on")) => group_commit = true,
                Some(("group_commit", "off")) => group_commit = false,
                Some(("group_commit", v)) => {
                    return Err(bad(format!("group_commit is on or off (got {v:?})")));
                }
                Some(("statement_timeout", v)) => {
                    statement_timeout = duration("statement_timeout", v, STATEMENT_TIMEOUT_RANGE)?;
                }
                Some(("connect_timeout", v)) => {
                    connect_timeout = duration("connect_timeout", v, CONNECT_TIMEOUT_RANGE)?;
                }
                Some(("min_ttl", v)) => min_ttl = duration("min_ttl", v, MIN_TTL_RANGE)?,
                Some(("options", _)) => {
                    return Err(bad(
                        "the options parameter is baton's own (search_path, timeouts); set server settings on the database or role instead",
                    ));
                }
                // Connections are plain TCP (the driver is built without a
                // TLS connector): a URL that demands TLS is refused here
                // rather than failing every connection as unavailable.
                Some(("sslmode", v)) if v != "disable" && v != "prefer" => {
                    return Err(bad(format!(
                        "sslmode must be disable or prefer: this build connects without TLS (got {v:?}); reach a TLS-only server through a local tunnel or proxy"
                    )));
                }
                Some((k, _)) if !k.is_empty() => passed.push(pair),
                _ => return Err(bad(format!("a URL parameter is NAME=VALUE (got {pair:?})"))),
            }
        }
        let driver_url = if passed.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", passed.join("&"))
        };
        let config: tokio_postgres::Config = driver_url.parse().map_err(|e| {
            bad(format!(
                "not a Postgres URL postgres://USER[:PASSWORD]@HOST[:PORT]/DB ({e}; got {:?})",
                redact(url)
            ))
        })?;
        if config.get_hosts().is_empty() {
            return Err(bad(format!(
                "the URL names no host (got {:?})",
                redact(url)
            )));
        }
        if config.get_user().is_none() {
            return Err(bad(format!(
                "the URL names no user (got {:?})",
                redact(url)
            )));
        }
        Ok(PostgresOptions {
            config,
            schema,
            pool_size,
            group_commit,
            statement_timeout,
            connect_timeout,
            min_ttl,
        })
    }

    /// The store as errors name it: host, port, database and schema,
    /// never the password.
    pub fn name(&self) -> String {
        let host = match self.config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
            Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
            None => String::new(),
        };
        let port = self.config.get_ports().first().copied().unwrap_or(5432);
        let db = self
            .config
            .get_dbname()
            .or(self.config.get_user())
            .unwrap_or("");
        format!("postgres://{host}:{port}/{db}?schema={}", self.schema)
    }
}

/// `url` with any password replaced, for error messages.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.split_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or("");
            if userinfo.contains(':') {
                format!("{scheme}://{user}:***@{host}")
            } else {
                url.to_owned()
            }
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn urls() {
        let o = PostgresOptions::from_url(
            "postgres://baton:secret@127.0.0.1:5433/jobs?schema=team_a&pool=4&statement_timeout=2s&application_name=w1",
        )
        .unwrap();
        assert_eq!(o.schema, "team_a");
        assert_eq!(o.pool_size, 4);
        assert_eq!(o.statement_timeout, Duration::from_secs(2));
        assert_eq!(o.config.get_dbname(), Some("jobs"));
        assert_eq!(o.config.get_application_name(), Some("w1"));
        assert_eq!(o.name(), "postgres://127.0.0.1:5433/jobs?schema=team_a");
        assert!(PostgresOptions::from_url("postgres://u@h/db?sslmode=disable").is_ok());
        let d = PostgresOptions::from_url("postgresql://u@h/db").unwrap();
        assert_eq!(d.schema, "baton");
        assert!(d.group_commit);
        for (url, starts) in [
            ("postgres://u@h/db?schema=Team", "schema"),
            ("postgres://u@h/db?schema=1a", "schema"),
            ("postgres://u@h/db?schema=pg_x", "schema"),
            ("postgres://u@h/db?schema=", "schema"),
            ("postgres://u@h/db?pool=0", "pool"),
            ("postgres://u@h/db?pool=many", "pool"),
            (
                "postgres://u@h/db?statement_timeout=0s",
                "statement_timeout",
            ),
            ("postgres://u@h/db?connect_timeout=soon", "connect_timeout"),
            ("postgres://u@h/db?min_ttl=2h", "min_ttl"),
            ("postgres://u@h/db?group_commit=maybe", "group_commit"),
            ("postgres://u@h/db?options=-c%20x", "the options"),
            ("postgres://u@h/db?nonsense", "a URL parameter"),
            ("postgres://u@h/db?sslmode=require", "sslmode"),
            ("postgres://u@h/db?sslmode=verify-full", "sslmode"),
            ("postgres://h/db", "the URL names no user"),
        ] {
            let e = PostgresOptions::from_url(url).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("store"), "{url}: {e}");
            assert!(e.message.starts_with(starts), "{url}: {e}");
        }
        let e = PostgresOptions::from_url("postgres://u:hunter2@h/db?bogus_param=1").unwrap_err();
        assert!(!e.message.contains("hunter2"), "{e}");
        assert!(PostgresOptions::from_url("mysql://u@h/db").is_err());
    }
}
