"""Which output tiles (and which k-ranges of them) each persistent CTA of the Hopper GEMM computes.

Data-parallel and split-K: a persistent walk over whole work units in grouped rasterization;
split-K's units are (output tile, K slice) pairs, the slice being the walk's batch mode. Slice s
covers k-tiles [s * k_tiles // split_k, (s + 1) * k_tiles // split_k): never empty, since
1 <= split_k <= k_tiles. A kernel compiled for one shape uses the DSL's static persistent scheduler
where a divisor of the clusters across the raster gives the spec's raster group (the DSL pads that
count to a multiple of the group and runs the padding tiles). A shape-generic kernel cannot know
that count, and a static one whose count has no such divisor (a prime such as 43 would cut the group
to 1), walk with GroupedTileScheduler instead, whose last group is as wide as what is left.

Stream-K: data-parallel waves first, then stream-K for the rest (CUTLASS's hybrid). The work unit is
a cluster: its CTAs take the same cluster tile (cluster_m x cluster_n output tiles) and the same
k-range, so the operand tiles they multicast to each other stay in step. The cluster tiles left over
after the last full wave are cut into k-iterations (tile-major, k_tiles each) and every cluster takes
one contiguous, even range of them (of its lane's, below). When those leftovers fill less than half
a wave, one full wave joins them (so no tile is shared by more than about three clusters); otherwise
they go alone, which keeps the clusters working on one column of tiles at nearly the same k and so
reading the same operand slabs from L2. A range starts and ends anywhere in a tile: a CTA whose first
segment is not a tile's first k-iteration hands its fp32 partial over through its own workspace slot
and flag; the CTA of the same cluster rank that holds the tile's first k-iteration (the owner) adds
its peers' partials, in cluster order (deterministic), then runs the epilogue. Owners wait only at
the end of their range, for segments their peers process first, so there are no wait chains; the grid
never exceeds what is co-resident (one CTA per SM). All stream-K without the data-parallel waves is
much slower: tiles done at the same time then lie far apart and share nothing in L2.

The stream-K tiles are shared out in lanes: lane l takes the cluster tiles whose row across the
raster is l modulo the lane count, and the clusters u with u % lanes == l split them among themselves
alone. Clusters at the same place in different lanes then work on neighbouring tiles of one column
(raster along N: one row) at the same k, and read its operand slab from L2 together. (In one lane,
the cluster tiles of a column can run up to a tile of k apart and read B from DRAM twice; the
measurements are in docs/results.md.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cutlass
import cutlass.cute as cute
from cutlass.cutlass_dsl import Int32, extract_mlir_values, new_from_mlir_values
from cutlass.utils.static_persistent_tile_scheduler import WorkTileInfo

from .config import GemmConfig


def split_range(s, k_tiles: int, split_k: int):
    """(first k-tile, number of k-tiles) of K slice s (an Int32 in the kernel)."""
    first = (s * k_tiles) // split_k
    return first, ((s + 1) * k_tiles) // split_k - first


@dataclass(frozen=True)
class StreamKPlan:
    """How a stream-K grid of `units` clusters shares the cluster tiles of one problem."""

    units: int  # clusters in the grid
    dp_waves: int  # whole data-parallel waves before the stream-K part
    sk_tiles: int  # cluster tiles shared out by k-iteration
    lanes: int  # lanes the stream-K tiles are shared out in
    ctiles_m: int  # cluster tiles along M and N (a ragged edge runs out-of-bounds tiles)
    ctiles_n: int
    k_tiles: int  # k-tiles of one output tile

    @property
    def ctiles(self) -> int:
        return self.ctiles_m * self.ctiles_n


def stream_k_plan(cfg: GemmConfig, m: int, n: int, k: int, max_active_clusters: int) -> StreamKPlan:
    """The plan for an m x n x k problem on a grid of at most max_active_clusters clusters."""
    tiles_m = (m + cfg.tile_m - 1) // cfg.tile_m
    tiles_n = (n + cfg.tile_n - 1) // cfg.tile_n
    ctiles_m = (tiles_m + cfg.cluster_m - 1) // cfg.cluster_m
    ctiles_n = (tiles_n + cfg.cluster_n - 1) // cfg.cluster_n
    k_tiles = (k + cfg.tile_k - 1) // cfg.tile_k
    ctiles = ctiles_m * ctiles_n
    units = min(max_active_clusters, cfg.sm_count // cfg.cluster_size, ctiles * k_tiles)
    dp_waves, sk_tiles = _waves_and_shared_tiles(ctiles, units)
    lanes = _lanes(cfg, m, n, ctiles_m, ctiles_n, units)
    return StreamKPlan(units, dp_waves, sk_tiles, lanes, ctiles_m, ctiles_n, k_tiles)


def _waves_and_shared_tiles(ctiles: int, clusters: int) -> tuple[int, int]:
    """(data-parallel waves, stream-K cluster tiles) for a grid of `clusters` clusters."""
    rem = ctiles % clusters
    if rem == 0:
        return ctiles // clusters, 0
    sk_tiles = rem if 2 * rem >= clusters else min(ctiles, rem + clusters)
    return (ctiles - sk_tiles) // clusters, sk_tiles


def _lanes(cfg: GemmConfig, m: int, n: int, ctiles_m: int, ctiles_n: int, clusters: int) -> int:
    """Lanes the stream-K tiles are shared out in: the cluster-tile rows across the raster direction and
    the clusters are both multiples of it, so every lane has as many tiles and clusters as every other
    (the data-parallel waves, a multiple of `clusters` tiles, end on a lane boundary). Lanes keep the
    operand panel that tiles of one column (raster along M: B's) or one row (along N: A's) share in step,
    so they are used only where that operand is the larger one; otherwise a single lane keeps the larger
    operand in step (on 12288x256x16384, raster along M, the two tiles of each row, which share A).
    Lanes that share the smaller operand instead measured slower (docs/results.md)."""
    shares_larger = n >= m if cfg.raster_along_m else m >= n
    return math.gcd(ctiles_m if cfg.raster_along_m else ctiles_n, clusters) if shares_larger else 1


def stream_k_tile(cfg: GemmConfig, plan: StreamKPlan, tile, cluster_crd):
    """(m, n, l) output tile of this CTA (at cluster_crd in its cluster) in cluster tile number `tile`;
    cluster tiles are numbered along the raster direction."""
    if cutlass.const_expr(cfg.raster_along_m):
        return (tile % plan.ctiles_m * cfg.cluster_m + cluster_crd[0],
                tile // plan.ctiles_m * cfg.cluster_n + cluster_crd[1], 0)
    return (tile // plan.ctiles_n * cfg.cluster_m + cluster_crd[0],
            tile % plan.ctiles_n * cfg.cluster_n + cluster_crd[1], 0)


@cute.jit
def stream_k_start(unit, units: cutlass.Constexpr, sk_tiles: cutlass.Constexpr, lanes: cutlass.Constexpr,
                   k_tiles: cutlass.Constexpr):
    """The first stream-K iteration, counted in its lane, of cluster `unit`'s range (its range ends where
    that of cluster unit + lanes, the next in its lane, starts): the one place the producer, the
    consumers and the owners waiting on peers split the work."""
    return ((unit // lanes) * (sk_tiles // lanes * k_tiles)) // (units // lanes)


@cute.jit
def stream_k_segment(it, unit, units: cutlass.Constexpr, dp_waves: cutlass.Constexpr, sk_tiles: cutlass.Constexpr,
                     lanes: cutlass.Constexpr, k_tiles: cutlass.Constexpr, ctiles: cutlass.Constexpr,
                     sk_first, sk_end):
    """The segment at this cluster's local step `it`: (cluster tile number, first k-tile, k-tiles,
    stream-K iteration of its start). Steps [0, dp_waves * k_tiles) are whole data-parallel tiles
    unit, unit + units, ...; the rest walk the cluster's stream-K range [sk_first, sk_end) of its lane
    (unit % lanes)."""
    tile = it // k_tiles * units + unit
    kt0 = it * 0
    kts = kt0 + k_tiles
    g = kt0
    if it >= dp_waves * k_tiles:
        g = sk_first + it - dp_waves * k_tiles
        tile = ctiles - sk_tiles + g // k_tiles * lanes + unit % lanes
        kt0 = g % k_tiles
        kts = cutlass.min(k_tiles - kt0, sk_end - g)
    return tile, kt0, kts, g


def stream_k_range(plan: StreamKPlan, unit):
    """Cluster `unit`'s share, which the producer and the consumers walk alike: the first and end
    stream-K iterations of its range (in its lane), and its local steps (data-parallel ones first)."""
    first = stream_k_start(unit, plan.units, plan.sk_tiles, plan.lanes, plan.k_tiles)
    end = stream_k_start(unit + plan.lanes, plan.units, plan.sk_tiles, plan.lanes, plan.k_tiles)
    return first, end, plan.dp_waves * plan.k_tiles + end - first


def stream_k_segment_of(plan: StreamKPlan, it, unit, first, end):
    """stream_k_segment with the plan's constants."""
    return stream_k_segment(it, unit, plan.units, plan.dp_waves, plan.sk_tiles, plan.lanes, plan.k_tiles, plan.ctiles,
                            first, end)


# ---- the walk of a shape-generic kernel ---------------------------------------------------------------
def grouped_walk_divisors(ctiles_m, ctiles_n, group: int, along_m: bool):
    """What the grouped walk divides by: (work units of one K slice, units of one full group, width of
    the last group, cluster tiles across the raster). Plain integer arithmetic: the host computes them
    once per launch on Int32 values, tests on Python ints."""
    along, across = (ctiles_m, ctiles_n) if along_m else (ctiles_n, ctiles_m)
    return ctiles_m * ctiles_n, group * along, (across - 1) % group + 1, across


class GroupedTileParams:
    """What the persistent walk of a shape-generic kernel needs from the host: the clusters of output
    tiles along M and N (run-time values) and the walk's divisors, made into fast divisors once per
    launch: the producer and every consumer warpgroup decode a work unit per tile, and a run-time
    division is a long instruction sequence where a fast divisor is a multiply-high and two shifts.
    The splits, group width and raster direction are compile-time."""

    def __init__(self, cfg: GemmConfig, tiles_m, tiles_n):
        self.cfg = cfg
        self.ctiles_m = Int32((tiles_m + cfg.cluster_m - 1) // cfg.cluster_m)
        self.ctiles_n = Int32((tiles_n + cfg.cluster_n - 1) // cfg.cluster_n)
        slice_units, group_units, last_width, self.across = grouped_walk_divisors(
            self.ctiles_m, self.ctiles_n, cfg.raster_group, cfg.raster_along_m)
        # a divisor the walk never divides by (one K slice, groups one tile wide) is not made
        self.slice_units = cute.fast_divmod_create_divisor_v2(slice_units) if self.splits > 1 else None
        self.group_units = cute.fast_divmod_create_divisor_v2(group_units)
        self.last_width = cute.fast_divmod_create_divisor_v2(last_width) if cfg.raster_group > 1 else None

    @property
    def splits(self) -> int:
        return self.cfg.split_k if self.cfg.split else 1

    def work_units(self):
        """Clusters' worth of work: output cluster tiles times K slices."""
        return self.ctiles_m * self.ctiles_n * self.splits

    def grid(self, max_active_clusters: int):
        """(cluster_m, cluster_n, persistent clusters): one cluster per work unit, at most a wave."""
        return (self.cfg.cluster_m, self.cfg.cluster_n, cutlass.min(self.work_units(), max_active_clusters))

    def _fields(self):
        """The run-time fields, in the order they cross into the kernel (None: not made for this config)."""
        return (self.ctiles_m, self.ctiles_n, self.across, self.slice_units, self.group_units, self.last_width)

    def __extract_mlir_values__(self):
        return [v for f in self._fields() if f is not None for v in extract_mlir_values(f)]

    def __new_from_mlir_values__(self, values):
        new = object.__new__(GroupedTileParams)
        new.cfg = self.cfg
        rebuilt = []
        for like in self._fields():
            n = 0 if like is None else len(extract_mlir_values(like))
            rebuilt.append(None if like is None else new_from_mlir_values(like, values[:n]))
            values = values[n:]
        new.ctiles_m, new.ctiles_n, new.across, new.slice_units, new.group_units, new.last_width = rebuilt
        return new


class GroupedTileScheduler:
    """The persistent walk of a shape-generic kernel, with the interface of the DSL's static persistent
    scheduler. Work unit w (cluster z of the grid takes z, z + clusters, ...) is K slice
    w // (ctiles_m * ctiles_n) of a cluster tile in grouped rasterization: raster along M cuts the
    cluster-tile columns into groups of raster_group and walks each group down M, a row of the group
    at a time (along N: the transpose). The last group holds what is left, so no unit falls outside
    the output whatever the shape."""

    def __init__(self, params: GroupedTileParams, linear, executed, cta_crd, clusters):
        self.params = params
        self._linear = linear
        self._executed = executed
        self.cta_crd = cta_crd
        self.clusters = clusters

    @staticmethod
    def create(params: GroupedTileParams, block_idx, grid_dim) -> "GroupedTileScheduler":
        cfg = params.cfg
        bidx, bidy, bidz = block_idx
        cta = (Int32(bidx % cfg.cluster_m), Int32(bidy % cfg.cluster_n))
        return GroupedTileScheduler(params, Int32(bidz), Int32(0), cta, Int32(grid_dim[2]))

    def get_current_work(self) -> WorkTileInfo:
        p, cfg = self.params, self.params.cfg
        valid = self._linear < p.work_units()
        cm, cn, s = grouped_unit(self._linear, p.slice_units, p.group_units, p.last_width, p.across,
                                 cfg.raster_group, p.splits, cfg.raster_along_m)
        crd = (cm * cfg.cluster_m + self.cta_crd[0], cn * cfg.cluster_n + self.cta_crd[1], s)
        return WorkTileInfo(tuple(cute.arch.make_warp_uniform(Int32(x)) for x in crd),
                            cute.arch.make_warp_uniform(valid))

    def initial_work_tile_info(self) -> WorkTileInfo:
        return self.get_current_work()

    def advance_to_next_work(self, advance_count=1) -> None:
        self._linear = self._linear + Int32(advance_count) * self.clusters
        self._executed = self._executed + Int32(1)

    @property
    def num_tiles_executed(self):
        return self._executed

    def __extract_mlir_values__(self):
        return (extract_mlir_values(self._linear) + extract_mlir_values(self._executed)
                + extract_mlir_values(self.cta_crd[0]) + extract_mlir_values(self.cta_crd[1])
                + extract_mlir_values(self.clusters) + extract_mlir_values(self.params))

    def __new_from_mlir_values__(self, values):
        linear, executed, c0, c1, clusters = (new_from_mlir_values(like, [v]) for like, v in zip(
            (self._linear, self._executed, self.cta_crd[0], self.cta_crd[1], self.clusters), values[:5]))
        return GroupedTileScheduler(new_from_mlir_values(self.params, values[5:]), linear, executed, (c0, c1),
                                    clusters)


@cute.jit
def grouped_unit(w, slice_units, group_units, last_width, across, group: cutlass.Constexpr,
                 splits: cutlass.Constexpr, along_m: cutlass.Constexpr):
    """Work unit w of the grouped walk: (cluster tile along M, along N, K slice). The divisors are
    grouped_walk_divisors' (in the kernel fast divisors, in tests Python ints); a full group's width is
    the compile-time `group`, so only the last group's takes a run-time divisor, and a walk with one K
    slice divides by none for it."""
    s, r = w * 0, w
    if cutlass.const_expr(splits > 1):
        s, r = divmod(w, slice_units)
    g, within = divmod(r, group_units)
    step, lane = within, w * 0  # along the raster, across it (in the group)
    if cutlass.const_expr(group > 1):
        step = within // group
        lane = within - step * group
        if (g + 1) * group > across:  # the last group, narrower where the group does not divide
            step, lane = divmod(within, last_width)
    lane = g * group + lane
    return (step, lane, s) if along_m else (lane, step, s)
