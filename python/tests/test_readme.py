"""README.md's Python block runs as written (the shell blocks run in
cli/tests/readme.rs)."""

import contextlib
import io
import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def test_the_readmes_python_block_runs_as_written(tmp_path, monkeypatch):
    blocks = re.findall(r"^```python\n(.*?)^```$", README.read_text(), re.M | re.S)
    assert blocks, "README.md has a Python block"
    monkeypatch.chdir(tmp_path)
    for block in blocks:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, str(README), "exec"), {"__name__": "readme"})
        printed = out.getvalue()
        assert "won under fence" in printed, printed
        assert "drained" in printed, printed
