"""cudal2.linear's C front (cudal2.op_front): built where a C compiler and Python's headers are, the same
results as the op's Python front in every case, no Python frame on a kept weight's call, and the Python front
where it cannot be built; torch.compile traces the Python front in its place."""

import ctypes
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
CAN_BUILD_PROBE = CAN_BUILD and shutil.which("g++") is not None
needs_cxx = pytest.mark.skipif(not CAN_BUILD_PROBE, reason="no C++ compiler (g++) here: the front without its probe")


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


def _served_at_three_rows(monkeypatch) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, w): a 96 x 64 weight whose shape a table entry serves at 3 rows, and an x of 6 rows, fp16."""
    monkeypatch.setattr(ops, "_eager_margin_us", lambda backend: ops.EAGER_MIN_SAVING_US)  # (as on a GPU host)
    spec = KernelSpec(block_m=32, block_n=32, block_k=32, stages=2)
    ops.set_table(TunedTable([TunedEntry(problem=GemmProblem(m=3, n=96, k=64, layout="NT"), spec=spec,
                                         kernel_ms=0.1, baselines_ms={"torch": 0.2}, gpu="")]))
    return torch.randn(6, 64).half(), torch.randn(96, 64).half()


@needs_c
def test_a_weight_served_at_other_row_counts_runs_torch_in_c(monkeypatch):
    """A weight whose shape a kernel serves at 3 rows, called with 6: kept with its shape's plan, and from its
    second call on the C front reads x's element count in the plan's torch counts and calls torch itself."""
    x, w = _served_at_three_rows(monkeypatch)
    with torch.no_grad():
        cudal2.linear(x, w)
        known = ops._torch_weights.get(id(w))
        assert known is not None and known is not ops._EVERY_CALL and x.numel() in known.to_torch
        entered, c_calls = _profile(cudal2.linear, x, w)
        assert torch.equal(cudal2.linear(x, w), F.linear(x, w))
    assert entered == [] and c_calls == ["linear"], (entered, c_calls)


@needs_c
@pytest.mark.parametrize("probe", [False, pytest.param(True, marks=needs_cxx)], ids=["bindings", "probe"])
def test_the_front_reads_a_plan_s_count_sets_at_their_slots_and_anything_else_by_getattr(probe, fresh_probe,
                                                                                         monkeypatch):
    """Where a weight's kept entry is a _Plan, the C front reads its count sets at their __slots__ offsets (and,
    with the probe, keeps recent counts' ints): the same decisions as getattr's, whatever sets the slots hold now,
    with entries of other types (their sets behind properties) between, and over many counts whose ints share the
    kept places. Calls are taken for captured ones, so a count in the eager set goes on to the eager path."""
    if probe:
        op_front.attach_probe(wait=True)
        assert op_front.probe_state() == "bound"
    class Counted:  # an entry of another type: its sets behind properties, read by getattr
        def __init__(self, to_torch, to_torch_eager):
            self._sets = (to_torch, to_torch_eager)
        to_torch = property(lambda self: self._sets[0])
        to_torch_eager = property(lambda self: self._sets[1])

    rest = []
    ops._rebind_front(eager_rest=lambda x, w, b, known, numel: rest.append(numel) or F.linear(x, w, b),
                      capture_test=lambda x: True)
    w, v = torch.randn(8, 16), torch.randn(8, 16)
    counts = [16 * m for m in range(1, 41)]  # 40 counts, 8 kept places
    plan = ops._Plan(set(), set(), set(), set(counts[::2]), set(), set(counts[1::4]))
    other = Counted(set(counts[1::2]), set())
    monkeypatch.setitem(ops._torch_weights, id(w), plan)
    monkeypatch.setitem(ops._torch_weights, id(v), other)
    try:
        with torch.no_grad():
            for _ in range(2):
                for n in counts:
                    x = torch.randn(n // 16, 16)
                    for weight, entry in ((w, plan), (v, other)):
                        before = len(rest)
                        assert torch.equal(cudal2.linear(x, weight), F.linear(x, weight))
                        to_torch = n in entry.to_torch
                        assert (len(rest) == before) == to_torch, (n, type(entry).__name__)
                        assert to_torch or rest[-1] == n
            plan.to_torch, plan.to_torch_eager = {16}, set()  # slots set anew: read anew
            before = len(rest)
            cudal2.linear(torch.randn(1, 16), w)
            cudal2.linear(torch.randn(2, 16), w)
            assert rest[before:] == [32]
    finally:
        ops._rebind_front(eager_rest=ops._eager_linear, capture_test=None)


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


@needs_c
@pytest.mark.parametrize("captures", [False, True])
def test_a_weight_kept_unless_captured_runs_torch_in_c_without_its_count(captures):
    """A weight the op keeps as _UNLESS_CAPTURED: outside a capture the C front calls torch without reading x's
    count; where a capture may record the call, the eager path, told the weight's entry and no count."""
    called = []

    class X:
        def numel(self):
            raise AssertionError("x's count was read")

    w = torch.empty(2, 6)
    ops._torch_weights[id(w)] = ops._UNLESS_CAPTURED
    ops._rebind_front(torch_linear=lambda *a: called.append("torch"),
                      eager_rest=lambda x_, w_, b, known, numel: called.append((known, numel)),
                      capture_test=lambda t: captures)
    try:
        cudal2.linear(X(), w)
    finally:
        ops._rebind_front(torch_linear=ops._F_linear, eager_rest=ops._eager_linear, capture_test=None)
        ops._torch_weights.pop(id(w))
    assert called == ([(ops._UNLESS_CAPTURED, None)] if captures else ["torch"])


class _Plan:
    to_torch, to_torch_eager = {12}, {24}


class _X:
    """A stand-in for x whose answers the bindings would give: asking them is recorded."""

    def __init__(self, asked):
        self.asked = asked

    def numel(self):
        self.asked.append("numel")
        return self.count

    def get_device(self):
        self.asked.append("get_device")
        return 0


@needs_c
@pytest.mark.parametrize("count,probed_count,probed_uncaptured,to,asked", [
    (12, 12, -1, "torch", []),  # the probe's count: the bindings are not asked
    (12, -1, -1, "torch", ["numel"]),  # it cannot tell: x.numel() is
    (5, 5, -1, "the eager path", []),
    (24, 24, 1, "torch", []),  # a graph-only count, no capture: the probe tells, nothing is asked
    (24, 24, 0, "the eager path", []),  # a capture may record it: the eager path asks
    (24, 24, -1, "the eager path", ["get_device"])])  # it cannot tell: the bindings are asked (here: a capture)
def test_the_probe_answers_before_the_bindings(count, probed_count, probed_uncaptured, to, asked):
    """With the probe bound (op_front_probe.cpp's functions, here stand-ins called through their addresses), the C
    front takes its count and its capture answer, and asks torch's bindings only where it answers -1."""
    probe_numel = ctypes.CFUNCTYPE(ctypes.c_longlong, ctypes.py_object)(lambda x: probed_count)
    probe_uncaptured = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object)(lambda x: probed_uncaptured)
    address = lambda fn: ctypes.cast(fn, ctypes.c_void_p).value  # noqa: E731
    called, answers = [], []
    x, w = _X(answers), torch.empty(2, 6)
    x.count = count
    ops._torch_weights[id(w)] = _Plan()
    ops._rebind_front(torch_linear=lambda *a: called.append("torch"),
                      eager_rest=lambda x_, w_, b, known, numel: called.append(("the eager path", numel)),
                      raw_stream=lambda device: 7, capturing=lambda: True,
                      numel_probe=address(probe_numel), capture_probe=address(probe_uncaptured))
    try:
        cudal2.linear(x, w)
    finally:
        ops._rebind_front(torch_linear=ops._F_linear, eager_rest=ops._eager_linear, raw_stream=ops._raw_stream,
                          capturing=ops._capturing, numel_probe=0, capture_probe=0,
                          linear_probe=0)
        ops._torch_weights.pop(id(w))
    assert called == (["torch"] if to == "torch" else [("the eager path", count)]) and answers == asked


@pytest.fixture
def fresh_probe(monkeypatch):
    """The probe's state as in a process that never attached it; its bindings cleared afterwards."""
    monkeypatch.setattr(op_front, "_probe", {})
    yield
    if ops._rebind_front is not None:
        ops._rebind_front(numel_probe=0, capture_probe=0, linear_probe=0)


@needs_cxx
@needs_c
def test_the_probe_builds_and_reads_what_torch_answers(fresh_probe, monkeypatch):
    """The real probe, compiled against this torch: x's count and a CPU call's capture answer as torch gives them,
    -1 where it must not answer (a subclass, not a tensor, a device without CUDA streams); bound, a weight served
    at other row counts runs torch from C, its result F.linear's."""
    bindings = op_front.attach_probe(wait=True)
    assert op_front.probe_state() == "bound" and set(bindings) == {"numel_probe", "capture_probe", "linear_probe"}
    numel = ctypes.CFUNCTYPE(ctypes.c_longlong, ctypes.py_object)(bindings["numel_probe"])
    uncaptured = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object)(bindings["capture_probe"])
    for t in (torch.randn(6, 64), torch.randn(2, 3, 64).half(), torch.randn(0, 64),
              torch.nn.Parameter(torch.randn(5, 7)), torch.randn(8, 8).t()):
        assert numel(t) == t.numel() and uncaptured(t) == 1
    subclass = torch.randn(6, 64).as_subclass(type("Logged", (torch.Tensor,), {}))
    for other in (subclass, 12, None):
        assert numel(other) == -1 and uncaptured(other) == -1
    assert uncaptured(torch.empty(3, 4, device="meta")) == -1

    x, w = _served_at_three_rows(monkeypatch)
    with torch.no_grad():
        cudal2.linear(x, w)
        entered, c_calls = _profile(cudal2.linear, x, w)
        assert torch.equal(cudal2.linear(x, w), F.linear(x, w))
    assert entered == [] and c_calls == ["linear"], (entered, c_calls)


def _the_front_raises_f_linear_s_error(x, w) -> None:
    """cudal2.linear(x, w), w kept for every call (the front's torch call, through the probe where bound), raises
    what F.linear raises: the probe leaves a failing call to F.linear, which runs it again."""
    with pytest.raises(RuntimeError) as torchs:
        F.linear(x, w)
    ops._torch_weights[id(w)] = ops._EVERY_CALL
    try:
        with pytest.raises(RuntimeError) as fronts:
            cudal2.linear(x, w)
    finally:
        ops._torch_weights.pop(id(w))
    assert str(fronts.value) == str(torchs.value)


@needs_cxx
@needs_c
def test_the_probe_runs_torch_s_linear_and_leaves_overrides_to_f_linear(fresh_probe):
    """The probe's F.linear (at::linear without the binding's parse): F.linear's result and gradients for plain
    tensors and Parameters; no answer (null, no error) for a tensor subclass, under a torch function mode, or where
    at::linear raises, where the front then calls F.linear: the override decides, torch's own error is raised."""
    bindings = op_front.attach_probe(wait=True)
    linear = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object, ctypes.py_object, ctypes.py_object)(
        bindings["linear_probe"])
    # (read as an address: ctypes cannot take a null object without an error as its result)
    address = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.py_object, ctypes.py_object)(
        bindings["linear_probe"])
    x, b = torch.randn(6, 64), torch.randn(96)
    w = torch.nn.Parameter(torch.randn(96, 64))
    assert torch.equal(linear(x, w, None), F.linear(x, w)) and torch.equal(linear(x, w, b), F.linear(x, w, b))
    linear(x, w, b).sum().backward()
    assert torch.equal(w.grad, x.sum(0).expand(96, 64))
    subclass = x.as_subclass(type("Logged", (torch.Tensor,), {}))
    bad = torch.randn(6, 5)
    assert address(subclass, w, None) is None and address(12, w, None) is None and address(bad, w, None) is None
    _the_front_raises_f_linear_s_error(bad, w)

    class Seen(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    seen = []
    with Seen():
        assert address(x, w, None) is None
    ops._torch_weights[id(w)] = ops._EVERY_CALL  # the front's own torch call, the probe bound: the mode sees it
    try:
        with torch.no_grad(), Seen():
            got = cudal2.linear(x, w)
    finally:
        ops._torch_weights.pop(id(w))
    assert seen == [F.linear] and torch.equal(got, F.linear(x, w)), seen


@pytest.mark.gpu
def test_gpu_the_probe_s_linear_is_f_linear_on_cuda_tensors(fresh_probe):
    """On a GPU, where the probe's linear holds the GIL: F.linear's result in every float dtype, with and without
    a bias, its gradients, inside a CUDA graph's capture as outside; no answer where at::linear raises (a shape
    that does not match, x on the CPU and the weight on the GPU), and then the front raises torch's error."""
    bindings = op_front.attach_probe(wait=True)
    assert bindings is not None, op_front.probe_state()
    linear = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.py_object, ctypes.py_object, ctypes.py_object)(
        bindings["linear_probe"])
    address = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.py_object, ctypes.py_object)(
        bindings["linear_probe"])
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        x = torch.randn(33, 256, device="cuda", dtype=dtype)
        w, b = torch.randn(96, 256, device="cuda", dtype=dtype), torch.randn(96, device="cuda", dtype=dtype)
        assert torch.equal(linear(x, w, b), F.linear(x, w, b)) and torch.equal(linear(x, w, None), F.linear(x, w))
    x = torch.randn(33, 256, device="cuda", requires_grad=True)
    w = torch.nn.Parameter(torch.randn(96, 256, device="cuda"))
    linear(x, w, None).square().sum().backward()
    ours = x.grad.clone(), w.grad.clone()
    x.grad, w.grad = None, None
    F.linear(x, w).square().sum().backward()
    assert torch.equal(ours[0], x.grad) and torch.equal(ours[1], w.grad)
    with torch.no_grad():
        graph, y = torch.cuda.CUDAGraph(), None
        xs = torch.randn(33, 256, device="cuda", dtype=torch.float16)
        ws = torch.randn(96, 256, device="cuda", dtype=torch.float16)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            linear(xs, ws, None)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph):
            y = linear(xs, ws, None)
        xs.copy_(torch.randn_like(xs))
        graph.replay()
        assert torch.equal(y, F.linear(xs, ws))
        bad, cpu_x = torch.randn(6, 5, device="cuda"), torch.randn(6, 256)
        assert address(bad, w, None) is None and address(cpu_x, w, None) is None
        _the_front_raises_f_linear_s_error(bad, w)


@pytest.mark.gpu
def test_gpu_the_probe_tells_a_capture_and_a_captured_call_takes_the_kernel(fresh_probe, monkeypatch):
    """On a GPU: the probe answers 'uncaptured' on the default stream and on a side stream, 'may be captured'
    inside a CUDA graph's capture; bound, a weight served only in graphs (its kernel's saving below the eager
    margin) runs torch eagerly (then kept as _UNLESS_CAPTURED: the probe's capture test alone) and the Triton kernel
    when captured, its replay following the input."""
    pytest.importorskip("triton")
    bindings = op_front.attach_probe(wait=True)
    assert bindings is not None, op_front.probe_state()
    uncaptured = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object)(bindings["capture_probe"])
    numel = ctypes.CFUNCTYPE(ctypes.c_longlong, ctypes.py_object)(bindings["numel_probe"])
    x = torch.randn(64, 256, device="cuda", dtype=torch.float16)
    side, graph, inside = torch.cuda.Stream(), torch.cuda.CUDAGraph(), []
    with torch.cuda.stream(side):
        on_side = uncaptured(x)
    with torch.cuda.graph(graph):
        inside.append(uncaptured(x))
        x.mul(2)
    assert (numel(x), uncaptured(x), on_side, inside) == (64 * 256, 1, 1, [0])

    monkeypatch.setenv(ops.ENV_OP_BACKENDS, "triton")
    monkeypatch.setattr(ops, "_eager_margin_us", lambda backend: 1000.0)  # the kernel's 0.5 us saving: graphs only
    spec = KernelSpec(block_m=64, block_n=64, block_k=32, stages=3, num_warps=4)
    ops.set_table(TunedTable([TunedEntry(problem=GemmProblem(m=64, n=384, k=256, layout="NT"), spec=spec,
                                         kernel_ms=0.010, baselines_ms={"torch": 0.0105}, gpu="")]))
    w = torch.randn(384, 256, device="cuda", dtype=torch.float16) / 16
    with torch.no_grad():
        for _ in range(2):  # the second: from the C front, x's count read by the probe
            assert torch.equal(cudal2.linear(x, w), F.linear(x, w))
        assert ops._torch_weights[id(w)] is ops._UNLESS_CAPTURED  # (its one graph count built)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = cudal2.linear(x, w)
        assert ops._graph_launchers[ops._linear_key(x, w, None)].backend == "triton"
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
    want = F.linear(x.float(), w.float())
    assert float((out.float() - want).norm() / want.norm()) < 1e-3


@needs_c
def test_a_probe_that_cannot_be_built_leaves_the_front_asking_the_bindings(fresh_probe, tmp_path, monkeypatch):
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-g++"))
    monkeypatch.setenv("CUDAL2_CACHE_DIR", str(tmp_path / "cache"))
    assert op_front.attach_probe(wait=True) is None
    assert op_front.probe_state().startswith("failed: RuntimeError: no-such-g++ could not run"), op_front.probe_state()
    x, w = torch.randn(6, 64), torch.randn(96, 64)
    assert torch.equal(cudal2.linear(x, w), F.linear(x, w))


def test_the_op_starts_the_probe_for_a_cuda_process_s_kept_weights(monkeypatch):
    """The first plan of a weight shape, served at some row counts (whose calls the front's row test reads) or at
    none (whose every call the front sends to torch through the probe), starts the probe's build where CUDA is,
    and not where it is not."""
    started = []
    monkeypatch.setattr(op_front, "attach_probe", lambda wait=False: started.append(wait))
    spec = KernelSpec(block_m=32, block_n=32, block_k=32, stages=2)
    ops.set_table(TunedTable([TunedEntry(problem=GemmProblem(m=3, n=96, k=64, layout="NT"), spec=spec,
                                         kernel_ms=0.1, baselines_ms={"torch": 0.2}, gpu="")]))
    for available, shape, expected in ((False, (96, 64), []), (True, (80, 64), [False]),
                                       (True, (96, 64), [False, False])):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
        ops._plans["linear"].pop(shape, None)
        ops._plan("linear", shape)
        assert started == expected, (available, shape)


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
    linear, rebind = op_front.front(ops._python_linear, ops._eager_linear, {}, object(), object(), F.linear,
                                    torch.compiler, "_is_compiling_flag", "to_torch", "to_torch_eager",
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
    linear, rebind = op_front.front(ops._python_linear, ops._eager_linear, {}, object(), object(), F.linear,
                                    torch.compiler, "_is_compiling_flag", "to_torch", "to_torch_eager",
                                    lambda device: 0, lambda: False)
    assert linear is ops._python_linear and rebind is None and time.monotonic() - start < 10
    assert not list((tmp_path / "cache").rglob("*.tmp"))


@needs_c
def test_the_front_is_made_once_a_process():
    with pytest.raises(RuntimeError, match="made already"):
        op_front.front(ops._python_linear, ops._eager_linear, {}, object(), object(), F.linear, torch.compiler,
                       "_is_compiling_flag", "to_torch", "to_torch_eager", lambda device: 0, lambda: False)
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
