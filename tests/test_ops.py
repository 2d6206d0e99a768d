"""TunedTable, cudal2.matmul/linear (torch fallback, tuned path), the custom ops under torch.compile."""

import gc
import json

import pytest
import torch

import cudal2
from cudal2 import Epilogue, GemmProblem, KernelSpec
from cudal2.bench.launch_cost import LaunchCosts, measure_us
from cudal2.codegen import native_launch
from cudal2 import ops
from cudal2.tuner.confirm import Confirm
from cudal2.tuner.loop import run_search
from cudal2.tuner.recorded import RecordedRunner
from cudal2.store.store import Store
from cudal2.store import table as table_mod
from cudal2.store.table import TunedEntry, TunedTable
from cudal2.bench.results import DEFAULT_MODE

P = GemmProblem(m=96, n=80, k=64)


def _entry(problem=P, ms=0.1, torch_ms=0.2, gpu="NVIDIA H100 80GB HBM3", **spec):
    spec = KernelSpec(**{"block_m": 32, "block_n": 32, "block_k": 32, "stages": 2, **spec})
    return TunedEntry(problem=problem, spec=spec, kernel_ms=ms, baselines_ms={"torch": torch_ms}, gpu=gpu)


@pytest.fixture(autouse=True)
def _reset_table(monkeypatch):
    # the launch path is tested with Triton kernels (the interpreter runs them on the CPU); the op's default
    # backends, named so that a host's own $CUDAL2_OP_BACKENDS does not change what the tests see
    monkeypatch.setenv(ops.ENV_OP_BACKENDS, "triton,cute_dsl")
    monkeypatch.setattr(ops, "_launch_costs", LaunchCosts(), raising=False)  # (none measured: no CUDA here)
    ops.set_table(TunedTable())
    yield
    if ops._rebind_front is not None:  # (a test that took calls for captured ones: see _capture_when)
        ops._rebind_front(capture_test=None)
    ops.set_table(None)


def test_the_op_launches_every_backend_with_a_bound_launch_path_unless_told_otherwise(monkeypatch):
    pytest.importorskip("triton")
    problem = GemmProblem(m=48, n=40, k=32, layout="NT")
    ops.set_table(TunedTable([_entry(problem=problem, gpu="")]))  # a Triton kernel that beat torch
    monkeypatch.delenv(ops.ENV_OP_BACKENDS)
    assert ops.op_backends() == {"triton", "cute_dsl"}
    assert ops.tuned_kernel(problem, gpu="any") is not None
    monkeypatch.setenv(ops.ENV_OP_BACKENDS, "cute_dsl")  # a model that keeps Triton's kernels out
    assert ops.tuned_kernel(problem, gpu="any") is None


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
    assert e.spec == res.best.spec and e.kernel_ms == pytest.approx(res.best.time_ms[DEFAULT_MODE])
    assert e.gpu == "recorded" and e.speedup() == pytest.approx(res.speedup["torch"])
    t.save(tmp_path / "t.json")
    monkeypatch.setenv("CUDAL2_TABLE", str(tmp_path / "t.json"))
    assert len(TunedTable.default()) == 1
    assert len(TunedTable.from_store(tmp_path / "none.db")) == 0 and not (tmp_path / "none.db").exists()


def test_the_table_s_leaders_are_the_confirmed_kernels_fastest_first(tmp_path):
    """TunedTable.leaders: every leader the search confirmed on the GPU, as the table would hold it, fastest over
    torch first: the first is the table's entry, the others its runners-up (the table keeps one a backend)."""
    store = Store(tmp_path / "s.db")
    run_search(P, backends=("triton",), arch="sm_90a", proposer=None, runner=RecordedRunner(baselines={"torch": 1.0}),
               store=store, budget=6, seed=0, progress=False, confirm=Confirm(top=3, rounds=2, static_twins=0))
    leaders = TunedTable.leaders(store, P, "recorded")
    (served,) = list(TunedTable.from_store(store))
    assert len(leaders) >= 2 and leaders[0].to_dict() == served.to_dict()
    speedups = [e.speedup() for e in leaders]
    assert speedups == sorted(speedups, reverse=True) and len({e.spec.key() for e in leaders}) == len(leaders)
    assert TunedTable.leaders(store, P, "another GPU") == [] and TunedTable.leaders(tmp_path / "none.db", P, "x") == []


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
    assert ops._launchers[ops._matmul_key(a, b)] is None  # decided once: torch serves CPU tensors


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
    got, want = cudal2.matmul(a, b), torch.matmul(a.float(), b.float())
    # the tuned kernel ran, not torch (the message: each backend's launch cost measured at its first launch)
    assert ops._launchers[ops._matmul_key(a, b)] is not None, ops._launch_costs.items()
    assert (got.float() - want).norm() / want.norm() < 1e-3
    compiled = torch.compile(lambda a, b: cudal2.matmul(a, b), fullgraph=True)
    assert (compiled(a, b).float() - want).norm() / want.norm() < 1e-3


def _capture_when(monkeypatch, capturing: list) -> None:
    """Take the op's calls of CPU tensors for calls made while a CUDA graph captures whenever capturing[0]: its
    Python's capture test (_captured_now) and its C front's (the current stream's, op_front)."""
    monkeypatch.setattr(ops, "_captured_now", lambda t: capturing[0])
    if ops._rebind_front is not None:
        ops._rebind_front(capture_test=lambda t: capturing[0])


# ---- the launch path: one launcher per call key --------------------------------------------------
def _triton_kernel(problem, **spec):
    pytest.importorskip("triton")
    ops.set_table(TunedTable([_entry(problem=problem, gpu="", **spec)]))
    kernel = ops.tuned_kernel(problem, gpu="any")
    assert kernel is not None
    return kernel


def test_launcher_runs_the_bound_kernel_on_views_of_the_operands():
    """The launcher a call key keeps (kernel.bind, no per-call checks) computes F.linear for a 3-D x and
    its weight as they are, under the Triton interpreter; a call with an operand off 16-byte alignment
    returns None, so that torch serves it."""
    problem = GemmProblem(m=2 * 24, n=40, k=32, layout="NT", epilogue=Epilogue(bias=True))
    kernel = _triton_kernel(problem)
    launch = ops._launcher(kernel, problem, (2, 24, 40), torch.device("cpu"))
    x, w, bias = torch.randn(2, 24, 32).half(), torch.randn(40, 32).half(), torch.randn(40).half()
    got = launch(x, w, bias)
    want = torch.nn.functional.linear(x.float(), w.float(), bias.float())
    assert got.shape == (2, 24, 40) and (got.float() - want).norm() / want.norm() < 1e-2
    off = torch.randn(2 * 24 * 32 + 1).half()[1:].view(2, 24, 32)  # 2 bytes past an aligned start
    assert off.data_ptr() % 16 and launch(off, w, bias) is None


def test_bind_refuses_a_shape_a_static_kernel_was_not_built_for():
    problem = GemmProblem(m=48, n=40, k=32, layout="NT")
    kernel = _triton_kernel(problem)
    with pytest.raises(ValueError, match="compiled for its shape"):
        kernel.bind(64, 40, 32, torch.device("cpu"))
    with pytest.warns(RuntimeWarning, match="cannot run it"):  # the op says so once, and torch serves the key
        assert ops._launcher(kernel, GemmProblem(m=64, n=40, k=32, layout="NT"), (64, 40), torch.device("cpu")) is None


def test_a_call_key_is_decided_once_and_set_table_forgets_it():
    a, b = torch.randn(96, 64), torch.randn(64, 80)
    cudal2.matmul(a, b)
    key = ops._matmul_key(a, b)
    assert key in ops._launchers and ops._launchers[key] is None
    assert ops._matmul_key(a, b.t().contiguous().t()) != key  # another layout is another key
    ops.set_table(TunedTable())
    assert key not in ops._launchers


def test_a_weight_no_entry_has_runs_torch_without_a_call_key_after_its_first_call(monkeypatch):
    x, w, w2 = torch.randn(6, 64), torch.randn(80, 64), torch.randn(96, 64)
    ops.set_table(TunedTable([_entry(problem=GemmProblem(m=6, n=96, k=64, layout="NT"), gpu="")]))
    cudal2.linear(x, w)  # first call of this shape pair: bound once (where an untuned problem is recorded)
    assert ops._linear_key(x, w, None) in ops._launchers

    def no_key(*args):
        raise AssertionError("the call key was built")

    key_of = ops._linear_key
    monkeypatch.setattr(ops, "_linear_key", no_key)
    assert torch.equal(cudal2.linear(x, w), torch.nn.functional.linear(x, w))  # no entry for (80, 64): torch
    with pytest.raises(AssertionError, match="call key was built"):
        cudal2.linear(x, w2)  # (96, 64) has an entry: the full path decides
    monkeypatch.setattr(ops, "_linear_key", key_of)
    ops.set_table(TunedTable())  # a new table forgets what the fast path knew
    assert not ops._plans["linear"] and not ops._b_shapes


def test_route_linears_sends_only_layers_the_table_can_serve_through_the_op():
    model = torch.nn.Sequential(torch.nn.Linear(64, 96, bias=False), torch.nn.Linear(96, 80, bias=False))
    x = torch.randn(6, 64)
    want = model(x)
    served = GemmProblem(m=6, n=96, k=64, layout="NT")  # layer 0's weight: (96, 64)
    ops.set_table(TunedTable([_entry(problem=served, gpu=""),  # a kernel that beat torch
                              _entry(problem=GemmProblem(m=6, n=80, k=96, layout="NT"), ms=0.3, gpu="")]))  # lost
    assert cudal2.route_linears(model) == ["0"]  # layer 1's only entry lost to torch: nn.Linear's own forward
    assert type(model[0]) is ops.RoutedLinear and type(model[1]) is torch.nn.Linear
    assert cudal2.route_linears(model) == []  # routed once
    model[0]._cudal2_declined = frozenset({6 * 64})  # as cudal2.check_routes leaves a count that lost in the model
    assert torch.equal(model(x), want)  # CPU tensors: the op runs torch
    cudal2.route_linears(model)  # again (the table may have changed): what was declined is measured anew
    assert model[0]._cudal2_declined == frozenset()
    # a compiled model honours a decline too: the traced call is F.linear's
    model[0]._cudal2_declined = frozenset({6 * 64})
    assert torch.equal(torch.compile(model, fullgraph=True, backend="aot_eager")(x), want)
    model[0]._cudal2_declined = frozenset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")  # a routed layer traces
    assert torch.equal(compiled(x), want)
    assert cudal2.route_linears(model, enable=False) == ["0"] and type(model[0]) is torch.nn.Linear
    ops.set_table(TunedTable())
    assert cudal2.route_linears(model) == []  # nothing to serve: nothing routed


def test_route_linears_leaves_subclasses_of_linear_alone():
    """A subclass's forward may do more than F.linear (an adapter, a quantized weight): not routed."""
    class Scaled(torch.nn.Linear):
        def forward(self, x):
            return 2 * super().forward(x)

    model = torch.nn.Sequential(Scaled(64, 96, bias=False), torch.nn.Linear(64, 96, bias=False))
    ops.set_table(TunedTable([_entry(problem=GemmProblem(m=6, n=96, k=64, layout="NT"), gpu="")]))
    assert cudal2.route_linears(model) == ["1"] and type(model[0]) is Scaled
    x = torch.randn(6, 64)
    assert torch.equal(model[0](x), 2 * torch.nn.functional.linear(x, model[0].weight))


def test_a_compiled_model_pays_no_python_guard_for_its_routed_layers():
    """torch.compile guards a forward set on a module instance, and a module object two modules' globals
    both reach, with a Python guard function that runs on every call of the compiled model (9.5 us for
    three routed layers on a 2-core CPU); a routed layer is a class instead, and the op binds F.linear."""
    import logging

    class Logged(logging.Handler):
        def emit(self, record):
            guards.append(record.getMessage())

    model = torch.nn.Sequential(torch.nn.Linear(64, 96, bias=False), torch.nn.Linear(96, 64, bias=False))
    ops.set_table(TunedTable([_entry(problem=GemmProblem(m=6, n=96, k=64, layout="NT"), gpu=""),
                              _entry(problem=GemmProblem(m=6, n=64, k=96, layout="NT"), gpu="")]))
    assert cudal2.route_linears(model) == ["0", "1"]
    guards, handler = [], Logged()
    logger = logging.getLogger("torch._dynamo.guards.__guards")
    torch._logging.set_logs(guards=True)
    logger.addHandler(handler)
    try:
        torch._dynamo.reset()
        x = torch.randn(6, 64)
        assert torch.equal(torch.compile(model, fullgraph=True, backend="eager")(x), model[1](model[0](x)))
    finally:
        logger.removeHandler(handler)
        torch._logging.set_logs()
    assert guards and not any("def guard" in g for g in guards)


def test_a_kernel_saving_less_than_the_ops_host_cost_leaves_the_call_to_torch(monkeypatch):
    pytest.importorskip("triton")
    small = GemmProblem(m=16, n=48, k=32, layout="NT")
    saving_ms = ops.EAGER_MIN_SAVING_US / 2e3  # 1.5x faster, but half the op's host cost saved
    ops.set_table(TunedTable([_entry(problem=small, ms=saving_ms, torch_ms=2 * saving_ms, gpu="")]))
    assert ops.tuned_kernel(small, gpu="any") is None
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    assert ops._bind(("k",), small, (16, 48), torch.device("cpu")) is None
    assert ops.untuned_problems() == []  # tuned: a win too small to use, not a shape to search again
    monkeypatch.setattr(ops, "EAGER_MIN_SAVING_US", 0.0)  # a model run only inside CUDA graphs
    ops.set_table(ops.tuned_table())
    assert ops.tuned_kernel(small, gpu="any") is not None


def test_a_routed_layer_sends_fewer_rows_than_any_served_kernel_straight_to_torch(monkeypatch):
    model = torch.nn.Linear(64, 96, bias=False)
    ops.set_table(TunedTable([_entry(problem=GemmProblem(m=32, n=96, k=64, layout="NT"), gpu=""),
                              _entry(problem=GemmProblem(m=8, n=96, k=64, layout="NT"), ms=0.3, gpu="")]))  # lost
    assert cudal2.route_linears(model) == [""]
    calls = []
    monkeypatch.setattr(ops, "_run_linear", lambda *a: calls.append(a[0].shape) or torch.nn.functional.linear(*a))
    x = torch.randn(2, 8, 64)  # 16 rows: fewer than the 32 of the one served entry
    with torch.no_grad():  # (inference: with gradients the op's autograd path decides)
        assert torch.equal(model(x), torch.nn.functional.linear(x, model.weight))
        assert calls == []  # the op's Python never ran
        model(torch.randn(4, 8, 64))  # 32 rows: the op decides
    assert calls == [(4, 8, 64)]
    ops.set_table(TunedTable([_entry(problem=GemmProblem(m=8, n=96, k=64, layout="NT"), gpu="")]))
    assert cudal2.route_linears(model) == [] and model._cudal2_min_numel == 8 * 64  # the gate follows the table
    assert cudal2.route_linears(model, enable=False) == [""] and "_cudal2_min_numel" not in model.__dict__


def test_a_call_captured_in_a_cuda_graph_takes_a_kernel_too_small_a_win_for_eager_calls(cpu_as_gpu, monkeypatch):
    """While a CUDA graph captures, the op's host time is paid once, so a kernel saving less than
    EAGER_MIN_SAVING_US serves there (GRAPH_MIN_SAVING_US). It is built by the call key's first eager
    call, never during the capture; a captured call whose kernel was not built runs torch."""
    problem = GemmProblem(m=24, n=48, k=64, layout="NT")
    saving_ms = ops.EAGER_MIN_SAVING_US / 4e3  # a quarter of what an eager call must save
    ops.set_table(TunedTable([_entry(problem=problem, ms=saving_ms, torch_ms=2 * saving_ms, gpu="")]))
    x, w = torch.randn(24, 64).half(), torch.randn(48, 64).half()
    want = torch.nn.functional.linear(x.float(), w.float())
    key = ops._linear_key(x, w, None)
    capturing = [False]
    _capture_when(monkeypatch, capturing)

    capturing[0] = True  # captured before any eager call: nothing was built, so torch, and nothing kept
    assert torch.equal(cudal2.linear(x, w), torch.nn.functional.linear(x, w)) and key not in ops._graph_launchers
    capturing[0] = False
    assert torch.equal(cudal2.linear(x, w), torch.nn.functional.linear(x, w))  # eager: torch ...
    assert ops._launchers[key] is None and ops._graph_runs[(problem.key(), x.device)] is not None  # ... built
    assert ops.untuned_problems() == []
    capturing[0] = True
    got = cudal2.linear(x, w)
    assert ops._graph_launchers[key] is not None and (got.float() - want).norm() / want.norm() < 1e-2

    ops.set_table(TunedTable([_entry(problem=problem, ms=2 * saving_ms, torch_ms=2 * saving_ms, gpu="")]))  # no win
    capturing[0] = False
    cudal2.linear(x, w)
    capturing[0] = True
    assert torch.equal(cudal2.linear(x, w), torch.nn.functional.linear(x, w)) and not ops._graph_runs


@pytest.mark.parametrize("op", ["linear", "matmul"])
def test_an_eager_call_of_a_shape_served_only_in_graphs_runs_torch_without_the_full_path(cpu_as_gpu, monkeypatch, op):
    """Once its first eager call built the graph path, an eager call of a shape a kernel serves only while
    a CUDA graph captures goes to torch after the capture test, without entering _run_linear / _run_matmul;
    while a capture is underway it takes the full path (and its kernel)."""
    problem = GemmProblem(m=24, n=48, k=64, layout="NT")
    saving_ms = ops.EAGER_MIN_SAVING_US / 4e3  # too small a win for eager calls
    ops.set_table(TunedTable([_entry(problem=problem, ms=saving_ms, torch_ms=2 * saving_ms, gpu="")]))
    x, w = torch.randn(24, 64).half(), torch.randn(48, 64).half()
    call, args, full = ((cudal2.linear, (x, w), "_run_linear") if op == "linear" else
                        (cudal2.matmul, (x, w.t()), "_run_matmul"))
    capturing = [False]
    _capture_when(monkeypatch, capturing)
    with torch.no_grad():
        call(*args)  # the first eager call binds (and builds the graph path)
        entered = []
        run = getattr(ops, full)
        monkeypatch.setattr(ops, full, lambda *a: entered.append(1) or run(*a))
        want = torch.nn.functional.linear(x.float(), w.float())
        got = call(*args)
        assert entered == [] and torch.equal(got, torch.matmul(x, w.t()))  # torch, past the full path
        capturing[0] = True
        got = call(*args)
        assert entered == [1] and (got.float() - want).norm() / want.norm() < 1e-2


@pytest.mark.parametrize("front", ["cudal2.linear", "Python front"])
def test_a_weight_served_only_in_graphs_runs_torch_unless_captured_once_each_count_is_built(cpu_as_gpu, monkeypatch,
                                                                                            front):
    """A weight shape served only while a CUDA graph captures, at 24 and 8 rows: kept with its plan until the
    first eager call of each served count has built its kernel, then as _UNLESS_CAPTURED, whose eager calls
    of any count (40 rows, served nowhere, never seen) run torch without the op's eager path, through the C
    front and the Python front alike; a captured call still takes the eager path and the kernel."""
    small = ops.EAGER_MIN_SAVING_US / 4e3  # too small a win for eager calls
    ops.set_table(TunedTable([_entry(problem=GemmProblem(m=m, n=48, k=64, layout="NT"), ms=small, torch_ms=2 * small,
                                     gpu="") for m in (24, 8)]))
    linear = cudal2.linear if front == "cudal2.linear" else ops._python_linear
    w = torch.randn(48, 64).half()
    x24, x8, x40 = (torch.randn(m, 64).half() for m in (24, 8, 40))
    capturing = [False]
    _capture_when(monkeypatch, capturing)
    with torch.no_grad():
        linear(x24, w)
        assert isinstance(ops._torch_weights[id(w)], ops._Plan)  # the 8-row kernel is not built yet
        linear(x8, w)
        assert ops._torch_weights[id(w)] is ops._UNLESS_CAPTURED
        entered = []
        run = ops._run_linear
        monkeypatch.setattr(ops, "_run_linear", lambda *a: entered.append(a[0].shape[0]) or run(*a))
        for x in (x40, x24, x8):
            assert torch.equal(linear(x, w), torch.nn.functional.linear(x, w))
        assert entered == []
        capturing[0] = True
        got = linear(x24, w)
    assert entered == [24] and ops._graph_launchers[ops._linear_key(x24, w, None)] is not None
    want = torch.nn.functional.linear(x24.float(), w.float())
    assert (got.float() - want).norm() / want.norm() < 1e-2


def test_the_graph_only_fast_path_never_takes_a_call_an_eager_entry_shares_counts_with(cpu_as_gpu, monkeypatch):
    """A 48 x 64 weight served only in graphs at 24 rows and a 64 x 48 one served eagerly at 32 rows share
    their element counts (3072 and 1536): the eager-served pair is not sent to torch by the graph-only fast
    path, so the full path decides its calls."""
    graph_only = GemmProblem(m=24, n=48, k=64, layout="NT")
    eager = GemmProblem(m=32, n=64, k=48, layout="NT")
    small = ops.EAGER_MIN_SAVING_US / 4e3
    ops.set_table(TunedTable([_entry(problem=graph_only, ms=small, torch_ms=2 * small, gpu=""),
                              _entry(problem=eager, ms=0.1, torch_ms=0.2, gpu="")]))
    monkeypatch.setattr(ops, "_captured_now", lambda t: False)
    x, w = torch.randn(24, 64).half(), torch.randn(48, 64).half()
    assert (x.numel(), w.numel()) == (32 * 48, 64 * 48)
    with torch.no_grad():
        cudal2.linear(x, w)
    assert not ops._graph_only_counts["linear"].get(w.numel())


def test_a_routed_layer_takes_the_graph_path_only_while_capturing(monkeypatch):
    model = torch.nn.Linear(64, 96, bias=False)
    saving_ms = ops.EAGER_MIN_SAVING_US / 4e3
    ops.set_table(TunedTable([_entry(problem=GemmProblem(m=8, n=96, k=64, layout="NT"), ms=saving_ms,
                                     torch_ms=2 * saving_ms, gpu="")]))
    assert cudal2.route_linears(model) == []  # served in graphs only: routed only where asked
    assert cudal2.route_linears(model, graphs=True) == [""]
    assert model._cudal2_min_numel == float("inf") and model._cudal2_graph_numel == 8 * 64
    calls = []
    monkeypatch.setattr(ops, "_run_linear", lambda *a: calls.append(a[0].shape) or torch.nn.functional.linear(*a))
    capturing = [False]
    monkeypatch.setattr(ops, "_captured_now", lambda t: capturing.append(1) or capturing[0])
    with torch.no_grad():
        model(torch.randn(4, 64))  # fewer rows than served in graphs: not even the capture test
        assert calls == [] and capturing == [False]
        model(torch.randn(8, 64))  # eager: F.linear after the capture test
        assert calls == [] and len(capturing) == 2
        capturing[0] = True
        model(torch.randn(8, 64))
    assert calls == [(8, 64)]
    assert cudal2.route_linears(model) == [""] and type(model) is torch.nn.Linear  # graphs=False: put back
    assert "_cudal2_graph_numel" not in model.__dict__


@pytest.mark.parametrize("content, says", [
    (None, "does not exist"), ("{not json", "not valid JSON"), ('{"format": "other"}', "not a cudal2 tuned table"),
    ('{"format": "cudal2.tuned_table", "version": 1, "entries": [{"spec": {}}]}', "malformed entry"),
])
def test_a_missing_or_corrupt_table_warns_once_then_torch_serves(tmp_path, monkeypatch, content, says):
    path = tmp_path / "table.json"
    if content is not None:
        path.write_text(content)
    monkeypatch.setenv("CUDAL2_TABLE", str(path))
    ops.set_table(None)
    with pytest.warns(RuntimeWarning, match=says) as caught:
        first, again = ops.tuned_table(), ops.tuned_table()  # what each call's lookup does
    assert len([w for w in caught if "cudal2" in str(w.message)]) == 1
    assert first is again and len(first) == 0  # an empty table: torch serves every call
    assert str(caught[0].message).count("\n") == 0


# ---- tracing: the decision is taken with the shapes torch.compile sees ----------------------------------
def test_the_table_decides_while_tracing_fake_cuda_tensors(monkeypatch):
    from torch._subclasses.fake_tensor import FakeTensorMode

    served = GemmProblem(m=16, n=256, k=128, layout="NT")
    ops.set_table(TunedTable([_entry(problem=served, gpu=""), _entry(problem=GemmProblem(m=8, n=256, k=128), gpu="")]))
    monkeypatch.setattr(ops, "_visible_gpus", lambda: [("cuda", 0, "NVIDIA H100 80GB HBM3")])
    with FakeTensorMode():  # (a CPU build of torch fakes CUDA tensors, but runs no op on them)
        def cuda(*shape, dtype=torch.float16):
            return torch.empty(*shape, device="cuda", dtype=dtype)

        x, w = cuda(2, 8, 128), cuda(256, 128)
        assert ops._served_when_traced(ops._linear_class, x, w, None)
        assert not ops._served_when_traced(ops._linear_class, cuda(1, 8, 128), w, None)  # tuned NN, not NT
        assert not ops._served_when_traced(ops._linear_class, x, w, cuda(256))  # with a bias: another problem
        assert not ops._served_when_traced(ops._linear_class, cuda(2, 8, 128, dtype=torch.float32),
                                           cuda(256, 128, dtype=torch.float32), None)


def test_a_traced_graph_keeps_torch_where_the_kernel_saves_less_than_the_op_costs(monkeypatch):
    from torch._subclasses.fake_tensor import FakeTensorMode

    small, big = GemmProblem(m=16, n=256, k=128, layout="NT"), GemmProblem(m=32, n=256, k=128, layout="NT")
    saving_ms = ops.TRACED_MIN_SAVING_US / 1e3
    between_ms = (ops.EAGER_MIN_SAVING_US + ops.TRACED_MIN_SAVING_US) / 2e3  # enough eager, not traced
    ops.set_table(TunedTable([_entry(problem=small, ms=0.1, torch_ms=0.1 + between_ms, gpu=""),
                              _entry(problem=big, ms=0.1, torch_ms=0.1 + 2 * saving_ms, gpu="")]))
    monkeypatch.setattr(ops, "_visible_gpus", lambda: [("cuda", 0, "NVIDIA H100 80GB HBM3")])
    assert ops._op_entry(small, "NVIDIA H100 80GB HBM3") is not None  # eager serves both
    with FakeTensorMode():
        w = torch.empty(256, 128, device="cuda", dtype=torch.float16)
        assert not ops._served_when_traced(ops._linear_class, torch.empty(16, 128, device="cuda",
                                                                           dtype=torch.float16), w, None)
        assert ops._served_when_traced(ops._linear_class, torch.empty(32, 128, device="cuda",
                                                                       dtype=torch.float16), w, None)


def _graph_of(f, *args):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    out = torch.compile(f, backend=backend, fullgraph=True)(*args)
    return out, "\n".join(str(n.target) for g in graphs for n in g.graph.nodes)


@pytest.fixture
def cpu_as_gpu(monkeypatch):
    """CPU calls classed as an H100's, so that the table's entries (Triton kernels, run by the
    interpreter) serve them: the traced decision and the launch path run end to end on the CPU."""
    pytest.importorskip("triton")
    problem_of = ops._problem_of
    monkeypatch.setattr(ops, "_problem_of", lambda call: None if call is None else problem_of(
        call[:6] + ("cuda", call[7])))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(ops, "_visible_gpus", lambda: [("cpu", None, "NVIDIA H100 80GB HBM3")])


@pytest.mark.parametrize("served", [False, True])
def test_compiled_graph_holds_the_op_only_where_the_table_serves(cpu_as_gpu, served):
    problem = GemmProblem(m=4 * 6, n=48, k=64, layout="NT", epilogue=Epilogue(bias=True))
    ops.set_table(TunedTable([_entry(problem=problem if served else P, gpu="")]))
    x, w, bias = torch.randn(4, 6, 64).half(), torch.randn(48, 64).half(), torch.randn(48).half()
    out, targets = _graph_of(lambda x, w, b: cudal2.linear(x, w, b), x, w, bias)
    want = torch.nn.functional.linear(x.float(), w.float(), bias.float())
    assert (out.float() - want).norm() / want.norm() < 1e-2
    assert ("cudal2.linear" in targets) is served
    assert (ops._launchers.get(ops._linear_key(x, w, bias)) is not None) is served  # the tuned kernel ran


def test_dynamic_shapes_trace_a_decision_per_extent(cpu_as_gpu):
    """With dynamic shapes the row count is a symbol: the traced decision guards on its value, so a
    served and an unserved token count each get the right graph, and both compute F.linear."""
    ops.set_table(TunedTable([_entry(problem=GemmProblem(m=5, n=48, k=64, layout="NT"), gpu="")]))
    graphs = []

    def backend(gm, example_inputs):
        graphs.append("cudal2.linear" in "\n".join(str(n.target) for n in gm.graph.nodes))
        return gm.forward

    f = torch.compile(lambda x, w: cudal2.linear(x, w), backend=backend, fullgraph=True, dynamic=True)
    w = torch.randn(48, 64).half()
    for tokens in (3, 5, 7, 5):
        x = torch.randn(tokens, 64).half()
        want = torch.nn.functional.linear(x.float(), w.float())
        assert (f(x, w).float() - want).norm() / want.norm() < 1e-2
    assert graphs[:2] == [False, True] and not any(graphs[2:])  # 5 served; 3 and 7 by F.linear


def test_compiled_training_step_runs_the_ops_backward(cpu_as_gpu):
    problem = GemmProblem(m=5, n=48, k=64, layout="NT", epilogue=Epilogue(bias=True))
    ops.set_table(TunedTable([_entry(problem=problem, gpu="")]))
    x = torch.randn(5, 64).half().requires_grad_()
    w, bias = torch.randn(48, 64).half().requires_grad_(), torch.randn(48).half().requires_grad_()
    step = torch.compile(lambda x, w, b: cudal2.linear(x, w, b).float().square().sum(), backend="aot_eager",
                         fullgraph=True)
    step(x, w, bias).backward()
    got = [t.grad.clone() for t in (x, w, bias)]
    for t in (x, w, bias):
        t.grad = None
    torch.nn.functional.linear(x, w, bias).float().square().sum().backward()
    for g, t in zip(got, (x, w, bias)):
        assert (g.float() - t.grad.float()).norm() / t.grad.float().norm() < 2e-2


# ---- shapes never tuned -----------------------------------------------------------------------------
def test_untuned_shapes_are_remembered_and_tune_untuned_measures_them(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    ops._untuned.clear()
    problem = GemmProblem(m=6, n=256, k=64, layout="NT")
    assert ops._bind(("test", 1), problem, (6, 256), torch.device("cuda")) is None  # no entry: torch, remembered
    assert cudal2.untuned_problems() == [problem]
    runner = RecordedRunner()
    try:
        table = cudal2.tune_untuned(budget=1, store=tmp_path / "s.db", runner=runner, progress=False)
        assert {e.problem.label() for e in table} == {problem.label()}
        assert len(runner.calls) >= 1
    finally:
        ops._untuned.clear()
        cudal2.set_table(None)


@pytest.mark.gpu
@pytest.mark.parametrize("swap_ab", [False, True])
def test_gpu_linear_runs_a_cute_dsl_kernel_eager_compiled_and_in_a_graph(swap_ab):
    """The CuTe DSL launch path (TVM-FFI where installed) through cudal2.linear: eager, under
    torch.compile (the traced graph holds the op) and captured in a CUDA graph, each against fp32."""
    pytest.importorskip("cutlass")
    problem = GemmProblem(m=2 * 64, n=384, k=256, layout="NT", epilogue=Epilogue(bias=True))
    spec = dict(backend="cute_dsl", arch="sm_90a", num_warps=12, load_path="tma", warp_specialization="cooperative",
                persistent=True, block_m=128, block_n=128, block_k=64, stages=4, epilogue_path="tma_store",
                shape_specialization="dynamic", swap_ab=swap_ab)
    ops.set_table(TunedTable([_entry(problem=problem, gpu="", **spec)]))
    torch._dynamo.reset()  # graphs traced before keep the kernel they were traced with
    x = torch.randn(2, 64, 256, device="cuda", dtype=torch.float16)
    w = torch.randn(384, 256, device="cuda", dtype=torch.float16) / 16
    bias = torch.randn(384, device="cuda", dtype=torch.float16)
    want = torch.nn.functional.linear(x.float(), w.float(), bias.float())

    def close(got, want=want):
        return got.shape == want.shape and float((got.float() - want).norm() / want.norm()) < 1e-3

    def replays_correctly(linear):
        """Capture linear(x, w, bias) in a CUDA graph, change x, replay: the output follows x."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = linear(x, w, bias)
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        return close(static_out, torch.nn.functional.linear(x.float(), w.float(), bias.float()))

    with torch.no_grad():
        assert close(cudal2.linear(x, w, bias))
        assert ops._launchers[ops._linear_key(x, w, bias)] is not None  # the kernel ran, not torch
        out, targets = _graph_of(lambda x, w, b: cudal2.linear(x, w, b), x, w, bias)
        assert close(out) and "cudal2.linear" in targets
        if native_launch.library() is not None:  # the C++ launch path of compiled graphs
            assert "cudal2.linear_slot" in targets
        compiled = torch.compile(lambda x, w, b: cudal2.linear(x, w, b), fullgraph=True)  # inductor
        assert close(compiled(x, w, bias))
        assert replays_correctly(compiled)  # the compiled graph's launches, captured
        assert replays_correctly(cudal2.linear)


@pytest.mark.gpu
def test_gpu_a_kernel_too_small_a_win_for_eager_calls_serves_a_captured_graph(monkeypatch):
    """A CuTe DSL kernel saving 1 us a call, less than its launch cost (set to 1000 us here; measured, a
    CuTe DSL launch costs less than torch's, and any win is then served eagerly): eager calls (and a
    routed layer's) run torch; captured in a CUDA graph after one eager call (or route_linears), the
    graph launches the kernel, and its replays follow the input."""
    pytest.importorskip("cutlass")
    problem = GemmProblem(m=64, n=384, k=256, layout="NT")
    spec = dict(backend="cute_dsl", arch="sm_90a", num_warps=12, load_path="tma", warp_specialization="cooperative",
                persistent=True, block_m=128, block_n=128, block_k=64, stages=4, epilogue_path="tma_store",
                shape_specialization="dynamic")
    clock = [0.0]
    costs = LaunchCosts(clock=lambda: clock[0], sync=lambda: None)
    costs.measure("cute_dsl", lambda: clock.__setitem__(0, clock[0] + 1e-3), lambda: None)  # 1000 us a launch
    monkeypatch.setattr(ops, "_launch_costs", costs)
    ops.set_table(TunedTable([_entry(problem=problem, ms=0.010, torch_ms=0.011, gpu="", **spec)]))
    layer = torch.nn.Linear(256, 384, bias=False, device="cuda", dtype=torch.float16)
    x = torch.randn(64, 256, device="cuda", dtype=torch.float16)
    w = layer.weight.detach()
    assert cudal2.route_linears(layer, graphs=True) == [""]
    assert ops._graph_runs[(problem.key(), w.device)] is not None  # built by route_linears
    with torch.no_grad():
        for call in (lambda: cudal2.linear(x, w), lambda: layer(x)):
            assert torch.equal(call(), torch.nn.functional.linear(x, w))  # eager: torch's
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = call()
            assert ops._graph_launchers[ops._linear_key(x, w, None)] is not None  # the kernel was captured
            x.copy_(torch.randn_like(x))
            graph.replay()
            torch.cuda.synchronize()
            want = torch.nn.functional.linear(x.float(), w.float())
            assert float((out.float() - want).norm() / want.norm()) < 1e-3


def test_whether_a_capture_is_underway_is_never_asked_of_the_runtime_for_cpu_tensors(monkeypatch):
    def runtime():
        raise AssertionError("asked the CUDA runtime")

    monkeypatch.setattr(ops, "_capturing", runtime)
    assert ops._captured_now(torch.randn(2, 2)) is False


def test_a_faster_kernel_the_op_cannot_launch_never_hides_one_it_can(monkeypatch):
    """The table keeps the best entry per backend: where a Triton kernel won but the op launches only
    CuTe DSL kernels, the DSL kernel that also beat torch is served (before, the shape ran torch)."""
    gpu = "NVIDIA H200"
    from cudal2.proposers.catalog import catalog

    dsl = TunedEntry(problem=P, spec=catalog("cute_dsl")[0], kernel_ms=0.1, baselines_ms={"torch": 0.2}, gpu=gpu)
    t = TunedTable([_entry(ms=0.05, gpu=gpu), dsl])
    assert len(t) == 2 and t.lookup(P, gpu=gpu).spec.backend == "triton"
    ops.set_table(t)
    monkeypatch.setenv(ops.ENV_OP_BACKENDS, "cute_dsl")
    entry = ops._op_entry(P, gpu, ops.GRAPH_MIN_SAVING_US)
    assert entry is not None and entry.spec.backend == "cute_dsl"
    monkeypatch.setenv(ops.ENV_OP_BACKENDS, "")
    assert ops._op_entry(P, gpu, ops.GRAPH_MIN_SAVING_US) is None


def test_every_winner_of_twenty_searches_in_one_store_is_servable(tmp_path, monkeypatch):
    """Twenty shapes searched into one store (recorded runner, both Hopper backends, torch twice the
    recorded model's time of a 128x256 tile): the op finds a kernel for every shape whose winner beat torch,
    in each backend it launches, from the table it serves by default."""
    store = Store(tmp_path / "s.db")
    shapes = [GemmProblem(m=m, n=n, k=4096, layout="NT") for m in (1, 16, 128, 1024) for n in (1024, 4096, 6144, 14336, 28672)]

    def torch_ms(problem):
        from cudal2.tuner.recorded import synthetic_ms
        return {"torch": 2.0 * synthetic_ms(problem, KernelSpec(block_m=128, block_n=256, block_k=64, stages=4, num_warps=8))}

    for p in shapes:
        run_search(p, backends=("triton", "cute_dsl"), arch="sm_90a", proposer=cudal2.proposers.get_proposer(
            "rules", backends=("triton", "cute_dsl"), arch="sm_90a"), runner=RecordedRunner(baselines=torch_ms),
            store=store, budget=6, seed=0, progress=False)
    table = TunedTable.for_serving(store)
    ops.set_table(table)
    gpu = next(iter(table)).gpu
    beat = {p.key(): [e for e in table if e.problem == p and e.speedup("torch") > 1] for p in shapes}
    assert sum(map(bool, beat.values())) >= 15  # most searches found a kernel faster than torch
    # the table keeps each backend's best: shapes where both backends beat torch hold both
    assert sum(len({e.spec.backend for e in entries}) == 2 for entries in beat.values()) >= 3
    for backends in ("triton,cute_dsl", "cute_dsl", "triton"):
        monkeypatch.setenv(ops.ENV_OP_BACKENDS, backends)
        for p in shapes:
            can = [e for e in beat[p.key()] if e.spec.backend in backends.split(",")]
            served = ops._op_entry(p, gpu, ops.GRAPH_MIN_SAVING_US)
            assert (served is not None) == bool(can), (backends, p.label())
            if can:
                assert served.speedup("torch") == max(e.speedup("torch") for e in can)


@pytest.mark.parametrize("store", ["not a database", "a folder"])
def test_a_default_store_that_cannot_be_read_is_one_warning_and_torchs_result(tmp_path, monkeypatch, store):
    path = tmp_path / "store.db"
    if store == "a folder":
        path.mkdir()
    else:
        path.write_text("not a database")
    monkeypatch.setenv("CUDAL2_STORE", str(path))
    ops.set_table(None)
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    with pytest.warns(RuntimeWarning, match="cudal2: store .* run torch until") as caught:
        got = cudal2.matmul(a, b)
    assert len(caught) == 1 and "\n" not in str(caught[0].message)
    assert torch.equal(got, torch.matmul(a, b))


@pytest.mark.parametrize("content", [
    lambda: {"format": table_mod.FORMAT, "version": table_mod.VERSION, "entries": [
        {**_entry().to_dict(), "baselines_ms": [0.2]}]},  # a list where a mapping belongs
    None,  # nested too deeply
])
def test_a_malformed_table_file_is_one_line(tmp_path, content):
    path = tmp_path / "t.json"
    if content is None:
        path.write_text('{"a":' * 100000 + "1" + "}" * 100000)
    else:
        path.write_text(json.dumps(content()))
    with pytest.raises(ValueError, match=r"tuned table .* (malformed entry|nested too deeply)") as e:
        TunedTable.load(path)
    assert "\n" not in str(e.value)


def test_matmul_takes_out_as_torch_does():
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    out = torch.empty(0)
    assert cudal2.matmul(a, b, out=out) is out and torch.equal(out, torch.matmul(a, b))
    with pytest.raises(RuntimeError):  # torch refuses an out of another dtype; so does the op
        cudal2.matmul(a, b, out=torch.empty(4, 3, dtype=torch.int64))


def test_linear_with_a_1d_weight_is_f_linear_forward_and_backward():
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, requires_grad=True)
    y = cudal2.linear(x, w)
    assert torch.equal(y, torch.nn.functional.linear(x, w))
    y.sum().backward()
    assert w.grad.shape == (8,) and x.grad.shape == (4, 8)


# ---- which backend serves which mode: launch costs measured per backend ----------------------------
GPU = "NVIDIA H100 80GB HBM3"


def _fake_costs(monkeypatch, clock):
    """A LaunchCosts whose clock is `clock` (a one-item list of seconds) and which measures CPU launches."""
    costs = LaunchCosts(clock=lambda: clock[0], sync=lambda: None, measurable=lambda device: True, calls=4, rounds=2)
    monkeypatch.setattr(ops, "_launch_costs", costs, raising=False)
    return costs


class _ClockedKernel:
    """A kernel of `backend` whose launch costs launch_us[backend] of the fake clock per kernel it launches
    (launches: a split-K kernel's reduction is a second one); it computes F.linear."""

    def __init__(self, backend, clock, launch_us, ran, launches=1):
        self.backend, self.clock, self.launch_us, self.ran, self.launches = backend, clock, launch_us, ran, launches

    def bind(self, m, n, k, device):
        def run(a, b, d, bias):
            self.clock[0] += self.launch_us[self.backend] * self.launches * 1e-6
            self.ran.append(self.backend)
            d.view(m, n).copy_(torch.nn.functional.linear(a.reshape(m, k), b.reshape(n, k), bias))
            run.launch_path = f"x{self.launches}" if self.launches > 1 else ""  # (as Triton's: after a call)
        run.backend, run.launch_path = self.backend, None
        return run


@pytest.mark.parametrize("two_launches_first", [True, False])
def test_each_launch_path_of_a_backend_has_its_own_cost(cpu_as_gpu, monkeypatch, two_launches_first):
    """Two Triton kernels that each save 6 us a call: one launches one kernel (4 us beyond torch's call),
    the other two (a split-K reduction: 8 us). The first serves eager calls and the second does not,
    whichever is bound first: a backend's first kernel does not set the cost of its others."""
    clock, ran = [0.0], []
    _fake_costs(monkeypatch, clock)
    one, two = GemmProblem(m=8, n=48, k=64, layout="NT"), GemmProblem(m=16, n=48, k=64, layout="NT")
    monkeypatch.setattr(ops, "_compiled", lambda entry, problem: _ClockedKernel(
        "triton", clock, {"triton": 4.0}, ran, launches=2 if problem == two else 1))
    monkeypatch.delenv(ops.ENV_OP_BACKENDS)
    ops.set_table(TunedTable([_entry(problem=p, ms=0.050, torch_ms=0.056, gpu="") for p in (one, two)]))
    w = torch.randn(48, 64).half()
    order = [(16, False), (8, True)] if two_launches_first else [(8, True), (16, False)]
    with torch.no_grad():
        for rows, served in order:
            x = torch.randn(rows, 64).half()
            torch.testing.assert_close(cudal2.linear(x, w), torch.nn.functional.linear(x, w))
            assert (ops._launchers[ops._linear_key(x, w, None)] is not None) == served, rows
    assert ops.launch_costs() == pytest.approx({"triton": 4.0, "triton x2": 8.0})


def test_a_kernel_declined_for_its_launch_path_leaves_the_fast_path(cpu_as_gpu, monkeypatch):
    """A split-K Triton kernel saves 6 us a call and its two launches cost 8: its first eager call declines it.
    From its next call on, its calls run torch without building a call key (before, the plans still took the
    count for an eager kernel's, as the backend's plain path was never measured: every call built its key to
    find torch), and a capture still may take the kernel (a graph-only count)."""
    clock, ran = [0.0], []
    _fake_costs(monkeypatch, clock)
    problem = GemmProblem(m=16, n=48, k=64, layout="NT")
    monkeypatch.setattr(ops, "_compiled", lambda entry, p: _ClockedKernel("triton", clock, {"triton": 4.0}, ran,
                                                                          launches=2))
    monkeypatch.delenv(ops.ENV_OP_BACKENDS)
    ops.set_table(TunedTable([_entry(problem=problem, ms=0.050, torch_ms=0.056, gpu="")]))
    w, x = torch.randn(48, 64).half(), torch.randn(16, 64).half()
    keys = []
    linear_key = ops._linear_key
    monkeypatch.setattr(ops, "_linear_key", lambda *a: keys.append(a) or linear_key(*a))
    with torch.no_grad():
        torch.testing.assert_close(cudal2.linear(x, w), torch.nn.functional.linear(x, w))  # bound: declined
        assert ops._launchers[linear_key(x, w, None)] is None and ops.launch_costs() == pytest.approx({"triton x2": 8.0})
        cudal2.linear(x, w)  # the count's first call outside a capture since the plans knew: bound once as such
        built = len(keys)
        for _ in range(3):
            torch.testing.assert_close(cudal2.linear(x, w), torch.nn.functional.linear(x, w))
    assert len(keys) == built, "a declined count's later calls built their call key"
    assert ops._op_entry(problem, None) is None and ops._op_entry(problem, None, ops.GRAPH_MIN_SAVING_US) is not None
    ops.set_table(TunedTable([_entry(problem=problem, ms=0.050, torch_ms=0.056, gpu="")]))
    assert ops._op_entry(problem, None) is not None  # a new table: the decline is forgotten


def test_a_routed_layer_whose_kernel_was_declined_for_its_launch_path_leaves_the_eager_path(cpu_as_gpu, monkeypatch):
    """route_linears routes a layer by the table alone, before any launch was timed. Where its count's kernel is then
    declined for eager calls (its two launches cost more than it saves), the layer's later calls go to linear(),
    which sends them to torch (in C where the C front is built), and never through the eager path's Python again;
    a count still served eagerly keeps the direct path."""
    clock, ran = [0.0], []
    _fake_costs(monkeypatch, clock)
    declined, served = GemmProblem(m=16, n=48, k=64, layout="NT"), GemmProblem(m=32, n=48, k=64, layout="NT")
    monkeypatch.setattr(ops, "_compiled", lambda entry, p: _ClockedKernel("triton", clock, {"triton": 4.0}, ran,
                                                                          launches=2 if p == declined else 1))
    monkeypatch.delenv(ops.ENV_OP_BACKENDS)
    ops.set_table(TunedTable([_entry(problem=p, ms=0.050, torch_ms=0.056, gpu="") for p in (declined, served)]))
    model = torch.nn.Linear(64, 48, bias=False).half()
    assert cudal2.route_linears(model) == [""] and model._cudal2_min_numel == 16 * 64
    run_linear, paths = ops._run_linear, []
    monkeypatch.setattr(ops, "_run_linear", lambda *a: paths.append(a[0].shape[0]) or run_linear(*a))
    x16, x32 = torch.randn(16, 64).half(), torch.randn(32, 64).half()
    with torch.no_grad():
        model(x16)  # its first call binds the kernel and declines it: torch
        assert ops._launchers[ops._linear_key(x16, model.weight, None)] is None
        model(x16)  # the decline dropped the plans: this call's path makes its shape's plan again
        for _ in range(3):
            torch.testing.assert_close(model(x16), torch.nn.functional.linear(x16, model.weight))
        assert paths == [16, 16], "a declined count's calls went through the eager path's Python"
        model(x32)  # bound: its one launch costs less than it saves
        assert ops._launchers[ops._linear_key(x32, model.weight, None)] is not None
        launched = len(ran)
        torch.testing.assert_close(model(x32), torch.nn.functional.linear(x32, model.weight))
    assert paths == [16, 16, 32, 32] and len(ran) == launched + 1  # the served count: the direct path, its kernel


def _dsl_entry(problem, ms, torch_ms, gpu=""):
    from cudal2.proposers.catalog import catalog

    return TunedEntry(problem=problem, spec=catalog("cute_dsl")[0], kernel_ms=ms, baselines_ms={"torch": torch_ms},
                      gpu=gpu)


def test_launch_cost_is_the_launchs_host_time_beyond_torchs_measured_once_per_backend():
    clock, calls = [0.0], []

    def call(us):
        def run():
            clock[0] += us * 1e-6
            calls.append(us)
        return run

    assert measure_us(call(30.0), call(5.0), clock=lambda: clock[0], sync=lambda: None, calls=3, rounds=2) == \
        pytest.approx(25.0)
    costs = LaunchCosts(clock=lambda: clock[0], sync=lambda: None, measurable=lambda device: True)
    assert costs.known("triton") is None
    assert costs.measure("triton", call(40.0), call(2.0)) == pytest.approx(38.0)
    timed = len(calls)
    assert costs.measure("triton", call(99.0), call(2.0)) == pytest.approx(38.0) and len(calls) == timed  # cached
    assert not LaunchCosts().can_measure(torch.device("cpu"))  # no CUDA: nothing to measure


def test_one_undisturbed_loop_does_not_decide_the_launch_cost():
    """The cost is the median of interleaved rounds' differences: a launch that costs 5 us more than
    torch's in every round but one, where a loop of it ran 6 us faster, still reads 5 us (a least loop
    per side read -1 us, and a kernel saving 1 us would have been served)."""
    clock, launches, calls = [0.0], [0], 4
    loop_us = [30.0, 30.0, 24.0, 30.0, 30.0, 30.0, 30.0, 30.0, 30.0]

    def launch():
        clock[0] += loop_us[launches[0] // calls] * 1e-6
        launches[0] += 1

    def torch_call():
        clock[0] += 25.0 * 1e-6

    cost = measure_us(launch, torch_call, clock=lambda: clock[0], sync=lambda: None, calls=calls, rounds=9)
    assert cost == pytest.approx(5.0) and launches[0] == 9 * calls


def test_the_launch_cost_counts_the_served_calls_key_too(cpu_as_gpu, monkeypatch):
    """An eager served call builds its call key before it finds the launcher (1.5 us on one H200 host):
    the measured cost is the launch's and the key's together, so a kernel saving less than both is left
    to torch."""
    clock, ran = [0.0], []
    costs = _fake_costs(monkeypatch, clock)
    monkeypatch.setattr(ops, "_compiled", lambda entry, problem: _ClockedKernel(entry.spec.backend, clock,
                                                                                  {"triton": 4.0}, ran))
    linear_key = ops._linear_key
    monkeypatch.setattr(ops, "_linear_key", lambda *a: clock.__setitem__(0, clock[0] + 3e-6) or linear_key(*a))
    monkeypatch.delenv(ops.ENV_OP_BACKENDS)
    problem = GemmProblem(m=8, n=48, k=64, layout="NT")
    ops.set_table(TunedTable([_entry(problem=problem, ms=0.050, torch_ms=0.0555, gpu="")]))  # saves 5.5 us
    x, w = torch.randn(8, 64).half(), torch.randn(48, 64).half()
    with torch.no_grad():
        torch.testing.assert_close(cudal2.linear(x, w), torch.nn.functional.linear(x, w))
    assert costs.known("triton") == pytest.approx(7.0)  # 4 us the launch, 3 us the key
    assert ops._launchers[linear_key(x, w, None)] is None  # 5.5 us saved < 7 us: torch serves eager calls


def test_an_eager_call_takes_a_kernel_only_where_its_saving_exceeds_its_backends_measured_launch_cost(
        cpu_as_gpu, monkeypatch):
    """A Triton kernel saving 30 us whose launch costs 40 us more than torch's leaves the shape to the CuTe
    DSL kernel saving 8 us at a 3 us launch; one saving 50 us serves. Each cost is measured at its
    backend's first launch, with that call's operands, and never again."""
    clock, ran = [0.0], []
    launch_us = {"triton": 40.0, "cute_dsl": 3.0}
    costs = _fake_costs(monkeypatch, clock)
    monkeypatch.setattr(ops, "_compiled", lambda entry, problem: _ClockedKernel(entry.spec.backend, clock, launch_us,
                                                                                  ran))
    monkeypatch.delenv(ops.ENV_OP_BACKENDS)
    close, far = GemmProblem(m=24, n=48, k=64, layout="NT"), GemmProblem(m=8, n=48, k=64, layout="NT")
    ops.set_table(TunedTable([_entry(problem=close, ms=0.030, torch_ms=0.060, gpu=""),
                              _dsl_entry(close, ms=0.052, torch_ms=0.060),
                              _entry(problem=far, ms=0.050, torch_ms=0.100, gpu="")]))
    w = torch.randn(48, 64).half()
    for rows, backend in ((24, "cute_dsl"), (8, "triton")):
        x = torch.randn(rows, 64).half()
        with torch.no_grad():
            torch.testing.assert_close(cudal2.linear(x, w), torch.nn.functional.linear(x, w))
            ran.clear()
            torch.testing.assert_close(cudal2.linear(x, w), torch.nn.functional.linear(x, w))
        assert ran == [backend] and ops._launchers[ops._linear_key(x, w, None)].backend == backend
    assert ops.launch_costs() == pytest.approx({"triton": 40.0, "cute_dsl": 3.0})
    assert costs.known("triton") == pytest.approx(40.0)
    assert ops._op_entry(close, GPU).spec.backend == "cute_dsl"  # the eager rule, with the costs known
    assert ops._op_entry(close, GPU, ops.GRAPH_MIN_SAVING_US).spec.backend == "triton"  # a capture's


def test_a_call_captured_in_a_cuda_graph_launches_a_triton_winner_by_default(cpu_as_gpu, monkeypatch):
    """While a CUDA graph captures, the launch cost is paid once: the Triton kernel that won serves there
    (the op's default backends, no $CUDAL2_OP_BACKENDS), while an eager call, whose launch it would not
    repay, runs torch."""
    monkeypatch.delenv(ops.ENV_OP_BACKENDS)
    problem = GemmProblem(m=24, n=48, k=64, layout="NT")
    saving_ms = ops.EAGER_MIN_SAVING_US / 4e3
    ops.set_table(TunedTable([_entry(problem=problem, ms=saving_ms, torch_ms=2 * saving_ms, gpu="")]))
    x, w = torch.randn(24, 64).half(), torch.randn(48, 64).half()
    capturing = [False]
    _capture_when(monkeypatch, capturing)
    assert torch.equal(cudal2.linear(x, w), torch.nn.functional.linear(x, w))  # eager: torch; built for graphs
    capturing[0] = True
    got = cudal2.linear(x, w)
    launch = ops._graph_launchers[ops._linear_key(x, w, None)]
    assert launch is not None and launch.backend == "triton"
    want = torch.nn.functional.linear(x.float(), w.float())
    assert (got.float() - want).norm() / want.norm() < 1e-2


def test_a_call_of_no_served_row_count_builds_no_call_key_nor_problem(monkeypatch):
    """A weight shape served at 32 rows: calls of 64 rows (more than the fewest served, yet not served)
    run torch after their first call without building a call key or a GemmProblem."""
    ops.set_table(TunedTable([_entry(problem=GemmProblem(m=32, n=96, k=64, layout="NT"), gpu="")]))
    x, w = torch.randn(64, 64), torch.randn(96, 64)
    cudal2.linear(x, w)  # bound once

    def built(*args):
        raise AssertionError("built on the miss path")

    monkeypatch.setattr(ops, "_linear_key", built)
    monkeypatch.setattr(ops, "_problem_of", built)
    for _ in range(3):
        assert torch.equal(cudal2.linear(x, w), torch.nn.functional.linear(x, w))
    a, b = torch.randn(64, 96), torch.randn(96, 64)
    ops.set_table(TunedTable([_entry(problem=GemmProblem(m=32, n=64, k=96), gpu="")]))
    monkeypatch.undo()  # (undoes the autouse fixture's settings too: set again)
    monkeypatch.setenv(ops.ENV_OP_BACKENDS, "triton,cute_dsl")
    cudal2.matmul(a, b)
    monkeypatch.setattr(ops, "_matmul_key", built)
    monkeypatch.setattr(ops, "_problem_of", built)
    assert torch.equal(cudal2.matmul(a, b), torch.matmul(a, b))


def _python_work(fn, *args):
    """What one call fn(*args) does at the Python level: the Python functions it enters (fn first), the C
    functions it calls and the attributes its Python code reads (each torch.Size read is one built)."""
    import dis
    import sys

    entered, c_calls, attributes, here = [], [], [], sys._getframe()

    def profile(frame, event, arg):
        if frame is here:  # (the helper's own calls: sys.settrace / sys.setprofile)
            return
        if event == "call":
            entered.append(frame.f_code.co_name)
        elif event == "c_call":
            c_calls.append(getattr(arg, "__name__", repr(arg)))

    def trace(frame, event, arg):
        frame.f_trace_opcodes = True
        if event == "opcode":
            instruction = {i.offset: i for i in dis.get_instructions(frame.f_code)}.get(frame.f_lasti)
            if instruction is not None and instruction.opname in ("LOAD_ATTR", "LOAD_METHOD"):
                attributes.append(instruction.argval)
        return trace

    sys.settrace(trace)
    sys.setprofile(profile)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
        sys.settrace(None)
    return entered, c_calls, attributes


# The miss path of matmul() and linear() (nothing served, the call's counts bound before): each Python
# function entered costs about 50 ns on a 2-core CPU, each C function (a tensor's numel(), a dict lookup,
# torch's own call) 20 to 100 ns, each torch.Size built (tensor.shape) about 110 ns. Within these, a
# call costs at most 0.3 us more than torch's on such a CPU.
MISS_PATH_PYTHON_FUNCTIONS = 2  # the op, and the test whether torch.compile traces (Dynamo folds it)
MISS_PATH_C_CALLS = 5  # is_grad_enabled, numel twice, one dict lookup, torch's own function


@pytest.mark.parametrize("op", ["linear", "matmul"])
def test_the_miss_path_enters_no_helper_and_builds_no_shape(op):
    """A call with nothing to serve, once its counts were bound: no Python function beyond the op's own
    and the compile test, a fixed number of C calls, no tensor.shape read (it builds a torch.Size). (linear's
    Python front: what cudal2.linear is where its C front cannot be built; tests/test_op_front.py has the C.)"""
    w = torch.randn(96, 64)
    call, a = (ops._python_linear, torch.randn(6, 64)) if op == "linear" else (cudal2.matmul, torch.randn(6, 96))
    with torch.no_grad():
        call(a, w)  # bound once
        entered, c_calls, attributes = _python_work(call, a, w)
    assert entered[0] == call.__name__ and len(entered) <= MISS_PATH_PYTHON_FUNCTIONS, entered
    assert len(c_calls) <= MISS_PATH_C_CALLS, c_calls
    assert not {"shape", "size", "stride"} & set(attributes), attributes


# A linear weight whose every call runs torch (ops._torch_weights), once its first call was made: the op, the
# compile test (Dynamo folds it), and C calls for the test (is_dynamo_compiling), id, one dict lookup and torch's own
# function; no grad test, no element count.
KNOWN_WEIGHT_C_CALLS = 4


def test_a_weight_no_entry_serves_runs_torch_before_the_grad_test_and_the_counts():
    """After its first call, a weight of a shape no servable entry has goes to F.linear after one id lookup:
    not even x's element count is read, with or without gradients, and the gradients are torch's."""
    ops.set_table(TunedTable([_entry(problem=GemmProblem(m=3, n=32, k=64, layout="NT"), gpu="")]))
    w = torch.randn(96, 64).half().requires_grad_()
    x = torch.randn(6, 64).half().requires_grad_()
    cudal2.linear(x, w)  # its first call (through the op's autograd function): bound, the weight kept
    assert ops._torch_weights.get(id(w)) is ops._EVERY_CALL
    entered, c_calls, attributes = _python_work(ops._python_linear, x, w)
    assert entered[0] == "_python_linear" and len(entered) <= MISS_PATH_PYTHON_FUNCTIONS, entered
    assert len(c_calls) <= KNOWN_WEIGHT_C_CALLS, c_calls
    assert not {"requires_grad", "numel", "shape"} & set(attributes), attributes
    cudal2.linear(x, w).square().sum().backward()
    got = (x.grad.clone(), w.grad.clone())
    x.grad = w.grad = None
    torch.nn.functional.linear(x, w).square().sum().backward()
    assert torch.equal(got[0], x.grad) and torch.equal(got[1], w.grad)


def test_a_compiled_call_does_not_trace_again_for_each_new_weight_tensor():
    """linear() asks whether a trace is underway before it looks a weight up by id: a traced id() of a tensor
    that is not a module's parameter makes torch.compile guard on that tensor's identity, and trace again
    for every new weight (a weight made per call, or passed in)."""
    traced = []

    def backend(gm, example_inputs):
        traced.append(gm)
        return gm.forward

    compiled = torch.compile(lambda x, w: cudal2.linear(x, w), backend=backend, fullgraph=True)
    x = torch.randn(6, 64)
    with torch.no_grad():
        kept = torch.randn(96, 64)
        cudal2.linear(x, kept)  # an eager call keeps a weight, as a model's earlier calls would
        assert ops._torch_weights.get(id(kept)) is ops._EVERY_CALL
        for w in [kept] + [torch.randn(96, 64) for _ in range(4)]:
            assert torch.equal(compiled(x, w), torch.nn.functional.linear(x, w))
    assert len(traced) == 1, f"traced {len(traced)} times for 5 weights of one shape"


def test_a_kept_weight_is_forgotten_when_it_dies_and_when_the_table_changes():
    """The id of a weight that died names no entry (another tensor may get that id), nor does any after
    set_table."""
    with torch.no_grad():
        w = torch.randn(96, 64)
        cudal2.linear(torch.randn(6, 64), w)
        key = id(w)
        assert key in ops._torch_weights
        del w
        gc.collect()
        assert key not in ops._torch_weights and key not in ops._torch_weight_refs
        kept = torch.randn(96, 64)
        cudal2.linear(torch.randn(6, 64), kept)
        ops.set_table(TunedTable())
        assert not ops._torch_weights


def test_no_weight_is_kept_where_a_gradient_gemm_could_be_served():
    """A servable entry of another layout than linear's (NN here: backward's x-gradient GEMM) could serve
    a gradient: no weight skips the grad test then, and a call that needs gradients goes through the op's
    autograd function, whose backward asks the op."""
    ops.set_table(TunedTable([_entry(problem=GemmProblem(m=6, n=64, k=96, layout="NN"), gpu="")]))
    w = torch.randn(96, 64).half().requires_grad_()
    x = torch.randn(6, 64).half().requires_grad_()
    cudal2.linear(x, w)
    assert not ops._torch_weights
    assert isinstance(cudal2.linear(x, w).grad_fn, ops._Linear._backward_cls)


def test_a_kept_weight_of_a_served_shape_still_takes_its_served_rows(monkeypatch):
    """A weight whose shape a kernel serves at 3 rows is kept for the calls of other row counts that ran
    torch: a call of 3 rows still reaches the full path, which decides it."""
    ops.set_table(TunedTable([_entry(problem=GemmProblem(m=3, n=32, k=64, layout="NT"), gpu="")]))
    w = torch.randn(32, 64)
    with torch.no_grad():
        cudal2.linear(torch.randn(6, 64), w)  # bound: 6 rows run torch
        assert ops._torch_weights.get(id(w)) is not ops._EVERY_CALL and id(w) in ops._torch_weights

        def built(*args):
            raise AssertionError("built a call key")

        monkeypatch.setattr(ops, "_linear_key", built)
        assert torch.equal(cudal2.linear(x := torch.randn(6, 64), w), torch.nn.functional.linear(x, w))
        with pytest.raises(AssertionError, match="built a call key"):
            cudal2.linear(torch.randn(3, 64), w)


def test_a_models_weights_are_kept_at_their_first_call_and_a_tensor_made_per_call_is_not():
    """Layers of one shape share their counts: the second layer's first call runs torch on the counts alone;
    its weight, a Parameter, is kept then. A plain tensor remade for each call is not kept (its weak
    reference would cost every call more than the counts)."""
    layers = [torch.nn.Linear(64, 96, bias=False) for _ in range(3)]
    x = torch.randn(6, 64)
    with torch.no_grad():
        for layer in layers:
            cudal2.linear(x, layer.weight)
        assert all(ops._torch_weights.get(id(layer.weight)) is ops._EVERY_CALL for layer in layers)
        made = [layers[0].weight.detach().clone() for _ in range(3)]
        for w in made:
            cudal2.linear(x, w)
        assert not any(id(w) in ops._torch_weights for w in made)
        transposed = torch.nn.Parameter(torch.randn(64, 96).t())  # (its gradient GEMMs could be NT: never kept)
        cudal2.linear(x, transposed)
        assert id(transposed) not in ops._torch_weights


def test_a_call_whose_counts_a_served_call_shares_is_never_sent_to_torch_by_the_miss_path(monkeypatch):
    """The miss path keys on element counts (weight.numel(), x.numel()): a call of another shape with the
    same counts as a served one (64 x 32 weight at 6 rows, 32 x 64 at 3: both 2048 and 192) is not
    sent to torch there, and the unserved one still runs torch without a call key after its first call."""
    ops.set_table(TunedTable([_entry(problem=GemmProblem(m=3, n=32, k=64, layout="NT"), gpu="")]))
    x, w = torch.randn(6, 32), torch.randn(64, 32)
    served_x, served_w = torch.randn(3, 64), torch.randn(32, 64)
    assert (x.numel(), w.numel()) == (served_x.numel(), served_w.numel())
    with torch.no_grad():
        cudal2.linear(x, w)  # bound once: not a served shape
        assert not ops._torch_counts["linear"].get(w.numel())  # its counts are a served call's

        def built(*args):
            raise AssertionError("built a call key")

        monkeypatch.setattr(ops, "_linear_key", built)
        assert torch.equal(cudal2.linear(x, w), torch.nn.functional.linear(x, w))  # torch, no key (_plans)
        with pytest.raises(AssertionError, match="built a call key"):
            cudal2.linear(served_x, served_w)  # the full path decides


def test_the_ops_compile_test_answers_what_torch_compiler_is_compiling_does(monkeypatch):
    """Code that a compile or torch.export runs outside Dynamo (is_compiling() True, is_dynamo_compiling()
    False) takes the traced decision, as with torch.compiler.is_compiling()."""
    decided = []
    monkeypatch.setattr(ops, "_served_when_traced", lambda *args: decided.append(args[0]) or None)
    x, w = torch.randn(6, 64), torch.randn(96, 64)
    with torch.no_grad():
        cudal2.linear(x, w), cudal2.matmul(x, w.t())
        assert decided == []
        monkeypatch.setattr(torch.compiler, "_is_compiling_flag", True)
        assert torch.compiler.is_compiling() and not torch.compiler.is_dynamo_compiling()
        assert torch.equal(cudal2.linear(x, w), torch.nn.functional.linear(x, w))
        assert torch.equal(cudal2.matmul(x, w.t()), torch.matmul(x, w.t()))
    assert decided == [ops._linear_class, ops._matmul_class]


def test_every_winner_of_twenty_searches_is_served_from_the_exported_table_in_its_mode(tmp_path, monkeypatch):
    """Twenty shapes searched into one store (recorded runner, both Hopper backends), the table exported
    with `cudal2 export` and read by the op from $CUDAL2_TABLE, as a user's process does. With the op's
    default backends and each backend's launch cost known (Triton's 40 us, the CuTe DSL's 3 us): while a
    graph captures, every shape's winner is served; in an eager call, the winner where its saving exceeds
    its backend's cost, else the best entry of the shape whose saving exceeds its own backend's."""
    from typer.testing import CliRunner

    from cudal2.cli import app
    from cudal2.tuner.recorded import synthetic_ms

    monkeypatch.delenv(ops.ENV_OP_BACKENDS)
    store = Store(tmp_path / "s.db")
    shapes = [GemmProblem(m=m, n=n, k=4096, layout="NT") for m in (1, 16, 128, 1024)
              for n in (1024, 4096, 6144, 14336, 28672)]

    def torch_ms(problem):
        return {"torch": 2.0 * synthetic_ms(problem, KernelSpec(block_m=128, block_n=256, block_k=64, stages=4,
                                                                num_warps=8))}

    for p in shapes:
        run_search(p, backends=("triton", "cute_dsl"), arch="sm_90a", proposer=cudal2.proposers.get_proposer(
            "rules", backends=("triton", "cute_dsl"), arch="sm_90a"), runner=RecordedRunner(baselines=torch_ms),
            store=store, budget=6, seed=0, progress=False)
    out = tmp_path / "table.json"
    result = CliRunner().invoke(app, ["export", "--store", str(tmp_path / "s.db"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    monkeypatch.setenv(table_mod.ENV_TABLE, str(out))
    ops.set_table(None)  # the op reads $CUDAL2_TABLE itself
    table = ops.tuned_table()
    assert len(table) >= 20
    clock = [0.0]
    costs = _fake_costs(monkeypatch, clock)
    for backend, us in (("triton", 40.0), ("cute_dsl", 3.0)):
        costs.measure(backend, lambda us=us: clock.__setitem__(0, clock[0] + us * 1e-6), lambda: None)
    gpu = next(iter(table)).gpu
    winners = 0
    for p in shapes:
        beat = [e for e in table if e.problem == p and e.speedup("torch") > 1]
        if not beat:
            assert ops._op_entry(p, gpu, ops.GRAPH_MIN_SAVING_US) is None and ops._op_entry(p, gpu) is None
            continue
        winners += 1
        winner = max(beat, key=lambda e: e.speedup("torch"))
        assert ops._op_entry(p, gpu, ops.GRAPH_MIN_SAVING_US) == winner, p.label()
        covered = [e for e in beat if ops._saving_us(e) > costs.known(e.spec.backend)]
        eager = ops._op_entry(p, gpu)
        assert eager == (max(covered, key=lambda e: e.speedup("torch")) if covered else None), p.label()
    assert winners >= 15
    assert {e.spec.backend for e in table if e.speedup("torch") > 1} == {"triton", "cute_dsl"}


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["triton", "cute_dsl"])
def test_gpu_each_backends_kernel_serves_eager_and_captured_calls(backend, monkeypatch):
    """One table entry of the backend: an eager call launches it (its launch cost measured then, and far
    below its saving), a CUDA graph captures it, and its replays follow the input; where the saving does
    not cover the launch cost, eager calls run torch and only the captured call launches the kernel."""
    pytest.importorskip("cutlass" if backend == "cute_dsl" else "triton")
    monkeypatch.delenv(ops.ENV_OP_BACKENDS)
    spec = dict(backend="cute_dsl", arch="sm_90a", num_warps=12, load_path="tma", warp_specialization="cooperative",
                persistent=True, block_m=128, block_n=128, block_k=64, stages=4, epilogue_path="tma_store",
                shape_specialization="dynamic") if backend == "cute_dsl" else \
        dict(block_m=64, block_n=64, block_k=32, stages=3, num_warps=4)
    served, graphs_only = GemmProblem(m=128, n=384, k=256, layout="NT"), GemmProblem(m=64, n=384, k=256, layout="NT")
    ops.set_table(TunedTable([_entry(problem=served, ms=0.010, torch_ms=1.0, gpu="", **spec),
                              _entry(problem=graphs_only, ms=0.010, torch_ms=0.0105, gpu="", **spec)]))
    w = torch.randn(384, 256, device="cuda", dtype=torch.float16) / 16

    def close(got, x):
        want = torch.nn.functional.linear(x.float(), w.float())
        return got.shape == want.shape and float((got.float() - want).norm() / want.norm()) < 1e-3

    def captured(x):
        """cudal2.linear(x, w) captured in a CUDA graph; x changed, the graph replayed: its output."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = cudal2.linear(x, w)
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        return out

    with torch.no_grad():
        x = torch.randn(128, 256, device="cuda", dtype=torch.float16)
        assert close(cudal2.linear(x, w), x)
        key = ops._linear_key(x, w, None)
        launch, ran = ops._launchers[key], []
        assert launch is not None and launch.backend == backend  # the kernel ran, not torch
        assert backend in ops.launch_costs() and ops.launch_costs()[backend] < 990.0
        ops._launchers[key] = lambda *args: ran.append(1) or launch(*args)
        assert close(captured(x), x) and ran == [1]  # the capture recorded the kernel

        x = torch.randn(64, 256, device="cuda", dtype=torch.float16)
        clock = [0.0]
        costs = LaunchCosts(clock=lambda: clock[0], sync=lambda: None)
        costs.measure(backend, lambda: clock.__setitem__(0, clock[0] + 1e-3), lambda: None)  # 1000 us a launch
        monkeypatch.setattr(ops, "_launch_costs", costs)
        ops.set_table(ops.tuned_table())
        assert torch.equal(cudal2.linear(x, w), torch.nn.functional.linear(x, w))  # eager: torch's
        assert ops._launchers[ops._linear_key(x, w, None)] is None
        out = captured(x)
        assert ops._graph_launchers[ops._linear_key(x, w, None)].backend == backend and close(out, x)


@pytest.mark.gpu
def test_gpu_a_serial_split_k_kernel_gives_its_workspace_twins_bits_call_after_call(monkeypatch):
    """The op serves a Triton split-K kernel that reduces in one launch (each call's last K slice of a tile sums
    the partials and takes its count back off the tile's counter): eager calls and a captured graph's replays, on
    changing inputs, give the bits of the same tiles reduced by the workspace's second kernel."""
    pytest.importorskip("triton")
    from cudal2.codegen import get_backend

    monkeypatch.delenv(ops.ENV_OP_BACKENDS)
    problem = GemmProblem(m=16, n=3072, k=3072, layout="NT")
    spec = dict(block_m=16, block_n=64, block_k=128, stages=4, num_warps=4, load_path="pointer",
                decomposition="split_k", split_k=4)
    ops.set_table(TunedTable([_entry(problem=problem, ms=0.010, torch_ms=1.0, gpu="", split_k_reduction="serial",
                                     **spec)]))
    backend = get_backend("triton")
    twin = backend.compile(backend.render(problem, _entry(problem=problem, split_k_reduction="workspace",
                                                          **spec).spec))
    w = torch.randn(3072, 3072, device="cuda", dtype=torch.float16) / 64
    with torch.no_grad():
        for seed in range(3):
            x = torch.randn(16, 3072, device="cuda", dtype=torch.float16, generator=torch.Generator(
                device="cuda").manual_seed(seed))
            got = cudal2.linear(x, w)
            assert ops._launchers[ops._linear_key(x, w, None)].backend == "triton"  # the kernel ran, not torch
            assert torch.equal(got, twin(x, w.t())), seed
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = cudal2.linear(x, w)
        for seed in range(3, 8):
            x.copy_(torch.randn(16, 3072, device="cuda", dtype=torch.float16))
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(out, twin(x, w.t())), seed


def _two_streams_at_once(call, inputs: list) -> list:
    """call(x) of each input, alternately on two streams whose work is held back until all of it is enqueued (a
    gate: both wait for an event a third stream records after sleeping), so that the two streams' kernels run at
    the same time wherever nothing orders them. Returns the outputs, synchronized."""
    gate, streams, opened = torch.cuda.Stream(), (torch.cuda.Stream(), torch.cuda.Stream()), torch.cuda.Event()
    with torch.cuda.stream(gate):
        torch.cuda._sleep(50_000_000)  # about 25 ms at 2 GHz: longer than enqueueing the calls takes
        opened.record(gate)
    outs = []
    for s in streams:
        s.wait_event(opened)
    for i, x in enumerate(inputs):
        with torch.cuda.stream(streams[i % 2]):
            outs.append(call(x))
    torch.cuda.synchronize()
    return outs


@pytest.mark.gpu
@pytest.mark.parametrize("spec", [
    dict(block_m=16, block_n=64, block_k=128, stages=4, num_warps=4, load_path="pointer", decomposition="split_k",
         split_k=4, split_k_reduction="serial"),
    dict(block_m=16, block_n=64, block_k=128, stages=4, num_warps=4, load_path="pointer", decomposition="split_k",
         split_k=4, split_k_reduction="workspace"),
    dict(block_m=16, block_n=64, block_k=128, stages=4, num_warps=4, load_path="tma")],
    ids=["serial", "workspace", "tma"])
def test_gpu_calls_of_one_kernel_on_two_streams_keep_out_of_each_others_memory(monkeypatch, spec):
    """The op serves one kernel to calls on two streams, enqueued in turn and free to overlap on the GPU. A split-K
    kernel's launch on a stream other than its workspace's previous one waits for that stream's work
    (cudal2.codegen.workspace), so no two of them sum into the workspace at once; a TMA kernel's descriptors go to a
    scratch buffer of the launch's stream. Every output has the bits of the same kernel called alone."""
    pytest.importorskip("triton")
    from cudal2.codegen import get_backend

    monkeypatch.delenv(ops.ENV_OP_BACKENDS)
    problem = GemmProblem(m=16, n=3072, k=3072, layout="NT")
    ops.set_table(TunedTable([_entry(problem=problem, ms=0.010, torch_ms=1.0, gpu="", **spec)]))
    backend = get_backend("triton")
    alone = backend.compile(backend.render(problem, _entry(problem=problem, **spec).spec))
    w = torch.randn(3072, 3072, device="cuda", dtype=torch.float16) / 64
    xs = [torch.randn(16, 3072, device="cuda", dtype=torch.float16) for _ in range(40)]
    with torch.no_grad():
        expected = [alone(x, w.t()) for x in xs]
        cudal2.linear(xs[0], w)  # bound, compiled and launched once on the default stream
        torch.cuda.synchronize()
        outs = _two_streams_at_once(lambda x: cudal2.linear(x, w), xs)
    assert ops._launchers[ops._linear_key(xs[0], w, None)].backend == "triton"  # the kernel ran, not torch
    wrong = [i for i, (got, want) in enumerate(zip(outs, expected)) if not torch.equal(got, want)]
    assert not wrong, f"calls {wrong} of 40 differ from the kernel called alone"


def test_a_win_within_the_measurements_noise_is_not_served():
    """A kernel whose measured speedup over torch is within the noise (MIN_SERVED_SPEEDUP) is served on
    no path, however much GPU time it claims to save; one just above it is."""
    gpu = "NVIDIA H200"
    for speedup, served in ((1.005, False), (1.015, False), (1.025, True)):
        ops.set_table(TunedTable([_entry(ms=1.0, torch_ms=speedup, gpu=gpu)]))  # saves 5, 15 or 25 us a call
        for margin in (None, ops.GRAPH_MIN_SAVING_US):
            assert (ops._op_entry(P, gpu, margin) is not None) == served, (speedup, margin)
