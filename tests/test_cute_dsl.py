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


def _sk_plan(m, n, k, units, **kw):
    """The kernel's stream-K plan (cute_sm90.scheduler, plain Python) for a grid of `units` clusters."""
    from cudal2.codegen.cute_sm90 import scheduler

    p = GemmProblem(m=m, n=n, k=k)
    return scheduler.stream_k_plan(gemm_config(p, spec(decomposition="stream_k", **kw)), m, n, k, units)


def _sk_plan_of(m, n, k, units, **kw):
    plan = _sk_plan(m, n, k, units, **kw)
    assert plan.units == units
    return (plan.dp_waves, plan.sk_tiles), plan.ctiles


@needs_dsl
def test_stream_k_plan_keeps_a_nearly_full_last_wave_alone():
    # 1024x16384 in 256x128 tiles, 2x1 clusters: 256 cluster tiles on 66 clusters, 58 left over (0.88
    # of a wave) -> three data-parallel waves and the 58 alone; with the old plan (one more wave
    # joined them) a column's two cluster tiles ran a whole tile of k apart
    (waves, sk), ctiles = _sk_plan_of(1024, 16384, 8192, 66, block_m=256, cluster_m=2)
    assert (ctiles, waves, sk) == (256, 3, 58)
    # a small remainder (10 of 132) takes one full wave with it, so no tile is cut into 14 pieces
    (waves, sk), ctiles = _sk_plan_of(128 * 142, 128, 8192, 132)
    assert (ctiles, waves, sk) == (142, 0, 142)
    (waves, sk), ctiles = _sk_plan_of(128 * 274, 128, 8192, 132)
    assert (ctiles, waves, sk) == (274, 1, 142)
    # fewer cluster tiles than clusters: all of them stream-K; an even grid: none
    assert _sk_plan_of(256, 4096, 4096, 132)[0] == (0, 64)
    assert _sk_plan_of(128 * 264, 128, 4096, 132)[0] == (2, 0)
    # a ragged cluster edge: 9 tile rows in 2x1 clusters make 5 cluster rows
    assert _sk_plan_of(1032, 968, 1048, 66, cluster_m=2)[1] == 5 * 8


def _sk_walk(m, n, k, units, **kw):
    """Every cluster's walk through the kernel's stream-K split (the scheduler's plan, and its
    stream_k_start and stream_k_segment run as plain integer code, undecorated), and the peers each
    owner of a shared tile adds, found as the kernel's owner loop finds them."""
    from cudal2.codegen.cute_sm90 import scheduler

    plan = _sk_plan(m, n, k, units, **kw)
    start = lambda u: scheduler.stream_k_start.__wrapped__(u, units, plan.sk_tiles, plan.lanes, plan.k_tiles)  # noqa: E731
    segment = scheduler.stream_k_segment.__wrapped__
    walks, owners = {}, {}
    for u in range(units):
        first, end = start(u), start(u + plan.lanes)
        it, steps = 0, []
        while it < plan.dp_waves * plan.k_tiles + end - first:
            tile, kt0, kts, g = segment(it, u, units, plan.dp_waves, plan.sk_tiles, plan.lanes, plan.k_tiles, plan.ctiles,
                                        first, end)
            steps.append((it, tile, kt0, kts))
            if kt0 == 0 and kts < plan.k_tiles:  # the owner of a shared tile: whose partials it adds
                peers, peer = [], u + plan.lanes
                while start(peer) < g + plan.k_tiles:
                    if start(peer + plan.lanes) > start(peer):
                        peers.append(peer)
                    peer += plan.lanes
                owners[tile] = (u, peers)
            it += kts
        walks[u] = steps
    scope = {"K_TILES": plan.k_tiles, "CTILES": plan.ctiles, "CTILES_M": plan.ctiles_m, "CTILES_N": plan.ctiles_n,
             "RASTER_ALONG_M": kw.get("raster_order", "along_m") == "along_m"}
    return scope, plan.lanes, walks, owners


@needs_dsl
@pytest.mark.parametrize("shape, units, kw, lanes", [
    ((1024, 16384, 8192), 66, dict(block_m=256, cluster_m=2), 2),  # 2 cluster rows: a lane per row
    ((2048, 16384, 2048), 66, dict(block_m=256, cluster_m=2), 2),  # 4 cluster rows, 66 clusters: gcd 2
    ((1032, 968, 1048), 66, dict(cluster_m=2), 1),  # 5 cluster rows: one lane
    ((256, 12288, 12288), 132, dict(block_n=256), 2),
    ((4096, 1024, 4096), 66, dict(cluster_n=2, raster_order="along_n"), 2),  # lanes across N
    # lanes only where the panel they keep in step is the larger operand's: B (8 MB) here is not
    ((12288, 256, 16384), 66, dict(cluster_m=2), 1),
    ((12288, 256, 16384), 66, dict(cluster_m=2, raster_order="along_n"), 2),  # A's rows in step
])
def test_stream_k_lanes_cover_every_k_step_once_and_keep_a_column_in_step(shape, units, kw, lanes):
    scope, got_lanes, walks, owners = _sk_walk(*shape, units, **kw)
    assert got_lanes == lanes
    kt = scope["K_TILES"]
    done = {}
    for u, steps in walks.items():
        for it, tile, kt0, kts in steps:
            for kk in range(kt0, kt0 + kts):
                assert (tile, kk) not in done, f"tile {tile} k {kk} twice (units {done[(tile, kk)]} and {u})"
                done[(tile, kk)] = u
    assert len(done) == scope["CTILES"] * kt  # every k-step of every cluster tile, once
    # a shared tile's owner adds exactly the clusters that computed its other k-steps
    for tile, (owner, peers) in owners.items():
        assert sorted({done[(tile, kk)] for kk in range(kt)} - {owner}) == peers
    # clusters at the same place in different lanes: one column of tiles (or one row, across N), same k
    along_m = scope["RASTER_ALONG_M"]
    across = scope["CTILES_M"] if along_m else scope["CTILES_N"]
    for u in range(0, len(walks), lanes):
        group = [walks[u + lane] for lane in range(lanes)]
        for segments in zip(*group):
            assert len({s[2] for s in segments}) == 1 and len({s[1] // across for s in segments}) == 1


@needs_dsl
def test_stream_k_workspace_has_a_tile_and_a_flag_per_cta():
    p, s = GemmProblem(m=256, n=12288, k=12288), spec(decomposition="stream_k", block_n=256)
    cfg = gemm_config(p, s)
    assert cfg.sm_count == 132 and cfg.tile_elems == 128 * 256
    assert _binding(p, s).workspace_shape(p.m, p.n) == (132 * 128 * 256 + 132,)


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
    assert cfg.raster_group == 1  # 5 clusters along M (9 tiles of 128 in pairs): no group of 2..4 divides 5
    assert (cfg.alpha, cfg.beta, cfg.has_bias, cfg.activation) == (0.5, 2.0, True, "gelu")
    for line in ("m=1032,", "stages=3,", "raster_group=1,", "activation='gelu',", f"spec key {s.key()}"):
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
    (dict(m=72, n=1, k=64, layout="NT"), dict(epilogue_path="registers"), "vector"),
    # the DSL compiler aborts on a 192-row column-major TMA-store tile (an H100 search lost its run to it)
    (dict(m=8192, n=256, k=256), dict(block_n=192, num_warps=16), "aborts"),
])
def test_swap_ab_refusals(pkw, skw, word):
    ok = CuteDslBackend().supports(GemmProblem(**pkw), spec(swap_ab=True, **skw))
    assert not ok and "swap_ab=True" in ok.reason and word in ok.reason
    if word == "aborts":  # and the registers epilogue is the way round it
        assert CuteDslBackend().supports(GemmProblem(**pkw), spec(swap_ab=True, **{**skw, "epilogue_path": "registers"}))


@pytest.mark.parametrize("shape, kw, group", [
    ("12288x256x16384", dict(block_m=256), 2),  # 2 N-tiles across the M raster: group 8 padded them to 8
    ("16384x128x128", {}, 1),
    ("256x12288x12288", dict(block_n=256), 8),  # 48 N-tiles
    ("8192x8192x4096", dict(block_n=256, cluster_n=2), 8),  # 32 tiles = 16 clusters
    ("8192x1536x4096", dict(block_n=256), 6),  # 6 N-tiles: the largest divisor <= 8
    ("1024x8192x4096", dict(raster_order="along_n", raster_group=4), 4),  # 8 M-tiles across an N raster
    ("1000x8192x4096", dict(raster_order="along_n", cluster_m=2), 4),  # 8 tiles = 4 clusters
])
def test_raster_group_divides_the_clusters_across_the_raster(shape, kw, group):
    # the DSL's scheduler pads the cluster count across the raster to a multiple of the group and
    # computes the padding tiles: the rendered group must divide that count
    assert gemm_config(GemmProblem.parse(shape), spec(**{"stages": 3, **kw})).raster_group == group


@needs_dsl
def test_the_dsl_scheduler_runs_no_padding_tiles_with_the_rendered_group():
    # The DSL's StaticPersistentTileScheduler pads the cluster count across the raster to a multiple
    # of the group and schedules the padding too (its size is what is_valid_tile tests against).
    # Pin both facts: with group 8 a 48x2 tile grid becomes 384 work units; with the group the
    # backend renders, exactly the 96 real tiles. If a DSL release stops padding, the first assert
    # says that effective_raster_group() is no longer needed.
    import cutlass.cute as cute
    import cutlass.utils as utils

    from cudal2.codegen.cute_dsl import effective_raster_group

    p, s = GemmProblem(m=12288, n=256, k=4096), spec(block_m=256, stages=3)
    group = effective_raster_group(p, s)
    sizes = []

    @cute.jit
    def probe():
        for g in (8, group):
            params = utils.PersistentTileSchedulerParams((48, 2, 1), (1, 1, 1), g, True)
            sizes.append(cute.size(params.problem_layout_ncluster_mnl))

    cute.compile(probe)
    assert sizes == [384, 96]


@pytest.mark.parametrize("skw, pieces", [
    (dict(block_n=192, stages=4), 4),  # 160 KiB of stages: four 8 KiB pieces fit
    (dict(block_n=192, stages=5), 2),  # 200 KiB: two fit, four would not
    (dict(block_m=192, stages=5, swap_ab=True), 2),  # the same kernel, D's tile named transposed
    (dict(block_m=192, num_warps=16, stages=5), 2),  # 12 KiB pieces on three consumer warpgroups
    (dict(warp_specialization="pingpong", stages=6), 4),  # a set of pieces per warpgroup
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
    """The PTX for M=1 (registers and TMA-store epilogues) and N=1 has no 1-D TMA (see above)."""
    script = KEEP_PTX + textwrap.dedent("""
        import os
        from cudal2.codegen.cute_dsl import CuteDslBackend
        from cudal2.ir import GemmProblem, KernelSpec
        be = CuteDslBackend()
        base = dict(backend="cute_dsl", num_warps=12, load_path="tma", warp_specialization="cooperative",
                    persistent=True, block_m=128, block_n=128, block_k=64, stages=4)
        for i, ((m, n, k, layout), path) in enumerate((((1, 8, 16, "NN"), "registers"), ((1, 8, 16, "NN"), "tma_store"),
                                                       ((64, 1, 64, "NT"), "registers"))):
            p = GemmProblem(m=m, n=n, k=k, layout=layout)
            be.compile(be.render(p, KernelSpec(**base, epilogue_path=path)))
            keep_ptx(i)
    """)
    env = {**os.environ, "CUTE_DSL_ARCH": "sm_90a", "CUTE_DSL_KEEP": "ptx", "CUTE_DSL_DUMP_DIR": str(tmp_path),
           "CUDAL2_CACHE_DIR": str(tmp_path / "cache"), "CUDAL2_CUTE_DSL_DISK_CACHE": "0"}
    subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, check=True, timeout=600)
    ptx = sorted(tmp_path.glob("kernel*.ptx"))
    assert len(ptx) == 3
    for f in ptx:
        text = f.read_text()
        assert "cp.async.bulk.tensor.2d" in text and "cp.async.bulk.tensor.1d" not in text, f.name


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


def test_register_splits_ptxas_rejects_and_single_stage_pipelines_are_refused():
    from cudal2.ir import SpecError

    base = dict(backend="cute_dsl", arch="sm_90a", load_path="tma", warp_specialization="cooperative",
                persistent=True, num_warps=12)
    KernelSpec(**base, producer_registers=40, consumer_registers=232)  # the defaults, spelled out
    for bad in (dict(producer_registers=200), dict(stages=1)):
        with pytest.raises(SpecError) as e:
            KernelSpec(**base, **bad)
        assert next(iter(bad)) in str(e.value)


# ---- shape-generic kernels ------------------------------------------------------------------------------
DYN = dict(shape_specialization="dynamic")


def test_a_shape_generic_module_is_one_per_problem_class():
    b = CuteDslBackend()
    s = spec(**DYN)
    one, two = GemmProblem(m=33, n=4096, k=4096, layout="NT"), GemmProblem(m=3001, n=1024, k=512, layout="NT")
    assert b.render(one, s).text == b.render(two, s).text
    assert b.shape_key(one, s) == b.shape_key(two, s) == one.class_key()
    assert b.render(one, s).text != b.render(one.replace(layout="NN"), s).text
    assert "MxNxK-float16-NT" in b.render(one, s).text and "m=None," in b.render(one, s).text
    assert b.shape_key(one, spec()) == one.key()  # a static kernel's is the problem itself


def test_shape_generic_split_k_is_compiled_per_variant():
    b = CuteDslBackend()
    s = spec(decomposition="split_k", split_k=4, epilogue_path="registers", **DYN)
    whole, edge = GemmProblem(m=512, n=512, k=8192), GemmProblem(m=520, n=504, k=8192)
    assert b.variant_key(whole, s) != b.variant_key(edge, s)
    assert gemm_config(whole, s).whole_tiles and not gemm_config(edge, s).whole_tiles
    assert b.variant_key(whole, spec(**DYN)) == ""  # data-parallel: one binary for the class


def test_shape_generic_stream_k_is_refused():
    ok = CuteDslBackend().supports(GemmProblem(m=256, n=4096, k=4096), spec(decomposition="stream_k", **DYN))
    assert not ok and "one shape" in ok.reason and "static" in ok.reason


@pytest.mark.parametrize("m, n, k, skw, words", [
    (64, 4100, 4096, dict(layout="NT"), ("multiples of 8", "n")),  # B column-major: its rows are K; D's are N
    (64, 4096, 4100, dict(layout="NT"), ("multiples of 8", "k")),
    (0, 4096, 4096, dict(layout="NT"), ("empty",)),
    (1, 4096, 4096, dict(layout="NT", swap_ab=True, block_m=192), ("vector",)),
    (512, 512, 128, dict(decomposition="split_k", split_k=4, epilogue_path="registers"), ("k-tiles",)),
    (520, 504, 8192, dict(decomposition="split_k", split_k=4, epilogue_path="registers"), ("edge tiles",)),
])
def test_a_shape_generic_kernel_says_which_shapes_it_cannot_serve(m, n, k, skw, words):
    from cudal2.codegen.cute_sm90.kernel import shape_refusal

    layout = skw.pop("layout", "NN")
    compiled_for = GemmProblem(m=512, n=512, k=8192, layout=layout)  # whole tiles, every extent aligned
    why = shape_refusal(gemm_config(compiled_for, spec(**DYN, **skw)), m, n, k)
    assert why and all(w in why for w in words), why
    assert not shape_refusal(gemm_config(compiled_for, spec(**DYN, **skw)), 512, 512, 8192)


@pytest.mark.parametrize("ctiles_m, ctiles_n, group, splits", [
    (5, 7, 3, 1), (4, 9, 8, 2), (1, 1, 8, 3), (13, 2, 4, 1), (2, 13, 8, 1), (6, 6, 1, 2), (48, 2, 8, 1)])
@pytest.mark.parametrize("along_m", [True, False])
@needs_dsl
def test_grouped_walk_visits_every_unit_once_whatever_the_group(ctiles_m, ctiles_n, group, splits, along_m):
    from cudal2.codegen.cute_sm90.scheduler import grouped_unit

    units = [grouped_unit(w, ctiles_m, ctiles_n, group, along_m) for w in range(ctiles_m * ctiles_n * splits)]
    assert sorted(units) == [(m, n, s) for m in range(ctiles_m) for n in range(ctiles_n) for s in range(splits)]


@needs_dsl
def test_grouped_walk_is_the_dsl_schedulers_where_the_group_divides():
    """Where no padding arises the shape-generic walk takes the tiles in the DSL scheduler's order, so
    a shape-generic kernel and one compiled for the shape visit them alike."""
    import cutlass.cute as cute
    import cutlass.utils as utils

    from cudal2.codegen.cute_sm90.scheduler import grouped_unit

    cases = [((6, 8), 4, True), ((6, 8), 2, False), ((5, 3), 1, True), ((6, 4), 3, False)]
    got = {}

    @cute.jit
    def probe():
        for (tm, tn), g, along in cases:
            params = utils.PersistentTileSchedulerParams((tm, tn, 1), (1, 1, 1), g, along)
            got[(tm, tn, g, along)] = [tuple(params.problem_layout_ncluster_mnl.get_flat_coord(w))[:2]
                                       for w in range(tm * tn)]

    cute.compile(probe)
    for (tm, tn), g, along in cases:
        assert got[(tm, tn, g, along)] == [grouped_unit(w, tm, tn, g, along)[:2] for w in range(tm * tn)]


DYNAMIC_VARIANTS = [
    ("NT-pingpong-c1x2-tma", dict(layout="NT"), dict(warp_specialization="pingpong", stages=5, cluster_n=2)),
    ("NN-coop-c2x1-regs-bias", dict(layout="NN", epilogue=Epilogue(bias=True, activation="relu")),
     dict(cluster_m=2, epilogue_path="registers")),
    ("TN-bf16-192-16warps-raster-n", dict(layout="TN", dtype="bfloat16"),
     dict(block_m=192, num_warps=16, raster_order="along_n", raster_group=4)),
    ("TT-64x96-8warps-s6", dict(layout="TT"), dict(block_m=64, block_n=96, num_warps=8, stages=6)),
    ("NT-swap-192-beta-tma", dict(layout="NT", epilogue=Epilogue(alpha=0.5, beta=0.25)),
     dict(swap_ab=True, block_m=192, stages=4)),
    ("NN-split3-edge", dict(m=520, n=504, k=4096, layout="NN"),
     dict(decomposition="split_k", split_k=3, epilogue_path="registers", num_warps=8, block_m=64)),
    ("NT-split4-whole-gelu", dict(m=512, n=512, k=8192, layout="NT", epilogue=Epilogue(bias=True, activation="gelu")),
     dict(decomposition="split_k", split_k=4, epilogue_path="registers")),
]


@needs_dsl
@pytest.mark.parametrize("pkw, skw", [v[1:] for v in DYNAMIC_VARIANTS], ids=[v[0] for v in DYNAMIC_VARIANTS])
def test_shape_generic_kernels_compile_for_sm90a(backend, pkw, skw):
    p = GemmProblem(**{"m": 1000, "n": 4096, "k": 1024, **pkw})
    s = spec(**DYN, **skw)
    assert backend.supports(p, s), backend.supports(p, s).reason
    kernel = backend.compile(backend.render(p, s))
    assert kernel.dynamic and kernel.source.problem == p


@needs_dsl
def test_shape_generic_kernel_checks_each_calls_shape(backend):
    p = GemmProblem(m=1000, n=4096, k=1024, layout="NT")
    kernel = backend.compile(backend.render(p, spec(**DYN)))
    a = torch.randn(33, 1024, dtype=torch.float16)
    with pytest.raises(ValueError, match="multiples of 8"):
        kernel(a, torch.randn(4100, 1024, dtype=torch.float16).t())  # N=4100: D's rows are not 16-byte
    with pytest.raises(ValueError, match="GPU"):  # a shape it serves gets as far as the device check
        kernel(a, torch.randn(4096, 1024, dtype=torch.float16).t())


# ---- the widths and register budgets the hardware allows -------------------------------------------------
def _peer_specs():
    """quack's 44 sm90 configs as this backend's spec fields (less stages)."""
    from cudal2.bench.peers import quack_sm90_configs

    return [{k: v for k, v in c.to_spec_fields().items() if k not in BASE or v != BASE[k]} for c in quack_sm90_configs()]


def _deepest(backend, problem, fields):
    """The spec with the most stages that this backend takes for problem, or None."""
    for stages in range(8, 1, -1):
        try:
            s = spec(**{**fields, "stages": stages})
        except SpecError:
            continue
        if backend.supports(problem, s):
            return s
    return None


@pytest.mark.parametrize("shape", ["4096x4096x4096-NT", "8192x8192x4096-NN", "13824x5120x640-NT",
                                   "5120x5120x5120-NT", "3000x8192x8192-TN"])
def test_every_peer_config_is_expressible_without_opting_in(shape):
    dims, layout = shape.split("-")
    p = GemmProblem.parse(dims, layout=layout)
    b = CuteDslBackend()
    configs = _peer_specs()
    assert len(configs) == len({str(sorted(c.items())) for c in configs}) == 44
    missing = [c for c in configs if _deepest(b, p, c) is None]
    assert not missing, missing


@pytest.mark.parametrize("fields, producer, consumer", [
    (dict(block_m=128, block_n=208, warp_specialization="pingpong"), 24, 240),  # 208 accumulators
    (dict(block_m=256, block_n=208), 24, 240),
    (dict(block_m=128, block_n=192, warp_specialization="pingpong"), 40, 232),  # 192 fit beside 40/232
    (dict(block_m=128, block_n=128), 40, 232),
    (dict(block_m=192, block_n=128, num_warps=16), 40, 152),  # three consumer warpgroups keep 40
])
def test_tiles_get_the_registers_their_accumulators_need(fields, producer, consumer):
    from cudal2.codegen.cute_dsl import default_consumer_registers, default_producer_registers

    s = spec(**fields, stages=3)
    assert (default_producer_registers(s), default_consumer_registers(s)) == (producer, consumer)
    assert CuteDslBackend().supports(GemmProblem(m=4096, n=4096, k=4096), s)


def test_a_tile_past_the_largest_register_budget_is_refused_with_the_budget():
    b, p = CuteDslBackend(), GemmProblem(m=4096, n=4096, k=4096)
    ok = b.supports(p, spec(block_m=128, block_n=256, warp_specialization="pingpong", stages=3))  # 256 > 240 - 32
    assert not ok and "ping-pong gives each consumer warpgroup a whole tile" in ok.reason and "256" in ok.reason
    ok = b.supports(p, spec(block_m=128, block_n=208, warp_specialization="pingpong", stages=3,
                            producer_registers=40, consumer_registers=232))  # the spec's own counts are kept
    assert not ok and "producer_registers=24 with consumer_registers=240" in ok.reason


def test_widths_step_by_sixteen_and_pieces_divide_them():
    from cudal2.codegen.cute_dsl import CAPABILITIES, KERNEL_WIDTHS, epilogue_piece_width

    assert KERNEL_WIDTHS == list(range(16, 257, 16))
    assert CAPABILITIES.allowed("block_n", "sm_90a") == frozenset(KERNEL_WIDTHS)
    for w in KERNEL_WIDTHS:
        assert w % epilogue_piece_width(w) == 0
    assert (epilogue_piece_width(208), epilogue_piece_width(192), epilogue_piece_width(16)) == (16, 32, 16)
    with pytest.raises(SpecError):
        spec(block_n=200)  # a WGMMA width, but not one the epilogue stores in whole pieces


NEW_FAMILIES = [  # (id, spec fields): the tiles the widths and register budgets add, as the kernel sees them
    ("pingpong-128x160", dict(block_m=128, block_n=160, warp_specialization="pingpong")),
    ("pingpong-128x192", dict(block_m=128, block_n=192, warp_specialization="pingpong")),
    ("pingpong-128x208-regs", dict(block_m=128, block_n=208, warp_specialization="pingpong",
                                   epilogue_path="registers")),
    ("pingpong-192x128", dict(block_m=192, block_n=128, warp_specialization="pingpong")),
    ("coop-256x208", dict(block_m=256, block_n=208)),
    ("coop-128x224-c2x1", dict(block_m=128, block_n=224, cluster_m=2)),
    ("coop-swap-160x256", dict(block_m=160, block_n=256, swap_ab=True)),  # the kernel's tile: 256x160
    ("coop-128x80-8warps", dict(block_m=128, block_n=80, num_warps=8)),
]


@needs_dsl
@pytest.mark.parametrize("fields", [f for _, f in NEW_FAMILIES], ids=[i for i, _ in NEW_FAMILIES])
def test_new_tile_families_compile_without_spills(tmp_path, fields):
    """Each compiles for sm_90a; where ptxas is on the PATH, its report of the kernel's PTX shows no
    spills (setmaxnreg hands the consumers the registers the accumulators need)."""
    import shutil

    p = GemmProblem(m=4096, n=4096, k=4096, layout="NT")
    s = _deepest(CuteDslBackend(), p, {**fields, "stages": 3})
    assert s is not None, fields
    script = KEEP_PTX + textwrap.dedent(f"""
        from cudal2.codegen.cute_dsl import CuteDslBackend
        from cudal2.ir import GemmProblem, KernelSpec
        be = CuteDslBackend()
        be.compile(be.render(GemmProblem.parse("4096x4096x4096", layout="NT"), KernelSpec.from_json({s.to_json()!r})))
        keep_ptx(0)
    """)
    env = {**os.environ, "CUTE_DSL_ARCH": "sm_90a", "CUTE_DSL_KEEP": "ptx", "CUTE_DSL_DUMP_DIR": str(tmp_path),
           "CUDAL2_CACHE_DIR": str(tmp_path / "cache"), "CUDAL2_CUTE_DSL_DISK_CACHE": "0"}
    subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, check=True, timeout=600)
    if shutil.which("ptxas") is None:
        pytest.skip("compiled; ptxas is not on the PATH to report spills")
    report = subprocess.run(["ptxas", "-arch=sm_90a", "-v", str(tmp_path / "kernel0.ptx"), "-o", os.devnull],
                            capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stderr[-2000:]
    assert "0 bytes spill stores, 0 bytes spill loads" in report.stderr, report.stderr[-2000:]


def test_peer_configs_map_to_specs_and_back():
    from cudal2.bench.peers import PeerConfig, quack_sm90_configs

    for c in quack_sm90_configs():
        s = _deepest(CuteDslBackend(), GemmProblem(m=4096, n=4096, k=4096), c.to_spec_fields())
        assert s is not None and PeerConfig.from_spec(s) == c
    swapped = PeerConfig(256, 160, False, 2, 1, True).to_spec_fields()
    assert (swapped["block_m"], swapped["block_n"], swapped["cluster_m"], swapped["cluster_n"]) == (160, 256, 1, 2)
    assert PeerConfig.from_spec(spec(decomposition="split_k", split_k=2, epilogue_path="registers")) is None


def test_quack_is_forced_to_its_own_sm90_config_not_the_bare_defaults(monkeypatch):
    """quack's GemmConfig defaults to its dynamic persistent scheduler, which its own sm90 list turns
    off: the peer kernel must run the config quack's autotuner would run."""
    import sys
    import types
    from dataclasses import asdict, dataclass

    from cudal2.bench.peers import quack_config, quack_sm90_configs

    @dataclass
    class FakeConfig:
        tile_m: int = 128
        tile_n: int = 192
        pingpong: bool = True
        cluster_m: int = 2
        cluster_n: int = 1
        swap_ab: bool = False
        is_dynamic_persistent: bool = True
        device_capacity: int = 9

    listed = [FakeConfig(**asdict(c), is_dynamic_persistent=False) for c in quack_sm90_configs()]
    module = types.SimpleNamespace(get_all_configs=lambda: [FakeConfig(device_capacity=10)] + listed)
    monkeypatch.setitem(sys.modules, "quack", types.ModuleType("quack"))
    monkeypatch.setitem(sys.modules, "quack.gemm_config", module)
    want = quack_sm90_configs()[5]
    got = quack_config(FakeConfig, asdict(want))
    assert got in listed and not got.is_dynamic_persistent and got.device_capacity == 9
    assert (got.tile_m, got.tile_n, got.swap_ab) == (want.tile_m, want.tile_n, want.swap_ab)
    module.get_all_configs = lambda: []  # a quack without that config: built with the sm90 flags
    built = quack_config(FakeConfig, asdict(want))
    assert not built.is_dynamic_persistent and built.device_capacity == 9
