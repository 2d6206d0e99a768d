"""cudal2.linear's C front (cudal2.op_front): built where a C compiler and Python's headers are, the same
results as the op's Python front in every case, no Python frame on a kept weight's call, and the Python front
where it cannot be built; torch.compile traces the Python front in its place."""

import os
import pickle
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import cudal2
from cudal2 import op_front, ops
from cudal2.ir import GemmProblem, KernelSpec
from cudal2.store.table import TunedEntry, TunedTable

ROOT = Path(__file__).resolve().parent.parent
CAN_BUILD = shutil.which("cc") is not None and (Path(sysconfig.get_paths()["include"]) / "Python.h").exists()
needs_c = pytest.mark.skipif(not CAN_BUILD, reason="no C compiler (cc) or Python.h here: the op's Python front")


@pytest.fixture(autouse=True)
def empty_table():
    ops.set_table(TunedTable())
    yield
    ops.set_table(TunedTable())


def _profile(fn, *args):
    """(Python functions entered, C functions called from Python) by one call fn(*args)."""
    entered, c_calls = [], []

    def profile(frame, event, arg):
        if event == "call":
            entered.append(frame.f_code.co_name)
        elif event == "c_call":
            c_calls.append(getattr(arg, "__name__", repr(arg)))

    sys.setprofile(profile)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
    return entered[:-1], c_calls[:-1]  # (the last of each: sys.setprofile(None) itself)


@needs_c
def test_cudal2_linear_is_the_c_front_and_a_kept_weight_enters_no_python():
    assert type(cudal2.linear).__name__ == "builtin_function_or_method" and ops._rebind_front is not None
    x, w = torch.randn(6, 64), torch.randn(96, 64)
    with torch.no_grad():
        cudal2.linear(x, w)  # its first call: bound, the weight kept
        assert ops._torch_weights.get(id(w)) is ops._EVERY_CALL
        entered, c_calls = _profile(cudal2.linear, x, w)
    assert entered == [] and c_calls == ["linear"], (entered, c_calls)


@needs_c
def test_a_weight_served_at_other_row_counts_runs_torch_in_c(monkeypatch):
    """A weight whose shape a kernel serves at 3 rows, called with 6: kept with its shape's plan, and from its
    second call on the C front reads x's element count in the plan's torch counts and calls torch itself."""
    monkeypatch.setattr(ops, "_eager_margin_us", lambda backend: ops.EAGER_MIN_SAVING_US)  # (as on a GPU host)
    spec = KernelSpec(block_m=32, block_n=32, block_k=32, stages=2)
    ops.set_table(TunedTable([TunedEntry(problem=GemmProblem(m=3, n=96, k=64, layout="NT"), spec=spec,
                                         kernel_ms=0.1, baselines_ms={"torch": 0.2}, gpu="")]))
    x, w = torch.randn(6, 64).half(), torch.randn(96, 64).half()
    with torch.no_grad():
        cudal2.linear(x, w)
        known = ops._torch_weights.get(id(w))
        assert known is not None and known is not ops._EVERY_CALL and x.numel() in known.to_torch
        entered, c_calls = _profile(cudal2.linear, x, w)
        assert torch.equal(cudal2.linear(x, w), F.linear(x, w))
    assert entered == [] and c_calls == ["linear"], (entered, c_calls)


@needs_c
@pytest.mark.parametrize("device,stream,captures,to", [
    (-1, 7, True, "torch"),  # a CPU tensor: never captured
    (0, 0, True, "torch"),  # the legacy default stream: no capture runs there
    (0, 7, False, "torch"), (0, 7, True, "the eager path"),
    (0, 7, None, "the eager path"),  # the capture test raises: the eager path asks
    (0, None, False, "the eager path")])  # the stream test raises
def test_a_graph_only_count_runs_torch_in_c_unless_a_capture_runs(device, stream, captures, to):
    """A kept weight's plan names x's element count among those a kernel serves only while a CUDA graph
    captures: the C front calls torch where no capture can record the call, as ops._captured_now tells it, and
    the op's eager path where one can, or where that cannot be told. The C logic alone: torch's call, the eager
    path and CUDA's answers are stand-ins that record what was called."""
    class Plan:
        to_torch, to_torch_eager = set(), {12}

    class X:
        def numel(self):
            return 12

        def get_device(self):
            return device

    def answer(value):
        def call(*args):
            if value is None:
                raise RuntimeError("no CUDA")
            return value
        return call

    called = []
    w = torch.empty(2, 6)
    ops._torch_weights[id(w)] = Plan()
    ops._rebind_front(torch_linear=lambda *a: called.append("torch"),
                      eager_rest=lambda x_, w_, b, known, numel: called.append(("the eager path", numel)),
                      raw_stream=answer(stream), capturing=answer(captures))
    try:
        cudal2.linear(X(), w)
    finally:
        ops._rebind_front(torch_linear=ops._F_linear, eager_rest=ops._eager_linear, raw_stream=ops._raw_stream,
                          capturing=ops._capturing)
        ops._torch_weights.pop(id(w))
    assert called == (["torch"] if to == "torch" else [("the eager path", 12)])


def _cases():
    """(name, args, kwargs) of linear calls: positional, keywords, bias, a 1-D weight, a 3-D x, bf16, an empty x."""
    w, b = torch.randn(96, 64), torch.randn(96)
    return [("two", (torch.randn(6, 64), w), {}), ("bias", (torch.randn(6, 64), w, b), {}),
            ("bias None", (torch.randn(6, 64), w, None), {}), ("bias keyword", (torch.randn(6, 64), w), {"bias": b}),
            ("x keyword", (), {"x": torch.randn(6, 64), "weight": w}),
            ("1-D weight", (torch.randn(6, 64), torch.randn(64)), {}), ("3-D x", (torch.randn(2, 3, 64), w), {}),
            ("bf16", (torch.randn(6, 64).bfloat16(), w.bfloat16()), {}), ("no rows", (torch.randn(0, 64), w), {})]


@pytest.mark.parametrize("grad", [False, True])
def test_every_call_matches_torch_through_both_fronts(grad):
    """Each case twice (its second call takes the kept weight's path), through cudal2.linear and the Python
    front: the result, and the gradients where they are asked for, equal F.linear's."""
    for name, args, kwargs in _cases():
        tensors = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)]
        for t in tensors:
            t.requires_grad_(grad and t.dtype == torch.float32)
        for call in (cudal2.linear, ops._python_linear):
            for _ in range(2):
                got = call(*args, **kwargs)
                want = F.linear(*args, **{("input" if k == "x" else k): v for k, v in kwargs.items()})
                assert torch.equal(got, want), (name, call)
                if got.requires_grad:
                    mine = torch.autograd.grad(got.sum(), [t for t in tensors if t.requires_grad])
                    torch_grads = torch.autograd.grad(want.sum(), [t for t in tensors if t.requires_grad])
                    assert all(torch.equal(a, b) for a, b in zip(mine, torch_grads)), (name, call)


def test_bad_calls_raise_torch_s_errors_or_python_s():
    with pytest.raises(TypeError):
        cudal2.linear(torch.randn(6, 64))
    with pytest.raises(TypeError):
        cudal2.linear(torch.randn(6, 64), torch.randn(96, 64), None, None)
    with pytest.raises(RuntimeError):  # torch's own: the shapes do not fit
        cudal2.linear(torch.randn(6, 64), torch.randn(96, 32))


@needs_c
def test_while_the_trace_flag_is_set_the_python_front_decides(monkeypatch):
    """The C front sends no call to torch while torch.compiler's flag says a trace runs outside Dynamo
    (non-strict torch.export): the Python front decides then, as it does while traced."""
    seen = []
    x, w = torch.randn(6, 64), torch.randn(96, 64)
    with torch.no_grad():
        cudal2.linear(x, w)
        assert ops._torch_weights.get(id(w)) is ops._EVERY_CALL
        monkeypatch.setattr(ops, "_traced_linear", lambda *a: seen.append(a) or F.linear(*a))
        monkeypatch.setattr(torch.compiler, "_is_compiling_flag", True)
        cudal2.linear(x, w)
    assert len(seen) == 1


@needs_c
def test_torch_compile_traces_the_python_front_in_one_graph():
    """Dynamo cannot look into C: it traces the Python front in the C front's place (substitute_in_graph), with
    no graph break, for a kept weight too. (tests/test_ops.py's compiled-graph tests, served shapes among them,
    call cudal2.linear: the C front where it builds.)"""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append([str(n.target) for n in gm.graph.nodes if n.op == "call_function"])
        return gm.forward

    def two(x, w, other):
        return cudal2.linear(x, w).sum() + cudal2.linear(x, other, None).sum()

    x, w, other = torch.randn(6, 64), torch.randn(96, 64), torch.randn(80, 64)
    with torch.no_grad():
        cudal2.linear(x, w)  # kept: its eager calls run torch in C
        assert ops._torch_weights.get(id(w)) is ops._EVERY_CALL
        got = torch.compile(two, backend=backend, fullgraph=True)(x, w, other)
    assert torch.equal(got, F.linear(x, w).sum() + F.linear(x, other).sum())
    assert len(graphs) == 1 and sum("linear" in t for t in graphs[0]) == 2, graphs


def test_without_a_compiler_the_python_front_serves(tmp_path, monkeypatch):
    """A build that fails (no compiler) leaves the op's Python front in place, silently: the same results."""
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("CUDAL2_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(op_front, "_made", None)
    linear, rebind = op_front.front(ops._python_linear, ops._eager_linear, {}, object(), F.linear, torch.compiler,
                                    "_is_compiling_flag", "to_torch", "to_torch_eager",
                                    lambda device: 0, lambda: False)
    assert linear is ops._python_linear and rebind is None


def test_a_compiler_that_hangs_leaves_the_python_front_in_time(tmp_path, monkeypatch):
    """A compiler that does not finish is stopped after BUILD_TIMEOUT_S: the op keeps its Python front instead of
    holding up the import."""
    hanging = tmp_path / "cc"
    hanging.write_text("#!/bin/sh\nexec sleep 30\n")  # (exec: the timeout's kill stops the sleep itself)
    hanging.chmod(0o755)
    monkeypatch.setenv("CC", str(hanging))
    monkeypatch.setenv("CUDAL2_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(op_front, "_made", None)
    monkeypatch.setattr(op_front, "BUILD_TIMEOUT_S", 0.5)
    start = time.monotonic()
    linear, rebind = op_front.front(ops._python_linear, ops._eager_linear, {}, object(), F.linear, torch.compiler,
                                    "_is_compiling_flag", "to_torch", "to_torch_eager", lambda device: 0,
                                    lambda: False)
    assert linear is ops._python_linear and rebind is None and time.monotonic() - start < 10
    assert not list((tmp_path / "cache").rglob("*.tmp"))


@needs_c
def test_the_front_is_made_once_a_process():
    with pytest.raises(RuntimeError, match="made already"):
        op_front.front(ops._python_linear, ops._eager_linear, {}, object(), F.linear, torch.compiler,
                       "_is_compiling_flag", "to_torch", "to_torch_eager",
                                    lambda device: 0, lambda: False)
    with pytest.raises(TypeError, match="no binding named"):
        ops._rebind_front(linear=F.linear)


def test_cudal2_linear_pickles_by_reference_and_loads_in_a_fresh_process(tmp_path):
    """As F.linear does: a pickled cudal2.linear (a Dask task, a saved callable) loads where cudal2 is installed,
    as the same function."""
    path = tmp_path / "linear.pkl"
    path.write_bytes(pickle.dumps(cudal2.linear))
    assert pickle.loads(path.read_bytes()) is cudal2.linear
    code = f"import pickle, cudal2; print(pickle.loads(open({str(path)!r}, 'rb').read()) is cudal2.linear)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "CUDAL2_CACHE_DIR": str(tmp_path)})
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr


def test_cudal2_native_front_0_keeps_the_python_front(tmp_path):
    env = {**os.environ, "CUDAL2_NATIVE_FRONT": "0", "CUDAL2_CACHE_DIR": str(tmp_path)}
    code = "import cudal2, cudal2.ops as o; print(cudal2.linear is o._python_linear)"
    done = subprocess.run([sys.executable, "-c", code],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr


@needs_c
def test_a_fresh_cache_builds_the_front_in_a_new_process(tmp_path):
    """A cache folder without the library: the first import compiles it (once), the next loads it."""
    env = {**os.environ, "CUDAL2_CACHE_DIR": str(tmp_path)}
    code = "import cudal2, cudal2.ops as o; print(o._rebind_front is not None)"
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                              timeout=120)
        assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr
    assert len(list((tmp_path / "op_front").glob("cudal2_op_front_*"))) == 1
