"""cudal2.check_routes (cudal2/route_check.py) on the CPU, with a fake timer that reads which layers are
routed when a round is timed: a group whose layers win inside the model stays routed, one that loses
declines the row counts it was served at (its layers run F.linear there and stay routed for the others),
the two sides take turns, and a model that cannot be timed keeps its routes."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from cudal2 import ops
from cudal2.route_check import check_routes

SERVED_COUNTS = ops._served_counts  # (the fixture below stands in for it)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8), torch.nn.Linear(8, 16)
        self.plain = torch.nn.Linear(8, 8)  # never routed: not checked, never touched

    def forward(self, x):
        return self.b(self.a(x) + self.c(x)) + self.plain(x)


@pytest.fixture(autouse=True)
def _every_call_served(monkeypatch):
    """The op on the CPU runs torch for every call: here it is said to serve every routed call, except
    where a test says otherwise; and the table, to serve every layer at a count no check declines (so that a
    layer that declines its counts stays routed)."""
    monkeypatch.setattr(ops, "_serves", lambda key, graphs: True)
    monkeypatch.setattr(ops, "_served_counts", lambda m: {-1})


def _routed(model, *names):
    for name in names:
        getattr(model, name).__class__ = ops.RoutedLinear
    return model


def _timer(model, log, effect):
    """A timer whose rounds read the model's routing: 100 us, less each routed layer's effect."""
    def make(forward, calls):
        forward()  # the forward runs as routed now
        return lambda: log.append(tuple(n for n in effect if type(getattr(model, n)) is ops.RoutedLinear)) or \
            100.0 - sum(e for n, e in effect.items() if type(getattr(model, n)) is ops.RoutedLinear)
    return make


def test_a_group_that_loses_inside_the_model_declines_the_row_counts_it_was_served_at():
    model, log = _routed(Model(), "a", "b", "c"), []
    # a and c (weight 16x8) save 1 us each; b (8x16) saves in the table but costs the model 3 us
    checks = check_routes(model, torch.randn(2, 8), rounds=4, timer=_timer(model, log, {"a": 1.0, "b": -3.0, "c": 1.0}))
    by_shape = {c.weight_shape: c for c in checks}
    assert by_shape[(16, 8)].layers == ("a", "c") and by_shape[(16, 8)].saving_us == pytest.approx(2.0)
    assert by_shape[(16, 8)].kept and not by_shape[(8, 16)].kept and by_shape[(8, 16)].saving_us == pytest.approx(-3.0)
    assert type(model.a) is ops.RoutedLinear and type(model.c) is ops.RoutedLinear
    # b lost at its 2 rows (x of 2 x 16 = 32 elements): it runs F.linear there, and stays routed for other counts
    assert by_shape[(8, 16)].declined_rows == (2,) and by_shape[(16, 8)].declined_rows == ()
    assert type(model.b) is ops.RoutedLinear and model.b._cudal2_declined == {32}
    assert not model.a._cudal2_declined and type(model.plain) is torch.nn.Linear
    # first the A/A rounds (none against none), then each group against none, the order reversed every other round
    assert log[:8] == [()] * 8
    rounds = [x for x in log[8:] if x in ((), ("a", "c"))]
    assert rounds[:4] == [(), ("a", "c"), ("a", "c"), ()]


def test_a_group_that_saves_only_in_some_rounds_declines_its_counts():
    """A median above zero is not enough: a group whose saving is negative in half of the rounds but large
    in the others (a noisy eager forward) is put back; one that saves in every round stays."""
    model = _routed(Model(), "a", "b", "c")
    saving = {"b": iter([9.0, -2.0, 9.0, -2.0, -2.0, 9.0, 9.0, -2.0] * 4)}

    def make(forward, calls):
        forward()

        def one_round():
            routed = [n for n in ("a", "b", "c") if type(getattr(model, n)) is ops.RoutedLinear]
            return 100.0 - (next(saving["b"]) if routed == ["b"] else 0.5 * len(routed))
        return one_round

    checks = {c.weight_shape: c for c in check_routes(model, torch.randn(2, 8), rounds=8, timer=make)}
    b, ac = checks[(8, 16)], checks[(16, 8)]
    assert b.saving_us > 0 and b.saving_q1_us < 0 and not b.kept and model.b._cudal2_declined == {32}
    assert ac.kept and type(model.a) is ops.RoutedLinear


def test_a_saving_within_what_two_captures_of_the_same_forward_read_apart_is_not_kept():
    """Two timers of the same forward (none served) read 3 us apart: a group saving 2 us in every round is
    within that floor and goes back to nn.Linear; one saving 5 us stays."""
    model, made = _routed(Model(), "a", "b", "c"), []
    effect = {"a": 2.5, "c": 2.5, "b": 2.0}

    def make(forward, calls):
        forward()  # (a timer runs the forward first, as the op's probe of served calls needs)
        made.append(1)
        offset = 3.0 if len(made) == 2 else 0.0  # the A/A pair's second timer reads 3 us less
        routed = [n for n in effect if type(getattr(model, n)) is ops.RoutedLinear]
        return lambda: 100.0 - offset - sum(effect[n] for n in routed)

    checks = {c.weight_shape: c for c in check_routes(model, torch.randn(2, 8), rounds=4, timer=make)}
    assert all(c.floor_us == pytest.approx(3.0) for c in checks.values())
    assert checks[(16, 8)].kept and checks[(16, 8)].saving_us == pytest.approx(5.0)
    assert not checks[(8, 16)].kept and checks[(8, 16)].saving_us == pytest.approx(2.0)
    assert model.b._cudal2_declined == {32} and not model.a._cudal2_declined


def test_a_model_that_cannot_be_timed_keeps_its_routes():
    model = _routed(Model(), "a", "b")

    def broken(forward, calls):
        raise RuntimeError("operation not permitted when stream is capturing")

    with pytest.warns(UserWarning, match="could not be timed.*left as route_linears set them"):
        assert check_routes(model, torch.randn(2, 8), timer=broken) == []
    assert type(model.a) is ops.RoutedLinear and type(model.b) is ops.RoutedLinear


def test_nothing_routed_times_nothing():
    def never(forward, calls):
        raise AssertionError("timed")

    assert check_routes(Model(), torch.randn(2, 8), timer=never) == []


def test_the_eager_timer_times_the_forward():
    from cudal2.route_check import wall_timer

    calls = []
    one_round = wall_timer(lambda: calls.append(1), 5)
    assert len(calls) == 3 and one_round() > 0 and len(calls) == 8


def test_a_group_the_op_serves_no_call_of_is_not_timed_and_stays_routed(monkeypatch):
    """A phase whose row counts no kernel serves (the op ran torch for every call of the group) runs the same
    kernels routed or not: its group is not timed (its figure would be noise alone) and keeps its route, so
    that another phase's win is not taken back. A served group in the same forward is still timed."""
    model, log = _routed(Model(), "a", "b", "c"), []
    asked = []

    def serves(key, graphs):
        asked.append((key[3], graphs))
        return tuple(key[3]) == (16, 8)  # a and c (weight 16x8) served; b (8x16) not
    monkeypatch.setattr(ops, "_serves", serves)
    checks = {c.weight_shape: c for c in check_routes(model, torch.randn(2, 8), rounds=4,
                                                          timer=_timer(model, log, {"a": 1.0, "b": -3.0, "c": 1.0}))}
    b, ac = checks[(8, 16)], checks[(16, 8)]
    assert not b.served and b.kept and b.saving_us == 0.0 and type(model.b) is ops.RoutedLinear
    assert ac.served and ac.kept and ac.saving_us == pytest.approx(2.0)
    assert ("b",) not in log  # never timed with b alone routed
    assert {shape for shape, _ in asked} == {(16, 8), (8, 16)} and not any(g for _, g in asked)  # eager: graphs=False
    # the probe's hooks are gone: the model's layers carry none after the check
    assert not any(m._forward_pre_hooks for m in (model.a, model.b, model.c))


def test_a_declined_count_runs_f_linear_and_the_others_still_reach_the_op(monkeypatch):
    """What a loss declines is one row count of the layers that lost there: a call of that count runs F.linear
    without the op; a call of another count (a decode step after a losing prefill) still reaches the op's
    path. route_linears clears the declines: a new table may serve those counts with other kernels."""
    layer = torch.nn.Linear(8, 16)
    layer.__class__ = ops.RoutedLinear
    layer._cudal2_min_numel, layer._cudal2_graph_numel = 0, float("inf")
    layer._cudal2_declined = frozenset({2 * 8})
    reached = []
    monkeypatch.setattr(ops, "_run_linear", lambda x, w, b: reached.append(x.shape[0]) or F.linear(x, w, b))
    with torch.no_grad():
        x2, x5 = torch.randn(2, 8), torch.randn(5, 8)
        assert torch.equal(layer(x2), F.linear(x2, layer.weight, layer.bias)) and reached == []
        layer(x5)
    assert reached == [5]
    model = torch.nn.Sequential(layer)
    ops.route_linears(model, enable=False)  # put back: the declines go with the route
    assert type(layer) is torch.nn.Linear and "_cudal2_declined" not in layer.__dict__


def test_a_layer_that_declined_every_count_the_table_serves_it_at_is_nn_linear_again(monkeypatch):
    """b loses at the one count the table serves its weight at: nothing is left for its routed forward to do, so it
    is nn.Linear again (no Python of the op's runs in its calls). a and c also lose, but the table serves their
    weight at another count too: they stay routed, and run F.linear at the count they declined."""
    model, log = _routed(Model(), "a", "b", "c"), []
    monkeypatch.setattr(ops, "_served_counts", lambda m: {2 * 16} if m.in_features == 16 else {2 * 8, 5 * 8})
    check_routes(model, torch.randn(2, 8), rounds=4, timer=_timer(model, log, {"a": -1.0, "b": -3.0, "c": -1.0}))
    assert type(model.b) is torch.nn.Linear
    assert type(model.a) is ops.RoutedLinear and type(model.c) is ops.RoutedLinear and model.a._cudal2_declined == {16}


def test_the_counts_a_layer_is_served_at_come_from_the_table():
    """ops._served_counts: what the table serves a routed layer's weight shape at, eager (and in graphs only where
    it was routed for them); a win too small for an eager call counts only for a layer routed for graphs."""
    from cudal2.ir import GemmProblem, KernelSpec
    from cudal2.store.table import TunedEntry, TunedTable

    spec = KernelSpec(backend="triton", block_m=32, block_n=32, block_k=32, stages=2)
    entries = [TunedEntry(problem=GemmProblem(m=m, n=16, k=8, layout="NT"), spec=spec, kernel_ms=0.1,
                          baselines_ms={"torch": 0.1 + saving_ms}, gpu="") for m, saving_ms in ((2, 1.0), (5, 0.005))]
    ops.set_table(TunedTable(entries))
    try:
        layer, model = torch.nn.Linear(8, 16), None
        model = torch.nn.Sequential(layer)
        ops.route_linears(model)
        assert type(layer) is ops.RoutedLinear and SERVED_COUNTS(layer) == {2 * 8}
        ops.route_linears(model, graphs=True)
        assert SERVED_COUNTS(layer) == {2 * 8, 5 * 8}
    finally:
        ops.set_table(None)


def test_a_side_warmed_graph_warms_up_on_a_side_stream_then_captures_on_the_caller_s(monkeypatch):
    """side_warmed_graph (graph_timer's, and the benchmarks' layer graphs): warm() runs inside a side stream that
    first waits for the caller's, the caller's stream then waits for it, and only then capture() runs, inside the
    graph's capture; keep_graph asks for a graph that keeps its nodes, and falls back to a plain one where torch
    has no such argument. torch.cuda stood in for by recorders (no GPU here)."""
    from contextlib import contextmanager

    from cudal2 import route_check

    log = []

    class Stream:
        def __init__(self, name="side"):
            self.name = name

        def wait_stream(self, other):
            log.append(f"{self.name} waits for {other.name}")

    class Graph:
        def __init__(self, **kwargs):
            if kwargs and not keeps:
                raise TypeError("unexpected keyword argument 'keep_graph'")
            self.kwargs = kwargs

    @contextmanager
    def on(stream):
        log.append(f"on {stream.name}")
        yield
        log.append(f"off {stream.name}")

    @contextmanager
    def capturing(graph):
        log.append("capture")
        yield
        log.append("captured")

    caller = Stream("caller")
    for name, value in [("Stream", Stream), ("stream", on), ("current_stream", lambda: caller),
                        ("CUDAGraph", Graph), ("graph", capturing)]:
        monkeypatch.setattr(torch.cuda, name, value)
    keeps = True
    graph = route_check.side_warmed_graph(lambda: log.append("warm"), lambda: log.append("work"), keep_graph=True)
    assert log == ["side waits for caller", "on side", "warm", "off side", "caller waits for side", "capture", "work",
                   "captured"]
    assert graph.kwargs == {"keep_graph": True}
    assert route_check.side_warmed_graph(lambda: None, lambda: None).kwargs == {}
    keeps = False
    assert route_check.side_warmed_graph(lambda: None, lambda: None, keep_graph=True).kwargs == {}
