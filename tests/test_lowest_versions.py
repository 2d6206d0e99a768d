"""tools/test.sh's second pass, at the lowest versions pyproject.toml allows: its version listing names
every lower-bounded dependency of the package and of the test extra, and a test that imports one of
the test extra's packages is among the tests it runs, so that each declared lower bound is a tested one."""

import re
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parent.parent
TEST_SH = (ROOT / "tools" / "test.sh").read_text()
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

# the module a distribution installs, where it is not the distribution's own name
MODULES = {"import-linter": "importlinter", "apache-tvm-ffi": "tvm_ffi", "nvidia-cutlass": "cutlass_library",
           "nvidia-cutlass-dsl": "cutlass"}
# lower bounds the second pass leaves untested: their tests compile kernels for minutes
NOT_IN_THE_LOWEST_PASS = {"apache-tvm-ffi", "nvidia-cutlass", "nvidia-cuda-nvdisasm"}


def lower_bounded(requirements: list[str]) -> list[str]:
    """The names of the requirements with a `>=` bound ("psycopg[binary]>=3.2.1" -> "psycopg")."""
    found = (re.match(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*([^;]*)", r) for r in requirements)
    return [m.group(1).lower() for m in found if ">=" in m.group(3)]


def bounds_tests() -> set[str]:
    return set(re.search(r"BOUNDS_TESTS=\(([^)]*)\)", TEST_SH).group(1).split())


def listed() -> set[str]:
    return set(re.search(r"grep -i -E '\^\(([^)]*)\) '", TEST_SH).group(1).lower().split("|"))


def importing(module: str) -> set[str]:
    """The test files that import `module` or skip without it."""
    pattern = re.compile(rf"^\s*(import {module}\b|from {module}[ .])|importorskip\(\"{module}[\".]", re.MULTILINE)
    return {f"tests/{p.name}" for p in (ROOT / "tests").glob("test_*.py") if pattern.search(p.read_text())}


def test_every_lower_bound_is_in_the_version_listing():
    names = lower_bounded(PROJECT["dependencies"]) + lower_bounded(PROJECT["optional-dependencies"]["test"])
    assert "transformers" in names and "psycopg" in names
    missing = [n for n in names if n not in listed() and n not in NOT_IN_THE_LOWEST_PASS]
    assert not missing, f"tools/test.sh's version listing leaves out {missing}"


def test_a_test_that_imports_a_test_dependency_runs_at_its_lowest_version():
    for name in lower_bounded(PROJECT["optional-dependencies"]["test"]):
        if name in NOT_IN_THE_LOWEST_PASS:
            continue
        callers = importing(MODULES.get(name, name.replace("-", "_")))
        assert not callers or callers & bounds_tests(), \
            f"{name}: none of {sorted(callers)} is in tools/test.sh's BOUNDS_TESTS"


def test_the_bounds_tests_exist():
    assert all((ROOT / path).is_file() for path in bounds_tests())
