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
    public = {n for n in dir(baton) if not n.startswith("_") and n != "baton"}
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
