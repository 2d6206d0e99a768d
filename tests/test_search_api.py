"""cudal2.search end to end with fakes: the public API, the result object, resumption."""

import pytest
import torch

import cudal2
from cudal2 import GemmProblem
from cudal2.tuner.recorded import RecordedRunner
from cudal2.store.store import Store


def test_search_end_to_end_with_rules_proposer_and_recorded_runner(tmp_path):
    store = tmp_path / "s.db"
    runner = RecordedRunner(baselines={"torch": 0.05, "cublaslt_autotune": 0.045})
    res = cudal2.search((1024, 768, 512), dtype="float16", layout="NT", backends=("triton",), proposer="rules",
                        budget=8, store=store, runner=runner, progress=False, seed=0, modes=("layer", "server"))
    assert isinstance(res, cudal2.SearchResult)
    assert res.problem == GemmProblem(m=1024, n=768, k=512, layout="NT")
    assert res.evaluations == 8 and len(res.history) == 8
    assert set(res.best.time_ms) == {"layer", "server"}
    best_ms = min(r.kernel_ms("layer") for r in res.history if r.ok)  # the objective: the first of modes
    assert res.best.time_ms["layer"] == pytest.approx(best_ms)
    assert res.speedup["torch"] == pytest.approx(0.05 / best_ms)
    assert set(res.speedups) == {"layer", "server"}
    first = min(res.study.trials, key=lambda t: t.number)
    assert first.user_attrs["proposal"].startswith("rules") or first.user_attrs["proposal"] == "proposer"
    assert res.confirmed_rounds == 3  # the leaders were timed again (the recorded runner repeats itself)
    # resuming the same search with a larger budget continues the study; no search trial is measured
    # again (the runner sees 4 new specs, then confirmation rounds for whichever leaders lack them)
    confirmations = len(Store(store).confirmations(res.problem))
    runner2 = RecordedRunner(baselines={"torch": 0.05, "cublaslt_autotune": 0.045})
    res2 = cudal2.search((1024, 768, 512), layout="NT", backends=("triton",), proposer="rules", budget=12, store=store,
                         runner=runner2, progress=False, seed=0, modes=("layer", "server"))
    new = {s.key() for s in runner2.calls} - {r.spec.key() for r in res.history}
    assert res2.evaluations == 12 and len(new) == 4
    assert len(runner2.calls) == 4 + len(Store(store).confirmations(res.problem)) - confirmations
    assert res2.study.study_name == res.study.study_name


def test_result_kernel_compiles_lazily_and_computes_the_gemm(tmp_path):
    pytest.importorskip("triton")
    res = cudal2.search("96x80x64", proposer=None, budget=2, store=tmp_path / "s.db",
                        runner=RecordedRunner(rows=[({}, 0.01)]), progress=False, seed=0)
    assert res._kernel is None
    try:
        kernel = res.kernel
    except NotImplementedError:
        pytest.skip("the Triton backend cannot compile yet")
    a, b = torch.randn(96, 64).half(), torch.randn(64, 80).half()
    want = a.float() @ b.float()
    assert (kernel(a, b).float() - want).norm() / want.norm() < 1e-2


def test_no_gpu_and_no_runner_is_a_clear_error(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("needs a machine without a GPU")
    with pytest.raises(RuntimeError, match="dry-run"):
        cudal2.search((64, 64, 64), store=tmp_path / "s.db")


def test_import_is_cheap():
    import subprocess
    import sys

    code = "import sys, cudal2; print(sorted(m for m in ('torch', 'optuna', 'triton', 'sqlalchemy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.gpu
def test_gpu_search_small_budget(tmp_path):
    from cudal2.bench.results import DEFAULT_MODE

    res = cudal2.search((2048, 2048, 2048), budget=4, store=tmp_path / "s.db", progress=False, seed=0)
    assert res.evaluations == 4 and res.best is not None
    assert res.mode == DEFAULT_MODE == "chain" and res.best.time_ms.get("chain", 0) > 0
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
    b = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
    want = a.float() @ b.float()
    assert (res.kernel(a, b).float() - want).norm() / want.norm() < 1e-3
    assert res.speedup["torch"] > 0


@pytest.mark.slow
def test_search_with_the_real_evaluator_on_cpu(tmp_path):
    """The loop against the real evaluator (device='cpu': Triton interpreter, wall-clock timing)."""
    pytest.importorskip("triton")
    try:
        from cudal2.bench.evaluator import Evaluator
    except ImportError:
        pytest.skip("the evaluator is not there yet")
    with Evaluator(device="cpu", baselines=("torch",), compile_workers=1) as ev:
        res = cudal2.search("64x48x32", proposer="rules", budget=2, store=tmp_path / "s.db", runner=ev,
                            progress=False, seed=0, batch_size=2)
    assert res.evaluations == 2 and all(r.status == "ok" for r in res.history), [r.reason for r in res.history]
    assert res.best is not None and "triton" in res.best.source.lower()
    assert res.speedup["torch"] > 0 and res.baselines["torch"].kernel_ms() > 0
