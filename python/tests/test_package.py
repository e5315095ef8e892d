"""What ships in the wheel: stubs that match the module, docstrings."""

import re
from pathlib import Path

import baton


def stub_text():
    return (Path(baton.__file__).parent / "__init__.pyi").read_text()


def test_the_stubs_and_py_typed_ship_beside_the_module():
    here = Path(baton.__file__).parent
    assert (here / "py.typed").exists()
    assert "def authority_for" in stub_text()


def test_every_public_name_is_in_the_stubs_and_documented():
    text = stub_text()
    stubbed = set(re.findall(r"^(?:class|def) (\w+)", text, re.M)) | set(
        re.findall(r"^(\w+)(?::| =)", text, re.M)
    )
    import inspect

    # Modules aside (the native `baton.baton`, and `baton.aio`, stubbed in
    # aio.pyi and checked by stubtest).
    public = {n for n in dir(baton) if not n.startswith("_") and not inspect.ismodule(getattr(baton, n))}
    assert public <= stubbed, public - stubbed
    for name in public:
        obj = getattr(baton, name)
        if callable(obj):
            assert obj.__doc__, f"{name} has no docstring"


def test_every_authority_method_is_stubbed_and_documented():
    text = stub_text()
    methods = {n for n in dir(baton.Authority) if not n.startswith("_")}
    for m in methods:
        assert re.search(rf"def {m}\(", text), f"Authority.{m} is not in the stubs"
        assert getattr(baton.Authority, m).__doc__, f"Authority.{m} has no docstring"


def test_the_readme_example_runs(capsys):
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## From Python", 1)[1]
    code = section.split("```python", 1)[1].split("```", 1)[0]
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "won under fence" in out and out.rstrip().endswith("drained"), out


def test_the_stubs_match_the_module(tmp_path):
    """mypy's stubtest: every name, signature and default in baton.pyi is
    the module's own (scripts/test installs mypy and requires this)."""
    import os
    import subprocess
    import sys

    try:
        import mypy.stubtest  # noqa: F401
    except ImportError:
        if os.environ.get("BATON_TEST_STUBS"):
            raise
        import pytest

        pytest.skip("mypy is not installed")
    allow = tmp_path / "allowlist"
    # The compiled module itself, which `baton/__init__.py` re-exports.
    allow.write_text("baton.baton\n")
    r = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "baton", "--ignore-disjoint-bases", "--allowlist", str(allow)],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_readme_example_type_checks(tmp_path):
    """The stubs type the README's example under mypy --strict."""
    import os
    import subprocess
    import sys

    try:
        import mypy  # noqa: F401
    except ImportError:
        if os.environ.get("BATON_TEST_STUBS"):
            raise
        import pytest

        pytest.skip("mypy is not installed")
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    code = readme.split("## From Python", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    (tmp_path / "example.py").write_text(code)
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "example.py"],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_package_maps_onto_the_catalogue_of_operations():
    ops = baton.operations()
    assert {"claim", "next", "verify", "events"} <= {o["name"] for o in ops}
    for op in ops:
        if op["python"]:
            assert hasattr(baton.Authority, op["python"]), op["name"]
    # The catalogue's rules are the package's: a wait past an hour is
    # refused, naming the field, as the CLI and the server refuse it.
    a = baton.authority_for("memory:")
    try:
        a.next("w", wait=3601)
    except baton.InvalidInput as e:
        assert "wait" in str(e)
    else:
        raise AssertionError("a wait of 3601 s was taken")
