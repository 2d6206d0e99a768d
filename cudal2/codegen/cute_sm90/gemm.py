"""The Hopper (sm_90a) GEMM in the CuTe DSL: persistent and warp-specialized.

One producer warpgroup issues TMA loads into swizzled shared memory through an mbarrier pipeline of
`stages` stages, multicast across the CTAs of a cluster; one, two or three consumer warpgroups run
WGMMA with fp32 accumulators, cooperatively (splitting each tile along M) or ping-pong (two
warpgroups on alternate tiles, one's epilogue under the other's main loop). The scheduler
(scheduler.py) says which tiles and k-ranges each CTA takes; the epilogue (epilogue.py) says how the
result leaves. Every choice comes from a GemmConfig and is made at trace time with const_expr, so a
config compiles to exactly the code it needs.
"""

from __future__ import annotations

from typing import Optional

import cuda.bindings.driver as cuda

import cutlass
import cutlass.cute as cute
import cutlass.memory
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, warpgroup
from cutlass.tensor_utils import LayoutEnum

from . import epilogue as epi
from . import scheduler
from .config import RED_THREADS, SMEM_ALIGN, THREADS_PER_WG, GemmConfig

ACC_DTYPE = cutlass.Float32


class Sm90Gemm:
    """D = act(alpha * A @ B + beta * C + bias) for one GemmConfig."""

    def __init__(self, cfg: GemmConfig):
        self.cfg = cfg
        self.ab_dtype = epi.dsl_type(cfg.ab_dtype)
        self.d_dtype = epi.dsl_type(cfg.d_dtype)
        self.cluster_mnk = (cfg.cluster_m, cfg.cluster_n, 1)
        # A tile is shared by the CTAs of a cluster row (same M, different N), B by a column.
        self.a_mcast = cfg.cluster_n
        self.b_mcast = cfg.cluster_m
        # the warpgroups of one tile sit along M; each one owns tile_m / mma_wgs rows
        self.mma_atoms = (cfg.mma_wgs, 1, 1)

    # ---- host side: tensors from pointers, TMA descriptors, grid, launch -----------------------------
    @cute.jit
    def __call__(self, a_ptr: cute.Pointer, b_ptr: cute.Pointer, c_ptr: cute.Pointer, d_ptr: cute.Pointer,
                 bias_ptr: cute.Pointer, w_ptr: cute.Pointer, flags_ptr: cute.Pointer,
                 m: cutlass.Int32, n: cutlass.Int32, k: cutlass.Int32,
                 max_active_clusters: cutlass.Constexpr, stream: cuda.CUstream):
        """Launch on stream. w_ptr, flags_ptr: the split-K or stream-K workspace and the stream-K flags
        (any address where there is none). m, n, k: the extents of a shape-generic kernel; a kernel
        compiled for one shape uses its own and ignores them."""
        cfg = self.cfg
        if cutlass.const_expr(cfg.dynamic):
            if cutlass.const_expr(cfg.stream_k):
                raise ValueError("stream-K plans its work split for one shape; compile it with static extents")
            # TMA needs rows of a multiple of 16 bytes: the shape class guarantees 8-element multiples
            lead = cfg.tma_leading_extents
            m = cute.assume(m, divby=8) if "m" in lead else m
            n = cute.assume(n, divby=8) if "n" in lead else n
            k = cute.assume(k, divby=8) if "k" in lead else k
        else:
            m, n, k = cfg.m, cfg.n, cfg.k
        mA, mB, mC, mD, mBias = self._operands(a_ptr, b_ptr, c_ptr, d_ptr, bias_ptr, m, n, k)
        mW, mFlags = self._workspace(w_ptr, flags_ptr, m, n)

        a_layout = LayoutEnum.from_tensor(mA)
        b_layout = LayoutEnum.from_tensor(mB)
        d_layout = LayoutEnum.from_tensor(mD)
        self.d_layout = d_layout
        tiled_mma = sm90_utils.make_trivial_tiled_mma(
            self.ab_dtype, self.ab_dtype, a_layout.sm90_mma_major_mode(), b_layout.sm90_mma_major_mode(),
            ACC_DTYPE, self.mma_atoms, tiler_mn=(64, cfg.tile_n))

        sA_layout = self._staged_smem_layout(a_layout, (cfg.tile_m, cfg.tile_k))
        sB_layout = self._staged_smem_layout(b_layout, (cfg.tile_n, cfg.tile_k))
        tma_a, gA = self._tma_load(mA, sA_layout, (cfg.tile_m, cfg.tile_k), self.a_mcast)
        tma_b, gB = self._tma_load(mB, sB_layout, (cfg.tile_n, cfg.tile_k), self.b_mcast)
        tma_d, gD, sD_layout = None, None, None
        if cutlass.const_expr(cfg.tma_store):
            sD_layout = epi.staged_output_layout(cfg, d_layout)
            mD_store = mD
            if cutlass.const_expr(not cfg.dynamic and (m == 1 or n == 1)):
                # (with swap_ab a one-row D is a one-column D^T)
                d_stride = (1, m, m * n) if cutlass.const_expr(cfg.swap_ab) else (n, 1, m * n)
                mD_store = cute.make_tensor(d_ptr, cute.make_layout(
                    (self._tma_extent(m), self._tma_extent(n), 1), stride=d_stride))
            tma_d, gD = cpasync.make_tiled_tma_atom(
                cpasync.CopyBulkTensorTileS2GOp(), mD_store, cute.slice_(sD_layout, (None, None, 0)), cfg.epi_tile)

        sched_params = None
        if cutlass.const_expr(cfg.stream_k):
            self.sk_plan = scheduler.stream_k_plan(cfg, m, n, k, max_active_clusters)
            # cluster u is blocks [u * cluster_m, (u + 1) * cluster_m) in x
            grid = (self.sk_plan.units * cfg.cluster_m, cfg.cluster_n, 1)
        else:
            tiled = mW if cutlass.const_expr(cfg.split) else mD  # split-K: (m, n, slice) work units
            tiles_mnl = cute.zipped_divide(tiled, tiler=(cfg.tile_m, cfg.tile_n))[(0, (None, None, None))].shape
            if cutlass.const_expr(cfg.grouped_walk):
                sched_params = scheduler.GroupedTileParams(cfg, tiles_mnl[0], tiles_mnl[1])
                grid = sched_params.grid(max_active_clusters)
            else:
                sched_params = utils.PersistentTileSchedulerParams(
                    tiles_mnl, self.cluster_mnk, cfg.raster_group, cfg.raster_along_m)
                grid = utils.StaticPersistentTileScheduler.get_grid_shape(sched_params, max_active_clusters)

        self.shared = self._shared_storage(sA_layout, sB_layout, sD_layout)
        self.kernel(tma_a, gA, tma_b, gB, mC, mD, mBias, tiled_mma, sA_layout, sB_layout, sched_params,
                    tma_d, gD, sD_layout, mW, mFlags).launch(
            grid=grid, block=[cfg.threads, 1, 1], cluster=self.cluster_mnk, min_blocks_per_mp=1, stream=stream,
            use_pdl=cfg.pdl)
        if cutlass.const_expr(cfg.split):
            # then, on the same stream: sum the K slices and apply the epilogue
            mWf = cute.make_tensor(w_ptr, cute.make_layout((cfg.split_k * m * n,), stride=(1,)))
            mCf = cute.make_tensor(c_ptr, cute.make_layout((m * n,), stride=(1,)))
            mDf = cute.make_tensor(d_ptr, cute.make_layout((m * n,), stride=(1,)))
            blocks = (m * n + RED_THREADS * cfg.red_vec - 1) // (RED_THREADS * cfg.red_vec)
            epi.SplitKReduction(cfg).kernel(mWf, mCf, mDf, mBias).launch(
                grid=[blocks, 1, 1], block=[RED_THREADS, 1, 1], stream=stream)

    def _tma_extent(self, extent):
        """An extent of a TMA'd tensor: a static 1 made dynamic (an Int32 holding 1; see _operands)."""
        return cutlass.Int32(extent) if not self.cfg.dynamic and extent == 1 else extent

    def _operands(self, a_ptr, b_ptr, c_ptr, d_ptr, bias_ptr, m, n, k):
        """The (M, K, L) A, (N, K, L) B, (M, N, L) C and D views and the bias. The unit batch mode L gets
        the stride a packed batch would have (TMA wants 16-byte multiples). A static extent of 1 in a
        TMA'd tensor's tiled mode would be folded out of the copy's coordinates while the descriptor
        keeps its 2-D box (a 1-D cp.async.bulk.tensor against a 2-D tensor map: "illegal instruction"
        on an H100 for M=1), so such an extent is made dynamic (_tma_extent)."""
        cfg = self.cfg
        m_tma, n_tma = self._tma_extent(m), self._tma_extent(n)
        if cutlass.const_expr(cfg.a_row_major):
            mA = cute.make_tensor(a_ptr, cute.make_layout((m_tma, k, 1), stride=(k, 1, m * k)))
        else:
            mA = cute.make_tensor(a_ptr, cute.make_layout((m_tma, k, 1), stride=(1, m, m * k)))
        # B is viewed as (N, K): row-major B (K, N) has N contiguous, column-major has K contiguous
        if cutlass.const_expr(cfg.b_row_major):
            mB = cute.make_tensor(b_ptr, cute.make_layout((n_tma, k, 1), stride=(1, n, n * k)))
        else:
            mB = cute.make_tensor(b_ptr, cute.make_layout((n_tma, k, 1), stride=(k, 1, n * k)))
        if cutlass.const_expr(cfg.swap_ab):
            mC = cute.make_tensor(c_ptr, cute.make_layout((m, n, 1), stride=(1, m, m * n)))
            mD = cute.make_tensor(d_ptr, cute.make_layout((m, n, 1), stride=(1, m, m * n)))
            mBias = cute.make_tensor(bias_ptr, cute.make_layout((m,), stride=(1,)))
        else:
            mC = cute.make_tensor(c_ptr, cute.make_layout((m, n, 1), stride=(n, 1, m * n)))
            mD = cute.make_tensor(d_ptr, cute.make_layout((m, n, 1), stride=(n, 1, m * n)))
            mBias = cute.make_tensor(bias_ptr, cute.make_layout((n,), stride=(1,)))
        return mA, mB, mC, mD, mBias

    def _workspace(self, w_ptr, flags_ptr, m, n):
        """split-K: one (M, N) row-major fp32 partial sum per K slice. stream-K: one partial tile per CTA,
        in accumulator-fragment order (element i of consumer thread t at i * mma_threads + t: coalesced,
        and read back by the same thread of the owner), and a flag each."""
        cfg = self.cfg
        mW, mFlags = None, None
        if cutlass.const_expr(cfg.split):
            mW = cute.make_tensor(w_ptr, cute.make_layout((m, n, cfg.split_k), stride=(n, 1, m * n)))
        if cutlass.const_expr(cfg.stream_k):
            mW = cute.make_tensor(w_ptr, cute.make_layout((cfg.sm_count * cfg.tile_elems,), stride=(1,)))
            mFlags = cute.make_tensor(flags_ptr, cute.make_layout((cfg.sm_count,), stride=(1,)))
        return mW, mFlags

    def _staged_smem_layout(self, layout, tile_mn_k):
        k_major = layout.sm90_mma_major_mode() == OperandMajorMode.K
        major_extent = tile_mn_k[1] if k_major else tile_mn_k[0]
        atom = warpgroup.make_smem_layout_atom(
            sm90_utils.get_smem_layout_atom(layout, self.ab_dtype, major_extent), self.ab_dtype)
        return cute.tile_to_shape(atom, cute.append(tile_mn_k, self.cfg.stages),
                                  order=(0, 1, 2) if k_major else (1, 0, 2))

    @staticmethod
    def _tma_load(tensor, staged_layout, tile, mcast):
        op = cpasync.CopyBulkTensorTileG2SOp() if mcast == 1 else cpasync.CopyBulkTensorTileG2SMulticastOp()
        return cpasync.make_tiled_tma_atom(op, tensor, cute.slice_(staged_layout, (None, None, 0)), tile,
                                           num_multicast=mcast)

    def _shared_storage(self, sA_layout, sB_layout, sD_layout):
        """The block's shared memory: pipeline barriers, ping-pong turns, the staged A and B tiles and
        the staged output pieces."""
        cfg, ab = self.cfg, self.ab_dtype
        fields = {"full_empty": cute.struct.MemRange[cutlass.Int64, cfg.stages * 2]}
        if cfg.pingpong:
            fields["turns"] = cute.struct.MemRange[cutlass.Int64, 4]  # (main loop, epilogue) x 2 warpgroups
        fields["sA"] = cute.struct.Align[cute.struct.MemRange[ab, cute.cosize(sA_layout)], SMEM_ALIGN]
        fields["sB"] = cute.struct.Align[cute.struct.MemRange[ab, cute.cosize(sB_layout)], SMEM_ALIGN]
        if cfg.tma_store:
            fields["sD"] = cute.struct.Align[cute.struct.MemRange[self.d_dtype, cute.cosize(sD_layout)], SMEM_ALIGN]
        return cute.struct(type("Shared", (), {"__annotations__": fields}))

    # ---- device side ----------------------------------------------------------------------------------
    @cute.kernel
    def kernel(self, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom, mB: cute.Tensor,
               mC: cute.Tensor, mD: cute.Tensor, mBias: cute.Tensor, tiled_mma: cute.TiledMma,
               sA_layout: cute.ComposedLayout, sB_layout: cute.ComposedLayout,
               sched_params,  # the DSL's PersistentTileSchedulerParams, GroupedTileParams, or None (stream-K)
               tma_d: Optional[cute.CopyAtom], mD_tma: Optional[cute.Tensor],
               sD_layout: Optional[cute.ComposedLayout], mW: Optional[cute.Tensor], mFlags: Optional[cute.Tensor]):
        cfg = self.cfg
        tidx, _, _ = cute.arch.thread_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        wg = cute.arch.make_warp_uniform(tidx // THREADS_PER_WG)
        if warp == 0:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)
            if cutlass.const_expr(cfg.tma_store):
                cpasync.prefetch_descriptor(tma_d)

        # where this CTA sits in its cluster, and which peers receive its multicast loads
        cta_layout = cute.make_layout(self.cluster_mnk)
        rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cluster_crd = cta_layout.get_flat_coord(rank)
        a_mask = cute.make_layout_image_mask(cta_layout, cluster_crd, mode=1) if self.a_mcast > 1 else 0
        b_mask = cute.make_layout_image_mask(cta_layout, cluster_crd, mode=0) if self.b_mcast > 1 else 0

        smem = cutlass.memory.SmemAllocator()
        st = smem.allocate(self.shared)
        mainloop, turns, turn = self._pipelines(st, cta_layout, wg, sA_layout, sB_layout)
        pipeline.pipeline_init_arrive(cluster_shape_mn=(cfg.cluster_m, cfg.cluster_n), is_relaxed=True)

        sA = st.sA.get_tensor(sA_layout.outer, swizzle=sA_layout.inner)
        sB = st.sB.get_tensor(sB_layout.outer, swizzle=sB_layout.inner)
        sD = None
        if cutlass.const_expr(cfg.tma_store):
            sD = st.sD.get_tensor(sD_layout.outer, swizzle=sD_layout.inner)

        # (tile, tile, tiles_m|n, tiles_k, l) views of the operands
        gA = cute.local_tile(mA, (cfg.tile_m, cfg.tile_k), (None, None, None))
        gB = cute.local_tile(mB, (cfg.tile_n, cfg.tile_k), (None, None, None))
        k_tiles = cute.size(gA, mode=[3])
        tAsA, tAgA = cpasync.tma_partition(
            tma_a, cluster_crd[1], cute.make_layout(cfg.cluster_n), cute.group_modes(sA, 0, 2),
            cute.group_modes(gA, 0, 2))
        tBsB, tBgB = cpasync.tma_partition(
            tma_b, cluster_crd[0], cute.make_layout(cfg.cluster_m), cute.group_modes(sB, 0, 2),
            cute.group_modes(gB, 0, 2))

        pipeline.pipeline_init_wait(cluster_shape_mn=(cfg.cluster_m, cfg.cluster_n))
        if cutlass.const_expr(cfg.pdl and cfg.stream_k):
            # launched early (programmatic dependent launch): everything above overlaps the previous
            # kernel's tail. Stream-K's consumers read and raise flags in global memory, so every
            # thread waits here for that kernel to finish; otherwise the producer alone does (below).
            cute.arch.griddepcontrol_wait()
        walk, slot = None, None
        if cutlass.const_expr(cfg.stream_k):
            # this cluster's share (unit, first, end, steps), which the producer and the consumers walk
            # alike, and this CTA's workspace slot and flag (its rank in cluster `unit`)
            unit = cute.arch.block_idx()[0] // cfg.cluster_m
            walk = (unit, *scheduler.stream_k_range(self.sk_plan, unit))
            slot = unit * cfg.cluster_size + rank

        if wg == 0:
            # ---------------- producer warpgroup: one warp issues the TMA loads -------------------
            cute.arch.setmaxregister_decrease(cfg.producer_regs)
            if cutlass.const_expr(cfg.pdl and not cfg.stream_k):
                # The previous kernel is done before the first load. Every global access of the
                # consumers (C, bias, the output, a split-K workspace) follows a load's arrival, so
                # their set-up overlaps that kernel's tail.
                cute.arch.griddepcontrol_wait()
            if warp == 0:
                self._produce(mainloop, tma_a, tma_b, tAgA, tAsA, tBgB, tBsB, a_mask, b_mask, k_tiles,
                              sched_params, walk, cluster_crd)
        else:
            # ---------------- consumer warpgroups: WGMMA, then the epilogue -------------------------
            cute.arch.setmaxregister_increase(cfg.consumer_regs)
            self._consume(mainloop, turns, turn, tiled_mma, tidx, wg, warp, sA, sB, sD, mC, mD, mBias, tma_d, mD_tma,
                          mW, mFlags, k_tiles, sched_params, walk, slot, rank, cluster_crd)

    def _pipelines(self, st, cta_layout, wg, sA_layout, sB_layout):
        """The main loop's TMA pipeline and, with ping-pong, the consumers' turns (and the first turn)."""
        cfg = self.cfg
        stage_bytes = cute.size_in_bytes(self.ab_dtype, cute.slice_(sA_layout, (None, None, 0))) + \
            cute.size_in_bytes(self.ab_dtype, cute.slice_(sB_layout, (None, None, 0)))
        # a stage is free again once every consumer warp of every CTA that reads it has released it
        releasers = (self.a_mcast + self.b_mcast - 1) * cfg.mma_wgs * 4
        mainloop = pipeline.PipelineTmaAsync.create(
            barrier_storage=st.full_empty.data_ptr(), num_stages=cfg.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, releasers),
            tx_count=stage_bytes, cta_layout_vmnk=cute.make_layout((1, *cta_layout.shape)),
            defer_sync=True)
        turns, turn = None, None
        if cutlass.const_expr(cfg.pingpong):
            # Ping-pong turns: the consumer warpgroups run their main loops strictly one after the
            # other (and their epilogues likewise). Beyond pacing the tensor cores this is what keeps
            # the mainloop barriers sound: a warpgroup that skips the other's k-stages must not wait
            # on a stage's full barrier before the other has consumed the earlier rounds (the wait
            # only sees the phase parity).
            turns = pipeline.PipelineOrder.create(
                barrier_storage=st.turns.data_ptr(), depth=2, length=2, group_id=(wg + 1) % 2,
                producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, THREADS_PER_WG),
                defer_sync=True)
            turn = turns.state
        return mainloop, turns, turn

    def _tile_scheduler(self, params):
        """The persistent walk over work units: the grouped one (scheduler.GroupedTileScheduler) for a
        shape-generic kernel and where the DSL's cannot take the spec's group, the DSL's otherwise."""
        if cutlass.const_expr(self.cfg.grouped_walk):
            return scheduler.GroupedTileScheduler.create(params, cute.arch.block_idx(), cute.arch.grid_dim())
        return utils.StaticPersistentTileScheduler.create(params, cute.arch.block_idx(), cute.arch.grid_dim())

    @cute.jit
    def _produce(self, mainloop, tma_a, tma_b, tAgA, tAsA, tBgB, tBsB, a_mask, b_mask, k_tiles, sched_params,
                 walk, cluster_crd):
        """The producer warp: every k-tile of every work unit, into the next free stage."""
        cfg = self.cfg
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, cfg.stages)
        if cutlass.const_expr(cfg.stream_k):
            plan = self.sk_plan
            unit, first, end, steps = walk
            it = cutlass.Int32(0)
            while it < steps:
                tile, kt0, kts, _g = scheduler.stream_k_segment_of(plan, it, unit, first, end)
                crd = scheduler.stream_k_tile(cfg, plan, tile, cluster_crd)
                a_tiles = tAgA[(None, crd[0], None, 0)]
                b_tiles = tBgB[(None, crd[1], None, 0)]
                state = self._load_k_tiles(mainloop, state, tma_a, tma_b, a_tiles, b_tiles, tAsA, tBsB, a_mask,
                                           b_mask, kt0, kts)
                it = it + kts
        else:
            sched = self._tile_scheduler(sched_params)
            work = sched.initial_work_tile_info()
            while work.is_valid_tile:
                crd = work.tile_idx
                if cutlass.const_expr(cfg.split):
                    kt0, kts = scheduler.split_range(crd[2], k_tiles, cfg.split_k)  # (the operands' L is 0)
                    a_tiles = tAgA[(None, crd[0], None, 0)]
                    b_tiles = tBgB[(None, crd[1], None, 0)]
                else:
                    kt0, kts = 0, k_tiles
                    a_tiles = tAgA[(None, crd[0], None, crd[2])]
                    b_tiles = tBgB[(None, crd[1], None, crd[2])]
                state = self._load_k_tiles(mainloop, state, tma_a, tma_b, a_tiles, b_tiles, tAsA, tBsB, a_mask,
                                           b_mask, kt0, kts)
                sched.advance_to_next_work()
                work = sched.get_current_work()
        mainloop.producer_tail(state)

    @cute.jit
    def _load_k_tiles(self, mainloop, state, tma_a, tma_b, a_tiles, b_tiles, tAsA, tBsB, a_mask, b_mask, kt0, kts):
        """kts k-tiles from kt0 on into the stages, from pipeline state `state`; returns the state after."""
        state.reset_count()
        for _k in range(kts):
            mainloop.producer_acquire(state)
            bar = mainloop.producer_get_barrier(state)
            cute.copy(tma_a, a_tiles[(None, kt0 + state.count)], tAsA[(None, state.index)],
                      tma_bar_ptr=bar, mcast_mask=a_mask)
            cute.copy(tma_b, b_tiles[(None, kt0 + state.count)], tBsB[(None, state.index)],
                      tma_bar_ptr=bar, mcast_mask=b_mask)
            mainloop.producer_commit(state)
            state.advance()
        return state

    @cute.jit
    def _consume(self, mainloop, turns, turn, tiled_mma, tidx, wg, warp, sA, sB, sD, mC, mD, mBias, tma_d, mD_tma,
                 mW, mFlags, k_tiles, sched_params, walk, slot, rank, cluster_crd):
        """A consumer warpgroup: per work unit, the main loop into fp32 accumulators, then the epilogue
        (or, with split-K and stream-K, the hand-over of a partial sum)."""
        cfg = self.cfg
        c = _Consumer(cfg, tiled_mma, tidx, wg, warp, sA, sB, mC, mD, mW)
        store = None
        if cutlass.const_expr(cfg.tma_store):
            store = epi.TmaStore(cfg, self.d_layout, tiled_mma, c.mma_tid, c.acc, sD)
        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, cfg.stages)
        release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, cfg.stages)
        if cutlass.const_expr(cfg.stream_k):
            plan = self.sk_plan
            unit, first, end, steps = walk
            it = cutlass.Int32(0)
            epilogues = cutlass.Int32(0)  # tiles this CTA has stored (TMA-store buffer rotation)
            while it < steps:
                tile, kt0, kts, g = scheduler.stream_k_segment_of(plan, it, unit, first, end)
                crd = scheduler.stream_k_tile(cfg, plan, tile, cluster_crd)
                read, release = self._mma(c, mainloop, read, release, kts, crd)
                if kt0 > 0:
                    self._hand_over(c, mW, mFlags, slot)
                elif kts < plan.k_tiles:
                    self._gather(c, mW, mFlags, plan, unit, rank, g)
                if kt0 == 0:
                    self._epilogue(c, store, mBias, tma_d, mD_tma, crd, epilogues)
                    epilogues = epilogues + 1
                it = it + kts
        else:
            sched = self._tile_scheduler(sched_params)
            if cutlass.const_expr(cfg.pingpong):
                # warpgroup 1 starts one tile later: skip warpgroup 0's tile and its k-stages
                sched.advance_to_next_work(advance_count=c.mwg)
                # (one step of k_tiles stages: a loop of single steps ran k_tiles iterations per tile)
                read.advance(k_tiles * c.mwg)
                release.advance(k_tiles * c.mwg)
            work = sched.get_current_work()
            while work.is_valid_tile:
                crd = work.tile_idx
                if cutlass.const_expr(cfg.pingpong):
                    read, release, turn = self._mma(c, mainloop, read, release, k_tiles, crd, turns, turn)
                else:
                    read, release = self._mma(c, mainloop, read, release, k_tiles, crd)
                if cutlass.const_expr(cfg.split):
                    epi.store_split_k_partial(cfg, c.acc, c.thr_mma, c.gW, c.cW, mW, crd)
                else:
                    self._epilogue(c, store, mBias, tma_d, mD_tma, crd, sched.num_tiles_executed)
                if cutlass.const_expr(cfg.pingpong):
                    turn = turns.arrive(turn)
                    # the other warpgroup's next tile and its k-stages are not ours
                    sched.advance_to_next_work(advance_count=2)
                    read.advance(k_tiles)
                    release.advance(k_tiles)
                else:
                    sched.advance_to_next_work()
                work = sched.get_current_work()
        if cutlass.const_expr(cfg.pdl):
            # this warpgroup's main loops are done: the next kernel may start its own set-up (it waits
            # for this grid to finish before it reads anything)
            cute.arch.griddepcontrol_launch_dependents()
        if cutlass.const_expr(cfg.tma_store):
            store.tail()

    @cute.jit
    def _mma(self, c, mainloop, read, release, kts, crd, turns=None, turn=None):
        """The main loop of work unit crd: kts k-tiles (with split-K, its K slice's share of the tile's
        kts) into c.acc, keeping one WGMMA batch in flight and
        releasing its stage one step later. Returns the pipeline states after it (and, ping-pong, which
        runs between the other warpgroup's turns, the turn after its own epilogue's wait)."""
        cfg = self.cfg
        read.reset_count()
        release.reset_count()
        tiled_mma = c.tiled_mma  # (a local: the loop below carries its accumulate flag)
        if cutlass.const_expr(cfg.split or cfg.stream_k):
            c.acc.fill(0.0)  # (a K slice or a stream-K segment may hold no k-tile)
            tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
        else:
            # the first WGMMA overwrites the accumulators (every tile has a k-tile: K >= 1), so they
            # are not zeroed by a pass over the registers first
            tiled_mma.set(warpgroup.Field.ACCUMULATE, False)
        if cutlass.const_expr(cfg.pingpong):
            turns.wait(turn)  # the other warpgroup has issued its main loop
        warpgroup.fence()
        if cutlass.const_expr(cfg.split):
            _kt0, kts = scheduler.split_range(crd[2], kts, cfg.split_k)
        for kt in range(kts):
            mainloop.consumer_wait(read)
            for kb in cutlass.range_constexpr(c.k_blocks):
                blk = (None, None, kb, read.index)
                cute.gemm(tiled_mma, c.acc, c.tCrA[blk], c.tCrB[blk], c.acc)
                tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
            warpgroup.commit_group()
            if kt > 0:
                warpgroup.wait_group(1)
                mainloop.consumer_release(release)
                release.advance()
            read.advance()
        if cutlass.const_expr(cfg.pingpong):
            turn = turns.arrive(turn)  # its turn for the next main loop
        warpgroup.wait_group(0)
        mainloop.consumer_release(release)
        release.advance()
        if cutlass.const_expr(cfg.pingpong):
            turns.wait(turn)  # and ours for the epilogue, after the other's
            return read, release, turn
        return read, release

    @cute.jit
    def _epilogue(self, c, store, mBias, tma_d, mD_tma, crd, done_before_tiles):
        """alpha, beta * C, bias and the activation on the fragment, then the store of tile crd."""
        cfg = self.cfg
        tCcD = c.thr_mma.partition_C(c.cD[(None, None, crd[0], crd[1], crd[2])])
        epi.fuse(cfg, c.acc, tCcD, c.thr_mma, c.gC, crd, mBias, c.mD.shape)
        if cutlass.const_expr(cfg.tma_store):
            store.store(tma_d, mD_tma, crd, done_before_tiles, c.epi_barrier, c.warp, c.mwg)
        else:
            epi.store_from_registers(cfg, c.acc, c.thr_mma, c.gD, tCcD, crd, c.mD.shape)

    @cute.jit
    def _hand_over(self, c, mW, mFlags, slot):
        """Stream-K, a segment that is not its tile's first: the partial sum into this CTA's workspace
        slot, then its flag raised for the owner."""
        for i in cutlass.range_constexpr(cute.size(c.acc)):
            mW[slot * self.cfg.tile_elems + i * self.cfg.mma_threads + c.mma_tid] = c.acc[i]
        c.epi_barrier.arrive_and_wait()
        if c.mma_tid == 0:
            cute.arch.fence_acq_rel_gpu()
            cute.arch.atomic_exch(mFlags.iterator + slot, cutlass.Int32(1), sem="release", scope="gpu")

    @cute.jit
    def _gather(self, c, mW, mFlags, plan: cutlass.Constexpr, unit, rank, g):
        """Stream-K, the owner of a tile that later clusters of its lane finish: add their partial sums,
        in cluster order, as each one's flag rises (g: this segment's stream-K iteration)."""
        cfg, lanes = self.cfg, plan.lanes
        acc, mma_tid, epi_barrier = c.acc, c.mma_tid, c.epi_barrier  # (names a dynamic loop may write through)
        tile_end = g + plan.k_tiles
        peer = unit + lanes  # the next cluster in this lane
        peer_first = scheduler.stream_k_start(peer, plan.units, plan.sk_tiles, lanes, plan.k_tiles)
        while peer_first < tile_end:
            peer_end = scheduler.stream_k_start(peer + lanes, plan.units, plan.sk_tiles, lanes, plan.k_tiles)
            if peer_end > peer_first:  # (a cluster with an empty range raises no flag)
                peer_slot = peer * cfg.cluster_size + rank
                if mma_tid == 0:
                    # take the peer's flag (and reset it for the next launch)
                    got = cutlass.Int32(0)
                    while got != 1:
                        got = cute.arch.atomic_cas(mFlags.iterator + peer_slot, cmp=cutlass.Int32(1),
                                                   val=cutlass.Int32(0), sem="acquire", scope="gpu")
                epi_barrier.arrive_and_wait()
                for i in cutlass.range_constexpr(cute.size(acc)):
                    acc[i] = acc[i] + mW[peer_slot * cfg.tile_elems + i * cfg.mma_threads + mma_tid]
            peer = peer + lanes
            peer_first = peer_end


class _Consumer:
    """What a consumer warpgroup sets up once and every work unit uses: its slice of the MMA, its
    fragments, the tiled views of C, D (and the split-K workspace) and its epilogue barrier."""

    def __init__(self, cfg: GemmConfig, tiled_mma, tidx, wg, warp, sA, sB, mC, mD, mW):
        self.tiled_mma = tiled_mma
        self.warp = warp
        self.mwg = wg - 1  # consumer warpgroup 0 or 1
        # A and B in shared memory are read by a whole warpgroup: slice by its first thread; the
        # accumulator (and everything matched against it) is per thread.
        if cutlass.const_expr(cfg.pingpong):
            self.mma_tid = tidx % THREADS_PER_WG
            wg_mma = tiled_mma.get_slice(0)
            self.epi_barrier = pipeline.NamedBarrier(barrier_id=1 + self.mwg, num_threads=cfg.mma_threads)
        else:
            self.mma_tid = tidx - THREADS_PER_WG
            wg_mma = tiled_mma.get_slice(self.mwg * THREADS_PER_WG)
            self.epi_barrier = pipeline.NamedBarrier(barrier_id=1, num_threads=cfg.mma_threads)
        self.thr_mma = tiled_mma.get_slice(self.mma_tid)
        tCsA = wg_mma.partition_A(sA)
        tCsB = wg_mma.partition_B(sB)
        self.tCrA = tiled_mma.make_fragment_A(tCsA)
        self.tCrB = tiled_mma.make_fragment_B(tCsB)
        self.k_blocks = cute.size(self.tCrA, mode=[2])

        tile_mn = (cfg.tile_m, cfg.tile_n)
        self.mD = mD
        self.gD = cute.local_tile(mD, tile_mn, (None, None, None))
        self.gC = cute.local_tile(mC, tile_mn, (None, None, None))
        self.cD = cute.local_tile(cute.make_identity_tensor(mD.shape), tile_mn, (None, None, None))
        self.acc = cute.make_rmem_tensor(self.thr_mma.partition_C(self.gD[(None, None, 0, 0, 0)]).shape, ACC_DTYPE)
        self.gW, self.cW = None, None
        if cutlass.const_expr(cfg.split):
            self.gW = cute.local_tile(mW, tile_mn, (None, None, None))
            self.cW = cute.local_tile(cute.make_identity_tensor(mW.shape), tile_mn, (None, None, None))
