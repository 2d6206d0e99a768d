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
from cudal2.bench.timing import ChainNeighbours, TimingConfig, measure
from cudal2.store.store import Store
from cudal2.store.table import SERVING_MODES, TunedTable
from cudal2.tuner.recorded import RecordedRunner
from test_layer_mode import A, B, _search  # the same two-spec search on a recorded runner

ROOT = Path(__file__).resolve().parent.parent


def test_chain_is_a_mode_the_table_serves():
    assert "chain" in MODES and SERVING_MODES.index("chain") < SERVING_MODES.index("offline")


def test_a_chain_search_measures_again_what_layer_mode_timed_and_keeps_its_own_study(tmp_path):
    store = Store(tmp_path / "s.db")
    layer = _search(store, RecordedRunner(model=lambda p, s: 0.05, baselines={"torch": 0.1}))
    assert layer.mode == "layer"
    runner = RecordedRunner(model=lambda p, s: 0.2 if s.key() == A.key() else 0.08, baselines={"torch": 0.1})
    chain = _search(store, runner, modes=("chain",))
    assert sorted(s.key() for s in runner.calls) == sorted(s.key() for s in (A, B))  # none told from layer's
    assert chain.mode == "chain" and chain.study.study_name.endswith("|relative@chain")
    assert chain.best.spec.key() == B.key() and set(chain.best.time_ms) == {"chain"}
    # the table: layer's ranking where the store has one (the default objective), chain's where only it
    (entry,) = list(TunedTable.for_serving(store))
    assert entry.mode == "layer"
    (chained,) = list(TunedTable.from_store(store, mode="chain"))
    assert chained.mode == "chain" and chained.spec.key() == B.key() and chained.speedup() == pytest.approx(1.25)


def test_a_store_searched_only_in_chain_mode_is_served_in_it(tmp_path):
    store = Store(tmp_path / "s.db")
    _search(store, RecordedRunner(model=lambda p, s: 0.05, baselines={"torch": 0.1}), modes=("chain",))
    (entry,) = list(TunedTable.for_serving(store))
    assert entry.mode == "chain" and entry.speedup() == pytest.approx(2.0)


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


def test_chain_mode_on_the_cpu_times_like_the_others():
    calls = []
    got = measure({"x": lambda i: calls.append(i)}, 2, "chain", TimingConfig(groups=2), None)
    assert got["x"].timing.method == "cpu-wallclock" and calls


def test_the_crosschecks_report_names_its_mode():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import crosscheck_winners

    row = {"shape": "16x1024x4096-float16-NT", "spec": "s", "search": 1.1, "eval_chain": 1.08, "harness": 1.07,
           "agree": True, "eval_offline": 1.05, "eval_chain_kernel_ms": 0.01, "harness_kernel_ms": 0.0101,
           "eval_offline_kernel_ms": 0.0102, "eval_chain_torch_ms": 0.0108, "harness_torch_ms": 0.0108,
           "eval_offline_torch_ms": 0.0107}
    md = crosscheck_winners.markdown({"gpu": "g", "date": "d", "command": "c", "versions": "v", "mode": "chain",
                                      "rows": [row]})
    assert "the evaluator's chain ratio within 2% of the harness's: **1 of 1 shapes**" in md
    assert "| 16x1024x4096-float16-NT | `s` | 1.100 | 1.080 | 1.070 | 1.050 | 10.0 / 10.1 / 10.2 |" in md
