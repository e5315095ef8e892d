#!/usr/bin/env python3
"""Retention under a steady load: the store's size and the claim's p50 as
tasks flow through, with `prune` keeping a window of ended tasks.

Each round claims and completes ROUND tasks (claim p50 measured), then
prunes what ended more than WINDOW rounds ago (by time), then prints the
store's size on disk. Without pruning the size grows with every round;
with it, it levels off once the window is full (tombstones remain: a few
dozen bytes per task through, the price of never granting an id twice).

With --forget, each prune also marks its tombstones to be forgotten a
window later (`forget_after`), so later prunes remove them and the size
stays flat: the cost is that a forgotten id could be granted again.

Usage: scripts/bench-retention.py [TASKS=1000000] [ROUND=20000] [--no-prune|--forget]
Needs the Python package (`pip install ./python`); runs on a fresh SQLite
file in a temporary folder.
"""

import os
import statistics
import sys
import tempfile
import time

import baton


def size(folder):
    return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    prune = "--no-prune" not in sys.argv
    forget = "--forget" in sys.argv
    total = int(args[0]) if args else 1_000_000
    per_round = int(args[1]) if len(args) > 1 else 20_000
    folder = tempfile.mkdtemp(prefix="baton-retention-")
    a = baton.authority_for(f"sqlite:{folder}/store.db")
    window_rounds = 2
    ends = []
    print("round  tasks_through  claim_p50_us  pruned  size_mb  bytes_per_task_through")
    done = 0
    r = 0
    while done < total:
        r += 1
        waits = []
        for i in range(per_round):
            t = f"job-{r:05d}-{i:06d}"
            t0 = time.perf_counter_ns()
            g = a.claim(t, "w", ttl=60)
            waits.append(time.perf_counter_ns() - t0)
            a.complete(t, "w", g.fence)
        done += per_round
        ends.append(time.time())
        pruned = 0
        if prune and len(ends) > window_rounds:
            # Keep the last `window_rounds` rounds' tasks.
            window = time.time() - ends[-window_rounds - 1]
            pruned = a.prune(window, "bench", forget_after=window if forget else None)
        mb = size(folder) / 1e6
        print(
            f"{r:5d}  {done:13d}  {statistics.median(waits) / 1000:12.1f}  {pruned:6d}  "
            f"{mb:7.1f}  {size(folder) / done:10.0f}",
            flush=True,
        )
    a.close()


if __name__ == "__main__":
    main()
