"""The search's own winners, timed as a model calls them, by the evaluator and by an independent
harness: does a winner's speedup over torch.matmul read the same when someone else times it?

    python benchmarks/crosscheck_winners.py OUT.md [--shapes 30] [--part 0/1] [--budget 8]
        [--backends triton] [--max-seconds 540]
    python benchmarks/crosscheck_winners.py OUT.md --retime EARLIER.json [--max-seconds 540]

For each shape (validation serving shapes of cudal2/data/shapes/split.json, layout NT, spread over
sizes; --part i/n takes every n-th of them from the i-th, so that two calls share the work), in the
regime of --mode (chain, the search's objective, by default; or layer):
1. `cudal2.search(shape, budget=--budget, modes=(mode,))` names a winner and its speedup over
   torch.matmul (confirmed rounds): "search".
2. The evaluator times the winner and torch again, in the mode and offline in one call: "eval <mode>"
   (a second reading of the same regime) and "eval offline" (back to back).
3. An independent harness, written here without cudal2's timing code, in the same regime.
   - chain (chain_harness_timers): per input set, a read of a buffer twice the L2, an in-place pass
     over A, a torch GEMM of A with a cold (K, 1024) weight, the call, another such GEMM; a graph of
     that work without the calls (the floor) and one per contender, each round the floor and the
     contender's graph replayed, (its replay - the floor's) per call; the rounds split over four
     placements of its operands and buffers; each graph's work warmed up on a side stream first.
   - layer (harness_timers): per input set, the read and the pass over A, then the call between two
     events, all in one CUDA graph per contender; the two graphs replayed alternately.
   0.5 s of warm-up, then 100 rounds, median.
Agreement: the evaluator's ratio in the mode (step 2) within 2% of the harness's.

--retime EARLIER.json times the winners of an earlier run again with the evaluator in layer mode (no
search, no harness), on whatever GPU this run gets: do two runs, on two machines where the lease gives
another one, agree within 1% in geomean? Each report names the GPU's UUID, so it says whether the
machine was another one.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "benchmarks"))  # _rounds

from _rounds import interleaved  # noqa: E402
from cudal2 import GemmProblem  # noqa: E402
from cudal2.tuner.aggregates import aggregate  # noqa: E402

AGREE = 0.02
WARMUP_S = 0.5  # the harness's warm-up before its rounds (see harness_timers)
HARNESS_ROUNDS = 100  # 25 rounds left the harness's own ratio 0.9-1.2% from one run to the next, 100 0.6%


def shapes(n: int, part: int = 0, parts: int = 1) -> list[GemmProblem]:
    from cudal2 import shapes as shape_sets

    val = sorted(shape_sets.shapes("serving", "validation"), key=lambda s: s.m * s.n * s.k)
    step = max(1, len(val) // n)
    chosen = [s.problem() for s in val[::step]][:n]
    return chosen[part::parts]


def harness_ms(calls: dict, a_operands: list, rounds: int = HARNESS_ROUNDS) -> dict[str, float]:
    """name -> median ms per call: one graph per contender of [read 2x L2; A *= 1; event; call(i);
    event] for each input set i, graphs replayed alternately (order flipped every round)."""
    times = interleaved(harness_timers(calls, a_operands), rounds)
    return {k: statistics.median(v) for k, v in times.items()}


def harness_timers(calls: dict, a_operands: list) -> dict:
    """name -> timer of one round (for _rounds.interleaved): one replay of the contender's graph of
    [read 2x L2; A *= 1; event; call(i); event] for each input set i, returning the mean ms per call
    between the events. Each call runs once before its capture (which builds what it launches)."""
    import torch

    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    stream_buf = torch.ones(l2, dtype=torch.float16, device="cuda")  # 2x L2 bytes
    out_scalar = torch.empty((), dtype=torch.float32, device="cuda")
    n = len(a_operands)
    timers = {}
    for name, call in calls.items():
        for i in range(n):
            call(i)
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True, external=True),
               torch.cuda.Event(enable_timing=True, external=True)) for _ in range(n)]
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(n):
                torch.sum(stream_buf, dim=0, dtype=torch.float32, out=out_scalar)
                a_operands[i].mul_(1)
                ev[i][0].record()
                call(i)
                ev[i][1].record()

        def one_round(g=g, ev=ev) -> float:
            g.replay()
            torch.cuda.synchronize()
            return statistics.fmean(a.elapsed_time(b) for a, b in ev)

        timers[name] = one_round
    # Warm up, the contenders taking turns, until the GPU's clock has settled: right after a search the
    # clock is wherever the search left it, and 25 rounds taken while it moved read the large shapes'
    # ratios up to 8% away from the evaluator's on one H200 (crosscheck_winners_search_h200_2026-11-29)
    start = time.perf_counter()
    while time.perf_counter() - start < WARMUP_S:
        for timer in timers.values():
            timer()
    return timers


CHAIN_COLUMNS = 1024  # the neighbour GEMMs' width in the chain regime (a key/value projection's)
# mlp_chain: the MLP run before each call in place of the first neighbour GEMM (an 8B-class model's, nn.Linear's
# layout), on at most MLP_ROWS rows of an input of its own
MLP_HIDDEN, MLP_INTER, MLP_ROWS = 4096, 14336, 256
CHAIN_REPLAY_MS = 2.0  # the chain harness's graphs repeat their pass over the input sets to about this long
# Where the harness's buffers lie moves a small call's marginal: on one H200 a 33x3072x3072 winner's ratio
# ranged 0.4% over five timings on one set of buffers, 3.9% over five fresh sets (chain_placement.py)
CHAIN_PLACEMENTS = 4


def chain_harness_rounds(placement, rounds: int = HARNESS_ROUNDS, placements: int = CHAIN_PLACEMENTS,
                         later_warmup_s: float = WARMUP_S / 5, mlp: bool = False,
                         one_pool: bool = False) -> dict[str, list]:
    """name -> ms per call of each round in the chain regime (chain_harness_timers; mlp: mlp_chain's), rounds
    alternating, split over `placements` placements: placement(p) -> (calls, A operands) on operands of its own,
    and the harness's buffers and graphs made anew, each while the last are still held (so elsewhere in
    memory). The first placement warms up for WARMUP_S, the later ones for later_warmup_s. one_pool: as
    chain_harness_timers."""
    times: dict[str, list] = {}
    timers = None
    for p in range(placements):
        calls, a_operands = placement(p)
        timers = chain_harness_timers(calls, a_operands, WARMUP_S if p == 0 else later_warmup_s, mlp=mlp,
                                      one_pool=one_pool)
        for name, xs in interleaved(timers, -(-rounds // placements)).items():
            times.setdefault(name, []).extend(xs)
    return times


def chain_harness_ms(placement, rounds: int = HARNESS_ROUNDS, placements: int = CHAIN_PLACEMENTS,
                     mlp: bool = False) -> dict[str, float]:
    """name -> median ms per call of chain_harness_rounds."""
    return {k: statistics.median(v) for k, v in chain_harness_rounds(placement, rounds, placements,
                                                                      mlp=mlp).items()}


def chain_harness_timers(calls: dict, a_operands: list, warmup_s: float = WARMUP_S, warm_on_side: bool = True,
                         mlp: bool = False, one_pool: bool = False) -> dict:
    """The chain regime, written apart from cudal2's timing code: per input set i, a read of twice the
    L2, A *= 1, a torch GEMM of A with a cold (K, 1024) weight (mlp: an MLP's three GEMMs on an input of their
    own, MLP_HIDDEN to MLP_INTER and back, at A's rows up to MLP_ROWS), the call, another such GEMM. One graph
    of that work without the calls (the floor) and one per contender, each repeating its pass over the
    sets to about CHAIN_REPLAY_MS; a contender's round replays the floor and its own graph (order
    flipped every round, and opposite to the previous contender's), events around each replay, and returns
    (its replay - the floor's) / calls.
    one_pool: every graph captured into one memory pool, so that what a contender's calls allocate (the output of a
    call that makes its own) can lie where the previous contender's did, rather than in a pool of its own. Safe
    here: the graphs are replayed one at a time, and nothing a call allocates is read after the call's pass."""
    import math

    import torch

    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    stream_buf = torch.ones(l2, dtype=torch.float16, device="cuda")  # 2x L2 bytes
    out_scalar = torch.empty((), dtype=torch.float32, device="cuda")
    a0 = a_operands[0]
    k = a0.shape[-1]
    weights = [torch.randn(k, CHAIN_COLUMNS, dtype=a0.dtype, device="cuda") / k ** 0.5 for _ in range(2)]
    outs = [torch.empty(a0.shape[0], CHAIN_COLUMNS, dtype=a0.dtype, device="cuda") for _ in range(2)]
    n = len(a_operands)
    if mlp:
        rows = max(1, min(a0.shape[0], MLP_ROWS))
        mlp_x = torch.randn(rows, MLP_HIDDEN, dtype=a0.dtype, device="cuda")
        # nn.Linear's layout (out, in), as the model's MLP and the evaluator's MLPNeighbours keep their weights
        up_w = [torch.randn(MLP_INTER, MLP_HIDDEN, dtype=a0.dtype, device="cuda") / MLP_HIDDEN ** 0.5
                for _ in range(2)]
        down_w = torch.randn(MLP_HIDDEN, MLP_INTER, dtype=a0.dtype, device="cuda") / MLP_INTER ** 0.5
        mids = [torch.empty(rows, MLP_INTER, dtype=a0.dtype, device="cuda") for _ in range(2)]
        mlp_out = torch.empty(rows, MLP_HIDDEN, dtype=a0.dtype, device="cuda")

    def before(i: int) -> None:
        if not mlp:
            torch.matmul(a_operands[i], weights[0], out=outs[0])
            return
        torch.matmul(mlp_x, up_w[0].t(), out=mids[0])
        torch.matmul(mlp_x, up_w[1].t(), out=mids[1])
        torch.matmul(mids[0], down_w.t(), out=mlp_out)

    def work(call, passes: int) -> None:
        for _ in range(passes):
            for i in range(n):
                torch.sum(stream_buf, dim=0, dtype=torch.float32, out=out_scalar)
                a_operands[i].mul_(1)
                before(i)
                if call is not None:
                    call(i)
                torch.matmul(a_operands[i], weights[1], out=outs[1])

    def graph_of(call, passes: int):
        # Once outside the capture (cuBLAS's handle, the kernels' first launches), on a side stream as
        # torch's CUDA-graph docs prescribe and as a model captured that way has done: in a process that
        # never ran work on a second stream, the kernels of a graph followed one another 0.04-0.13 us
        # apart, against 0.28-0.47 us after it had; with two kernels a call, the harness then read
        # 1x3072x3072's torch call 9.2 us against the evaluator's 10.4 (a probe on one H200, 2026-11-29;
        # benchmarks/stream_state.py measures it again).
        # warm_on_side=False: the warm-up on the current stream, for stream_state.py's fresh process.
        side = torch.cuda.Stream() if warm_on_side else torch.cuda.current_stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            work(call, 1)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool):
            work(call, passes)
        return g

    pool = torch.cuda.graph_pool_handle() if one_pool else None

    def replay_ms(g) -> float:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        return a.elapsed_time(b)

    one_pass = graph_of(None, 1)
    replay_ms(one_pass)
    passes = max(1, math.ceil(CHAIN_REPLAY_MS / replay_ms(one_pass)))
    floor = graph_of(None, passes)
    per_replay = passes * n
    timers, restart = paired_timers({name: graph_of(call, passes) for name, call in calls.items()}, floor,
                                    replay_ms, per_replay)
    start = time.perf_counter()  # warm-up, as harness_timers (the clock settles)
    while time.perf_counter() - start < warmup_s:
        for timer in timers.values():
            timer()
    restart()  # (so that the rounds' order does not depend on how many warm-up rounds ran)
    return timers


def paired_timers(graphs: dict, floor, replay_ms, per_replay: int) -> tuple[dict, object]:
    """(name -> timer of one round, restart()): each contender's round replays the floor and its own graph
    (replay_ms(graph) -> ms), floor first and own first in turn, and returns (its replay - the floor's) /
    per_replay. Each contender's order starts where the previous one's ended: with two contenders taking turns
    (_rounds.interleaved, the order reversed every other round) the rounds replay floor, A, B, floor and floor,
    B, A, floor, so neither is ever the first replay after the host's pause between rounds. With every
    contender starting on the floor, the second one was, every other round; an A/A run in that order (F.linear
    against itself, op_served.py --aa, H200, 2026-11-30) read 0.979 to 1.033 on small calls. Whether this order
    narrows that is not measured yet. restart() sets the orders back to their start."""
    turns = {name: index for index, name in enumerate(graphs)}

    def restart() -> None:
        turns.update({name: index for index, name in enumerate(graphs)})

    def timer_of(name, g):
        def one_round() -> float:
            turns[name] += 1
            first, second = (floor, g) if turns[name] % 2 else (g, floor)
            t_first, t_second = replay_ms(first), replay_ms(second)
            t_floor, t_own = (t_first, t_second) if first is floor else (t_second, t_first)
            return (t_own - t_floor) / per_replay
        return one_round

    return {name: timer_of(name, g) for name, g in graphs.items()}, restart


def measure(problem: GemmProblem, ev, store, budget: int, backends: tuple[str, ...], mode: str = "chain") -> dict:
    import cudal2

    row: dict = {"shape": problem.label()}
    t0 = time.perf_counter()
    res = cudal2.search(problem, backends=backends, budget=budget, store=store, runner=ev, progress=False,
                        modes=(mode,))
    row["search_s"] = time.perf_counter() - t0
    if res.best is None:
        row["status"] = "no winner"
        return row
    spec = res.best.spec
    row["spec"], row["backend"], row["spec_json"] = spec.summary(), spec.backend, spec.to_json()
    row["search"], row["search_mode"] = res.speedup.get("torch"), res.mode
    return check(problem, spec, ev, row, mode=mode)


def evaluator_figures(problem: GemmProblem, spec, ev, modes: tuple[str, ...]) -> dict | str:
    """The evaluator's winner and torch.matmul times in each mode and their ratio (eval_<mode>), timed
    as the search's confirmation rounds time them (Evaluator.full_timing), whose figure the search
    reports; the failure line where the winner did not pass its checks."""
    with ev.full_timing():
        again = ev.evaluate(problem, [spec], modes=modes)[0]
        base = ev.baselines(problem, modes)
    if not again.ok:
        return f"{again.status}: {again.reason[:100]}"
    out = {}
    for mode in modes:
        kernel_ms, torch_ms = again.kernel_ms(mode), base["torch"].kernel_ms(mode)
        out[f"eval_{mode}_kernel_ms"], out[f"eval_{mode}_torch_ms"] = kernel_ms, torch_ms
        out[f"eval_{mode}"] = torch_ms / kernel_ms
    return out


def winner_placements(problem: GemmProblem, spec):
    """The winner compiled once, and placement(p) -> ({"kernel": call, "torch": call}, A operands): calls
    over input sets of their own (seeds 100 + 1000 p + i, as many as rotate through twice the L2) with
    outputs of their own; the harnesses' contenders."""
    import torch

    from cudal2.bench.inputs import make_operands, rotation_count
    from cudal2.codegen import get_backend

    backend = get_backend(spec.backend)
    kernel = backend.compile(backend.render(problem, spec))
    n_sets = rotation_count(problem, torch.cuda.get_device_properties(0).L2_cache_size, memory_budget=8 << 30)

    def placement(p: int):
        sets = [make_operands(problem, 100 + 1000 * p + i, "cuda") for i in range(n_sets)]
        outs = [torch.empty(problem.m, problem.n, dtype=torch.float16, device="cuda") for _ in range(n_sets)]
        return ({"kernel": lambda i: kernel(sets[i].a, sets[i].b, outs[i]),
                 "torch": lambda i: torch.matmul(sets[i].a, sets[i].b, out=outs[i])}, [s.a for s in sets])

    return placement


def check(problem: GemmProblem, spec, ev, row: dict, rounds: int = HARNESS_ROUNDS, mode: str = "chain") -> dict:
    """Steps 2 and 3 for one winner: the evaluator again (mode and offline), then the harness in mode's
    regime (layer: harness_ms; chain: chain_harness_ms)."""
    figures = evaluator_figures(problem, spec, ev, (mode, "offline"))
    if isinstance(figures, str):
        row["status"] = figures
        return row
    row.update(figures)
    placement = winner_placements(problem, spec)
    h = (chain_harness_ms(placement, rounds, mlp=mode == "mlp_chain") if mode in ("chain", "mlp_chain")
         else harness_ms(*placement(0), rounds))
    row["harness_kernel_ms"], row["harness_torch_ms"] = h["kernel"], h["torch"]
    row["harness"] = h["torch"] / h["kernel"]
    row["agree"] = abs(row[f"eval_{mode}"] / row["harness"] - 1) <= AGREE
    return row


def problem_of(label: str) -> GemmProblem:
    """The GemmProblem of a label "MxNxK-dtype-layout" (no epilogue: the shapes here have none)."""
    dims, dtype, layout = label.split("-")[:3]
    return GemmProblem.parse(dims, dtype=dtype, layout=layout)


def retime(earlier: dict, ev, max_seconds: float) -> list[dict]:
    """The earlier run's winners and torch.matmul timed again in layer mode: one row per shape."""
    from cudal2.ir import KernelSpec

    rows, start = [], time.time()
    for old in earlier["rows"]:
        if "spec_json" not in old or "eval_layer" not in old:
            continue
        if time.time() - start > max_seconds:
            break
        figures = evaluator_figures(problem_of(old["shape"]), KernelSpec.from_json(old["spec_json"]), ev, ("layer",))
        row = {"shape": old["shape"], "spec": old["spec"], "earlier": old["eval_layer"]}
        if isinstance(figures, str):
            row["status"] = figures
        else:
            row["now"] = figures["eval_layer"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def retime_markdown(out: dict, earlier: dict) -> str:
    rows = [r for r in out["rows"] if "now" in r]
    a_then, a_now = aggregate(r["earlier"] for r in rows), aggregate(r["now"] for r in rows)
    same = out.get("gpu_uuid") == earlier.get("gpu_uuid")
    lines = [f"# Search winners timed again in layer mode ({out['gpu']}, {out['date']})", "",
             f"`{out['command']}`; {out['versions']}", "",
             f"Earlier run: {earlier['command']} ({earlier['gpu']}, {earlier['date']}, GPU {earlier.get('gpu_uuid', '?')}). "
             f"This run: GPU {out.get('gpu_uuid', '?')} ({'the same machine' if same else 'another machine'}).", ""]
    if a_then and a_now:
        lines += [f"Geomean of torch.matmul time / winner time over {len(rows)} shapes: earlier {a_then.geomean:.4f}, "
                  f"now {a_now.geomean:.4f}, ratio {a_now.geomean / a_then.geomean:.4f} "
                  f"(within 1%: {'yes' if abs(a_now.geomean / a_then.geomean - 1) <= 0.01 else 'no'}).", ""]
    lines += ["| shape | winner | earlier | now | now / earlier |", "|---|---|---:|---:|---:|"]
    for r in out["rows"]:
        if "now" not in r:
            lines.append(f"| {r['shape']} | `{r['spec']}` | {r['earlier']:.3f} | {r.get('status', '-')} | |")
        else:
            lines.append(f"| {r['shape']} | `{r['spec']}` | {r['earlier']:.3f} | {r['now']:.3f} | "
                         f"{r['now'] / r['earlier']:.3f} |")
    return "\n".join(lines) + "\n"


def gpu_uuid() -> str:
    """The GPU's UUID (nvidia-smi), which tells two machines apart; "?" where it cannot be read."""
    import subprocess

    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader", "-i", "0"],
                              capture_output=True, text=True, timeout=30).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


def geomean(xs) -> str:
    """The geomean of the ratios as a table cell ("-" for none)."""
    a = aggregate(xs)
    return f"{a.geomean:.3f}" if a is not None else "-"


def markdown(out: dict) -> str:
    mode = out.get("mode", "layer")  # (runs before --mode were all layer mode)
    rows = [r for r in out["rows"] if "harness" in r]
    n = sum(bool(r["agree"]) for r in rows)
    lines = [f"# Search winners timed as a model calls them: evaluator against an independent harness "
             f"({out['gpu']}, {out['date']})", "", f"`{out['command']}`; {out['versions']}", "",
             f"Ratio = torch.matmul time / winner time. Agreement: the evaluator's {mode} ratio within {AGREE:.0%} "
             f"of the harness's: **{n} of {len(rows)} shapes**.", "",
             f"| geomean over the shapes | search ({mode}, confirmed) | eval {mode} | harness ({mode}) | eval offline |",
             "|---|---:|---:|---:|---:|",
             f"| {len(rows)} shapes | {geomean(r.get('search') for r in rows)} | "
             f"{geomean(r[f'eval_{mode}'] for r in rows)} | {geomean(r['harness'] for r in rows)} | "
             f"{geomean(r['eval_offline'] for r in rows)} |", "",
             f"| shape | winner | search | eval {mode} | harness | eval offline | winner us (eval {mode} / harness / "
             f"offline) | torch us (eval {mode} / harness / offline) |", "|---|---|---:|---:|---:|---:|---|---|"]
    for r in out["rows"]:
        if "harness" not in r:
            lines.append(f"| {r['shape']} | `{r.get('spec', '-')}` | {r.get('status', '-')} | | | | | |")
            continue
        us = lambda *ks: " / ".join(f"{r[k] * 1e3:.1f}" for k in ks)  # noqa: E731
        lines.append(f"| {r['shape']} | `{r['spec']}` | {r['search']:.3f} | {r[f'eval_{mode}']:.3f} | "
                     f"{r['harness']:.3f}{'' if r['agree'] else ' (differs)'} | {r['eval_offline']:.3f} | "
                     f"{us(f'eval_{mode}_kernel_ms', 'harness_kernel_ms', 'eval_offline_kernel_ms')} | "
                     f"{us(f'eval_{mode}_torch_ms', 'harness_torch_ms', 'eval_offline_torch_ms')} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--shapes", type=int, default=30)
    ap.add_argument("--part", default="0/1", help="i/n: every n-th shape from the i-th")
    ap.add_argument("--budget", type=int, default=8)
    ap.add_argument("--backends", default="triton")
    ap.add_argument("--max-seconds", type=float, default=540)
    ap.add_argument("--resume", type=Path, default=None,
                    help="an interrupted run's .json: keep its rows and measure only the shapes it lacks")
    ap.add_argument("--recheck", type=Path, default=None,
                    help="an earlier run's .json: steps 2 and 3 again for its winners (no search)")
    ap.add_argument("--rounds", type=int, default=HARNESS_ROUNDS, help="the harness's rounds")
    ap.add_argument("--groups", type=int, default=None,
                    help="the evaluator's groups per confirmation round (default: TimingConfig.confirmation()'s)")
    ap.add_argument("--retime", type=Path, default=None, help="an earlier run's .json: time its winners again")
    ap.add_argument("--mode", default="chain", choices=("chain", "mlp_chain", "layer"),
                    help="the regime searched in, checked by the evaluator and timed by the harness")
    args = ap.parse_args()
    import torch
    import triton

    from cudal2.api import default_runner
    from cudal2.bench.timing import TimingConfig
    from cudal2.store.store import Store

    runner_config = {"baselines": ("torch",)}
    if args.groups is not None:
        runner_config["timing"] = dataclasses.replace(TimingConfig.confirmation(), groups=args.groups)

    part, parts = (int(x) for x in args.part.split("/"))
    out = {"gpu": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"),
           "command": "python benchmarks/crosscheck_winners.py " + " ".join(sys.argv[1:]),
           "versions": f"torch {torch.__version__}, triton {triton.__version__}", "gpu_uuid": gpu_uuid(),
           "mode": args.mode, "rows": []}
    start = time.time()
    if args.retime is not None:
        earlier = json.loads(args.retime.read_text())
        with default_runner(**runner_config) as ev:
            out["rows"] = retime(earlier, ev, args.max_seconds)
        args.out.write_text(retime_markdown(out, earlier))
        args.out.with_suffix(".json").write_text(json.dumps(out, indent=1))
        print(retime_markdown(out, earlier))
        return
    if args.recheck is not None:
        from cudal2.ir import KernelSpec

        earlier = json.loads(args.recheck.read_text())
        out["command"] += f" (winners of {earlier['command']}, {earlier['gpu']}, {earlier['date']})"
        with default_runner(**runner_config) as ev:
            for old in earlier["rows"]:
                if "spec_json" not in old or time.time() - start > args.max_seconds:
                    continue
                keep = {k: old[k] for k in ("shape", "spec", "backend", "spec_json", "search", "search_mode")}
                row = check(problem_of(old["shape"]), KernelSpec.from_json(old["spec_json"]), ev, keep,
                            args.rounds, args.mode)
                out["rows"].append(row)
                print(json.dumps(row), flush=True)
                args.out.write_text(markdown(out))
                args.out.with_suffix(".json").write_text(json.dumps(out, indent=1))
        print(markdown(out))
        return
    done: set[str] = set()
    if args.resume is not None:
        out["rows"] = json.loads(args.resume.read_text())["rows"]
        done = {r["shape"] for r in out["rows"]}
        out["command"] += f" (continuing {args.resume.name}, {len(done)} shapes)"
    store = Store(Path(tempfile.mkdtemp()) / "store.db")
    with default_runner(**runner_config) as ev:
        for p in shapes(args.shapes, part, parts):
            if p.label() in done:
                continue
            if time.time() - start > args.max_seconds:
                break
            row = measure(p, ev, store, args.budget, tuple(args.backends.split(",")), args.mode)
            torch.cuda.empty_cache()
            out["rows"].append(row)
            print(json.dumps(row), flush=True)
            args.out.write_text(markdown(out))
            args.out.with_suffix(".json").write_text(json.dumps(out, indent=1))
    print(markdown(out))


if __name__ == "__main__":
    main()
