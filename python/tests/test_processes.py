"""Real processes and real threads racing for the same tasks: one winner each."""

import collections
import multiprocessing as mp
import os
import threading
import time

import baton

TASKS = 500
PROCESSES = 8


def race(url, start, out):
    # Each process opens its own authority, as the reference's workers did.
    a = baton.authority_for(url)
    start.wait()
    won = []
    for i in range(TASKS):
        g = a.claim(f"N-{i:05d}", f"p{os.getpid()}", ttl=60)
        if g:
            won.append((g.task, g.fence))
    for task, fence in won:
        r = a.complete(task, f"p{os.getpid()}", fence)
        assert r, r
    out.put(won)


def test_eight_processes_race_for_500_tasks_with_one_winner_each(sqlite_url):
    baton.authority_for(sqlite_url).close()  # the schema, before the race
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=race, args=(sqlite_url, start, out)) for _ in range(PROCESSES)]
    for p in procs:
        p.start()
    start.set()
    results = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    grants = collections.Counter(task for won in results for task, _ in won)
    assert len(grants) == TASKS and set(grants.values()) == {1}
    fences = [f for won in results for _, f in won]
    assert len(set(fences)) == TASKS
    a = baton.authority_for(sqlite_url)
    states = collections.Counter(r.state for r in a.list(limit=10_000))
    assert states == {"SUCCEEDED": TASKS}


def test_threads_share_one_authority(sqlite_url):
    a = baton.authority_for(sqlite_url)
    won = collections.defaultdict(list)
    barrier = threading.Barrier(8)

    def worker(n):
        barrier.wait()
        for i in range(100):
            if g := a.claim(f"t{i}", f"thread{n}"):
                won[f"t{i}"].append(n)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 100 and all(len(w) == 1 for w in won.values())


def test_the_gil_is_released_while_the_store_works(auth):
    # One thread blocks in the store (a waiting `next`) for about a second;
    # Python code on another thread must run meanwhile.
    auth.add("later", queue="q")
    auth.claim("later", "holder", ttl=60)
    ticks = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.01)

    t = threading.Thread(target=count)
    t.start()
    before = len(ticks)
    r = auth.next("w", ["q"], wait=1.0)
    during = len(ticks) - before
    stop.set()
    t.join()
    assert r.reason == "none_ready"
    assert during >= 20, f"only {during} ticks while the store waited"


WAITER = """
import sys, baton
a = baton.authority_for(sys.argv[1])
a.add("busy", queue="q")
a.claim("busy", "someone", ttl=60)
print("waiting", flush=True)
try:
    a.next("w", ["q"], wait=60)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(3)
"""


def test_ctrl_c_ends_a_waiting_next(sqlite_url):
    import signal
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", WAITER, sqlite_url], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "waiting"
    time.sleep(0.3)
    t = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=20)
    assert p.returncode == 3 and "interrupted" in out
    assert time.monotonic() - t < 5


HOLDER = """
import sys, time, baton
a = baton.authority_for(sys.argv[1])
with a.lease("ctrl-c", "w1", ttl=30):
    print("holding", flush=True)
    time.sleep(60)
"""


def test_ctrl_c_in_a_kept_lease_gives_the_task_back(sqlite_url):
    """SIGINT in a `with lease` block releases the task, as `baton run`
    does on SIGINT: another worker may take it at once, and it is not
    FAILED."""
    import signal
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", HOLDER, sqlite_url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "holding"
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=20)
    assert p.returncode != 0 and "KeyboardInterrupt" in err
    a = baton.authority_for(sqlite_url)
    rec = a.get("ctrl-c")
    assert rec.state == "REGISTERED", rec
    assert rec.error is None
    assert a.claim("ctrl-c", "w2")
