"""TritonKernel.bind on a GPU: after the first call (Triton's JIT) a bound run relaunches the compiled
kernels directly (cudal2.codegen.triton_launch). Each kernel is called many times with fresh operands
and checked against torch; the host time per call of the JIT path, the direct path and F.linear is
printed, not asserted.

    CUDAL2_GPU_TESTS=1 python3 -m pytest -q -m gpu tests/test_gpu_triton_direct_launch.py -s
"""

from __future__ import annotations

import time

import pytest

from cudal2 import GemmProblem, KernelSpec, get_backend
from cudal2.codegen import triton_launch
from cudal2.ir import Epilogue, arch_from_capability

pytestmark = pytest.mark.gpu

# F.linear's layout (x @ W^T): B is column-major
CASES = {
    "plain": (GemmProblem(m=256, n=1024, k=1024, layout="NT"),
              dict(block_m=128, block_n=128, block_k=64, num_warps=8, stages=3)),
    "splitk-dynamic-bias": (GemmProblem(m=64, n=512, k=4096, layout="NT", epilogue=Epilogue(bias=True)),
                            dict(block_m=64, block_n=64, block_k=64, num_warps=4, stages=4, decomposition="split_k",
                                 split_k=4, shape_specialization="dynamic")),
    "tma": (GemmProblem(m=512, n=1024, k=1024, layout="NT"),
            dict(block_m=128, block_n=128, block_k=64, num_warps=8, stages=4, load_path="tma")),
}
CALLS = 50


def _host_us(call, n=200, repeats=7):
    """Host microseconds per call: n calls between two synchronizations (fewer launches than the
    GPU's queue holds, so the host never waits on the GPU), the best of repeats."""
    import torch

    best = float("inf")
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(n):
            call()
        best = min(best, (time.perf_counter() - start) / n * 1e6)
        torch.cuda.synchronize()
    return best


def _operands(problem, seed):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    m, n, k = problem.shape
    x = torch.randn(m, k, device="cuda", generator=g).half()
    w = torch.randn(n, k, device="cuda", generator=g).half()
    bias = torch.randn(n, device="cuda", generator=g).half() if problem.epilogue.bias else None
    return x, w, bias


@pytest.mark.parametrize("case", list(CASES))
def test_bound_run_launches_the_compiled_kernels_directly(case, monkeypatch):
    import torch
    import torch.nn.functional as F
    from triton.runtime.jit import JITFunction

    arch = arch_from_capability(*torch.cuda.get_device_capability())
    problem, kw = CASES[case]
    if kw.get("load_path") == "tma" and arch == "sm_80":
        pytest.skip("TMA needs sm_90")
    backend = get_backend("triton")
    spec = KernelSpec(arch=arch, **kw)
    assert backend.supports(problem, spec)
    kernel = backend.compile(backend.render(problem, spec))
    m, n, k = problem.shape
    device = torch.device("cuda", torch.cuda.current_device())

    jit_runs = []
    jit_run = JITFunction.run
    monkeypatch.setattr(JITFunction, "run", lambda self, *a, **kw: jit_runs.append(1) or jit_run(self, *a, **kw))
    run = kernel.bind(m, n, k, device)
    for call in range(CALLS):
        x, w, bias = _operands(problem, call)
        d = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
        run(x, w, d, bias)
        ref = x.float() @ w.float().t() + (bias.float() if bias is not None else 0)
        err = ((d.float() - ref).norm() / ref.norm()).item()
        assert err < 5e-3, f"{case}, call {call}: relative error {err:.2e}"
    monkeypatch.undo()
    kernels = 2 if spec.decomposition == "split_k" else 1
    assert run.compiled, f"{case}: no compiled kernels kept (Triton {__import__('triton').__version__})"
    assert len(jit_runs) == kernels, f"{case}: {len(jit_runs)} JIT launches in {CALLS} calls"
    assert run.compiled.launches == CALLS - 1

    x, w, bias = _operands(problem, 0)
    d = torch.empty(m, n, dtype=torch.float16, device="cuda")
    direct_us = _host_us(lambda: run(x, w, d, bias))
    monkeypatch.setattr(triton_launch, "triton_runtime", lambda: None)  # a bound run that keeps the JIT path
    jit_only = kernel.bind(m, n, k, device)
    monkeypatch.undo()
    jit_us = _host_us(lambda: jit_only(x, w, d, bias))
    assert jit_only.compiled is False
    linear_us = _host_us(lambda: F.linear(x, w, bias))
    print(f"\n{case} {problem.label()}: host us per call: JIT {jit_us:.1f}, direct {direct_us:.1f}, "
          f"F.linear {linear_us:.1f}")
