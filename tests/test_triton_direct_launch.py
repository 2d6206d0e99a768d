"""TritonKernel.bind's direct launches (cudal2.codegen.triton_launch), decided without a GPU: the
rendered module's launches() as it is, its JIT kernels replaced by stand-ins that record each
launch and return a stand-in CompiledKernel whose launcher records its calls."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
import torch

from cudal2 import GemmProblem, KernelSpec, get_backend
from cudal2.codegen import triton_launch
from cudal2.codegen.triton import TritonKernel
from cudal2.ir import Epilogue

CASES = {
    "plain": (GemmProblem(m=64, n=32, k=48), KernelSpec(block_m=32, block_n=32, block_k=16, num_warps=4, stages=2)),
    "dynamic-splitk-bias": (
        GemmProblem(m=64, n=32, k=256, epilogue=Epilogue(bias=True)),
        KernelSpec(block_m=32, block_n=32, block_k=32, num_warps=4, stages=2, decomposition="split_k", split_k=2,
                   shape_specialization="dynamic")),
}


class Compiled:
    """Stands in for triton.compiler.CompiledKernel: run is the raw launcher."""

    def __init__(self, name, log):
        self.name, self.log = name, log
        self.function, self.packed_metadata = f"function of {name}", f"metadata of {name}"

    def run(self, gx, gy, gz, stream, function, packed, metadata, enter, leave, *args):
        self.log.append(("direct", self.name, (gx, gy, gz), stream, function, packed, metadata, enter, leave, args))

    def launch_metadata(self, grid, stream, *args):
        return ("launch metadata", self.name, grid, stream)


class Jit:
    """Stands in for a JITFunction: kernel[grid](*args, **kwargs) records the launch, its arguments
    bound to the real kernel's parameters, and returns the Compiled it keeps."""

    def __init__(self, real, log):
        import inspect

        self.fn, self.log, self.signature = real.fn, log, inspect.signature(real.fn)
        self.compiled = Compiled(real.fn.__name__, log)

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            params = {k: v for k, v in kwargs.items() if k in self.signature.parameters}
            bound = self.signature.bind(*args, **params)
            self.log.append(("jit", self.fn.__name__, grid, tuple(bound.arguments.values())))
            return self.compiled
        return launch


def _runtime(device=0):
    state = SimpleNamespace(device=device)
    knobs = SimpleNamespace(launch_enter_hook="enter hook", launch_exit_hook="exit hook")
    return state, triton_launch.Runtime(lambda: state.device, lambda d: 1000 + d, knobs)


def _bound(case, monkeypatch, runtime=None, compiled_fixup=None):
    """A bound run of the case's kernel over stand-in JIT kernels, and the launch log."""
    problem, spec = CASES[case]
    backend = get_backend("triton")
    source = backend.render(problem, spec)
    real = backend.module(source)
    log, jits = [], {}

    def launches(*args):
        plans = real.launches(*args)
        for kernel, *_ in plans:
            if kernel.fn.__name__ not in jits:
                jits[kernel.fn.__name__] = Jit(kernel, log)
                if compiled_fixup:
                    compiled_fixup(jits[kernel.fn.__name__].compiled)
        return [(jits[kernel.fn.__name__], *rest) for kernel, *rest in plans]

    kernel = TritonKernel(source, SimpleNamespace(launch=real.launch, launches=launches))
    kernel._interpreted = False  # as on a GPU: the direct path is open
    kernel.num_sms = 132
    monkeypatch.setattr(triton_launch, "triton_runtime", lambda: runtime)
    return problem, kernel.bind(problem.m, problem.n, problem.k, torch.device("cpu")), log


def _operands(problem, offset=0, bias=True):
    m, n, k = problem.shape
    a = torch.zeros(m * k + 8, dtype=torch.float16)[offset:offset + m * k]
    b = torch.zeros(k * n, dtype=torch.float16)
    d = torch.zeros(m * n, dtype=torch.float16)
    return a, b, d, torch.zeros(n, dtype=torch.float16) if problem.epilogue.bias and bias else None


@pytest.mark.parametrize("case", list(CASES))
def test_calls_after_the_first_launch_the_kept_compiled_kernels_with_the_jits_arguments(case, monkeypatch):
    state, runtime = _runtime()
    problem, run, log = _bound(case, monkeypatch, runtime)
    assert run.launch_path is None  # (known after a first call)
    first = _operands(problem)
    run(*first)
    jit = [entry for entry in log if entry[0] == "jit"]
    assert len(jit) == len(log) == (2 if "splitk" in case else 1)
    assert run.compiled and run.compiled.launches == 0
    log.clear()
    for _ in range(3):
        ops = _operands(problem)
        run(*ops)
        assert [entry[0] for entry in log] == ["direct"] * len(jit)
        for (_, name, grid, args), (_, dname, xyz, stream, function, packed, meta, enter, leave, dargs) in zip(jit, log):
            assert dname == name and xyz == tuple(grid) + (1,) * (3 - len(grid)) and stream == 1000
            assert (function, packed, enter, leave) == (f"function of {name}", f"metadata of {name}",
                                                        "enter hook", "exit hook")
            assert meta == ("launch metadata", name, grid, 1000)
            # the first call's argument list with this call's operands in the same places
            assert len(dargs) == len(args)
            for old, new in zip(args, dargs):
                where = [j for j, t in enumerate(first) if isinstance(old, torch.Tensor) and t is not None
                         and t.data_ptr() == old.data_ptr()]
                assert new.data_ptr() == ops[where[0]].data_ptr() if where else new is old
        log.clear()
    assert run.compiled.launches == 3
    assert run.launch_path == ("x2" if "splitk" in case else "")  # what the op times apart (launch_cost)


def test_a_call_triton_would_specialize_apart_takes_the_jit(monkeypatch):
    """The kept kernels refuse operands Triton would specialize apart (launch() without vouched: every
    operand's dtype, None-ness and alignment). A bound run's caller vouches for a, b and d (the op checks
    a and b and allocates d): its run still checks the bias, and the current device."""
    state, runtime = _runtime()
    problem, run, log = _bound("dynamic-splitk-bias", monkeypatch, runtime)
    run(*_operands(problem))
    for ops, why in ((_operands(problem, offset=1), "a not 16-byte aligned"),
                     (_operands(problem, bias=False), "None for the bias"),
                     ((_operands(problem)[0].float(), *_operands(problem)[1:]), "another dtype")):
        log.clear()
        assert run.compiled.launch(ops) is False and log == [], why
    a, b, d, bias = _operands(problem)
    log.clear()
    run(a, b, d, torch.zeros(bias.numel() + 1, dtype=bias.dtype)[1:])  # a bias off 16-byte alignment
    assert [entry[0] for entry in log] == ["jit", "jit"]
    log.clear()
    state.device = 1  # another current device
    run(*_operands(problem))
    assert [entry[0] for entry in log] == ["jit", "jit"]
    log.clear()
    state.device = 0
    run(*_operands(problem))
    assert [entry[0] for entry in log] == ["direct", "direct"]


@pytest.mark.parametrize("why", ["unknown triton", "no packed_metadata", "no function"])
def test_an_unknown_triton_api_keeps_the_jit(why, monkeypatch):
    _, runtime = _runtime()
    fixups = {"no packed_metadata": lambda c: delattr(c, "packed_metadata"),
              "no function": lambda c: setattr(c, "function", None)}
    problem, run, log = _bound("plain", monkeypatch, None if why == "unknown triton" else runtime, fixups.get(why))
    for _ in range(3):
        run(*_operands(problem))
    assert [entry[0] for entry in log] == ["jit"] * 3
    assert run.compiled is False and run.launch_path == "jit"


def test_known_versions():
    assert [triton_launch.known_version(v) for v in ("3.5.1", "3.6.0", "3.7.0+git", "3.9.0", "3.10.0", "4.0.0")] \
        == [False, True, True, True, False, False]


def test_no_launch_metadata_is_built_for_an_empty_enter_hook_chain(monkeypatch):
    empty, chain = SimpleNamespace(calls=[]), SimpleNamespace(calls=[print])  # as triton.knobs.HookChain
    for enter, metadata in ((empty, None), (chain, "built")):
        state, runtime = _runtime()
        runtime.knobs.launch_enter_hook = enter
        problem, run, log = _bound("plain", monkeypatch, runtime)
        run(*_operands(problem))
        run(*_operands(problem))
        assert log[-1][0] == "direct" and log[-1][7] is enter
        assert (log[-1][6] and "built") == metadata


def test_a_bound_run_reads_only_the_bias_address(monkeypatch):
    """A bound run's later calls check what its caller does not vouch for: one data_ptr (the bias's),
    where the specialization key reads all four operands' addresses."""
    _, runtime = _runtime()
    problem, run, log = _bound("dynamic-splitk-bias", monkeypatch, runtime)
    operands = _operands(problem)
    run(*operands)
    calls = []

    def profile(frame, event, arg):
        if event == "c_call":
            calls.append(getattr(arg, "__name__", ""))

    sys.setprofile(profile)
    try:
        run(*operands)
    finally:
        sys.setprofile(None)
    assert calls.count("data_ptr") == 1 and [entry[0] for entry in log[-2:]] == ["direct", "direct"]
    calls.clear()
    sys.setprofile(profile)
    try:
        run.compiled.launch(operands)  # not vouched: Triton's whole key
    finally:
        sys.setprofile(None)
    assert calls.count("data_ptr") == 4
