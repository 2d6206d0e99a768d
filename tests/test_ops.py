"""TunedTable, cudal2.matmul/linear (torch fallback, tuned path), the custom ops under torch.compile."""

import json

import pytest
import torch

import cudal2
from cudal2 import Epilogue, GemmProblem, KernelSpec
from cudal2 import ops
from cudal2.search.loop import run_search
from cudal2.search.recorded import RecordedRunner
from cudal2.search.store import Store
from cudal2.search.table import TunedEntry, TunedTable

P = GemmProblem(m=96, n=80, k=64)


def _entry(problem=P, ms=0.01, torch_ms=0.02, gpu="NVIDIA H100 80GB HBM3", **spec):
    spec = KernelSpec(**{"block_m": 32, "block_n": 32, "block_k": 32, "stages": 2, **spec})
    return TunedEntry(problem=problem, spec=spec, kernel_ms=ms, baselines_ms={"torch": torch_ms}, gpu=gpu)


@pytest.fixture(autouse=True)
def _reset_table():
    ops.set_table(TunedTable())
    yield
    ops.set_table(None)


def test_table_lookup_uses_only_faster_entries_of_this_gpu(tmp_path):
    slower = GemmProblem(m=128, n=128, k=128)
    t = TunedTable([_entry(), _entry(problem=slower, ms=0.02, torch_ms=0.019)])
    assert t.lookup(P, gpu="NVIDIA H100 80GB HBM3").speedup() == pytest.approx(2.0)
    assert t.lookup(P, gpu="NVIDIA A100-SXM4-80GB") is None  # measured on another GPU
    assert t.lookup(slower) is None  # slower than torch: never used
    assert t.lookup(GemmProblem(m=96, n=80, k=64, layout="NT")) is None
    t.add(_entry(ms=0.005, stages=3))  # a faster kernel for the same problem replaces the old one
    assert len(t) == 2 and t.lookup(P).spec.stages == 3
    path = t.save(tmp_path / "t.json")
    again = TunedTable.load(path)
    assert [e.to_dict() for e in again] == [e.to_dict() for e in t]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"entries": []}))
    with pytest.raises(ValueError, match="not a cudal2 tuned table"):
        TunedTable.load(bad)
    with pytest.raises(FileNotFoundError, match="cudal2 export"):
        TunedTable.load(tmp_path / "missing.json")


def test_table_keeps_the_entry_faster_against_the_baseline_timed_with_it():
    # a kernel timed while the GPU ran hot (torch 10 us there) beats one timed cool (torch 7 us)
    # when its own ratio is better, although its raw time is higher
    hot = _entry(ms=0.0095, torch_ms=0.010, stages=3)
    cool = _entry(ms=0.008, torch_ms=0.007, stages=4)
    for order in ((hot, cool), (cool, hot)):
        t = TunedTable(list(order))
        assert len(t) == 1 and t.lookup(P, min_speedup=0.0).spec.stages == 3
    no_baseline = TunedEntry(problem=P, spec=cool.spec, kernel_ms=0.008, baselines_ms={}, gpu=cool.gpu)
    assert next(iter(TunedTable([hot, no_baseline]))).kernel_ms == pytest.approx(0.008)  # raw time then


def test_table_from_store_after_a_search(tmp_path, monkeypatch):
    store = Store(tmp_path / "s.db")
    res = run_search(P, backends=("triton",), arch="sm_90a", proposer=None, runner=RecordedRunner(
        baselines={"torch": 1.0}), store=store, budget=5, seed=0, progress=False)
    t = TunedTable.from_store(store)
    (e,) = list(t)
    assert e.spec == res.best.spec and e.kernel_ms == pytest.approx(res.best.time_ms["offline"])
    assert e.gpu == "recorded" and e.speedup() == pytest.approx(res.speedup["torch"])
    t.save(tmp_path / "t.json")
    monkeypatch.setenv("CUDAL2_TABLE", str(tmp_path / "t.json"))
    assert len(TunedTable.default()) == 1
    assert len(TunedTable.from_store(tmp_path / "none.db")) == 0 and not (tmp_path / "none.db").exists()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_matmul_and_linear_fall_back_to_torch_on_cpu(dtype):
    ops.set_table(TunedTable([_entry()]))  # an entry exists, but CPU tensors always run torch
    a, b = torch.randn(96, 64, dtype=dtype), torch.randn(64, 80, dtype=dtype)
    torch.testing.assert_close(cudal2.matmul(a, b), torch.matmul(a, b), rtol=0, atol=0)
    x, w, bias = torch.randn(3, 5, 64, dtype=dtype), torch.randn(80, 64, dtype=dtype), torch.randn(80, dtype=dtype)
    torch.testing.assert_close(cudal2.linear(x, w, bias), torch.nn.functional.linear(x, w, bias), rtol=0, atol=0)
    torch.testing.assert_close(cudal2.linear(x, w), torch.nn.functional.linear(x, w), rtol=0, atol=0)
    # batched operands are not GEMM problems of the table: plain torch.matmul
    bt = torch.randn(2, 96, 64, dtype=dtype)
    torch.testing.assert_close(cudal2.matmul(bt, b), torch.matmul(bt, b), rtol=0, atol=0)
    assert ops._kernel_for(a, b, None) is None


def test_custom_ops_trace_under_torch_compile_fullgraph():
    def f(x, w, bias, b):
        h = cudal2.linear(x, w, bias).relu()
        return cudal2.matmul(h.reshape(-1, h.shape[-1]), b)

    x, w, bias, b = torch.randn(4, 6, 64), torch.randn(48, 64), torch.randn(48), torch.randn(48, 32)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    want = torch.matmul(torch.nn.functional.linear(x, w, bias).relu().reshape(-1, 48), b)
    torch.testing.assert_close(compiled(x, w, bias, b), want)
    # the ops appear as nodes of the traced graph (they were not inlined into torch.matmul)
    gm = torch.fx.symbolic_trace(lambda a, b: torch.ops.cudal2.matmul(a, b))
    assert any("cudal2.matmul" in str(n.target) for n in gm.graph.nodes)


def test_custom_ops_backward_matches_torch():
    x = torch.randn(7, 64, requires_grad=True)
    w = torch.randn(48, 64, requires_grad=True)
    bias = torch.randn(48, requires_grad=True)
    b = torch.randn(48, 16, requires_grad=True)
    (cudal2.matmul(cudal2.linear(x, w, bias), b) ** 2).sum().backward()
    got = [t.grad.clone() for t in (x, w, bias, b)]
    for t in (x, w, bias, b):
        t.grad = None
    ((torch.nn.functional.linear(x, w, bias) @ b) ** 2).sum().backward()
    for g, t in zip(got, (x, w, bias, b)):
        torch.testing.assert_close(g, t.grad)


def test_tuned_kernel_runs_the_table_entry():
    """The tuned path (lookup -> render -> compile -> run), under the Triton interpreter on CPU."""
    pytest.importorskip("triton")
    if not hasattr(cudal2.get_backend("triton"), "module"):
        pytest.skip("the Triton backend cannot render yet")
    problem = GemmProblem(m=48, n=40, k=32, layout="NT", epilogue=Epilogue(bias=True))
    ops.set_table(TunedTable([_entry(problem=problem, gpu="")]))
    kernel = ops.tuned_kernel(problem, gpu="any")
    assert kernel is not None
    x, w, bias = torch.randn(48, 32).half(), torch.randn(40, 32).half(), torch.randn(40).half()
    got = kernel(x, w.t(), bias=bias)
    want = torch.nn.functional.linear(x.float(), w.float(), bias.float())
    assert (got.float() - want).norm() / want.norm() < 1e-2
    assert ops.tuned_kernel(GemmProblem(m=48, n=40, k=32), gpu="any") is None  # not in the table


@pytest.mark.gpu
def test_gpu_matmul_uses_tuned_kernel_and_matches_torch():
    problem = GemmProblem(m=512, n=384, k=256)
    entry = _entry(problem=problem, gpu="", block_m=64, block_n=64, block_k=32)
    ops.set_table(TunedTable([entry]))
    a = torch.randn(512, 256, device="cuda", dtype=torch.float16)
    b = torch.randn(256, 384, device="cuda", dtype=torch.float16)
    assert ops._kernel_for(a, b, None) is not None
    got, want = cudal2.matmul(a, b), torch.matmul(a.float(), b.float())
    assert (got.float() - want).norm() / want.norm() < 1e-3
    compiled = torch.compile(lambda a, b: cudal2.matmul(a, b), fullgraph=True)
    assert (compiled(a, b).float() - want).norm() / want.norm() < 1e-3
