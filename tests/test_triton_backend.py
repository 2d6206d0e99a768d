"""Triton backend on the CPU: every kernel family run by Triton's interpreter (TRITON_INTERPRET=1,
set by conftest) against an fp32 PyTorch reference, plus the Kernel's input checks and the
backend's declared capabilities. Small blocks (16/32) keep the interpreter fast."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest
import torch

from cudal2 import GemmProblem, KernelSpec, SpecError, get_backend
from cudal2.codegen.triton import cache_dir
from cudal2.ir import Epilogue
from cudal2.ir.footprint import SERIAL_COUNTERS

BOUND = {"float16": 5e-3, "bfloat16": 1e-2}  # relative Frobenius error vs the fp32 reference
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:  # rendered modules go to a temporary cache
        mp.setenv("CUDAL2_CACHE_DIR", str(tmp_path_factory.mktemp("cudal2-cache")))
        yield get_backend("triton")


def operands(problem: GemmProblem, seed: int):
    """Fresh standard-normal A, B (stored as the layout says), C and bias, rounded to their dtypes."""
    g = torch.Generator().manual_seed(seed)
    dt, ct = getattr(torch, problem.dtype), getattr(torch, problem.c_dtype)
    m, n, k = problem.shape
    A = torch.randn(m, k, generator=g).to(dt)
    B = torch.randn(k, n, generator=g).to(dt)
    a = A if problem.a_row_major else A.t().contiguous().t()
    b = B if problem.b_row_major else B.t().contiguous().t()
    C = torch.randn(m, n, generator=g).to(ct)
    bias = torch.randn(n, generator=g).to(ct) if problem.epilogue.bias else None
    return a, b, C, bias


def reference(problem: GemmProblem, a, b, C, bias):
    e = problem.epilogue
    out = e.alpha * (a.float() @ b.float())
    if e.beta != 0.0:
        out = out + e.beta * C.float()
    if bias is not None:
        out = out + bias.float()
    act = {"none": lambda x: x, "relu": torch.relu, "gelu": torch.nn.functional.gelu,
           "silu": torch.nn.functional.silu}[e.activation]
    return act(out)


def check(backend, problem: GemmProblem, spec: KernelSpec, seed: int = 0, num_sms: int | None = 3, calls: int = 1):
    kernel = backend.compile(backend.render(problem, spec))
    if num_sms is not None:
        kernel.num_sms = num_sms  # a small "GPU" so persistent blocks loop over several tiles
    for call in range(calls):  # fresh inputs each call: a reused workspace must not leak state
        a, b, C, bias = operands(problem, seed + call)
        if problem.epilogue.beta != 0.0:
            c = C.clone()
        else:
            c = torch.full((problem.m, problem.n), float("nan"), dtype=getattr(torch, problem.c_dtype))
        out = kernel(a, b, c, bias)
        assert out.data_ptr() == c.data_ptr()
        ref = reference(problem, a, b, C, bias)
        assert not torch.isnan(out).any(), "output elements left unwritten (NaN poison survived)"
        err = ((out.float() - ref).norm() / ref.norm()).item()
        assert err < BOUND[problem.dtype], f"{problem.label()} {spec.key()}: relative error {err:.2e}"
    return kernel


def spec(**kw) -> KernelSpec:
    base = dict(block_m=32, block_n=32, block_k=32, raster_group=2, stages=2)
    return KernelSpec(**{**base, **kw})


FAMILIES = {
    "pointer": dict(),
    "pointer-persistent-along_n": dict(persistent=True, raster_order="along_n", block_m=16),
    "splitk-workspace": dict(decomposition="split_k", split_k=3),
    "splitk-atomic-persistent": dict(decomposition="split_k", split_k=2, split_k_reduction="atomic", persistent=True,
                                     arch="sm_80"),  # atomic split-K is withdrawn on Hopper
    "splitk-serial": dict(decomposition="split_k", split_k=3, split_k_reduction="serial"),
    "splitk-serial-persistent": dict(decomposition="split_k", split_k=2, split_k_reduction="serial", persistent=True),
    "tma": dict(load_path="tma"),
    "tma-persistent-splitk": dict(load_path="tma", persistent=True, decomposition="split_k", split_k=2,
                                  block_n=16),
    "tma-splitk-serial": dict(load_path="tma", decomposition="split_k", split_k=3, split_k_reduction="serial"),
}


@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_layout_dtype(backend, family, layout, dtype):
    kw = FAMILIES[family]
    # TMA needs 16-byte aligned leading dimensions: M, N, K multiples of 8, but not of the tiles
    shape = (72, 40, 136) if kw.get("load_path") == "tma" else (67, 45, 129)
    problem = GemmProblem(m=shape[0], n=shape[1], k=shape[2], dtype=dtype, layout=layout)
    check(backend, problem, spec(**kw), seed=zlib.crc32(f"{family}{layout}{dtype}".encode()) % 1000)


@pytest.mark.parametrize("shapes", ["auto", "dynamic"])
@pytest.mark.parametrize("shape", [(1, 1, 1), (5, 300, 7), (33, 17, 64), (128, 64, 96)])
@pytest.mark.parametrize("family", ["pointer", "splitk-workspace", "splitk-serial"])
def test_shapes(backend, shape, family, shapes):
    kw = dict(FAMILIES[family], shape_specialization=shapes)
    m, n, k = shape
    if kw.get("decomposition") == "split_k":
        kw["split_k"] = min(kw["split_k"], -(-k // 32))
        if kw["split_k"] < 2:
            kw = dict(shape_specialization=shapes)
    check(backend, GemmProblem(m=m, n=n, k=k), spec(**kw))


# ---- one dynamic kernel serves every shape of its class ----------------------------------------------

SHAPES_OF_ONE_CLASS = [(67, 45, 129), (1, 300, 64), (128, 64, 96), (5, 7, 1), (96, 1, 33), (200, 130, 260)]
# what TMA can describe (leading dimensions of 16 bytes' multiples) in both layouts below
TMA_SHAPES_OF_ONE_CLASS = [(72, 40, 136), (8, 8, 8), (200, 136, 264), (16, 320, 64)]


@pytest.mark.parametrize("family", ["pointer", "pointer-persistent-along_n", "splitk-workspace",
                                    "splitk-atomic-persistent", "splitk-serial-persistent", "tma",
                                    "tma-persistent-splitk", "tma-splitk-serial"])
@pytest.mark.parametrize("layout", ["NT", "TN"])
def test_one_dynamic_kernel_serves_every_shape_of_its_class(backend, family, layout):
    """Rendered once (for the first shape), the kernel is called on shapes of every alignment, M=1
    and K=1 among them, and the split-K workspace grows as needed; the text and the cache key are
    those of every other shape of the class the spec supports."""
    kw = dict(FAMILIES[family], shape_specialization="dynamic")
    shapes = TMA_SHAPES_OF_ONE_CLASS if kw.get("load_path") == "tma" else SHAPES_OF_ONE_CLASS
    epilogue = Epilogue(beta=0.5, bias=True, activation="relu")
    problems = [GemmProblem(m=m, n=n, k=k, layout=layout, epilogue=epilogue) for m, n, k in shapes]
    first = backend.render(problems[0], spec(**kw))
    kernel = backend.compile(first)
    kernel.num_sms = 3
    for i, problem in enumerate(problems):
        if backend.supports(problem, spec(**kw)):  # (split-K deeper than K's steps is refused at render,
            source = backend.render(problem, spec(**kw))  # but the kernel computes it: empty slices add 0)
            assert source.text == first.text and backend.cache_key(source) == backend.cache_key(first)
        a, b, C, bias = operands(problem, i)
        out = kernel(a, b, C.clone(), bias)
        ref = reference(problem, a, b, C, bias)
        err = ((out.float() - ref).norm() / ref.norm()).item()
        assert err < BOUND["float16"], f"{problem.label()}: relative error {err:.2e}"
    if kw.get("decomposition") == "split_k":
        reduction = kw.get("split_k_reduction", "workspace")
        ws = kernel._workspace.body(torch.device("cpu"))
        if reduction == "serial":  # the counters (as many for every shape), then the largest call's partials
            assert ws.numel() == SERIAL_COUNTERS + max(m * n for m, n, _ in shapes) * kw["split_k"]
            assert torch.count_nonzero(ws[:SERIAL_COUNTERS]) == 0  # every counter back to zero
        else:
            split = kw["split_k"] if reduction == "workspace" else 1
            assert ws.numel() == max(m * n for m, n, _ in shapes) * split
        if reduction == "atomic":
            assert torch.count_nonzero(ws) == 0  # still ready for the next call
        assert kernel.workspace_intact()  # no call wrote past the part it used


def test_dynamic_tma_kernel_refuses_a_shape_tma_cannot_describe(backend):
    kernel = backend.compile(backend.render(GemmProblem(m=72, n=40, k=136),
                                            spec(load_path="tma", shape_specialization="dynamic")))
    a, b = torch.randn(16, 36).half(), torch.randn(36, 24).half()  # K=36: rows of 72 bytes
    with pytest.raises(ValueError, match="a: TMA needs rows of a multiple of 16 bytes .*load_path='pointer'"):
        kernel(a, b)
    out = kernel(torch.randn(16, 40).half(), torch.randn(40, 24).half())  # K=40 is fine
    assert out.shape == (16, 24)


def test_static_and_dynamic_kernels_differ_in_text_and_key(backend):
    p, q = GemmProblem(m=64, n=64, k=64), GemmProblem(m=128, n=64, k=64)
    static = [backend.render(x, spec()) for x in (p, q)]  # auto: static
    dynamic = [backend.render(x, spec(shape_specialization="dynamic")) for x in (p, q)]
    assert static[0].text != static[1].text and backend.cache_key(static[0]) != backend.cache_key(static[1])
    assert dynamic[0].text == dynamic[1].text and backend.cache_key(dynamic[0]) == backend.cache_key(dynamic[1])
    assert ", M: tl.constexpr" in static[0].text and ", M: tl.constexpr" not in dynamic[0].text
    assert spec().key() == spec(shape_specialization="auto").key()  # the default keeps the old keys
    assert spec(shape_specialization="dynamic").key() != spec().key()
    assert backend.render(p, spec(shape_specialization="static")).text.split("spec     ")[1].split(" ", 1)[1] == \
        static[0].text.split("spec     ")[1].split(" ", 1)[1]  # "static" renders what "auto" does


EPILOGUES = {
    "alpha": Epilogue(alpha=-1.5),
    "beta": Epilogue(beta=0.75),
    "bias": Epilogue(bias=True),
    "relu": Epilogue(activation="relu"),
    "gelu": Epilogue(activation="gelu"),
    "silu": Epilogue(activation="silu"),
    "all": Epilogue(alpha=0.5, beta=-2.0, bias=True, activation="gelu"),
}


@pytest.mark.parametrize("family", ["pointer", "splitk-workspace", "splitk-atomic-persistent", "splitk-serial", "tma"])
@pytest.mark.parametrize("epilogue", list(EPILOGUES))
def test_epilogue(backend, family, epilogue):
    kw = FAMILIES[family]
    shape = (40, 56, 72) if kw.get("load_path") == "tma" else (37, 51, 70)
    problem = GemmProblem(m=shape[0], n=shape[1], k=shape[2], layout="NT", epilogue=EPILOGUES[epilogue])
    check(backend, problem, spec(**kw), seed=7)


@pytest.mark.parametrize("dtype,out_dtype", [("float16", "bfloat16"), ("bfloat16", "float16")])
def test_out_dtype(backend, dtype, out_dtype):
    problem = GemmProblem(m=45, n=38, k=50, dtype=dtype, out_dtype=out_dtype, epilogue=Epilogue(beta=1.0, bias=True))
    check(backend, problem, spec(decomposition="split_k", split_k=2))


@pytest.mark.parametrize("load_path", ["pointer", "tma"])
def test_serial_split_k_is_one_launch_with_the_workspace_reductions_bits(backend, load_path):
    """The serial reduction sums a tile's partials in slice order, as the workspace reduction's second kernel
    does: the same bits, in one launch, its tiles' counters left at zero for the next call."""
    problem = GemmProblem(m=40, n=72, k=200, epilogue=Epilogue(bias=True))
    serial = backend.compile(backend.render(problem, spec(load_path=load_path, decomposition="split_k", split_k=3,
                                                          split_k_reduction="serial")))
    workspace = backend.compile(backend.render(problem, spec(load_path=load_path, decomposition="split_k", split_k=3)))
    a, b, _, bias = operands(problem, 5)
    assert len(serial._launches(a, b, torch.empty(40, 72).half(), bias, None, 132)) == 1
    assert len(workspace._launches(a, b, torch.empty(40, 72).half(), bias, None, 132)) == 2
    want = workspace(a, b, None, bias)
    for _ in range(3):  # each call finds its counters at zero again
        assert torch.equal(serial(a, b, None, bias), want)
    assert serial.workspace_bytes == 4 * (SERIAL_COUNTERS + 3 * 40 * 72) and serial._workspace.zeroed
    counters = serial._workspace.body(torch.device("cpu"))[:SERIAL_COUNTERS]
    assert torch.count_nonzero(counters) == 0
    assert serial.workspace_intact()
    # A call takes back what it adds (split_k a tile), whatever the count it finds: so calls that overlapped
    # against the contract, which leave each counter a multiple of split_k, leave the calls after them right.
    counters[:4].fill_(6.0)
    for _ in range(2):
        assert torch.equal(serial(a, b, None, bias), want)
    assert counters[:4].tolist() == [6.0] * 4 and torch.count_nonzero(counters[4:]) == 0


def test_a_shape_generic_serial_kernel_finds_its_counters_at_zero_after_a_smaller_call(backend):
    """The counters lie where they lie for every shape: a call of many tiles after one of few, whose partials
    began right after the few counters it used, still finds every counter at zero; a shape of more tiles than
    there are counters is refused in one line."""
    kw = dict(decomposition="split_k", split_k=2, split_k_reduction="serial", shape_specialization="dynamic")
    kernel = backend.compile(backend.render(GemmProblem(m=64, n=64, k=64), spec(**kw)))
    for m, n, k in [(300, 300, 64), (3, 5, 64), (300, 300, 64), (96, 640, 96)]:  # many tiles, few, many again
        a, b = torch.randn(m, k).half(), torch.randn(k, n).half()
        out = kernel(a, b)
        torch.testing.assert_close(out.float(), a.float() @ b.float(), rtol=1e-2, atol=1e-2)
    assert torch.count_nonzero(kernel._workspace.body(torch.device("cpu"))[:SERIAL_COUNTERS]) == 0
    with pytest.raises(ValueError, match=r"tiles of 32x32, more than the 65536 counters.*split_k_reduction='workspace'"):
        kernel(torch.randn(8200, 64).half(), torch.randn(64, 8200).half())  # 257 x 257 tiles
    with pytest.raises(SpecError, match="more than the 65536 counters"):
        backend.render(GemmProblem(m=8200, n=8200, k=64), spec(**{**kw, "shape_specialization": "static"}))


def test_workspace_allocated_once_and_atomic_buffer_left_zeroed(backend):
    problem = GemmProblem(m=37, n=29, k=96)
    kernel = check(backend, problem, spec(decomposition="split_k", split_k=3, split_k_reduction="atomic", arch="sm_80"), calls=3)
    assert kernel.workspace_bytes == 4 * 37 * 29
    ws = kernel._workspace.body(torch.device("cpu"))
    assert torch.count_nonzero(ws) == 0  # ready for the next call without a memset
    a, b, _, _ = operands(problem, 99)
    kernel(a, b)
    assert kernel._workspace.body(torch.device("cpu")).data_ptr() == ws.data_ptr()  # the same buffer
    assert kernel.workspace_intact()
    kernel = check(backend, problem, spec(decomposition="split_k", split_k=3), calls=2)
    assert kernel.workspace_bytes == 4 * 3 * 37 * 29


def test_persistent_default_grid_uses_arch_sm_count(backend):
    kernel = check(backend, GemmProblem(m=50, n=50, k=40), spec(persistent=True, arch="sm_80"), num_sms=None)
    assert kernel.num_sms == 108


def test_c_allocated_when_none(backend):
    problem = GemmProblem(m=20, n=30, k=40, out_dtype="bfloat16")
    kernel = backend.compile(backend.render(problem, spec()))
    a, b, _, _ = operands(problem, 3)
    out = kernel(a, b)
    assert out.shape == (20, 30) and out.dtype == torch.bfloat16
    assert ((out.float() - a.float() @ b.float()).norm() / (a.float() @ b.float()).norm()) < 1e-2


# ---- the Kernel refuses what does not match its problem --------------------------------------------

@pytest.fixture(scope="module")
def nt_kernel(backend):
    problem = GemmProblem(m=24, n=16, k=32, layout="NT", epilogue=Epilogue(beta=1.0, bias=True))
    return problem, backend.compile(backend.render(problem, spec()))


@pytest.mark.parametrize("case,message", [
    ("a_not_k", "a (24, 31) and b (32, 20) are not (M, K) and (K, N) matrices"),
    ("c_shape", "c has shape (24, 16), expected (24, 20)"),
    ("bias_shape", "bias has shape (16,), expected (20,)"),
    ("b_layout", "b has strides (20, 1), expected (1, 32) (layout NT wants B column-major)"),
])
def test_dynamic_kernel_checks_the_tensors_against_each_other(backend, case, message):
    problem = GemmProblem(m=24, n=16, k=32, layout="NT", epilogue=Epilogue(beta=1.0, bias=True))
    kernel = backend.compile(backend.render(problem, spec(shape_specialization="dynamic")))
    a, b, C, bias = operands(problem.replace(n=20), 0)  # another N: fine for this kernel
    args = dict(a=a, b=b, c=torch.zeros(24, 20).half(), bias=torch.zeros(20).half())
    if case == "a_not_k":
        args["a"] = torch.randn(24, 31).half()
    elif case == "c_shape":
        args["c"] = C.new_zeros(24, 16)
    elif case == "bias_shape":
        args["bias"] = torch.zeros(16).half()
    elif case == "b_layout":
        args["b"] = b.contiguous()
    with pytest.raises(ValueError, match="MxNxK-float16-NT") as err:
        kernel(**args)
    assert message in str(err.value)


@pytest.mark.parametrize("case,message", [
    ("a_shape", "a has shape (32, 24), expected (24, 32)"),
    ("b_layout", "b has strides (16, 1), expected (1, 32) (layout NT wants B column-major)"),
    ("a_dtype", "a has dtype torch.float32, expected torch.float16"),
    ("c_missing", "reads C, but c is None"),
    ("bias_missing", "pass bias of shape (16,)"),
    ("c_strided", "c has strides (1, 24), expected (16, 1)"),
    ("not_tensor", "a is a list, expected a torch.Tensor"),
])
def test_kernel_refuses_mismatched_tensors(nt_kernel, case, message):
    problem, kernel = nt_kernel
    a, b, C, bias = operands(problem, 0)
    args = dict(a=a, b=b, c=C, bias=bias)
    if case == "a_shape":
        args["a"] = torch.randn(32, 24).half()
    elif case == "b_layout":
        args["b"] = b.contiguous()
    elif case == "a_dtype":
        args["a"] = a.float()
    elif case == "c_missing":
        args["c"] = None
    elif case == "bias_missing":
        args["bias"] = None
    elif case == "c_strided":
        args["c"] = C.t().contiguous().t()
    elif case == "not_tensor":
        args["a"] = a.tolist()
    with pytest.raises(ValueError, match="24x16x32") as err:
        kernel(**args)
    assert message in str(err.value)


def test_bias_given_without_bias_in_problem(backend):
    problem = GemmProblem(m=8, n=8, k=8)
    kernel = backend.compile(backend.render(problem, spec(block_m=16, block_n=16, block_k=16)))
    a, b, _, _ = operands(problem, 0)
    with pytest.raises(ValueError, match="bias given but the problem has none"):
        kernel(a, b, bias=torch.zeros(8).half())


# ---- capabilities and refusals --------------------------------------------------------------------

def test_capabilities_refuse_what_triton_cannot_express():
    for bad in (dict(load_path="tma", arch="sm_80"), dict(mma="wgmma"), dict(cluster_m=2),
                dict(warp_specialization="cooperative", load_path="tma", num_warps=12),
                dict(smem_padding=8, smem_swizzle="none"), dict(epilogue_path="smem"),
                dict(decomposition="stream_k"), dict(num_warps=12), dict(load_path="cp_async")):
        with pytest.raises(SpecError):
            KernelSpec(backend="triton", **bad)
    KernelSpec(backend="triton", arch="sm_90", load_path="tma", persistent=True,
               decomposition="split_k", split_k=4, split_k_reduction="workspace")
    with pytest.raises(SpecError, match="split_k_reduction"):  # withdrawn on Hopper (GPU test found lost updates)
        KernelSpec(backend="triton", arch="sm_90a", decomposition="split_k", split_k=4, split_k_reduction="atomic")


def test_supports_refuses_fp16_accumulation_and_unaligned_tma(backend):
    s = spec(load_path="tma")
    assert not backend.supports(GemmProblem(m=64, n=64, k=64, accumulator="float16"), spec())
    assert not backend.supports(GemmProblem(m=64, n=64, k=66), s)  # A's leading dim K*2 bytes not 16-aligned
    assert not backend.supports(GemmProblem(m=66, n=64, k=64, layout="TN"), s)  # A column-major: M
    assert backend.supports(GemmProblem(m=66, n=64, k=64), s)  # M is not a leading dim in NN
    with pytest.raises(SpecError):
        backend.render(GemmProblem(m=64, n=64, k=64, accumulator="float16"), spec())


def test_source_is_cached_on_disk_and_imported_once(backend):
    problem = GemmProblem(m=16, n=16, k=16)
    source = backend.render(problem, spec(block_m=16, block_n=16, block_k=16))
    first, second = backend.compile(source), backend.compile(source)
    assert first._launch is second._launch
    path = cache_dir() / f"{backend.cache_key(source)}.py"
    assert path.read_text() == source.text


# ---- the same kernels lower to sm_90a / sm_80 machine code (no GPU: Triton's bundled ptxas) ---------

def test_compile_ahead_for_hopper_and_ampere(tmp_path):
    """Run in a subprocess: the interpreter replaces triton.jit once TRITON_INTERPRET is set."""
    script = textwrap.dedent("""
        import re
        from cudal2 import GemmProblem, KernelSpec, get_backend
        from cudal2.ir import Epilogue
        be = get_backend("triton")
        p = GemmProblem(m=512, n=256, k=1024, layout="TN", dtype="bfloat16",
                        epilogue=Epilogue(alpha=2.0, beta=1.0, bias=True, activation="silu"))
        tma = KernelSpec(block_m=128, block_n=128, block_k=64, num_warps=8, stages=3, load_path="tma",
                         persistent=True, decomposition="split_k", split_k=2, split_k_reduction="workspace")
        ks = be.compile_ahead(be.render(p, tma))
        ptx = ks["matmul_kernel"].asm["ptx"]
        assert "cp.async.bulk.tensor" in ptx and "wgmma" in ptx, "TMA loads and wgmma expected on sm_90a"
        assert "splitk_epilogue_kernel" in ks
        ptr = KernelSpec(arch="sm_80", block_m=64, block_n=64, block_k=32, stages=3)
        src = be.render(p.replace(layout="NN"), ptr)
        ptx = be.compile_ahead(src)["matmul_kernel"].asm["ptx"]
        assert "cp.async" in ptx and "mma.sync" in ptx, "pipelined cp.async and mma.sync expected on sm_80"
        be.precompile(src)  # no GPU here: takes the compile_ahead path
        odd = GemmProblem(m=67, n=45, k=129)  # the masked variant of the dynamic kernel, and a static one
        for shapes in ("dynamic", "static"):
            ks = be.compile_ahead(be.render(odd, ptr.replace(shape_specialization=shapes, arch="sm_90a")))
            assert "mma" in ks["matmul_kernel"].asm["ptx"]
        for spec in (ptr.replace(persistent=True), tma.replace(split_k=3)):  # no divisions by run-time counts
            ks = be.compile_ahead(be.render(odd.replace(m=72, n=40, k=136) if spec.load_path == "tma" else odd,
                                            spec.replace(shape_specialization="dynamic", arch="sm_90a")))
            for name, k in ks.items():
                assert not re.search(r"\b(div|rem)\.[su](32|64)", k.asm["ptx"]), f"{name}: integer division"
        # one binary for every token count where A is row-major (M bounds masks only), another per
        # alignment of M where M is A's leading dimension
        for layout, ms, count in (("NT", (64, 255, 1), 1), ("TN", (64, 72), 2)):
            dyn = tma.replace(shape_specialization="dynamic")
            keys = {be.compile_ahead(be.render(p.replace(m=m, layout=layout), dyn))["matmul_kernel"].hash
                    for m in ms}
            assert len(keys) == count, (layout, keys)
        print("ok")
    """)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(CUDAL2_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT), TRITON_DEFAULT_FP_FUSION="1")
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "ok" in run.stdout, run.stderr[-3000:]


@pytest.mark.parametrize("family", ["pointer", "splitk-workspace", "tma-persistent-splitk"])
def test_a_dynamic_kernel_takes_64_bit_offsets_only_where_a_shape_needs_them(backend, family):
    """A dynamic kernel's offsets are int32 unless some operand, output or workspace reaches 2**31
    elements: then launch() passes WIDE and the kernel casts M, N and K to int64 on entry. That
    variant computes the same product (run here by lowering the module's threshold)."""
    kw = dict(FAMILIES[family], shape_specialization="dynamic")
    small = GemmProblem(m=72, n=40, k=136, layout="NT")
    wide = GemmProblem(m=65536, n=40, k=32768, layout="NT")  # A: 2**31 elements
    assert not backend.variant_key(small, spec(**kw)).endswith("w") and backend.variant_key(wide, spec(**kw)).endswith("w")
    source = backend.render(small, spec(**kw))
    head = source.text.split("if WIDE:")[0].split("def matmul_kernel")[0]
    head = re.sub(r"def fast_div\(.*?\n\n\n", "", head, flags=re.S)  # its 64-bit product is of counts < 2**30
    assert "tl.int64" not in head
    kernel = backend.compile(source)
    kernel.num_sms = 3
    module = backend.module(source)
    a, b, C, bias = operands(small, 0)
    want = kernel(a, b, C.clone(), bias)
    ref = reference(small, a, b, C, bias)
    module.WIDE_FROM = 0
    try:
        got = kernel(a, b, C.clone(), bias)
    finally:
        module.WIDE_FROM = 2**31
    for out in (want, got):
        assert ((out.float() - ref).norm() / ref.norm()).item() < BOUND["float16"]


def test_a_new_token_count_needs_no_new_variant_where_a_is_row_major(backend):
    """M is no leading dimension where A is row-major: the dynamic kernel is not specialized on it
    (only a pointer kernel's tile evenness remains); where A is column-major M's alignment counts."""
    tma, ptr = spec(load_path="tma", shape_specialization="dynamic"), spec(shape_specialization="dynamic")
    keys = lambda layout, s: {backend.variant_key(GemmProblem(m=m, n=64, k=64, layout=layout), s) for m in (1, 64, 255)}
    assert len(keys("NT", tma)) == 1 and len(keys("NN", tma)) == 1
    assert len(keys("NT", ptr)) == 2  # 64 is whole 32-row tiles, 1 and 255 are not
    assert len(keys("TN", tma)) == 3
    text = backend.render(GemmProblem(m=64, n=64, k=64, layout="NT"), tma).text
    assert "do_not_specialize=['M', " in text


def test_a_dynamic_kernels_divisors_divide_exactly(backend):
    """The tile arithmetic of a dynamic kernel divides by run-time tile counts as (n * magic) >> shift
    (fast_div), with (magic, shift) from launch(): exact for every n < 2**30, and magic fits int32
    (what Triton passes a small Python int as)."""
    module = backend.module(backend.render(GemmProblem(m=72, n=40, k=136), spec(shape_specialization="dynamic")))
    rng = torch.Generator().manual_seed(3)
    divisors = list(range(1, 1100)) + [2**p + e for p in range(11, 30) for e in (-1, 0, 1)] + \
        torch.randint(1, 2**30, (200,), generator=rng).tolist()
    for d in divisors:
        magic, shift = module.divisor(d)
        assert 0 < magic < 2**31
        ns = [0, 1, d - 1, d, d + 1, 2**30 - 1, (2**30 - 1) // d * d, (2**30 - 1) // d * d - 1] + \
            torch.randint(0, 2**30, (50,), generator=rng).tolist()
        for n in ns:
            if 0 <= n < 2**30:
                assert (n * magic) >> shift == n // d, (n, d)
    with pytest.raises(ValueError, match="2\\*\\*30 or more work units"):
        module.divisors(2**20, 2**20)


@pytest.mark.parametrize("family", ["pointer", "pointer-persistent-along_n", "tma", "splitk-workspace"])
def test_a_dynamic_kernel_runs_k_within_one_step_as_straight_code(backend, family):
    """Where K fits one BLOCK_K step, launch() passes ONE_K and the K loop is a loop of one trip
    the compiler sees (no loop); one module serves that shape and deeper ones, and both compute the
    product, K a full step and a partial one. Split-K takes no ONE_K (its slices take their steps)."""
    kw = dict(FAMILIES[family], shape_specialization="dynamic")
    split = "split_k" in kw.get("decomposition", "")
    shallow, partial, deep = (GemmProblem(m=72, n=40, k=k, layout="NT") for k in (32, 24, 136))
    keys = [backend.variant_key(p, spec(**kw)) for p in (shallow, partial, deep)]
    assert [key.endswith("k") for key in keys] == ([False] * 3 if split else [True, True, False])
    source = backend.render(deep, spec(**kw))
    assert ("if ONE_K:" in source.text) is not split
    kernel = backend.compile(source)
    kernel.num_sms = 3
    for problem in (shallow, partial, deep):
        a, b, C, bias = operands(problem, 1)
        out = kernel(a, b, C.clone(), bias)
        ref = reference(problem, a, b, C, bias)
        assert ((out.float() - ref).norm() / ref.norm()).item() < BOUND["float16"], problem.label()
