"""Keep a routed layer's kernels only where they win inside the model: `cudal2.check_routes(model, *inputs)`.

The table's figure for a GEMM is measured alone, in the model's call pattern (chain mode). Inside a
model the kernel also changes the time of the kernels around it: in a decoder layer on an H200, a
q/o kernel that saved 1.3 to 2.3 us a layer call in every isolated regime cost the layer 0.7 to
1.7 us at 128 tokens (docs/evaluation.md, "The decoder layer"). So after route_linears, each group
of routed layers that share a weight shape is timed in the model itself: the model's forward with
only that group served against the model with none, in interleaved rounds (the order reversed every
other round).

A model serves every phase (a prefill, a decode step) with one routing, and a check sees one phase.
So a check takes back only what it measured:
- A group none of whose calls in this forward a kernel serves (the op runs torch for all of them: a
  prefill whose row counts the table has no win at, say) is not timed and keeps its route: the
  forward then runs the same kernels, and only the op's fallback's host time differs, about a
  microsecond a call (benchmarks/op_overhead.py), far below what a forward's timers resolve.
- A served group that does not save time in most rounds declines the row counts it was served at in
  this forward: its layers stay routed, and run F.linear at those counts (RoutedLinear's
  _cudal2_declined), while the counts another phase serves are still served there; a layer whose every
  count the table serves it at is declined is put back to nn.Linear (its routed forward, declining, cost a
  small Llama's decode step 0.6 to 1.0 us a call more than nn.Linear's, on a 2-core CPU, 2026-11-30). Saving means:
  the lower quartile of its per-round saving is above the floor, so that a median lifted by a few
  noisy rounds (eager wall time reads a forward to within tens of microseconds at best) keeps nothing.
  The floor is what two timers of the same forward, none served, read apart (an A/A comparison, the
  median of its per-round differences, taken as a magnitude): two captures of the same kernels into
  two CUDA graphs can differ by microseconds, and a group's saving is read between two such timers.
route_linears clears what was declined (a new table may serve those counts with other kernels).
"""

from __future__ import annotations

import statistics
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import torch

from . import ops

Timer = Callable[[Callable[[], Any], int], Callable[[], float]]  # (forward, calls) -> one round's us a call


@dataclass(frozen=True)
class RouteCheck:
    """One group of routed layers (one weight shape) timed inside the model."""

    weight_shape: tuple[int, int]  # (out_features, in_features)
    layers: tuple[str, ...]
    saving_us: float  # the median over the rounds of (forward with none served) - (with this group served)
    saving_q1_us: float
    saving_q3_us: float
    floor_us: float  # what two timers of the same forward (none served) read apart: the A/A difference
    kept: bool  # saving_q1_us > floor_us (saved more than that in three rounds of four), or not served
    served: bool = True  # a kernel served some call of the group in this forward; False: not timed, kept (savings 0)
    declined_rows: tuple[int, ...] = ()  # not kept: the row counts the group's layers now run F.linear at


def wall_timer(forward: Callable[[], Any], calls: int) -> Callable[[], float]:
    """us a call of `calls` back-to-back forwards, from a synchronized GPU to a synchronized GPU (eager)."""
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    for _ in range(3):
        forward()
    sync()

    def one_round() -> float:
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            forward()
        sync()
        return (time.perf_counter() - start) / calls * 1e6

    return one_round


def side_warmed_graph(warm: Callable[[], Any], capture: Callable[[], Any],
                      keep_graph: bool = False) -> torch.cuda.CUDAGraph:
    """A CUDA graph of capture(), after warm() ran on a side stream, as torch's CUDA-graph documentation prescribes
    (the op builds its launchers there, outside the capture). keep_graph: a graph that keeps its nodes for reading
    after the capture (a plain one where torch has no such argument)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        warm()
    torch.cuda.current_stream().wait_stream(side)
    try:
        graph = torch.cuda.CUDAGraph(keep_graph=True) if keep_graph else torch.cuda.CUDAGraph()
    except TypeError:
        graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        capture()
    return graph


def graph_timer(forward: Callable[[], Any], calls: int) -> Callable[[], float]:
    """us a call of one replay of a CUDA graph of `calls` forwards, between CUDA events (after three
    warm-up forwards on a side stream, which build the op's launchers outside the capture)."""
    graph = side_warmed_graph(lambda: [forward() for _ in range(3)], lambda: [forward() for _ in range(calls)])
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def one_round() -> float:
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3 / calls

    return one_round


def check_routes(model: torch.nn.Module, *example_inputs, graphs: bool = False, rounds: int = 21, calls: int = 10,
                 timer: Timer | None = None, **example_kwargs) -> list[RouteCheck]:
    """Time each group of model's routed layers (ops.RoutedLinear, as route_linears left them) inside the
    model on the example inputs; a group whose saving a forward is not above the floor in at least three
    rounds of four (its lower quartile; the floor: the A/A difference of two timers of the forward with
    none served, see the module's docstring) declines the row counts it was served at here: its layers
    run F.linear at those counts and stay routed for the others (a layer the table serves at no other count is
    nn.Linear again). graphs: time the forward inside
    a CUDA graph (for a model that runs in CUDA graphs; route_linears(model, graphs=True) first), else
    eager wall time. timer: (forward, calls) -> a timer of one round in us a call (default: graph_timer or
    wall_timer). Returns one RouteCheck per group; a group the op served no call of in this forward is not
    timed and stays routed (served False). Where a timer cannot be built (a forward that cannot be
    captured, say), warns once and changes nothing."""
    routed: dict[tuple[int, int], list[tuple[str, torch.nn.Module]]] = {}
    for name, m in model.named_modules():
        if type(m) is ops.RoutedLinear:
            routed.setdefault((m.out_features, m.in_features), []).append((name, m))
    if not routed:
        return []
    timer = timer or (graph_timer if graphs else wall_timer)
    every_pair = [pair for group in routed.values() for pair in group]
    every = [m for _, m in every_pair]

    def serving(group: list) -> None:
        """Route only the group's layers (an empty group: none)."""
        for m in every:
            m.__class__ = torch.nn.Linear
        for _, m in group:
            m.__class__ = ops.RoutedLinear

    def forward():
        return model(*example_inputs, **example_kwargs)

    def timed(layers: list) -> tuple[list, Callable[[], float]]:
        """The routing and its timer (a graph captures the routing of its capture)."""
        serving(layers)
        return layers, timer(forward, calls)

    def timed_if_served(layers: list) -> tuple[tuple[list, Callable[[], float]] | None, set]:
        """(timed(layers), the (layer, x element count) pairs the op served while the timer was built: its
        warm-up forwards, and in a graph its capture; read off the op's launchers by call key), or (None,
        an empty set) where it served none of the layers' calls."""
        calls: dict = {}

        def record(mod, args) -> None:  # (a pre-hook that returned a value would replace the forward's args)
            calls.setdefault((mod, args[0].numel()), ops._linear_key(args[0], mod.weight, mod.bias))

        hooks = [m.register_forward_pre_hook(record) for _, m in layers]
        try:
            pair = timed(layers)
        finally:
            for hook in hooks:
                hook.remove()
        served = {call for call, key in calls.items() if ops._serves(key, graphs)}
        return (pair, served) if served else (None, set())

    def differences(first: tuple, second: tuple) -> list[float]:
        """Per round: the first routing's forward time less the second's, each from its own timer, the
        order reversed every other round."""
        diffs = []
        for r in range(rounds):
            got = [0.0, 0.0]
            for i in ((0, 1) if r % 2 == 0 else (1, 0)):
                layers, one_round = (first, second)[i]
                serving(layers)
                got[i] = one_round()
            diffs.append(got[0] - got[1])
        return diffs

    checks = []
    try:
        with torch.no_grad():
            none = timed([])  # every group is timed against this one timer of the forward with none served
            floor = abs(statistics.median(differences(none, timed([]))))
            for shape, group in routed.items():
                names = tuple(name for name, _ in group)
                pair, served = timed_if_served(group)
                if pair is None:  # the same kernels as with none served (see the module's docstring)
                    checks.append(RouteCheck(shape, names, 0.0, 0.0, 0.0, floor, kept=True, served=False))
                    continue
                diffs = differences(none, pair)
                mid = statistics.median(diffs)
                q1, _, q3 = statistics.quantiles(diffs, n=4) if len(diffs) > 1 else (mid, mid, mid)
                kept = q1 > floor
                if not kept:  # these counts run F.linear in these layers from now on
                    for m, numel in served:
                        m._cudal2_declined = getattr(m, "_cudal2_declined", frozenset()) | {numel}  # (now nn.Linear)
                rows = tuple(sorted({numel // m.in_features for m, numel in served})) if not kept else ()
                checks.append(RouteCheck(shape, names, mid, q1, q3, floor, kept, declined_rows=rows))
    except Exception as e:  # noqa: BLE001 - a model that cannot be timed this way keeps its routes
        serving(every_pair)
        warnings.warn(f"cudal2.check_routes: the model could not be timed ({type(e).__name__}: {e}); "
                      "its routed layers are left as route_linears set them", stacklevel=2)
        return []
    serving(every_pair)  # every layer routed again, less its declines
    for m in every:  # a layer left nothing to serve is nn.Linear again: not even its routed forward's Python runs
        if m._cudal2_declined and ops._served_counts(m) <= m._cudal2_declined:
            m.__class__ = torch.nn.Linear
    return checks
