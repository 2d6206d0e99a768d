"""The dataset: the spec catalog, shapes by name, the sweep into the store (resumable after a
SIGKILL: every finished pair is kept, none is measured twice except the chunk in flight) and the
export of one row per pair. Recorded runner: the numbers are synthetic."""

import csv
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from cudal2.dataset import COLUMNS, export_rows, resolve_shapes, run_sweep, write_rows
from cudal2.proposers.catalog import catalog, sample
from cudal2.tuner.recorded import RecordedRunner, specs_measured
from cudal2.store.store import Store
from cudal2.bench.results import DEFAULT_MODE


def test_catalog_is_valid_shape_generic_and_sampled_reproducibly():
    specs = catalog("triton", "sm_90a")
    assert len(specs) > 1000 and len({s.key() for s in specs}) == len(specs)
    assert all(s.shape_specialization == "dynamic" for s in specs)
    assert {s.load_path for s in specs} == {"pointer", "tma"}
    assert sample(40) == sample(40) and sample(40)[:10] == sample(10)
    assert sample(40) != sample(40, seed=1)
    with pytest.raises(ValueError, match="has no specs for backend 'cuda_cpp'"):
        catalog("cuda_cpp")
    with pytest.raises(ValueError, match="positive"):
        sample(0)


def test_cute_dsl_catalog_spans_the_declared_space_and_every_spec_runs_somewhere():
    from cudal2.codegen import get_backend
    from cudal2.ir import GemmProblem

    specs = catalog("cute_dsl", "sm_90a")
    assert len(specs) > 1000 and len({s.key() for s in specs}) == len(specs)
    assert all(s.shape_specialization == "dynamic" and s.backend == "cute_dsl" for s in specs)
    assert {s.warp_specialization for s in specs} == {"cooperative", "pingpong"}
    assert {s.swap_ab for s in specs} == {False, True} and {s.decomposition for s in specs} == {"data_parallel",
                                                                                                  "split_k"}
    assert {160, 208, 224} <= {s.block_n for s in specs}  # widths beyond powers of two and cuBLAS's 192
    be, big = get_backend("cute_dsl"), GemmProblem(m=4096, n=4096, k=4096)
    assert all(be.supports(big, s) for s in specs[::50])
    assert sample(30, "cute_dsl") == sample(30, "cute_dsl") and sample(30, "cute_dsl") != sample(30)


def test_the_deep_catalog_holds_each_base_arrangement_once_at_the_deepest_pipeline_that_fits():
    from cudal2.codegen import get_backend
    from cudal2.ir import GemmProblem, SpecError
    from cudal2.proposers.catalog import DEEPEST_STAGES, catalog, sample

    deep, base = catalog("cute_dsl", "sm_90a", "deep"), catalog("cute_dsl", "sm_90a")
    arrangement = lambda s: (s.block_m, s.block_n, s.num_warps, s.warp_specialization, s.cluster_m,  # noqa: E731
                             s.cluster_n, s.swap_ab)
    assert len({arrangement(s) for s in deep}) == len(deep) > 100
    # every arrangement base holds with the TMA store is there, and no other (three consumer
    # warpgroups take only the registers epilogue: docs/cute_dsl_backend.md)
    assert {arrangement(s) for s in deep} == {arrangement(s) for s in base if s.epilogue_path == "tma_store"}
    assert all(s.epilogue_path == "tma_store" and s.decomposition == "data_parallel" and s.raster_group == 8
               and s.shape_specialization == "dynamic" for s in deep)
    be, reference = get_backend("cute_dsl"), GemmProblem.parse("4096x4096x4096")
    for s in deep:  # one stage more is refused, or the cap
        if s.stages < DEEPEST_STAGES:
            try:
                assert not be.supports(reference, s.replace(stages=s.stages + 1))
            except SpecError:
                pass
    assert {s.stages for s in deep} >= {4, 5, 8}  # 128x256 fits 4, 128x128 5 or 6, 64x64 the cap
    assert sample(30, "cute_dsl", name="deep") == sample(30, "cute_dsl", name="deep")


def test_the_narrow_catalog_adds_small_tiles_deep_split_k_and_pipelines_to_the_base():
    from cudal2.codegen import get_backend
    from cudal2.ir import GemmProblem
    from cudal2.proposers.catalog import names_for

    narrow = catalog("cute_dsl", "sm_90a", "narrow")
    assert len(narrow) > 500 and len({s.key() for s in narrow}) == len(narrow)
    assert {s.key() for s in narrow}.isdisjoint(s.key() for s in catalog("cute_dsl", "sm_90a"))
    assert all(s.shape_specialization == "dynamic" and s.block_n < 64 for s in narrow)
    assert {s.block_k for s in narrow} == {64, 128} and max(s.split_k for s in narrow) == 16
    assert max(s.stages for s in narrow) == 12
    small = GemmProblem(m=128, n=128, k=8192)  # a small output over a deep K: what the catalog is for
    be = get_backend("cute_dsl")
    assert all(be.supports(small, s) for s in narrow[::40])
    drawn = sample(20, "cute_dsl", name="narrow")
    assert drawn == sample(20, "cute_dsl", name="narrow") and set(drawn) <= set(narrow)
    assert names_for("cute_dsl") == ["base", "narrow", "deep"] and names_for("triton") == ["base"]
    with pytest.raises(ValueError, match="no spec catalog named 'wide'; there are base, narrow, deep"):
        catalog("cute_dsl", "sm_90a", "wide")
    with pytest.raises(ValueError, match="has no specs for backend 'triton'"):
        catalog("triton", "sm_90a", "narrow")


def test_shapes_by_set_file_or_list(tmp_path):
    assert len(resolve_shapes("serving:validation")) == 150
    assert {p.layout for p in resolve_shapes("grid:train")} == {"NN"}
    f = tmp_path / "s.txt"
    f.write_text("# two\n64 128 256\n32x32x32\n")
    assert [p.shape for p in resolve_shapes(str(f))] == [(64, 128, 256), (32, 32, 32)]
    assert [p.shape for p in resolve_shapes("8x16x32,1x2x3")] == [(8, 16, 32), (1, 2, 3)]
    assert [(p.shape, p.layout) for p in resolve_shapes("8x16x32-NT,1x2x3")] == [((8, 16, 32), "NT"), ((1, 2, 3), "NN")]
    with pytest.raises(ValueError, match="layout after"):
        resolve_shapes("8x16x32-XY")
    with pytest.raises(ValueError, match="not a shape set"):
        resolve_shapes("gird")
    with pytest.raises(ValueError, match="unknown part"):
        resolve_shapes("grid:test")


def test_a_shape_s_specs_are_split_into_calls_as_even_as_they_go():
    from cudal2.dataset.sweep import chunked

    assert [len(c) for c in chunked(list(range(100)), 32)] == [25, 25, 25, 25]
    assert [len(c) for c in chunked(list(range(64)), 32)] == [32, 32]
    assert [len(c) for c in chunked(list(range(10)), 4)] == [4, 3, 3]
    assert [len(c) for c in chunked(list(range(3)), 32)] == [3] and chunked([], 32) == []
    assert sum(chunked(list(range(97)), 32), []) == list(range(97))


def test_sweep_measures_each_pair_once_and_exports_a_row_per_pair(tmp_path):
    store = Store(tmp_path / "s.db")
    problems = resolve_shapes("serving:validation")[:3]
    specs = sample(7)
    log = tmp_path / "log"
    runner = RecordedRunner(log=log)
    seen = []
    first = run_sweep(problems, specs, runner, store, chunk=3, on_pairs=lambda n, label: seen.append(n))
    assert (first.measured, first.already, sum(seen)) == (21, 0, 21)
    again = run_sweep(problems + resolve_shapes("48x80x96"), specs, runner, store, chunk=3)
    assert (again.measured, again.already) == (7, 21)
    assert len(specs_measured(log)) == 28 == len(set(specs_measured(log)))
    out = tmp_path / "d.csv"
    assert write_rows(export_rows(store), out) == 28
    rows = list(csv.DictReader(out.open()))
    assert tuple(rows[0]) == COLUMNS
    assert {r["split"] for r in rows} == {"validation", ""}  # 48x80x96 is in no set
    assert all(float(r[f"kernel_ms.{DEFAULT_MODE}"]) > 0 and float(r[f"torch_ms.{DEFAULT_MODE}"]) > 0 for r in rows)
    assert {r["spec.shape_specialization"] for r in rows} == {"dynamic"}
    with pytest.raises(ValueError, match=".csv or .parquet"):
        write_rows([], tmp_path / "d.txt")


def test_a_sweep_told_to_stop_returns_between_chunks_and_a_second_run_measures_only_the_rest(tmp_path):
    store, problems, specs = Store(tmp_path / "s.db"), resolve_shapes("48x80x96,64x96x128"), sample(6)
    log = tmp_path / "log"
    asked = []
    first = run_sweep(problems, specs, RecordedRunner(log=log), store, chunk=2,
                      stop=lambda: asked.append(1) or len(asked) > 4)  # four chunks, then stop
    assert first.stopped and first.measured == 8 and len(store.kernels()) == 8
    rest = run_sweep(problems, specs, RecordedRunner(log=log), store, chunk=2)
    assert not rest.stopped and (rest.measured, rest.already) == (4, 8)
    assert len(specs_measured(log)) == 12 == len(set(specs_measured(log)))


SWEEP = textwrap.dedent("""
    import sys
    from cudal2.dataset import resolve_shapes, run_sweep
    from cudal2.proposers.catalog import sample
    from cudal2.tuner.recorded import RecordedRunner
    from cudal2.store.store import Store

    db, log, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])
    run_sweep(resolve_shapes("serving:validation")[:4], sample(10), RecordedRunner(delay_s=delay, log=log),
              Store(db), chunk=4)
""")


def test_a_sweep_killed_mid_chunk_resumes_without_losing_a_finished_pair(tmp_path):
    db, log = tmp_path / "s.db", tmp_path / "log"
    script = tmp_path / "sweep.py"
    script.write_text(SWEEP)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, str(script), str(db), str(log), "0.05"], env=env)
    deadline = time.monotonic() + 120
    while len(specs_measured(log)) < 15 and time.monotonic() < deadline:  # inside the 4th chunk
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = specs_measured(log)
    kept = len(Store(db).kernels())
    assert 12 <= kept < len(before) <= 40  # whole chunks kept; the one in flight is lost
    subprocess.run([sys.executable, str(script), str(db), str(log), "0"], env=env, check=True, timeout=300)
    records = Store(db).kernels()
    assert len(records) == 40 == len({(r["problem"].key(), r["result"].spec.key()) for r in records})
    measured = specs_measured(log)
    assert len(measured) - 40 == len(before) - kept  # only the lost chunk's pairs measured again


class WithAnAbsentBaseline(RecordedRunner):
    """A runner one of whose baselines is not installed (reported unavailable, with no timing)."""

    timed_baselines = 0

    def evaluate(self, problem, specs, modes=(DEFAULT_MODE,), with_baselines=True):
        self.timed_baselines += with_baselines
        return super().evaluate(problem, specs, modes)

    def baselines(self, problem, modes=(DEFAULT_MODE,)):
        from cudal2.bench.results import BaselineResult

        return {**super().baselines(problem, modes), "absent": BaselineResult("absent", {}, available=False)}


def test_a_resumed_sweep_does_not_time_stored_baselines_again(tmp_path):
    store, problems, specs = Store(tmp_path / "s.db"), resolve_shapes("48x80x96,64x96x128"), sample(6)
    first = WithAnAbsentBaseline()
    run_sweep(problems, specs[:3], first, store, chunk=2)
    assert first.timed_baselines == 2  # once per shape, with its first chunk
    again = WithAnAbsentBaseline()
    run_sweep(problems, specs, again, store, chunk=2)
    assert again.timed_baselines == 0 and len(again.calls) == 6


def test_the_sweep_command_measures_the_catalog_it_is_given(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from cudal2.cli import app

    monkeypatch.setenv("COLUMNS", "200")
    db = tmp_path / "s.db"
    r = CliRunner().invoke(app, ["sweep", "128x128x8192", "--specs", "5", "--backend", "cute_dsl", "--catalog",
                                 "narrow", "--runner", "recorded", "--store", str(db)])
    assert r.exit_code == 0, r.output
    assert "5 pairs measured" in r.output
    measured = {rec["result"].spec for rec in Store(db).kernels()}
    assert measured == set(sample(5, "cute_dsl", name="narrow"))
