"""GEMM kernel for Triton, rendered by cudal2 (backend triton v5, family matmul).

problems MxNxK-float16-NN: D[M, N] = A @ B
         A MxK row-major, B KxN row-major, float16 in, float16 out, fp32 accumulation
spec     f7d6618a3fb1ff78 32x32x32 warps=4 stages=2 load=pointer group=8/along_m data-parallel arch=sm_90a shapes=dynamic

M, N and K are arguments: this one module serves every shape of its dtype, layout and epilogue.
Triton compiles it once per alignment class (each extent divisible by 16 or not) and tile
evenness (EVEN_M/N/K) and caches it; every spec value is a compile-time constant below.
"""

import functools

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
WIDE_FROM = 2**31  # elements: a shape with an operand, output or workspace this large takes 64-bit offsets


@triton.jit
def fast_div(n, magic, shift):
    """n // d for 0 <= n < 2**30, where (magic, shift) = divisor(d) comes from launch(): a multiply
    and a shift. `//` by a run-time d is a long instruction sequence that the tile arithmetic would
    pay once per work unit; a static kernel's divisors are constants the compiler turns into this."""
    return ((tl.cast(n, tl.int64) * magic) >> shift).to(tl.int32)


@triton.jit
def tile_coords(tile_id, M, N, group_magic, group_shift, last_magic, last_shift):
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
def work_coords(work_id, M, N, group_magic, group_shift, last_magic, last_shift):
    """(split_id, pid_m, pid_n) of a work unit: work units are the tiles of K slice 0, then of slice 1, ..."""
    split_id = 0
    pid_m, pid_n = tile_coords(work_id, M, N, group_magic, group_shift, last_magic, last_shift)
    return split_id, pid_m, pid_n


@triton.jit
def k_range(split_id, K, ONE_K: tl.constexpr):
    """BLOCK_K steps [lo, hi) of one K slice; slices differ by at most one step."""
    # ONE_K: launch() found all of K within one BLOCK_K step. A loop of one trip the compiler sees
    # is no loop (no pipeline prologue, no trip-count arithmetic), as in a kernel compiled for its K.
    if ONE_K:
        hi = 1
    else:
        hi = tl.cdiv(K, BLOCK_K)
    return 0, hi


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
def mainloop(work_id, a_ptr, b_ptr, c_ptr, bias_ptr, ws_ptr, M, N, K, group_magic, group_shift, last_magic, last_shift, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_K: tl.constexpr, ONE_K: tl.constexpr):
    """One work unit: the K slice `split_id` of output tile `tile_id`, pointer loads."""
    split_id, pid_m, pid_n = work_coords(work_id, M, N, group_magic, group_shift, last_magic, last_shift)
    lo, hi = k_range(split_id, K, ONE_K)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = lo * BLOCK_K + tl.arange(0, BLOCK_K)
    offs_k = tl.max_contiguous(tl.multiple_of(offs_k, BLOCK_K), BLOCK_K)  # K is the contiguous dim
    offs_n = tl.max_contiguous(tl.multiple_of(offs_n, BLOCK_N), BLOCK_N)  # B is row-major
    # strides in elements, fixed by layout NN; int64 where WIDE made the extents int64
    a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * N + offs_n[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in tl.range(lo, hi):
        # the masks only where the shape has a partial tile (EVEN_*: launch() tells, per shape)
        if EVEN_M and EVEN_K:
            a = tl.load(a_ptrs)
        else:
            a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0.0)
        if EVEN_K and EVEN_N:
            b = tl.load(b_ptrs)
        else:
            b = tl.load(b_ptrs, mask=(offs_k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * N
        if not EVEN_K:
            offs_k += BLOCK_K
    finish_tile(acc, c_ptr, bias_ptr, ws_ptr, split_id, offs_m, offs_n, M, N)


@triton.jit(do_not_specialize=['M', 'group_magic', 'group_shift', 'last_magic', 'last_shift'])
def matmul_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, ws_ptr, M, N, K, group_magic, group_shift, last_magic, last_shift, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_K: tl.constexpr, WIDE: tl.constexpr, ONE_K: tl.constexpr):
    if WIDE:  # 64-bit offsets: launch() found an offset that may pass 2**31 (elsewhere int32 serves)
        M, N, K = tl.cast(M, tl.int64), tl.cast(N, tl.int64), tl.cast(K, tl.int64)
    mainloop(tl.program_id(0), a_ptr, b_ptr, c_ptr, bias_ptr, ws_ptr, M, N, K, group_magic, group_shift, last_magic, last_shift, EVEN_M, EVEN_N, EVEN_K, ONE_K)


def divisor(d):
    """(magic, shift) such that n // d == (n * magic) >> shift for every 0 <= n < 2**30: the
    round-up method of Granlund and Montgomery. magic < 2**31, so Triton passes it as int32."""
    s = (d - 1).bit_length()  # ceil(log2(d))
    return -(-(1 << (30 + s)) // d), 30 + s


@functools.lru_cache(maxsize=256)
def divisors(M, N):
    """The tile arithmetic's run-time divisors for an M x N output, as the kernels' (magic, shift)
    arguments: a rasterization group's tiles, the last group's rows."""
    tiles_m, tiles_n = triton.cdiv(M, 32), triton.cdiv(N, 32)
    if tiles_m * tiles_n * 1 >= 2**30:
        raise ValueError(f"{M}x{N} has 2**30 or more work units for 32x32 tiles; "
                         "use larger tiles")
    group, last = 8 * tiles_n, tiles_m % 8 or 8
    return (*divisor(group), *divisor(last))


def launches(a, b, c, bias, workspace, num_sms):
    """The GEMM's kernel launches in order, each (kernel, grid, arguments, keyword arguments); a
    caller that relaunches them can skip the JIT's per-call dispatch (TritonKernel.bind).
    a, b, c, bias are checked by the caller; workspace is unused (None)."""
    M, N, K = a.shape[0], b.shape[1], a.shape[1]
    wide = max(M * K, K * N, M * N * 1) >= WIDE_FROM  # the kernel's offsets need 64 bits
    one_k = K <= 32  # all of K in one BLOCK_K step: the kernel's K loop becomes straight code
    divs = divisors(M, N)
    num_tiles = triton.cdiv(M, 32) * triton.cdiv(N, 32)
    grid = (num_tiles,)  # work units: output tiles
    matmul = (matmul_kernel, grid, (a, b, c, bias, workspace, M, N, K, *divs),
              dict(num_warps=NUM_WARPS, num_stages=NUM_STAGES, EVEN_M=M % 32 == 0, EVEN_N=N % 32 == 0, EVEN_K=K % 32 == 0, WIDE=wide, ONE_K=one_k))
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
    wide = max(M * K, K * N, M * N * 1) >= WIDE_FROM
    one_k = K <= 32
    divs = divisors(M, N)
    matmul_kernel.warmup(a_dtype, b_dtype, c_dtype, bias_dtype, ws_dtype, M, N, K, *divs, EVEN_M=M % 32 == 0, EVEN_N=N % 32 == 0, EVEN_K=K % 32 == 0, WIDE=wide, ONE_K=one_k, grid=(1,),
                         num_warps=NUM_WARPS, num_stages=NUM_STAGES)
