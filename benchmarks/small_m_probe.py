"""How close to the DRAM read rate can small-M NT GEMMs get in layer mode? Prototype Triton kernels
against torch.matmul and against floors, on train shapes only (docs/small_m.md):

    python benchmarks/small_m_probe.py [MxNxK ...]     # writes $OUT/smallm_probe.json (default /tmp/out)

- skinny: a split-K tensor-core kernel whose tile is M padded to 16..64 rows; its K slices' fp32 partials
  go to a workspace and the last block of a tile to finish sums them in slice order (one launch,
  deterministic), or (variant "two") a second kernel sums them;
- gemv (M=1): CUDA-core FMAs over a [BLOCK_N, BLOCK_K] fp32 accumulator, no tensor core;
- floors: an empty kernel (what the pattern's events and launch cost alone), torch.sum(W) and streaming
  reads of W's bytes at 528/1056/2112 blocks.
Each output is checked against an fp32 reference before timing. Prototypes to measure a design, not
kernels the search runs.
"""
import itertools, json, math, os, sys, time
import torch, triton, triton.language as tl
DEV = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"

sys.path.insert(0, os.getcwd()); sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
from cudal2.bench.timing import measure, TimingConfig
from dram_ceilings import timed_us
from roofline import _stream_kernel  # the same floors as the roofline's
from split_k_tile import k_step, split_tile, store_split  # the split-K tile both small-M probes use


@triton.jit
def skinny(a_ptr, w_ptr, c_ptr, ws_ptr, cnt_ptr, M, N, K,
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, S: tl.constexpr,
           EVICT: tl.constexpr, TWO: tl.constexpr):
    pid_m, pid_n, sid, lo, hi, offs_m, offs_n, a_ptrs, w_ptrs = split_tile(a_ptr, w_ptr, K, BM, BN, BK, S)
    acc = tl.zeros((BM, BN), tl.float32)
    for _ in range(lo, hi):
        acc, a_ptrs, w_ptrs = k_step(acc, a_ptrs, w_ptrs, offs_m, offs_n, M, N, BK, EVICT)
    store_split(acc, c_ptr, ws_ptr, cnt_ptr, offs_m, offs_n, M, N, pid_m, pid_n, sid, S, BM, BN, TWO)


@triton.jit
def reduce_k(c_ptr, ws_ptr, M, N, S: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < M * N
    tot = tl.zeros((BLOCK,), tl.float32)
    for s in range(S):
        tot += tl.load(ws_ptr + s * M * N + offs, mask=mask, other=0.0)
    tl.store(c_ptr + offs, tot.to(tl.float16), mask=mask)


@triton.jit
def gemv(a_ptr, w_ptr, c_ptr, ws_ptr, cnt_ptr, N, K, BN: tl.constexpr, BK: tl.constexpr, S: tl.constexpr):
    pid_n = tl.program_id(0)
    sid = tl.program_id(1)
    k_tiles = tl.cdiv(K, BK)
    lo = sid * k_tiles // S
    hi = (sid + 1) * k_tiles // S
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = lo * BK + tl.arange(0, BK)
    w_ptrs = w_ptr + offs_n[:, None] * K + offs_k[None, :]
    a_ptrs = a_ptr + offs_k
    acc = tl.zeros((BN, BK), tl.float32)
    for _ in range(lo, hi):
        a = tl.load(a_ptrs)
        w = tl.load(w_ptrs, mask=offs_n[:, None] < N, other=0.0, eviction_policy="evict_first")
        acc += w.to(tl.float32) * a.to(tl.float32)[None, :]
        a_ptrs += BK
        w_ptrs += BK
    out = tl.sum(acc, axis=1)
    mask = offs_n < N
    if S == 1:
        tl.store(c_ptr + offs_n, out.to(tl.float16), mask=mask)
    else:
        tl.store(ws_ptr + sid * N + offs_n, out, mask=mask)
        tl.debug_barrier()
        old = tl.atomic_add(cnt_ptr + pid_n, 1, sem="acq_rel", scope="gpu")
        if old == S - 1:
            tot = tl.zeros((BN,), tl.float32)
            for s in range(S):
                tot += tl.load(ws_ptr + s * N + offs_n, mask=mask, other=0.0, cache_modifier=".cg")
            tl.store(c_ptr + offs_n, tot.to(tl.float16), mask=mask)
            tl.atomic_xchg(cnt_ptr + pid_n, 0)


def pow2ceil(x):
    return 1 << max(0, (x - 1).bit_length())


def make_skinny(m, n, k, BM, BN, BK, S, stages, warps, evict, two, A, W, C):
    ws = torch.empty(S * m * n, dtype=torch.float32, device=DEV)
    tm, tn = triton.cdiv(m, BM), triton.cdiv(n, BN)
    cnt = torch.zeros(tm * tn, dtype=torch.int32, device=DEV)
    grid = (tn, tm, S)

    def call(i):
        skinny[grid](A[i], W[i], C[i], ws, cnt, m, n, k, BM=BM, BN=BN, BK=BK, S=S, EVICT=evict, TWO=two,
                     num_stages=stages, num_warps=warps)
        if two and S > 1:
            reduce_k[(triton.cdiv(m * n, 1024),)](C[i], ws, m, n, S=S, BLOCK=1024)
    return call


def make_gemv(n, k, BN, BK, S, stages, warps, A, W, C):
    ws = torch.empty(S * n, dtype=torch.float32, device=DEV)
    cnt = torch.zeros(triton.cdiv(n, BN), dtype=torch.int32, device=DEV)
    grid = (triton.cdiv(n, BN), S)

    def call(i):
        gemv[grid](A[i], W[i], C[i], ws, cnt, n, k, BN=BN, BK=BK, S=S, num_stages=stages, num_warps=warps)
    return call


def configs(m, n, k):
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    bms = [16] if m <= 16 else [32] if m <= 32 else [32, 64]
    out = []
    for BM, (BN, BK) in itertools.product(bms, [(32, 256), (64, 128), (64, 64), (128, 64)]):
        tiles = triton.cdiv(m, BM) * triton.cdiv(n, BN)
        for waves in (1, 2, 4):
            S = max(1, round(waves * sms / tiles))
            S = min(S, k // BK // 2, 32)
            for warps, stages in ((4, 4), (4, 6), (8, 4)):
                c = ("skinny", BM, BN, BK, S, stages, warps, False, False)
                if (BM + BN) * BK * 2 * stages <= 200_000 and c not in out:
                    out.append(c)
    if m == 1:
        for BN, BK in ((32, 256), (64, 128), (16, 512)):
            tiles = triton.cdiv(n, BN)
            S = max(1, min(16, round(2 * sms / tiles)))
            while k // BK < S:
                S //= 2
            out.append(("gemv", 1, BN, BK, S, 4, 4, True, False))
    return out


def main():
    shapes = [s for s in sys.argv[1:]] or ["1x4096x4096", "16x4096x4096", "33x4096x4096", "64x4096x4096",
                                          "100x4096x4096", "7x10240x8192", "1x4096x14336", "64x4096x14336"]
    dev = torch.cuda.get_device_name()
    n_big = 1024 * 2**20 // 2
    src = torch.empty(n_big, dtype=torch.float16, device=DEV).normal_()
    dst = torch.empty_like(src)
    copy_us = timed_us(lambda: dst.copy_(src))
    read_us = timed_us(lambda: torch.sum(src, dtype=torch.float32))
    copy_GBps = 2 * 2 * n_big / copy_us / 1e3
    read_GBps = 2 * n_big / read_us / 1e3
    src = dst = None  # (freed before the shapes)
    print(f"{dev}: copy {copy_GBps:.0f} GB/s read {read_GBps:.0f} GB/s", flush=True)
    cfg = TimingConfig(groups=20)
    rows = []
    for label in shapes:
        m, n, k = map(int, label.split("x"))
        sets = 3
        A = [torch.randn(m, k, device=DEV, dtype=torch.float16) for _ in range(sets)]
        W = [torch.randn(n, k, device=DEV, dtype=torch.float16) / math.sqrt(k) for _ in range(sets)]
        C = [torch.empty(m, n, device=DEV, dtype=torch.float16) for _ in range(sets)]
        ref = (A[0].float() @ W[0].float().t())
        conts = {"torch": lambda i: torch.matmul(A[i], W[i].t(), out=C[i])}
        sink = torch.empty(2048, device=DEV, dtype=torch.float32)
        stream_read, empty_kernel = _stream_kernel()
        conts["floor: torch.sum(W)"] = lambda i: torch.sum(W[i], dtype=torch.float32)
        for ctas in (132, 264, 528):
            conts[f"floor: stream W {ctas}"] = (lambda c: lambda i: stream_read[(c,)](W[i], sink, n * k, BLOCK=4096, num_warps=8))(ctas)
        conts["floor: empty kernel"] = lambda i: empty_kernel[(1,)](sink)
        t0 = time.time()
        for c in configs(m, n, k):
            kind, BM, BN, BK, S, st, wp, ev, two = c
            name = f"{kind} {BM}x{BN}x{BK} S{S} s{st} w{wp}{' evict' if ev else ''}{' two' if two else ''}"
            try:
                if kind == "gemv":
                    call = make_gemv(n, k, BN, BK, S, st, wp, A, W, C)
                else:
                    call = make_skinny(m, n, k, BM, BN, BK, S, st, wp, ev, two, A, W, C)
                C[0].zero_()
                call(0); call(0)
                torch.cuda.synchronize()
                err = ((C[0].float() - ref).abs().max() / ref.abs().max()).item()
                if not err < 2e-2:
                    print(f"  {name}: WRONG err {err:.3g}", flush=True)
                    continue
                conts[name] = call
            except Exception as e:
                print(f"  {name}: failed {type(e).__name__}: {str(e)[:200]}", flush=True)
        print(f"{label}: {len(conts)} contenders compiled in {time.time() - t0:.1f}s", flush=True)
        res = measure(conts, sets, "layer", cfg, device=DEV)
        wbytes = 2 * (n * k + m * k + m * n)
        tt = res["torch"].timing.kernel_ms
        out = []
        for name, r in res.items():
            if r.timing is None:
                print(f"  {name}: {r.error}")
                continue
            us = r.timing.kernel_ms * 1e3
            out.append((us, name, wbytes / us / 1e3 / read_GBps, tt / r.timing.kernel_ms))
        out.sort()
        for us, name, frac, sp in out[:8] + [o for o in out if o[1] == "torch" or o[1].startswith("floor")]:
            print(f"  {name:44s} {us:8.2f} us  {frac:.3f} of read  {sp:.3f}x torch", flush=True)
        rows.append({"shape": label, "all": [dict(zip(("us", "name", "fraction", "speedup"), o)) for o in out]})
        A = W = C = None  # (freed before the next shape's)
        torch.cuda.empty_cache()
    os.makedirs(os.environ.get("OUT", "/tmp/out"), exist_ok=True)
    json.dump({"gpu": dev, "copy_GBps": copy_GBps, "read_GBps": read_GBps, "rows": rows},
              open(os.path.join(os.environ.get("OUT", "/tmp/out"), "smallm_probe.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
