"""What `cudal2 search --dry-run` reports: every backend it considered (in the run, or skipped with
the reason and the install line), and what its "built" column means for each row."""

import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cudal2.cli import app
from cudal2.codegen import get_backend

runner = CliRunner()


@pytest.fixture(autouse=True)
def _wide(monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")


def _rows(output: str) -> list[list[str]]:
    return [[c.strip() for c in line.split("│")[1:-1]] for line in output.splitlines() if line.startswith("│")]


def test_the_install_lines_are_the_extras_pyproject_pins():
    extras = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())[
        "project"]["optional-dependencies"]
    for backend, extra in (("triton", "triton"), ("cute_dsl", "cute"), ("cuda_cpp", "cuda")):
        assert list(get_backend(backend).requirements) == extras[extra]
    assert get_backend("cute_dsl").install_line() == 'pip install "nvidia-cutlass-dsl==4.8.1" "apache-tvm-ffi>=0.1.15.post2"'


def test_a_dry_run_lists_every_backend_it_considered_with_why_one_is_skipped(monkeypatch):
    monkeypatch.setattr(type(get_backend("cute_dsl")), "usable", lambda self: (False, "nvidia-cutlass-dsl is not installed"))
    r = runner.invoke(app, ["search", "512x512x512", "--dry-run", "--proposer", "random", "--n", "2", "--arch", "sm_90a"])
    assert r.exit_code == 0, r.output
    rows = _rows(r.output)
    assert ["cute_dsl", "skipped", "nvidia-cutlass-dsl is not installed",
            'pip install "nvidia-cutlass-dsl==4.8.1" "apache-tvm-ffi>=0.1.15.post2"'] in rows, r.output
    assert ["cuda_cpp", "skipped", "declares no sm_90a code (sm_80 only)", ""] in rows, r.output
    assert ["triton", "yes", "", ""] in rows, r.output
    from cudal2.codegen.registry import backend_statuses

    assert [s.name for s in backend_statuses("sm_90a")][:3] == ["triton", "cute_dsl", "cuda_cpp"]


def test_the_built_column_says_a_module_imported_under_the_interpreter_was_not_compiled(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    r = runner.invoke(app, ["search", "512x256x128", "--dry-run", "--backend", "triton", "--proposer", "rules",
                            "--n", "2", "--arch", "sm_90a"])
    assert r.exit_code == 0, r.output
    proposals = [row for row in _rows(r.output) if row[0].isdigit()]
    assert len(proposals) == 2 and all(row[3:6] == ["yes", "yes", "imported (interpreter)"] for row in proposals), r.output
    assert "nothing was compiled to GPU code" in r.output
    assert "compiled" not in [c for row in proposals for c in row]


def test_rows_that_differ_only_in_a_field_the_summary_leaves_out_name_that_field(monkeypatch):
    from cudal2 import api
    from cudal2.ir import KernelSpec
    from cudal2.proposers.proposal import Proposal

    specs = [KernelSpec(block_m=128, block_n=64, block_k=32, num_warps=4, stages=2, raster_group=g) for g in (4, 8)]
    assert specs[0].summary() == specs[1].summary()  # what the table showed alone

    class Two:
        name = "two"

        def propose(self, problem, history, n):
            return [Proposal(s, source="two") for s in specs[:n]]

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(api, "resolve_proposer", lambda *a, **k: Two())
    r = runner.invoke(app, ["search", "512x256x128", "--dry-run", "--backend", "triton", "--n", "2", "--arch", "sm_90a"])
    assert r.exit_code == 0, r.output
    cells = [row[2] for row in _rows(r.output) if row and row[0].isdigit()]
    assert len(cells) == 2 and cells[0] != cells[1], r.output
    assert cells[0].endswith("raster_group=4") and cells[1].endswith("raster_group=8"), cells


def test_each_backend_in_the_run_gets_a_row_though_the_proposer_favours_another(monkeypatch):
    """A proposer's n best may all be of one backend (small M: Triton's): the dry run still shows
    each backend of the run building, one proposal of its own asked of that backend alone."""
    from cudal2 import api

    real = api.resolve_proposer

    class FavoursTheFirst:
        name = "favours"

        def __init__(self, backends):
            self.backends, self.inner = backends, real("random", backends, "sm_90a")

        def propose(self, problem, history, n):
            return [p for p in self.inner.propose(problem, history, 8 * n) if p.spec.backend == self.backends[0]][:n]

    cute = type(get_backend("cute_dsl"))
    monkeypatch.setattr(cute, "usable", lambda self: (True, ""))
    monkeypatch.setattr(cute, "compile", lambda self, source: None)  # the wiring is under test, not the DSL
    monkeypatch.setattr(cute, "precompile", lambda self, source: None)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(api, "resolve_proposer", lambda proposer, backends, arch: FavoursTheFirst(tuple(backends)))
    r = runner.invoke(app, ["search", "512x512x512", "--dry-run", "--backend", "triton", "--backend", "cute_dsl",
                            "--n", "2", "--arch", "sm_90a"])
    assert r.exit_code == 0, r.output
    backends = [row[1] for row in _rows(r.output) if row and row[0].isdigit()]
    assert backends == ["triton", "triton", "cute_dsl"], r.output
