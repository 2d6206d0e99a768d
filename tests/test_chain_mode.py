"""Chain mode (each call between two torch GEMMs of its A, the whole replay timed against the same work
without the call): its plumbing on the CPU with recorded runners. A search in it keeps a study of its
own and never ranks another mode's figures; the table serves a store searched in it; its neighbours
leave A as it was; the crosscheck's report names the mode it checked. The GPU side (cheats caught,
honest kernels timed as a marginal) is in tests/test_gpu_bench.py."""

import sys
from pathlib import Path

import pytest
import torch

from cudal2.bench.results import MODES
from cudal2.bench.timing import ChainNeighbours, LayerPrelude, TimingConfig, measure
from cudal2.store.store import Store
from cudal2.store.table import SERVING_MODES, TunedTable
from cudal2.tuner.recorded import RecordedRunner
from test_objective import A, B, _search  # the same two-spec search on a recorded runner

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import crosscheck_winners  # noqa: E402


def test_chain_is_a_mode_the_table_serves():
    assert "chain" in MODES and SERVING_MODES.index("chain") < SERVING_MODES.index("offline")


def test_a_chain_search_measures_again_what_layer_mode_timed_and_keeps_its_own_study(tmp_path):
    store = Store(tmp_path / "s.db")
    layer = _search(store, RecordedRunner(model=lambda p, s: 0.05, baselines={"torch": 0.1}), modes=("layer",))
    assert layer.mode == "layer"
    runner = RecordedRunner(model=lambda p, s: 0.2 if s.key() == A.key() else 0.08, baselines={"torch": 0.1})
    chain = _search(store, runner)  # the default objective
    assert sorted(s.key() for s in runner.calls) == sorted(s.key() for s in (A, B))  # none told from layer's
    assert chain.mode == "chain" and chain.study.study_name.endswith("|relative@chain")
    assert chain.best.spec.key() == B.key() and set(chain.best.time_ms) == {"chain"}
    # the table: chain's ranking (the objective) where the store has one; layer's stays in its own mode
    (entry,) = list(TunedTable.for_serving(store))
    assert entry.mode == "chain" and entry.spec.key() == B.key() and entry.speedup() == pytest.approx(1.25)
    (layered,) = list(TunedTable.from_store(store, mode="layer"))
    assert layered.mode == "layer" and layered.speedup() == pytest.approx(2.0)


def test_a_store_searched_only_in_layer_mode_is_still_served_from_it(tmp_path):
    store = Store(tmp_path / "s.db")
    _search(store, RecordedRunner(model=lambda p, s: 0.05, baselines={"torch": 0.1}), modes=("layer",))
    (entry,) = list(TunedTable.for_serving(store))
    assert entry.mode == "layer" and entry.speedup() == pytest.approx(2.0)
    assert SERVING_MODES[:3] == ("chain", "mlp_chain", "layer")


def test_the_neighbours_leave_a_unchanged_and_write_their_own_outputs():
    a = [torch.randn(8, 16, dtype=torch.float16) for _ in range(2)]
    kept = [x.clone() for x in a]
    n = ChainNeighbours("cpu", a)
    n.before(0)
    n.after(1)
    assert all(torch.equal(x, y) for x, y in zip(a, kept))
    assert [w.shape for w in n.weights] == [(16, ChainNeighbours.COLUMNS)] * 2
    assert torch.allclose(n.outs[0].float(), (a[0] @ n.weights[0]).float(), rtol=1e-2, atol=1e-2)
    assert torch.allclose(n.outs[1].float(), (a[1] @ n.weights[1]).float(), rtol=1e-2, atol=1e-2)
    other = n.fresh()  # another placement: the same A, buffers of its own
    assert other.operands_a is a and [w.shape for w in other.weights] == [w.shape for w in n.weights]
    assert all(x.data_ptr() != y.data_ptr() for x, y in zip(other.weights + other.outs, n.weights + n.outs))
    prelude = LayerPrelude("cpu", 1 << 20, a)
    assert prelude.fresh().streamed.data_ptr() != prelude.streamed.data_ptr()


def test_chain_mode_on_the_cpu_times_like_the_others():
    calls = []
    got = measure({"x": lambda i: calls.append(i)}, 2, "chain", TimingConfig(groups=2), None)
    assert got["x"].timing.method == "cpu-wallclock" and calls


def test_the_crosschecks_report_names_its_mode():
    row = {"shape": "16x1024x4096-float16-NT", "spec": "s", "search": 1.1, "eval_chain": 1.08, "harness": 1.07,
           "agree": True, "eval_offline": 1.05, "eval_chain_kernel_ms": 0.01, "harness_kernel_ms": 0.0101,
           "eval_offline_kernel_ms": 0.0102, "eval_chain_torch_ms": 0.0108, "harness_torch_ms": 0.0108,
           "eval_offline_torch_ms": 0.0107}
    md = crosscheck_winners.markdown({"gpu": "g", "date": "d", "command": "c", "versions": "v", "mode": "chain",
                                      "rows": [row]})
    assert "the evaluator's chain ratio within 2% of the harness's: **1 of 1 shapes**" in md
    assert "| 16x1024x4096-float16-NT | `s` | 1.100 | 1.080 | 1.070 | 1.050 | 10.0 / 10.1 / 10.2 |" in md


class _Clock:
    """A GPU stand-in: graphs and calls advance one clock that fake events read."""

    def __init__(self):
        self.ms = 0.0

    def event(self, enable_timing=True):
        clock = self

        class Event:
            def record(self):
                self.at = clock.ms

            def elapsed_time(self, end):
                return end.at - self.at
        return Event()


def _fake_gpu(monkeypatch, clock: _Clock, neighbours_ms: float, fail: tuple = ()):
    """Replace the CUDA parts of chain mode: a captured graph advances the clock by its calls' costs and
    the neighbours' (prelude included) for each index; `fail` names contenders (or "floor") whose
    capture fails."""
    from cudal2.bench import timing

    class Graph:
        def __init__(self, call, indices):
            self.ms = sum(neighbours_ms + (call.ms if call is not None else 0.0) for _ in indices)

        def replay(self):
            clock.ms += self.ms

    def capture_chain(call, prelude, neighbours, indices, device):
        name = "floor" if call is None else call.name
        return (None, f"{name} refused") if name in fail else (Graph(call, indices), "")

    monkeypatch.setattr(timing, "_capture_chain", capture_chain)
    monkeypatch.setattr(timing, "_warmup", lambda call, n_sets, cfg, device: call.ms)
    monkeypatch.setattr(timing, "_replay_ms", lambda graph: graph.ms)
    monkeypatch.setattr(torch.cuda, "Event", clock.event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)


class _Buffers:
    """A stand-in for LayerPrelude and ChainNeighbours: fresh() gives another, and every one made is kept."""

    def __init__(self, made: list | None = None):
        self.made = made if made is not None else []
        self.made.append(self)

    def __call__(self, i):
        pass

    def fresh(self):
        return _Buffers(self.made)


def _contender(clock: _Clock, name: str, ms: float):
    def call(i):
        clock.ms += ms
    call.name, call.ms = name, ms
    return call


def test_a_chain_figure_is_the_replay_less_the_floors_per_call(monkeypatch):
    clock = _Clock()
    _fake_gpu(monkeypatch, clock, neighbours_ms=0.030)
    contenders = {"kernel": _contender(clock, "kernel", 0.010), "torch": _contender(clock, "torch", 0.013)}
    got = measure(contenders, 3, "chain", TimingConfig(groups=4, target_group_ms=0.5), torch.device("cuda"),
                  prelude=_Buffers(), neighbours=_Buffers())
    for name, ms in (("kernel", 0.010), ("torch", 0.013)):
        t = got[name].timing
        assert t.method == "cuda-graph-marginal" and t.groups == 4
        assert t.kernel_ms == pytest.approx(ms) and t.call_ms == pytest.approx(ms)
    assert got["kernel"].calls_per_group % 3 == 0 and got["kernel"].calls_per_group >= 12  # about 0.5 ms a group


def test_chain_mode_times_no_call_it_cannot_capture(monkeypatch):
    clock = _Clock()
    _fake_gpu(monkeypatch, clock, neighbours_ms=0.030, fail=("kernel",))
    contenders = {"kernel": _contender(clock, "kernel", 0.010), "torch": _contender(clock, "torch", 0.013)}
    got = measure(contenders, 2, "chain", TimingConfig(groups=3), torch.device("cuda"), prelude=_Buffers(),
                  neighbours=_Buffers())
    assert got["kernel"].timing is None and got["kernel"].error.startswith("graph capture failed (kernel refused)")
    assert got["torch"].timing.kernel_ms == pytest.approx(0.013)
    _fake_gpu(monkeypatch, clock, neighbours_ms=0.030, fail=("floor",))
    got = measure(contenders, 2, "chain", TimingConfig(groups=3), torch.device("cuda"), prelude=_Buffers(),
                  neighbours=_Buffers())
    assert all(m.timing is None and "the floor's graph capture failed" in m.error for m in got.values())


def test_chain_mode_spreads_its_groups_over_placements_of_its_buffers(monkeypatch):
    from cudal2.bench import timing

    clock = _Clock()
    _fake_gpu(monkeypatch, clock, neighbours_ms=0.030)
    captured = []  # (contender or "floor", the neighbours it was captured with)
    capture = timing._capture_chain
    monkeypatch.setattr(timing, "_capture_chain", lambda call, prelude, neighbours, indices, device: (
        captured.append((getattr(call, "name", "floor"), neighbours)), capture(call, prelude, neighbours, indices,
                                                                                device))[1])
    preludes, neighbours = _Buffers(), _Buffers()
    contenders = {"kernel": _contender(clock, "kernel", 0.010)}
    got = measure(contenders, 2, "chain", TimingConfig(groups=10, placements=4), torch.device("cuda"),
                  prelude=preludes, neighbours=neighbours)
    assert got["kernel"].timing.groups == 10 and got["kernel"].timing.kernel_ms == pytest.approx(0.010)
    assert len(preludes.made) == 4 and len(neighbours.made) == 4  # three fresh placements after the first
    timed = captured[1:]  # (the first capture sizes the group)
    assert [name for name, _ in timed] == ["floor", "kernel"] * 4
    assert [n for _, n in timed[::2]] == neighbours.made and [n for _, n in timed[1::2]] == neighbours.made
    got = measure(contenders, 2, "chain", TimingConfig(groups=2, placements=4), torch.device("cuda"),
                  prelude=_Buffers(), neighbours=_Buffers())
    assert got["kernel"].timing.groups == 2  # never more placements than groups


def test_chain_mode_on_a_gpu_needs_its_neighbours():
    with pytest.raises(ValueError, match="pass neighbours"):
        measure({"x": lambda i: None}, 1, "chain", TimingConfig(), torch.device("cuda"))


def test_the_placement_probe_reuses_one_placement_or_makes_each_anew():
    import chain_placement

    seen = []

    def timers_of(held):
        seen.append(held)
        return 1.0 + len(seen) / 100, held or object()

    assert chain_placement.ratios(timers_of, repeats=3) == [1.01, 1.02, 1.03]
    assert seen[0] is None and seen[1] is not None and seen[1] is seen[2]  # one placement, reused
    seen.clear()
    chain_placement.ratios(timers_of, repeats=3, fresh=True)
    assert seen == [None, None, None]  # each timing makes its own
    md = chain_placement.markdown({"gpu": "H200", "date": "d", "versions": "v", "gpu_uuid": "U", "command": "c",
                                   "rows": [{"shape": "1x3072x3072-float16-NT", "spec": "s",
                                             "harness_same": [1.09, 1.10], "harness_fresh": [1.09, 1.13],
                                             "evaluator_same": [1.14, 1.17], "evaluator_fresh": [1.12, 1.16]}]})
    assert "| 1x3072x3072-float16-NT | `s` | 1.090 to 1.100 (0.9%) | 1.090 to 1.130 (3.6%) |" in md


def test_the_stream_state_probe_sums_a_graphs_gaps_and_reports_each_state():
    import stream_state

    profiled = {"torch": {"span_us": 12.0, "kernels": [{"name": "a", "us": 1.0, "gap_us": 0.0},
                                                        {"name": "c", "us": 3.0, "gap_us": 0.25},
                                                        {"name": "b", "us": 2.0, "gap_us": 0.5}]},
                "floor": {"error": "3 kernels over 2 replays"}}
    got = stream_state.summarize(profiled)
    assert got["torch"]["gaps_us"] == 0.75 and got["torch"]["busy_us"] == 6.0 and got["floor"] == profiled["floor"]
    md = stream_state.markdown({"gpu": "H200", "date": "d", "versions": "v", "gpu_uuid": "U", "command": "c",
                                "shape": "1x3072x3072-float16-NT", "spec": "s",
                                "states": {"fresh": {"ms": {"torch": 0.0092, "kernel": 0.0085}, "profile": got}}})
    assert "| fresh | 9.20 | 8.50 | 1.082 | - | 0.375 |" in md
