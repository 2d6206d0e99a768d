"""Timing: CUDA events, warm-up, medians over many groups, contenders interleaved.

A contender is a callable `call(i)` that runs one GEMM on input set i (its own output for
set i). All contenders of one measurement share the input sets and go through this same code.

kernel time: a CUDA graph captures N calls cycling over the input sets; events around one
  replay, divided by N. No Python and no launch overhead: what the GPU spends per GEMM.
call time: events around N plain Python calls: what a caller pays, host overhead included.

offline: groups back to back (warm GPU; L2 holds whatever the rotation lets it hold).
sustained: each contender alone, back to back, long enough for the GPU's power limit to set its
  clock (settle_ms), then timed groups with no gap (window_ms); a few rounds. Under a power cap
  (the lent H100 runs large GEMMs at its 700 W limit, 1.1-1.4 GHz instead of 1.98) a kernel's
  clock depends on its own power draw; offline's 2 ms groups, interleaved, share one clock
  between contenders, which favours the hungrier kernel. Sustained is what a training job sees.
server: one call per sample, after an L2 flush (a write larger than L2) and an exponentially
  distributed idle gap, like requests arriving at a server.
layer: each call as a model's layer makes it. In a decoder the GEMM follows
  the work before it in the same stream: the projections before it streamed their weights through
  L2 (so this GEMM's weight B is cold) and a norm or an activation has just written its input A (warm
  in L2, its lines dirty). LayerPrelude replays that before every call: a read of twice the L2 and an
  in-place pass over A that leaves its values as they were. A CUDA graph captures prelude and call
  for every input set in turn, with events around each call alone (external event nodes), so the
  figure is the GEMM's own time in that state, with no launch gap. Back-to-back timing (offline)
  reads up to 20% faster on single shapes than this; docs/evaluation.md has the measurements.
chain (the default objective): each call as a GEMM between two others of the same layer (k between q
  and v): after the layer prelude, a torch GEMM of the call's A with a cold (K, 1024) weight, then the
  call, then another such GEMM (ChainNeighbours). cuBLAS's kernels overlap their neighbours' launches (programmatic dependent
  launch), so a call changes the time of the GEMMs beside it; events around the call cannot see that.
  So the whole replay is timed: a graph of calls after their neighbours against a graph of the same work
  without the calls (the floor), replayed in the same group; a call's time is the difference per call.
  Where the prelude's and neighbours' buffers lie moves a small call's marginal by a few percent, so the
  groups are spread over several placements of them (TimingConfig.placements), each with its graphs.
  In a decoder layer on an H200 this came within 25% of the layer's own saving where layer mode read
  about half of it (docs/evaluation.md, "The decoder layer" and "Chain mode").
mlp_chain (not the default): chain mode whose work before the call is the compute-heavy part of a decoder
  layer, an 8B-class model's MLP at the call's row count (at most MLPNeighbours.MAX_ROWS): gate and up (4096
  to 14336) and down (14336 to 4096), in place of the light GEMM (MLPNeighbours). Built because on one H200
  a 128-row q/o kernel lost after these GEMMs as it lost in the layer; measured in the decoder on two more
  H200s, it predicted the layer no better than chain, and the MLP alone lowered the SM clock below the
  layer's (docs/evaluation.md, "mlp_chain, measured").

The order of contenders is shuffled in every round, so that drift (clocks, temperature)
spreads over all of them instead of favouring whoever runs first.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

from .results import Timing

Call = Callable[[int], Any]


@dataclass(frozen=True)
class TimingConfig:
    warmup_ms: float = 25.0  # run each contender at least this long before measuring
    groups: int = 50  # offline: timed groups (graph replays) per contender
    target_group_ms: float = 2.0  # offline: calls per group chosen so a group lasts about this
    max_calls_per_group: int = 256
    server_samples: int = 60  # server: single calls per contender
    gap_mean_ms: float = 0.5  # server: mean of the exponential idle gap
    # sustained: the clock follows power within ~0.2 s on the H100 (nvidia-smi at 200 ms steps:
    # 1980 MHz idle, 1.1-1.4 GHz from the first loaded sample); settle longer than that
    settle_ms: float = 400.0
    window_ms: float = 200.0
    sustained_rounds: int = 3
    seed: int = 0
    # offline: groups that also time plain calls (None: every group). The call time is the host's
    # cost, far steadier than the kernel's; a sweep that ranks kernels needs few of them.
    call_groups: int | None = None
    # chain: the groups are split over this many placements of the prelude's and the neighbours'
    # buffers, each placement its own graphs. Where those buffers lie moves a small call's marginal:
    # on one H200 a 33x3072x3072 winner's ratio over torch ranged 3.6% over five timings on one placement
    # and 6.1% over five fresh ones (benchmarks/chain_placement.py, 2026-11-29); a model's buffers lie
    # anywhere.
    placements: int = 4

    @classmethod
    def sweep(cls) -> "TimingConfig":
        """Shorter offline timing for a dataset sweep over many (spec, shape) pairs: 10 groups of
        about 1 ms after 1 ms of warm-up, call time from 1. The checks have just run each kernel, and
        the contenders' groups keep the GPU busy in turn, so its clock is up before the first group;
        on small shapes a launch costs the host more than the kernel the GPU, so each warm-up or
        call-time group costs its wall time again on the host. The medians and their spread are
        recorded as always; a search's confirmation of its leaders uses the full default."""
        return cls(warmup_ms=1.0, groups=10, target_group_ms=1.0, call_groups=1)

    @classmethod
    def confirmation(cls) -> "TimingConfig":
        """A search's confirmation rounds: 20 groups of about 2 ms a contender and round, the call
        time from 5 of them (the host's cost, steadier than the kernel's). The rounds are repeated
        (Confirm.rounds, 3) and ranked by the median of their medians, so a contender is timed over
        60 groups in all, against 10 in its search trial; what moves a round is the GPU's state
        between rounds, which more groups in one round do not average out. On the H100 the rounds
        (3 leaders, a static twin and 2 baselines, three times) took about 4 s of an 8.7 s warm
        CuTe DSL search with 50 groups a round, call time from 10."""
        return cls(groups=20, call_groups=5)


@dataclass
class Measured:
    timing: Timing | None
    error: str = ""
    replay: Callable[[], Any] | None = None  # re-runs the timed path (the captured graph) once
    calls_per_group: int = 0  # layer mode: the calls (each after its prelude) one group's figure averages


# ~25 us at H100 clocks: longer than the host needs to enqueue two events and one call.
_SPIN_CYCLES = 50_000


def _spread(xs: list[float]) -> float:
    med = statistics.median(xs)
    return (max(xs) - min(xs)) / med if med > 0 else 0.0


class _L2Flusher:
    def __init__(self, device):
        import torch

        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 << 20) or (50 << 20)
        self.buf = torch.empty(2 * l2 // 4, dtype=torch.float32, device=device)

    def __call__(self):
        self.buf.fill_(1.0)  # a write larger than L2 evicts everything the last call left


class LayerPrelude:
    """The work a model's layer does before a GEMM on input set i (see the module's docstring):
    stream a buffer twice the L2's size (the weights of the projections before it), then pass over
    A in place (the norm or activation that produced it), leaving A's values unchanged so that the
    timed outputs can still be checked. operands_a: the A tensor of each input set (None: no A pass)."""

    def __init__(self, device, l2_bytes: int, operands_a: list | None = None):
        import torch

        self.device, self.l2_bytes = device, l2_bytes
        self.streamed = torch.ones(max(2 * l2_bytes, 1 << 20) // 2, dtype=torch.float16, device=device)
        self.sink = torch.empty((), dtype=torch.float32, device=device)
        self.operands_a = operands_a

    def fresh(self) -> "LayerPrelude":
        """The same work on buffers of its own (allocated while this one's are held: elsewhere in memory)."""
        return LayerPrelude(self.device, self.l2_bytes, self.operands_a)

    def __call__(self, i: int) -> None:
        import torch

        torch.sum(self.streamed, dim=0, dtype=torch.float32, out=self.sink)
        if self.operands_a is not None:
            self.operands_a[i].mul_(1)


class ChainNeighbours:
    """The GEMMs on either side of each call in chain mode: torch.matmul of the call's A on input set i
    with a cold (K, 1024) weight of A's dtype (the projections of one input, as q, k and v read the
    same normed activations), before the call and after it. 1024 columns: a key or value projection of
    an 8B-class model, small beside most calls and large enough to be a cuBLAS GEMM kernel."""

    COLUMNS = 1024

    def __init__(self, device, operands_a: list):
        import torch

        a = operands_a[0]
        k = a.shape[-1]
        self.device, self.operands_a = device, operands_a
        self.weights = [torch.randn(k, self.COLUMNS, dtype=a.dtype, device=device) / k ** 0.5 for _ in range(2)]
        self.outs = [torch.empty(a.shape[0], self.COLUMNS, dtype=a.dtype, device=device) for _ in range(2)]

    def fresh(self) -> "ChainNeighbours":
        """New weights and outputs of the same sizes (allocated while these are held: elsewhere in memory)."""
        return ChainNeighbours(self.device, self.operands_a)

    def before(self, i: int) -> None:
        import torch

        torch.matmul(self.operands_a[i], self.weights[0], out=self.outs[0])

    def after(self, i: int) -> None:
        import torch

        torch.matmul(self.operands_a[i], self.weights[1], out=self.outs[1])


class MLPNeighbours(ChainNeighbours):
    """mlp_chain's neighbours: before each call, an 8B-class model's MLP (gate and up, HIDDEN to INTER, then
    down, INTER to HIDDEN, nn.Linear's layout) on an input of its own with the call's row count, at most
    MAX_ROWS: the heavy work a decoder layer runs between two of its projections, which chain's light GEMM
    is not. After the call, chain's GEMM of A with a cold (K, 1024) weight. The MLP's own input and weights
    leave A as it was."""

    HIDDEN, INTER = 4096, 14336
    MAX_ROWS = 256  # a decode step's or a small prefill chunk's rows: where a kernel's neighbours move it most

    def __init__(self, device, operands_a: list):
        import torch

        super().__init__(device, operands_a)
        a = operands_a[0]
        rows = max(1, min(a.shape[0], self.MAX_ROWS))
        h, f = self.HIDDEN, self.INTER
        self.mlp_in = torch.randn(rows, h, dtype=a.dtype, device=device)
        self.mlp_weights = [torch.randn(f, h, dtype=a.dtype, device=device) / h ** 0.5 for _ in range(2)] + [
            torch.randn(h, f, dtype=a.dtype, device=device) / f ** 0.5]
        self.mlp_outs = [torch.empty(rows, f, dtype=a.dtype, device=device) for _ in range(2)] + [
            torch.empty(rows, h, dtype=a.dtype, device=device)]

    def fresh(self) -> "MLPNeighbours":
        return MLPNeighbours(self.device, self.operands_a)

    def before(self, i: int) -> None:
        import torch

        gate, up, down = self.mlp_weights
        torch.matmul(self.mlp_in, gate.t(), out=self.mlp_outs[0])
        torch.matmul(self.mlp_in, up.t(), out=self.mlp_outs[1])
        torch.matmul(self.mlp_outs[0], down.t(), out=self.mlp_outs[2])


def neighbours_for(mode: str, device, operands_a: list) -> "ChainNeighbours | None":
    """The work around each call that mode times it between: ChainNeighbours (chain), MLPNeighbours
    (mlp_chain), or None (the other modes)."""
    around = {"chain": ChainNeighbours, "mlp_chain": MLPNeighbours}.get(mode)
    return around(device, operands_a) if around else None


def _capture(call: Call, indices: list[int], device):
    """A CUDA graph of call(i) for i in indices; None and the error if capture fails."""
    import torch

    try:
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):  # warm-up on a side stream, as capture requires
            for i in sorted(set(indices)):
                call(i)
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in indices:
                call(i)
        torch.cuda.synchronize(device)
        return g, ""
    except Exception as e:  # noqa: BLE001 - capture fails in many library-specific ways
        try:
            torch.cuda.synchronize(device)
        except Exception:  # noqa: BLE001
            pass
        return None, f"{type(e).__name__}: {e}"


def _warmup(call: Call, n_sets: int, cfg: TimingConfig, device) -> float:
    """Run until warm; return the estimated milliseconds per call (device time)."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    total_ms, calls, est = 0.0, 0, 0.0
    while total_ms < cfg.warmup_ms or calls < 2 * n_sets:
        start.record()
        for i in range(n_sets):
            call(i)
        end.record()
        end.synchronize()
        total_ms += start.elapsed_time(end)
        calls += n_sets
        est = start.elapsed_time(end) / n_sets
        if calls > 100000:
            break
    return est


def _calls_per_group(ms_per_call: float, n_sets: int, cfg: TimingConfig) -> int:
    """Calls in one timed group (a whole number of input-set rounds): about target_group_ms of work,
    at most max_calls_per_group."""
    fill = math.ceil(cfg.target_group_ms / max(ms_per_call, 1e-4) / n_sets)
    reps = max(1, min(cfg.max_calls_per_group // n_sets, fill))
    return reps * n_sets


def _replay_ms(graph) -> float:
    """Milliseconds of one replay of graph (after one untimed replay)."""
    import torch

    graph.replay()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    graph.replay()
    b.record()
    b.synchronize()
    return a.elapsed_time(b)


def _plain_calls(call: Call, calls: int, n_sets: int) -> tuple:
    """Two events around `calls` plain calls cycling over the input sets: one group of the call time
    (the host's cost per call, launches included)."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for j in range(calls):
        call(j % n_sets)
    end.record()
    return start, end


def measure(contenders: dict[str, Call], n_sets: int, mode: str, cfg: TimingConfig = TimingConfig(),
            device=None, prelude: Callable[[int], Any] | None = None,
            neighbours: "ChainNeighbours | None" = None) -> dict[str, Measured]:
    """Time every contender in one process, interleaved. Returns name -> Measured. prelude: the
    work before each call in layer and chain mode (LayerPrelude; None: one that only streams through
    L2); neighbours: the GEMMs beside each call in chain mode."""
    import torch

    if device is None or torch.device(device).type == "cpu":
        return _measure_cpu(contenders, n_sets, mode, cfg)
    device = torch.device(device)
    if mode == "layer":
        return _layer(contenders, n_sets, cfg, device, prelude or LayerPrelude(device, _l2_bytes(device)))
    if mode in ("chain", "mlp_chain"):
        wanted = MLPNeighbours if mode == "mlp_chain" else ChainNeighbours
        if neighbours is None:
            raise ValueError(f"{mode} mode times each call between the work around it: pass neighbours "
                             f"({wanted.__name__} of the input sets' A operands)")
        if mode == "mlp_chain" and type(neighbours) is ChainNeighbours:
            raise ValueError("mlp_chain mode times each call after an MLP: pass MLPNeighbours, not ChainNeighbours")
        return _chain(contenders, n_sets, cfg, device, prelude or LayerPrelude(device, _l2_bytes(device)),
                      neighbours)
    rng = random.Random(cfg.seed)
    names = list(contenders)
    out: dict[str, Measured] = {}
    live: dict[str, dict] = {}
    for name in names:
        call = contenders[name]
        try:
            est = _warmup(call, n_sets, cfg, device)
        except Exception as e:  # noqa: BLE001
            out[name] = Measured(None, f"warm-up failed: {type(e).__name__}: {e}")
            continue
        if mode in ("offline", "sustained"):
            n_calls = plain = _calls_per_group(est, n_sets, cfg)
            graph, why = _capture(call, [j % n_sets for j in range(n_calls)], device)
            if graph is not None:
                # est is the time between events around plain calls: the host's where it outruns
                # the GPU. A graph replays at the GPU's pace, so size the group from one replay:
                # quack forced to a config (1.1 ms of Python per call) got one call per set, and
                # each replay's fixed cost spread over 3 to 21 calls read 0.67-0.91 of its speed.
                more = _calls_per_group(_replay_ms(graph) / n_calls, n_sets, cfg)
                if more > 2 * n_calls:
                    bigger, _ = _capture(call, [j % n_sets for j in range(more)], device)
                    if bigger is not None:  # (else the first graph serves)
                        graph, n_calls = bigger, more
            # (plain calls, timed for the call time, stay as many as the host's pace allows)
            live[name] = {"calls": n_calls, "plain": plain, "graph": graph, "why": why, "k": [], "c": []}
        else:
            graphs = []
            why = ""
            for i in range(n_sets):
                g, why = _capture(call, [i], device)
                if g is None:
                    graphs = None
                    break
                graphs.append(g)
            live[name] = {"calls": 1, "plain": 1, "graph": graphs, "why": why, "k": [], "c": []}
    if mode == "offline":
        _offline(contenders, live, n_sets, cfg, rng, device)
    elif mode == "sustained":
        _sustained(contenders, live, n_sets, cfg, rng, device)
    else:
        _server(contenders, live, n_sets, cfg, rng, device)
    for name, st in live.items():
        graph = st["graph"]
        if graph is None:
            replay = None
        elif mode in ("offline", "sustained"):
            replay = graph.replay
        else:
            replay = (lambda gs=graph: [g.replay() for g in gs])
        method = "cuda-graph" if graph is not None else "launches"
        ks, cs = st["k"], st["c"]
        kernel = statistics.median(ks) if st["graph"] is not None else statistics.median(cs)
        out[name] = Measured(Timing(kernel_ms=kernel, call_ms=statistics.median(cs),
                                    groups=len(ks) if st["graph"] is not None else len(cs),
                                    spread=_spread(ks if st["graph"] is not None else cs), method=method),
                             "" if graph is not None else f"graph capture failed ({st['why']}); "
                                                          f"kernel time is events around launches", replay)
    return {n: out[n] for n in names if n in out}


def _l2_bytes(device) -> int:
    import torch

    return getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 << 20) or (50 << 20)


def _capture_layer(call: Call, prelude, indices: list[int], device):
    """A CUDA graph of prelude(i), then call(i) between two timing events, for i in indices (an index
    may repeat: a group cycles over the input sets); the events (external nodes, so each replay
    records them) and the error if capture fails."""
    import torch

    starts = [torch.cuda.Event(enable_timing=True, external=True) for _ in indices]
    ends = [torch.cuda.Event(enable_timing=True, external=True) for _ in indices]

    def body():
        for j, i in enumerate(indices):
            prelude(i)
            starts[j].record()
            call(i)
            ends[j].record()

    graph, why = _capture(lambda _i: body(), [0], device)
    return (graph, starts, ends), why


def _layer(contenders, n_sets, cfg, device, prelude) -> dict[str, Measured]:
    """Layer mode (see the module's docstring): per contender a graph of prelude and call cycling over
    the input sets for about target_group_ms (at least one pass), replayed once per group,
    contenders in a new order each group; a group's figure is the mean of its calls' own times. A
    contender whose capture fails is timed the same way with plain launches, the prelude keeping the
    GPU busy while the host enqueues the call."""
    import torch

    rng = random.Random(cfg.seed)
    ev = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
    out: dict[str, Measured] = {}
    live: dict[str, dict] = {}
    for name, call in contenders.items():
        try:
            est = _warmup(call, n_sets, cfg, device)
        except Exception as e:  # noqa: BLE001
            out[name] = Measured(None, f"warm-up failed: {type(e).__name__}: {e}")
            continue
        captured, why = _capture_layer(call, prelude, list(range(n_sets)), device)
        calls = n_sets
        if captured[0] is not None:
            # One pass over the input sets is 2 to 4 calls on most shapes: a group of one pass left the
            # median of a round at the mercy of a few calls' DRAM luck (a winner's ratio over torch moved
            # 1.3-1.8% between runs). Size the group as offline does, from one replay at the GPU's pace,
            # the preludes included, so that it lasts about target_group_ms.
            more = _calls_per_group(_replay_ms(captured[0]) / n_sets, n_sets, cfg)
            if more > n_sets:
                bigger, _ = _capture_layer(call, prelude, [j % n_sets for j in range(more)], device)
                if bigger[0] is not None:  # (else the one-pass graph serves)
                    captured, calls = bigger, more
        live[name] = {"graph": captured if captured[0] is not None else None, "why": why, "k": [], "c": [],
                      "plain": _calls_per_group(est, n_sets, cfg), "calls": calls}
    for g in range(cfg.groups):
        order = list(live)
        rng.shuffle(order)
        pending = []
        for name in order:
            st, call = live[name], contenders[name]
            if st["graph"] is not None:
                graph, starts, ends = st["graph"]
                graph.replay()
                pending.append((st["k"], list(zip(starts, ends)), 1))
            else:
                marks = []
                for i in range(n_sets):
                    prelude(i)
                    torch.cuda._sleep(_SPIN_CYCLES)  # the GPU stays busy while the host enqueues the call
                    a, b = ev(), ev()
                    a.record()
                    call(i)
                    b.record()
                    marks.append((a, b))
                pending.append((st["k"], marks, 1))
            if cfg.call_groups is not None and g >= cfg.call_groups:
                continue
            pending.append((st["c"], [_plain_calls(call, st["plain"], n_sets)], st["plain"]))
        torch.cuda.synchronize(device)
        for sink, marks, calls in pending:  # ms per call: the mean over the marked intervals of `calls` calls
            sink.append(statistics.fmean(a.elapsed_time(b) for a, b in marks) / calls)
    for name, st in live.items():
        ks, cs = st["k"], st["c"]
        graph = st["graph"]
        out[name] = Measured(
            Timing(kernel_ms=statistics.median(ks), call_ms=statistics.median(cs), groups=len(ks),
                   spread=_spread(ks), method="cuda-graph" if graph is not None else "launches"),
            "" if graph is not None else f"graph capture failed ({st['why']}); kernel time is events around "
                                         "launches after the prelude",
            # the replay holds the events too: the graph's event nodes name them, and replaying it
            # after they were destroyed crashes the process
            (lambda captured=graph: captured[0].replay()) if graph is not None else None,
            calls_per_group=st["calls"])
    return {n: out[n] for n in contenders if n in out}


def _capture_chain(call: Call | None, prelude, neighbours: ChainNeighbours, indices: list[int], device):
    """A CUDA graph of, for i in indices: prelude(i), the GEMM before, call(i) (None: no call, the
    floor), the GEMM after; and the error if capture fails."""

    def body():
        for i in indices:
            prelude(i)
            neighbours.before(i)
            if call is not None:
                call(i)
            neighbours.after(i)

    return _capture(lambda _i: body(), [0], device)


def _chain(contenders, n_sets, cfg, device, prelude, neighbours: ChainNeighbours) -> dict[str, Measured]:
    """Chain mode (see the module's docstring): one list of calls for every graph, cycling over the input
    sets for about target_group_ms of the floor's pace (at least one pass); per group the floor's graph
    and each contender's, in a new order, each replay between two events; a contender's group figure is
    (its replay - the floor's replay of the same group) / calls. The groups are split over
    cfg.placements placements of the prelude's and the neighbours' buffers, each with graphs of its own;
    the figure is the median over all groups. A contender whose graph cannot be captured is not timed
    (its Measured says why): only a replay shows the overlap this mode is for."""
    out: dict[str, Measured] = {}
    ests: dict[str, float] = {}
    for name, call in contenders.items():
        try:
            ests[name] = _warmup(call, n_sets, cfg, device)
        except Exception as e:  # noqa: BLE001
            out[name] = Measured(None, f"warm-up failed: {type(e).__name__}: {e}")
    floor, why = _capture_chain(None, prelude, neighbours, list(range(n_sets)), device)
    if floor is None:
        return {**out, **{n: Measured(None, f"chain mode: the floor's graph capture failed ({why})") for n in ests}}
    calls = _calls_per_group(_replay_ms(floor) / n_sets, n_sets, cfg)  # about target_group_ms at the floor's pace
    del floor
    indices = [j % n_sets for j in range(calls)]
    rng = random.Random(cfg.seed)
    live = {name: {"k": [], "c": [], "plain": _calls_per_group(ests[name], n_sets, cfg)} for name in ests}
    blocks = max(1, min(cfg.placements, cfg.groups))
    g = 0
    for block in range(blocks):
        if block:  # new buffers while the last placement's graphs still hold theirs: new addresses
            prelude, neighbours = prelude.fresh(), neighbours.fresh()
        floor, why = _capture_chain(None, prelude, neighbours, indices, device)
        if floor is None:
            return {**out, **{n: Measured(None, f"chain mode: the floor's graph capture failed ({why})")
                              for n in live}}
        for name in list(live):
            graph, why = _capture_chain(contenders[name], prelude, neighbours, indices, device)
            if graph is None:
                out[name] = Measured(None, f"graph capture failed ({why}); chain mode times only captured calls")
                del live[name]
                continue
            # the graph reads the buffers: they live as long as it does
            live[name]["graph"], live[name]["buffers"] = graph, (prelude, neighbours)
        for _ in range(cfg.groups // blocks + (block < cfg.groups % blocks)):
            _chain_group(live, floor, contenders, calls, n_sets, cfg, g, rng, device)
            g += 1
    for name, st in live.items():
        ks = st["k"]
        cs = [c0.elapsed_time(c1) / n for c0, c1, n in st["c"]]
        out[name] = Measured(
            Timing(kernel_ms=statistics.median(ks), call_ms=statistics.median(cs), groups=len(ks),
                   spread=_spread(ks), method="cuda-graph-marginal"), "",
            (lambda graph=st["graph"], held=st["buffers"]: graph.replay()), calls_per_group=calls)
    return {n: out[n] for n in contenders if n in out}


def _chain_group(live: dict, floor, contenders, calls: int, n_sets: int, cfg, g: int, rng, device) -> None:
    """One group of chain mode: the floor and every live contender's graph replayed once each in a new
    order, events around each replay; each contender's group figure appended to its "k", and its plain
    calls' events to its "c" (in the first cfg.call_groups groups)."""
    import torch

    order = ["", *live]  # "": the floor
    rng.shuffle(order)
    pending = []
    for name in order:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        (floor if name == "" else live[name]["graph"]).replay()
        b.record()
        pending.append((name, a, b))
        if name == "" or (cfg.call_groups is not None and g >= cfg.call_groups):
            continue
        st = live[name]
        st["c"].append((*_plain_calls(contenders[name], st["plain"], n_sets), st["plain"]))
    torch.cuda.synchronize(device)
    replays = {name: a.elapsed_time(b) for name, a, b in pending}
    for name in live:
        live[name]["k"].append((replays[name] - replays[""]) / calls)


def _offline(contenders, live, n_sets, cfg, rng, device):
    import torch

    ev = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
    for g in range(cfg.groups):
        order = list(live)
        rng.shuffle(order)
        pending = []
        for name in order:
            st, call = live[name], contenders[name]
            if st["graph"] is not None:
                k0, k1 = ev(), ev()
                k0.record()
                st["graph"].replay()
                k1.record()
                pending.append((st["k"], k0, k1, st["calls"]))
                if cfg.call_groups is not None and g >= cfg.call_groups:
                    continue
            pending.append((st["c"], *_plain_calls(call, st["plain"], n_sets), st["plain"]))
        torch.cuda.synchronize(device)
        for sink, a, b, n in pending:
            sink.append(a.elapsed_time(b) / n)


def _sustained(contenders, live, n_sets, cfg, rng, device):
    """Each contender alone for settle_ms + window_ms of back-to-back groups, enqueued without a
    host sync so the GPU never idles; only the window's groups are kept. Then a few groups of plain
    calls for the call time (the host's cost, measured at the clock the window left)."""
    import torch

    ev = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
    for _ in range(cfg.sustained_rounds):
        order = list(live)
        rng.shuffle(order)
        for name in order:
            st, call = live[name], contenders[name]

            def group(st=st, call=call):
                if st["graph"] is not None:
                    st["graph"].replay()
                else:
                    for j in range(st["calls"]):
                        call(j % n_sets)

            # one untimed group measures this contender's group length at the current clock
            a, b = ev(), ev()
            a.record()
            group()
            b.record()
            b.synchronize()
            group_ms = max(a.elapsed_time(b), 1e-3)
            for _s in range(math.ceil(cfg.settle_ms / group_ms)):
                group()
            timed = []
            for _w in range(max(3, math.ceil(cfg.window_ms / group_ms))):
                k0, k1 = ev(), ev()
                k0.record()
                group()
                k1.record()
                timed.append((k0, k1))
            calls = []
            for _c in range(3):
                calls.append(_plain_calls(call, st["plain"], n_sets))
            torch.cuda.synchronize(device)
            sink = st["k"] if st["graph"] is not None else st["c"]
            sink.extend(k0.elapsed_time(k1) / st["calls"] for k0, k1 in timed)
            st["c"].extend(c0.elapsed_time(c1) / st["plain"] for c0, c1 in calls)


def _server(contenders, live, n_sets, cfg, rng, device):
    import torch

    flush = _L2Flusher(device)
    ev = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731

    def cold_sample(run):
        torch.cuda.synchronize(device)
        time.sleep(rng.expovariate(1.0 / (cfg.gap_mean_ms * 1e-3)))  # the GPU idles
        # The flush and a short spin keep the GPU busy while the host enqueues the events and
        # the call, so the interval measures the call's device time from a cold L2, not the
        # host's launch latency (which an idle stream would otherwise add to it).
        flush()
        torch.cuda._sleep(_SPIN_CYCLES)
        a, b = ev(), ev()
        a.record()
        run()
        b.record()
        b.synchronize()
        return a.elapsed_time(b)

    for s in range(cfg.server_samples):
        order = list(live)
        rng.shuffle(order)
        i = s % n_sets
        for name in order:
            st, call = live[name], contenders[name]
            if st["graph"] is not None:
                st["k"].append(cold_sample(st["graph"][i].replay))
            st["c"].append(cold_sample(lambda: call(i)))


def _measure_cpu(contenders, n_sets, mode, cfg) -> dict[str, Measured]:
    """CPU stand-in for the tests of the worker machinery: wall clock around calls."""
    rng = random.Random(cfg.seed)
    samples: dict[str, list[float]] = {n: [] for n in contenders}
    groups = min(cfg.groups, 5)
    for name in contenders:  # warm-up round, untimed
        for i in range(n_sets):
            contenders[name](i)
    for g in range(groups):
        order = list(contenders)
        rng.shuffle(order)
        for name in order:
            t0 = time.perf_counter()
            for i in range(n_sets):
                contenders[name](i)
            samples[name].append((time.perf_counter() - t0) * 1e3 / n_sets)
    return {n: Measured(Timing(kernel_ms=statistics.median(xs), call_ms=statistics.median(xs), groups=len(xs),
                               spread=_spread(xs), method="cpu-wallclock")) for n, xs in samples.items()}
