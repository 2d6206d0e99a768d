"""CuTe DSL backend on a Hopper GPU: every template variant and layout against a torch fp32
reference on fresh standard-normal inputs (odd, tile-unaligned shapes included), the output
poisoned first and guarded on both sides; then a timing printout against torch.mm.

Run: CUDAL2_GPU_TESTS=1 python -m pytest -m gpu tests/test_gpu_cute_dsl.py -s  (tools/gpu_cute_dsl.sh)"""


import pytest
import torch

from cudal2.codegen.cute_dsl import CuteDslBackend, dsl_available
from cudal2.ir import Epilogue, GemmProblem, KernelSpec

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not dsl_available()[0], reason=f"needs nvidia-cutlass-dsl: {dsl_available()[1]}"),
]

BASE = dict(backend="cute_dsl", arch="sm_90a", num_warps=12, load_path="tma", warp_specialization="cooperative",
            persistent=True, block_m=128, block_n=128, block_k=64, stages=4, epilogue_path="tma_store")
# fp32 accumulation: the error is the output rounding (fp16 ~2-3e-4, bf16 ~2e-3 relative Frobenius).
# An fp16-accumulating kernel lands at 1e-3..5e-3 and must fail the fp16 bound.
BOUND = {"float16": 1e-3, "bfloat16": 8e-3}
GUARD_ROWS = 8
ODD = (1032, 968, 1048)  # 16-byte aligned for TMA, but M, N, K all leave partial tiles


def spec(**kw) -> KernelSpec:
    return KernelSpec(**{**BASE, **kw})


@pytest.fixture(scope="module")
def backend(cute_dsl_backend):
    return cute_dsl_backend


def _dt(name):
    return {"float16": torch.float16, "bfloat16": torch.bfloat16}[name]


def make_operands(p: GemmProblem, seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)
    dt = _dt(p.dtype)
    a = torch.randn(p.m, p.k, device="cuda", dtype=dt, generator=g)
    b = torch.randn(p.k, p.n, device="cuda", dtype=dt, generator=g)
    if not p.a_row_major:
        a = a.t().contiguous().t()  # same values, stored column-major
    if not p.b_row_major:
        b = b.t().contiguous().t()
    return a, b


def reference(p: GemmProblem, a, b, c, bias):
    e = p.epilogue
    x = e.alpha * (a.float() @ b.float())
    if e.beta:
        x = x + e.beta * c.float()
    if e.bias:
        x = x + bias.float()
    x = {"none": lambda t: t, "relu": torch.relu, "silu": torch.nn.functional.silu,
         "gelu": lambda t: torch.nn.functional.gelu(t, approximate="none")}[e.activation](x)
    return x


def run_checked(kernel, p: GemmProblem, seed: int = 0):
    """Run once into a guarded, poisoned output and check it against the fp32 reference."""
    a, b = make_operands(p, seed)
    out_dt = _dt(p.c_dtype)
    g = torch.Generator(device="cuda").manual_seed(seed + 1000)
    bias = torch.randn(p.n, device="cuda", dtype=out_dt, generator=g) if p.epilogue.bias else None
    buf = torch.full(((p.m + 2 * GUARD_ROWS) * p.n,), float("nan"), device="cuda", dtype=out_dt)
    c = buf[GUARD_ROWS * p.n:(GUARD_ROWS + p.m) * p.n].view(p.m, p.n)
    c_in = None
    if p.epilogue.beta:
        c.copy_(torch.randn(p.m, p.n, device="cuda", dtype=out_dt, generator=g))
        c_in = c.clone()
    d = kernel(a, b, c, bias)
    torch.cuda.synchronize()
    assert d.data_ptr() == c.data_ptr()
    assert torch.isnan(buf[:GUARD_ROWS * p.n]).all() and torch.isnan(buf[(GUARD_ROWS + p.m) * p.n:]).all(), \
        "the kernel wrote outside its output"
    assert not torch.isnan(d).any(), "some output elements were never written (or are NaN)"
    ref = reference(p, a, b, c_in, bias)
    err = ((d.float() - ref).norm() / ref.norm()).item()
    assert err < BOUND[p.c_dtype], f"relative Frobenius error {err:.2e} over {BOUND[p.c_dtype]:.0e} for {p.label()}"
    return err


# ---- every layout and dtype on the base configuration ----------------------------------------------
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
def test_layouts_and_dtypes(backend, layout, dtype):
    p = GemmProblem(m=ODD[0], n=ODD[1], k=ODD[2], layout=layout, dtype=dtype)
    run_checked(backend.compile(backend.render(p, spec())), p)


# ---- tiles, warps, stages, clusters (multicast), rasterization, both epilogue paths ----------------------
VARIANTS = {
    "128x256-s3-c2x1": dict(block_n=256, stages=3, cluster_m=2),
    "256x128-s3-c1x2": dict(block_m=256, stages=3, cluster_n=2),
    "128x128-1consumer": dict(num_warps=8),
    "64x64-1consumer-regs": dict(block_m=64, block_n=64, num_warps=8, epilogue_path="registers"),
    "64x128-1consumer-c2x2": dict(block_m=64, num_warps=8, cluster_m=2, cluster_n=2),
    "bk32-s6-c2x2-regs": dict(block_k=32, stages=6, cluster_m=2, cluster_n=2, epilogue_path="registers"),
    "bk128-s2-raster-n": dict(block_k=128, stages=2, raster_order="along_n", raster_group=2),
    "raster1-regsplit": dict(raster_group=1, producer_registers=24, consumer_registers=240),
    # a 48-register producer leaves 224 per consumer thread in the launch pool (232 hung)
    "pingpong-producer48": dict(warp_specialization="pingpong", producer_registers=48, cluster_m=2),
    "128x128-regs": dict(epilogue_path="registers"),
    "pingpong-128x128": dict(warp_specialization="pingpong"),
    "pingpong-64x256-c2x1": dict(warp_specialization="pingpong", block_m=64, block_n=256, stages=3, cluster_m=2),
    "pingpong-128x128-c1x2-regs": dict(warp_specialization="pingpong", cluster_n=2, epilogue_path="registers"),
    # the SM-filling widths: three consumer warpgroups on 192 rows, 96/192/32 columns, 16 stages
    "192x128-3consumers-c1x2": dict(block_m=192, num_warps=16, cluster_n=2),
    "128x192-c2x1": dict(block_n=192, cluster_m=2),
    "128x96-s6": dict(block_n=96, stages=6),
    "64x32-s16-c1x2": dict(block_m=64, block_n=32, num_warps=8, stages=16, cluster_n=2),
    "192x96-3consumers-regs": dict(block_m=192, block_n=96, num_warps=16, epilogue_path="registers"),
    "192x128-3consumers-s5-2pieces": dict(block_m=192, num_warps=16, stages=5),
    "128x192-s5-c2x1-2pieces": dict(block_n=192, stages=5, cluster_m=2),
}


@pytest.mark.parametrize("layout", ["NN", "TT"])
@pytest.mark.parametrize("name", list(VARIANTS))
def test_variants(backend, name, layout):
    p = GemmProblem(m=ODD[0], n=ODD[1], k=ODD[2], layout=layout)
    run_checked(backend.compile(backend.render(p, spec(**VARIANTS[name]))), p)


# ---- swap_ab: the kernel computes D^T = B^T A^T and stores it column-major (D's own memory) ---------------
SWAP_VARIANTS = {
    "192x128-c1x2": dict(block_m=192, cluster_n=2),  # kernel 128x192 in a 2x1 cluster (cuBLAS's choice)
    "96x128-s6": dict(block_m=96, stages=6),
    "32x64-s16-c2x1": dict(block_m=32, block_n=64, num_warps=8, stages=16, cluster_m=2),
    "96x192-3consumers-regs": dict(block_m=96, block_n=192, num_warps=16, epilogue_path="registers"),
    "pingpong-128x128-c2x1": dict(warp_specialization="pingpong", cluster_m=2, stages=5),
    # five stages leave room for two staged output pieces (epilogue_stages), not four
    "192x128-s5-c1x2": dict(block_m=192, stages=5, cluster_n=2),
}


@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize("name", list(SWAP_VARIANTS))
def test_swap_ab_variants(backend, name, layout):
    p = GemmProblem(m=ODD[0], n=ODD[1], k=ODD[2], layout=layout)
    run_checked(backend.compile(backend.render(p, spec(swap_ab=True, **SWAP_VARIANTS[name]))), p)


@pytest.mark.parametrize("path", ["registers", "tma_store"])
@pytest.mark.parametrize("name", ["alpha-beta", "all-gelu", "bias-silu"])
def test_swap_ab_epilogues(backend, name, path):
    # bias runs along the swapped kernel's M; C is read column-major like D is written
    p = GemmProblem(m=ODD[0], n=ODD[1], k=ODD[2], layout="NT", dtype="bfloat16", epilogue=EPILOGUES[name])
    run_checked(backend.compile(backend.render(p, spec(block_m=96, epilogue_path=path, swap_ab=True))), p)


@pytest.mark.parametrize("m, n, k, layout", [(2048, 128, 4096, "NN"), (200, 64, 72, "TN"), (8, 8, 8, "NN"),
                                             (12288, 256, 1024, "NT")])
def test_swap_ab_tall_shapes(backend, m, n, k, layout):
    p = GemmProblem(m=m, n=n, k=k, layout=layout, epilogue=Epilogue(bias=True))
    run_checked(backend.compile(backend.render(p, spec(block_m=96, swap_ab=True))), p, seed=m + n + k)


@pytest.mark.parametrize("path", ["registers", "tma_store"])
@pytest.mark.parametrize("shape_specialization", ["static", "dynamic"])
def test_swap_ab_one_row(backend, path, shape_specialization):
    # a one-row D is the swapped kernel's one-column D^T: a static kernel stores it through a TMA
    # descriptor whose unit extent is made dynamic (a static 1 would be folded into a 1-D copy)
    p = GemmProblem(m=1, n=1032, k=1048, layout="NT", epilogue=Epilogue(bias=True, beta=0.5))
    s = spec(epilogue_path=path, swap_ab=True, shape_specialization=shape_specialization)
    run_checked(backend.compile(backend.render(p, s)), p, seed=7)


# ---- fused epilogue ---------------------------------------------------------------------------------------
EPILOGUES = {  # (also used by the swap_ab tests above)
    "alpha-beta": Epilogue(alpha=0.5, beta=-0.75),
    "bias-relu": Epilogue(bias=True, activation="relu"),
    "all-gelu": Epilogue(alpha=1.5, beta=0.5, bias=True, activation="gelu"),
    "bias-silu": Epilogue(bias=True, activation="silu"),
}


@pytest.mark.parametrize("ws", ["cooperative", "pingpong"])
@pytest.mark.parametrize("path", ["registers", "tma_store"])
@pytest.mark.parametrize("name", list(EPILOGUES))
def test_epilogues(backend, name, path, ws):
    p = GemmProblem(m=ODD[0], n=ODD[1], k=ODD[2], layout="NT", epilogue=EPILOGUES[name])
    run_checked(backend.compile(backend.render(p, spec(epilogue_path=path, warp_specialization=ws))), p)


def test_bf16_out_from_fp16_in(backend):
    p = GemmProblem(m=ODD[0], n=ODD[1], k=ODD[2], layout="TN", out_dtype="bfloat16",
                    epilogue=Epilogue(bias=True, activation="gelu"))
    run_checked(backend.compile(backend.render(p, spec())), p)


# ---- shapes: smaller than a tile, N not TMA-aligned (registers epilogue), a large square -------------------
@pytest.mark.parametrize("m, n, k, layout, path", [
    (8, 8, 8, "NN", "tma_store"), (1, 8, 16, "NN", "registers"), (100, 1001, 1000, "NT", "registers"),
    (1000, 1000, 1000, "NN", "tma_store"), (4096, 4096, 4096, "NN", "tma_store"),
    # a unit M (or N) extent: the TMA'd tensor gets a dynamic extent (M=1 used to issue a 1-D TMA
    # against a 2-D descriptor: "illegal instruction")
    (1, 8, 16, "NN", "tma_store"), (1, 264, 200, "NT", "registers"), (72, 1, 64, "NT", "registers"),
])
def test_shapes(backend, m, n, k, layout, path):
    p = GemmProblem(m=m, n=n, k=k, layout=layout)
    run_checked(backend.compile(backend.render(p, spec(epilogue_path=path))), p, seed=m + n + k)


# ---- split-K: (tile, K slice) work units, fp32 workspace, reduction kernel with the epilogue -------------
SPLIT_CASES = {
    # name: ((m, n, k, layout), epilogue, spec kwargs)
    "512x128x8192-NN-s16": ((512, 128, 8192, "NN"), Epilogue(), dict(split_k=16)),
    "512x128x8192-NN-s6-uneven": ((512, 128, 8192, "NN"), Epilogue(), dict(split_k=6)),  # 128 k-tiles / 6
    "2048x128x4096-NN-s4": ((2048, 128, 4096, "NN"), Epilogue(), dict(split_k=4)),
    "2048x128x4096-TN-s4": ((2048, 128, 4096, "TN"), Epilogue(), dict(split_k=4)),
    "2048x128x4096-TN-s3": ((2048, 128, 4096, "TN"), Epilogue(), dict(split_k=3)),
    "2048x128x4096-NN-s5-c2x1": ((2048, 128, 4096, "NN"), Epilogue(), dict(split_k=5, cluster_m=2)),
    "100x136x1000-NN-s5-bias-beta": ((100, 136, 1000, "NN"), Epilogue(alpha=0.5, beta=-0.75, bias=True),
                                     dict(split_k=5)),
    "100x136x1000-NT-s16-bias-beta-gelu-8warps-c2x2": (
        (100, 136, 1000, "NT"), Epilogue(beta=0.5, bias=True, activation="gelu"),
        dict(split_k=16, num_warps=8, block_m=64, block_n=64, block_k=64, cluster_m=2, cluster_n=2)),
    "1x264x4096-NN-s8-silu": ((1, 264, 4096, "NN"), Epilogue(bias=True, activation="silu"), dict(split_k=8)),
    "256x2048x4096-TT-s2-relu": ((256, 2048, 4096, "TT"), Epilogue(bias=True, activation="relu"),
                                 dict(split_k=2)),
    # whole tiles: the partials leave as 8-byte pairs (the cases above with 128x128 tiles on 512x128 and
    # 2048x128 outputs do too; those with edge tiles keep the predicated element stores)
    "512x512x2048-NN-s4-64x128-c2x1": ((512, 512, 2048, "NN"), Epilogue(),
                                       dict(split_k=4, block_m=64, num_warps=8, stages=8, cluster_m=2)),
    # clusters that overhang the output: one CTA of each holds a tile wholly outside it (these were
    # wrong, shape-generic, in the H100 sweep before such tiles took the predicated stores)
    "4096x128x256-NN-s4-c1x2-overhang": ((4096, 128, 256, "NN"), Epilogue(), dict(split_k=4, cluster_n=2)),
    "64x2048x2048-NN-s4-64x64-c2x1-overhang": ((64, 2048, 2048, "NN"), Epilogue(),
                                               dict(split_k=4, block_m=64, block_n=64, num_warps=8, cluster_m=2)),
}
OVERHANG_CASES = [name for name in SPLIT_CASES if name.endswith("overhang")]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", list(SPLIT_CASES))
def test_split_k(backend, name, dtype):
    (m, n, k, layout), epi, kw = SPLIT_CASES[name]
    p = GemmProblem(m=m, n=n, k=k, layout=layout, dtype=dtype, epilogue=epi)
    s = spec(decomposition="split_k", epilogue_path="registers", **kw)
    assert backend.supports(p, s), backend.supports(p, s).reason
    run_checked(backend.compile(backend.render(p, s)), p, seed=m + n + k)


@pytest.mark.parametrize("name", OVERHANG_CASES)
def test_shape_generic_split_k_with_an_overhanging_cluster(backend, name):
    (m, n, k, layout), epi, kw = SPLIT_CASES[name]
    p = GemmProblem(m=m, n=n, k=k, layout=layout, epilogue=epi)
    s = spec(decomposition="split_k", epilogue_path="registers", shape_specialization="dynamic", **kw)
    run_checked(backend.compile(backend.render(p, s)), p, seed=m + n + k)


def test_split_k_reuses_its_workspace_and_is_deterministic(backend):
    p = GemmProblem(m=512, n=128, k=8192, layout="NN", epilogue=Epilogue(bias=True))
    kernel = backend.compile(backend.render(p, spec(decomposition="split_k", split_k=8, epilogue_path="registers")))
    a, b = make_operands(p, 5)
    bias = torch.randn(p.n, device="cuda", dtype=torch.float16)
    first = kernel(a, b, bias=bias)
    ws = kernel._workspace_for(a.device, p.m, p.n, p.k)  # one flat buffer, grown for larger outputs
    assert ws.numel() == 8 * p.m * p.n and ws.dtype == torch.float32
    out = torch.full_like(first, float("nan"))
    for _ in range(3):
        kernel(a, b, out, bias)
    torch.cuda.synchronize()
    assert kernel._workspace_for(a.device, p.m, p.n, p.k).data_ptr() == ws.data_ptr()
    assert torch.equal(out, first), "split-K results differ between calls (the reduction is meant to be fixed-order)"
    assert kernel.workspace_intact()  # no call wrote past its workspace (cudal2.codegen.workspace)


def replayed_in_a_cuda_graph(kernel, p: GemmProblem, replays: int = 3):
    """The kernel's output after capturing one call in a CUDA graph and replaying it: a kernel with a
    workspace allocates it on the first call, outside the capture, and must not touch the host after."""
    a, b = make_operands(p, 9)
    out = torch.empty(p.m, p.n, device="cuda", dtype=torch.float16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        kernel(a, b, out)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernel(a, b, out)
    for _ in range(replays):
        out.fill_(float("nan"))
        graph.replay()
    torch.cuda.synchronize()
    ref = a.float() @ b.float()
    return ((out.float() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("decomposition", ["split_k", "stream_k"])
def test_workspace_kernels_in_a_cuda_graph(backend, decomposition):
    p = GemmProblem(m=2048, n=128, k=4096, layout="NN")
    kw = dict(split_k=4, epilogue_path="registers") if decomposition == "split_k" else {}
    kernel = backend.compile(backend.render(p, spec(decomposition=decomposition, **kw)))
    assert replayed_in_a_cuda_graph(kernel, p) < BOUND["float16"]


# ---- stream-K: even k-iteration ranges per CTA, partial tiles handed to the tile's owner -----------------
STREAMK_CASES = {
    # name: ((m, n, k, layout), epilogue, spec kwargs); the tile counts leave the SMs unevenly loaded
    "256x12288x12288-NN-128x256": ((256, 12288, 12288, "NN"), Epilogue(), dict(block_n=256)),
    "12288x256x4096-TN-128x256": ((12288, 256, 4096, "TN"), Epilogue(), dict(block_n=256)),
    "2048x128x4096-NN-128x128-s6": ((2048, 128, 4096, "NN"), Epilogue(), dict(stages=6)),
    "512x128x8192-NT-regs": ((512, 128, 8192, "NT"), Epilogue(), dict(epilogue_path="registers")),
    "1032x968x1048-TT-bias-beta-gelu": ((1032, 968, 1048, "TT"), Epilogue(alpha=0.5, beta=-0.75, bias=True,
                                                                          activation="gelu"), {}),
    "100x136x1000-NN-bias-relu-regs": ((100, 136, 1000, "NN"), Epilogue(bias=True, activation="relu"),
                                       dict(epilogue_path="registers")),
    "1x264x4096-NN-silu-regs": ((1, 264, 4096, "NN"), Epilogue(bias=True, activation="silu"),
                                dict(epilogue_path="registers")),
    "64x8192x2048-NN-64x128-8warps": ((64, 8192, 2048, "NN"), Epilogue(), dict(block_m=64, num_warps=8)),
    "4096x4096x4096-NN-256x128-s3": ((4096, 4096, 4096, "NN"), Epilogue(), dict(block_m=256, stages=3)),
    "256x12288x4096-TT-192x96-3consumers": ((256, 12288, 4096, "TT"), Epilogue(bias=True),
                                            dict(block_m=192, block_n=96, num_warps=16)),
    # in clusters: a cluster's CTAs walk the same k-range of neighbouring tiles (multicast in step)
    "1024x16384x8192-NN-256x128-c2x1": ((1024, 16384, 8192, "NN"), Epilogue(), dict(block_m=256, cluster_m=2)),
    # lanes: 4 cluster rows on 66 clusters make 2 lanes of every other row; along N, 2 lanes of the columns
    "2048x16384x2048-NN-256x128-c2x1-2lanes": ((2048, 16384, 2048, "NN"), Epilogue(bias=True),
                                               dict(block_m=256, cluster_m=2)),
    "12288x256x4096-TN-c2x1-along-n-2lanes": ((12288, 256, 4096, "TN"), Epilogue(), dict(cluster_m=2,
                                                                                      raster_order="along_n")),
    "2048x4096x2048-NT-128x128-c1x2": ((2048, 4096, 2048, "NT"), Epilogue(), dict(cluster_n=2, stages=6)),
    # 9 tile rows in 2x1 clusters: the fifth cluster row's second CTA has only out-of-bounds tiles
    "1032x968x1048-TT-c2x1-bias-beta-gelu": ((1032, 968, 1048, "TT"), Epilogue(alpha=0.5, beta=-0.75, bias=True,
                                                                                activation="gelu"),
                                             dict(cluster_m=2)),
    "100x1000x3000-NN-c1x2-regs-relu": ((100, 1000, 3000, "NN"), Epilogue(bias=True, activation="relu"),
                                        dict(cluster_n=2, epilogue_path="registers")),
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", list(STREAMK_CASES))
def test_stream_k(backend, name, dtype):
    (m, n, k, layout), epi, kw = STREAMK_CASES[name]
    p = GemmProblem(m=m, n=n, k=k, layout=layout, dtype=dtype, epilogue=epi)
    s = spec(decomposition="stream_k", **kw)
    assert backend.supports(p, s), backend.supports(p, s).reason
    run_checked(backend.compile(backend.render(p, s)), p, seed=m + n + k)


@pytest.mark.parametrize("cluster", [(1, 1), (2, 1)])
def test_stream_k_is_deterministic_and_resets_its_flags(backend, cluster):
    # every flag is raised once per call and taken back by the tile's owner: repeated calls (a flag
    # left raised would hand a stale partial to the next call) must give bitwise the same output
    p = GemmProblem(m=256, n=2048, k=8192, layout="NN", epilogue=Epilogue(bias=True))
    kernel = backend.compile(backend.render(p, spec(decomposition="stream_k", block_n=256,
                                                    cluster_m=cluster[0], cluster_n=cluster[1])))
    a, b = make_operands(p, 5)
    bias = torch.randn(p.n, device="cuda", dtype=torch.float16)
    first = kernel(a, b, bias=bias)
    out = torch.full_like(first, float("nan"))
    for _ in range(5):
        kernel(a, b, out, bias)
    torch.cuda.synchronize()
    assert torch.equal(out, first)
    ws = kernel._workspace_for(a.device, p.m, p.n, p.k)  # the partial tiles, then one flag per CTA
    ctas = kernel._binding.cfg.sm_count
    assert int(ws[-ctas:].view(torch.int32).abs().sum()) == 0, "stream-K flags left raised after the calls"
    ref = a.float() @ b.float() + bias.float()
    assert ((first.float() - ref).norm() / ref.norm()).item() < BOUND["float16"]


def test_kernel_loaded_from_disk_is_correct(backend):
    p = GemmProblem(m=ODD[0], n=ODD[1], k=ODD[2], layout="NT", epilogue=Epilogue(bias=True))
    src = backend.render(p, spec(cluster_m=2))
    backend.compile(src)
    again = CuteDslBackend().compile(src)  # fresh backend: nothing in memory, the exported object on disk
    assert again.loaded_from_disk
    run_checked(again, p, seed=7)


def test_allocates_output_when_c_is_none(backend):
    p = GemmProblem(m=264, n=136, k=72, layout="NN")
    kernel = backend.compile(backend.render(p, spec()))
    a, b = make_operands(p, 3)
    d = kernel(a, b)
    ref = a.float() @ b.float()
    assert ((d.float() - ref).norm() / ref.norm()).item() < BOUND["float16"]


# ---- timing printout (no assertion on speed) ------------------------------------------------------------
TIMED_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 16384, 4096), (1024, 16384, 8192)]
TIMED_CONFIGS = {
    "128x128x64 s4 c1x1": dict(),
    "128x256x64 s3 c2x1": dict(block_n=256, stages=3, cluster_m=2),
    "128x256x64 s3 c1x2": dict(block_n=256, stages=3, cluster_n=2),
    "256x128x64 s3 c2x1": dict(block_m=256, stages=3, cluster_m=2),
    "pp 128x128x64 s5 c1x1": dict(warp_specialization="pingpong", stages=5),
    "pp 128x128x64 s5 c2x1": dict(warp_specialization="pingpong", stages=5, cluster_m=2),
}


# shapes whose tile grid cannot fill 132 SMs with deep K: where split-K should beat data-parallel
SPLIT_TIMED_SHAPES = [(512, 128, 8192), (2048, 128, 4096), (512, 512, 12288), (64, 8192, 2048), (256, 2048, 4096)]


def _split_choices(m, n, k, bm, bn, bk, sms=132):
    """Up to two split_k values that best fill whole waves of the SMs, each with >= 4 k-tiles per slice."""
    from cudal2.codegen.cute_dsl import SPLIT_K_VALUES

    tiles = -(-m // bm) * -(-n // bn)
    k_tiles = -(-k // bk)
    cands = [s for s in SPLIT_K_VALUES if s > 1 and k_tiles // s >= 4]
    fill = lambda s: tiles * s / (-(-tiles * s // sms) * sms)  # noqa: E731
    return sorted(cands, key=lambda s: (-fill(s), s))[:2]


def test_split_k_timing_report(backend):
    from triton.testing import do_bench

    rows = []
    for m, n, k in SPLIT_TIMED_SHAPES:
        p = GemmProblem(m=m, n=n, k=k, layout="NN")
        a, b = make_operands(p, 13)
        ref = torch.mm(a, b).float()
        t_torch = do_bench(lambda: torch.mm(a, b), return_mode="median")
        bm = 64 if m <= 64 else 128
        base = dict(block_m=bm, num_warps=8 if bm == 64 else 12, epilogue_path="registers")
        configs = {"data-parallel": dict(base, epilogue_path="tma_store")}
        for sk in _split_choices(m, n, k, bm, 128, 64):
            configs[f"split_k={sk}"] = dict(base, decomposition="split_k", split_k=sk)
        for name, kw in configs.items():
            s = spec(**kw)
            if not backend.supports(p, s):
                continue
            kernel = backend.compile(backend.render(p, s))
            out = torch.empty(m, n, device="cuda", dtype=torch.float16)
            t = do_bench(lambda: kernel(a, b, out), return_mode="median")
            err = ((out.float() - ref).norm() / ref.norm()).item()
            assert err < BOUND["float16"], f"{name} {p.label()}: error {err:.2e}"
            rows.append((f"{m}x{n}x{k}", f"{bm}x128x64 {name}", t, p.flops / t / 1e9, t_torch, p.flops / t_torch / 1e9))
    print(f"\n{torch.cuda.get_device_name()}  split-K (triton.testing.do_bench median; call time incl. Python)")
    print(f"{'shape':>18} {'config':>26} {'cute ms':>9} {'TFLOP/s':>8} {'torch ms':>9} {'TFLOP/s':>8} {'ratio':>6}")
    for shape, name, t, tf, tt, ttf in rows:
        print(f"{shape:>18} {name:>26} {t:9.3f} {tf:8.1f} {tt:9.3f} {ttf:8.1f} {tt / t:6.2f}")


def test_timing_report(backend):
    from triton.testing import do_bench

    rows = []
    for m, n, k in TIMED_SHAPES:
        p = GemmProblem(m=m, n=n, k=k, layout="NN")
        a, b = make_operands(p, 11)
        t_torch = do_bench(lambda: torch.mm(a, b), return_mode="median")
        for name, kw in TIMED_CONFIGS.items():
            kernel = backend.compile(backend.render(p, spec(**kw)))
            out = torch.empty(m, n, device="cuda", dtype=torch.float16)
            t = do_bench(lambda: kernel(a, b, out), return_mode="median")
            ref = torch.mm(a, b).float()
            err = ((out.float() - ref).norm() / ref.norm()).item()
            assert err < BOUND["float16"], f"{name} {p.label()}: error {err:.2e}"
            rows.append((f"{m}x{n}x{k}", name, t, p.flops / t / 1e9, t_torch, p.flops / t_torch / 1e9))
    print(f"\n{torch.cuda.get_device_name()}  (triton.testing.do_bench median; call time incl. Python)")
    print(f"{'shape':>18} {'config':>20} {'cute ms':>9} {'TFLOP/s':>8} {'torch ms':>9} {'TFLOP/s':>8} {'ratio':>6}")
    for shape, name, t, tf, tt, ttf in rows:
        print(f"{shape:>18} {name:>20} {t:9.3f} {tf:8.1f} {tt:9.3f} {ttf:8.1f} {tt / t:6.2f}")


# ---- shape-generic kernels: one compile, many shapes ----------------------------------------------------
DYNAMIC_SHAPES = [(1, 4096, 4096), (33, 3584, 8192), (255, 1536, 17920), (1000, 4096, 6144), (3001, 5120, 1024),
                  (128, 256, 64), (8, 8, 8)]  # M any; N and K multiples of 8 (TMA rows of 16 bytes)


@pytest.mark.parametrize("pkw, skw", [
    (dict(layout="NT"), dict(warp_specialization="pingpong", stages=5, cluster_n=2)),
    (dict(layout="NT", epilogue=Epilogue(bias=True, activation="gelu")), dict(block_n=192, cluster_m=2)),
    (dict(layout="NN", dtype="bfloat16"), dict(epilogue_path="registers", block_m=64, num_warps=8)),
    (dict(layout="TN"), dict(block_m=192, num_warps=16, raster_order="along_n", raster_group=4)),
    (dict(layout="NT", epilogue=Epilogue(alpha=0.5, beta=0.25)), dict(swap_ab=True, block_m=192, stages=4)),
    (dict(layout="NT"), dict(decomposition="split_k", split_k=3, epilogue_path="registers")),
], ids=["NT-pingpong-c1x2", "NT-bias-gelu-192", "NN-bf16-regs-64", "TN-192-16warps-raster-n", "NT-swap-beta",
        "NT-split3"])
def test_one_shape_generic_kernel_is_correct_on_every_shape(backend, pkw, skw):
    """One compile per variant serves every shape of the class; each shape is checked against the fp32
    reference with guards and poison, as the static kernels are."""
    s = spec(shape_specialization="dynamic", **skw)
    compiled = {}
    for m, k, n in DYNAMIC_SHAPES:  # (tokens, in features, out features): D = x @ W^T is M x N
        p = GemmProblem(m=m, n=n, k=k, **pkw)
        if not backend.supports(p, s):
            continue
        key = backend.variant_key(p, s)
        if key not in compiled:
            compiled[key] = backend.compile(backend.render(p, s))
        run_checked(compiled[key], p, seed=m)
    assert compiled, "no shape of the list was supported"


# ---- the tiles the hardware's widths and register budgets add -------------------------------------------
NEW_TILES = [  # (id, spec fields): quack's autotuned families among them
    ("pingpong-128x160", dict(block_m=128, block_n=160, warp_specialization="pingpong", stages=4)),
    ("pingpong-128x192", dict(block_m=128, block_n=192, warp_specialization="pingpong", stages=4)),
    ("pingpong-128x208", dict(block_m=128, block_n=208, warp_specialization="pingpong", stages=3)),
    ("pingpong-192x128", dict(block_m=192, block_n=128, warp_specialization="pingpong", stages=4)),
    ("coop-256x208-c1x2", dict(block_m=256, block_n=208, stages=3, cluster_n=2)),
    ("coop-128x224-c2x1", dict(block_m=128, block_n=224, stages=4, cluster_m=2)),
    ("coop-swap-160x256", dict(block_m=160, block_n=256, stages=3, swap_ab=True)),
    ("coop-128x80-8warps-regs", dict(block_m=128, block_n=80, num_warps=8, stages=6, epilogue_path="registers")),
]


@pytest.mark.parametrize("layout", ["NT", "NN"])
@pytest.mark.parametrize("skw", [f for _, f in NEW_TILES], ids=[i for i, _ in NEW_TILES])
def test_new_tiles_are_correct_on_edge_shapes(backend, skw, layout):
    """Widths that are not powers of two and accumulators past 128 a thread, on a shape that leaves
    partial tiles along every dimension, with bias and an activation."""
    p = GemmProblem(m=1032, n=976, k=1048, layout=layout, epilogue=Epilogue(bias=True, activation="silu"))
    s = spec(**skw)
    assert backend.supports(p, s), backend.supports(p, s).reason
    run_checked(backend.compile(backend.render(p, s)), p)
