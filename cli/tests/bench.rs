//! The contention harness, driven through the binary on small runs: its
//! checks and its report, in one process, across processes, and as a series.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

#[path = "common/run_bench.rs"]
mod run_bench;

use run_bench::run_bench;
use serde_json::Value;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_baton");

fn bench(store: &str, args: &[&str]) -> Vec<Value> {
    run_bench(BIN, store, args)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn check(r: &Value, workers: u64, tasks: u64) {
    for f in [
        "workers",
        "tasks",
        "processes",
        "order",
        "attempts_per_s",
        "grants_per_s",
        "grants_per_commit",
        "p50_ms",
        "p99_ms",
        "max_ms",
        "double_grants",
        "stale_accepted",
    ] {
        assert!(r.get(f).is_some(), "{f} missing: {r}");
    }
    assert_eq!(
        (r["workers"].as_u64(), r["tasks"].as_u64()),
        (Some(workers), Some(tasks))
    );
    assert_eq!(
        r["grants"].as_u64(),
        Some(tasks),
        "every task granted once: {r}"
    );
    assert_eq!(
        (r["double_grants"].as_u64(), r["stale_accepted"].as_u64()),
        (Some(0), Some(0)),
        "{r}"
    );
    // Every grant, completion and stale try went through the history
    // checker in the same run, and it found nothing wrong.
    assert_eq!(r["history_violations"].as_u64(), Some(0), "{r}");
    assert!(r["checked_ops"].as_u64().unwrap() >= 4 * tasks, "{r}");
    assert!(r["p50_ms"].as_f64().unwrap() <= r["p99_ms"].as_f64().unwrap());
    assert!(r["p99_ms"].as_f64().unwrap() <= r["max_ms"].as_f64().unwrap());
}

#[test]
fn in_one_process_with_every_order_and_a_comparison() {
    let dir = tempfile::tempdir().unwrap();
    let a = format!("sqlite:{}", dir.path().join("a.db").display());
    let b = format!(
        "sqlite:{}?group_commit=off",
        dir.path().join("b.db").display()
    );
    for order in ["shuffled", "same", "disjoint"] {
        let rows = bench(
            &a,
            &[
                "--workers",
                "4",
                "--tasks",
                "40",
                "--order",
                order,
                "--compare",
                &b,
                "--compare",
                "memory:",
            ],
        );
        assert_eq!(rows.len(), 3);
        for r in &rows {
            check(r, 4, 40);
            assert_eq!(r["order"].as_str(), Some(order));
        }
        let attempts = rows[0]["attempts"].as_u64().unwrap();
        assert_eq!(attempts, if order == "disjoint" { 40 } else { 160 });
        assert!(rows[0]["commits"].as_u64().unwrap() > 0);
        assert!(
            rows[2]["commits"].is_null(),
            "the memory store has no commits to count"
        );
        // Beside every on-disk result, the disk's ceiling in the same run.
        for r in &rows[..2] {
            assert!(r["ceiling_syncs_per_s"].as_f64().unwrap() > 0.0, "{r}");
            let share = r["commits_vs_ceiling"].as_f64().unwrap();
            let expected =
                r["commits_per_s"].as_f64().unwrap() / r["ceiling_syncs_per_s"].as_f64().unwrap();
            assert!((share - expected).abs() < 1e-6, "{r}");
        }
        assert!(
            rows[2]["ceiling_syncs_per_s"].is_null(),
            "no disk under memory:"
        );
    }
}

#[test]
fn as_separate_processes() {
    let dir = tempfile::tempdir().unwrap();
    let a = format!("sqlite:{}", dir.path().join("a.db").display());
    // `next`: a job queue's fetch, every process taking the next ready
    // task until none is left; each task is granted once either way.
    for order in ["same", "next"] {
        let rows = bench(
            &a,
            &[
                "--workers",
                "3",
                "--tasks",
                "30",
                "--processes",
                "--order",
                order,
            ],
        );
        check(&rows[0], 3, 30);
        assert_eq!(rows[0]["processes"].as_bool(), Some(true));
        assert_eq!(rows[0]["order"].as_str(), Some(order));
    }
    // Batches: up to 8 grants a `next`, completed in one `report`, each
    // task still granted once, in far fewer commits than grants.
    let rows = bench(
        &a,
        &[
            "--workers",
            "3",
            "--tasks",
            "30",
            "--processes",
            "--order",
            "next",
            "--count",
            "8",
        ],
    );
    check(&rows[0], 3, 30);
    assert_eq!(rows[0]["count"].as_u64(), Some(8));
    assert!(
        rows[0]["grants_per_commit"].as_f64().unwrap() > 1.5,
        "{}",
        rows[0]
    );
    let out = Command::new(BIN)
        .args(["--store", "memory:", "bench", "--count", "4"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "--count without next");
    assert!(String::from_utf8_lossy(&out.stderr).contains("count"));
    let out = Command::new(BIN)
        .args([
            "--store",
            "memory:",
            "bench",
            "--processes",
            "--workers",
            "2",
            "--tasks",
            "2",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "a store one process owns cannot be raced by processes"
    );
}

#[test]
fn a_series_writes_a_table_and_a_chart() {
    let dir = tempfile::tempdir().unwrap();
    let a = format!("sqlite:{}", dir.path().join("a.db").display());
    let out = dir.path().join("out");
    let rows = bench(
        &a,
        &[
            "--tasks",
            "8",
            "--series",
            "--out",
            out.to_str().unwrap(),
            "--compare",
            "memory:",
        ],
    );
    assert_eq!(rows.len(), 12);
    let workers: Vec<u64> = rows[..6]
        .iter()
        .map(|r| r["workers"].as_u64().unwrap())
        .collect();
    assert_eq!(workers, [1, 2, 4, 8, 16, 64]);
    let md = std::fs::read_to_string(out.join("bench.md")).unwrap();
    assert_eq!(md.lines().filter(|l| l.starts_with("| `")).count(), 12);
    let svg = std::fs::read_to_string(out.join("bench.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.matches("<polyline").count() == 4,
        "{svg}"
    );
}

/// No task of either graph granted twice or left ungranted, no error.
fn assert_graphs_drained_once(r: &Value) {
    assert_eq!(
        (
            r["double_grants"].as_u64(),
            r["ungranted"].as_u64(),
            r["errors"].as_u64()
        ),
        (Some(0), Some(0), Some(0)),
        "{r}"
    );
}

/// `bench --next`: a layered graph drained with `next` beside the same
/// graph claimed by id (and as many tasks without dependencies), each task
/// granted once and every graph task SUCCEEDED.
#[test]
fn bench_next_drains_the_graph_and_reports_both_rates() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("b.db").display());
    let rows = bench(&store, &["--next", "--workers", "4", "--tasks", "300"]);
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(
        (r["tasks"].as_u64(), r["layers"].as_u64()),
        (Some(300), Some(20))
    );
    assert_graphs_drained_once(r);
    assert!(r["next_grants_per_s"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["by_id_grants_per_s"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["flat_by_id_grants_per_s"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["ratio"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["flat_ratio"].as_f64().unwrap() > 0.0, "{r}");
    // Both graphs made commits (the store counts them).
    assert!(r["by_id_commits"].as_u64().unwrap() > 0, "{r}");
    assert!(r["next_commits"].as_u64().unwrap() > 0, "{r}");
    // One layer: no dependencies at all, every task ready at once.
    let rows = bench(
        &store,
        &["--next", "--workers", "2", "--tasks", "50", "--layers", "1"],
    );
    assert_eq!(rows[0]["layers"].as_u64(), Some(1));
    assert_eq!(rows[0]["double_grants"].as_u64(), Some(0), "{}", rows[0]);
    assert_eq!(rows[0]["ungranted"].as_u64(), Some(0), "{}", rows[0]);
    // Rounds: each on fresh tasks, the ratio the median of theirs.
    let rows = bench(
        &store,
        &["--next", "--workers", "2", "--tasks", "60", "--rounds", "3"],
    );
    let r = &rows[0];
    assert_eq!(r["rounds"].as_u64(), Some(3), "{r}");
    let mut ratios: Vec<f64> = r["ratios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(ratios.len(), 3, "{r}");
    ratios.sort_by(f64::total_cmp);
    assert_eq!(r["ratio"].as_f64(), Some(ratios[1]), "{r}");
    assert_graphs_drained_once(r);
}
