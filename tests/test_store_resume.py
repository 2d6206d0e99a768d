"""The store round trip, and a search killed with SIGKILL that resumes without losing or
repeating a measured trial."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter

import pytest

from cudal2 import GemmProblem, KernelSpec
from cudal2.bench.results import BaselineResult, CandidateResult, Correctness, Environment, Timing
from cudal2.search.recorded import specs_measured
from cudal2.search.refiner import WORKER, Refiner
from cudal2.search.store import Store, as_url

PROBLEM = GemmProblem(m=2048, n=512, k=1024, layout="NT")


def _result(spec, ms, status="ok"):
    timing = {"offline": Timing(kernel_ms=ms, call_ms=ms + 0.01, groups=25, spread=0.02),
              "server": Timing(kernel_ms=ms * 1.2, call_ms=ms * 1.3, groups=25)} if status == "ok" else {}
    return CandidateResult(spec=spec, status=status, reason="" if status == "ok" else "bad",
                           correctness=Correctness(rel_error=2.1e-4, bound=1e-3, seeds=3, checks=("poison", "nan")),
                           timing=timing, compile_s=1.5, source_digest="abc", name=f"s{spec.stages}",
                           detail="graph replay")


def test_store_round_trip(tmp_path):
    store = Store(tmp_path / "store.db")
    assert store.url == as_url(tmp_path / "store.db") and store.url.startswith("sqlite:///")
    a, b = KernelSpec(stages=2), KernelSpec(stages=4)
    env = Environment(gpu_name="H100", sm_count=132, driver="570", cuda="12.8", torch="2.11", triton="3.6",
                      cudal2="0.1.0", clocks_start={"sm": 1980.0})
    store.record_kernel(PROBLEM, _result(a, 0.30), "src a", env)
    store.record_kernel(PROBLEM, _result(b, 0.20), "src b", env)
    store.record_kernel(PROBLEM, _result(KernelSpec(stages=3), 0.1, status="incorrect"), "", env)
    assert store.measurement(PROBLEM, a) == _result(a, 0.30)
    assert store.measurement(GemmProblem(m=2048, n=512, k=1024), a) is None  # other layout, other problem
    best = store.best(PROBLEM)
    assert best["result"].spec == b and best["source"] == "src b" and best["environment"]["gpu_name"] == "H100"
    base = {"torch": BaselineResult("torch", {"offline": Timing(0.25, 0.26, 25)}),
            "cublaslt_autotune": BaselineResult("cublaslt_autotune", {}, available=False, detail="no nvmath")}
    store.record_baselines(PROBLEM, base, env)
    assert store.baselines(PROBLEM) == base
    assert store.problems() == [PROBLEM]
    assert len(store.kernels(PROBLEM)) == 3
    # a second Store on the same file sees the same data (another process would too)
    assert Store(str(tmp_path / "store.db")).measurement(PROBLEM, b) == _result(b, 0.20)


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_recover_completes_a_measured_running_trial_and_requeues_the_rest(tmp_path):
    store = Store(tmp_path / "s.db")
    ref = Refiner(PROBLEM, ("triton",), store, "sm_90a")
    measured, lost = KernelSpec(stages=2), KernelSpec(stages=5)
    from cudal2.search.space import params_of

    ref.study.enqueue_trial(params_of(measured, ref.space))
    ref.study.enqueue_trial(params_of(lost, ref.space))
    dead = f"{WORKER.rpartition(':')[0]}:{_dead_pid()}"
    for spec in (measured, lost):
        t = ref.study.ask()
        assert ref.suggest(t) == spec
        t.set_user_attr("worker", dead)
        t.set_user_attr("spec", spec.to_json())
    torch_ms = {"torch": BaselineResult(name="torch", timing={"offline": Timing(kernel_ms=0.246, call_ms=0.25,
                                                                                groups=25)})}
    store.record_kernel(PROBLEM, _result(measured, 0.123), "", None, baselines=torch_ms)  # killed after this write
    assert ref.recover() == {"completed": 1, "requeued": 1, "failed": 0}
    states = {KernelSpec.from_json(t.user_attrs["spec"]): t for t in ref.study.trials if "spec" in t.user_attrs}
    # the objective, as the search loop tells it: kernel time over the torch.matmul timed with it
    assert states[measured].state.name == "COMPLETE" and states[measured].value == pytest.approx(0.5)
    assert states[measured].user_attrs["measured"] is True
    assert states[lost].state.name == "FAIL"
    waiting = [t for t in ref.study.trials if t.state.name == "WAITING"]
    assert len(waiting) == 1 and waiting[0].system_attrs["fixed_params"] == params_of(lost, ref.space)


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_trial_of_a_live_process_is_left_alone(tmp_path):
    ref = Refiner(PROBLEM, ("triton",), Store(tmp_path / "s.db"), "sm_90a")
    t = ref.study.ask()
    t.set_user_attr("worker", f"{WORKER.rpartition(':')[0]}:{os.getppid()}")
    assert ref.recover() == {"completed": 0, "requeued": 0, "failed": 0}


SCRIPT = textwrap.dedent("""
    import sys
    from cudal2 import GemmProblem, KernelSpec
    from cudal2.search.loop import run_search
    from cudal2.search.proposal import Proposal
    from cudal2.search.recorded import RecordedRunner
    from cudal2.search.store import Store

    class Fixed:
        name = "fixed"
        def propose(self, problem, history, n):
            return [Proposal(KernelSpec(stages=s, block_k=32), source="fixed") for s in (1, 2, 3, 4)][:n]

    store, log, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])
    problem = GemmProblem(m=2048, n=512, k=1024, layout="NT")
    res = run_search(problem, backends=("triton",), arch="sm_90a", proposer=Fixed(),
                     runner=RecordedRunner(delay_s=delay, log=log), store=Store(store), budget=12, seed=3,
                     n_proposals=4, progress=False, lookahead=True)
    print("EVALUATIONS", res.evaluations)
""")


@pytest.mark.timeout(120)
def test_sigkill_mid_search_then_resume(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    db, log = tmp_path / "store.db", tmp_path / "measured.log"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, str(script), str(db), str(log), "0.25"], env=env)
    deadline = time.time() + 90
    while len(specs_measured(log)) < 5 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.1)  # land the kill at an arbitrary point of the next measurement
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the search finished before it could be killed"

    store = Store(db)
    before = {r["result"].spec.key(): r["result"] for r in store.kernels(PROBLEM)}
    assert 5 <= len(before) < 12
    running = [t for t in store.optuna_storage.get_all_trials(
        store.optuna_storage.get_study_id_from_name(_study(store))) if t.state.name == "RUNNING"]
    assert len(running) <= 2  # at most the trial it was measuring and the one asked ahead (look-ahead)

    out = subprocess.run([sys.executable, str(script), str(db), str(log), "0"], env=env, capture_output=True,
                         text=True, timeout=90)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "EVALUATIONS 12" in out.stdout

    after = store.kernels(PROBLEM)
    keys = [r["result"].spec.key() for r in after]
    assert len(keys) == len(set(keys)) == 12  # no spec measured twice, budget met exactly
    assert all(after_r == before[k] for k, after_r in ((r["result"].spec.key(), r["result"]) for r in after)
               if k in before)  # nothing measured before the kill was lost or replaced
    # the runner measured each stored spec once; only a measurement cut by the kill may repeat
    counts = Counter(specs_measured(log))
    assert sum(c - 1 for c in counts.values()) <= 1
    trials = store.optuna_storage.get_all_trials(store.optuna_storage.get_study_id_from_name(_study(store)))
    assert not [t for t in trials if t.state.name == "RUNNING"]
    assert sum(1 for t in trials if t.user_attrs.get("measured")) == 12


def _study(store):
    (name,) = store.study_names()
    return name


WORKER_SCRIPT = textwrap.dedent("""
    import sys
    from cudal2 import GemmProblem
    from cudal2.search.loop import run_search
    from cudal2.search.recorded import RecordedRunner
    from cudal2.search.store import Store

    m = int(sys.argv[2])
    res = run_search(GemmProblem(m=m, n=256, k=128), backends=("triton",), arch="sm_90a", proposer=None,
                     runner=RecordedRunner(delay_s=0.02), store=Store(sys.argv[1]), budget=4, seed=m,
                     progress=False, batch_size=2)
    print("EVALUATIONS", res.evaluations)
""")


@pytest.mark.timeout(120)
def test_processes_starting_together_on_a_new_store(tmp_path):
    """Schema creation races (several processes creating the same SQLite file) are retried."""
    script = tmp_path / "w.py"
    script.write_text(WORKER_SCRIPT)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    db = tmp_path / "shared.db"
    procs = [subprocess.Popen([sys.executable, str(script), str(db), str(m)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for m in (128, 256, 512)]
    outs = [p.communicate(timeout=100) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e[-1500:] for _, e in outs]
    assert all("EVALUATIONS 4" in o for o, _ in outs)
    assert len(Store(db).problems()) == 3
