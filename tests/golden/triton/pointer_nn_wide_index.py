"""GEMM kernel for Triton, rendered by cudal2 (backend triton v1, family matmul).

problem  65536x65536x64-float16-NN: D[65536, 65536] = A @ B
         A 65536x64 row-major, B 64x65536 row-major, float16 in, float16 out, fp32 accumulation
spec     b4fa6ebd05c82ff2 128x256x64 warps=8 stages=3 load=pointer group=8/along_m data-parallel arch=sm_90a

Every problem and spec value is a compile-time constant below: this text is the kernel.
"""

import triton
import triton.language as tl

# ---- problem ------------------------------------------------------------------------------
M = tl.constexpr(65536)
N = tl.constexpr(65536)
K = tl.constexpr(64)
# strides in elements, fixed by layout NN
STRIDE_AM = tl.constexpr(64)
STRIDE_AK = tl.constexpr(1)
STRIDE_BK = tl.constexpr(65536)
STRIDE_BN = tl.constexpr(1)
# epilogue: D = A @ B
ALPHA = tl.constexpr(1.0)
BETA = tl.constexpr(0.0)

# ---- spec ---------------------------------------------------------------------------------
BLOCK_M = tl.constexpr(128)
BLOCK_N = tl.constexpr(256)
BLOCK_K = tl.constexpr(64)
GROUP = tl.constexpr(8)  # tiles per rasterization group, advancing along_m
SPLIT_K = tl.constexpr(1)
NUM_WARPS = 8
NUM_STAGES = 3

# ---- derived ------------------------------------------------------------------------------
TILES_M = tl.constexpr(512)
TILES_N = tl.constexpr(256)
NUM_TILES = tl.constexpr(131072)
K_TILES = tl.constexpr(1)  # BLOCK_K steps over all of K
NUM_WORK = tl.constexpr(131072)  # work units: output tiles x K slices


@triton.jit
def tile_coords(tile_id):
    """Grouped rasterization: groups of GROUP tile rows; inside a group consecutive tiles walk
    down M, so concurrently running blocks share B columns and A rows in L2."""
    tiles_in_group = GROUP * TILES_N
    group_id = tile_id // tiles_in_group
    in_group = tile_id - group_id * tiles_in_group
    first_m = group_id * GROUP
    group_rows = min(TILES_M - first_m, GROUP)
    pid_m = first_m + in_group % group_rows
    pid_n = in_group // group_rows
    return pid_m, pid_n


@triton.jit
def k_range(split_id):
    """BLOCK_K steps [lo, hi) of one K slice; slices differ by at most one step."""
    return 0, K_TILES


@triton.jit
def epilogue(acc, c_ptr, bias_ptr, offs_m, offs_n):
    """D = A @ B on one fp32 tile, stored as float16."""
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def finish_tile(acc, c_ptr, bias_ptr, ws_ptr, split_id, offs_m, offs_n):
    """Whole K done here: apply the epilogue and store D."""
    epilogue(acc, c_ptr, bias_ptr, offs_m, offs_n)


@triton.jit
def mainloop(work_id, a_ptr, b_ptr, c_ptr, bias_ptr, ws_ptr):
    """One work unit: the K slice `split_id` of output tile `tile_id`, pointer loads."""
    split_id = work_id // NUM_TILES
    pid_m, pid_n = tile_coords(work_id - split_id * NUM_TILES)
    lo, hi = k_range(split_id)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = lo * BLOCK_K + tl.arange(0, BLOCK_K)
    offs_k = tl.max_contiguous(tl.multiple_of(offs_k, BLOCK_K), BLOCK_K)  # K is the contiguous dim
    offs_n = tl.max_contiguous(tl.multiple_of(offs_n, BLOCK_N), BLOCK_N)  # B is row-major
    a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * STRIDE_AM + offs_k[None, :] * STRIDE_AK
    b_ptrs = b_ptr + offs_k[:, None].to(tl.int64) * STRIDE_BK + offs_n[None, :] * STRIDE_BN
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in tl.range(lo, hi):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * STRIDE_AK
        b_ptrs += BLOCK_K * STRIDE_BK
    finish_tile(acc, c_ptr, bias_ptr, ws_ptr, split_id, offs_m, offs_n)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, ws_ptr):
    mainloop(tl.program_id(0), a_ptr, b_ptr, c_ptr, bias_ptr, ws_ptr)


def launch(a, b, c, bias, workspace, num_sms):
    """Enqueue the GEMM on the current stream; no allocation, no synchronization.
    a, b, c, bias are checked by the caller; workspace is unused (None)."""
    grid = (NUM_WORK.value,)
    matmul_kernel[grid](a, b, c, bias, workspace, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    return c


def warmup(a_dtype, b_dtype, c_dtype, bias_dtype, ws_dtype):
    """Compile without launching (fills Triton's disk cache); dtypes (or None) stand in for tensors."""
    matmul_kernel.warmup(a_dtype, b_dtype, c_dtype, bias_dtype, ws_dtype, grid=(1,),
                         num_warps=NUM_WARPS, num_stages=NUM_STAGES)
