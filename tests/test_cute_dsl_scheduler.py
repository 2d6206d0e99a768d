"""CuTe DSL backend on the CPU, its tile scheduler (cudal2/codegen/cute_sm90/scheduler.py): the stream-K
plan and the walk of each CTA over it, the workspace it needs, and the grouped rasterization of the
data-parallel walk, checked as plain integer code against what the kernel's owners and the DSL's own
persistent scheduler do."""

import ast
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# test_cute_dsl sets the DSL's target for a machine without a GPU before anything imports the DSL
from test_cute_dsl import BASE, KEEP_PTX, needs_dsl, spec

from cudal2.codegen.cute_dsl import gemm_config
from cudal2.ir import GemmProblem


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


def _undecorated(module, name: str):
    """module.name as plain Python, without its cute.jit decorator, built from the module's source: once
    a kernel that calls it has been compiled in this process, the DSL's rewritten body (its `if` turned
    into MLIR regions) is what the decorated function's __wrapped__ runs, and that needs an MLIR context."""
    tree = ast.parse(Path(module.__file__).read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    fn.decorator_list = []
    scope = dict(vars(module))
    exec(compile(ast.Module(body=[fn], type_ignores=[]), module.__file__, "exec"), scope)
    return scope[name]


def _sk_walk(m, n, k, units, **kw):
    """Every cluster's walk through the kernel's stream-K split (the scheduler's plan, and its
    stream_k_start and stream_k_segment run as plain integer code, undecorated), and the peers each
    owner of a shared tile adds, found as the kernel's owner loop finds them."""
    from cudal2.codegen.cute_sm90 import scheduler

    plan = _sk_plan(m, n, k, units, **kw)
    stream_k_start = _undecorated(scheduler, "stream_k_start")
    start = lambda u: stream_k_start(u, units, plan.sk_tiles, plan.lanes, plan.k_tiles)  # noqa: E731
    segment = _undecorated(scheduler, "stream_k_segment")
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
    from cudal2.codegen.cute_sm90.binding import GemmBinding

    assert GemmBinding(cfg).workspace_shape(p.m, p.n) == (132 * 128 * 256 + 132,)


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


@pytest.mark.parametrize("shape, kw, walk, group", [
    # 43 clusters across (86 tiles of 192 columns, clusters 1x2): no divisor of 43 reaches 8
    ("16384x16384x3072", dict(block_m=256, block_n=192, cluster_n=2), True, 8),
    ("1032x968x1048", dict(block_n=96, stages=6), True, 8),  # 11 tiles
    ("1100x8192x4096", dict(raster_order="along_n", raster_group=4), True, 4),  # 9 M-tiles: 3 divides, 4 does not
    ("8192x8192x4096", dict(block_n=256, cluster_n=2), False, 8),  # 16 clusters: 8 divides
    ("12288x256x16384", dict(block_m=256), False, 2),  # 2 across: the whole raster is one group
    ("8192x1536x4096", dict(block_n=256), False, 6),  # 6 across: one group of all 6
    ("4096x4096x4096", dict(block_n=96, shape_specialization="dynamic"), True, 8),
])
def test_static_kernels_walk_the_specs_group(shape, kw, walk, group):
    # where the DSL's static scheduler would cut the group below what the spec asks (and the raster
    # holds), the kernel walks with the backend's grouped walk, whose last group is narrower
    cfg = gemm_config(GemmProblem.parse(shape), spec(**{"stages": 3, **kw}))
    assert (cfg.grouped_walk, cfg.raster_group) == (walk, group)


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


def _grouped_walk(ctiles_m, ctiles_n, group, splits, along_m):
    """The shape-generic kernel's walk over every work unit: the scheduler's grouped_unit run as plain
    integer code (undecorated) on the divisors its host side makes."""
    from cudal2.codegen.cute_sm90 import scheduler

    grouped_unit = _undecorated(scheduler, "grouped_unit")
    divisors = scheduler.grouped_walk_divisors(ctiles_m, ctiles_n, group, along_m)
    return [grouped_unit(w, *divisors, group, splits, along_m) for w in range(ctiles_m * ctiles_n * splits)]


def _grouped_order(ctiles_m, ctiles_n, group, splits, along_m):
    """Grouped rasterization spelled out: K slice by K slice, the cluster tiles across the raster cut
    into groups of `group` (the last one what is left), each group walked along the raster a row of
    the group at a time."""
    along, across = (ctiles_m, ctiles_n) if along_m else (ctiles_n, ctiles_m)
    order = []
    for s in range(splits):
        for first in range(0, across, group):
            for step in range(along):
                for lane in range(first, min(first + group, across)):
                    order.append((step, lane, s) if along_m else (lane, step, s))
    return order


@pytest.mark.parametrize("ctiles_m, ctiles_n, group, splits", [
    (5, 7, 3, 1), (4, 9, 8, 2), (1, 1, 8, 3), (13, 2, 4, 1), (2, 13, 8, 1), (6, 6, 1, 2), (48, 2, 8, 1)])
@pytest.mark.parametrize("along_m", [True, False])
@needs_dsl
def test_grouped_walk_visits_every_unit_once_whatever_the_group(ctiles_m, ctiles_n, group, splits, along_m):
    units = _grouped_walk(ctiles_m, ctiles_n, group, splits, along_m)
    assert sorted(units) == [(m, n, s) for m in range(ctiles_m) for n in range(ctiles_n) for s in range(splits)]


@needs_dsl
def test_grouped_walk_takes_the_units_in_grouped_order_for_any_problem():
    """The walk's divisions by fast divisors made once per launch (and by the compile-time group width
    in full groups) take the same units in the same order as grouped rasterization spelled out, over
    problems, tiles, clusters, groups and K slices where groups divide, do not, or are one wide."""
    def ceil(a, b):
        return -(-a // b)

    cases = 0
    for m, n in ((1, 1), (64, 4096), (1000, 968), (4096, 4096), (12288, 256), (3001, 1024), (520, 8200)):
        for tile_m, tile_n, cluster_m, cluster_n in ((128, 128, 1, 1), (128, 256, 2, 1), (256, 128, 1, 2),
                                                     (64, 32, 2, 2), (192, 96, 1, 1)):
            ctiles_m, ctiles_n = ceil(ceil(m, tile_m), cluster_m), ceil(ceil(n, tile_n), cluster_n)
            for group in (1, 2, 3, 4, 8):
                for splits in (1, 3):
                    for along_m in (True, False):
                        want = _grouped_order(ctiles_m, ctiles_n, group, splits, along_m)
                        assert _grouped_walk(ctiles_m, ctiles_n, group, splits, along_m) == want, \
                            (m, n, tile_m, tile_n, cluster_m, cluster_n, group, splits, along_m)
                        cases += 1
    assert cases == 7 * 5 * 5 * 2 * 2


@needs_dsl
def test_grouped_walk_is_the_dsl_schedulers_where_the_group_divides():
    """Where no padding arises the shape-generic walk takes the tiles in the DSL scheduler's order, so
    a shape-generic kernel and one compiled for the shape visit them alike."""
    import cutlass.cute as cute
    import cutlass.utils as utils

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
        assert got[(tm, tn, g, along)] == [u[:2] for u in _grouped_walk(tm, tn, g, 1, along)]


@needs_dsl
def test_shape_generic_walk_divides_by_no_run_time_divisor(tmp_path):
    """The shape-generic walk's per-tile divisions (work unit into K slice, group and place in the group)
    are fast divisors made on the host and compile-time widths: a data-parallel kernel and a split-K
    one hold no integer division or remainder instruction, as the kernels compiled for one shape hold
    none (the walk's code runs in the producer's and the consumers' loops, 12 divisions before)."""
    kernels = [
        (dict(m=64, n=4096, k=4096, layout="NT"), dict(block_m=32, block_n=128, num_warps=8, stages=8, swap_ab=True)),
        (dict(m=4096, n=4096, k=4096, layout="NT"), dict(warp_specialization="pingpong", stages=5)),
        (dict(m=512, n=512, k=8192), dict(num_warps=8, block_m=64, stages=8, cluster_m=2, decomposition="split_k",
                                          split_k=4, epilogue_path="registers")),
    ]
    specs = [(pkw, {**BASE, **skw, "shape_specialization": "dynamic"}) for pkw, skw in kernels]
    script = KEEP_PTX + textwrap.dedent(f"""
        from cudal2.codegen.cute_dsl import CuteDslBackend
        from cudal2.ir import GemmProblem, KernelSpec
        be = CuteDslBackend()
        for i, (pkw, skw) in enumerate({specs!r}):
            be.compile(be.render(GemmProblem(**pkw), KernelSpec(**skw)))
            keep_ptx(i)
    """)
    env = {**os.environ, "CUTE_DSL_ARCH": "sm_90a", "CUTE_DSL_KEEP": "ptx", "CUTE_DSL_DUMP_DIR": str(tmp_path),
           "CUDAL2_CACHE_DIR": str(tmp_path / "cache"), "CUDAL2_CUTE_DSL_DISK_CACHE": "0"}
    subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, check=True, timeout=600)
    ptx = sorted(tmp_path.glob("kernel*.ptx"))
    assert len(ptx) == len(kernels)
    for f in ptx:
        divisions = re.findall(r"^\s*(?:div|rem)\.[su]\d+.*$", f.read_text(), flags=re.MULTILINE)
        assert divisions == [], (f.name, divisions)
