"""README.md's Python block runs as written (the shell blocks run in
cli/tests/readme.rs)."""

import contextlib
import io
import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def blocks():
    return re.findall(r"^```python\n(.*?)^```$", README.read_text(), re.M | re.S)


def test_the_readmes_python_block_runs_as_written(tmp_path, monkeypatch):
    assert blocks(), "README.md has a Python block"
    monkeypatch.chdir(tmp_path)
    for block in blocks():
        if "guard" in block or "lease.step" in block:
            continue  # a database, or its own test below
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, str(README), "exec"), {"__name__": "readme"})
        printed = out.getvalue()
        assert "won under fence" in printed, printed
        assert "drained" in printed, printed


def test_the_readmes_step_example_records_its_steps(tmp_path, monkeypatch):
    stepped = [b for b in blocks() if "lease.step" in b]
    assert len(stepped) == 1, "one durable steps example"
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(stepped[0], str(README), "exec"), {"__name__": "readme"})
    printed = out.getvalue()
    assert printed.count("fetching") == 1, printed
    assert "total 240 steps ['fetch', 'double']" in printed, printed
    import baton

    r = baton.authority_for("sqlite:steps.db").get("report-2026-12-07")
    assert r.state == "SUCCEEDED" and [c["output"] for c in r.checkpoints] == [{"rows": 120, "day": "2026-12-07"}, 240]


def test_the_readmes_guard_example_pays_once(tmp_path, monkeypatch, postgres_url):
    """The worked example of "Fencing your own storage", on a real Postgres
    with the guard installed as README.md says."""
    import os
    import subprocess

    url = postgres_url.split("?", 1)[0]
    subprocess.run([os.environ.get("BATON_BIN", "baton"), "guard", "install", url], check=True, capture_output=True)
    guarded = [b for b in blocks() if "guard" in b]
    assert len(guarded) == 1, "one guard example"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATABASE_URL", url)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(guarded[0], str(README), "exec"), {"__name__": "readme"})
    printed = out.getvalue().split("\n")
    assert printed[0] == "refused stale_fence", printed
    assert printed[1] == "(100,)", printed
