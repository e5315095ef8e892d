#!/usr/bin/env python3
"""awa (PyPI `awa-pg`, a Rust queue with Python bindings) draining N ready
jobs with W workers in one process, claim + complete, no work.
Usage: awa_bench.py PGURL W N  (PGURL: a fresh database).
Prints one JSON line: {"system", "workers", "jobs", "seconds", "jobs_per_s"}."""

import asyncio
import dataclasses
import json
import sys
import time

import awa
import psycopg

url, workers, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


@dataclasses.dataclass
class BenchJob:
    seq: int


async def main() -> None:
    client = awa.AsyncClient(url, max_connections=max(10, workers + 4))
    await client.migrate()
    for start in range(0, n, 1000):
        await client.insert_many_copy([BenchJob(seq=i) for i in range(start, min(n, start + 1000))], queue="bench")
    done = 0
    finished = asyncio.Event()

    @client.task(BenchJob, queue="bench")
    async def handle(job: awa.Job) -> None:
        nonlocal done
        done += 1

    t0 = time.monotonic()
    await client.start([("bench", workers)], poll_interval_ms=50)
    # Every job handled, then every completion committed.
    with psycopg.connect(url, autocommit=True) as c:
        while True:
            stats = {s.queue: s for s in await client.queue_stats()}
            q = stats.get("bench")
            if done >= n and q is not None and q.total_queued == 0 and q.running == 0:
                break
            await asyncio.sleep(0.02)
    seconds = time.monotonic() - t0
    await client.shutdown()
    await client.close()
    assert done == n, f"{done} of {n} jobs handled"
    print(json.dumps({"system": "awa", "workers": workers, "jobs": n,
                      "seconds": round(seconds, 3), "jobs_per_s": round(n / seconds, 1)}))


asyncio.run(main())
