"""Confirmation (cudal2.search.confirm): the leaders of a search are timed again and the winner is
named by the median of those rounds, not by the one lucky trial that made it a leader."""

import contextlib
import time

import pytest

from cudal2 import GemmProblem, KernelSpec
from cudal2.search.confirm import Confirm
from cudal2.search.loop import run_search
from cudal2.search.proposal import Proposal
from cudal2.search.recorded import RecordedRunner
from cudal2.search.store import Store

PROBLEM = GemmProblem(m=1024, n=1024, k=512)
# the shape-generic kernels a search measures by default (Refiner.kernel_of)
LUCKY = KernelSpec(block_m=128, block_n=64, block_k=32, num_warps=4, stages=2, shape_specialization="dynamic")
STEADY = KernelSpec(block_m=64, block_n=64, block_k=32, num_warps=4, stages=2, shape_specialization="dynamic")
SLOW = KernelSpec(block_m=64, block_n=128, block_k=32, num_warps=4, stages=2, shape_specialization="dynamic")
TORCH_MS = 0.100


class ListProposer:
    name = "list"

    def __init__(self, specs):
        self.specs = specs

    def propose(self, problem, history, n):
        return [Proposal(s, reasoning="", source="list") for s in self.specs[:n]]


class Sequenced(RecordedRunner):
    """Each spec's successive measurements, in order (the last repeats); a str is a failure status."""

    def __init__(self, times: dict):
        self.times = {s.key(): list(v) for s, v in times.items()}
        self.seen: dict[str, int] = {}
        super().__init__(model=self._next, baselines={"torch": TORCH_MS})

    def _next(self, problem, spec):
        i = self.seen.get(spec.key(), 0)
        self.seen[spec.key()] = i + 1
        seq = self.times[spec.key()]
        return seq[min(i, len(seq) - 1)]


def search(runner, store, confirm=Confirm(top=2, rounds=3), **kw):
    return run_search(PROBLEM, backends=("triton",), arch="sm_90a", proposer=ListProposer([LUCKY, STEADY, SLOW]),
                      runner=runner, store=store, budget=3, n_proposals=3, seed=0, progress=False, confirm=confirm,
                      **kw)


def test_the_winner_is_named_by_its_confirmation_rounds_not_its_lucky_trial(tmp_path):
    # LUCKY measured 80 us once and 110 us every time after; STEADY 90 us each time
    runner = Sequenced({LUCKY: [0.080, 0.110], STEADY: [0.090], SLOW: [0.200]})
    res = search(runner, Store(tmp_path / "s.db"))
    assert res.best.spec == STEADY and res.confirmed_rounds == 3
    assert res.speedup["torch"] == pytest.approx(TORCH_MS / 0.090)
    assert res.trial_speedup["torch"] == pytest.approx(TORCH_MS / 0.080)  # what the search alone would claim
    assert res.best.time_ms["offline"] == pytest.approx(0.090)
    # the two leaders were timed three more times each; SLOW (third) never again
    assert [s.key() for s in runner.calls].count(LUCKY.key()) == 4
    assert [s.key() for s in runner.calls].count(STEADY.key()) == 4
    assert [s.key() for s in runner.calls].count(SLOW.key()) == 1
    assert "median of 3 offline confirmation rounds" in res.summary()


def test_without_confirmation_the_lucky_trial_wins(tmp_path):
    runner = Sequenced({LUCKY: [0.080, 0.110], STEADY: [0.090], SLOW: [0.200]})
    res = search(runner, Store(tmp_path / "s.db"), confirm=None)
    assert res.best.spec == LUCKY and res.confirmed_rounds == 0 and len(runner.calls) == 3
    assert "unconfirmed" in res.summary()


def test_the_median_round_gives_the_figures(tmp_path):
    runner = Sequenced({LUCKY: [0.080, 0.100, 0.070, 0.130], STEADY: [0.200], SLOW: [0.300]})
    res = search(runner, Store(tmp_path / "s.db"))
    assert res.best.spec == LUCKY and res.best.time_ms["offline"] == pytest.approx(0.100)


def test_a_leader_that_fails_a_confirmation_round_is_rejected_and_the_next_one_confirmed(tmp_path):
    # LUCKY passed its search trial, then gave a wrong answer: it must never be the winner
    runner = Sequenced({LUCKY: [0.080, 0.080, "incorrect"], STEADY: [0.090], SLOW: [0.120]})
    res = search(runner, Store(tmp_path / "s.db"))
    assert res.best.spec == STEADY and res.confirmed_rounds == 3
    assert [r.spec for r in res.rejected] == [LUCKY] and res.rejected[0].status == "incorrect"
    # SLOW moved up into the top two and was confirmed in LUCKY's place
    assert [s.key() for s in runner.calls].count(SLOW.key()) == 4


def test_a_deadline_leaves_confirmation_to_the_resume(tmp_path):
    store = Store(tmp_path / "s.db")
    runner = Sequenced({LUCKY: [0.080, 0.110], STEADY: [0.090], SLOW: [0.200]})
    res = search(runner, store, deadline=time.monotonic() - 1)  # past: measures nothing at all
    assert res.evaluations == 0 and res.best is None
    res = search(runner, store)
    assert res.best.spec == STEADY and res.confirmed_rounds == 3
    rounds = len(store.confirmations(PROBLEM))
    again = search(runner, store)  # everything is stored: nothing measured again
    assert len(store.confirmations(PROBLEM)) == rounds and again.best.spec == STEADY


@pytest.mark.parametrize("kw", [dict(top=0), dict(rounds=-1)])
def test_bad_confirm_settings_are_refused(kw):
    with pytest.raises(ValueError, match="top must be >= 1 and rounds >= 0"):
        Confirm(**kw)


def test_the_tuned_table_takes_confirmed_figures_and_never_a_rejected_kernel(tmp_path):
    from cudal2 import TunedTable

    store = Store(tmp_path / "s.db")
    # LUCKY: a fast trial, then a wrong answer; STEADY 90 us, 1.11x torch, every time
    search(Sequenced({LUCKY: [0.050, "incorrect"], STEADY: [0.090], SLOW: [0.120]}), store)
    (entry,) = list(TunedTable.from_store(store))
    assert entry.spec == STEADY and entry.speedup() == pytest.approx(TORCH_MS / 0.090)
    # unconfirmed, the table would have routed cudal2.matmul to the kernel that later failed
    other = Store(tmp_path / "o.db")
    search(Sequenced({LUCKY: [0.050, "incorrect"], STEADY: [0.090], SLOW: [0.120]}), other, confirm=None)
    (entry,) = list(TunedTable.from_store(other))
    assert entry.spec == LUCKY


def test_a_lucky_trial_just_above_torch_does_not_route_matmul_away_from_torch(tmp_path):
    from cudal2 import TunedTable

    store = Store(tmp_path / "s.db")
    search(Sequenced({LUCKY: [0.095, 0.105], STEADY: [0.110], SLOW: [0.120]}), store)
    table = TunedTable.from_store(store)
    assert table.lookup(PROBLEM) is None  # confirmed at 0.95x torch: cudal2.matmul keeps torch.matmul


def test_rounds_timed_in_another_mode_do_not_count(tmp_path):
    # a store confirmed offline, then searched sustained: the offline rounds neither rank the
    # sustained leaders nor count as failures; a failed round fails every mode
    store = Store(tmp_path / "s.db")
    runner = Sequenced({LUCKY: [0.080, 0.110], STEADY: [0.090], SLOW: [0.200]})
    search(runner, store)
    from cudal2.search.confirm import rounds_in_mode, summarize

    rows = store.confirmations(PROBLEM)
    assert len(rows) == 6 and len(rounds_in_mode(rows, "offline")) == 6
    assert rounds_in_mode(rows, "sustained") == [] and summarize(rows, "torch", "sustained") == {}
    runner = Sequenced({LUCKY: [0.080, 0.080, "incorrect"], STEADY: [0.090], SLOW: [0.120]})
    res = search(runner, Store(tmp_path / "t.db"), modes=("sustained",))
    assert res.best.spec == STEADY and res.confirmed_rounds == 3 and set(res.best.time_ms) == {"sustained"}
    rows = Store(tmp_path / "t.db").confirmations(PROBLEM)
    failed = [r for r in rows if not r["result"].ok]
    assert failed and all(r in rounds_in_mode(rows, "offline") for r in failed)


class PowerHungry(Sequenced):
    """LUCKY is the fastest offline but slow sustained (it draws more power); STEADY the other way.
    hungry: the specs 1.3x slower sustained (None: every one); torch.matmul the same in both modes."""

    def __init__(self, times: dict, hungry=(LUCKY,)):
        super().__init__(times)
        self.hungry = hungry

    def evaluate(self, problem, specs, modes=("offline",)):
        out = super().evaluate(problem, specs, modes)
        for res in out:
            if res.ok and "sustained" in res.timing:
                t = res.timing["sustained"]
                factor = 1.3 if self.hungry is None or res.spec in self.hungry else 1.0
                res.timing["sustained"] = t.__class__(kernel_ms=t.kernel_ms * factor, call_ms=t.call_ms * factor,
                                                      groups=t.groups)
        return out


def test_leaders_found_offline_are_ranked_in_the_confirmation_mode(tmp_path):
    runner = PowerHungry({LUCKY: [0.080], STEADY: [0.090], SLOW: [0.200]})
    offline = search(runner, Store(tmp_path / "a.db"))
    assert offline.best.spec == LUCKY and offline.mode == "offline"
    runner = PowerHungry({LUCKY: [0.080], STEADY: [0.090], SLOW: [0.200]})
    res = search(runner, Store(tmp_path / "b.db"), confirm=Confirm(top=2, rounds=3, mode="sustained"))
    # the trials ran offline only; the confirmation rounds timed both modes and ranked sustained
    assert res.best.spec == STEADY and res.mode == "sustained" and res.confirmed_rounds == 3
    assert set(res.best.time_ms) == {"offline", "sustained"}
    assert res.speedup["torch"] == pytest.approx(TORCH_MS / 0.090)
    assert res.trial_speedup["torch"] == pytest.approx(TORCH_MS / 0.080)  # LUCKY's offline trial
    assert "median of 3 sustained confirmation rounds" in res.summary()
    with pytest.raises(ValueError, match="sustained"):
        Confirm(mode="warm")


class OnAnotherGpu(Sequenced):
    def environment(self):
        env = super().environment()
        return env.__class__(**{**env.__dict__, "gpu_name": "another GPU"})


def test_rounds_from_another_gpu_neither_count_nor_rank(tmp_path):
    # confirmed on one GPU (STEADY wins there); the same store searched on another GPU, where
    # LUCKY is steady: its leaders get rounds of their own, and only those decide
    store = Store(tmp_path / "s.db")
    first = search(Sequenced({LUCKY: [0.080, 0.110], STEADY: [0.090], SLOW: [0.200]}), store)
    assert first.best.spec == STEADY and len(store.confirmations(PROBLEM)) == 6
    runner = OnAnotherGpu({LUCKY: [0.080], STEADY: [0.090], SLOW: [0.200]})
    res = search(runner, store)
    assert len(runner.calls) == 6  # the two leaders, three rounds each, timed on this GPU
    assert res.best.spec == LUCKY and res.confirmed_rounds == 3
    assert res.best.time_ms["offline"] == pytest.approx(0.080)
    gpus = {r["environment"]["gpu_name"] for r in store.confirmations(PROBLEM)}
    assert gpus == {"recorded", "another GPU"}


def test_the_tuned_table_ranks_in_the_mode_asked_for(tmp_path):
    from cudal2.search.table import TunedTable

    store = Store(tmp_path / "s.db")
    search(PowerHungry({LUCKY: [0.080], STEADY: [0.090], SLOW: [0.200]}), store,
           confirm=Confirm(top=2, rounds=3, mode="sustained"))
    (offline,) = list(TunedTable.from_store(store, mode="offline"))
    (sustained,) = list(TunedTable.from_store(store, mode="sustained"))
    assert offline.spec == LUCKY and offline.kernel_ms == pytest.approx(0.080)
    assert sustained.spec == STEADY and sustained.kernel_ms == pytest.approx(0.090)


def test_the_serving_table_takes_sustained_rounds_where_they_exist(tmp_path):
    # LUCKY beats torch offline (0.080 against 0.100) and loses sustained (0.104): what the op serves
    # is torch. A problem confirmed offline alone keeps its offline winner.
    from cudal2.search.table import TunedTable

    store = Store(tmp_path / "s.db")
    times = {LUCKY: [0.080], STEADY: [0.090], SLOW: [0.200]}
    search(PowerHungry(times, hungry=None), store, confirm=Confirm(top=2, rounds=3, mode="sustained"))
    other = GemmProblem(m=2048, n=1024, k=512)
    run_search(other, backends=("triton",), arch="sm_90a", proposer=ListProposer([LUCKY, STEADY, SLOW]),
               runner=Sequenced(times), store=store, budget=3, n_proposals=3, seed=0, progress=False,
               confirm=Confirm(top=2, rounds=3))
    assert TunedTable.from_store(store).lookup(PROBLEM).spec == LUCKY  # offline, it wins
    serving = TunedTable.for_serving(store)
    assert serving.lookup(PROBLEM) is None
    assert [e.kernel_ms for e in serving if e.problem == PROBLEM] == [pytest.approx(0.104)]
    assert serving.lookup(other).spec == LUCKY


class BriefTrials(Sequenced):
    """Says which timing each evaluate() call got: brief outside full_timing(), full inside it."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.full, self.timings = False, []

    @contextlib.contextmanager
    def full_timing(self):
        self.full = True
        try:
            yield self
        finally:
            self.full = False

    def evaluate(self, problem, specs, modes=("offline",)):
        self.timings += ["full" if self.full else "brief"] * len(specs)
        return super().evaluate(problem, specs, modes)


def test_trials_are_timed_briefly_and_the_confirmation_rounds_in_full(tmp_path):
    runner = BriefTrials({LUCKY: [0.080], STEADY: [0.090], SLOW: [0.200]})
    res = search(runner, Store(tmp_path / "s.db"))
    assert res.confirmed_rounds == 3
    brief, full = runner.timings.count("brief"), runner.timings.count("full")
    assert brief == res.evaluations and full == len(Store(tmp_path / "s.db").confirmations(PROBLEM)) > 0
    assert runner.timings == ["brief"] * brief + ["full"] * full


def test_the_evaluator_times_trials_with_trial_timing_and_confirmations_with_timing():
    from cudal2.bench.evaluator import Evaluator
    from cudal2.bench.timing import TimingConfig

    brief = TimingConfig.sweep()
    ev = Evaluator(device="cpu", trial_timing=brief)
    assert ev.timing is brief
    with ev.full_timing():
        assert ev.timing == TimingConfig()
    assert ev.timing is brief and Evaluator(device="cpu").timing == TimingConfig()
