"""Fixtures: real stores in a temporary directory, and a real `baton serve`."""

import os
import shutil
import subprocess
import tempfile
import threading
import time

import pytest

import baton


def manifest(task, executor="ci", **extra):
    """A declared task's manifest, as a dict."""
    m = {
        "task_id": task,
        "executor": executor,
        "source_branch": "main",
        "source_oid": "abc123",
        "target_version": "2.0",
        "steps": ["build", "test"],
        "heartbeat_timeout_seconds": 60,
    }
    m.update(extra)
    return m


@pytest.fixture
def sqlite_url(tmp_path):
    return f"sqlite:{tmp_path / 'baton.db'}"


@pytest.fixture(params=["sqlite", "sled", "memory"])
def any_url(request, tmp_path):
    """Every embedded store: the package is transport, each answers the same."""
    if request.param == "memory":
        return "memory:"
    return f"{request.param}:{tmp_path / 'store'}"


@pytest.fixture
def auth(sqlite_url):
    a = baton.authority_for(sqlite_url)
    yield a
    a.close()


def baton_bin():
    """The `baton` binary the Rust tests built (scripts/test sets BATON_BIN)."""
    path = os.environ.get("BATON_BIN") or shutil.which("baton")
    if not path or not os.path.exists(path):
        if os.environ.get("BATON_TEST_SERVER"):
            raise RuntimeError("BATON_TEST_SERVER is set but no baton binary was found (set BATON_BIN)")
        pytest.skip("no baton binary: set BATON_BIN to run the server tests")
    return path


class Server:
    def __init__(self, store, tokens=None):
        args = [baton_bin(), "serve", "--store", store, "--listen", "127.0.0.1:0"]
        if tokens:
            args += ["--tokens", str(tokens)]
        env = {k: v for k, v in os.environ.items() if k not in ("BATON_STORE", "BATON_TOKEN")}
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env, text=True)
        line = self.proc.stderr.readline()
        if "http://" not in line:
            self.proc.kill()
            raise RuntimeError(f"baton serve said {line!r}")
        self.url = "http://" + line.rsplit("http://", 1)[1].strip()
        # Keep reading its standard error so it never blocks on a full pipe.
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def server(tmp_path):
    s = Server(f"sqlite:{tmp_path / 'served.db'}")
    yield s
    s.stop()


@pytest.fixture
def server_with_tokens(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("ops operator op-token-0123456789abcdef\nw1 worker w1-token-0123456789abcdef\n")
    os.chmod(tokens, 0o600)
    s = Server(f"sqlite:{tmp_path / 'served.db'}", tokens)
    yield s
    s.stop()


SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts")


def free_port_base(span):
    """A loopback port p with p .. p+span free (checked, then released)."""
    import random
    import socket

    for _ in range(50):
        base = random.randint(30000, 60000 - span)
        try:
            socks = []
            for port in range(base, base + span + 1):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free loopback ports")


def needed(env, what):
    if os.environ.get(env):
        raise RuntimeError(f"{env} is set but {what} is not installed")
    pytest.skip(f"{what} is not installed (set {env}=1 to require it)")


def running(pid):
    """Whether `pid` runs (an exited child nobody reaped yet does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def script_server(script, port):
    """Starts a server with one of scripts/ (it prints the store URL) in a
    new folder directly under /tmp (the server may run as another user, and
    pytest's own temporary folders are private to this one); yields the URL,
    then stops it and removes the folder."""
    d = tempfile.mkdtemp(prefix=f"baton-py-{script}-")
    path = os.path.join(SCRIPTS, script)
    url = subprocess.run(["bash", path, d, str(port)], check=True, capture_output=True, text=True)
    try:
        yield url.stdout.strip()
    finally:
        import glob
        import signal

        pids = [int(open(f).read()) for f in glob.glob(os.path.join(d, "*.pid"))]
        subprocess.run(["bash", path, "stop", d])
        # A member that outlives its SIGTERM (etcd's last one, without a
        # quorum to leave) is killed: nothing outlives the tests.
        deadline = time.monotonic() + 5
        for pid in pids:
            while time.monotonic() < deadline and running(pid):
                time.sleep(0.05)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def etcd_url():
    """A real 3-member etcd cluster on loopback (scripts/etcd-cluster)."""
    if not shutil.which("etcd"):
        needed("BATON_TEST_ETCD", "etcd")
    yield from script_server("etcd-cluster", free_port_base(12))


@pytest.fixture(scope="session")
def postgres_url():
    """A throwaway Postgres server on loopback (scripts/pg-cluster)."""
    import glob

    if not (os.environ.get("BATON_PG_BIN") or shutil.which("initdb") or glob.glob("/usr/lib/postgresql/*/bin/initdb")):
        needed("BATON_TEST_POSTGRES", "Postgres")
    yield from script_server("pg-cluster", free_port_base(0))
