"""The Hopper GEMM's epilogue: D = act(alpha * acc + beta * C + bias) on the fp32 fragment, and the
ways it leaves the SM.

- registers: straight from the fragment to global memory, element by element, predicated (any N);
- tma_store: registers -> swizzled shared memory (stmatrix) -> global memory by TMA store, in
  pieces of epi_tile, clipped at the edges by the TMA unit;
- split-K: each K slice's raw fp32 partial goes to a workspace, and a reduction kernel (below) sums
  the slices in a fixed order and applies the whole epilogue.

The math runs in place on the accumulator fragment: ping-pong tiles already hold 128 accumulators per
thread, so there is no room for a second fragment.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import cpasync

from .config import RED_THREADS, GemmConfig

ACC_DTYPE = cutlass.Float32


def dsl_type(name: str):
    return getattr(cutlass, name)


def activate(cfg: GemmConfig, x):
    """The activation on a TensorSSA of fp32 values (identity for "none")."""
    if cutlass.const_expr(cfg.activation == "relu"):
        return cute.where(x > cute.full_like(x, 0.0), x, cute.full_like(x, 0.0))
    if cutlass.const_expr(cfg.activation == "gelu"):
        # erf form, as torch.nn.functional.gelu(approximate="none")
        return cute.full_like(x, 0.5) * x * (cute.full_like(x, 1.0) + cute.erf(x * cute.full_like(x, 0.7071067811865476)))
    if cutlass.const_expr(cfg.activation == "silu"):
        return x / (cute.full_like(x, 1.0) + cute.exp(-x))
    return x


@cute.jit
def fuse(cfg: cutlass.Constexpr, acc, tCcD, thr_mma, gC, crd, mBias, d_shape):
    """alpha, beta * C, bias and the activation, in place on the fp32 fragment acc (tCcD: the
    coordinates of its elements in D)."""
    if cutlass.const_expr(cfg.alpha != 1.0):
        acc.store(acc.load() * ACC_DTYPE(cfg.alpha))
    if cutlass.const_expr(cfg.needs_coords):
        tCgC = thr_mma.partition_C(gC[(None, None, crd[0], crd[1], crd[2])])
        for i in cutlass.range_constexpr(cute.size(acc)):
            if cute.elem_less(tCcD[i], d_shape):
                if cutlass.const_expr(cfg.beta != 0.0):
                    acc[i] = acc[i] + ACC_DTYPE(cfg.beta) * tCgC[i].to(ACC_DTYPE)
                if cutlass.const_expr(cfg.has_bias):
                    acc[i] = acc[i] + mBias[tCcD[i][0 if cfg.swap_ab else 1]].to(ACC_DTYPE)
    if cutlass.const_expr(cfg.activation != "none"):
        acc.store(activate(cfg, acc.load()))


@cute.jit
def store_from_registers(cfg: cutlass.Constexpr, acc, thr_mma, gD, tCcD, crd, d_shape):
    """Straight from the fragment to global memory, element by element, predicated."""
    tCgD = thr_mma.partition_C(gD[(None, None, crd[0], crd[1], crd[2])])
    for i in cutlass.range_constexpr(cute.size(acc)):
        if cute.elem_less(tCcD[i], d_shape):
            tCgD[i] = acc[i].to(dsl_type(cfg.d_dtype))


def staged_output_layout(cfg: GemmConfig, d_layout):
    """Shared-memory layout of the staged output pieces (epi_buffers of them) for the TMA store."""
    from cutlass.cute.nvgpu import warpgroup

    d_dtype = dsl_type(cfg.d_dtype)
    epi_tile = cfg.epi_tile
    d_major = epi_tile[1] if d_layout.is_n_major_c() else epi_tile[0]
    atom = warpgroup.make_smem_layout_atom(sm90_utils.get_smem_layout_atom(d_layout, d_dtype, d_major), d_dtype)
    return cute.tile_to_shape(atom, cute.append(epi_tile, cfg.epi_buffers), order=(0, 1, 2))


class TmaStore:
    """Registers -> swizzled shared memory (stmatrix) -> global memory (TMA store): the consumer
    warpgroups' per-kernel setup, then one call per output tile."""

    def __init__(self, cfg: GemmConfig, d_layout, tiled_mma, mma_tid, acc, sD):
        d_dtype = dsl_type(cfg.d_dtype)
        self.cfg = cfg
        self.pipe = pipeline.PipelineTmaStore.create(
            num_stages=cfg.epi_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, cfg.mma_threads))
        r2s_atom = sm90_utils.sm90_get_smem_store_op(d_layout, elem_ty_d=d_dtype, elem_ty_acc=ACC_DTYPE)
        stmatrix = cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(d_layout.is_m_major_c(), 4), d_dtype)
        self.r2s = cute.make_tiled_copy_S(r2s_atom, cute.make_tiled_copy_C_atom(stmatrix, tiled_mma))
        thr_r2s = self.r2s.get_slice(mma_tid)
        self.tRS_sD = thr_r2s.partition_D(sD)
        self.tRS_acc = self.r2s.retile(acc)
        piece_shape = cute.shape(thr_r2s.partition_S(sD))[:3]
        self.piece_acc = cute.make_rmem_tensor(piece_shape, ACC_DTYPE)
        self.piece_out = cute.make_rmem_tensor(piece_shape, d_dtype)
        self.piece_size = cute.size(self.piece_acc)
        self.sD = sD

    @cute.jit
    def store(self, tma_d, mD_tma, crd, done_before_tiles, epi_barrier, warp, mwg):
        """Store the fragment's output tile at crd. done_before_tiles: tiles this warpgroup stored
        before (the staged buffers rotate across tiles; with ping-pong every tile starts on the
        shared set that the other warpgroup drained before passing its turn)."""
        cfg = self.cfg
        gD_tile = cute.zipped_divide(cute.local_tile(mD_tma, (cfg.tile_m, cfg.tile_n), (crd[0], crd[1], crd[2])),
                                     cfg.epi_tile)
        bSG_sD, bSG_gD = cpasync.tma_partition(tma_d, 0, cute.make_layout(1), cute.group_modes(self.sD, 0, 2), gD_tile)
        pieces = cute.size(gD_tile, mode=[1])
        piece_grid = cute.make_layout(gD_tile.shape[1], stride=(gD_tile.shape[1][1], 1))
        done_before = done_before_tiles * pieces
        storer = warp == 4 + 4 * mwg * cfg.pingpong  # the first warp of the tile's warpgroup(s)
        for p in cutlass.range_constexpr(pieces):
            for v in cutlass.range_constexpr(self.piece_size):
                self.piece_acc[v] = self.tRS_acc[p * self.piece_size + v]
            self.piece_out.store(self.piece_acc.load().to(dsl_type(cfg.d_dtype)))
            if cutlass.const_expr(cfg.pingpong):
                buf = p % cfg.epi_stages
            else:
                buf = (done_before + p) % cfg.epi_stages
            if cutlass.const_expr(not cfg.pingpong or p >= cfg.epi_stages):
                # the buffer's earlier store has read it (on a drained set, the first epi_stages
                # pieces of a tile have nothing to wait for)
                if storer:
                    self.pipe.producer_acquire()
                epi_barrier.arrive_and_wait()
            cute.copy(self.r2s, self.piece_out, self.tRS_sD[(None, None, None, buf)])
            cute.arch.fence_proxy("async.shared", space="cta")
            epi_barrier.arrive_and_wait()
            if storer:
                cute.copy(tma_d, bSG_sD[(None, buf)], bSG_gD[(None, piece_grid.get_hier_coord(p))])
                self.pipe.producer_commit()
        if cutlass.const_expr(cfg.pingpong):
            # The stores have read the shared set before this warpgroup passes its turn to the other,
            # which writes the set next: the turn completes once every thread of this warpgroup has
            # arrived, the storing warp after this wait.
            if storer:
                self.pipe.producer_tail()

    def tail(self):
        """Wait until every store issued by this thread has read its staged piece."""
        self.pipe.producer_tail()


@cute.jit
def store_split_k_partial(cfg: cutlass.Constexpr, acc, thr_mma, gW, cW, mW, crd):
    """This K slice's raw fp32 partial sum into workspace[s] (the epilogue runs in the reduction)."""
    tCgW = thr_mma.partition_C(gW[(None, None, crd[0], crd[1], crd[2])])
    if cutlass.const_expr(cfg.whole_tiles):
        # every tile lies inside the workspace: adjacent columns go out together (element by element,
        # each row's 32-byte sector was written in two halves: ncu on the H100)
        cute.autovec_copy(acc, tCgW)
    else:
        tCcW = thr_mma.partition_C(cW[(None, None, crd[0], crd[1], crd[2])])
        for i in cutlass.range_constexpr(cute.size(acc)):
            if cute.elem_less(tCcW[i], mW.shape):
                tCgW[i] = acc[i]


class SplitKReduction:
    """D = act(alpha * sum_s W[s] + beta * C + bias), one flat element at a time: the second kernel of
    split-K, launched right after the main one on the same stream. C, D and the workspace slices are
    all (M, N) row-major, so one flat index addresses the same element in each."""

    def __init__(self, cfg: GemmConfig):
        self.cfg = cfg

    @cute.kernel
    def kernel(self, mW: cute.Tensor, mC: cute.Tensor, mD: cute.Tensor, mBias: cute.Tensor):
        cfg = self.cfg
        vec = cfg.red_vec
        mn = cute.size(mD)  # the flat (M * N,) output
        n = cute.size(mBias)  # (N,): split-K is never swapped
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        base = bidx * (RED_THREADS * vec) + tidx
        x = cute.make_rmem_tensor((vec,), ACC_DTYPE)
        x.fill(0.0)
        for v in cutlass.range_constexpr(vec):
            idx = base + v * RED_THREADS
            if idx < mn:
                part = cute.make_rmem_tensor((cfg.split_k,), ACC_DTYPE)
                for s in cutlass.range_constexpr(cfg.split_k):  # all loads first, then a fixed-order sum
                    part[s] = mW[s * mn + idx]
                total = part[0]
                for s in cutlass.range_constexpr(1, cfg.split_k):
                    total = total + part[s]
                if cutlass.const_expr(cfg.alpha != 1.0):
                    total = total * ACC_DTYPE(cfg.alpha)
                if cutlass.const_expr(cfg.beta != 0.0):
                    total = total + ACC_DTYPE(cfg.beta) * mC[idx].to(ACC_DTYPE)
                if cutlass.const_expr(cfg.has_bias):
                    total = total + mBias[idx % n].to(ACC_DTYPE)
                x[v] = total
        if cutlass.const_expr(cfg.activation != "none"):
            x.store(activate(cfg, x.load()))
        for v in cutlass.range_constexpr(vec):
            idx = base + v * RED_THREADS
            if idx < mn:
                mD[idx] = x[v].to(dsl_type(cfg.d_dtype))
