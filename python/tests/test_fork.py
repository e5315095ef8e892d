"""An authority does not cross fork(): the child gets a clear error."""

import gc
import multiprocessing as mp
import os

import baton


def child_uses_parents(a, q):
    try:
        a.claim("t", "child")
        q.put("claimed")
    except baton.UsedAfterFork as e:
        q.put(f"refused: {e}")
    # The child drops its copy: the parent's SQLite handle must not be
    # closed by it (that would drop the parent's locks).
    del a
    gc.collect()
    # A fresh authority in the child works.
    b = baton.authority_for(URL[0])
    q.put("fresh ok" if b.claim("child-task", "child") else "fresh refused")


URL = [None]


def test_using_an_authority_after_fork_raises(sqlite_url):
    URL[0] = sqlite_url
    a = baton.authority_for(sqlite_url)
    assert a.claim("before", "parent")
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=child_uses_parents, args=(a, q))
    p.start()
    first, second = q.get(timeout=60), q.get(timeout=60)
    p.join(60)
    assert p.exitcode == 0
    assert first.startswith("refused: ") and str(os.getpid()) in first, first
    assert second == "fresh ok"
    # The parent's authority is unharmed.
    assert a.claim("after", "parent")
    assert a.holder("child-task").owner == "child"
    assert a.get("t") is None


def test_a_lease_does_not_cross_fork_either(sqlite_url):
    a = baton.authority_for(sqlite_url)
    with a.lease("job", "parent", ttl=5) as lease:
        pid = os.fork()
        if pid == 0:
            try:
                lease.fence
                os._exit(1)
            except baton.UsedAfterFork:
                os._exit(0)
            except BaseException:
                os._exit(2)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    assert a.get("job").state == "SUCCEEDED"
