"""cudal2.settings declares every CUDAL2_* variable the package reads, and docs/environment.md's
table is the one it writes."""

import ast
import re
from dataclasses import fields
from pathlib import Path

from cudal2 import settings as settings_module
from cudal2.settings import BY_NAME, VARIABLES, Settings, markdown_table, settings

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "cudal2"


def _environment_reads(tree: ast.AST) -> list[tuple[int, str | None]]:
    """(line, variable name or None where not a constant) of each os.environ.get / os.environ[...] /
    os.getenv / os.environ.setdefault read; a name bound to a string at module level counts as that string."""
    constants = {t.id: n.value.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                 and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                 for t in n.targets if isinstance(t, ast.Name)}

    def named(node) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        return constants.get(node.id) if isinstance(node, ast.Name) else None

    def is_environ(node) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "environ"

    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            f = node.func
            if (f.attr in ("get", "setdefault", "pop") and is_environ(f.value)) or f.attr == "getenv":
                out.append((node.lineno, named(node.args[0])))
        elif isinstance(node, ast.Subscript) and is_environ(node.value) and isinstance(node.ctx, ast.Load):
            out.append((node.lineno, named(node.slice)))
    return out


def test_the_package_reads_its_variables_only_through_settings():
    found, outside = [], []
    for path in PACKAGE.rglob("*.py"):
        for line, name in _environment_reads(ast.parse(path.read_text())):
            found.append(name)
            if name is not None and name.startswith("CUDAL2_"):
                where = f"{path.relative_to(ROOT)}:{line} {name}"
                if name not in BY_NAME:
                    outside.append(f"{where} (not declared in cudal2.settings.VARIABLES)")
                elif path != Path(settings_module.__file__):
                    outside.append(f"{where} (read settings() instead)")
    assert found, "no environment read found: the scan no longer matches how the code reads them"
    assert not outside, f"CUDAL2_* variables read around cudal2.settings: {outside}"


def test_every_variable_named_in_the_package_is_declared():
    named = {m for p in PACKAGE.rglob("*.py") for m in re.findall(r"[\"'](CUDAL2_[A-Z0-9_]+)[\"']", p.read_text())}
    assert named and not named - set(BY_NAME), f"not declared in cudal2.settings: {sorted(named - set(BY_NAME))}"


def test_the_settings_have_one_field_a_variable():
    assert [f.name for f in fields(Settings)] == [v.name.removeprefix("CUDAL2_").lower() for v in VARIABLES]
    assert all(v.help and v.default for v in VARIABLES)


def test_the_docs_table_is_the_one_the_settings_write():
    assert markdown_table() in (ROOT / "docs" / "environment.md").read_text(), (
        "docs/environment.md's table differs from cudal2.settings.markdown_table(); paste it there")


def test_settings_follow_the_environment_as_it_changes(monkeypatch, tmp_path):
    monkeypatch.delenv("CUDAL2_DEBUG", raising=False)
    monkeypatch.setenv("CUDAL2_STORE", str(tmp_path / "a.db"))
    assert settings().store == str(tmp_path / "a.db") and not settings().debug
    monkeypatch.setenv("CUDAL2_STORE", "")
    monkeypatch.setenv("CUDAL2_TVM_FFI", "0")
    monkeypatch.setenv("CUDAL2_DEBUG", "1")
    now = settings()
    assert now.store is None and not now.tvm_ffi and now.debug and now.native_launch

    from cudal2.store.store import default_url

    monkeypatch.setenv("CUDAL2_STORE", str(tmp_path / "b.db"))
    assert "b.db" in default_url()
