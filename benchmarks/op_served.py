"""cudal2.linear through the op against F.linear, shape by shape, with an earlier search's winners in the
op's table: is the op at least 0.99x F.linear everywhere, eager and in CUDA graphs, and, where it serves
a kernel in a graph, within 0.02 of the speedup the search confirmed?

    python benchmarks/op_served.py OUT.md --winners RUN.json [--shapes 30] [--only MxNxK,...] [--max-seconds 540]
        [--rounds 25] [--resume EARLIER.json] [--aa]
    python benchmarks/op_served.py OUT.md --smoke [--winners TINY.json]

--aa times F.linear against itself in place of cudal2.linear, in the same harness and table: what it reads is
the harness's own error, the resolution of every verdict below.

No search: RUN.json is what benchmarks/crosscheck_winners.py wrote (rows of "shape", "spec_json",
"search" = the search's confirmed speedup over torch.matmul, "search_mode" = the mode it ranked in
(layer where a row has none), "eval_<mode>_kernel_ms" and "eval_<mode>_torch_ms" = the evaluator's times
of the winner and torch.matmul in that mode).
1. The op's table is built as the store would hold those winners: one TunedEntry per shape with a
   winner (every row of RUN.json, not only the shapes timed), in the row's mode, kernel_ms and
   baselines_ms {"torch": ...} the row's figures in it, gpu this GPU's name; installed with
   cudal2.set_table. A row without a winner has no entry: the op runs torch there.
2. Per shape (fp16, layout NT: x (M, K), weight (N, K)), the first --shapes rows of RUN.json, F.linear
   and cudal2.linear in --rounds interleaved rounds (order reversed every other round), two paths:
   - eager: wall time per call of back-to-back calls from Python, from a synchronized GPU to a
     synchronized GPU (op_overhead.py's "wall us"; e2e_decoder.wall_timer), as many calls a round as
     fill about EAGER_ROUND_US of torch's GPU time (EAGER_CALLS between), in --rounds rounds or more,
     until EAGER_MIN_S seconds of them;
   - graph: the model's call pattern in CUDA graphs, that of the mode the winner was searched in, the
     calls cycling over enough copies of (x, weight) to fill twice the L2 (as e2e_decoder.gemm_rows), so
     that the weight is read from DRAM as in a model. Chain (crosscheck_winners.chain_harness_timers):
     per call, a read of twice the L2 (torch.sum over a buffer), an in-place pass over x, a torch GEMM
     of x, the linear, another GEMM of x; a call's time is the replay less that of the same graph
     without the linears; at least GRAPH_MIN_ROUNDS rounds, split over CHAIN_PLACEMENTS placements of
     the operands and the harness's buffers, each made anew while the last are held (where they lie
     moves a small call's time by a few percent: chain_placement.py), then more in passes over fresh
     placements until the ratio's median has a standard error of GRAPH_RATIO_ERROR (up to
     GRAPH_MAX_ROUNDS: more_rounds). Layer
     (crosscheck_winners.harness_timers): per call, the L2 read, the pass over x, then the linear between
     two events, timed between the events only.
   Ratio: the median over the rounds of the per-round ratio F.linear time / cudal2.linear time (with
   its quartiles). Route: what the op ran for the call, read off its launchers after the timing
   (ops._call_launcher: the eager launcher, which captured calls also take, else the one for a kernel
   served in graphs only): the tuned kernel's backend, or "torch"; and the table entry the op's
   lookup names for each path (ops._op_entry at the eager margin and at GRAPH_MIN_SAVING_US). These
   are the op's private state: it has no public way to say which kernel served a call.
   Where the table names a kernel for the graph path, the graph rounds also time that kernel called directly
   and torch.matmul(out=), as the search times them, on the same operands: the search's speedup on this GPU
   ("here"), scored as the search scores: torch.matmul's median time / the kernel's.
   Verdicts: ratio >= MIN_RATIO in each path; where the graph path ran the kernel, the op's speedup scored the
   same way (F.linear's median time / cudal2.linear's) >= here - SEARCHED_SLACK (the bar of the run), and,
   reported beside it, >= the search's own confirmed speedup (from the GPU that searched) - SEARCHED_SLACK.
3. OUT.md (the table, and a header with the GPU's name and UUID, torch and Triton versions, the date
   and the command) and OUT.json (every figure, every round), written after each shape. --resume
   EARLIER.json keeps its rows and times only the shapes it lacks; --max-seconds starts no shape after
   that many seconds.
--smoke runs on the CPU, with tiny shapes from a tiny winners file (--winners, else SMOKE_ROWS,
written next to OUT.md): the table, the routing record and the report, without CUDA graphs (the graph
path is the same call pattern timed from Python) and without any timing claim. On the CPU the op runs
torch whatever the table says.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "benchmarks"))  # e2e_decoder, crosscheck_winners

from _rounds import interleaved, median_error, spread  # noqa: E402
from crosscheck_winners import (CHAIN_PLACEMENTS, HARNESS_ROUNDS, WARMUP_S, chain_harness_rounds, gpu_uuid,  # noqa: E402
                                harness_timers,
                                problem_of)
from e2e_decoder import compare, compared, operand_copies  # noqa: E402
from cudal2.route_check import wall_timer  # noqa: E402

MIN_RATIO = 0.99  # F.linear time / cudal2.linear time, in each path
SEARCHED_SLACK = 0.02  # a kernel served in a graph: ratio at least the search's speedup minus this
EAGER_ROUND_US, EAGER_CALLS = 20_000.0, (10, 200)
# Eager rounds go on past --rounds until this many seconds of them: a host-bound call's per-round ratio wandered
# +-6% (quartiles) over 40 rounds on one lent H200 host, as much as the bar's margin (op_served, 2026-11-30),
# and such a shape's rounds take milliseconds; a shape of long calls keeps --rounds.
EAGER_MIN_S = 3.0
# Graph rounds: --rounds, at least the harness's own (crosscheck_winners.HARNESS_ROUNDS: with 25 its ratio moved
# 0.9 to 1.2% between runs, with 100 0.6%); at 40, torch timed against torch read 0.982 to 0.990 in three of the
# 30 shapes (op_served, 2026-11-30). A round replays a few milliseconds of graphs.
GRAPH_MIN_ROUNDS = HARNESS_ROUNDS
# ... and more, in passes over fresh placements, until the per-round ratio's median has a standard error of at most
# GRAPH_RATIO_ERROR (_rounds.median_error), up to GRAPH_MAX_ROUNDS. Why: a 10 to 20 us call's per-round ratio spreads
# +-5% (quartiles), so 100 rounds leave its median an error of about 0.9%: F.linear timed against the op's torch call
# (the same kernels) read 0.988 (33x3072x3072, op_served_here_h200_2026-11-30), a reading of the harness against a
# 0.99 bar. Long calls spread +-0.5% and stop at GRAPH_MIN_ROUNDS.
GRAPH_RATIO_ERROR, GRAPH_MAX_ROUNDS = 0.003, 800
# Whether the chain graph path captures every contender's graph into one memory pool (crosscheck_winners'
# chain_harness_timers one_pool), so that F.linear's output and the op's may lie at the same addresses.
ONE_POOL = True
# Whether the contenders' graphs are captured in the reverse order in every other placement: without ONE_POOL each
# graph's outputs lie in a pool of its own, allocated in capture order, and with it the first capture still takes
# the pool's blocks first, so the same order in every placement could favour one.
ALTERNATE_CAPTURE = True
GRAPH_ROUND_US, GRAPH_CALLS = 2_000.0, (1, 20)
DIRECT = ("torch.matmul", "kernel")  # the graph path's contenders as the search calls them, where a kernel serves
SMOKE_GPU = "CPU (smoke)"
_TINY_TRITON = {"backend": "triton", "block_m": 16, "block_n": 16, "block_k": 16, "stages": 2}
# (shape, winner spec or None, search, eval layer kernel ms, torch ms): a kernel the eager margin takes
# (it saves 20 us), one only graphs take (0.5 us), a shape without a winner
SMOKE_ROWS = (("16x64x32-float16-NT", _TINY_TRITON, 1.9, 0.020, 0.040),
              ("4x48x32-float16-NT", _TINY_TRITON, 1.06, 0.0100, 0.0105),
              ("8x40x32-float16-NT", None, None, None, None))


def fail(message: str) -> None:
    """A user error: one line on stderr, exit 2 (docs/faults.md)."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own errors, in the same one-line form
        fail(f"{message}; see 'python benchmarks/op_served.py --help'")


# ---- the op's table from the winners ------------------------------------------------------------
def _eval_cell(r: dict) -> str:
    """The evaluator's ratio and its mode (rows written before the mode was kept: their "eval_layer")."""
    if r.get("eval") is not None:
        return f"{r['eval']:.3f} ({r.get('eval_mode', 'layer')})"
    return f"{r['eval_layer']:.3f} (layer)" if r.get("eval_layer") is not None else "-"


def searched_mode(row: dict) -> str:
    """The mode a winners row was searched and checked in (runs before rows named it: layer)."""
    return row.get("search_mode") or "layer"


def entry_of(row: dict, gpu: str, created: str = ""):
    """The TunedEntry a store would hold for a winners row (in its searched_mode, the evaluator's times
    of the winner and torch.matmul there), or None for a row without a winner."""
    from cudal2.ir import KernelSpec
    from cudal2.store.table import TunedEntry

    mode = searched_mode(row)
    kernel_ms, torch_ms = row.get(f"eval_{mode}_kernel_ms"), row.get(f"eval_{mode}_torch_ms")
    if "spec_json" not in row or kernel_ms is None or torch_ms is None:
        return None
    return TunedEntry(problem=problem_of(row["shape"]), spec=KernelSpec.from_json(row["spec_json"]),
                      kernel_ms=kernel_ms, baselines_ms={"torch": torch_ms}, gpu=gpu, created=created, mode=mode)


def table_of(rows: list[dict], gpu: str, created: str = ""):
    from cudal2.store.table import TunedTable

    return TunedTable([e for e in (entry_of(r, gpu, created) for r in rows) if e is not None])


def smoke_winners() -> dict:
    """A winners file of SMOKE_ROWS, as crosscheck_winners.py writes one."""
    from cudal2.ir import KernelSpec

    rows = []
    for shape, spec, search, kernel_ms, torch_ms in SMOKE_ROWS:
        if spec is None:
            rows.append({"shape": shape, "status": "no winner"})
            continue
        spec = KernelSpec(**spec)
        rows.append({"shape": shape, "spec": spec.summary(), "backend": spec.backend, "spec_json": spec.to_json(),
                     "search": search, "search_mode": "layer", "eval_layer_kernel_ms": kernel_ms,
                     "eval_layer_torch_ms": torch_ms, "eval_layer": torch_ms / kernel_ms})
    return {"gpu": SMOKE_GPU, "date": time.strftime("%Y-%m-%d"), "command": "op_served.smoke_winners()",
            "gpu_uuid": "?", "rows": rows}


# ---- timing --------------------------------------------------------------------------------------
def calls_for(torch_ms: float | None, round_us: float, bounds: tuple[int, int]) -> int:
    """Calls a round: as many as fill round_us of torch's time (the row's layer figure), within bounds."""
    lo, hi = bounds
    if not torch_ms:
        return hi
    return max(lo, min(hi, math.ceil(round_us / (torch_ms * 1e3))))


def eager_figures(x, w, rounds: int, calls: int, min_s: float = 0.0, ours=None) -> dict:
    """F.linear against ours (cudal2.linear), eager: rounds interleaved rounds, more (in even numbers, so that
    each order runs as often) until min_s seconds of them."""
    import torch
    from torch.nn import functional as F

    import cudal2

    ours = ours or cudal2.linear
    timer = wall_timer  # (on the CPU it has nothing to synchronize)
    timers = {"torch": timer(lambda: F.linear(x, w), calls), "cudal2": timer(lambda: ours(x, w), calls)}
    times: dict[str, list] = {name: [] for name in timers}
    start = time.perf_counter()
    with torch.no_grad():
        while not times["torch"] or (time.perf_counter() - start < min_s):
            more = interleaved(timers, rounds if not times["torch"] else 2)
            for name, xs in more.items():
                times[name] += xs
    return {**compared(times), "calls": calls}


def graph_figures(x, w, rounds: int, calls: int, call_pattern: str = "chain", ours=None, direct=None) -> dict:
    """The graph path: CUDA graphs of the call pattern on a GPU, the pattern of the mode the winner was
    searched in (chain: chain_harness_timers, each call between two GEMMs of its input after the L2 read, or
    mlp_chain: after an MLP's GEMMs; the rounds split over CHAIN_PLACEMENTS placements of the operands and the
    harness's buffers:
    crosscheck_winners.chain_harness_rounds; layer: harness_timers); on the CPU, the same calls timed from
    Python, the buffer read included. ours: cudal2.linear unless given. The contenders' graphs are captured in
    turn, their order reversed in every other placement (ALTERNATE_CAPTURE).
    direct (on a GPU): the winner's compiled kernel, kernel(a, b, out). It and torch.matmul(out=) then join the
    rounds as the search calls them, on the same operands (b = weight.t()); "here" is the search's speedup on
    this GPU, in these rounds, scored as the search scores it: torch.matmul's median time / the kernel's (with the
    quartiles of the per-round ratio)."""
    import torch
    from torch.nn import functional as F

    import cudal2

    ours = ours or cudal2.linear

    m, k = x.shape
    l2 = torch.cuda.get_device_properties(x.device).L2_cache_size if x.is_cuda else 1 << 16
    copies = operand_copies(m, w.shape[0], k, l2, GRAPH_CALLS[1])
    calls = max(calls, copies)
    with torch.no_grad():
        if not x.is_cuda:
            sets = [(torch.randn_like(x), w.clone()) for _ in range(copies)]
            buf = torch.ones(l2, dtype=torch.float16)

            def pattern(op):
                turn = itertools.cycle(sets)
                return lambda: (torch.sum(buf, dtype=torch.float32), op(*next(turn)))

            timers = {"torch": wall_timer(pattern(F.linear), calls), "cudal2": wall_timer(pattern(ours), calls)}
            return {**compare(timers, rounds), "calls": calls, "operand_sets": copies, "pattern": call_pattern}
        ops_of = {"torch": F.linear, "cudal2": ours}
        if direct is not None:  # (a, weight, out): as the search calls the winner and its baseline
            ops_of["torch.matmul"] = lambda a, weight, out: torch.matmul(a, weight.t(), out=out)
            ops_of["kernel"] = lambda a, weight, out: direct(a, weight.t(), out)

        def placement(p: int):
            sets = [(torch.randn_like(x), w.clone()) for _ in range(copies)]
            outs = [x.new_empty(m, w.shape[0]) for _ in range(copies)] if direct is not None else []
            order = list(ops_of.items())
            if ALTERNATE_CAPTURE and p % 2:
                order.reverse()
            return ({name: (lambda i, op=op: op(*sets[i % copies], outs[i % copies])) if name in DIRECT
                     else (lambda i, op=op: op(*sets[i % copies])) for name, op in order},
                    [sets[i % copies][0] for i in range(calls)])

        rounds_ms: dict[str, list] = {}
        placements, more = 0, rounds
        while more > 0:
            if call_pattern in ("chain", "mlp_chain"):
                placements += CHAIN_PLACEMENTS
                times = chain_harness_rounds(placement, more, CHAIN_PLACEMENTS, later_warmup_s=WARMUP_S,
                                             mlp=call_pattern == "mlp_chain", one_pool=ONE_POOL)
            else:
                placements += 1
                times = interleaved(harness_timers(*placement(0)), more)
            for name, xs in times.items():
                rounds_ms.setdefault(name, []).extend(xs)
            more = more_rounds([p / o for p, o in zip(rounds_ms["torch"], rounds_ms["cudal2"])])
    both = compared({name: [t * 1e3 for t in xs] for name, xs in rounds_ms.items()})
    if direct is not None:
        _, both["here_q1"], both["here_q3"] = spread(p / o for p, o in zip(both["torch.matmul"]["rounds_us"],
                                                                            both["kernel"]["rounds_us"]))
        both["here"] = both["torch.matmul"]["us"] / both["kernel"]["us"]
    return {**both, "calls": calls, "operand_sets": copies, "pattern": call_pattern, "placements": placements}


def more_rounds(ratios: list[float], target: float | None = None, most: int | None = None) -> int:
    """How many more graph rounds to time after `ratios` (the per-round ratios so far): enough that the median's
    standard error (_rounds.median_error, which falls as 1/sqrt(rounds)) reaches target (GRAPH_RATIO_ERROR), at most
    `most` (GRAPH_MAX_ROUNDS) in all; 0 where it is reached."""
    target = GRAPH_RATIO_ERROR if target is None else target
    most = GRAPH_MAX_ROUNDS if most is None else most
    error, n = median_error(ratios), len(ratios)
    if error <= target or n >= most:
        return 0
    if math.isinf(error):  # too few rounds to read a spread off
        return most - n
    return min(most - n, max(CHAIN_PLACEMENTS, math.ceil(n * ((error / target) ** 2 - 1))))


def route(problem, gpu: str, x, w) -> dict:
    """What the op's table names for problem in each path, what the op ran for the call (x, w): the kernel's
    backend or "torch", and how it keeps the weight (weight_kept) (see the module's docstring: the op's private
    state)."""
    from cudal2 import ops

    key = ops._linear_key(x, w, None)
    eager, graph = ops._call_launcher(key, graphs=False), ops._call_launcher(key, graphs=True)
    ran = lambda launch: "torch" if launch is None else (getattr(launch, "backend", None) or "kernel")  # noqa: E731
    table = lambda margin: ops._op_entry(problem, gpu, margin)  # noqa: E731
    eager_entry, graph_entry = table(None), table(ops.GRAPH_MIN_SAVING_US)
    return {"table_eager": eager_entry.spec.summary() if eager_entry else None,
            "table_graph": graph_entry.spec.summary() if graph_entry else None,
            "served_eager": ran(eager), "served_graph": ran(graph), "weight_kept": weight_kept(w)}


def weight_kept(w) -> str:
    """How the op keeps w for its fallback (ops._torch_weights, the op's private state): "every call", "unless
    captured", its shape's "plan", or "not kept"."""
    from cudal2 import ops

    known = ops._torch_weights.get(id(w))
    return {id(ops._EVERY_CALL): "every call", id(ops._UNLESS_CAPTURED): "unless captured",
            id(None): "not kept"}.get(id(known), "plan")


def measure(row: dict, gpu: str, device: str, rounds: int, ours=None) -> dict:
    """One shape's row: its figures in each path, what the op ran, the verdicts. ours: what is timed against
    F.linear (cudal2.linear; F.linear itself for an A/A run, which reads the harness's own error)."""
    import torch

    import cudal2
    from cudal2 import ops

    problem = problem_of(row["shape"])
    m, n, k = problem.shape
    mode = searched_mode(row)
    out = {key: row[key] for key in ("shape", "spec", "backend", "search") if key in row}
    if f"eval_{mode}" in row:
        out["eval"], out["eval_mode"] = row[f"eval_{mode}"], mode
    torch.manual_seed(0)
    x = torch.randn(m, k, device=device, dtype=torch.float16)
    w = torch.randn(n, k, device=device, dtype=torch.float16) / k ** 0.5
    with torch.no_grad():
        want = x.float() @ w.float().t()
        out["rel_error"] = float((cudal2.linear(x, w).float() - want).norm() / want.norm())
    torch_ms = row.get(f"eval_{mode}_torch_ms")
    out["eager"] = eager_figures(x, w, rounds, calls_for(torch_ms, EAGER_ROUND_US, EAGER_CALLS),
                                 EAGER_MIN_S if device == "cuda" else 0.0, ours)
    graph_rounds = max(rounds, GRAPH_MIN_ROUNDS) if device == "cuda" else rounds
    out["graph"] = graph_figures(x, w, graph_rounds, calls_for(torch_ms, GRAPH_ROUND_US, GRAPH_CALLS),
                                 mode if mode in ("chain", "mlp_chain") else "layer", ours,
                                 # the kernel the table names for the graph path, as the search calls it
                                 ops.tuned_kernel(problem, gpu, ops.GRAPH_MIN_SAVING_US) if device == "cuda" else None)
    out.update(route(problem, gpu, x, w))
    out["verdicts"] = verdicts(out)
    return out


# ---- verdicts and the report -----------------------------------------------------------------------
def served_speedup(path: dict) -> float:
    """The op's speedup in a path scored as the search scores a kernel's: F.linear's median time / the op's."""
    return path["torch"]["us"] / path["cudal2"]["us"]


def verdicts(row: dict) -> dict:
    """eager and graph: ratio >= MIN_RATIO. Where the graph path ran the kernel, the op's speedup there
    (served_speedup) against the search's: searched_here, >= the search's speedup on this GPU (the graph path's
    "here": the winner and torch.matmul in the same rounds) - SEARCHED_SLACK; searched, >= the speedup the search
    confirmed on its own GPU - SEARCHED_SLACK (None where torch ran). passed: eager, graph, and searched_here
    (searched, in a run that did not time "here").

    Why the bar reads the search's figure on this GPU: it asks whether the op delivers its kernel's speed. The
    same kernel's speedup, by the search's own measure, moved 1.19 to 1.23 between H200s (1x3072x3072, 10 us a
    call; docs/search.md), which a figure from another GPU would charge to the op. Why a ratio of medians: the
    search's figures are one, and a 10 us call's per-round ratio spreads +-6% (quartiles), so that its median moved
    2% from the ratio of the medians in the same rounds (op_served_here_h200_2026-11-30)."""
    out = {"eager": row["eager"]["ratio"] >= MIN_RATIO, "graph": row["graph"]["ratio"] >= MIN_RATIO,
           "searched": None, "searched_here": None}
    if row.get("served_graph", "torch") != "torch":
        served = served_speedup(row["graph"])
        if row.get("search") is not None:
            out["searched"] = served >= row["search"] - SEARCHED_SLACK
        if row["graph"].get("here") is not None:
            out["searched_here"] = served >= row["graph"]["here"] - SEARCHED_SLACK
    searched = out["searched_here"] if out["searched_here"] is not None else out["searched"]
    out["passed"] = out["eager"] and out["graph"] and searched is not False
    return out


def _cell(ok: bool | None) -> str:
    return "-" if ok is None else ("pass" if ok else "**FAIL**")


def _ratio(path: dict) -> str:
    return f"{path['ratio']:.3f} ({path['ratio_q1']:.3f} to {path['ratio_q3']:.3f})"


def _here(path: dict) -> str:
    return "-" if path.get("here") is None else f"{path['here']:.3f} ({path['here_q1']:.3f} to {path['here_q3']:.3f})"


def markdown(out: dict) -> str:
    rows = out["rows"]
    passed = sum(bool(verdicts(r)["passed"]) for r in rows)
    winners = out.get("winners_run", {})
    lines = [f"# cudal2.linear through the op against F.linear, with a search's winners served "
             f"({out['gpu']}, {out['date']})", "",
             f"`{out['command']}`", "",
             f"GPU {out['gpu']}, UUID {out['gpu_uuid']}; {out['versions']}. Winners: {out['winners']} "
             f"({winners.get('gpu', '?')}, {winners.get('date', '?')}, GPU {winners.get('gpu_uuid', '?')}).", ""]
    if out.get("front"):
        lines += [f"cudal2.linear: {out['front']}.", ""]
    if out.get("aa"):
        lines += ["**A/A run: F.linear is timed against itself in place of cudal2.linear** (every ratio and verdict "
                  "below is the harness's own error; the table's routes still say what the op would run).", ""]
    if out.get("launch_costs_us"):
        lines += ["Launch cost beyond F.linear's, measured by the op at each launch path's first eager launch (us): "
                  + ", ".join(f"{b} {us:.2f}" for b, us in sorted(out["launch_costs_us"].items())) + ".", ""]
    if out.get("smoke"):
        lines += ["Smoke run on the CPU: the table, the routing record and the report only; the times are "
                  "not measurements of anything the op serves (on the CPU it runs torch).", ""]
    lines += [f"fp16, layout NT (x (M, K), weight (N, K)). Ratio: F.linear time / cudal2.linear time, the median "
              f"of the per-round ratios (quartiles) over {out['rounds']} interleaved rounds or more (eager: until "
              f"{EAGER_MIN_S:g} s of them; graph: at least {GRAPH_MIN_ROUNDS}, and more until the median's standard "
              f"error is {GRAPH_RATIO_ERROR:g}, up to {GRAPH_MAX_ROUNDS}; each row's counts below). Eager: "
              "wall time per call of back-to-back calls. Graph: CUDA graphs in the pattern of the mode the winner "
              "was searched in, "
              "cycling over copies of (x, weight) that fill twice the L2: chain (crosscheck_winners's chain harness: "
              "per call, a read of twice the L2, an in-place pass over x, a GEMM of x, the linear, another GEMM of "
              "x; the replay less that of the graph without the linears; the rounds split over four placements of "
              "the operands and buffers) or layer (per call, the L2 read, the pass over x, and the linear between two "
              "events). Served: what the op ran (the kernel's backend, or torch). Searched: the search's confirmed "
              "speedup, on the GPU that searched. Here: the same kernel and torch.matmul(out=), called as the search "
              "calls them, in the graph path's rounds on this GPU: torch.matmul's median time / the kernel's, as the "
              "search scores (quartiles of the per-round ratio). Served: F.linear's median time / cudal2.linear's "
              f"in the graph path. Verdicts: ratio >= {MIN_RATIO} in each path; where the graph path ran the kernel, "
              f"served >= here - {SEARCHED_SLACK} (the bar: does the op deliver its kernel's speed), and beside it "
              f"served >= searched - {SEARCHED_SLACK} (not in the count where here was timed).", "",
              f"**{passed} of {len(rows)} shapes pass every verdict.**", "",
              "| shape | winner | served eager | served graph | ratio eager | ratio graph | served | searched | here "
              f"| eval (mode) | eager >= {MIN_RATIO} | graph >= {MIN_RATIO} | served >= searched - {SEARCHED_SLACK} "
              f"| served >= here - {SEARCHED_SLACK} |",
              "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|---|---|---|"]
    for r in rows:
        v = verdicts(r)
        num = lambda key: f"{r[key]:.3f}" if r.get(key) is not None else "-"  # noqa: E731
        lines.append(f"| {r['shape']} | `{r.get('spec') or 'none'}` | {r['served_eager']} | {r['served_graph']} | "
                     f"{_ratio(r['eager'])} | {_ratio(r['graph'])} | {served_speedup(r['graph']):.3f} | "
                     f"{num('search')} | {_here(r['graph'])} | "
                     f"{_eval_cell(r)} | {_cell(v['eager'])} | {_cell(v['graph'])} | {_cell(v['searched'])} | "
                     f"{_cell(v['searched_here'])} |")
    lines += ["", "| shape | F.linear us eager / graph | cudal2.linear us eager / graph | calls eager / graph "
              "| rounds eager / graph | weight kept | operand sets | table names eager / graph | rel. error |",
              "|---|---|---|---|---:|---|---:|---|---:|"]
    for r in rows:
        e, g = r["eager"], r["graph"]
        lines.append(f"| {r['shape']} | {e['torch']['us']:.2f} / {g['torch']['us']:.2f} | "
                     f"{e['cudal2']['us']:.2f} / {g['cudal2']['us']:.2f} | {e['calls']} / {g['calls']} | "
                     f"{_rounds_of(e)} / {_rounds_of(g)} | {r.get('weight_kept', '?')} | "
                     f"{g['operand_sets']} | "
                     f"{r['table_eager'] or 'torch'} / {r['table_graph'] or 'torch'} | "
                     f"{r['rel_error']:.1e} |")
    return "\n".join(lines) + "\n"


def _rounds_of(path: dict) -> str:
    return str(len(path["torch"].get("rounds_us", ()))) or "-"


def _read_json(path: Path, what: str, fix: str) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        fail(f"{what} {path} does not exist; {fix}")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        fail(f"{what} {path} cannot be read ({str(e).splitlines()[0]}); {fix}")
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        fail(f"{what} {path} has no \"rows\" list; {fix}")
    return data


def main(argv: list[str] | None = None) -> None:
    ap = _Parser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--winners", type=Path, default=None, help="a benchmarks/crosscheck_winners.py run's .json")
    ap.add_argument("--shapes", type=int, default=30, help="time the first N rows of the winners")
    ap.add_argument("--only", default=None, metavar="MxNxK,...",
                    help="time only these shapes of the winners (of the first --shapes rows)")
    ap.add_argument("--max-seconds", type=float, default=540, help="start no shape after this many seconds")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds per path (default 25; smoke 3)")
    ap.add_argument("--resume", type=Path, default=None,
                    help="an interrupted run's .json: keep its rows and time only the shapes it lacks")
    ap.add_argument("--smoke", action="store_true", help="on the CPU, tiny shapes, no timing claims")
    ap.add_argument("--aa", action="store_true",
                    help="time F.linear against itself in place of cudal2.linear: the harness's own error (A/A)")
    args = ap.parse_args(argv)
    if args.shapes < 1 or (args.rounds is not None and args.rounds < 1):
        fail("--shapes and --rounds take a number of at least 1")
    rounds = args.rounds or (3 if args.smoke else 25)
    fix = "pass the .json a benchmarks/crosscheck_winners.py run wrote"
    if args.winners is None and not args.smoke:
        fail(f"--winners is required (the winners to serve); {fix}")

    if args.winners is None:  # the smoke run's own winners, kept next to its report
        args.winners = args.out.with_suffix(".winners.json")
        args.winners.write_text(json.dumps(smoke_winners(), indent=1))
    winners = _read_json(args.winners, "winners file", fix)

    import torch
    from torch.nn import functional as F

    import cudal2
    from cudal2 import op_front, ops

    if not args.smoke and not torch.cuda.is_available():
        fail("op_served.py times the op on a CUDA GPU, and torch sees none here; run it on one, or pass --smoke "
             "to try it on the CPU")
    device, gpu = ("cpu", SMOKE_GPU) if args.smoke else ("cuda", torch.cuda.get_device_name())
    try:
        import triton

        versions = f"torch {torch.__version__}, triton {triton.__version__}"
    except ImportError:
        versions = f"torch {torch.__version__}, no triton"
    out = {"gpu": gpu, "gpu_uuid": "?" if args.smoke else gpu_uuid(), "date": time.strftime("%Y-%m-%d"),
           "command": "python benchmarks/op_served.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "versions": versions, "winners": str(args.winners), "smoke": args.smoke, "rounds": rounds,
           "aa": args.aa, "alternate_capture": ALTERNATE_CAPTURE,
           "winners_run": {k: winners.get(k) for k in ("gpu", "date", "command", "gpu_uuid")}, "rows": []}
    done: set[str] = set()
    if args.resume is not None:
        out["rows"] = _read_json(args.resume, "--resume file", "pass the .json an earlier op_served.py run wrote")["rows"]
        done = {r["shape"] for r in out["rows"]}
        out["command"] += f" (continuing {args.resume.name}, {len(done)} shapes)"
    # every winner in the table, as the store would hold them, whichever shapes are timed
    try:
        for row in winners["rows"]:
            problem_of(row["shape"])
        cudal2.set_table(table_of(winners["rows"], gpu, winners.get("date", "")))
    except (KeyError, TypeError, ValueError, AttributeError) as e:  # (SpecError is a ValueError)
        fail(f"winners file {args.winners} has a malformed row ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
             f"{fix}")
    if ops._rebind_front is None:
        out["front"] = "the op's Python front (no C front here)"
    else:
        if device == "cuda":  # the probe bound before any timing, as in a process that has served for a while
            op_front.attach_probe(wait=True)
        out["front"] = f"the op's C front (cudal2.op_front), its probe {op_front.probe_state()}"
    start = time.time()
    only = None if args.only is None else set(args.only.split(","))
    if only is not None and not only & {row.get("shape", "").split("-")[0] for row in winners["rows"]}:
        fail(f"--only {args.only} names no shape of winners file {args.winners}; name its rows' MxNxK, "
             "comma-separated")
    for row in winners["rows"][:args.shapes]:
        if only is not None and row["shape"].split("-")[0] not in only:
            continue
        if row["shape"] in done:
            continue
        if time.time() - start >= args.max_seconds:
            break
        out["rows"].append(measure(row, gpu, device, rounds, F.linear if args.aa else None))
        out["launch_costs_us"] = ops.launch_costs()  # each launch path's, measured at its first eager launch
        if device == "cuda":
            torch.cuda.empty_cache()
        print(json.dumps({k: v for k, v in out["rows"][-1].items() if k not in ("eager", "graph")}), flush=True)
        args.out.write_text(markdown(out))
        args.out.with_suffix(".json").write_text(json.dumps(out, indent=1))
    args.out.write_text(markdown(out))
    args.out.with_suffix(".json").write_text(json.dumps(out, indent=1))
    print(args.out.read_text())


if __name__ == "__main__":
    main()
