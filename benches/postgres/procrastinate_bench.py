#!/usr/bin/env python3
"""procrastinate (PyPI) draining N ready jobs with W concurrent workers in
one process (its worker's `concurrency`), claim + complete, no work.
Usage: procrastinate_bench.py PGURL W N  (PGURL: a fresh database).
Prints one JSON line: {"system", "workers", "jobs", "seconds", "jobs_per_s"}."""

import asyncio
import json
import sys
import time

import procrastinate
import psycopg

url, workers, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))


@app.task(queue="bench", name="bench_job")
async def bench_job(seq: int) -> None:
    return None


async def main() -> None:
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        deferrer = bench_job.configure(queue="bench")
        for start in range(0, n, 500):
            await deferrer.batch_defer_async(*({"seq": i} for i in range(start, min(n, start + 500))))
        worker = app._worker(
            queues=["bench"],
            concurrency=workers,
            wait=False,
            fetch_job_polling_interval=0.05,
            listen_notify=True,
            delete_jobs="never",
            install_signal_handlers=False,
        )
        t0 = time.monotonic()
        await worker.run()
        seconds = time.monotonic() - t0
    with psycopg.connect(url) as c:
        done = c.execute("SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'").fetchone()[0]
    assert done == n, f"{done} of {n} jobs succeeded"
    print(json.dumps({"system": "procrastinate", "workers": workers, "jobs": n,
                      "seconds": round(seconds, 3), "jobs_per_s": round(n / seconds, 1)}))


asyncio.run(main())
