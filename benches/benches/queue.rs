//! `next` as the queue grows (`cargo bench -p baton-benches --bench queue`;
//! `BATON_BENCH_MILLION=1` adds 10^6 queued tasks on SQLite).

use baton_benches::{fresh, id};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use std::time::Duration;

/// `next` as the queue grows: N ready tasks in one queue; each iteration
/// takes the next one and releases it (it goes back to the head, so the
/// queue keeps N). The cost must stay flat: 10^3 and 10^5 on SQLite and
/// sled, 10^6 on SQLite with `BATON_BENCH_MILLION=1`.
fn queue(c: &mut Criterion) {
    use baton_core::graph::{NewNode, NodeSpec};
    let rt = tokio::runtime::Runtime::new().unwrap_or_else(|e| panic!("{e}"));
    let mut sizes = vec![1_000usize, 100_000];
    if std::env::var_os("BATON_BENCH_MILLION").is_some() {
        sizes.push(1_000_000);
    }
    let mut g = c.benchmark_group("queue");
    g.sample_size(30).measurement_time(Duration::from_secs(3));
    for backend in ["sqlite", "sled"] {
        for &n in &sizes {
            if n >= 1_000_000 && backend != "sqlite" {
                continue;
            }
            let (a, _dir) = fresh(backend);
            let q = id("q");
            for start in (0..n).step_by(5_000) {
                let nodes: Vec<NewNode> = (start..(start + 5_000).min(n))
                    .map(|i| {
                        let task = id(&format!("queued-{i:08}"));
                        let spec = NodeSpec::new(&task, Some(q.clone()), 0, Vec::new())
                            .unwrap_or_else(|e| panic!("{e}"));
                        NewNode { task, spec }
                    })
                    .collect();
                rt.block_on(a.add_graph(nodes))
                    .unwrap_or_else(|e| panic!("{e}"))
                    .unwrap_or_else(|(t, r)| panic!("{t}: {r}"));
            }
            let w = id("w");
            let label = format!("{backend}/{n} queued");
            g.bench_function(BenchmarkId::new("next + release", &label), |b| {
                b.iter(|| {
                    rt.block_on(async {
                        let g = a
                            .next(&w, std::slice::from_ref(&q), Some(600_000), None)
                            .await?
                            .grant()
                            .unwrap_or_else(|| panic!("nothing granted"));
                        a.release(&g.task, &w, g.fence).await
                    })
                    .unwrap_or_else(|e| panic!("{e}"))
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, queue);
criterion_main!(benches);
