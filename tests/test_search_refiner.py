"""The refiner and the search loop against a recorded table of measurements (no GPU)."""

import pytest

from cudal2 import GemmProblem, KernelSpec
from cudal2.tuner.loop import Budget, run_search
from cudal2.proposers.proposal import Proposal
from cudal2.tuner.recorded import RecordedRunner
from cudal2.ir import SpecError
from cudal2.tuner.refiner import Refiner, study_name, validate
from cudal2.tuner.space import fields_from, params_of, search_space
from cudal2.store.store import Store
from cudal2.bench.results import DEFAULT_MODE

PROBLEM = GemmProblem(m=1024, n=1024, k=512)
FAST = KernelSpec(block_m=128, block_n=64, block_k=32, num_warps=4, stages=2, raster_group=4,
                  shape_specialization="dynamic")  # the shape-generic kernels a search measures by default


class ListProposer:
    name = "list"

    def __init__(self, specs):
        self.specs = specs
        self.calls = []

    def propose(self, problem, history, n):
        self.calls.append((problem, list(history), n))
        return [Proposal(s, reasoning=f"#{i}", source="list") for i, s in enumerate(self.specs[:n])]


def test_space_derives_from_capabilities_and_round_trips_specs():
    space = {o.name: o for o in search_space(("triton",), "sm_90a")}
    assert space["load_path"].choices == ("pointer", "tma")  # narrowed by the Triton declaration
    assert space["warp_specialization"].constant
    assert space["block_m"].choices == (16, 32, 64, 128, 256)  # the IR's widths, narrowed to powers of two
    assert (space["stages"].low, space["stages"].high) == (1, 8)  # the IR allows 16
    both = {o.name: o for o in search_space(("triton", "cute_dsl"), "sm_90a")}
    assert both["cute_dsl:block_n"].choices == tuple(range(16, 257, 16))  # each backend's own widths
    assert both["triton:block_n"].choices == (16, 32, 64, 128, 256)
    assert (both["cute_dsl:stages"].low, both["cute_dsl:stages"].high) == (2, 16)
    assert space["split_k"].when == (("decomposition", ("split_k",)),)
    sm80 = {o.name: o for o in search_space(("triton",), "sm_80")}
    assert sm80["load_path"].constant  # sm_80: pointer loads only
    spec = KernelSpec(block_m=64, decomposition="split_k", split_k=4, stages=2)
    opts = search_space(("triton",), "sm_90a")
    params = params_of(spec, opts)
    assert params["split_k"] == 4 and "arch" not in params and "mma" not in params
    assert KernelSpec(**fields_from(params, opts, "sm_90a")) == spec
    dp = params_of(KernelSpec(), opts)
    assert "split_k" not in dp  # inactive under data_parallel


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown backend 'nope'"):
        search_space(("nope",), "sm_90a")


def test_proposals_first_invalid_pruned_with_reason_best_found(tmp_path):
    store = Store(tmp_path / "s.db")
    small_k = GemmProblem(m=1024, n=1024, k=64)
    too_deep = KernelSpec(block_k=64, decomposition="split_k", split_k=4)  # K=64 has one block of 64
    good = [FAST, KernelSpec(block_m=64, block_n=64, block_k=32, stages=2, shape_specialization="dynamic")]
    runner = RecordedRunner(rows=[({"block_m": 128, "block_n": 64, "block_k": 32, "num_warps": 4, "stages": 2,
                                    "raster_group": 4}, 0.001)],
                            model=lambda p, s: 0.05, baselines={"torch": 0.002, "cublaslt_autotune": 0.0018})
    proposer = ListProposer([too_deep, *good])
    res = run_search(small_k, backends=("triton",), arch="sm_90a", proposer=proposer, runner=runner,
                     store=store, budget=6, n_proposals=3, seed=1, progress=False)
    trials = sorted(res.study.trials, key=lambda t: t.number)
    # the three proposals are the first three trials, in order, with their reasoning
    assert [t.user_attrs.get("proposal") for t in trials[:3]] == ["list"] * 3
    assert trials[0].state.name == "PRUNED" and trials[0].user_attrs["status"] == "invalid"
    assert "split_k" in trials[0].user_attrs["error"] and "K=64" in trials[0].user_attrs["error"]
    assert [KernelSpec.from_json(t.user_attrs["spec"]) for t in trials[1:3]] == good
    # the invalid spec never reached the runner
    assert too_deep not in runner.calls and runner.calls[:2] == good
    assert res.evaluations == 6 and len(runner.calls) == 6
    assert res.best.spec == FAST
    assert res.speedup["torch"] == pytest.approx(2.0) and res.speedup["cublaslt_autotune"] == pytest.approx(1.8)
    assert res.best.time_ms == {DEFAULT_MODE: 0.001}
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    assert all(t.user_attrs["status"] == "ok" and DEFAULT_MODE in t.user_attrs["speedups"] for t in complete)
    assert res.study.study_name == study_name(small_k, ("triton",))


def test_failed_measurements_are_pruned_with_status_and_never_best(tmp_path):
    runner = RecordedRunner(rows=[({"block_m": 128, "block_n": 64}, "incorrect")], model=lambda p, s: 0.5,
                            baselines={"torch": 0.4})
    fast_but_wrong = KernelSpec(block_m=128, block_n=64, block_k=32, stages=2)
    res = run_search(PROBLEM, backends=("triton",), arch="sm_90a", proposer=ListProposer([fast_but_wrong]),
                     runner=runner, store=Store(tmp_path / "s.db"), budget=3, seed=0, progress=False)
    first = min(res.study.trials, key=lambda t: t.number)
    assert first.state.name == "PRUNED" and first.user_attrs["status"] == "incorrect"
    assert res.best is not None and res.best.spec != fast_but_wrong
    assert res.speedup["torch"] == pytest.approx(0.8)


def test_budget_in_gpu_seconds_and_parse():
    assert Budget.parse(64) == Budget(evaluations=64)
    assert Budget.parse("120s") == Budget(seconds=120.0)
    assert Budget.parse("2m") == Budget(seconds=120.0)
    assert Budget.parse("16") == Budget(evaluations=16)
    with pytest.raises(ValueError, match="GPU time"):
        Budget.parse("fast")
    with pytest.raises(ValueError):
        Budget.parse(0)


def test_seconds_budget_stops(tmp_path):
    runner = RecordedRunner(delay_s=0.05, baselines={"torch": 1.0})
    res = run_search(PROBLEM, backends=("triton",), arch="sm_90a", proposer=None, runner=runner,
                     store=Store(tmp_path / "s.db"), budget="0.3s", seed=0, progress=False)
    # it stops once the runner's seconds or the run's wall clock reach the budget (the loop's own work counts,
    # so a loaded machine may fit only one or two 0.05 s evaluations in it)
    assert res.gpu_seconds < 0.3 + 0.5 and res.evaluations == len(runner.calls) >= 1


def test_a_time_budget_bounds_the_wall_time_of_a_runner_that_takes_none(tmp_path):
    """The recorded runner spends microseconds inside evaluate: a "1s" budget of those alone ran for
    minutes (every trial the sampler had); the run's wall clock stops it, past by one batch and the
    confirmation rounds at most."""
    import time

    from cudal2.tuner.confirm import Confirm

    runner = RecordedRunner(baselines={"torch": 1.0})
    began = time.monotonic()
    res = run_search(PROBLEM, backends=("triton",), arch="sm_90a", proposer=ListProposer([FAST]), runner=runner,
                     store=Store(tmp_path / "s.db"), budget="1s", seed=0, progress=False, batch_size=4,
                     confirm=Confirm())
    took = time.monotonic() - began
    assert res.evaluations >= 1 and res.best is not None
    assert took < 1 + 5, f"a 1 s budget took {took:.1f} s ({res.evaluations} evaluations)"


def test_gp_sampler_runs(tmp_path):
    res = run_search(PROBLEM, backends=("triton",), arch="sm_90a", proposer=ListProposer([FAST]),
                     runner=RecordedRunner(), store=Store(tmp_path / "s.db"), budget=4, sampler="gp", seed=0,
                     progress=False)
    assert res.evaluations == 4


def test_spec_measured_once_per_problem_across_studies(tmp_path):
    """The kernel table is shared: a second study (another tag) reuses the stored measurement."""
    store = Store(tmp_path / "s.db")
    kw = dict(backends=("triton",), arch="sm_90a", store=store, budget=2, seed=0, progress=False)
    r1 = RecordedRunner()
    run_search(PROBLEM, proposer=ListProposer([FAST]), runner=r1, tag="a", **kw)
    r2 = RecordedRunner()
    res = run_search(PROBLEM, proposer=ListProposer([FAST]), runner=r2, tag="b", **kw)
    assert FAST in r1.calls and FAST not in r2.calls
    first = min(res.study.trials, key=lambda t: t.number)
    assert first.user_attrs["reused"] and not first.user_attrs["measured"]


def test_refiner_enqueue_skips_duplicates_and_out_of_space(tmp_path):
    ref = Refiner(PROBLEM, ("triton",), Store(tmp_path / "s.db"), "sm_80")
    n = ref.enqueue([Proposal(KernelSpec(arch="sm_80", stages=2)), Proposal(KernelSpec(arch="sm_80", stages=2)),
                     Proposal(KernelSpec(arch="sm_90a"))])
    assert n == 1
    pruned = [t for t in ref.study.trials if t.state.name == "PRUNED"]
    assert len(pruned) == 1 and "outside the search space" in pruned[0].user_attrs["error"]


def test_batches_keep_proposals_first_and_meet_the_budget_exactly(tmp_path):
    class Counting(RecordedRunner):
        batches = []

        def evaluate(self, problem, specs, modes=(DEFAULT_MODE,)):
            self.batches.append(len(specs))
            return super().evaluate(problem, specs, modes)

    specs = [KernelSpec(stages=s, block_k=32, shape_specialization="dynamic") for s in (1, 2, 3, 4, 5)]
    runner = Counting()
    res = run_search(PROBLEM, backends=("triton",), arch="sm_90a", proposer=ListProposer(specs), runner=runner,
                     store=Store(tmp_path / "s.db"), budget=11, n_proposals=5, seed=0, batch_size=4,
                     progress=False)
    assert runner.calls[:5] == specs
    assert res.evaluations == len(runner.calls) == 11 and max(runner.batches) == 4
    assert not [kind for kind, _ in runner.events if kind == "prefetch"]  # look-ahead is opt-in
    assert len({s.key() for s in runner.calls}) == 11  # never the same spec twice
    assert not [t for t in res.study.trials if t.state.name in ("RUNNING", "WAITING")]


def test_interrupted_batch_is_given_back(tmp_path):
    class Broken(RecordedRunner):
        def evaluate(self, problem, specs, modes=(DEFAULT_MODE,)):
            raise KeyboardInterrupt

    store = Store(tmp_path / "s.db")
    with pytest.raises(KeyboardInterrupt):
        run_search(PROBLEM, backends=("triton",), arch="sm_90a", proposer=ListProposer([FAST]), runner=Broken(),
                   store=store, budget=3, seed=0, progress=False)
    runner = RecordedRunner()
    res = run_search(PROBLEM, backends=("triton",), arch="sm_90a", proposer=None, runner=runner, store=store,
                     budget=3, seed=0, progress=False)
    assert runner.calls[0] == FAST and res.evaluations == 3


def test_speedups_use_the_baselines_timed_with_the_kernel(tmp_path):
    """The evaluator times baselines interleaved with each batch; speedups use that batch's."""
    calls = []

    def drifting(problem):
        calls.append(1)
        return {"torch": 0.010 * len(calls)}  # the baseline gets slower call after call

    store = Store(tmp_path / "s.db")
    runner = RecordedRunner(rows=[({"stages": 2}, 0.001)], model=lambda p, s: 0.5, baselines=drifting)
    res = run_search(PROBLEM, backends=("triton",), arch="sm_90a", proposer=ListProposer([FAST]), runner=runner,
                     store=store, budget=3, seed=0, progress=False)
    # call 1: ensure_baselines; call 2: with the first batch (FAST, the best) -> torch 0.020
    assert res.best.spec == FAST and res.baselines["torch"].kernel_ms() == pytest.approx(0.020)
    assert res.speedup["torch"] == pytest.approx(20.0)
    first = min(res.study.trials, key=lambda t: t.number)
    assert first.user_attrs["speedups"][DEFAULT_MODE]["torch"] == pytest.approx(20.0)
    (entry,) = list(__import__("cudal2").TunedTable.from_store(store))
    assert entry.baselines_ms["torch"] == pytest.approx(0.020)


def test_best_is_ranked_by_its_speedup_over_the_baseline_timed_with_it(tmp_path):
    """Raw times of different evaluator calls do not compare (the GPU's clock drifts): the kernel
    that beat its interleaved torch wins over one with a lower raw time that lost to its own."""
    calls = []

    def cooling(problem):
        calls.append(1)
        return {"torch": 0.010 if len(calls) <= 2 else 0.007}  # ensure + first batch hot, then cool

    other = KernelSpec(block_m=64, block_n=64, block_k=32, num_warps=4, stages=2)
    store = Store(tmp_path / "s.db")
    runner = RecordedRunner(rows=[({"block_m": 128, "block_n": 64}, 0.0095), ({"block_m": 64}, 0.008)],
                            model=lambda p, s: 0.5, baselines=cooling)
    res = run_search(PROBLEM, backends=("triton",), arch="sm_90a", proposer=ListProposer([FAST, other]),
                     runner=runner, store=store, budget=2, n_proposals=2, seed=0, progress=False, batch_size=1)
    assert sorted(h.kernel_ms(DEFAULT_MODE) for h in res.history) == [0.008, 0.0095]
    assert res.best.spec == FAST, res.best.spec
    assert res.speedup["torch"] == pytest.approx(0.010 / 0.0095)


def test_objective_is_the_kernel_time_over_the_torch_timed_with_it(tmp_path):
    runner = RecordedRunner(rows=[({"block_m": 128, "block_n": 64}, 0.004)], model=lambda p, s: 0.5,
                            baselines={"torch": 0.010})
    res = run_search(PROBLEM, backends=("triton",), arch="sm_90a", proposer=ListProposer([FAST]), runner=runner,
                     store=Store(tmp_path / "s.db"), budget=2, seed=0, progress=False)
    values = sorted(t.value for t in res.study.trials if t.value is not None)
    assert values == [pytest.approx(0.4), pytest.approx(50.0)]  # 0.004 / 0.010 and 0.5 / 0.010
    assert res.study.study_name.endswith(f"|relative@{DEFAULT_MODE}")


def test_space_over_two_backends_samples_each_backends_own_values():
    space = {o.name: o for o in search_space(("triton", "cute_dsl"), "sm_90a")}
    assert space["backend"].choices == ("triton", "cute_dsl")
    assert space["triton:warp_specialization"].constant  # "none": Triton has no warp roles to choose
    assert set(space["cute_dsl:warp_specialization"].choices) == {"cooperative", "pingpong"}
    assert space["triton:split_k"].choices is None and space["triton:split_k"].log  # Triton takes the IR's range
    assert space["cute_dsl:split_k"].when == (("backend", ("cute_dsl",)), ("decomposition", ("split_k",)))
    assert space["cute_dsl:consumer_registers"].contains(232) and space["cute_dsl:consumer_registers"].contains(None)
    assert space["cute_dsl:load_path"].constant and space["cute_dsl:load_path"].choices == ("tma",)
    # a spec of either backend round-trips through its params
    opts = search_space(("triton", "cute_dsl"), "sm_90a")
    for spec in (KernelSpec(backend="cute_dsl", num_warps=12, load_path="tma", warp_specialization="pingpong",
                            persistent=True, stages=5, cluster_n=2),
                 KernelSpec(backend="triton", block_m=64, decomposition="split_k", split_k=4, stages=2)):
        params = params_of(spec, opts)
        assert all(k == "backend" or k.startswith(spec.backend + ":") for k in params)
        assert KernelSpec(**fields_from(params, opts, "sm_90a")) == spec


def test_a_two_backend_search_samples_few_specs_its_backends_refuse(tmp_path):
    """Sampled field by field over the union, a triton+cute_dsl study of 24 measured trials pruned 101
    to 152 refused combinations (seeds 0-2); over each backend's own values, 18 to 25."""
    import collections

    res = run_search(GemmProblem(m=255, n=6144, k=4096, layout="NT"), backends=("triton", "cute_dsl"), arch="sm_90a",
                     proposer=ListProposer([FAST]), runner=RecordedRunner(), store=Store(tmp_path / "s.db"), budget=24,
                     seed=0, progress=False)
    states = collections.Counter(t.user_attrs.get("status") for t in res.study.trials)
    assert states["ok"] == 24 and states["invalid"] <= 2 * 24, states


def test_next_batch_is_asked_and_prefetched_while_the_current_one_is_measured(tmp_path):
    specs = [KernelSpec(stages=s, block_k=bk, shape_specialization="dynamic") for bk in (32, 64) for s in (1, 2, 3, 4, 5)]
    runner = RecordedRunner()
    res = run_search(PROBLEM, backends=("triton",), arch="sm_90a", proposer=ListProposer(specs), runner=runner,
                     store=Store(tmp_path / "s.db"), budget=19, n_proposals=10, seed=0, batch_size=4,
                     progress=False, lookahead=True)
    evaluated = [keys for kind, keys in runner.events if kind == "evaluate"]
    assert [len(b) for b in evaluated] == [4, 4, 4, 4, 3]  # the budget counts the batch asked ahead
    prefetched = [(i, set(keys)) for i, (kind, keys) in enumerate(runner.events) if kind == "prefetch"]
    at = [i for i, (kind, _) in enumerate(runner.events) if kind == "evaluate"]
    # every batch is handed to prefetch before it is measured; a full batch of queued proposals, and
    # each one the sampler draws once it has 8 completed trials, before its predecessor is measured
    for n, keys in enumerate(evaluated):
        first = min(i for i, got in prefetched if set(keys) <= got)
        assert first < at[n]
        if n in (1, 3, 4):
            assert first < at[n - 1], n
    # batch 3 (2 proposals, 2 drawn) is asked after batch 2: with 4 completed trials TPE draws at random
    assert min(i for i, got in prefetched if set(evaluated[2]) <= got) > at[1]
    assert res.evaluations == 19 and len({k for b in evaluated for k in b}) == 19
    assert runner.calls[:10] == specs  # proposals still first
    assert not [t for t in res.study.trials if t.state.name in ("RUNNING", "WAITING")]


class MeasuresWhileAsked(RecordedRunner):
    """A runner whose prefetch may be called while it measures (as the evaluator's): its first
    measurement waits until the search hands over a batch asked ahead, which it can do only from a
    thread of its own."""

    prefetch_concurrent = True

    def __init__(self):
        import threading

        super().__init__()
        self.handed_over = threading.Condition()
        self.waited = []

    def prefetch(self, problem, specs):
        with self.handed_over:
            super().prefetch(problem, specs)
            self.handed_over.notify_all()

    def evaluate(self, problem, specs, modes=(DEFAULT_MODE,), with_baselines=True):
        before = len(self.events)
        if not self.waited:
            with self.handed_over:  # a prefetch while this batch is measured (up to 10 s)
                self.waited.append(self.handed_over.wait_for(lambda: len(self.events) > before, timeout=10))
        return super().evaluate(problem, specs, modes)


def test_batches_are_asked_ahead_while_the_runner_measures_and_the_search_is_unchanged(tmp_path):
    specs = [KernelSpec(stages=s, block_k=bk, shape_specialization="dynamic") for bk in (32, 64) for s in (1, 2, 3, 4, 5)]

    def search(runner, name):
        return run_search(PROBLEM, backends=("triton",), arch="sm_90a", proposer=ListProposer(specs), runner=runner,
                          store=Store(tmp_path / name), budget=19, n_proposals=10, seed=0, batch_size=4,
                          progress=False, lookahead=True)

    overlapped, runner = MeasuresWhileAsked(), None
    res = search(overlapped, "a.db")
    assert overlapped.waited == [True]  # the next batch was handed over while the first was measured
    kinds = [kind for kind, _ in overlapped.events]
    assert kinds[:3] == ["prefetch", "prefetch", "evaluate"] or kinds[:2] == ["prefetch", "evaluate"]
    assert res.evaluations == 19 and not [t for t in res.study.trials if t.state.name in ("RUNNING", "WAITING")]
    runner = RecordedRunner()  # asks ahead first, then measures
    again = search(runner, "b.db")
    assert [s.key() for s in overlapped.calls] == [s.key() for s in runner.calls]
    assert again.best.spec == res.best.spec


def test_an_error_asking_ahead_is_raised_once_the_batch_in_hand_is_measured(tmp_path):
    class Broken(ListProposer):
        def propose(self, problem, history, n):
            if history:
                raise RuntimeError("proposer broke")
            return super().propose(problem, history, n)

    class Adaptive(Broken):
        adaptive = True

    specs = [KernelSpec(stages=s, block_k=32, shape_specialization="dynamic") for s in (1, 2, 3, 4, 5, 6)]
    runner = MeasuresWhileAsked()
    store = Store(tmp_path / "s.db")
    with pytest.raises(RuntimeError, match="proposer broke"):
        run_search(PROBLEM, backends=("triton",), arch="sm_90a", proposer=Adaptive(specs), runner=runner,
                   store=store, budget=12, seed=0, batch_size=3, progress=False, lookahead=True)
    assert len(runner.calls) >= 3  # the batch in hand was measured, and is in the store
    assert len(store.kernels(PROBLEM)) == len(runner.calls)


def test_look_ahead_over_two_backends_spends_the_whole_budget(tmp_path):
    """Asked ahead while the first batch ran, a sampler with no completed trial drew specs at
    random over two backends' union space: all invalid, which used up every trial (12 of 24 measured)."""
    from cudal2.api import resolve_proposer

    runner = RecordedRunner()
    res = run_search(GemmProblem(m=8192, n=8192, k=4096), backends=("triton", "cute_dsl"), arch="sm_90a",
                     proposer=resolve_proposer("rules", ("triton", "cute_dsl"), "sm_90a"), runner=runner,
                     store=Store(tmp_path / "s.db"), budget=24, n_proposals=12, batch_size=12, seed=0,
                     progress=False, lookahead=True)
    assert res.evaluations == 24 and [len(k) for kind, k in runner.events if kind == "evaluate"] == [12, 12]


def test_interrupt_gives_back_the_batch_asked_ahead_too(tmp_path):
    class BreaksSecond(RecordedRunner):
        def evaluate(self, problem, specs, modes=(DEFAULT_MODE,)):
            if any(kind == "evaluate" for kind, _ in self.events):
                raise KeyboardInterrupt
            return super().evaluate(problem, specs, modes)

    store = Store(tmp_path / "s.db")
    specs = [KernelSpec(stages=s, block_k=32, shape_specialization="dynamic") for s in (1, 2, 3, 4, 5, 6)]
    first = BreaksSecond()
    with pytest.raises(KeyboardInterrupt):
        run_search(PROBLEM, backends=("triton",), arch="sm_90a", proposer=ListProposer(specs), runner=first,
                   store=store, budget=9, n_proposals=6, seed=0, batch_size=3, progress=False, lookahead=True)
    # batch 1, then batch 2 asked ahead (a full batch of proposals), then batch 2 again as the batch in hand
    assert [kind for kind, _ in first.events] == ["prefetch", "prefetch", "evaluate", "prefetch"]  # then it broke
    runner = RecordedRunner()
    res = run_search(PROBLEM, backends=("triton",), arch="sm_90a", proposer=None, runner=runner, store=store,
                     budget=9, seed=0, batch_size=3, progress=False, lookahead=True)
    assert runner.calls[:3] == specs[3:]  # the proposals given back are measured first on resume
    assert res.evaluations == 9 and len({s.key() for s in first.calls + runner.calls}) == 9
    assert not [t for t in res.study.trials if t.state.name in ("RUNNING", "WAITING")]


def test_a_search_measures_shape_generic_kernels_unless_asked_for_per_shape_ones(tmp_path):
    """By default each spec's shape-generic kernel ("dynamic") is measured, proposals and sampled
    trials alike, and a proposal of the same spec is not queued twice; shape_generic=False measures
    the backends' own choice ("auto"). A spec with no shape-generic kernel (CuTe DSL stream-K,
    whose work split is planned for one shape) keeps the backend's own."""
    runner = RecordedRunner(rows=[], model=lambda p, s: 0.05 + 0.001 * s.stages, baselines={"torch": 0.05})
    fast, slow = FAST.replace(shape_specialization="auto"), KernelSpec(block_m=64, block_n=64, block_k=32, stages=2)
    res = run_search(PROBLEM, backends=("triton",), arch="sm_90a", proposer=ListProposer([fast, slow, fast]),
                     runner=runner, store=Store(tmp_path / "g.db"), budget=5, n_proposals=3, seed=1, progress=False)
    assert len(runner.calls) == 5 and {s.shape_specialization for s in runner.calls} == {"dynamic"}
    assert runner.calls[:2] == [FAST, slow.replace(shape_specialization="dynamic")]
    assert res.best.spec.shape_specialization == "dynamic"
    per_shape = RecordedRunner(rows=[], model=lambda p, s: 0.05, baselines={"torch": 0.05})
    run_search(PROBLEM, backends=("triton",), arch="sm_90a", proposer=ListProposer([fast]), runner=per_shape,
               store=Store(tmp_path / "p.db"), budget=3, n_proposals=1, seed=1, progress=False, shape_generic=False)
    assert {s.shape_specialization for s in per_shape.calls} == {"auto"} and per_shape.calls[0] == fast
    refiner = Refiner(PROBLEM, ("cute_dsl",), Store(tmp_path / "c.db"), "sm_90a")
    stream_k = KernelSpec(backend="cute_dsl", block_m=128, block_n=128, block_k=64, num_warps=12, stages=4,
                          load_path="tma", warp_specialization="cooperative", persistent=True,
                          decomposition="stream_k", epilogue_path="tma_store")
    plain = stream_k.replace(decomposition="data_parallel")
    assert refiner.kernel_of(stream_k) == stream_k
    assert refiner.kernel_of(plain) == plain.replace(shape_specialization="dynamic")
    assert refiner.kernel_of(plain.replace(shape_specialization="static")).shape_specialization == "static"


def test_a_sampled_stage_count_is_a_ceiling_and_a_proposal_keeps_its_own(tmp_path):
    """A sampled spec too deep for shared memory is measured at the deepest pipeline that fits below
    the sampled count, not pruned; a proposal is taken as written."""
    mine = KernelSpec(backend="cute_dsl", num_warps=12, load_path="tma", warp_specialization="cooperative",
                      persistent=True, block_m=128, block_n=128, block_k=64, stages=3)
    res = run_search(GemmProblem(m=2048, n=2048, k=2048), backends=("cute_dsl",), arch="sm_90a",
                     proposer=ListProposer([mine]), runner=RecordedRunner(), store=Store(tmp_path / "s.db"),
                     budget=16, n_proposals=1, sampler="random", seed=0, progress=False)
    trials = sorted(res.study.trials, key=lambda t: t.number)
    assert trials[0].user_attrs["proposal"] == "list"
    assert KernelSpec.from_json(trials[0].user_attrs["spec"]).stages == 3 == trials[0].params["stages"]
    sampled = [(t.params["stages"], KernelSpec.from_json(t.user_attrs["spec"]).stages)
               for t in trials[1:] if t.state.name == "COMPLETE" and "stages" in t.params]
    assert all(measured <= drawn for drawn, measured in sampled)
    assert any(measured < drawn for drawn, measured in sampled)  # shortened to fit, not pruned
    # a draw pruned for its shared memory has no valid depth below it either
    space = search_space(("cute_dsl",), "sm_90a")
    for t in trials[1:]:
        if t.state.name == "PRUNED" and "shared memory" in t.user_attrs.get("error", ""):
            fields = fields_from(t.params, space, "sm_90a")
            for stages in range(2, fields["stages"]):
                with pytest.raises(SpecError):
                    validate(res.problem, KernelSpec(**{**fields, "stages": stages}))


def test_a_search_says_where_its_time_went(tmp_path):
    import time

    from cudal2.tuner.loop import Search

    t0 = time.perf_counter()
    res = run_search(PROBLEM, backends=("triton",), arch="sm_90a", proposer=ListProposer([FAST]),
                     runner=RecordedRunner(), store=Store(tmp_path / "s.db"), budget=6, seed=0, progress=False,
                     lookahead=True)
    wall = time.perf_counter() - t0
    assert tuple(res.phase_s) == Search.PHASES and all(v >= 0 for v in res.phase_s.values())
    assert res.phase_s["ask"] > 0 and res.phase_s["propose"] > 0 and sum(res.phase_s.values()) <= wall
