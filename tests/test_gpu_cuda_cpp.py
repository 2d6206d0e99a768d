"""cuda_cpp backend on a GPU (sm_80 code; an H100 runs it compiled for sm_90): the CPU tests'
covering set of kernels, each on the shape it was rendered for, on a larger and on a tiny shape of
the same class and variant (one compile serves them all), through the evaluator's own correctness
checks (several seeds into the same storage, NaN-poisoned and guarded output, finite values, error
against an fp32 reference, stream order); then a search over cuda_cpp and triton at sm_80.

    CUDAL2_GPU_TESTS=1 python -m pytest -m gpu tests/test_gpu_cuda_cpp.py -s -q
"""

from __future__ import annotations

import pytest

from cudal2 import GemmProblem, get_backend
from cudal2.codegen.cuda_cpp import variant, vector_width
from test_cuda_cpp import COVERING, covering_case

pytestmark = pytest.mark.gpu
ROWS: list[tuple] = []


@pytest.fixture(scope="module", autouse=True)
def _compiled_ahead():
    """nvcc takes 20-45 s a kernel: compile the covering set for this GPU in parallel first, so the
    tests below find every cubin in the cache."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    be = get_backend("cuda_cpp")
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 2)) as pool:
        list(pool.map(lambda name: be.precompile(be.render(*covering_case(name))), [n for n, _, _ in COVERING]))


def _same_width_at_least(x: int, target: int) -> int:
    """The smallest extent >= target with the vector width of x (so the variant is kept)."""
    want = vector_width(x)
    return next(v for v in range(max(1, target), target + 16) if vector_width(v) == want)


def _shapes(p: GemmProblem) -> list[GemmProblem]:
    """p, a shape about 1.7x larger and one tiny one (smaller than a tile), all of p's variant."""
    bigger = p.replace(**{d: _same_width_at_least(getattr(p, d), getattr(p, d) * 17 // 10) for d in "mnk"})
    tiny = p.replace(**{d: _same_width_at_least(getattr(p, d), 3) for d in "mnk"})
    out = [p, bigger, tiny]
    assert all(variant(x) == variant(p) for x in out)
    return out


@pytest.mark.parametrize("name", [n for n, _, _ in COVERING])
def test_covering_kernel_passes_the_evaluators_checks(name):
    import torch

    from cudal2.bench.correctness import AccuracyPolicy, check_kernel

    be = get_backend("cuda_cpp")
    p, s = covering_case(name)
    kernel = be.compile(be.render(p, s))
    res = kernel.resources["cudal2_gemm"]
    for shape in _shapes(p):
        assert be.variant_key(shape, s) == be.variant_key(p, s)
        if be.supports(shape, s):  # (a tiny K has fewer k-tiles than split_k: empty slices store zeros)
            assert be.render(shape, s).text == kernel.source.text
        c = check_kernel(kernel, shape, device="cuda", policy=AccuracyPolicy(), sync=torch.cuda.synchronize)
        ROWS.append((name, shape.label(), f"{c.rel_error:.2e}", f"{c.bound:.2e}", res.registers))


def test_epilogue_in_place_and_misaligned_operands():
    """c given: the kernel reads it (beta) and writes the result into it; a view that starts off the
    16-byte boundary the variant reads in is refused with a ValueError."""
    import torch

    be = get_backend("cuda_cpp")
    p, s = covering_case("nn-bf16-pad16-bias")
    kernel = be.compile(be.render(p, s))
    g = torch.Generator(device="cuda").manual_seed(3)
    a = torch.randn(p.m, p.k, device="cuda", generator=g).bfloat16()
    b = torch.randn(p.k, p.n, device="cuda", generator=g).bfloat16()
    c = torch.randn(p.m, p.n, device="cuda", generator=g).bfloat16()
    bias = torch.randn(p.n, device="cuda", generator=g).bfloat16()
    ref = torch.relu(a.float() @ b.float() + c.float() + bias.float())
    out = kernel(a, b, c, bias)
    assert out.data_ptr() == c.data_ptr()
    assert ((out.float() - ref).norm() / ref.norm()).item() < 1e-2
    shifted = torch.empty(p.m * p.k + 1, device="cuda", dtype=torch.bfloat16)[1:].view(p.m, p.k)
    with pytest.raises(ValueError, match="aligned"):
        kernel(shifted, b, c, bias)


def test_search_uses_cuda_cpp_beside_triton_at_sm_80(tmp_path):
    """A short search with both backends on the sm_80 code path: the cuda_cpp candidates compile,
    pass the checks and are timed (which backend wins is what `cudal2 compare` is for)."""
    import cudal2

    res = cudal2.search((1024, 1024, 1024), layout="NT", backends=("triton", "cuda_cpp"), arch="sm_80",
                        proposer="rules", budget=8, store=str(tmp_path / "store.db"), progress=False)
    assert res.best is not None
    mine = [r for r in res.history if r.spec.backend == "cuda_cpp"]
    assert mine and any(r.status == "ok" for r in mine), [(r.status, r.reason) for r in mine]


def teardown_module():
    if ROWS:
        print("\ncuda_cpp on the GPU: kernel | shape | rel. error | bound | registers")
        for row in ROWS:
            print(" | ".join(map(str, row)))
