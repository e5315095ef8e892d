"""baton.guard on real storage: a zombie's write refused where it lands
(SQLite files, a real Postgres through psycopg, a real process paused with
SIGSTOP), signed fences, eight racing writers landing in fence order, the
WSGI and ASGI middleware, and a guard that is missing or a database that is
down failing closed."""

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import baton
import baton.aio
import baton.guard

KEY = "python-guard-key-0123456789abcdef0123456789"
FORGER = "forger-key-0123456789abcdef0123456789abcdef"


def db(tmp_path, name="app.db"):
    conn = sqlite3.connect(tmp_path / name, timeout=10)
    baton.guard.install(conn)
    conn.execute("CREATE TABLE IF NOT EXISTS acct (id INTEGER PRIMARY KEY, n INTEGER, who TEXT)")
    conn.execute("INSERT OR IGNORE INTO acct VALUES (1, 0, '')")
    conn.commit()
    return conn


def add(conn, fence, who, **kw):
    with baton.guard.guard(conn, "acct:1", fence, **kw):
        conn.execute("UPDATE acct SET n = n + 1, who = ? WHERE id = 1", (who,))


def row(conn):
    return conn.execute("SELECT n, who FROM acct WHERE id = 1").fetchone()


def test_a_grants_guard_refuses_the_attempt_it_replaced(tmp_path, sqlite_url):
    a = baton.authority_for(sqlite_url)
    conn = db(tmp_path)
    first = a.claim("job", "w1", ttl=0.2)
    time.sleep(0.3)
    second = a.claim("job", "w2", ttl=30)
    assert second.fence > first.fence
    with second.guard(conn, "acct:1"):
        conn.execute("UPDATE acct SET n = n + 1, who = 'w2' WHERE id = 1")
    with pytest.raises(baton.GuardRefused) as e:
        with first.guard(conn, "acct:1"):
            conn.execute("UPDATE acct SET n = n + 1, who = 'zombie' WHERE id = 1")
            raise AssertionError("the block of a refused fence ran")
    assert (e.value.code, e.value.fence, e.value.highest) == ("stale_fence", first.fence, second.fence)
    assert row(conn) == (1, "w2")
    assert not conn.in_transaction
    # The same attempt writes again; an exception in the block rolls back.
    add(conn, second.fence, "w2 again")
    with pytest.raises(ZeroDivisionError):
        with second.guard(conn, "acct:1"):
            conn.execute("UPDATE acct SET who = 'half' WHERE id = 1")
            1 / 0
    assert row(conn) == (2, "w2 again")


def test_bad_input_and_a_missing_guard_are_named(tmp_path):
    conn = sqlite3.connect(tmp_path / "bare.db")
    conn.execute("CREATE TABLE acct (id INTEGER PRIMARY KEY, n INTEGER, who TEXT)")
    conn.commit()
    with pytest.raises(baton.Unavailable, match="guard_not_installed"):
        add(conn, 1, "x")
    conn = db(tmp_path)
    for fence in (0, -1, "12x", None, True, 2**70, "bf1.1.x"):
        with pytest.raises(baton.InvalidInput, match="fence|token"):
            add(conn, fence, "bad")
    with pytest.raises(baton.InvalidInput, match="resource"):
        with baton.guard.guard(conn, "", 1):
            pass
    with pytest.raises(baton.InvalidInput, match="conn"):
        with baton.guard.guard(object(), "r", 1):
            pass
    conn.execute("UPDATE acct SET n = 5")
    with pytest.raises(baton.InvalidInput, match="transaction"):
        add(conn, 1, "inside")
    conn.rollback()
    assert row(conn) == (0, "")


def test_signed_fences_with_a_key(tmp_path, sqlite_url, monkeypatch):
    key = tmp_path / "fence.key"
    key.write_text(KEY + "\n")
    monkeypatch.setenv("BATON_FENCE_KEY", str(key))
    a = baton.authority_for(sqlite_url)
    g = a.claim("signed", "w", ttl=30)
    assert g.token and g.token.startswith(f"bf1.{g.fence}.")
    assert g.to_dict()["token"] == g.token
    conn = db(tmp_path)
    with g.guard(conn, "acct:1", key=key):
        conn.execute("UPDATE acct SET who = 'signed' WHERE id = 1")
    with pytest.raises(baton.GuardRefused) as e:
        add(conn, g.fence + 1000, "bare", key=key)
    assert e.value.code == "unsigned_fence"
    forger = tmp_path / "forger.key"
    forger.write_text(FORGER)
    monkeypatch.setenv("BATON_FENCE_KEY", str(forger))
    forged = baton.authority_for(sqlite_url).claim("forged", "w", ttl=30).token
    with pytest.raises(baton.GuardRefused) as e:
        add(conn, forged, "forged", key=key)
    assert e.value.code == "forged_fence"
    assert row(conn)[1] == "signed"
    # The lease knows its token too.
    monkeypatch.setenv("BATON_FENCE_KEY", str(key))
    with baton.authority_for(sqlite_url).lease("leased", "w", ttl=30) as lease:
        assert lease.token.startswith(f"bf1.{lease.fence}.")
        with lease.guard(conn, "acct:1", key=key):
            conn.execute("UPDATE acct SET who = 'leased' WHERE id = 1")
    assert row(conn)[1] == "leased"


def test_eight_racing_threads_land_in_fence_order(tmp_path):
    db(tmp_path).close()
    with sqlite3.connect(tmp_path / "app.db") as c:
        c.execute("CREATE TABLE landed (seq INTEGER PRIMARY KEY AUTOINCREMENT, fence INTEGER)")
    refused = []

    def writer(w):
        import random

        conn = sqlite3.connect(tmp_path / "app.db", timeout=30)
        fences = [1 + i * 8 + w for i in range(15)]
        random.Random(w).shuffle(fences)
        for f in fences:
            try:
                with baton.guard.guard(conn, "hot", f):
                    conn.execute("INSERT INTO landed (fence) VALUES (?)", (f,))
            except baton.GuardRefused:
                refused.append(f)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with sqlite3.connect(tmp_path / "app.db") as c:
        landed = [r[0] for r in c.execute("SELECT fence FROM landed ORDER BY seq")]
    assert landed == sorted(landed)
    assert len(landed) + len(refused) == 120
    assert refused


ZOMBIE = textwrap.dedent(
    """
    import sqlite3, sys
    import baton.guard
    conn = sqlite3.connect(sys.argv[1], timeout=10)
    fence = baton.guard.from_env()
    print("ready", flush=True)
    sys.stdin.readline()  # paused here (SIGSTOP), past its lease
    try:
        with baton.guard.guard(conn, "acct:1", fence):
            conn.execute("UPDATE acct SET n = n + 1, who = 'zombie' WHERE id = 1")
        print("wrote")
    except baton.GuardRefused as e:
        print(e.code)
    """
)


def test_a_worker_process_paused_past_its_lease_is_refused(tmp_path, sqlite_url):
    a = baton.authority_for(sqlite_url)
    conn = db(tmp_path)
    first = a.claim("job", "w1", ttl=0.3)
    env = dict(os.environ, BATON_FENCE=str(first.fence))
    env.pop("BATON_FENCE_TOKEN", None)
    z = subprocess.Popen(
        [sys.executable, "-c", ZOMBIE, str(tmp_path / "app.db")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )
    assert z.stdout.readline().strip() == "ready"
    os.kill(z.pid, signal.SIGSTOP)
    z.stdin.write("go\n")
    z.stdin.flush()
    time.sleep(0.5)
    second = a.claim("job", "w2", ttl=30)
    add(conn, second, "w2")
    os.kill(z.pid, signal.SIGCONT)
    out, _ = z.communicate(timeout=30)
    assert out.strip() == "stale_fence"
    assert row(conn) == (1, "w2")


psycopg = pytest.importorskip("psycopg") if os.environ.get("BATON_TEST_POSTGRES") != "1" else __import__("psycopg")


def pg_conninfo(url):
    # The store URL's database, without baton's own parameters.
    return url.split("?", 1)[0]


@pytest.fixture
def pg(postgres_url):
    subprocess.run([os.environ.get("BATON_BIN", "baton"), "guard", "install", pg_conninfo(postgres_url)], check=True,
                   capture_output=True)
    with psycopg.connect(pg_conninfo(postgres_url), autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS acct")
        c.execute("CREATE TABLE acct (id int PRIMARY KEY, n int, who text)")
        c.execute("INSERT INTO acct VALUES (1, 0, '')")
        c.execute("DELETE FROM baton_guard.fences")
    return pg_conninfo(postgres_url)


def test_postgres_a_stale_fence_rolls_the_transaction_back(pg, sqlite_url):
    a = baton.authority_for(sqlite_url)
    first = a.claim("pg-job", "w1", ttl=0.2)
    time.sleep(0.3)
    second = a.claim("pg-job", "w2", ttl=30)
    with psycopg.connect(pg) as conn:
        with second.guard(conn, "acct:1") as admitted:
            assert admitted == second.fence
            conn.execute("UPDATE acct SET n = n + 1, who = 'w2' WHERE id = 1")
        with pytest.raises(baton.GuardRefused) as e:
            with first.guard(conn, "acct:1"):
                conn.execute("UPDATE acct SET n = n + 1, who = 'zombie' WHERE id = 1")
        assert (e.value.code, e.value.highest) == ("stale_fence", second.fence)
        assert conn.execute("SELECT n, who FROM acct").fetchone() == (1, "w2")
        with pytest.raises(baton.InvalidInput, match="key"):
            with baton.guard.guard(conn, "acct:1", second.fence, key="k"):
                pass


def test_postgres_async(pg, sqlite_url):
    async def main():
        a = await baton.aio.authority_for(sqlite_url)
        first = await a.claim("apg", "w1", ttl=0.2)
        await asyncio.sleep(0.3)
        second = await a.claim("apg", "w2", ttl=30)
        async with await psycopg.AsyncConnection.connect(pg) as conn:
            async with baton.aio.guard(conn, "acct:1", second):
                await conn.execute("UPDATE acct SET who = 'async' WHERE id = 1")
            with pytest.raises(baton.GuardRefused):
                async with baton.aio.guard(conn, "acct:1", first):
                    await conn.execute("UPDATE acct SET who = 'zombie' WHERE id = 1")
            # The grant's own guard, on an async connection, is async too.
            async with second.guard(conn, "acct:1"):
                await conn.execute("UPDATE acct SET n = n + 1 WHERE id = 1")
            with pytest.raises(baton.GuardRefused):
                async with first.guard(conn, "acct:1"):
                    await conn.execute("UPDATE acct SET who = 'zombie' WHERE id = 1")
            cur = await conn.execute("SELECT who FROM acct")
            assert (await cur.fetchone()) == ("async",)

    asyncio.run(main())


def test_postgres_not_installed_is_named(postgres_url):
    with psycopg.connect(pg_conninfo(postgres_url), autocommit=True) as c:
        c.execute("DROP SCHEMA IF EXISTS baton_guard CASCADE")
    with psycopg.connect(pg_conninfo(postgres_url)) as conn:
        with pytest.raises(baton.Unavailable, match="guard_not_installed"):
            with baton.guard.guard(conn, "acct:1", 1):
                pass


def wsgi_app(seen):
    def app(environ, start_response):
        length = int(environ.get("CONTENT_LENGTH") or 0)
        seen.append(environ["wsgi.input"].read(length).decode())
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"written"]

    return app


def call_wsgi(app, fence=None, resource="acct", body=""):
    import io

    environ = {"REQUEST_METHOD": "POST", "wsgi.input": io.BytesIO(body.encode()), "CONTENT_LENGTH": str(len(body))}
    if fence is not None:
        environ["HTTP_BATON_FENCE"] = str(fence)
    if resource is not None:
        environ["HTTP_BATON_RESOURCE"] = resource
    status = []
    result = app(environ, lambda s, h: status.append(s))
    body = b"".join(result)
    getattr(result, "close", lambda: None)()
    return status[0], body


@pytest.mark.parametrize("marks", ["memory", "file"])
def test_wsgi_middleware(tmp_path, marks):
    seen = []
    path = tmp_path / "marks.db" if marks == "file" else None
    app = baton.guard.WSGIMiddleware(wsgi_app(seen), marks=path)
    assert call_wsgi(app, 3, body="a3")[0].startswith("200")
    assert call_wsgi(app, 5, body="b5")[0].startswith("200")
    status, body = call_wsgi(app, 3, body="zombie")
    assert status.startswith("409") and json.loads(body)["code"] == "stale_fence"
    assert call_wsgi(app, None, body="nofence")[0].startswith("428")
    assert call_wsgi(app, "x", body="junk")[0].startswith("400")
    assert call_wsgi(app, 1, resource=None, body="noresource")[0].startswith("400")
    assert seen == ["a3", "b5"]
    if marks == "file":
        # Another process's middleware over the same file remembers fence 5.
        again = baton.guard.WSGIMiddleware(wsgi_app(seen), marks=path)
        assert call_wsgi(again, 4, body="late")[0].startswith("409")


def test_asgi_middleware_signed(tmp_path):
    key = tmp_path / "fence.key"
    key.write_text(KEY)
    seen = []

    async def app(scope, receive, send):
        msg = await receive()
        seen.append(msg.get("body", b"").decode())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    guarded = baton.guard.ASGIMiddleware(app, key=key)

    async def call(fence, body):
        sent = []
        headers = [(b"baton-resource", b"r")]
        if fence is not None:
            headers.append((b"baton-fence", str(fence).encode()))
        scope = {"type": "http", "method": "POST", "path": "/", "headers": headers}

        async def receive():
            return {"type": "http.request", "body": body.encode(), "more_body": False}

        async def send(m):
            sent.append(m)

        await guarded(scope, receive, send)
        return sent[0]["status"], sent[-1].get("body", b"")

    keys_token = subprocess.run(
        [sys.executable, "-c", "import baton, sys; print(baton.authority_for(sys.argv[1]).claim('t', 'w').token)",
         f"sqlite:{tmp_path / 's.db'}"],
        env=dict(os.environ, BATON_FENCE_KEY=str(key)), capture_output=True, text=True, check=True,
    ).stdout.strip()

    async def main():
        assert (await call(keys_token, "signed"))[0] == 200
        status, body = await call(99, "bare")
        assert status == 403 and json.loads(body)["code"] == "unsigned_fence"
        status, _ = await call(keys_token.replace("bf1.", "bf1.9", 1), "raised")
        assert status in (400, 403)
        assert (await call(None, "none"))[0] == 428

    asyncio.run(main())
    assert seen == ["signed"]


HTTP_ZOMBIE = textwrap.dedent(
    """
    import sys, urllib.request, urllib.error
    url, fence = sys.argv[1], sys.argv[2]
    print("ready", flush=True)
    sys.stdin.readline()  # paused here (SIGSTOP), past its lease
    req = urllib.request.Request(url, data=b"zombie", method="POST",
                                 headers={"Baton-Fence": fence, "Baton-Resource": "acct"})
    try:
        urllib.request.urlopen(req).read()
        print("wrote")
    except urllib.error.HTTPError as e:
        print(e.code)
    """
)


def test_a_paused_client_is_refused_by_the_wsgi_middleware(tmp_path, sqlite_url):
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args):
            pass

    seen = []
    app = baton.guard.WSGIMiddleware(wsgi_app(seen), marks=tmp_path / "marks.db")
    server = make_server("127.0.0.1", 0, app, handler_class=Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/write"
    try:
        a = baton.authority_for(sqlite_url)
        first = a.claim("http-job", "w1", ttl=0.3)
        z = subprocess.Popen([sys.executable, "-c", HTTP_ZOMBIE, url, str(first.fence)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert z.stdout.readline().strip() == "ready"
        os.kill(z.pid, signal.SIGSTOP)
        z.stdin.write("go\n")
        z.stdin.flush()
        time.sleep(0.5)
        second = a.claim("http-job", "w2", ttl=30)
        import urllib.request

        req = urllib.request.Request(url, data=b"w2", method="POST",
                                     headers={"Baton-Fence": str(second.fence), "Baton-Resource": "acct"})
        assert urllib.request.urlopen(req).status == 200
        os.kill(z.pid, signal.SIGCONT)
        out, _ = z.communicate(timeout=30)
        assert out.strip() == "409"
        assert seen == ["w2"]
    finally:
        server.shutdown()


def test_postgres_takes_a_grants_token(pg, tmp_path, monkeypatch):
    key = tmp_path / "fence.key"
    key.write_text(KEY)
    monkeypatch.setenv("BATON_FENCE_KEY", str(key))
    g = baton.authority_for(f"sqlite:{tmp_path / 's.db'}").claim("tok", "w", ttl=30)
    assert g.token
    with psycopg.connect(pg) as conn:
        # No keys installed in this database: the token's fence is admitted.
        with g.guard(conn, "acct:tok") as admitted:
            assert admitted == g.fence
        with pytest.raises(baton.InvalidInput):
            with baton.guard.guard(conn, "acct:tok", "bf1.1.x"):
                pass
        assert conn.execute("SELECT fence FROM baton_guard.fences WHERE resource = 'acct:tok'").fetchone() == (g.fence,)


def test_resources_seen_once_leave_no_locks_and_refused_ones_none(tmp_path):
    key = tmp_path / "fence.key"
    key.write_text(KEY)
    seen = []
    app = baton.guard.WSGIMiddleware(wsgi_app(seen), key=key)
    for i in range(100):
        status, _ = call_wsgi(app, i + 1, resource=f"bad{i}", body="bare")
        assert status.startswith("403")
    assert len(app.marks.locks.entries) == 0, "a refused fence took a lock"
    plain = baton.guard.WSGIMiddleware(wsgi_app(seen))
    for i in range(3000):
        assert call_wsgi(plain, 1, resource=f"r{i}", body="x")[0].startswith("200")
    assert len(plain.marks.locks.entries) <= 1024
