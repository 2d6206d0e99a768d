"""CuTe DSL backend on the CPU: capabilities, supports() refusals, the kernel's GemmConfig and the
module that binds it, the stream-K work split, operand checks, and every kernel variant compiled for
sm_90a without a GPU (CUTE_DSL_ARCH=sm_90a), exported to the disk cache and loaded back."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

if not torch.cuda.is_available():
    # The DSL reads its target once, when first imported; without a GPU it needs this.
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from cudal2.codegen.cute_dsl import (BARRIER_BYTES, CuteDslBackend, dsl_available, epilogue_stages,  # noqa: E402
                                     gemm_config)
from cudal2.codegen.registry import get_backend  # noqa: E402
from cudal2.ir import Epilogue, GemmProblem, KernelSpec, SpecError, arch_limits  # noqa: E402

DSL_OK, DSL_WHY = dsl_available()
needs_dsl = pytest.mark.skipif(not DSL_OK, reason=f"compile tests skipped: {DSL_WHY}")

BASE = dict(backend="cute_dsl", arch="sm_90a", num_warps=12, load_path="tma", warp_specialization="cooperative",
            persistent=True, block_m=128, block_n=128, block_k=64, stages=4, epilogue_path="tma_store")


def spec(**kw) -> KernelSpec:
    return KernelSpec(**{**BASE, **kw})


@pytest.fixture(scope="module")
def backend(cute_dsl_backend):
    return cute_dsl_backend


# ---- declaration and refusals (no DSL needed) ----------------------------------------------------
def test_registered():
    assert isinstance(get_backend("cute_dsl"), CuteDslBackend)


@pytest.mark.parametrize("field, value", [
    ("arch", "sm_80"), ("warp_specialization", "none"), ("load_path", "cp_async"), ("mma", "mma_sync"),
    ("smem_swizzle", "64B"), ("block_k", 16), ("persistent", False), ("epilogue_path", "smem"),
])
def test_undeclared_options_refused_by_the_ir(field, value):
    with pytest.raises(SpecError) as e:
        spec(**{field: value})
    assert field in e.value.fields


def test_split_k_declared_with_workspace_reduction_only():
    s = spec(decomposition="split_k", split_k=4, epilogue_path="registers")
    assert CuteDslBackend().supports(GemmProblem(m=512, n=128, k=8192), s)
    with pytest.raises(SpecError) as e:
        spec(decomposition="split_k", split_k=4, split_k_reduction="atomic", epilogue_path="registers")
    assert "split_k_reduction" in e.value.fields


def test_split_k_refusals():
    b = CuteDslBackend()
    split = dict(decomposition="split_k", split_k=4)
    ok = b.supports(GemmProblem(m=512, n=128, k=8192), spec(**split))  # BASE has epilogue_path="tma_store"
    assert not ok and "epilogue_path" in ok.reason and "registers" in ok.reason
    ok = b.supports(GemmProblem(m=512, n=128, k=192), spec(**split, epilogue_path="registers"))  # 3 k-tiles
    assert not ok and "split_k" in ok.reason
    ok = b.supports(GemmProblem(m=8192, n=8192, k=8192), spec(decomposition="split_k", split_k=8,
                                                             epilogue_path="registers"))
    assert not ok and "workspace" in ok.reason


def test_an_operand_past_32_bit_extents_is_refused_before_it_is_built():
    """A sweep of 16384x151936x1536 recorded nine crashes where the kernel refused the extents at its
    launch (an output of 2.5e9 elements): supports() names the limit first, so the pair is unsupported."""
    ok = CuteDslBackend().supports(GemmProblem(m=16384, n=151936, k=1536), spec())
    assert not ok and "32-bit" in ok.reason and "triton" in ok.reason
    assert CuteDslBackend().supports(GemmProblem(m=8192, n=151936, k=1536), spec())  # 1.2e9 elements: fits


def _binding(problem, s):
    """The GemmBinding the rendered module binds (plain Python: no DSL compile)."""
    from cudal2.codegen.cute_sm90.binding import GemmBinding

    return GemmBinding(gemm_config(problem, s))


@needs_dsl
def test_split_k_config_and_workspace():
    p = GemmProblem(m=100, n=136, k=1000, epilogue=Epilogue(beta=0.5, bias=True, activation="relu"))
    s = spec(decomposition="split_k", split_k=5, epilogue_path="registers")
    src = CuteDslBackend().render(p, s)
    compile(src.text, "rendered", "exec")
    for line in ("decomposition='split_k',", "split_k=5,", "beta=0.5,", "activation='relu',"):
        assert line in src.text, line
    assert _binding(p, s).workspace_shape(100, 136) == (5, 100, 136)
    assert _binding(p, spec(epilogue_path="registers")).workspace_shape(100, 136) is None


@needs_dsl
def test_rendered_module_binds_the_config_it_was_rendered_for():
    p = GemmProblem(m=1032, n=968, k=1048, layout="NT", epilogue=Epilogue(bias=True, activation="silu"))
    s = spec(block_n=192, cluster_m=2, stages=3)
    src = CuteDslBackend().render(p, s)
    scope = {}
    exec(compile(src.text, "rendered", "exec"), scope)  # imports cudal2.codegen.cute_sm90 (and the DSL)
    assert scope["BINDING"].cfg == gemm_config(p, s)


@pytest.mark.parametrize("layout, m, n, k, bad", [
    ("NN", 1024, 1024, 1001, "problem.k"),   # A row-major: leading dimension K
    ("TN", 1001, 1024, 1024, "problem.m"),   # A column-major: leading dimension M
    ("NN", 1024, 1001, 1024, "problem.n"),   # B row-major: leading dimension N
])
def test_tma_alignment_refused(layout, m, n, k, bad):
    p = GemmProblem(m=m, n=n, k=k, layout=layout)
    ok = CuteDslBackend().supports(p, spec(epilogue_path="registers"))
    assert not ok and bad in ok.reason and "16-byte" in ok.reason


def test_tma_store_needs_aligned_n_but_registers_do_not():
    p = GemmProblem(m=1000, n=1004, k=1000, layout="NT")  # A leading K, B leading K: fine; N % 8 != 0
    b = CuteDslBackend()
    assert not b.supports(p, spec(epilogue_path="tma_store"))
    assert b.supports(p, spec(epilogue_path="registers"))


def test_two_consumer_warpgroups_need_block_m_multiple_of_128():
    ok = CuteDslBackend().supports(GemmProblem(m=512, n=512, k=512), spec(block_m=64))
    assert not ok and "block_m" in ok.reason


def test_three_consumer_warpgroups_get_the_registers_left_and_no_pingpong():
    from cudal2.codegen.cute_dsl import default_consumer_registers

    b, p = CuteDslBackend(), GemmProblem(m=512, n=512, k=512)
    assert default_consumer_registers(spec(num_warps=16)) == 152  # (65536 - 128*40) / 384, rounded down to 8
    assert default_consumer_registers(spec(num_warps=12)) == 232
    ok = b.supports(p, spec(block_m=192, num_warps=16, consumer_registers=200))
    assert not ok and "65536" in ok.reason and "152" in ok.reason
    ok = b.supports(p, spec(block_m=192, num_warps=12))
    assert not ok and "num_warps=16" in ok.reason
    ok = b.supports(p, spec(block_m=128, num_warps=16, warp_specialization="pingpong"))
    assert not ok and "two consumer warpgroups" in ok.reason
    ok = b.supports(p, spec(block_m=192, block_n=256, num_warps=16, stages=3))
    assert not ok and "accumulators" in ok.reason
    assert b.supports(p, spec(block_m=192, num_warps=16))
    # ptxas compiles them at the launch's 128 registers a thread: 192x192 fits, 192x208 and wider do not
    assert b.supports(p, spec(block_m=192, block_n=192, num_warps=16, stages=3))
    for wide in (208, 224, 240):
        ok = b.supports(p, spec(block_m=192, block_n=wide, num_warps=16, stages=3))
        assert not ok and "Insufficient registers (128)" in ok.reason and "192x192" in ok.reason
    assert b.supports(p, spec(block_m=256, block_n=208, num_warps=12, stages=3))  # two warpgroups: not this limit


@pytest.mark.parametrize("producer, consumer, ok", [
    (40, None, True), (40, 232, True), (24, 240, True),  # 64512: the pool of 384 threads at 168 each
    (48, None, True),  # the default steps down to 224 next to a 48-register producer
    (48, 232, False), (32, 240, False),  # 65536, over 64512: the first hung on the H100
])
def test_register_split_fits_the_pool_the_block_is_launched_with(producer, consumer, ok):
    from cudal2.codegen.cute_dsl import default_consumer_registers, register_pool

    s = spec(producer_registers=producer, consumer_registers=consumer)
    assert register_pool(s) == 168 * 384
    got = CuteDslBackend().supports(GemmProblem(m=512, n=16384, k=1024), s)
    assert bool(got) == ok, got.reason
    if not ok:
        assert "64512" in got.reason and "wait forever" in got.reason
    if consumer is None:
        assert 128 * producer + 256 * default_consumer_registers(s) <= register_pool(s)


def test_odd_widths_and_deep_pipelines_are_cute_dsl_only():
    from cudal2.codegen.triton import TritonBackend

    assert KernelSpec(**{**BASE, "block_n": 96, "block_m": 64, "num_warps": 8, "stages": 10})
    with pytest.raises(SpecError) as e:
        KernelSpec(backend="triton", block_n=96)
    assert "block_n" in str(e.value)
    with pytest.raises(SpecError):
        KernelSpec(backend="triton", stages=12)
    assert 96 not in TritonBackend.capabilities.options["block_n"]


def test_stream_k_refuses_pingpong_but_takes_clusters():
    p = GemmProblem(m=256, n=4096, k=4096)
    ok = CuteDslBackend().supports(p, spec(decomposition="stream_k", warp_specialization="pingpong"))
    assert not ok and "cooperative" in ok.reason
    for cm, cn in ((2, 1), (1, 2)):
        assert CuteDslBackend().supports(p, spec(decomposition="stream_k", cluster_m=cm, cluster_n=cn))


def test_split_k_refuses_pingpong():
    ok = CuteDslBackend().supports(GemmProblem(m=8192, n=8192, k=4096),
                                   spec(decomposition="split_k", split_k=4, epilogue_path="registers",
                                        warp_specialization="pingpong"))
    assert not ok and "hung" in ok.reason and "cooperative" in ok.reason


def test_pingpong_tile_must_fit_one_warpgroup():
    ok = CuteDslBackend().supports(GemmProblem(m=512, n=512, k=512),
                                   spec(warp_specialization="pingpong", block_n=256, stages=3))
    assert not ok and "ping-pong" in ok.reason


def test_render_bakes_problem_and_spec_in():
    p = GemmProblem(m=1032, n=968, k=1048, layout="TN", dtype="bfloat16",
                    epilogue=Epilogue(alpha=0.5, beta=2.0, bias=True, activation="gelu"))
    s = spec(cluster_m=2, stages=3, raster_group=4, raster_order="along_n")
    src = CuteDslBackend().render(p, s)
    compile(src.text, "rendered", "exec")  # valid Python
    cfg = gemm_config(p, s)
    assert (cfg.m, cfg.n, cfg.k, cfg.ab_dtype, cfg.a_row_major, cfg.b_row_major) == (1032, 968, 1048, "BFloat16", False, True)
    assert (cfg.stages, cfg.cluster_m, cfg.cluster_n, cfg.raster_along_m) == (3, 2, 1, False)
    # 5 clusters along M (9 tiles of 128 in pairs): no group of 2..4 divides 5, so the backend's own
    # grouped walk takes the spec's group of 4 (and a last group of 1)
    assert (cfg.raster_group, cfg.grouped_walk) == (4, True)
    assert (cfg.alpha, cfg.beta, cfg.has_bias, cfg.activation) == (0.5, 2.0, True, "gelu")
    for line in ("m=1032,", "stages=3,", "raster_group=4,", "grouped_walk=True,", "activation='gelu',",
                 f"spec key {s.key()}"):
        assert line in src.text, line


# ---- swap_ab: the kernel computes D^T = B^T A^T --------------------------------------------------------
@pytest.mark.parametrize("layout, kernel_layout", [("NN", "TT"), ("NT", "NT"), ("TN", "TN"), ("TT", "NN")])
def test_swap_ab_renders_the_transposed_problem(layout, kernel_layout):
    from cudal2.codegen.cute_dsl import kernel_view

    p = GemmProblem(m=12288, n=256, k=4096, layout=layout, epilogue=Epilogue(bias=True))
    s = spec(block_m=192, cluster_n=2, raster_order="along_n", swap_ab=True)
    kp, ks = kernel_view(p, s)
    assert (kp.m, kp.n, kp.k, kp.layout) == (256, 12288, 4096, kernel_layout)
    assert (ks.block_m, ks.block_n, ks.cluster_m, ks.cluster_n, ks.raster_order, ks.swap_ab) == \
        (128, 192, 2, 1, "along_m", False)
    src = CuteDslBackend().render(p, s)
    compile(src.text, "rendered", "exec")
    assert src.problem == p and src.spec == s  # the Source keeps what the caller asked for
    cfg = gemm_config(p, s)
    assert (cfg.m, cfg.n, cfg.k, cfg.tile_m, cfg.tile_n, cfg.tile_k) == (256, 12288, 4096, 128, 192, 64)
    assert (cfg.cluster_m, cfg.cluster_n, cfg.swap_ab, cfg.has_bias) == (2, 1, True, True)
    for line in (f"spec key {s.key()}", f"for {p.label()}, swap_ab", f"the problem {kp.label()}"):
        assert line in src.text, line
    assert not gemm_config(p, s.replace(swap_ab=False, block_m=256)).swap_ab


def test_swap_ab_violations_name_the_specs_own_fields():
    p = GemmProblem(m=12288, n=256, k=4096)
    # 96 columns of D are the swapped kernel's M: not a multiple of 64 rows per warpgroup
    ok = CuteDslBackend().supports(p, spec(block_n=96, swap_ab=True))
    assert not ok and ok.reason.startswith("block_n=96") and "swap_ab: the kernel's M runs along D's N" in ok.reason
    assert "swap_ab=False" in ok.reason
    # unswapped, 96 rows of D are the kernel's M: the fix offers swap_ab
    ok = CuteDslBackend().supports(p, spec(block_m=96))
    assert not ok and "swap_ab=True" in ok.reason
    assert CuteDslBackend().supports(p, spec(block_m=96, swap_ab=True))


@pytest.mark.parametrize("pkw, skw, word", [
    (dict(m=512, n=128, k=8192), dict(decomposition="split_k", split_k=4, epilogue_path="registers"), "split_k"),
    (dict(m=4096, n=256, k=8192), dict(decomposition="stream_k"), "stream_k"),
    # the DSL compiler aborts on a 192-row column-major TMA-store tile (an H100 search lost its run to it)
    (dict(m=8192, n=256, k=256), dict(block_n=192, num_warps=16), "aborts"),
])
def test_swap_ab_refusals(pkw, skw, word):
    # (a one-row or one-column D is no longer refused: test_unit_extent_compiles_to_2d_tma compiles it)
    ok = CuteDslBackend().supports(GemmProblem(**pkw), spec(swap_ab=True, **skw))
    assert not ok and "swap_ab=True" in ok.reason and word in ok.reason
    if word == "aborts":  # and the registers epilogue is the way round it
        assert CuteDslBackend().supports(GemmProblem(**pkw), spec(swap_ab=True, **{**skw, "epilogue_path": "registers"}))


@pytest.mark.parametrize("skw, pieces", [
    (dict(block_n=192, stages=4), 4),  # 160 KiB of stages: four 8 KiB pieces fit
    (dict(block_n=192, stages=5), 2),  # 200 KiB: two fit, four would not
    (dict(block_m=192, stages=5, swap_ab=True), 2),  # the same kernel, D's tile named transposed
    (dict(block_m=192, num_warps=16, stages=5), 2),  # 12 KiB pieces on three consumer warpgroups
    (dict(warp_specialization="pingpong", stages=6), 8),  # one set of twice as many, the warpgroups' turns share it
    (dict(stages=6), 4),
])
def test_epilogue_stages_shrink_to_make_room_for_main_loop_stages(backend, skw, pieces):
    p, s = GemmProblem(m=4096, n=4096, k=4096), spec(**skw)
    assert backend.supports(p, s), backend.supports(p, s).reason
    assert epilogue_stages(dict(s)) == pieces
    assert s.smem_bytes() + BARRIER_BYTES <= arch_limits("sm_90a").smem_per_block
    assert gemm_config(p, s).epi_stages == pieces


def test_stages_that_do_not_fit_beside_the_smallest_epilogue_are_refused():
    with pytest.raises(SpecError, match="use at most 5 stages"):
        spec(block_n=192, stages=6)


# ---- compile for sm_90a on the CPU ---------------------------------------------------------------------
VARIANTS = [
    # (id, problem kwargs, spec kwargs): every layout, both dtypes, tiles, clusters, stages, epilogues
    ("NN-fp16-128x128-c1x1-tma", dict(layout="NN"), {}),
    ("NT-fp16-128x256-c2x1-tma", dict(layout="NT"), dict(block_n=256, stages=3, cluster_m=2)),
    ("TN-bf16-256x128-c1x2-tma", dict(layout="TN", dtype="bfloat16"), dict(block_m=256, stages=3, cluster_n=2)),
    ("TT-bf16-64x64-8warps-regs", dict(layout="TT", dtype="bfloat16"),
     dict(block_m=64, block_n=64, num_warps=8, epilogue_path="registers")),
    ("NN-fp16-bk32-s6-c2x2-regs", dict(layout="NN"), dict(block_k=32, stages=6, cluster_m=2, cluster_n=2,
                                                         epilogue_path="registers")),
    ("NT-fp16-bk128-s2-raster-n", dict(layout="NT"), dict(block_k=128, stages=2, raster_order="along_n",
                                                          raster_group=1, producer_registers=24,
                                                          consumer_registers=240)),
    ("NN-epi-all-gelu-regs", dict(layout="NN", epilogue=Epilogue(alpha=0.5, beta=0.25, bias=True, activation="gelu")),
     dict(epilogue_path="registers")),
    ("TT-epi-all-silu-tma", dict(layout="TT", epilogue=Epilogue(alpha=2.0, beta=-1.0, bias=True, activation="silu")),
     {}),
    ("NN-pingpong-128x128-tma", dict(layout="NN"), dict(warp_specialization="pingpong")),
    ("TT-pingpong-64x256-c2x1-regs-bf16", dict(layout="TT", dtype="bfloat16", epilogue=Epilogue(bias=True)),
     dict(warp_specialization="pingpong", block_m=64, block_n=256, cluster_m=2, stages=3,
          epilogue_path="registers")),
    ("TN-epi-bias-relu-bf16out", dict(layout="TN", out_dtype="bfloat16",
                                      epilogue=Epilogue(bias=True, activation="relu")), {}),
    ("NN-streamk-128x256-tma", dict(layout="NN"), dict(decomposition="stream_k", block_n=256, stages=4)),
    ("TT-streamk-64x128-regs-epi", dict(layout="TT", epilogue=Epilogue(beta=0.5, bias=True, activation="gelu")),
     dict(decomposition="stream_k", block_m=64, num_warps=8, epilogue_path="registers", raster_order="along_n")),
    # the widths cuBLAS fills the SMs with: 192 rows on three consumer warpgroups, 96/192/32 columns
    # (B N-major at 96 wide takes a 64-byte swizzle), and 16 stages
    ("NN-192x128-16warps-c1x2-tma", dict(layout="NN"), dict(block_m=192, num_warps=16, cluster_n=2)),
    ("NN-128x192-c2x1-tma", dict(layout="NN"), dict(block_n=192, cluster_m=2)),
    ("NN-128x96-s6-tma", dict(layout="NN"), dict(block_n=96, stages=6)),
    ("TN-bf16-64x32-s16-c1x2-tma", dict(layout="TN", dtype="bfloat16"),
     dict(block_m=64, block_n=32, num_warps=8, stages=16, cluster_n=2)),
    ("NN-streamk-256x128-c2x1-tma", dict(layout="NN"), dict(decomposition="stream_k", block_m=256, cluster_m=2)),
    ("TN-streamk-128x128-c1x2-regs-epi", dict(layout="TN", epilogue=Epilogue(bias=True, activation="relu")),
     dict(decomposition="stream_k", cluster_n=2, epilogue_path="registers")),
    ("NT-192x96-16warps-streamk-epi", dict(layout="NT", epilogue=Epilogue(alpha=0.5, bias=True, activation="relu")),
     dict(block_m=192, block_n=96, num_warps=16, decomposition="stream_k")),
    # swap_ab: the kernel computes D^T = B^T A^T and writes it column-major (every layout, both epilogues)
    ("NN-swap-192x128-c1x2-tma", dict(layout="NN"), dict(block_m=192, cluster_n=2, swap_ab=True)),
    ("NT-swap-96x128-s6-epi-tma", dict(layout="NT", epilogue=Epilogue(alpha=0.5, beta=0.25, bias=True,
                                                                       activation="silu")),
     dict(block_m=96, stages=6, swap_ab=True)),
    ("TN-bf16-swap-32x64-s16-c2x1-regs", dict(layout="TN", dtype="bfloat16", epilogue=Epilogue(bias=True)),
     dict(block_m=32, block_n=64, num_warps=8, stages=16, cluster_m=2, epilogue_path="registers", swap_ab=True)),
    ("TT-swap-pingpong-128x128-c2x1-tma", dict(layout="TT"),
     dict(warp_specialization="pingpong", cluster_m=2, stages=5, swap_ab=True)),
    # five 40 KiB stages leave room for two staged output pieces, not four (epilogue_stages)
    ("NN-swap-192x128-s5-c1x2-tma-2pieces", dict(layout="NN"), dict(block_m=192, stages=5, cluster_n=2, swap_ab=True)),
    ("TN-192x128-16warps-s5-tma-2pieces", dict(layout="TN"), dict(block_m=192, num_warps=16, stages=5)),
]
SPLIT = dict(decomposition="split_k", epilogue_path="registers")
SPLIT_VARIANTS = [
    # (id, problem kwargs, spec kwargs): split-K main kernel + reduction kernel, uneven K slices
    ("NN-fp16-512x128x8192-s8", dict(m=512, n=128, k=8192, layout="NN"), dict(split_k=8)),
    ("TN-bf16-2048x128x4096-s3-c2x1", dict(m=2048, n=128, k=4096, layout="TN", dtype="bfloat16"),
     dict(split_k=3, cluster_m=2)),
    ("NT-100x136x1000-s5-8warps-all-gelu", dict(m=100, n=136, k=1000, layout="NT",
                                                epilogue=Epilogue(alpha=0.5, beta=0.25, bias=True, activation="gelu")),
     dict(split_k=5, num_warps=8, block_m=64, block_n=64, cluster_n=2)),
]


@needs_dsl
@pytest.mark.parametrize("pkw, skw", [v[1:] for v in VARIANTS], ids=[v[0] for v in VARIANTS])
def test_compiles_for_sm90a(backend, pkw, skw):
    p = GemmProblem(m=1032, n=968, k=1048, **pkw)
    s = spec(**skw)
    assert backend.supports(p, s), backend.supports(p, s).reason
    kernel = backend.compile(backend.render(p, s))
    assert kernel.source.problem == p and callable(kernel)


@needs_dsl
@pytest.mark.parametrize("pkw, skw", [v[1:] for v in SPLIT_VARIANTS], ids=[v[0] for v in SPLIT_VARIANTS])
def test_split_k_compiles_for_sm90a(backend, pkw, skw):
    p = GemmProblem(**pkw)
    s = spec(**SPLIT, **skw)
    assert backend.supports(p, s), backend.supports(p, s).reason
    kernel = backend.compile(backend.render(p, s))
    assert kernel.workspace_bytes == 4 * s.split_k * p.m * p.n


# Every kernel's PTX is dumped under one name (the jit function's): a script keeps each one as kernel<i>.ptx.
KEEP_PTX = textwrap.dedent("""
    import glob, os
    def keep_ptx(i):
        dump = os.environ["CUTE_DSL_DUMP_DIR"]
        (made,) = [f for f in glob.glob(os.path.join(dump, "*.ptx")) if not os.path.basename(f).startswith("kernel")]
        os.replace(made, os.path.join(dump, f"kernel{i}.ptx"))
""")


@needs_dsl
def test_unit_extent_compiles_to_2d_tma(tmp_path):
    """The PTX for M=1 (registers and TMA-store epilogues, unswapped and swapped, where the one-row D is
    the kernel's one-column D^T) and N=1 has no 1-D TMA (see above)."""
    script = KEEP_PTX + textwrap.dedent("""
        import os
        from cudal2.codegen.cute_dsl import CuteDslBackend
        from cudal2.ir import GemmProblem, KernelSpec
        be = CuteDslBackend()
        base = dict(backend="cute_dsl", num_warps=12, load_path="tma", warp_specialization="cooperative",
                    persistent=True, block_m=128, block_n=128, block_k=64, stages=4)
        cases = (((1, 8, 16, "NN"), "registers", False), ((1, 8, 16, "NN"), "tma_store", False),
                 ((64, 1, 64, "NT"), "registers", False), ((1, 1032, 64, "NT"), "tma_store", True),
                 ((1, 1032, 64, "NT"), "registers", True))
        for i, ((m, n, k, layout), path, swap) in enumerate(cases):
            p = GemmProblem(m=m, n=n, k=k, layout=layout)
            be.compile(be.render(p, KernelSpec(**base, epilogue_path=path, swap_ab=swap)))
            keep_ptx(i)
    """)
    env = {**os.environ, "CUTE_DSL_ARCH": "sm_90a", "CUTE_DSL_KEEP": "ptx", "CUTE_DSL_DUMP_DIR": str(tmp_path),
           "CUDAL2_CACHE_DIR": str(tmp_path / "cache"), "CUDAL2_CUTE_DSL_DISK_CACHE": "0"}
    subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, check=True, timeout=600)
    ptx = sorted(tmp_path.glob("kernel*.ptx"))
    assert len(ptx) == 5
    for f in ptx:
        text = f.read_text()
        assert "cp.async.bulk.tensor.2d" in text and "cp.async.bulk.tensor.1d" not in text, f.name


@needs_dsl
def test_kernels_launch_early_and_wait_for_the_previous_kernel_before_touching_memory(tmp_path):
    """Programmatic dependent launch: the GEMM kernel's PTX waits on the grid it depends on
    (griddepcontrol.wait) and lets the next one start (griddepcontrol.launch_dependents), in a
    shape-generic ping-pong kernel and a cooperative split-K one; a config without it has neither."""
    script = KEEP_PTX + textwrap.dedent("""
        import dataclasses
        from cudal2.codegen import cute_dsl
        from cudal2.codegen.cute_dsl import CuteDslBackend
        from cudal2.ir import GemmProblem, KernelSpec
        be = CuteDslBackend()
        base = dict(backend="cute_dsl", num_warps=12, load_path="tma", persistent=True, block_m=128,
                    block_n=128, block_k=64, stages=4)
        p = GemmProblem(m=256, n=8192, k=64, layout="NN")
        be.compile(be.render(p, KernelSpec(**base, warp_specialization="pingpong", shape_specialization="dynamic")))
        keep_ptx(0)
        be.compile(be.render(p.replace(k=4096), KernelSpec(**base, warp_specialization="cooperative",
                                                          decomposition="split_k", split_k=4,
                                                          split_k_reduction="workspace")))
        keep_ptx(1)
        made = cute_dsl.gemm_config
        cute_dsl.gemm_config = lambda *a: dataclasses.replace(made(*a), pdl=False)
        be = CuteDslBackend()
        be.compile(be.render(p.replace(n=4096), KernelSpec(**base, warp_specialization="cooperative")))
        keep_ptx(2)
    """)
    env = {**os.environ, "CUTE_DSL_ARCH": "sm_90a", "CUTE_DSL_KEEP": "ptx", "CUTE_DSL_DUMP_DIR": str(tmp_path),
           "CUDAL2_CACHE_DIR": str(tmp_path / "cache"), "CUDAL2_CUTE_DSL_DISK_CACHE": "0"}
    subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, check=True, timeout=600)
    texts = [(tmp_path / f"kernel{i}.ptx").read_text() for i in range(3)]
    for text in texts[:2]:
        assert "griddepcontrol.wait" in text and "griddepcontrol.launch_dependents" in text
    assert "griddepcontrol" not in texts[2]


@needs_dsl
def test_split_k_partials_of_whole_tiles_leave_in_pairs(tmp_path):
    """Element-by-element partial stores wrote each 32-byte sector in two halves (ncu on the H100,
    512x512x12288); when no tile crosses an edge, adjacent columns go out as one 8-byte store. An
    edge tile keeps the predicated element stores."""
    script = KEEP_PTX + textwrap.dedent("""
        from cudal2.codegen.cute_dsl import CuteDslBackend
        from cudal2.ir import GemmProblem, KernelSpec
        be = CuteDslBackend()
        base = dict(backend="cute_dsl", num_warps=8, load_path="tma", warp_specialization="cooperative",
                    persistent=True, block_m=64, block_n=128, block_k=64, stages=8, cluster_m=2,
                    decomposition="split_k", split_k=4, split_k_reduction="workspace", epilogue_path="registers")
        for i, (m, n, k) in enumerate(((512, 512, 2048), (520, 504, 2048))):
            be.compile(be.render(GemmProblem(m=m, n=n, k=k), KernelSpec(**base)))
            keep_ptx(i)
    """)
    env = {**os.environ, "CUTE_DSL_ARCH": "sm_90a", "CUTE_DSL_KEEP": "ptx", "CUTE_DSL_DUMP_DIR": str(tmp_path),
           "CUDAL2_CACHE_DIR": str(tmp_path / "cache"), "CUDAL2_CUTE_DSL_DISK_CACHE": "0"}
    subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, check=True, timeout=600)
    ptx = sorted(tmp_path.glob("kernel*.ptx"))
    assert len(ptx) == 2
    whole, edge = (f.read_text() for f in ptx)
    # 64x128 tile over 128 consumer threads: 64 fp32 partials each
    assert whole.count("st.global.v2.b32") == 32 and "st.global.b32" not in whole
    assert edge.count("st.global.b32") == 64 and "st.global.v2.b32" not in edge


@needs_dsl
@pytest.mark.parametrize("m, n, k", [(8, 8, 8), (1, 8, 16), (100, 1000, 40)])
def test_compiles_for_shapes_smaller_than_a_tile(backend, m, n, k):
    p = GemmProblem(m=m, n=n, k=k, layout="NN")
    backend.compile(backend.render(p, spec(epilogue_path="registers")))


@needs_dsl
def test_disk_cache_round_trip(backend):
    p = GemmProblem(m=256, n=256, k=256, layout="NT")
    src = backend.render(p, spec())
    first = backend.compile(src)
    assert not first.loaded_from_disk
    assert backend.compile(src) is first  # in-memory hit
    again = CuteDslBackend().compile(src)  # a fresh process would do the same: load the exported object
    assert again.loaded_from_disk


@needs_dsl
def test_launches_through_tvm_ffi_where_it_is_installed_and_the_artifacts_stay_apart(backend, monkeypatch):
    """With apache-tvm-ffi the kernel is compiled with the DSL's TVM-FFI option: its function takes the
    addresses, extents and stream handle as plain ints (cudal2.matmul's per-call cost). An object file
    of either kind never loads as the other: the file name carries the TVM-FFI version."""
    pytest.importorskip("tvm_ffi")
    import tvm_ffi

    p = GemmProblem(m=256, n=256, k=256, layout="NT")
    src = backend.render(p, spec(shape_specialization="dynamic"))
    kernel = CuteDslBackend().compile(src)
    assert kernel.ffi
    loaded = CuteDslBackend().compile(src)
    assert loaded.loaded_from_disk and loaded.ffi and isinstance(loaded._fn, tvm_ffi.Function)
    monkeypatch.setenv("CUDAL2_TVM_FFI", "0")
    plain = CuteDslBackend().compile(src)
    assert not plain.ffi and not plain.loaded_from_disk and not isinstance(plain._fn, tvm_ffi.Function)
    with pytest.raises(ValueError, match="multiples of 8"):  # bind makes the call's checks once
        kernel.bind(256, 250, 256, torch.device("cpu"))


# ---- operand checks in the call path (before anything is launched) ----------------------------------
@needs_dsl
def test_call_rejects_mismatched_operands(backend):
    p = GemmProblem(m=64, n=64, k=64, layout="NN", epilogue=Epilogue(bias=True))
    kernel = backend.compile(backend.render(p, spec(epilogue_path="registers")))
    a = torch.randn(64, 64, dtype=torch.float16)
    b = torch.randn(64, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="shape"):
        kernel(torch.randn(64, 32, dtype=torch.float16), b)
    with pytest.raises(ValueError, match="float16"):
        kernel(a.float(), b)
    with pytest.raises(ValueError, match="GPU"):
        kernel(a, b, bias=torch.randn(64, dtype=torch.float16))


def test_operand_check_ignores_the_strides_of_unit_dimensions():
    import torch

    from cudal2.codegen.operands import same_strides

    w = torch.zeros(1, 64)  # N=1, K=64: W.t() is (64, 1) with strides (1, 1), laid out as (1, 64) wants
    assert same_strides(w.t(), (1, 64))
    assert not same_strides(torch.zeros(64, 8).t(), (1, 64))  # a real mismatch is still caught


# ---- the persistent grid: one answer for the compile processes and the GPU side -------------------
def test_a_process_without_a_context_takes_the_record_and_never_keeps_the_table_s_estimate(monkeypatch, tmp_path):
    """A compile process holds no CUDA context, so the occupancy query fails there. It must read the
    answer the GPU worker recorded, and where none is recorded yet take the arch table's count for
    that call only: on an H100 the table's 33 clusters of 4 (30 fit) kept in a compile process made
    the worker compile every 2x2-cluster kernel again."""
    import cutlass.utils

    from cudal2.codegen import cute_dsl as C

    class NoContext:
        def get_max_active_clusters(self, size):
            raise RuntimeError("CUDA error code=3(b'CUDA_ERROR_NOT_INITIALIZED')")

    monkeypatch.setenv("CUDAL2_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake H100")
    monkeypatch.setattr(cutlass.utils, "HardwareInfo", NoContext)
    monkeypatch.setattr(C, "_ACTIVE_CLUSTERS", {})
    assert C._max_active_clusters(4, 132) == 33  # no record: the table, for now
    (tmp_path / "cute_dsl").mkdir(exist_ok=True)
    (tmp_path / "cute_dsl" / "max_active_clusters.json").write_text('{"Fake H100|4": 30}')
    assert C._max_active_clusters(4, 132) == 30  # recorded since: read, not the table kept from before

    class Live:
        def get_max_active_clusters(self, size):
            return {1: 132, 2: 66, 4: 30}[size]

    monkeypatch.setattr(cutlass.utils, "HardwareInfo", Live)  # a process with a context records its answer
    assert C._max_active_clusters(2, 132) == 66
    import json

    assert json.loads((tmp_path / "cute_dsl" / "max_active_clusters.json").read_text()) == {
        "Fake H100|4": 30, "Fake H100|2": 66}
    assert C.cluster_sizes() == (1, 2, 4)
