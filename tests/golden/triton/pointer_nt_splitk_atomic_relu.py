"""GEMM kernel for Triton, rendered by cudal2 (backend triton v1, family matmul).

problem  8192x256x256-float16-NT-a1b0-relu: D[8192, 256] = relu(A @ B)
         A 8192x256 row-major, B 256x256 column-major, float16 in, bfloat16 out, fp32 accumulation
spec     fe74b96c1f1b2ec9 128x64x32 warps=4 stages=3 load=pointer group=8/along_m split_k=2/atomic data-parallel arch=sm_80

Every problem and spec value is a compile-time constant below: this text is the kernel.
"""

import triton
import triton.language as tl

# ---- problem ------------------------------------------------------------------------------
M = tl.constexpr(8192)
N = tl.constexpr(256)
K = tl.constexpr(256)
# strides in elements, fixed by layout NT
STRIDE_AM = tl.constexpr(256)
STRIDE_AK = tl.constexpr(1)
STRIDE_BK = tl.constexpr(1)
STRIDE_BN = tl.constexpr(256)
# epilogue: D = relu(A @ B)
ALPHA = tl.constexpr(1.0)
BETA = tl.constexpr(0.0)

# ---- spec ---------------------------------------------------------------------------------
BLOCK_M = tl.constexpr(128)
BLOCK_N = tl.constexpr(64)
BLOCK_K = tl.constexpr(32)
GROUP = tl.constexpr(8)  # tiles per rasterization group, advancing along_m
SPLIT_K = tl.constexpr(2)
NUM_WARPS = 4
NUM_STAGES = 3

# ---- derived ------------------------------------------------------------------------------
TILES_M = tl.constexpr(64)
TILES_N = tl.constexpr(4)
NUM_TILES = tl.constexpr(256)
K_TILES = tl.constexpr(8)  # BLOCK_K steps over all of K
NUM_WORK = tl.constexpr(512)  # work units: output tiles x K slices


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
    lo = split_id * K_TILES // SPLIT_K
    hi = (split_id + 1) * K_TILES // SPLIT_K
    return lo, hi


@triton.jit
def epilogue(acc, c_ptr, bias_ptr, offs_m, offs_n):
    """D = relu(A @ B) on one fp32 tile, stored as bfloat16."""
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    c_ptrs = c_ptr + offs_m[:, None] * N + offs_n[None, :]
    acc = tl.maximum(acc, 0.0)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def splitk_epilogue_kernel(c_ptr, bias_ptr, ws_ptr):
    """Read the fp32 tile the atomics summed, apply the epilogue, and zero the tile again so
    the buffer is ready for the next call without a separate memset."""
    pid_m, pid_n = tile_coords(tl.program_id(0))
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    ws_ptrs = ws_ptr + offs_m[:, None] * N + offs_n[None, :]
    acc = tl.load(ws_ptrs, mask=mask, other=0.0)
    tl.store(ws_ptrs, tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32), mask=mask)
    epilogue(acc, c_ptr, bias_ptr, offs_m, offs_n)


@triton.jit
def finish_tile(acc, c_ptr, bias_ptr, ws_ptr, split_id, offs_m, offs_n):
    """One K slice done: add its fp32 partial tile into the zeroed [M, N] buffer."""
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    ws_ptrs = ws_ptr + offs_m[:, None] * N + offs_n[None, :]
    tl.atomic_add(ws_ptrs, acc, mask=mask, sem="relaxed")


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
    a_ptrs = a_ptr + offs_m[:, None] * STRIDE_AM + offs_k[None, :] * STRIDE_AK
    b_ptrs = b_ptr + offs_k[:, None] * STRIDE_BK + offs_n[None, :] * STRIDE_BN
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
    a, b, c, bias are checked by the caller; workspace is fp32 [8192, 256], all zeros on entry (and left all zeros)."""
    grid = (NUM_WORK.value,)
    matmul_kernel[grid](a, b, c, bias, workspace, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    splitk_epilogue_kernel[(NUM_TILES.value,)](c, bias, workspace, num_warps=4)
    return c


def warmup(a_dtype, b_dtype, c_dtype, bias_dtype, ws_dtype):
    """Compile without launching (fills Triton's disk cache); dtypes (or None) stand in for tensors."""
    matmul_kernel.warmup(a_dtype, b_dtype, c_dtype, bias_dtype, ws_dtype, grid=(1,),
                         num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    splitk_epilogue_kernel.warmup(c_dtype, bias_dtype, ws_dtype, grid=(1,), num_warps=4)
