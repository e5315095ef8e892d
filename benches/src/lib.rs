//! Shared setup for the criterion benchmarks: stores of each backend,
//! seeded through the public API (group commit makes large seeds quick)
//! and cached under `target/bench-data` between runs.

use baton_core::{Authority, Id, ManualClock, Preconditions, Store, Timestamp};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// The benchmarks allocate as baton's executables do (see `cli/src/main.rs`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// An authority over any store, on a manual clock that never moves (leases stay live).
pub type Bench = Authority<Arc<dyn Store>>;

pub fn id(s: &str) -> Id {
    Id::parse("id", s).unwrap_or_else(|e| panic!("bench id {s:?}: {e}"))
}

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(Timestamp::from_millis(1_767_225_600_000)))
}

/// The backends measured side by side; etcd joins when `BATON_BENCH_ETCD`
/// names a cluster (`scripts/etcd-cluster DIR` starts one).
pub fn backends() -> Vec<&'static str> {
    let mut b = vec!["memory", "sqlite", "sled"];
    if etcd_url().is_some() {
        b.push("etcd");
    }
    if postgres_url().is_some() {
        b.push("postgres");
    }
    b
}

/// The Postgres database to benchmark, as `postgres://USER@HOST:PORT/DB`
/// (`scripts/pg-cluster DIR` starts a server); each store gets a schema
/// of its own.
pub fn postgres_url() -> Option<String> {
    std::env::var("BATON_BENCH_POSTGRES")
        .ok()
        .filter(|u| u.starts_with("postgres://") || u.starts_with("postgresql://"))
}

/// The etcd cluster to benchmark, as `etcd://HOST:PORT,...`.
pub fn etcd_url() -> Option<String> {
    std::env::var("BATON_BENCH_ETCD")
        .ok()
        .filter(|u| u.starts_with("etcd://"))
}

/// The runtime stores are opened on: an etcd client's connections live on
/// it, so it lives as long as the benchmark process.
fn opener() -> &'static tokio::runtime::Runtime {
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}")))
}

/// A fresh, empty store of `backend`, kept alive by the returned directory.
pub fn fresh(backend: &str) -> (Bench, Option<tempfile::TempDir>) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("no temporary directory: {e}"));
    let a = open(backend, dir.path().join("store"));
    (a, Some(dir))
}

/// Opens `backend` at `path` through `store_for`, the seam every embedder
/// uses, so a benchmark measures the stores exactly as they are built.
fn open(backend: &str, path: PathBuf) -> Bench {
    let url = match backend {
        "memory" => "memory:".to_owned(),
        "sqlite" | "sled" => format!("{backend}:{}", path.display()),
        "etcd" => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let cluster = etcd_url().unwrap_or_else(|| panic!("BATON_BENCH_ETCD is not set"));
            let hosts = cluster
                .trim_end_matches('/')
                .split('/')
                .take(3)
                .collect::<Vec<_>>()
                .join("/");
            format!("{hosts}/bench-{nanos}")
        }
        "postgres" => {
            let base = postgres_url().unwrap_or_else(|| panic!("BATON_BENCH_POSTGRES is not set"));
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().replace('-', "_"))
                .unwrap_or_default();
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let sep = if base.contains('?') { '&' } else { '?' };
            format!("{base}{sep}schema=bench_{name}_{nanos}")
        }
        other => panic!("unknown backend {other}"),
    };
    let store = opener()
        .block_on(baton_open::store_for(&url))
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    Authority::new(store, clock())
}

/// A store of `backend` holding `tasks` claimed tasks with `events_per_task`
/// events each, built once and cached in `target/bench-data`.
pub fn seeded(
    rt: &tokio::runtime::Runtime,
    backend: &str,
    tasks: usize,
    events_per_task: usize,
) -> Bench {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/bench-data");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("{backend}-{tasks}-{events_per_task}"));
    let done = path.with_extension("done");
    if matches!(backend, "sqlite" | "sled") && done.exists() {
        return open(backend, path);
    }
    let _ = std::fs::remove_dir_all(&path);
    let _ = std::fs::remove_file(&path);
    let a = Arc::new(open(backend, path));
    eprintln!(
        "seeding {backend} with {tasks} tasks and {} events (once)...",
        tasks * events_per_task
    );
    rt.block_on(async {
        let lanes = 256;
        let mut handles = Vec::new();
        for lane in 0..lanes {
            let a = a.clone();
            handles.push(tokio::spawn(async move {
                for i in (lane..tasks).step_by(lanes) {
                    let task = id(&format!("seed-{i:08}"));
                    let owner = id("seeder");
                    let _ = a.claim(&task, &owner, Some(3_600_000)).await;
                    for e in 1..events_per_task {
                        let meta = BTreeMap::from([("n".to_owned(), json!(e))]);
                        let _ = a.annotate(&task, &owner, meta, Preconditions::none()).await;
                    }
                }
            }));
        }
        for h in handles {
            let _ = h.await;
        }
    });
    let _ = std::fs::write(&done, b"");
    match Arc::try_unwrap(a) {
        Ok(a) => a,
        Err(_) => panic!("seeding left a handle open"),
    }
}
