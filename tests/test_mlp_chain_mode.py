"""mlp_chain mode (chain mode whose work before each call is an MLP's GEMMs, not a light GEMM): its plumbing on the
CPU. Its neighbours leave A as it was and cap the MLP's rows; the timing dispatches it as chain mode with those
neighbours and refuses chain's; a search in it keeps a study of its own, and the table serves it after chain."""

import pytest
import torch

from cudal2.bench.results import MODES
from cudal2.bench.timing import ChainNeighbours, MLPNeighbours, TimingConfig, measure, neighbours_for
from cudal2.store.store import Store
from cudal2.store.table import SERVING_MODES, TunedTable
from cudal2.tuner.recorded import RecordedRunner
from test_chain_mode import _Buffers, _Clock, _contender, _fake_gpu
from test_objective import A, B, _search


@pytest.fixture
def small_mlp(monkeypatch):
    """An MLP of a small model, so that the CPU test does not build 8B-class weights (352 MB)."""
    monkeypatch.setattr(MLPNeighbours, "HIDDEN", 32)
    monkeypatch.setattr(MLPNeighbours, "INTER", 112)
    monkeypatch.setattr(MLPNeighbours, "MAX_ROWS", 4)


def test_mlp_chain_is_a_mode_the_table_serves_after_chain():
    assert "mlp_chain" in MODES
    assert SERVING_MODES.index("chain") < SERVING_MODES.index("mlp_chain") < SERVING_MODES.index("layer")


def test_the_mlp_leaves_a_unchanged_caps_its_rows_and_computes_its_own_outputs(small_mlp):
    a = [torch.randn(6, 16, dtype=torch.float16) for _ in range(2)]
    kept = [x.clone() for x in a]
    n = MLPNeighbours("cpu", a)
    n.before(0)
    n.after(1)
    assert all(torch.equal(x, y) for x, y in zip(a, kept))
    assert n.mlp_in.shape == (4, 32)  # 6 rows, capped at MAX_ROWS
    gate, up, down = (w.float() for w in n.mlp_weights)
    h = n.mlp_in.float()
    assert [o.shape for o in n.mlp_outs] == [(4, 112), (4, 112), (4, 32)]
    assert torch.allclose(n.mlp_outs[0].float(), h @ gate.t(), rtol=1e-2, atol=1e-2)
    assert torch.allclose(n.mlp_outs[1].float(), h @ up.t(), rtol=1e-2, atol=1e-2)
    assert torch.allclose(n.mlp_outs[2].float(), n.mlp_outs[0].float() @ down.t(), rtol=2e-2, atol=2e-2)
    assert torch.allclose(n.outs[1].float(), (a[1] @ n.weights[1]).float(), rtol=1e-2, atol=1e-2)  # chain's after
    other = n.fresh()
    assert type(other) is MLPNeighbours and other.operands_a is a
    assert all(x.data_ptr() != y.data_ptr() for x, y in zip(other.mlp_weights, n.mlp_weights))


def test_each_mode_gets_its_own_neighbours(small_mlp):
    a = [torch.randn(2, 16, dtype=torch.float16)]
    assert type(neighbours_for("chain", "cpu", a)) is ChainNeighbours
    assert type(neighbours_for("mlp_chain", "cpu", a)) is MLPNeighbours
    assert neighbours_for("layer", "cpu", a) is None and neighbours_for("offline", "cpu", a) is None


def test_mlp_chain_on_the_cpu_times_like_the_others():
    calls = []
    got = measure({"x": lambda i: calls.append(i)}, 2, "mlp_chain", TimingConfig(groups=2), None)
    assert got["x"].timing.method == "cpu-wallclock" and calls


def test_mlp_chain_on_a_gpu_needs_an_mlp_before_each_call():
    with pytest.raises(ValueError, match=r"pass neighbours \(MLPNeighbours"):
        measure({"x": lambda i: None}, 1, "mlp_chain", TimingConfig(), torch.device("cuda"))
    chain = ChainNeighbours("cpu", [torch.randn(2, 16, dtype=torch.float16)])
    with pytest.raises(ValueError, match="pass MLPNeighbours, not ChainNeighbours"):
        measure({"x": lambda i: None}, 1, "mlp_chain", TimingConfig(), torch.device("cuda"), neighbours=chain)


def test_an_mlp_chain_figure_is_the_replay_less_the_floors_per_call(monkeypatch):
    clock = _Clock()
    _fake_gpu(monkeypatch, clock, neighbours_ms=0.090)  # the MLP: heavier neighbours than chain's
    contenders = {"kernel": _contender(clock, "kernel", 0.010), "torch": _contender(clock, "torch", 0.013)}
    got = measure(contenders, 3, "mlp_chain", TimingConfig(groups=4, target_group_ms=0.5), torch.device("cuda"),
                  prelude=_Buffers(), neighbours=_Buffers())
    for name, ms in (("kernel", 0.010), ("torch", 0.013)):
        t = got[name].timing
        assert t.method == "cuda-graph-marginal" and t.groups == 4 and t.kernel_ms == pytest.approx(ms)


def test_a_search_in_mlp_chain_keeps_its_own_study_and_the_table_prefers_chain(tmp_path):
    store = Store(tmp_path / "s.db")
    runner = RecordedRunner(model=lambda p, s: 0.2 if s.key() == A.key() else 0.08, baselines={"torch": 0.1})
    heavy = _search(store, runner, modes=("mlp_chain",))
    assert heavy.mode == "mlp_chain" and heavy.study.study_name.endswith("|relative@mlp_chain")
    assert heavy.best.spec.key() == B.key() and set(heavy.best.time_ms) == {"mlp_chain"}
    (entry,) = list(TunedTable.for_serving(store))  # a store searched only in mlp_chain is served from it
    assert entry.mode == "mlp_chain" and entry.speedup() == pytest.approx(1.25)
    _search(store, RecordedRunner(model=lambda p, s: 0.05, baselines={"torch": 0.1}))  # then chain
    (entry,) = list(TunedTable.for_serving(store))
    assert entry.mode == "chain" and entry.speedup() == pytest.approx(2.0)
