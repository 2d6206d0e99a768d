"""The split-K tile of the small-M probes (benchmarks/small_m_probe.py, early_weights_probe.py): which
part of D and of K a block computes, one step along K, and how its result is stored. Triton only, so that a probe that
imports it needs no more than torch and Triton."""
import triton
import triton.language as tl


@triton.jit
def split_tile(a_ptr, w_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, S: tl.constexpr):
    """This block's tile (grid: N tiles, M tiles, K slices): its K steps [lo, hi) and the first A and W
    (row-major, K contiguous) pointers of its slice."""
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    sid = tl.program_id(2)
    k_tiles = tl.cdiv(K, BK)
    lo = sid * k_tiles // S
    hi = (sid + 1) * k_tiles // S
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = lo * BK + tl.arange(0, BK)
    a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]
    w_ptrs = w_ptr + offs_n[:, None] * K + offs_k[None, :]
    return pid_m, pid_n, sid, lo, hi, offs_m, offs_n, a_ptrs, w_ptrs


@triton.jit
def k_step(acc, a_ptrs, w_ptrs, offs_m, offs_n, M, N, BK: tl.constexpr, EVICT: tl.constexpr):
    """One K step of the tile: BK columns of A and of W (W marked first to leave L2 with EVICT)
    multiplied into acc; returns acc and both pointers moved on by BK."""
    a = tl.load(a_ptrs, mask=offs_m[:, None] < M, other=0.0)
    if EVICT:
        w = tl.load(w_ptrs, mask=offs_n[:, None] < N, other=0.0, eviction_policy="evict_first")
    else:
        w = tl.load(w_ptrs, mask=offs_n[:, None] < N, other=0.0)
    return tl.dot(a, tl.trans(w), acc), a_ptrs + BK, w_ptrs + BK


@triton.jit
def store_split(acc, c_ptr, ws_ptr, cnt_ptr, offs_m, offs_n, M, N, pid_m, pid_n, sid,
                S: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, TWO: tl.constexpr):
    """Store a tile of D; with S K slices, its fp32 partial to the workspace, and unless TWO (a second
    kernel sums them) the last block of a tile sums the partials in slice order (one launch,
    deterministic)."""
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    c_ptrs = c_ptr + offs_m[:, None] * N + offs_n[None, :]
    if S == 1:
        tl.store(c_ptrs, acc.to(tl.float16), mask=mask)
    else:
        ws = ws_ptr + sid * M * N + offs_m[:, None] * N + offs_n[None, :]
        tl.store(ws, acc, mask=mask)
        if not TWO:
            tl.debug_barrier()
            tile = pid_m * tl.num_programs(0) + pid_n
            old = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel", scope="gpu")
            if old == S - 1:
                tot = tl.zeros((BM, BN), tl.float32)
                for s in range(S):
                    tot += tl.load(ws_ptr + s * M * N + offs_m[:, None] * N + offs_n[None, :], mask=mask,
                                   other=0.0, cache_modifier=".cg")
                tl.store(c_ptrs, tot.to(tl.float16), mask=mask)
                tl.atomic_xchg(cnt_ptr + tile, 0)
