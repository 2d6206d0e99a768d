"""The C++ launch path of compiled graphs (cudal2.codegen.native_launch): built with g++ against this torch and
apache-tvm-ffi, exercised on CPU tensors with a TVM-FFI function written in Python that stands in for a
kernel (it records its integer arguments and writes the product where D's address points)."""

import ctypes

import pytest
import torch

import cudal2
from cudal2 import GemmProblem, KernelSpec, ops
from cudal2.codegen import native_launch
from cudal2.store.table import TunedEntry, TunedTable

tvm_ffi = pytest.importorskip("tvm_ffi")
GPU = "NVIDIA H100 80GB HBM3"


class FakeKernel:
    """What the op binds: native_args() names a TVM-FFI function, as CuteDslKernel's does."""

    def __init__(self, swap=False, workspace=0):
        self.calls, self.swap, self.workspace = [], swap, workspace
        self.operands: dict[int, torch.Tensor] = {}  # address -> tensor, for the stand-in kernel to read
        self.function = tvm_ffi.convert(self._run)

    def _run(self, *args):
        self.calls.append(args)
        pa, pb, _pc, pd, pbias, _w, _flags, km, kn, kk, _stream = args
        a, b = self.operands[pa], self.operands[pb]  # the kernel's A and B (swapped: the caller's B and A)
        a2, b2 = a.reshape(-1, kk).float(), b.reshape(-1, kk).float()
        product = a2 @ b2.t()  # the caller's x (M, K) and weight (N, K): D = A @ B^T
        if pbias != pd:
            product += self.operands[pbias].float()
        out = torch.frombuffer((ctypes.c_char * (km * kn * 2)).from_address(pd), dtype=torch.float16)
        out.view(km, kn).copy_(product.half())

    def native_args(self, m, n, k, device):
        km, kn = (n, m) if self.swap else (m, n)
        return native_launch.NativeArgs(self.function, self.workspace, self.workspace, km, kn, k, self.swap)

    def bind(self, m, n, k, device):  # the eager launcher, through the same function
        def run(a, b, d, bias):
            self.operands.update({a.data_ptr(): a, b.data_ptr(): b})
            pd = d.data_ptr()
            self.function(a.data_ptr(), b.data_ptr(), pd, pd, pd, pd, pd, m, n, k, 0)
        return run


@pytest.fixture(scope="module")
def extension():
    import os
    import shutil

    if not (os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")):
        pytest.skip("no C++ compiler on PATH: the native launch path cannot be built here")
    if native_launch.library() is None:
        pytest.fail("the native launch extension did not build (g++ and apache-tvm-ffi are test requirements)")
    return native_launch.library()


def _bind(kernel, call, extension):
    return native_launch.bind(call, torch.float16, kernel.native_args(*call[:3], None), torch.device("cpu"))


def test_a_bound_slot_calls_the_kernel_with_the_operands_addresses_and_extents(extension):
    kernel = FakeKernel(workspace=4096)
    x, w = torch.randn(2, 8, 64).half(), torch.randn(48, 64).half()
    kernel.operands = {x.data_ptr(): x, w.data_ptr(): w}
    slot = _bind(kernel, (16, 48, 64, "float16", "NT", False, "cpu", None), extension)
    out = torch.ops.cudal2.linear_slot(x, w, None, slot)
    assert out.shape == (2, 8, 48) and out.dtype == torch.float16
    (args,) = kernel.calls
    assert args[:4] == (x.data_ptr(), w.data_ptr(), out.data_ptr(), out.data_ptr())
    assert args[4] == out.data_ptr()  # no bias: its pointer points at D, never read
    assert args[5:] == (4096, 4096, 16, 48, 64, 0)  # workspace, flags, extents, the stream (none on CPU)
    torch.testing.assert_close(out.float(), torch.nn.functional.linear(x.float(), w.float()), atol=2e-2, rtol=2e-2)
    # bound once per class: the same call class gets the same slot back
    assert _bind(kernel, (16, 48, 64, "float16", "NT", False, "cpu", None), extension) == slot


def test_swap_ab_and_a_bias_reach_the_kernel(extension):
    kernel = FakeKernel(swap=True)
    x, w, bias = torch.randn(8, 64).half(), torch.randn(48, 64).half(), torch.randn(48).half()
    kernel.operands = {x.data_ptr(): x, w.data_ptr(): w, bias.data_ptr(): bias}
    kernel.operands[bias.data_ptr()] = bias.view(48, 1)  # with swap_ab the kernel's D is (N, M): bias per row
    slot = _bind(kernel, (8, 48, 64, "float16", "NT", True, "cpu", None), extension)
    out = torch.ops.cudal2.linear_slot(x, w, bias, slot)
    (args,) = kernel.calls
    assert args[:2] == (w.data_ptr(), x.data_ptr()) and args[4] == bias.data_ptr() and args[7:10] == (48, 8, 64)
    assert out.shape == (8, 48)


@pytest.mark.parametrize("case", ["rows", "dtype", "layout", "bias", "unaligned", "unbound"])
def test_a_call_its_slot_was_not_bound_for_runs_torch(extension, case):
    kernel = FakeKernel()
    slot = _bind(kernel, (12, 40, 64, "float16", "NT", False, "cpu", None), extension)
    x, w, bias = torch.randn(12, 64).half(), torch.randn(40, 64).half(), None
    if case == "rows":
        x = torch.randn(13, 64).half()
    elif case == "dtype":
        x, w = x.bfloat16(), w.bfloat16()
    elif case == "layout":
        w = torch.randn(64, 40).half().t()  # weight.T contiguous: layout NN, not the slot's NT
    elif case == "bias":
        bias = torch.randn(40).half()
    elif case == "unaligned":
        x = torch.randn(12 * 64 + 1).half()[1:].view(12, 64)  # 2 bytes past an aligned address
    elif case == "unbound":
        slot = native_launch.MAX_SLOTS - 1
    out = torch.ops.cudal2.linear_slot(x, w, bias, slot)
    assert kernel.calls == []
    torch.testing.assert_close(out, torch.nn.functional.linear(x, w, bias))


def test_matmul_slot_takes_the_b_operand_as_given(extension):
    kernel = FakeKernel()
    a, w = torch.randn(16, 64).half(), torch.randn(32, 64).half()
    kernel.operands = {a.data_ptr(): a, w.data_ptr(): w}
    slot = _bind(kernel, (16, 32, 64, "float16", "NT", False, "cpu", None), extension)
    out = torch.ops.cudal2.matmul_slot(a, w.t(), slot)  # b = w.t(): layout T, the slot's
    assert len(kernel.calls) == 1 and out.shape == (16, 32)
    torch.testing.assert_close(out.float(), a.float() @ w.float().t(), atol=2e-2, rtol=2e-2)
    torch.ops.cudal2.matmul_slot(a, w.t().contiguous(), slot)  # layout N: torch's
    assert len(kernel.calls) == 1


@pytest.fixture
def served_on_cpu(monkeypatch):
    """CPU calls classed as an H100's whose table entry is a FakeKernel: the traced decision, the slot
    binding and the launch run end to end on the CPU."""
    kernel = FakeKernel()
    problem_of = ops._problem_of
    monkeypatch.setenv(ops.ENV_OP_BACKENDS, "cute_dsl")
    monkeypatch.setattr(ops, "_problem_of", lambda call: None if call is None else problem_of(
        call[:6] + ("cuda", call[7])))
    monkeypatch.setattr(ops, "_visible_gpus", lambda: [("cpu", None, GPU)])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: GPU)
    monkeypatch.setattr(ops, "tuned_kernel", lambda problem, gpu, min_saving_us=None: kernel if ops._op_entry(
        problem, gpu, min_saving_us) is not None else None)
    monkeypatch.setattr(ops, "_compiled", lambda entry, problem: kernel)  # (the eager launcher's compile)
    problem = GemmProblem(m=24, n=48, k=64, layout="NT")
    spec = KernelSpec(backend="cute_dsl", block_m=128, block_n=128, block_k=64, num_warps=12, stages=4,
                      warp_specialization="cooperative", load_path="tma", persistent=True)
    # a kernel whose saving is enough for a compiled graph's native path, not for an eager call
    monkeypatch.setattr(ops, "EAGER_MIN_SAVING_US", ops.NATIVE_TRACED_MIN_SAVING_US + 10.0)
    saving_ms = (ops.NATIVE_TRACED_MIN_SAVING_US + 5.0) / 1e3
    ops.set_table(TunedTable([TunedEntry(problem=problem, spec=spec, kernel_ms=0.1,
                                         baselines_ms={"torch": 0.1 + saving_ms}, gpu="")]))
    yield kernel
    ops.set_table(None)


def _compiled_targets(f, *args):
    targets = []

    def backend(gm, example_inputs):
        targets.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm.forward

    out = torch.compile(f, backend=backend, fullgraph=True)(*args)
    return out, targets


def test_a_compiled_graph_calls_the_slot_op_and_its_kernel(extension, served_on_cpu):
    x, w = torch.randn(4, 6, 64).half(), torch.randn(48, 64).half()
    served_on_cpu.operands = {x.data_ptr(): x, w.data_ptr(): w}
    out, targets = _compiled_targets(lambda x, w: cudal2.linear(x, w), x, w)
    assert targets == ["cudal2.linear_slot"]
    assert len(served_on_cpu.calls) == 1
    torch.testing.assert_close(out.float(), torch.nn.functional.linear(x.float(), w.float()), atol=2e-2, rtol=2e-2)
    # inductor keeps the op in its graph, and its wrapper calls the kernel once per call
    compiled = torch.compile(lambda x, w: cudal2.linear(x, w), fullgraph=True)
    for _ in range(3):
        out = compiled(x, w)
    assert len(served_on_cpu.calls) == 4
    torch.testing.assert_close(out.float(), torch.nn.functional.linear(x.float(), w.float()), atol=2e-2, rtol=2e-2)


def test_without_a_compiler_the_graph_calls_the_python_op(served_on_cpu, monkeypatch):
    monkeypatch.setattr(native_launch, "_library", None)
    monkeypatch.setattr(native_launch, "_slots", {})
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    monkeypatch.setattr(ops, "TRACED_MIN_SAVING_US", 0.0)  # the Python op's margins, met by the kernel
    monkeypatch.setattr(ops, "EAGER_MIN_SAVING_US", 0.0)
    with pytest.warns(RuntimeWarning, match="compiled graphs call the Python op"):
        assert native_launch.library() is None
    x, w = torch.randn(24, 64).half(), torch.randn(48, 64).half()
    out, targets = _compiled_targets(lambda x, w: cudal2.linear(x, w), x, w)
    assert targets == ["cudal2.linear"]
    assert len(served_on_cpu.calls) == 1  # the Python op launched the kernel through its eager launcher
    torch.testing.assert_close(out.float(), torch.nn.functional.linear(x.float(), w.float()), atol=2e-2, rtol=2e-2)


def test_a_kernel_with_a_workspace_takes_the_python_op_whose_launches_follow_the_stream(extension, served_on_cpu,
                                                                                        monkeypatch):
    """The C++ slot does not make a launch wait for the workspace's previous stream (the Python launchers do:
    cudal2.codegen.workspace), so a split-K kernel in a compiled graph is launched through the Python op, and
    served where its saving covers that path's margin."""
    problem = GemmProblem(m=24, n=48, k=64, layout="NT")
    spec = KernelSpec(backend="cute_dsl", block_m=128, block_n=128, block_k=64, num_warps=12, stages=4,
                      warp_specialization="cooperative", load_path="tma", persistent=True, decomposition="split_k",
                      split_k=2)
    monkeypatch.setattr(ops, "EAGER_MIN_SAVING_US", 1e9)  # (no eager call serves it: the compiled graph's path)
    x, w = torch.randn(24, 64).half(), torch.randn(48, 64).half()
    for saving_us, target in ((ops.NATIVE_TRACED_MIN_SAVING_US + 5.0, str(torch._C._nn.linear)),
                              (ops.TRACED_MIN_SAVING_US + 5.0, "cudal2.linear")):
        torch._dynamo.reset()
        entry = TunedEntry(problem=problem, spec=spec, kernel_ms=0.1, baselines_ms={"torch": 0.1 + saving_us / 1e3},
                           gpu="")
        ops.set_table(TunedTable([entry]))
        assert ops._traced_min_saving_us(entry) >= ops.TRACED_MIN_SAVING_US
        out, targets = _compiled_targets(lambda x, w: cudal2.linear(x, w), x, w)
        assert targets == [target], saving_us
        torch.testing.assert_close(out.float(), torch.nn.functional.linear(x.float(), w.float()), atol=2e-2,
                                   rtol=2e-2)
    assert len(served_on_cpu.calls) == 1  # the Python op's eager launcher, once


def test_a_failed_compile_names_the_compiler_and_its_last_line(tmp_path, monkeypatch):
    fake = tmp_path / "g++"
    fake.write_text("#!/bin/sh\necho 'native_launch.cpp:1: error: something broke' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CXX", str(fake))
    monkeypatch.setenv("CUDAL2_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(RuntimeError, match=r"g\+\+ failed on native_launch.cpp: native_launch.cpp:1: error"):
        native_launch._build()


def test_disabled_by_its_environment_variable(monkeypatch):
    monkeypatch.setattr(native_launch, "_library", None)
    monkeypatch.setenv(native_launch.ENV_DISABLE, "0")
    assert native_launch.library() is None


def test_a_new_table_binds_a_class_afresh_and_old_slots_keep_their_kernel(extension):
    first, second = FakeKernel(), FakeKernel()
    call = (20, 40, 64, "float16", "NT", False, "cpu", None)
    old = _bind(first, call, extension)
    ops.set_table(TunedTable())  # (forgets the bindings)
    new = _bind(second, call, extension)
    assert new != old
    x, w = torch.randn(20, 64).half(), torch.randn(40, 64).half()
    first.operands = second.operands = {x.data_ptr(): x, w.data_ptr(): w}
    torch.ops.cudal2.linear_slot(x, w, None, old)
    torch.ops.cudal2.linear_slot(x, w, None, new)
    assert len(first.calls) == len(second.calls) == 1
    ops.set_table(None)
