#!/usr/bin/env python3
"""The reference authority's workload through the Python package, beside
`baton bench --processes` on the same shape, alternating, in one run.

P processes each open their own authority on one SQLite file (FULL
durability) and try to claim the same N task ids in the same order, owner
"p<pid>". Two loops through the package:

  phased       the reference's own (../shared/bench/seed_bench.py): claim
               all N, wait for every process, then complete what was won;
  interleaved  `baton bench`'s: complete each win at once.

Each round runs, in turn, the reference's benchmark (when its folder is
given and found), both package loops and `baton bench --processes`, each on
a fresh file; the throughput of every run is grants/s over the wall time
from the start signal to the last process's report. Printed: every round,
then the medians and the ratios package/`baton bench` (the binding's cost;
the target is at least 0.9x) and package/reference.

Then the per-call overhead of the package over the Rust API, on the
in-memory store in one process: K claim+complete pairs from Python against
`baton --store memory: bench --workers 1 --tasks K` (the same calls from
Rust, in one run).

Usage: side_by_side.py PATH/TO/baton [P=8] [N=2000] [ROUNDS=3] [REFERENCE_BENCH_DIR]
(the package must be installed: pip install ./python)
"""

import collections
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time

import baton


def worker(url, n, mode, go, barrier, out):
    a = baton.authority_for(url)
    owner = f"p{os.getpid()}"
    won, lats, refused, errors = [], [], 0, 0
    go.wait()
    for i in range(n):
        task = f"N-{i:05d}"
        t = time.perf_counter()
        try:
            g = a.claim(task, owner, ttl=600)
        except baton.Error:
            errors += 1
            continue
        finally:
            lats.append(time.perf_counter() - t)
        if not g:
            refused += 1
            continue
        won.append((task, g.fence))
        if mode == "interleaved" and not a.complete(task, owner, g.fence):
            errors += 1
    if mode == "phased":
        barrier.wait()
        for task, fence in won:
            if not a.complete(task, owner, fence):
                errors += 1
    a.close()
    out.put(dict(won=won, lats=lats, refused=refused, errors=errors))


def package_run(p, n, mode, tmp):
    path = os.path.join(tmp, f"pkg-{mode}.db")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.unlink(path + suffix)
    url = f"sqlite:{path}"
    baton.authority_for(url).close()  # the schema, outside the timing
    ctx = mp.get_context("fork")  # as the reference's benchmark starts its workers
    go, barrier, out = ctx.Event(), ctx.Barrier(p), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(url, n, mode, go, barrier, out)) for _ in range(p)]
    for pr in procs:
        pr.start()
    time.sleep(0.3)  # every process opens the store before the race, as `baton bench` waits
    t0 = time.perf_counter()
    go.set()
    reports = [out.get() for _ in procs]
    wall = time.perf_counter() - t0
    for pr in procs:
        pr.join()
    grants = collections.Counter(t for r in reports for t, _ in r["won"])
    lats = sorted(x for r in reports for x in r["lats"])
    return dict(
        grants_per_s=sum(grants.values()) / wall,
        double=sum(1 for v in grants.values() if v > 1),
        ungranted=n - len(grants),
        errors=sum(r["errors"] for r in reports),
        p99_ms=lats[int(len(lats) * 0.99)] * 1e3,
        max_ms=lats[-1] * 1e3,
    )


def baton_run(bin_, p, n, tmp):
    path = os.path.join(tmp, "bench.db")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.unlink(path + suffix)
    out = subprocess.run(
        [bin_, "--store", f"sqlite:{path}", "bench", "--processes", "--workers", str(p),
         "--tasks", str(n), "--order", "same"],
        check=True, capture_output=True, text=True,
    ).stdout
    d = json.loads(out)
    return dict(grants_per_s=d["grants_per_s"], double=d["double_grants"], ungranted=d["ungranted"],
                errors=d["errors"], p99_ms=d["p99_ms"], max_ms=d["max_ms"])


def reference_run(ref_dir, p, n, tmp):
    script = os.path.join(ref_dir, "seed_bench.py")
    out = subprocess.run(
        [sys.executable, script, str(n), "phased", str(p), os.path.join(tmp, "ref.db")],
        check=True, capture_output=True, text=True, env=dict(os.environ, ORDER="same"),
    ).stdout
    d = json.loads(out.splitlines()[0])
    return dict(grants_per_s=d["grants_per_s"], double=d["nodes_multi_granted"], ungranted=n - d["nodes_granted"],
                errors=d["unavailable"], p99_ms=d["claim_latency"]["p99_ms"], max_ms=d["claim_latency"]["max_ms"])


def per_call(bin_, k):
    a = baton.authority_for("memory:")
    t = time.perf_counter()
    for i in range(k):
        g = a.claim(f"c-{i}", "w", ttl=600)
        a.complete(g.task, "w", g.fence)
    py_s = time.perf_counter() - t
    d = json.loads(subprocess.run(
        [bin_, "--store", "memory:", "bench", "--workers", "1", "--tasks", str(k)],
        check=True, capture_output=True, text=True,
    ).stdout)
    rust_us = 1e6 / d["grants_per_s"] / 2
    py_us = py_s * 1e6 / k / 2
    return py_us, rust_us


def line(name, r):
    return (f"{name}: {r['grants_per_s']:7.0f} grants/s  double {r['double']}  ungranted {r['ungranted']}  "
            f"errors {r['errors']}  p99 {r['p99_ms']:.1f} ms  max {r['max_ms']:.1f} ms")


def main():
    bin_ = sys.argv[1]
    p = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    ref_dir = sys.argv[5] if len(sys.argv) > 5 else None
    if ref_dir and not os.path.exists(os.path.join(ref_dir, "seed_bench.py")):
        sys.exit(f"no seed_bench.py in {ref_dir}")
    runs = collections.defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(1, rounds + 1):
            print(f"round {r} ({p} processes, {n} ids, same order)")
            if ref_dir:
                runs["reference"].append(reference_run(ref_dir, p, n, tmp))
                print("  " + line("reference (phased)        ", runs["reference"][-1]))
            runs["phased"].append(package_run(p, n, "phased", tmp))
            print("  " + line("package, phased           ", runs["phased"][-1]))
            runs["interleaved"].append(package_run(p, n, "interleaved", tmp))
            print("  " + line("package, interleaved      ", runs["interleaved"][-1]))
            runs["baton"].append(baton_run(bin_, p, n, tmp))
            print("  " + line("baton bench --processes   ", runs["baton"][-1]), flush=True)
    med = {k: statistics.median(x["grants_per_s"] for x in v) for k, v in runs.items()}
    print("median grants/s: " + "  ".join(f"{k} {v:.0f}" for k, v in med.items()))
    print(f"package/baton bench: phased {med['phased'] / med['baton']:.2f}x  "
          f"interleaved {med['interleaved'] / med['baton']:.2f}x  (target: at least 0.9x)")
    if "reference" in med:
        print(f"package/reference: phased {med['phased'] / med['reference']:.2f}x  "
              f"interleaved {med['interleaved'] / med['reference']:.2f}x  "
              f"(baton bench/reference {med['baton'] / med['reference']:.2f}x)")
    k = 20000
    py_us, rust_us = per_call(bin_, k)
    print(f"per call on memory: ({k} claim+complete pairs): package {py_us:.1f} us, Rust API {rust_us:.1f} us, "
          f"the binding adds {py_us - rust_us:.1f} us a call")


if __name__ == "__main__":
    main()
