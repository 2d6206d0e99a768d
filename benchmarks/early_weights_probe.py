"""Can a small-M GEMM start reading W before the kernel before it has finished? A probe on train
shapes (docs/small_m.md), not a kernel the search runs.

    python benchmarks/early_weights_probe.py [--prelude torch|trigger|gemm|cublas] [--postlude cublas]
        [--variants plain,pdl,...] [MxNxK ...]   # writes $OUT/early_weights_probe_<prelude>[_then_cublas].json

W does not depend on the layer's input; only A does. With programmatic dependent launch (PDL) a kernel
may start while the one before it is still finishing, and must run `griddepcontrol.wait` before it
reads what that kernel wrote. The variants of one split-K tensor-core kernel:
- plain: launched as usual;
- pdl: launched with PDL, waits first (what the CuTe DSL kernels do);
- pdl_trig: the same, and lets the kernel after it launch at once (griddepcontrol.launch_dependents);
- l2_<bytes>: launched with PDL, prefetches the first <bytes> of each of its W rows into L2, then waits;
- regs: launched with PDL, loads its first W tile into registers, then waits, then reads A.

Timed as a model's stream runs them: a CUDA graph of (prelude, call) for every input set in turn, the
prelude being a read of twice the L2 (the projections before) and a write of A (the norm that made
it). A contender's figure is its graph's time less the prelude-only graph's, per call, the median of
interleaved rounds: nothing is put between the prelude and the call, so the transition between
kernels counts. (Events around each call alone, as the evaluator's layer mode places them, would
break the dependency PDL overlaps.)

Every variant is checked first with A zeroed before the replay: a kernel that read A before the
wait would read zeros. The `unsafe` variant (A read before the wait) is the check's negative
control and is never timed.
"""
import json, math, os, random, statistics, sys, time
import torch, triton, triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from split_k_tile import k_step, split_tile, store_split  # noqa: E402 - the split-K tile both probes use


@triton.jit
def _prefetch_l2(ptrs):
    # one prefetch of a 128-byte line per element; the output is unused (is_pure=False keeps it)
    return tl.inline_asm_elementwise("prefetch.global.L2 [$1]; mov.u32 $0, 0;", "=r,l", [ptrs],
                                     dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def skinny(a_ptr, w_ptr, c_ptr, ws_ptr, cnt_ptr, M, N, K,
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, S: tl.constexpr,
           MODE: tl.constexpr, PF_LINES: tl.constexpr, TRIGGER: tl.constexpr = False):
    """MODE 0 plain, 1 wait first, 2 L2 prefetch of PF_LINES lines per W row then wait, 3 first W
    tile in registers then wait, 4 (unsafe) A and W loaded before the wait. TRIGGER: let the next
    kernel launch at once (it writes nothing the next kernel reads before the next one's own wait)."""
    if TRIGGER:
        tl.extra.cuda.gdc_launch_dependents()
    pid_m, pid_n, sid, lo, hi, offs_m, offs_n, a_ptrs, w_ptrs = split_tile(a_ptr, w_ptr, K, BM, BN, BK, S)
    acc = tl.zeros((BM, BN), tl.float32)
    if MODE == 2:
        lines = w_ptr + offs_n[:, None] * K + lo * BK + tl.arange(0, PF_LINES)[None, :] * 64
        _prefetch_l2(lines)
    if MODE == 3:
        w = tl.load(w_ptrs, mask=offs_n[:, None] < N, other=0.0)
        tl.extra.cuda.gdc_wait()
        a = tl.load(a_ptrs, mask=offs_m[:, None] < M, other=0.0)
        acc = tl.dot(a, tl.trans(w), acc)
        a_ptrs += BK
        w_ptrs += BK
        lo += 1
    if MODE == 4:
        a = tl.load(a_ptrs, mask=offs_m[:, None] < M, other=0.0)
        w = tl.load(w_ptrs, mask=offs_n[:, None] < N, other=0.0)
        acc = tl.dot(a, tl.trans(w), acc)
        tl.extra.cuda.gdc_wait()
        a_ptrs += BK
        w_ptrs += BK
        lo += 1
    if MODE == 1 or MODE == 2:
        tl.extra.cuda.gdc_wait()
    for _ in range(lo, hi):
        acc, a_ptrs, w_ptrs = k_step(acc, a_ptrs, w_ptrs, offs_m, offs_n, M, N, BK, False)
    store_split(acc, c_ptr, ws_ptr, cnt_ptr, offs_m, offs_n, M, N, pid_m, pid_n, sid, S, BM, BN, False)


@triton.jit
def copy_triggering(src_ptr, dst_ptr, numel, BLOCK: tl.constexpr):
    """The norm that writes A, as a kernel that lets the next one launch at once (PDL)."""
    tl.extra.cuda.gdc_launch_dependents()
    tl.extra.cuda.gdc_wait()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < numel), mask=offs < numel)


@triton.jit
def empty(out_ptr, WAIT: tl.constexpr):
    if WAIT:
        tl.extra.cuda.gdc_wait()


MODES = {"plain": (0, 1), "pdl": (1, 1), "regs": (3, 1), "unsafe": (4, 1), "pdl_trig": (1, 1)}


def make(m, n, k, BM, BN, BK, S, stages, warps, variant, A, W, C):
    if variant.startswith("l2_"):
        mode, lines = 2, max(1, int(variant[3:]) // 128)
    else:
        mode, lines = MODES[variant]
    ws = torch.empty(S * m * n, dtype=torch.float32, device="cuda")
    tm, tn = triton.cdiv(m, BM), triton.cdiv(n, BN)
    cnt = torch.zeros(tm * tn, dtype=torch.int32, device="cuda")
    grid = (tn, tm, S)
    extra = {} if mode == 0 else {"launch_pdl": True}
    trigger = variant.endswith("_trig")  # lets a next kernel launched with PDL start at once

    def call(i):
        skinny[grid](A[i], W[i], C[i], ws, cnt, m, n, k, BM=BM, BN=BN, BK=BK, S=S, MODE=mode, PF_LINES=lines,
                     TRIGGER=trigger, num_stages=stages, num_warps=warps, **extra)
    return call


def configs(m, n, k, sms):
    """Two split-K tiles per shape, sized to about one or two waves (the probe's question is the
    variant, not the tile)."""
    BM = 16 if m <= 16 else 32 if m <= 32 else 64
    out = []
    for BN, BK in ((64, 128), (32, 256)):
        tiles = triton.cdiv(m, BM) * triton.cdiv(n, BN)
        S = max(1, min(k // BK // 2, round(1.5 * sms / tiles)))
        out.append((BM, BN, BK, S, 4, 4))
    return out


def graph(fn, sets, calls):
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(sets):
            fn(i)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        for j in range(calls):
            fn(j % sets)
    torch.cuda.synchronize()
    return g


def main():
    args = sys.argv[1:]
    # --prelude torch: torch's kernels before the call (they never trigger: the call starts when they end);
    # trigger: A written by a kernel that lets the call launch at once; gemm: that, then a GEMM of the same
    # shape on another W that also triggers (as q_proj before k_proj)
    # cublas: torch's kernels, then torch.matmul of the same shape on another W (cuBLAS). --postlude cublas:
    # such a torch.matmul also follows the call, and the base graph holds it too (does the kernel after
    # ours start early?). --variants: a comma list of the variants to run (default: all)
    prelude_kind, postlude_kind, variants = "torch", "none", None
    while args[:1] and args[0] in ("--prelude", "--postlude", "--variants"):
        if args[0] == "--prelude":
            prelude_kind = args[1]
        elif args[0] == "--postlude":
            postlude_kind = args[1]
        else:
            variants = args[1].split(",")
        args = args[2:]
    shapes = args or ["1x4096x4096", "16x4096x4096", "64x4096x4096", "1x4096x14336", "7x10240x8192",
                              "128x4096x14336"]
    props = torch.cuda.get_device_properties(0)
    sms, l2 = props.multi_processor_count, props.L2_cache_size
    gpu = f"{torch.cuda.get_device_name()} {getattr(props, 'uuid', '')}"
    print(f"{gpu}: torch {torch.__version__}, triton {triton.__version__}, {sms} SMs, L2 {l2 >> 20} MiB", flush=True)
    streamed = torch.ones(2 * l2 // 2, dtype=torch.float16, device="cuda")
    sink = torch.empty((), dtype=torch.float32, device="cuda")
    rows, sets, calls, rounds = [], 4, 24, 40
    for label in shapes:
        m, n, k = map(int, label.split("x"))
        A_src = [torch.randn(m, k, device="cuda", dtype=torch.float16) for _ in range(sets)]
        A = [torch.zeros_like(a) for a in A_src]
        W = [torch.randn(n, k, device="cuda", dtype=torch.float16) / math.sqrt(k) for _ in range(sets)]
        C = [torch.empty(m, n, device="cuda", dtype=torch.float16) for _ in range(sets)]
        ref = [(A_src[i].float() @ W[i].float().t()) for i in range(sets)]

        W_prev = torch.randn(n, k, device="cuda", dtype=torch.float16) / math.sqrt(k)
        C_prev = torch.empty(m, n, device="cuda", dtype=torch.float16)
        prev_cfg = configs(m, n, k, sms)[0]
        prev_ws = torch.empty(prev_cfg[3] * m * n, dtype=torch.float32, device="cuda")
        prev_cnt = torch.zeros(triton.cdiv(m, prev_cfg[0]) * triton.cdiv(n, prev_cfg[1]), dtype=torch.int32,
                               device="cuda")

        W_post = torch.randn(n, k, device="cuda", dtype=torch.float16) / math.sqrt(k)
        C_post = torch.empty(m, n, device="cuda", dtype=torch.float16)

        def postlude(i):
            if postlude_kind == "cublas":
                torch.matmul(A[i], W_post.t(), out=C_post)

        def prelude(i):
            torch.sum(streamed, dim=0, dtype=torch.float32, out=sink)
            if prelude_kind in ("torch", "cublas"):
                A[i].copy_(A_src[i])
                if prelude_kind == "cublas":
                    torch.matmul(A[i], W_prev.t(), out=C_prev)
                return
            copy_triggering[(triton.cdiv(m * k, 1024),)](A_src[i], A[i], m * k, BLOCK=1024, launch_pdl=True)
            if prelude_kind == "gemm":
                BM, BN, BK, S, st, wp = prev_cfg
                skinny[(triton.cdiv(n, BN), triton.cdiv(m, BM), S)](
                    A[i], W_prev, C_prev, prev_ws, prev_cnt, m, n, k, BM=BM, BN=BN, BK=BK, S=S, MODE=1, PF_LINES=1,
                    TRIGGER=True, num_stages=st, num_warps=wp, launch_pdl=True)

        conts = {"torch": lambda i: torch.matmul(A[i], W[i].t(), out=C[i]),
                 "empty plain": lambda i: empty[(1,)](sink, WAIT=False),
                 "empty pdl": lambda i: empty[(1,)](sink, WAIT=True, launch_pdl=True)}
        verdicts = {}
        for cfg in configs(m, n, k, sms):
            BM, BN, BK, S, st, wp = cfg
            row_bytes = 2 * (k // S)  # one W row's bytes in a K slice
            whole = 128 << max(0, (row_bytes // 128).bit_length() - 1)  # a power of two of lines, <= the row
            for variant in variants or (["plain", "pdl", "pdl_trig", "regs", "unsafe"]
                                        + [f"l2_{b}" for b in (1024, 4096) if b < whole] + [f"l2_{whole}"]):
                name = f"{BM}x{BN}x{BK} S{S} {variant}"
                try:
                    call = make(m, n, k, BM, BN, BK, S, st, wp, variant, A, W, C)
                    g = graph(lambda i: (prelude(i), call(i)), sets, sets)
                    bad = 0.0
                    for _ in range(3):  # A zeroed, then one replay: the prelude writes A, the kernel must see it
                        for i in range(sets):
                            A[i].zero_()
                            C[i].fill_(float("nan"))
                        g.replay()
                        torch.cuda.synchronize()
                        bad = max(bad, max(((C[i].float() - ref[i]).abs().max() / ref[i].abs().max()).item()
                                           for i in range(sets)))
                    ok = bad < 2e-2
                    verdicts[name] = f"{'ok' if ok else 'WRONG'} ({bad:.2g})"
                    print(f"  {label} {name}: check {verdicts[name]}", flush=True)
                    if ok and variant != "unsafe":
                        conts[name] = call
                except Exception as e:  # noqa: BLE001 - a variant that fails to build or launch is reported
                    verdicts[name] = f"failed: {type(e).__name__}: {str(e)[:160]}"
                    print(f"  {label} {name}: {verdicts[name]}", flush=True)
        for i in range(sets):
            prelude(i)
        base = graph(lambda i: (prelude(i), postlude(i)), sets, calls)
        graphs = {name: graph(lambda i, c=c: (prelude(i), c(i), postlude(i)), sets, calls) for name, c in conts.items()}
        ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def timed(g):
            ev0.record()
            g.replay()
            ev1.record()
            ev1.synchronize()
            return ev0.elapsed_time(ev1) * 1e3 / calls

        t0 = time.time()
        while time.time() - t0 < 0.3:  # warm the clocks
            timed(base)
        samples = {name: [] for name in graphs}
        for _ in range(rounds):
            order = list(graphs)
            random.shuffle(order)
            b = timed(base)
            for name in order:
                samples[name].append(timed(graphs[name]) - b)
        out = {name: statistics.median(v) for name, v in samples.items()}
        iqr = {name: statistics.quantiles(v, n=4) for name, v in samples.items()}
        tt = out["torch"]
        print(f"{label}: marginal us per call after the prelude ({rounds} rounds, {calls} calls a graph)", flush=True)
        for name, us in sorted(out.items(), key=lambda kv: kv[1]):
            q = iqr[name]
            print(f"  {name:36s} {us:8.2f} us  iqr {q[0]:.2f}-{q[2]:.2f}  {tt / us if us > 0 else float('nan'):.3f}x torch",
                  flush=True)
        rows.append({"shape": label, "us": out, "iqr": iqr, "checks": verdicts,
                     "weight_GBps": {name: 2 * n * k / us / 1e3 for name, us in out.items() if us > 0}})
        A = A_src = W = C = graphs = base = None  # (freed before the next shape's)
        torch.cuda.empty_cache()
    out_dir = os.environ.get("OUT", "/tmp/out")
    os.makedirs(out_dir, exist_ok=True)
    tag = prelude_kind + ("" if postlude_kind == "none" else f"_then_{postlude_kind}")
    with open(os.path.join(out_dir, f"early_weights_probe_{tag}.json"), "w") as f:
        json.dump({"gpu": gpu, "prelude": prelude_kind, "postlude": postlude_kind, "torch": torch.__version__, "triton": triton.__version__,
                   "date": time.strftime("%Y-%m-%d"), "rounds": rounds, "calls_per_graph": calls, "rows": rows}, f,
                  indent=1)


if __name__ == "__main__":
    main()
