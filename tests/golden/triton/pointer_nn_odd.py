"""GEMM kernel for Triton, rendered by cudal2 (backend triton v5, family matmul).

problem  67x45x129-float16-NN: D[67, 45] = A @ B
         A 67x129 row-major, B 129x45 row-major, float16 in, float16 out, fp32 accumulation
spec     087e52b4876304e4 32x32x32 warps=4 stages=2 load=pointer group=8/along_m data-parallel arch=sm_90a shapes=static

Every problem and spec value is a compile-time constant (M, N and K are constexpr arguments
fixed by launch()): this text is the kernel, for this one shape.
"""

import triton
import triton.language as tl

# ---- epilogue: D = A @ B ----------------------------------------------------------
ALPHA = tl.constexpr(1.0)
BETA = tl.constexpr(0.0)

# ---- spec ---------------------------------------------------------------------------------
BLOCK_M = tl.constexpr(32)
BLOCK_N = tl.constexpr(32)
BLOCK_K = tl.constexpr(32)
GROUP = tl.constexpr(8)  # tiles per rasterization group, advancing along_m
SPLIT_K = tl.constexpr(1)
NUM_WARPS = 4
NUM_STAGES = 2


@triton.jit
def tile_coords(tile_id, M, N):
    """Grouped rasterization: groups of GROUP tile rows; inside a group consecutive tiles walk
    down M, so concurrently running blocks share B columns and A rows in L2."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_in_group = GROUP * tl.cdiv(N, BLOCK_N)
    group_id = tile_id // tiles_in_group
    in_group = tile_id - group_id * tiles_in_group
    first = group_id * GROUP
    group_size = min(tiles_m - first, GROUP)
    pid_m = first + in_group % group_size
    pid_n = in_group // group_size
    return pid_m, pid_n


@triton.jit
def work_coords(work_id, M, N):
    """(split_id, pid_m, pid_n) of a work unit: work units are the tiles of K slice 0, then of slice 1, ..."""
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    # (without split-K too: the constant division bounds the tile id, and the compiler folds the
    # rasterization's arithmetic where the shape's tile rows are whole groups)
    split_id = work_id // num_tiles
    pid_m, pid_n = tile_coords(work_id - split_id * num_tiles, M, N)
    return split_id, pid_m, pid_n


@triton.jit
def k_range(split_id, K):
    """BLOCK_K steps [lo, hi) of one K slice; slices differ by at most one step."""
    return 0, tl.cdiv(K, BLOCK_K)


@triton.jit
def epilogue(acc, c_ptr, bias_ptr, offs_m, offs_n, M, N):
    """D = A @ B on one fp32 tile, stored as float16."""
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    c_ptrs = c_ptr + offs_m[:, None] * N + offs_n[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def finish_tile(acc, c_ptr, bias_ptr, ws_ptr, split_id, offs_m, offs_n, M, N):
    """Whole K done here: apply the epilogue and store D."""
    epilogue(acc, c_ptr, bias_ptr, offs_m, offs_n, M, N)


@triton.jit
def mainloop(work_id, a_ptr, b_ptr, c_ptr, bias_ptr, ws_ptr, M, N, K):
    """One work unit: the K slice `split_id` of output tile `tile_id`, pointer loads."""
    split_id, pid_m, pid_n = work_coords(work_id, M, N)
    lo, hi = k_range(split_id, K)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = lo * BLOCK_K + tl.arange(0, BLOCK_K)
    offs_k = tl.max_contiguous(tl.multiple_of(offs_k, BLOCK_K), BLOCK_K)  # K is the contiguous dim
    offs_n = tl.max_contiguous(tl.multiple_of(offs_n, BLOCK_N), BLOCK_N)  # B is row-major
    # strides in elements, fixed by layout NN
    a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * N + offs_n[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in tl.range(lo, hi):
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * N
        offs_k += BLOCK_K
    finish_tile(acc, c_ptr, bias_ptr, ws_ptr, split_id, offs_m, offs_n, M, N)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, ws_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    mainloop(tl.program_id(0), a_ptr, b_ptr, c_ptr, bias_ptr, ws_ptr, M, N, K)


def launches(a, b, c, bias, workspace, num_sms):
    """The GEMM's kernel launches in order, each (kernel, grid, arguments, keyword arguments); a
    caller that relaunches them can skip the JIT's per-call dispatch (TritonKernel.bind).
    a, b, c, bias are checked by the caller; workspace is unused (None)."""
    M, N, K = 67, 45, 129
    num_tiles = triton.cdiv(M, 32) * triton.cdiv(N, 32)
    grid = (num_tiles,)  # work units: output tiles
    matmul = (matmul_kernel, grid, (a, b, c, bias, workspace, M, N, K),
              dict(num_warps=NUM_WARPS, num_stages=NUM_STAGES))
    return [matmul]


def launch(a, b, c, bias, workspace, num_sms):
    """Enqueue the GEMM on the current stream through Triton's JIT; no allocation, no
    synchronization. Returns c."""
    for kernel, grid, args, kwargs in launches(a, b, c, bias, workspace, num_sms):
        kernel[grid](*args, **kwargs)
    return c


def warmup(a_dtype, b_dtype, c_dtype, bias_dtype, ws_dtype, M, N, K):
    """Compile without launching (fills Triton's disk cache) for the alignment class of M, N, K;
    dtypes (or None) stand in for tensors."""
    matmul_kernel.warmup(a_dtype, b_dtype, c_dtype, bias_dtype, ws_dtype, M, N, K, grid=(1,),
                         num_warps=NUM_WARPS, num_stages=NUM_STAGES)
