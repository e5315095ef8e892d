//! Store URLs and `authority_for`: the one place that knows URL schemes.

use baton_core::access::Permits;
use baton_core::fencing::FenceKeys;
use baton_core::store::Meter;
use baton_core::{Authority, Error, MemoryStore, Store, SystemClock};
use std::sync::Arc;
use std::time::Duration;

/// An authority over whichever store a URL names.
pub type DynAuthority = Authority<Arc<dyn Store>>;

/// The store used when neither `--store` nor `BATON_STORE` names one.
pub const DEFAULT_STORE: &str = "sqlite:baton.db";

/// A parsed store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    Sqlite {
        path: String,
        busy_timeout: Option<Duration>,
        group_commit: bool,
    },
    Sled {
        path: String,
        busy_timeout: Option<Duration>,
        group_commit: bool,
    },
    Etcd {
        endpoints: Vec<String>,
        prefix: String,
        /// etcd's smallest lease TTL (default 2s).
        min_ttl: Option<Duration>,
        /// The deadline of every call to the cluster (default 3s).
        timeout: Option<Duration>,
    },
    /// `postgres://...`: checked and parsed by the Postgres store itself.
    Postgres { url: String },
    /// `http://HOST:PORT` or `http+unix://PATH`: a `baton serve`; checked
    /// and parsed by the HTTP store itself.
    Http { url: String },
    /// `fault`: every write fails so (for testing how callers handle it).
    Memory {
        fault: Option<baton_core::fault::Fault>,
    },
}

/// `min_ttl` (etcd): whole seconds, up to the longest lease TTL.
const MIN_TTL_RANGE: (Duration, Duration) =
    (Duration::from_secs(1), Duration::from_secs(7 * 24 * 3600));
/// `timeout` (etcd): long enough for a round trip, short enough to fail closed.
const TIMEOUT_RANGE: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(600));
/// `busy_timeout` (SQLite, sled): no wait at all up to an hour.
const BUSY_TIMEOUT_RANGE: (Duration, Duration) = (Duration::ZERO, Duration::from_secs(3600));

/// A store URL's duration parameter, within `range`. The error's field is
/// `store`, as for every part of a store URL, and its message names the
/// parameter first.
fn param(name: &str, value: &str, (lo, hi): (Duration, Duration)) -> Result<Duration, Error> {
    let d = humantime::parse_duration(value).map_err(|e| {
        Error::invalid(
            "store",
            format!("{name} must be a duration like 500ms, 2s or 1m (got {value:?}: {e})"),
        )
    })?;
    if d < lo || d > hi {
        return Err(Error::invalid(
            "store",
            format!(
                "{name} must be from {} to {} (got {value:?})",
                humantime::format_duration(lo),
                humantime::format_duration(hi)
            ),
        ));
    }
    Ok(d)
}

impl StoreUrl {
    /// Parses `sqlite:PATH[?busy_timeout=DUR]`, `sled:PATH[?busy_timeout=DUR]`,
    /// `etcd://HOST:PORT[,HOST:PORT...][/PREFIX]` or `memory:`.
    pub fn parse(url: &str) -> Result<StoreUrl, Error> {
        let shown = Error::shown_url(url);
        let bad = |rule: &str| Error::invalid("store", format!("{rule} (got {shown:?})"));
        if baton_store_http::is_http_url(url) {
            return Ok(StoreUrl::Http {
                url: url.to_owned(),
            });
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(StoreUrl::Postgres {
                url: url.to_owned(),
            });
        }
        if let Some(rest) = url.strip_prefix("etcd://") {
            let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
            let (hosts, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            let mut min_ttl = None;
            let mut timeout = None;
            for pair in query.split('&').filter(|p| !p.is_empty()) {
                match pair.split_once('=') {
                    Some(("min_ttl", v)) => min_ttl = Some(param("min_ttl", v, MIN_TTL_RANGE)?),
                    Some(("timeout", v)) => timeout = Some(param("timeout", v, TIMEOUT_RANGE)?),
                    _ => return Err(Error::unknown_url_parameter(pair)),
                }
            }
            if let Some(c) = prefix.chars().find(|c| c.is_control()) {
                return Err(Error::invalid(
                    "store",
                    format!(
                        "the prefix must not contain control characters (found U+{:04X})",
                        c as u32
                    ),
                ));
            }
            let endpoints: Vec<String> = hosts.split(',').map(str::to_owned).collect();
            if endpoints.iter().any(|e| e.is_empty() || !e.contains(':')) {
                return Err(bad(
                    "etcd URLs are etcd://HOST:PORT[,HOST:PORT...][/PREFIX]",
                ));
            }
            return Ok(StoreUrl::Etcd {
                endpoints,
                prefix: prefix.to_owned(),
                min_ttl,
                timeout,
            });
        }
        let Some((scheme, rest)) = url.split_once(':') else {
            return Err(bad(
                "a store URL is sqlite:PATH, sled:PATH, etcd://HOSTS/PREFIX, postgres://USER@HOST/DB, http://HOST:PORT or memory:",
            ));
        };
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let mut busy_timeout = None;
        let mut group_commit = true;
        let mut fault = None;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("busy_timeout", v)) => {
                    busy_timeout = Some(param("busy_timeout", v, BUSY_TIMEOUT_RANGE)?);
                }
                Some(("fault", "unavailable")) if scheme == "memory" => {
                    fault = Some(baton_core::fault::Fault::UnavailableBefore);
                }
                Some(("fault", "indeterminate")) if scheme == "memory" => {
                    fault = Some(baton_core::fault::Fault::IndeterminateAfter);
                }
                Some(("group_commit", "on")) => group_commit = true,
                Some(("group_commit", "off")) => group_commit = false,
                Some(("group_commit", _)) => return Err(bad("group_commit is on or off")),
                _ => return Err(Error::unknown_url_parameter(pair)),
            }
        }
        match scheme {
            "sqlite" | "sled" if path.is_empty() => Err(bad("the URL names no path")),
            "sqlite" => Ok(StoreUrl::Sqlite {
                path: path.to_owned(),
                busy_timeout,
                group_commit,
            }),
            "sled" => Ok(StoreUrl::Sled {
                path: path.to_owned(),
                busy_timeout,
                group_commit,
            }),
            "memory" if !path.is_empty() => Err(bad(
                "a memory store has no path: memory: or memory:?fault=unavailable|indeterminate",
            )),
            "memory" => Ok(StoreUrl::Memory { fault }),
            other => Err(bad(&format!(
                "unknown store scheme {other:?}; use sqlite:, sled:, etcd://, postgres://, http:// or memory:"
            ))),
        }
    }
}

/// The cargo feature a URL's backend is built with, and the URL's scheme;
/// `None` for the stores every build has (memory, HTTP).
fn backend_feature(url: &StoreUrl) -> Option<(&'static str, &'static str)> {
    match url {
        StoreUrl::Sqlite { .. } => Some(("sqlite", "sqlite:")),
        StoreUrl::Sled { .. } => Some(("sled", "sled:")),
        StoreUrl::Etcd { .. } => Some(("fabric", "etcd://")),
        StoreUrl::Postgres { .. } => Some(("postgres", "postgres://")),
        StoreUrl::Memory { .. } | StoreUrl::Http { .. } => None,
    }
}

/// The error for a URL whose backend this build left out. No part of it
/// sits behind a feature, so CI's all-features build checks and tests it.
fn compiled_out(url: &StoreUrl) -> Error {
    match backend_feature(url) {
        Some((feature, scheme)) => Error::unsupported(format!(
            "{scheme} stores need baton built with the `{feature}` feature (the CLI: cargo build -p baton-cli --features {feature}; Python: MATURIN_PEP517_ARGS=\"--features {feature}\" pip install ./python; a library: the `{feature}` feature of baton-open)"
        )),
        None => Error::unsupported("this build has no store for that URL"),
    }
}

/// The bearer token `http://` stores send when none is given otherwise:
/// set once by the CLI's `--token`.
static TOKEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Makes `token` the one `http://` stores opened by [`store_for`] send
/// (the CLI's `--token`); the first call wins.
pub fn use_token(token: String) {
    let _ = TOKEN.set(token);
}

/// The token an `http://` store sends: [`use_token`]'s, else `BATON_TOKEN`.
pub fn token() -> Option<String> {
    TOKEN
        .get()
        .cloned()
        .or_else(|| std::env::var("BATON_TOKEN").ok())
        .filter(|t| !t.is_empty())
}

/// Builds the store a URL names, wrapped in an authority on the system
/// clock. The one seam embedders and the CLI share.
pub async fn authority_for(url: &str) -> Result<DynAuthority, Error> {
    authority_with_token(url, None).await
}

/// The path a local file store URL (`sqlite:`, `sled:`) names when there
/// is nothing there yet, else `None`. Opening such a store creates it (the
/// file, its log and its gate, and the schema written): a caller that only
/// reads answers as an empty store would instead (an empty `memory:`).
pub fn absent_store(url: &str) -> Result<Option<String>, Error> {
    Ok(match StoreUrl::parse(url)? {
        StoreUrl::Sqlite { path, .. } | StoreUrl::Sled { path, .. }
            if !std::path::Path::new(&path).exists() =>
        {
            Some(path)
        }
        _ => None,
    })
}

/// Like [`authority_for`], with the token an `http://` store sends
/// (`None`: [`use_token`]'s, else `BATON_TOKEN`). Other stores ignore it.
pub async fn authority_with_token(url: &str, token: Option<String>) -> Result<DynAuthority, Error> {
    let a = open(url, token).await?.authority();
    Ok(match fence_keys_from_env()? {
        Some(keys) => a.with_fence_keys(keys),
        None => a,
    })
}

/// The variable naming the key file an authority signs fences with.
pub const FENCE_KEY_ENV: &str = "BATON_FENCE_KEY";

/// Reads the fence key file at `path` ([`baton_core::fencing::FenceKeys::parse`]);
/// the error names the file and the rule.
pub fn read_fence_keys(path: &std::path::Path) -> Result<Arc<FenceKeys>, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::invalid(
            "fence key",
            format!("cannot read the key file {}: {e}", path.display()),
        )
    })?;
    FenceKeys::parse(&text)
        .map(Arc::new)
        .map_err(|e| Error::invalid("fence key", format!("{} ({})", e, path.display())))
}

/// The keys `BATON_FENCE_KEY` names, if it is set: an authority opened
/// with them signs every fence it grants.
pub fn fence_keys_from_env() -> Result<Option<Arc<FenceKeys>>, Error> {
    match std::env::var_os(FENCE_KEY_ENV).filter(|v| !v.is_empty()) {
        Some(path) => read_fence_keys(std::path::Path::new(&path)).map(Some),
        None => Ok(None),
    }
}

/// Builds the store a URL names.
pub async fn store_for(url: &str) -> Result<Arc<dyn Store>, Error> {
    Ok(open(url, None).await?.store)
}

/// A store as a URL opened it, with what comes beside it.
#[derive(Debug, Clone)]
pub struct Opened {
    pub store: Arc<dyn Store>,
    /// What the store tells of its work, when it tells any.
    pub meter: Option<Arc<dyn Meter>>,
    /// Who decides an operator's act: the server an `http://` store reaches.
    pub permits: Option<Arc<dyn Permits>>,
}

impl Opened {
    fn plain(store: impl Store + 'static) -> Opened {
        Opened {
            store: Arc::new(store),
            meter: None,
            permits: None,
        }
    }

    // Every store that meters its work is behind a backend's feature.
    #[cfg(any(
        feature = "sqlite",
        feature = "sled",
        feature = "fabric",
        feature = "postgres"
    ))]
    fn metered<S: Store + Meter + 'static>(store: S) -> Opened {
        let store = Arc::new(store);
        Opened {
            store: store.clone(),
            meter: Some(store),
            permits: None,
        }
    }

    /// An authority over the store on the system clock.
    pub fn authority(self) -> DynAuthority {
        let mut a = Authority::new(self.store, Arc::new(SystemClock));
        if let Some(m) = self.meter {
            a = a.with_meter(m);
        }
        if let Some(p) = self.permits {
            a = a.with_permits(p);
        }
        a
    }
}

/// Opens the store a URL names, with its meter and permits.
pub async fn open_url(url: &str) -> Result<Opened, Error> {
    open(url, None).await
}

async fn open(url: &str, token_given: Option<String>) -> Result<Opened, Error> {
    match StoreUrl::parse(url)? {
        StoreUrl::Memory { fault: None } => Ok(Opened::plain(MemoryStore::new())),
        StoreUrl::Memory { fault: Some(f) } => Ok(Opened::plain(
            baton_core::fault::FaultStore::always(MemoryStore::new(), f),
        )),
        #[cfg(feature = "sqlite")]
        StoreUrl::Sqlite {
            path,
            busy_timeout,
            group_commit,
        } => {
            let mut opts = baton_store_sqlite::SqliteOptions {
                group_commit,
                ..Default::default()
            };
            if let Some(t) = busy_timeout {
                opts.busy_timeout = t;
            }
            // Opening does blocking IO: keep it off the async worker threads.
            let store = tokio::task::spawn_blocking(move || {
                baton_store_sqlite::SqliteStore::open(path, opts)
            })
            .await
            .map_err(|e| Error::unavailable(format!("opening the store failed: {e}")))??;
            Ok(Opened::metered(store))
        }
        #[cfg(feature = "sled")]
        StoreUrl::Sled {
            path,
            busy_timeout,
            group_commit,
        } => {
            let mut opts = baton_store_sled::SledOptions {
                group_commit,
                ..Default::default()
            };
            if let Some(t) = busy_timeout {
                opts.busy_timeout = t;
            }
            let store =
                tokio::task::spawn_blocking(move || baton_store_sled::SledStore::open(path, opts))
                    .await
                    .map_err(|e| Error::unavailable(format!("opening the store failed: {e}")))??;
            Ok(Opened::metered(store))
        }
        #[cfg(feature = "fabric")]
        StoreUrl::Etcd {
            endpoints,
            prefix,
            min_ttl,
            timeout,
        } => {
            let mut opts = baton_adapter_fabric::FabricOptions::new(endpoints, &prefix);
            if let Some(t) = min_ttl {
                // Rounded up to whole seconds, as etcd leases are.
                opts.min_ttl_secs = t.as_millis().div_ceil(1000).try_into().unwrap_or(u64::MAX);
            }
            if let Some(t) = timeout {
                opts.timeout = t;
            }
            Ok(Opened::metered(
                baton_adapter_fabric::FabricStore::connect(opts).await?,
            ))
        }
        #[cfg(feature = "postgres")]
        StoreUrl::Postgres { url } => Ok(Opened::metered(
            baton_store_postgres::PostgresStore::open_url(&url).await?,
        )),
        StoreUrl::Http { url } => {
            let opts = baton_store_http::HttpOptions {
                token: token_given.filter(|t| !t.is_empty()).or_else(token),
                timeout: None,
            };
            let store = Arc::new(baton_store_http::HttpStore::connect(&url, opts).await?);
            Ok(Opened {
                store: store.clone(),
                meter: None,
                permits: Some(store),
            })
        }
        // A backend this build left out: refused before anything is
        // opened or created. Unreachable in a build with every backend.
        #[allow(unreachable_patterns)]
        other => Err(compiled_out(&other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            StoreUrl::parse("sqlite:/tmp/x.db").unwrap(),
            StoreUrl::Sqlite {
                path: "/tmp/x.db".into(),
                busy_timeout: None,
                group_commit: true
            }
        );
        assert_eq!(
            StoreUrl::parse("sled:data?busy_timeout=500ms").unwrap(),
            StoreUrl::Sled {
                path: "data".into(),
                busy_timeout: Some(Duration::from_millis(500)),
                group_commit: true
            }
        );
        assert_eq!(
            StoreUrl::parse("etcd://a:1,b:2/pre").unwrap(),
            StoreUrl::Etcd {
                endpoints: vec!["a:1".into(), "b:2".into()],
                prefix: "pre".into(),
                min_ttl: None,
                timeout: None
            }
        );
        for (url, param) in [
            ("etcd://a:1/p?timeout=500000000000y", "timeout"),
            ("etcd://a:1/p?timeout=0s", "timeout"),
            ("etcd://a:1/p?min_ttl=18446744073709557s", "min_ttl"),
            ("etcd://a:1/p?min_ttl=9000000000s", "min_ttl"),
            ("etcd://a:1/p?min_ttl=soon", "min_ttl"),
            ("sqlite:x?busy_timeout=2h", "busy_timeout"),
            ("sled:x?busy_timeout=99999999999999999999s", "busy_timeout"),
        ] {
            let e = StoreUrl::parse(url).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("store"), "{url}: {e}");
            assert!(e.message.starts_with(param), "{url}: {e}");
        }
        assert!(StoreUrl::parse("etcd://a:1/p?min_ttl=1500ms&timeout=10m").is_ok());
        for bad in [
            "ftp:x",
            "nothing",
            "sqlite:",
            "sqlite:x?busy_timeout=soon",
            "sqlite:x?colour=red",
            "sqlite:x?group_commit=maybe",
            "etcd://",
        ] {
            let e = StoreUrl::parse(bad).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("store"), "{bad}");
        }
    }

    /// What a URL whose backend is compiled out is told, checked in any
    /// build for every backend.
    #[test]
    fn a_compiled_out_backend_names_its_feature() {
        for (url, feature, scheme) in [
            ("sqlite:x.db", "sqlite", "sqlite:"),
            ("sled:x", "sled", "sled:"),
            ("etcd://127.0.0.1:2379/x", "fabric", "etcd://"),
            ("postgres://u@localhost/db", "postgres", "postgres://"),
        ] {
            let e = compiled_out(&StoreUrl::parse(url).unwrap());
            assert_eq!(e.kind, baton_core::ErrorKind::Unsupported, "{url}");
            assert!(e.message.starts_with(&format!("{scheme} stores")), "{e}");
            assert!(e.message.contains(&format!("`{feature}` feature")), "{e}");
            assert!(e.message.contains(&format!("--features {feature}")), "{e}");
        }
        for url in ["memory:", "http://127.0.0.1:1"] {
            assert_eq!(backend_feature(&StoreUrl::parse(url).unwrap()), None);
        }
    }

    /// In a build without sled (`cargo test -p baton-open --lib`, the
    /// default features), opening a sled URL is refused before anything
    /// is created.
    #[cfg(not(feature = "sled"))]
    #[tokio::test]
    async fn a_compiled_out_backend_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sled:{}", dir.path().join("s").display());
        let e = store_for(&url).await.unwrap_err();
        assert_eq!(e.kind, baton_core::ErrorKind::Unsupported, "{url}");
        assert!(!dir.path().join("s").exists(), "nothing was created");
    }
}
