"""The public API's arguments are checked as the CLI checks its options (a string where a list of
names is expected is one name, bools and sets are not shapes, budgets and counts are whole numbers);
`cudal2 tune` searches each shape of its file once; concurrent searches of one problem on one
store keep its budget."""

from __future__ import annotations

import multiprocessing as mp

import pytest
from typer.testing import CliRunner

from cudal2 import GemmProblem, SpecError, api
from cudal2.cli import app
from cudal2.tuner.recorded import RecordedRunner
from cudal2.store.store import Store

PROBLEM = GemmProblem(m=1024, n=1024, k=1024)


def _search(tmp_path, **kw):
    options = dict(backends=("triton",), proposer="rules", budget=2, store=tmp_path / "s.db",
                   runner=RecordedRunner(), progress=False, confirm=None, arch="sm_90a")
    options.update(kw)
    return api.search(kw.pop("shape", (256, 256, 256)), **{k: v for k, v in options.items() if k != "shape"})


def test_a_single_name_is_one_name_not_its_characters(tmp_path):
    res = _search(tmp_path, modes="offline", backends="triton")
    assert res.mode == "offline" and set(res.best.time_ms) == {"offline"}
    assert {r.spec.backend for r in res.history} == {"triton"}


@pytest.mark.parametrize("kw,words", [
    (dict(modes="nosuch"), "nosuch is not a timing mode"),
    (dict(modes=()), "is not a timing mode"),
    (dict(budget=2.7), "budget=2.7: give a whole number"),
    (dict(budget=True), "budget=True"),
    (dict(budget=0), "at least 1"),
    (dict(batch_size=0), "batch_size=0: give a whole number, 1 or more"),
    (dict(batch_size=2.0), "batch_size=2.0"),
    (dict(n_proposals=-5), "n_proposals=-5: give a whole number, 0 or more"),
    (dict(backends={"triton"}), "backends={'triton'}: give a name or a list of names"),
])
def test_bad_arguments_are_one_line_naming_the_value(tmp_path, kw, words):
    with pytest.raises((ValueError, TypeError)) as e:
        _search(tmp_path, **kw)
    assert words in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "s.db").exists()  # refused before anything ran


@pytest.mark.parametrize("shape,words", [((True, True, True), "True and False are not dimensions"),
                                         ({1024, 512, 256}, "no order"), ((1, 2), r"expected \(M, N, K\)")])
def test_shapes_that_are_not_three_ordered_integers_are_refused(tmp_path, shape, words):
    with pytest.raises(SpecError, match=words):
        _search(tmp_path, shape=shape)


def test_a_whole_float_budget_is_that_many_evaluations(tmp_path):
    assert _search(tmp_path, budget=3.0).evaluations == 3


def test_tune_searches_each_shape_once_whatever_its_spelling(tmp_path):
    shapes = tmp_path / "shapes.txt"
    shapes.write_text("4096x4096x4096\n4096 x 4096 x 4096\n64x64x64\n4096X4096X4096\n4096,4096,4096\n" + "64x64x64\n" * 1000)
    r = CliRunner().invoke(app, ["tune", str(shapes), "--runner", "recorded", "--budget", "2", "--store",
                                 str(tmp_path / "s.db")])
    assert r.exit_code == 0, r.output
    assert "1005 lines name 2 distinct shape(s): each is searched once" in r.output
    rows = [line for line in r.output.splitlines() if line.startswith("| 4096x") or line.startswith("| 64x")]
    assert [row.split()[1] for row in rows] == ["4096x4096x4096-float16-NN", "64x64x64-float16-NN"]
    assert "| 2 |" in r.output.split("| over |")[1]  # the geomean counts two shapes


def _one_search(db: str, seed: int) -> None:
    from cudal2.tuner.loop import run_search
    from cudal2.proposers import get_proposer

    run_search(PROBLEM, backends=("triton",), arch="sm_90a", proposer=get_proposer("rules", backends=("triton",),
                                                                                 arch="sm_90a"),
               runner=RecordedRunner(delay_s=0.05), store=Store(db), budget=16, seed=seed, progress=False,
               confirm=None)


@pytest.mark.slow
def test_concurrent_searches_of_one_problem_keep_its_budget(tmp_path):
    db = str(tmp_path / "s.db")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_one_search, args=(db, seed)) for seed in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert len(Store(db).kernels(PROBLEM)) == 16


def _tune_untuned(tmp_path, **kw):
    from cudal2 import model_tuning

    options = dict(proposer="rules", backends=("triton",), store=tmp_path / "s.db", runner=RecordedRunner(),
                   progress=False, arch="sm_90a")
    options.update(kw)
    return model_tuning.tune_untuned(**options)


def test_tune_untuned_takes_a_single_backend_name_as_one_name(tmp_path, monkeypatch):
    from cudal2 import ops

    monkeypatch.setattr(ops, "untuned_problems", lambda: [GemmProblem(m=256, n=256, k=256)])
    monkeypatch.setattr(ops, "set_table", lambda table: None)
    _tune_untuned(tmp_path, backends="triton", budget=1)
    assert {k["backend"] for k in Store(tmp_path / "s.db").kernels(GemmProblem(m=256, n=256, k=256))} == {"triton"}


@pytest.mark.parametrize("kw,words", [
    (dict(budget=2.7), "budget=2.7: give a whole number"),
    (dict(budget=True), "budget=True"),
    (dict(backends={"triton"}), "backends={'triton'}: give a name or a list of names"),
])
def test_tune_model_and_tune_untuned_refuse_bad_arguments_before_anything_runs(tmp_path, kw, words):
    """Even with nothing to tune (no untuned shape, a model without a Linear), a bad argument is
    the caller's error, as it is in cudal2.search."""
    import torch

    from cudal2 import model_tuning

    with pytest.raises((ValueError, TypeError)) as e:
        _tune_untuned(tmp_path, **kw)
    assert words in str(e.value) and "\n" not in str(e.value)
    options = dict(proposer="rules", backends=("triton",), store=tmp_path / "s.db", runner=RecordedRunner(),
                   progress=False, arch="sm_90a")
    options.update(kw)
    with pytest.raises((ValueError, TypeError), match=words.split(":")[0].replace("{", r"\{").replace("(", r"\(")):
        model_tuning.tune_model(torch.nn.ReLU(), torch.zeros(2, 2), **options)
    assert not (tmp_path / "s.db").exists()


def test_precompile_takes_a_single_backend_name_as_one_name():
    res = api.precompile("256x256x256", backends="triton", proposer="rules", arch="sm_90a", dry_run=True,
                         progress=False, plan_processes=0)
    assert res.units > 0


@pytest.mark.parametrize("kw,words", [
    (dict(per_shape=0), "per_shape=0: give a whole number, 1 or more"),
    (dict(per_shape=2.5), "per_shape=2.5"),
    (dict(workers=-1), "workers=-1: give a whole number, 1 or more"),
    (dict(plan_processes=-2), "plan_processes=-2: give a whole number, 0 or more"),
    (dict(backends={"triton"}), "backends={'triton'}: give a name or a list of names"),
])
def test_precompile_refuses_bad_counts_in_one_line(kw, words):
    options = dict(proposer="rules", arch="sm_90a", dry_run=True, progress=False, plan_processes=0)
    options.update(kw)
    with pytest.raises((ValueError, TypeError)) as e:
        api.precompile("256x256x256", **options)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_the_recorded_runner_is_named_as_the_cli_names_it(tmp_path):
    res = api.search((256, 256, 256), backends="triton", proposer="rules", budget=2, store=tmp_path / "s.db",
                     runner="recorded", progress=False, confirm=None, arch="sm_90a")
    assert res.evaluations == 2 and res.best is not None


def test_the_cli_prints_its_version():
    from importlib.metadata import version

    r = CliRunner().invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output.strip() == f"cudal2 {version('cudal2')}"


def test_an_unknown_runner_name_is_one_line(tmp_path):
    with pytest.raises(ValueError, match="runner='cpu': give 'gpu', 'recorded' or a Runner object"):
        api.search((256, 256, 256), runner="cpu", store=tmp_path / "s.db", progress=False)


def test_without_a_gpu_the_default_runner_names_the_recorded_runner(monkeypatch):
    from cudal2.tuner import resolve

    monkeypatch.setattr(resolve, "gpu_available", lambda: False)
    with pytest.raises(RuntimeError, match='runner="recorded"'):
        resolve.default_runner()


def test_the_recorded_runner_writes_into_its_own_store_by_default(tmp_path, monkeypatch):
    """Synthetic numbers never reach the default store ($CUDAL2_STORE here)."""
    from cudal2.store.store import Store, recorded_url, sqlite_path

    monkeypatch.setenv("CUDAL2_STORE", str(tmp_path / "default.db"))
    monkeypatch.setenv("CUDAL2_CACHE_DIR", str(tmp_path / "cache"))
    api.search((256, 256, 128), backends="triton", proposer="rules", budget=2, runner="recorded",
               progress=False, confirm=None, arch="sm_90a")
    assert not (tmp_path / "default.db").exists()
    assert sqlite_path(recorded_url()) == tmp_path / "cache" / "recorded.db"
    assert [p.label() for p in Store(recorded_url()).problems()] == ["256x256x128-float16-NN"]


@pytest.mark.parametrize("guarded", [False, True])
def test_a_script_that_searches_without_a_main_guard_is_told_at_once(tmp_path, guarded):
    """Without `if __name__ == "__main__":` each of the evaluator's spawned workers imports the script and
    starts the search again; the search says so before it starts one (it spun for minutes before)."""
    import subprocess
    import sys

    call = 'cudal2.search("64x64x64", budget=1, progress=False)'
    body = f'if __name__ == "__main__":\n    {call}\n' if guarded else call + "\n"
    script = tmp_path / "tune_it.py"
    script.write_text("import cudal2\n" + body)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                       env={**__import__("os").environ, "CUDAL2_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    if guarded:
        assert "main guard" not in last and "__main__" not in last  # no GPU here: the next check speaks
    else:
        assert "tune_it.py line 2 starts a GPU search from the script's top level" in last
        assert 'if __name__ == "__main__":' in last


@pytest.mark.parametrize("module", ["tuner", "tuner.run"])
def test_python_m_of_a_package_is_not_taken_for_an_unguarded_script(tmp_path, module):
    """`python -m PACKAGE` (as `python -m cudal2.cli search`) runs the package's __main__.py, which
    spawned workers never run again (multiprocessing skips a main module named *.__main__): no guard
    message there. `python -m PACKAGE.MODULE` is imported again by each worker: the guard speaks."""
    import os
    import subprocess
    import sys

    pkg = tmp_path / "tuner"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    call = 'import cudal2\ncudal2.search("64x64x64", budget=1, progress=False)\n'
    (pkg / ("__main__.py" if module == "tuner" else "run.py")).write_text(call)
    r = subprocess.run([sys.executable, "-m", module], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env={**os.environ, "CUDAL2_CACHE_DIR": str(tmp_path / "cache"),
                            "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))})
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert ("starts a GPU search from the script's top level" in last) == (module == "tuner.run"), last
