"""The one objective: chain mode (each call timed after the work a model's layer does before its
GEMM, between two GEMMs of its input) is the default of the search, the table, the op's serving rule,
sweeps and the training label, and measurements of different modes are never ranked against each other. The GPU side (events around
each call inside the graph, every cheat caught in this mode) is in tests/test_gpu_bench.py."""

import inspect

import pytest
import torch

from cudal2 import GemmProblem, KernelSpec
from cudal2.bench.results import DEFAULT_MODE, MODES
from cudal2.bench.timing import LayerPrelude
from cudal2.learn.samples import from_rows, label_mode
from cudal2.tuner.loop import run_search
from cudal2.proposers.proposal import Proposal
from cudal2.tuner.recorded import RecordedRunner
from cudal2.store.store import Store
from cudal2.store.table import TunedEntry, TunedTable

PROBLEM = GemmProblem(m=1024, n=1024, k=512)
A = KernelSpec(block_m=128, block_n=128, block_k=64, num_warps=8, stages=3, shape_specialization="dynamic")
B = KernelSpec(block_m=64, block_n=128, block_k=64, num_warps=4, stages=4, shape_specialization="dynamic")


class ListProposer:
    name = "list"

    def propose(self, problem, history, n):
        return [Proposal(s, reasoning="", source="list") for s in (A, B)[:n]]


def _search(store, runner, **kw):
    return run_search(PROBLEM, backends=("triton",), arch="sm_90a", proposer=ListProposer(), runner=runner,
                      store=store, budget=2, n_proposals=2, seed=0, progress=False, confirm=None, **kw)


def test_the_default_objective_is_chain_everywhere():
    assert DEFAULT_MODE == "chain" and "chain" in MODES
    from cudal2 import api

    assert inspect.signature(api.search).parameters["modes"].default == ("chain",)
    assert inspect.signature(TunedTable.from_store).parameters["mode"].default == "chain"
    from cudal2.dataset.sweep import run_sweep

    assert inspect.signature(run_sweep).parameters["modes"].default == ("chain",)
    from cudal2.cli import dataset as dataset_cli, search as search_cli

    assert inspect.signature(search_cli.search).parameters["mode"].default == ["chain"]
    assert inspect.signature(search_cli.show).parameters["mode"].default == "chain"
    assert inspect.signature(dataset_cli.sweep).parameters["mode"].default == ["chain"]
    from cudal2.dataset.export import LABEL_MODES

    assert LABEL_MODES[0] == "chain"
    from cudal2.model_tuning import SERVING_CONFIRM

    assert SERVING_CONFIRM.mode is None  # the search's own objective


def test_a_kernel_timed_only_offline_is_measured_again_in_the_objective_in_a_study_of_its_own(tmp_path):
    store = Store(tmp_path / "s.db")
    offline = _search(store, RecordedRunner(), modes=("offline",))
    assert offline.mode == "offline" and offline.study.study_name.endswith("|relative")
    runner = RecordedRunner()
    objective = _search(store, runner)
    # both specs were stored with offline figures only: each is measured again, never told from them
    assert sorted(s.key() for s in runner.calls) == sorted(s.key() for s in (A, B))
    assert objective.mode == "chain" and objective.study.study_name.endswith("|relative@chain")
    assert set(objective.best.time_ms) == {"chain"}
    # an offline search of the same store resumes its own study and measures nothing
    again = RecordedRunner()
    _search(store, again, modes=("offline",))
    assert again.calls == []


def test_the_table_keeps_each_entrys_mode_and_reads_old_tables_as_offline(tmp_path):
    store = Store(tmp_path / "s.db")
    _search(store, RecordedRunner(model=lambda p, s: 0.05, baselines={"torch": 0.1}))
    (entry,) = list(TunedTable.for_serving(store))
    assert entry.mode == "chain" and entry.speedup() == pytest.approx(2.0)
    assert list(TunedTable.from_store(store, mode="offline")) == []  # no offline figure, no offline entry
    d = entry.to_dict()
    assert TunedEntry.from_dict(d).mode == "chain"
    del d["mode"]
    assert TunedEntry.from_dict(d).mode == "offline"


def test_a_spec_measured_again_in_another_mode_keeps_its_table_in_the_first(tmp_path):
    store = Store(tmp_path / "s.db")
    _search(store, RecordedRunner(model=lambda p, s: 0.05, baselines={"torch": 0.1}), modes=("offline",))
    _search(store, RecordedRunner(model=lambda p, s: 0.2, baselines={"torch": 0.1}))  # chain: both lose
    offline = TunedTable.from_store(store, mode="offline")
    assert [(e.mode, e.kernel_ms, e.baselines_ms) for e in offline] == [("offline", 0.05, {"torch": 0.1})]
    (chain,) = list(TunedTable.from_store(store, mode="chain"))
    assert (chain.kernel_ms, chain.baselines_ms) == (0.2, {"torch": 0.1})


def _row(mode, kernel, torch_ms, **spec):
    row = {"status": "ok", "m": 64, "n": 64, "k": 64, "dtype": "float16", "layout": "NN", "epilogue": "",
           f"kernel_ms.{mode}": kernel, f"torch_ms.{mode}": torch_ms}
    row.update({f"spec.{k}": v for k, v in spec.items()})
    return row


def test_a_training_set_takes_its_rewards_from_one_mode_never_a_mix():
    layer = _row("layer", 0.05, 0.1, block_m=64)
    offline = _row("offline", 0.2, 0.1, block_m=128)
    assert label_mode([offline, layer]) == "layer"
    samples = list(from_rows([offline, layer]))
    assert [(s.spec.block_m, s.mode) for s in samples] == [(64, "layer")]  # the offline-only row is left out
    assert samples[0].log_speedup == pytest.approx(0.6931, abs=1e-3)
    (old,) = from_rows([offline])  # a store measured before layer mode: offline rewards
    assert old.mode == "offline" and old.log_speedup == pytest.approx(-0.6931, abs=1e-3)
    chain = _row("chain", 0.08, 0.1, block_m=32)
    assert label_mode([offline, layer, chain]) == "chain"  # the objective's rewards where any row has them
    assert [(s.spec.block_m, s.mode) for s in from_rows([offline, layer, chain])] == [(32, "chain")]


def test_the_dataset_export_has_the_objectives_label_and_the_older_ones():
    from cudal2.dataset.export import COLUMNS

    for column in ("kernel_ms.chain", "torch_ms.chain", "speedup_vs_torch.chain", "speedup_vs_torch.layer",
                   "speedup_vs_torch.offline"):
        assert column in COLUMNS


def test_the_layer_prelude_leaves_a_unchanged():
    a = [torch.randn(8, 16, dtype=torch.float16) for _ in range(2)]
    kept = [x.clone() for x in a]
    prelude = LayerPrelude("cpu", 1 << 16, a)
    prelude(0)
    prelude(1)
    assert all(torch.equal(x, y) for x, y in zip(a, kept))
    assert prelude.streamed.numel() * 2 >= 2 * (1 << 16) and float(prelude.sink) == prelude.streamed.numel()


def test_a_sweep_in_the_objective_measures_again_the_pairs_timed_only_offline(tmp_path):
    from cudal2.dataset.sweep import run_sweep

    store = Store(tmp_path / "s.db")
    first = run_sweep([PROBLEM], [A, B], RecordedRunner(), store, modes=("offline",))
    assert first.measured == 2
    runner = RecordedRunner()
    again = run_sweep([PROBLEM], [A, B], runner, store)
    assert again.measured == 2 and len(runner.calls) == 2
    assert run_sweep([PROBLEM], [A, B], RecordedRunner(), store).already == 2
