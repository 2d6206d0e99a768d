"""GEMM kernel for Triton, rendered by cudal2 (backend triton v5, family matmul_tma).

problems MxNxK-float16-NT-a1b0-bias: D[M, N] = A @ B + bias
         A MxK row-major, B KxN column-major, float16 in, float16 out, fp32 accumulation
spec     e88bf1d7a90054b1 64x128x64 warps=4 stages=4 load=tma group=8/along_m split_k=4/workspace persistent arch=sm_90a shapes=dynamic

M, N and K are arguments: this one module serves every shape of its dtype, layout and epilogue.
Triton compiles it once per alignment class (each extent divisible by 16 or not) and caches it;
every spec value is a compile-time constant below.
"""

import functools

import triton
import triton.language as tl

# ---- epilogue: D = A @ B + bias ----------------------------------------------------------
ALPHA = tl.constexpr(1.0)
BETA = tl.constexpr(0.0)

# ---- spec ---------------------------------------------------------------------------------
BLOCK_M = tl.constexpr(64)
BLOCK_N = tl.constexpr(128)
BLOCK_K = tl.constexpr(64)
GROUP = tl.constexpr(8)  # tiles per rasterization group, advancing along_m
SPLIT_K = tl.constexpr(4)
NUM_WARPS = 4
NUM_STAGES = 4
WIDE_FROM = 2**31  # elements: a shape with an operand, output or workspace this large takes 64-bit offsets


@triton.jit
def fast_div(n, magic, shift):
    """n // d for 0 <= n < 2**30, where (magic, shift) = divisor(d) comes from launch(): a multiply
    and a shift. `//` by a run-time d is a long instruction sequence that the tile arithmetic would
    pay once per work unit; a static kernel's divisors are constants the compiler turns into this."""
    return ((tl.cast(n, tl.int64) * magic) >> shift).to(tl.int32)


@triton.jit
def tile_coords(tile_id, M, N, group_magic, group_shift, last_magic, last_shift, tiles_magic, tiles_shift):
    """Grouped rasterization: groups of GROUP tile rows; inside a group consecutive tiles walk
    down M, so concurrently running blocks share B columns and A rows in L2."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_in_group = GROUP * tl.cdiv(N, BLOCK_N)
    group_id = fast_div(tile_id, group_magic, group_shift)
    in_group = tile_id - group_id * tiles_in_group
    first = group_id * GROUP
    group_size = min(tiles_m - first, GROUP)
    # every group but the last has GROUP rows, a constant divisor; launch() passes the last one's
    pid_n = tl.where(group_size == GROUP, in_group // GROUP, fast_div(in_group, last_magic, last_shift))
    pid_m = first + in_group - pid_n * group_size
    return pid_m, pid_n


@triton.jit
def work_coords(work_id, M, N, group_magic, group_shift, last_magic, last_shift, tiles_magic, tiles_shift):
    """(split_id, pid_m, pid_n) of a work unit: work units are the tiles of K slice 0, then of slice 1, ..."""
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    split_id = fast_div(work_id, tiles_magic, tiles_shift)
    pid_m, pid_n = tile_coords(work_id - split_id * num_tiles, M, N, group_magic, group_shift, last_magic, last_shift, tiles_magic, tiles_shift)
    return split_id, pid_m, pid_n


@triton.jit
def k_range(split_id, K):
    """BLOCK_K steps [lo, hi) of one K slice; slices differ by at most one step."""
    k_tiles = tl.cdiv(K, BLOCK_K)
    lo = split_id * k_tiles // SPLIT_K
    hi = (split_id + 1) * k_tiles // SPLIT_K
    return lo, hi


@triton.jit
def epilogue(acc, c_ptr, bias_ptr, offs_m, offs_n, M, N):
    """D = A @ B + bias on one fp32 tile, stored as float16."""
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    c_ptrs = c_ptr + offs_m[:, None] * N + offs_n[None, :]
    acc += tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=['M', 'group_magic', 'group_shift', 'last_magic', 'last_shift', 'tiles_magic', 'tiles_shift'])
def splitk_epilogue_kernel(c_ptr, bias_ptr, ws_ptr, M, N, group_magic, group_shift, last_magic, last_shift, tiles_magic, tiles_shift, WIDE: tl.constexpr):
    """Sum the SPLIT_K fp32 partial tiles of the workspace [SPLIT_K, M, N], then the epilogue."""
    if WIDE:  # 64-bit offsets: launch() found an offset that may pass 2**31
        M, N = tl.cast(M, tl.int64), tl.cast(N, tl.int64)
    pid_m, pid_n = tile_coords(tl.program_id(0), M, N, group_magic, group_shift, last_magic, last_shift, tiles_magic, tiles_shift)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    ws_ptrs = ws_ptr + offs_m[:, None] * N + offs_n[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(SPLIT_K):
        acc += tl.load(ws_ptrs, mask=mask, other=0.0)
        ws_ptrs += M * N  # next slice
    epilogue(acc, c_ptr, bias_ptr, offs_m, offs_n, M, N)


@triton.jit
def finish_tile(acc, c_ptr, bias_ptr, ws_ptr, split_id, offs_m, offs_n, M, N):
    """One K slice done: store its fp32 partial tile to workspace[split_id]."""
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    ws_ptrs = ws_ptr + split_id * M * N + offs_m[:, None] * N + offs_n[None, :]
    tl.store(ws_ptrs, acc, mask=mask)


@triton.jit
def make_descriptors(a_ptr, b_ptr, M, N, K):
    """Device-side TMA descriptors. A column-major operand is described as its contiguous
    transpose (the tile is transposed back in registers); TMA fills out-of-bounds with zeros."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])
    return a_desc, b_desc


@triton.jit
def mainloop(work_id, a_desc, b_desc, c_ptr, bias_ptr, ws_ptr, M, N, K, group_magic, group_shift, last_magic, last_shift, tiles_magic, tiles_shift, WIDE: tl.constexpr):
    """One work unit: the K slice `split_id` of output tile `tile_id`, TMA loads."""
    split_id, pid_m, pid_n = work_coords(work_id, M, N, group_magic, group_shift, last_magic, last_shift, tiles_magic, tiles_shift)
    lo, hi = k_range(split_id, K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in tl.range(lo, hi):
        a = a_desc.load([pid_m * BLOCK_M, kt * BLOCK_K])
        b = tl.trans(b_desc.load([pid_n * BLOCK_N, kt * BLOCK_K]))
        acc = tl.dot(a, b, acc)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if WIDE:  # 64-bit output and workspace offsets (TMA's own coordinates above are 32-bit)
        M, N = tl.cast(M, tl.int64), tl.cast(N, tl.int64)
    finish_tile(acc, c_ptr, bias_ptr, ws_ptr, split_id, offs_m, offs_n, M, N)


@triton.jit(do_not_specialize=['M', 'group_magic', 'group_shift', 'last_magic', 'last_shift', 'tiles_magic', 'tiles_shift'])
def matmul_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, ws_ptr, M, N, K, group_magic, group_shift, last_magic, last_shift, tiles_magic, tiles_shift, WIDE: tl.constexpr):
    a_desc, b_desc = make_descriptors(a_ptr, b_ptr, M, N, K)
    # persistent: the grid is min(#SMs, work units) blocks, each strides over the work units
    num_work = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N) * SPLIT_K
    for work_id in tl.range(tl.program_id(0), num_work, tl.num_programs(0)):
        mainloop(work_id, a_desc, b_desc, c_ptr, bias_ptr, ws_ptr, M, N, K, group_magic, group_shift, last_magic, last_shift, tiles_magic, tiles_shift, WIDE)


def divisor(d):
    """(magic, shift) such that n // d == (n * magic) >> shift for every 0 <= n < 2**30: the
    round-up method of Granlund and Montgomery. magic < 2**31, so Triton passes it as int32."""
    s = (d - 1).bit_length()  # ceil(log2(d))
    return -(-(1 << (30 + s)) // d), 30 + s


@functools.lru_cache(maxsize=256)
def divisors(M, N):
    """The tile arithmetic's run-time divisors for an M x N output, as the kernels' (magic, shift)
    arguments: a rasterization group's tiles, the last group's rows, the tiles of one K slice."""
    tiles_m, tiles_n = triton.cdiv(M, 64), triton.cdiv(N, 128)
    if tiles_m * tiles_n * 4 >= 2**30:
        raise ValueError(f"{M}x{N} has 2**30 or more work units for 64x128 tiles; "
                         "use larger tiles")
    group, last = 8 * tiles_n, tiles_m % 8 or 8
    return (*divisor(group), *divisor(last), *divisor(tiles_m * tiles_n))


def launches(a, b, c, bias, workspace, num_sms):
    """The GEMM's kernel launches in order, each (kernel, grid, arguments, keyword arguments); a
    caller that relaunches them can skip the JIT's per-call dispatch (TritonKernel.bind).
    a, b, c, bias are checked by the caller; workspace is fp32 [4, M, N]: one partial sum per K slice."""
    M, N, K = a.shape[0], b.shape[1], a.shape[1]
    wide = max(M * K, K * N, M * N * 4) >= WIDE_FROM  # the kernel's offsets need 64 bits
    divs = divisors(M, N)
    num_tiles = triton.cdiv(M, 64) * triton.cdiv(N, 128)
    grid = (min(num_sms, num_tiles * 4),)  # persistent: at most one block per SM, each loops over work
    matmul = (matmul_kernel, grid, (a, b, c, bias, workspace, M, N, K, *divs),
              dict(num_warps=NUM_WARPS, num_stages=NUM_STAGES, WIDE=wide))
    return [matmul, (splitk_epilogue_kernel, (num_tiles,), (c, bias, workspace, M, N, *divs), dict(num_warps=4, WIDE=wide))]


def launch(a, b, c, bias, workspace, num_sms):
    """Enqueue the GEMM on the current stream through Triton's JIT; no allocation, no
    synchronization. Returns c."""
    for kernel, grid, args, kwargs in launches(a, b, c, bias, workspace, num_sms):
        kernel[grid](*args, **kwargs)
    return c


def warmup(a_dtype, b_dtype, c_dtype, bias_dtype, ws_dtype, M, N, K):
    """Compile without launching (fills Triton's disk cache) for the alignment class of M, N, K;
    dtypes (or None) stand in for tensors."""
    wide = max(M * K, K * N, M * N * 4) >= WIDE_FROM
    divs = divisors(M, N)
    matmul_kernel.warmup(a_dtype, b_dtype, c_dtype, bias_dtype, ws_dtype, M, N, K, *divs, WIDE=wide, grid=(1,),
                         num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    splitk_epilogue_kernel.warmup(c_dtype, bias_dtype, ws_dtype, M, N, *divs, WIDE=wide, grid=(1,), num_warps=4)
