"""Confirmation (cudal2.tuner.confirm): the leaders of a search are timed again and the winner is
named by the median of those rounds, not by the one lucky trial that made it a leader."""

import contextlib
import time

import pytest

from cudal2 import GemmProblem, KernelSpec
from cudal2.tuner.confirm import Confirm
from cudal2.tuner.loop import run_search
from cudal2.proposers.proposal import Proposal
from cudal2.tuner.recorded import RecordedRunner
from cudal2.store.store import Store
from cudal2.bench.results import DEFAULT_MODE

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


def search(runner, store, confirm=Confirm(top=2, rounds=3, static_twins=0), **kw):
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
    assert res.best.time_ms[DEFAULT_MODE] == pytest.approx(0.090)
    # the two leaders were timed three more times each; SLOW (third) never again
    assert [s.key() for s in runner.calls].count(LUCKY.key()) == 4
    assert [s.key() for s in runner.calls].count(STEADY.key()) == 4
    assert [s.key() for s in runner.calls].count(SLOW.key()) == 1
    assert f"median of 3 {DEFAULT_MODE} confirmation rounds" in res.summary()


def test_without_confirmation_the_lucky_trial_wins(tmp_path):
    runner = Sequenced({LUCKY: [0.080, 0.110], STEADY: [0.090], SLOW: [0.200]})
    res = search(runner, Store(tmp_path / "s.db"), confirm=None)
    assert res.best.spec == LUCKY and res.confirmed_rounds == 0 and len(runner.calls) == 3
    assert "unconfirmed" in res.summary()


def test_the_median_round_gives_the_figures(tmp_path):
    runner = Sequenced({LUCKY: [0.080, 0.100, 0.070, 0.130], STEADY: [0.200], SLOW: [0.300]})
    res = search(runner, Store(tmp_path / "s.db"))
    assert res.best.spec == LUCKY and res.best.time_ms[DEFAULT_MODE] == pytest.approx(0.100)


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


@pytest.mark.parametrize("kw", [dict(top=0), dict(rounds=-1), dict(static_twins=-1)])
def test_bad_confirm_settings_are_refused(kw):
    with pytest.raises(ValueError, match="top must be >= 1, rounds and static_twins >= 0"):
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
    from cudal2.store.rounds import rounds_in_mode, summarize

    rows = store.confirmations(PROBLEM)
    assert len(rows) == 6 and len(rounds_in_mode(rows, DEFAULT_MODE)) == 6
    assert rounds_in_mode(rows, "sustained") == [] and summarize(rows, "torch", "sustained") == {}
    runner = Sequenced({LUCKY: [0.080, 0.080, "incorrect"], STEADY: [0.090], SLOW: [0.120]})
    res = search(runner, Store(tmp_path / "t.db"), modes=("sustained",))
    assert res.best.spec == STEADY and res.confirmed_rounds == 3 and set(res.best.time_ms) == {"sustained"}
    rows = Store(tmp_path / "t.db").confirmations(PROBLEM)
    failed = [r for r in rows if not r["result"].ok]
    assert failed and all(r in rounds_in_mode(rows, DEFAULT_MODE) for r in failed)


class PowerHungry(Sequenced):
    """LUCKY is the fastest offline but slow sustained (it draws more power); STEADY the other way.
    hungry: the specs 1.3x slower sustained (None: every one); torch.matmul the same in both modes."""

    def __init__(self, times: dict, hungry=(LUCKY,)):
        super().__init__(times)
        self.hungry = hungry

    def evaluate(self, problem, specs, modes=(DEFAULT_MODE,)):
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
    assert offline.best.spec == LUCKY and offline.mode == DEFAULT_MODE
    runner = PowerHungry({LUCKY: [0.080], STEADY: [0.090], SLOW: [0.200]})
    res = search(runner, Store(tmp_path / "b.db"), confirm=Confirm(top=2, rounds=3, static_twins=0, mode="sustained"))
    # the trials ran offline only; the confirmation rounds timed both modes and ranked sustained
    assert res.best.spec == STEADY and res.mode == "sustained" and res.confirmed_rounds == 3
    assert set(res.best.time_ms) == {DEFAULT_MODE, "sustained"}
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
    assert res.best.time_ms[DEFAULT_MODE] == pytest.approx(0.080)
    gpus = {r["environment"]["gpu_name"] for r in store.confirmations(PROBLEM)}
    assert gpus == {"recorded", "another GPU"}


def test_the_tuned_table_ranks_in_the_mode_asked_for(tmp_path):
    from cudal2.store.table import TunedTable

    store = Store(tmp_path / "s.db")
    search(PowerHungry({LUCKY: [0.080], STEADY: [0.090], SLOW: [0.200]}), store,
           confirm=Confirm(top=2, rounds=3, static_twins=0, mode="sustained"))
    (offline,) = list(TunedTable.from_store(store, mode=DEFAULT_MODE))
    (sustained,) = list(TunedTable.from_store(store, mode="sustained"))
    assert offline.spec == LUCKY and offline.kernel_ms == pytest.approx(0.080)
    assert sustained.spec == STEADY and sustained.kernel_ms == pytest.approx(0.090)


def test_the_serving_table_ranks_as_the_model_calls_then_falls_back_to_older_modes(tmp_path):
    # A store searched before the objective's mode existed: offline trials, sustained rounds. LUCKY beats
    # torch offline (0.080 against 0.100) and loses sustained (0.104): what the op serves there is torch.
    # A problem searched in the objective's mode is served by that ranking, which wins over sustained.
    from cudal2.store.table import TunedTable

    store = Store(tmp_path / "s.db")
    times = {LUCKY: [0.080], STEADY: [0.090], SLOW: [0.200]}
    search(PowerHungry(times, hungry=None), store, modes=("offline",),
           confirm=Confirm(top=2, rounds=3, static_twins=0, mode="sustained"))
    other = GemmProblem(m=2048, n=1024, k=512)
    run_search(other, backends=("triton",), arch="sm_90a", proposer=ListProposer([LUCKY, STEADY, SLOW]),
               runner=Sequenced(times), store=store, budget=3, n_proposals=3, seed=0, progress=False,
               confirm=Confirm(top=2, rounds=3, static_twins=0))
    assert TunedTable.from_store(store, mode="offline").lookup(PROBLEM).spec == LUCKY  # offline, it wins
    serving = TunedTable.for_serving(store)
    assert serving.lookup(PROBLEM) is None
    assert [(e.kernel_ms, e.mode) for e in serving if e.problem == PROBLEM] == [(pytest.approx(0.104), "sustained")]
    assert serving.lookup(other).spec == LUCKY and serving.lookup(other).mode == DEFAULT_MODE
    # searched again as the model calls it, PROBLEM is served by that ranking
    search(Sequenced(times), store)
    entry = TunedTable.for_serving(store).lookup(PROBLEM)
    assert entry.spec == LUCKY and entry.mode == DEFAULT_MODE and entry.kernel_ms == pytest.approx(0.080)


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

    def evaluate(self, problem, specs, modes=(DEFAULT_MODE,)):
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


# ---- static twins: the leader's kernel compiled for the one shape, kept only where it pays ------
def static(spec):
    return spec.replace(shape_specialization="static")


def twin_search(runner, store, **kw):
    return search(runner, store, confirm=Confirm(top=2, rounds=3, static_twins=1), **kw)


def test_a_static_twin_that_pays_is_the_winner_and_what_the_table_serves(tmp_path):
    from cudal2 import TunedTable

    store = Store(tmp_path / "s.db")
    runner = Sequenced({LUCKY: [0.080], STEADY: [0.090], SLOW: [0.200], static(LUCKY): [0.076]})
    res = twin_search(runner, store)
    # the best trial's twin was timed beside the two leaders in each of their three rounds; no other twin
    calls = [s.key() for s in runner.calls]
    assert calls.count(static(LUCKY).key()) == 3 and static(STEADY).key() not in calls
    assert res.best.spec == static(LUCKY) and "shapes=static" in res.best.source
    assert res.speedup["torch"] == pytest.approx(TORCH_MS / 0.076)
    assert TunedTable.from_store(store).lookup(PROBLEM).spec == static(LUCKY)


@pytest.mark.parametrize("twin_ms", [0.080, 0.0795])  # as fast; 0.6% faster, within STATIC_MARGIN
def test_a_static_twin_that_does_not_beat_its_original_by_the_margin_is_not_kept(tmp_path, twin_ms):
    from cudal2 import TunedTable
    from cudal2.store.rounds import STATIC_MARGIN

    assert twin_ms > 0.080 * (1 - STATIC_MARGIN)
    store = Store(tmp_path / "s.db")
    res = twin_search(Sequenced({LUCKY: [0.080], STEADY: [0.090], SLOW: [0.200], static(LUCKY): [twin_ms]}), store)
    assert res.best.spec == LUCKY and res.rejected == []
    assert TunedTable.from_store(store).lookup(PROBLEM).spec == LUCKY


def test_a_twin_its_backend_cannot_build_is_dropped_after_one_round_and_a_wrong_one_is_rejected(tmp_path):
    runner = Sequenced({LUCKY: [0.080], STEADY: [0.090], SLOW: [0.200], static(LUCKY): ["unsupported"]})
    res = twin_search(runner, Store(tmp_path / "a.db"))
    assert res.best.spec == LUCKY and res.rejected == []
    assert [s.key() for s in runner.calls].count(static(LUCKY).key()) == 1  # never asked again
    runner = Sequenced({LUCKY: [0.080], STEADY: [0.090], SLOW: [0.200], static(LUCKY): [0.050, "incorrect"]})
    res = twin_search(runner, Store(tmp_path / "b.db"))
    assert res.best.spec == LUCKY and [r.spec for r in res.rejected] == [static(LUCKY)]


def test_with_look_ahead_the_best_kernels_twin_compiles_before_the_confirmation_rounds(tmp_path):
    runner = Sequenced({LUCKY: [0.080], STEADY: [0.090], SLOW: [0.200], static(LUCKY): [0.076]})
    twin_search(runner, Store(tmp_path / "s.db"), lookahead=True, batch_size=1)
    events = runner.events
    first_round = next(i for i, (kind, keys) in enumerate(events) if kind == "evaluate" and static(LUCKY).key() in keys)
    assert ("prefetch", [static(LUCKY).key()]) in events[:first_round]
    # only the leader's twin, once: a kernel that never led compiles no twin
    assert sum(static(STEADY).key() in keys for kind, keys in events if kind == "prefetch") == 0
    assert sum(keys == [static(LUCKY).key()] for kind, keys in events if kind == "prefetch") == 1


def test_without_confirmation_rounds_no_twin_compiles_ahead(tmp_path):
    runner = Sequenced({LUCKY: [0.080], STEADY: [0.090], SLOW: [0.200], static(LUCKY): [0.076]})
    search(runner, Store(tmp_path / "s.db"), confirm=Confirm(top=2, rounds=0, static_twins=1), lookahead=True,
           batch_size=1)
    prefetched = {k for kind, keys in runner.events if kind == "prefetch" for k in keys}
    assert prefetched and static(LUCKY).key() not in prefetched


class PeersInFullTiming(BriefTrials):
    """torch alone beside the trials; torch and a peer inside full_timing() (as the evaluator with
    trial_baselines)."""

    def baselines(self, problem, modes=(DEFAULT_MODE,)):
        out = super().baselines(problem, modes)
        if self.full:
            out["quack_autotune"] = out["torch"].__class__(name="quack_autotune", timing=out["torch"].timing)
        return out


def test_trials_time_the_reference_alone_and_the_confirmation_rounds_every_baseline(tmp_path):
    store = Store(tmp_path / "s.db")
    res = search(PeersInFullTiming({LUCKY: [0.080], STEADY: [0.090], SLOW: [0.200]}), store)
    assert set(res.baselines) == {"torch", "quack_autotune"} and "quack_autotune" in res.speedup
    assert set(store.baselines(PROBLEM)) == {"torch", "quack_autotune"}  # kept for reports and the table
    assert all(set(r["baselines"]) == {"torch"} for r in store.kernels(PROBLEM))


def test_the_evaluator_times_trials_beside_trial_baselines_and_confirmations_beside_all():
    from cudal2.bench.evaluator import DEFAULT_BASELINES, Evaluator

    ev = Evaluator(device="cpu", trial_baselines=("torch",))
    assert ev.timed_baselines == ("torch",)
    with ev.full_timing():
        assert ev.timed_baselines == DEFAULT_BASELINES
    assert Evaluator(device="cpu").timed_baselines == DEFAULT_BASELINES


def test_confirmation_rounds_time_a_contender_over_at_least_the_defaults_groups_in_all():
    from cudal2.bench.timing import TimingConfig

    full, confirm, sweep = TimingConfig(), TimingConfig.confirmation(), TimingConfig.sweep()
    assert (confirm.warmup_ms, confirm.target_group_ms) == (full.warmup_ms, full.target_group_ms)
    assert confirm.groups * Confirm().rounds >= full.groups and confirm.groups > sweep.groups
    assert full.call_groups is None and 0 < confirm.call_groups < confirm.groups
