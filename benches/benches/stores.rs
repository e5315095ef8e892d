//! Each backend, uncontended: claim, heartbeat and succeed; then claim and
//! list-by-state as the store grows (the cost must stay flat).
//! `BATON_BENCH_MILLION=1` adds 10^6 tasks with 10^7 events on SQLite;
//! `BATON_BENCH_ETCD` and `BATON_BENCH_POSTGRES` add those backends.

use baton_benches::{backends, etcd_url, fresh, id, postgres_url, seeded};
use baton_core::State;
use baton_core::conformance::fixtures::manifest;
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

static N: AtomicU64 = AtomicU64::new(0);

fn next(prefix: &str) -> baton_core::Id {
    id(&format!("{prefix}-{}", N.fetch_add(1, Ordering::Relaxed)))
}

fn uncontended(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}"));
    let mut g = c.benchmark_group("uncontended");
    g.sample_size(20).measurement_time(Duration::from_secs(3));
    for backend in backends() {
        let (a, _dir) = fresh(backend);
        let w = id("w");
        g.bench_function(BenchmarkId::new("claim", backend), |b| {
            b.iter(|| {
                rt.block_on(a.claim(&next("c"), &w, None))
                    .unwrap_or_else(|e| panic!("{e}"))
            })
        });
        // One running declared task, heartbeated again and again.
        let t = next("hb");
        let run = id("run");
        let mut m = manifest(t.as_str(), 1_000, &[], 3600, 1);
        m.task_id = t.clone();
        rt.block_on(a.declare(m)).unwrap_or_else(|e| panic!("{e}"));
        rt.block_on(a.register(&t, &run))
            .unwrap_or_else(|e| panic!("{e}"));
        let f = rt
            .block_on(a.task_claim(&t, &run, &w, None))
            .ok()
            .and_then(|r| r.grant())
            .map_or(0, |g| g.fence);
        rt.block_on(a.start(&t, &run, &w, f))
            .unwrap_or_else(|e| panic!("{e}"));
        g.bench_function(BenchmarkId::new("heartbeat", backend), |b| {
            b.iter(|| {
                rt.block_on(a.heartbeat(&t, &run, &w, f, 1, None))
                    .unwrap_or_else(|e| panic!("{e}"))
            })
        });
        // declare, register, claim, start, heartbeat to the last step, succeed.
        g.bench_function(
            BenchmarkId::new("declared lifecycle to succeed", backend),
            |b| {
                b.iter(|| {
                    let t = next("life");
                    let mut m = manifest(t.as_str(), 1, &[], 60, 1);
                    m.task_id = t.clone();
                    rt.block_on(async {
                        a.declare(m).await?;
                        a.register(&t, &run).await?;
                        let f = a
                            .task_claim(&t, &run, &w, None)
                            .await?
                            .grant()
                            .map_or(0, |g| g.fence);
                        a.start(&t, &run, &w, f).await?;
                        a.succeed(&t, &run, &w, f, BTreeMap::new()).await
                    })
                    .unwrap_or_else(|e| panic!("{e}"))
                })
            },
        );
    }
    g.finish();
}

fn scale(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}"));
    let mut sizes: Vec<(usize, usize)> = vec![(1_000, 1), (100_000, 1)];
    if std::env::var_os("BATON_BENCH_MILLION").is_some() {
        sizes.push((1_000_000, 10));
    }
    let mut g = c.benchmark_group("scale");
    g.sample_size(20).measurement_time(Duration::from_secs(3));
    let mut scaled = vec!["sqlite", "sled"];
    if etcd_url().is_some() {
        scaled.push("etcd");
    }
    if postgres_url().is_some() {
        scaled.push("postgres");
    }
    for backend in scaled {
        for &(tasks, events) in &sizes {
            // 10^6 on SQLite only; etcd seeds about 100 grants/s, so 10^3 there.
            if (tasks >= 1_000_000 && backend != "sqlite") || (backend == "etcd" && tasks > 1_000) {
                continue;
            }
            let a = seeded(&rt, backend, tasks, events);
            let label = format!("{backend}/{tasks} tasks");
            let w = id("w");
            g.bench_function(BenchmarkId::new("claim", &label), |b| {
                b.iter(|| {
                    rt.block_on(a.claim(&next("scale"), &w, None))
                        .unwrap_or_else(|e| panic!("{e}"))
                })
            });
            let probe = id(&format!("seed-{:08}", tasks / 2));
            let f = rt
                .block_on(a.holder(&probe))
                .ok()
                .and_then(|h| h.ok().flatten())
                .map_or(1, |h| h.grant.fence);
            g.bench_function(BenchmarkId::new("renew", &label), |b| {
                b.iter(|| {
                    rt.block_on(a.renew(&probe, &id("seeder"), f, None))
                        .unwrap_or_else(|e| panic!("{e}"))
                })
            });
            g.bench_function(BenchmarkId::new("list 100 CLAIMED", &label), |b| {
                b.iter(|| {
                    rt.block_on(a.list(Some(State::Claimed), None, 100))
                        .unwrap_or_else(|e| panic!("{e}"))
                })
            });
            g.bench_function(
                BenchmarkId::new("list 100 REGISTERED (derived)", &label),
                |b| {
                    b.iter(|| {
                        rt.block_on(a.list(Some(State::Registered), None, 100))
                            .unwrap_or_else(|e| panic!("{e}"))
                    })
                },
            );
            g.bench_function(BenchmarkId::new("events of one task", &label), |b| {
                b.iter(|| {
                    rt.block_on(a.events(Some(&probe), None, 100))
                        .unwrap_or_else(|e| panic!("{e}"))
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, uncontended, scale);
criterion_main!(benches);
