"""The store round trip, one record per measured spec, and a search killed with SIGKILL that
resumes without losing or repeating a measured trial (tests/test_store_kill.py kills it at each
stage of a batch)."""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections import Counter

import pytest

from cudal2 import GemmProblem, KernelSpec
from cudal2.bench.results import BaselineResult, CandidateResult, Correctness, Environment, Timing
from cudal2.tuner.loop import run_search
from cudal2.tuner.recorded import RecordedRunner, specs_measured
from cudal2.tuner.refiner import WORKER, Refiner
from cudal2.tuner.space import params_of
from cudal2.store.store import Store, as_url, rdb_storage, result_to_json
from cudal2.bench.results import DEFAULT_MODE

PROBLEM = GemmProblem(m=2048, n=512, k=1024, layout="NT")


def _result(spec, ms, status="ok"):
    timing = {DEFAULT_MODE: Timing(kernel_ms=ms, call_ms=ms + 0.01, groups=25, spread=0.02),
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
    base = {"torch": BaselineResult("torch", {DEFAULT_MODE: Timing(0.25, 0.26, 25)}),
            "cublaslt_autotune": BaselineResult("cublaslt_autotune", {}, available=False, detail="no nvmath")}
    store.record_baselines(PROBLEM, base, env)
    assert store.baselines(PROBLEM) == base
    assert store.problems() == [PROBLEM]
    assert len(store.kernels(PROBLEM)) == 3
    # a second Store on the same file sees the same data (another process would too)
    assert Store(str(tmp_path / "store.db")).measurement(PROBLEM, b) == _result(b, 0.20)


def test_a_repeat_measurement_is_aggregated_on_the_specs_one_record(tmp_path):
    store = Store(tmp_path / "store.db")
    a, b = KernelSpec(stages=2), KernelSpec(stages=4)
    torch_then = {"torch": BaselineResult("torch", {DEFAULT_MODE: Timing(0.25, 0.26, 25)})}
    store.record_kernel(PROBLEM, _result(a, 0.30), "src a", baselines=torch_then)
    store.record_kernel(PROBLEM, _result(b, 0.20), "src b")
    store.record_kernel(PROBLEM, _result(a, 0.28), "src a")  # measured again
    records = store.kernels(PROBLEM)
    assert [r["result"].spec for r in records] == [a, b]  # one record each, in the order first measured
    assert records[0]["result"] == _result(a, 0.28) and store.measurement(PROBLEM, a) == _result(a, 0.28)
    (repeat,) = records[0]["repeats"]
    assert repeat["result"] == _result(a, 0.30) and repeat["baselines"] == torch_then
    assert records[1]["repeats"] == [] and store.measured_spec_keys(PROBLEM) == {a.key(), b.key()}
    with sqlite3.connect(tmp_path / "store.db") as conn:
        assert conn.execute("SELECT COUNT(*) FROM cudal2_kernels").fetchone() == (2,)


def test_a_store_with_repeated_rows_of_a_spec_reads_as_one_record(tmp_path):
    """Stores written before records were unique hold one row per measurement."""
    db = tmp_path / "old.db"
    store = Store(db)
    a = KernelSpec(stages=2)
    store.record_kernel(PROBLEM, _result(a, 0.30))
    with sqlite3.connect(db) as conn:  # as such a store has it: no unique index, a second row of a
        conn.execute("DROP INDEX ux_cudal2_kernels_problem_spec")
        columns = "problem_key, problem, spec_key, spec, backend, status, kernel_ms, source, measurements, " \
                  "baselines, environment, created"
        conn.execute(f"INSERT INTO cudal2_kernels ({columns}) SELECT {columns} FROM cudal2_kernels")
        conn.execute("UPDATE cudal2_kernels SET measurements = ?, kernel_ms = 0.1 WHERE id = 2",
                     (result_to_json(_result(a, 0.10)),))
    old = Store(db)
    (record,) = old.kernels(PROBLEM)
    assert record["result"] == _result(a, 0.10) and [r["result"] for r in record["repeats"]] == [_result(a, 0.30)]
    assert old.best(PROBLEM)["result"] == _result(a, 0.10)
    old.record_kernel(PROBLEM, _result(a, 0.20))  # a new measurement joins the same record
    (record,) = old.kernels(PROBLEM)
    assert record["result"] == _result(a, 0.20)
    assert [r["result"] for r in record["repeats"]] == [_result(a, 0.30), _result(a, 0.10)]


def test_a_spec_measured_twice_counts_once_towards_the_budget(tmp_path):
    store = Store(tmp_path / "s.db")
    kw = dict(backends=("triton",), arch="sm_90a", proposer=None, store=store, budget=4, seed=0, progress=False)
    first = run_search(PROBLEM, runner=RecordedRunner(), **kw)
    store.record_kernel(PROBLEM, first.history[0])  # measured again (another worker, say)
    runner = RecordedRunner()
    again = run_search(PROBLEM, runner=runner, **kw)
    assert again.evaluations == first.evaluations == 4 and not runner.calls  # the budget was already spent
    assert len(store.kernels(PROBLEM)) == 4 and len(store.kernels(PROBLEM)[0]["repeats"]) == 1


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_recover_requeues_a_dead_workers_trials_through_optunas_retry_callback(tmp_path):
    store = Store(tmp_path / "s.db")
    ref = Refiner(PROBLEM, ("triton",), store, "sm_90a")
    measured, lost = (KernelSpec(stages=s, shape_specialization="dynamic") for s in (2, 5))  # what a search measures
    ref.study.enqueue_trial(params_of(measured, ref.space))
    ref.study.enqueue_trial(params_of(lost, ref.space))
    dead = f"{WORKER.rpartition(':')[0]}:{_dead_pid()}"
    for spec in (measured, lost):  # as the search loop leaves them when killed during their batch
        t = ref.study.ask()
        assert ref.suggest(t) == spec
        t.set_user_attr("worker", dead)
        t.set_user_attr("spec", spec.to_json())
        t.set_user_attr("spec_key", spec.key())
    torch_ms = {"torch": BaselineResult(name="torch", timing={DEFAULT_MODE: Timing(kernel_ms=0.246, call_ms=0.25,
                                                                                groups=25)})}
    store.record_kernel(PROBLEM, _result(measured, 0.123), "", None, baselines=torch_ms)  # killed after this write
    assert ref.recover() == 2
    trials = sorted(ref.study.trials, key=lambda t: t.number)
    assert [t.state.name for t in trials] == ["FAIL", "FAIL", "WAITING", "WAITING"]
    assert [t.system_attrs["failed_trial"] for t in trials[2:]] == [0, 1]  # Optuna's retry callback
    assert "worker died" in trials[0].user_attrs["error"]

    runner = RecordedRunner(model=lambda p, s: 0.2, baselines={"torch": 0.246})
    res = run_search(PROBLEM, backends=("triton",), arch="sm_90a", proposer=None, runner=runner, store=store,
                     budget=2, seed=0, progress=False)
    assert runner.calls == [lost]  # the spec stored before the kill is not measured again...
    assert res.evaluations == 2  # ...and counts once
    retried = {KernelSpec.from_json(t.user_attrs["spec"]): t for t in res.study.trials
               if t.state.name == "COMPLETE"}
    # the objective, as the search loop tells it: kernel time over the torch.matmul timed with it
    assert retried[measured].value == pytest.approx(0.5) and retried[measured].user_attrs["reused"]
    assert not [t for t in res.study.trials if t.state.name in ("RUNNING", "WAITING")]


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_recover_retries_trials_whose_heartbeat_or_start_went_stale(tmp_path):
    """Trials of other hosts on a store of many hosts (Optuna's RDBStorage, here on the SQLite file
    for want of a PostgreSQL server): Optuna's heartbeat fails them once stale and its callback
    queues them again; a trial that died before its first write (no worker, no heartbeat) is stale
    by its start."""
    db = tmp_path / "s.db"
    store = Store(db)
    store.__dict__["optuna_storage"] = rdb_storage(store.url)  # what a PostgreSQL URL gets
    ref = Refiner(PROBLEM, ("triton",), store, "sm_90a")
    beating, silent, fresh = ref.study.ask(), ref.study.ask(), ref.study.ask()
    for t, worker in ((beating, "elsewhere:1"), (fresh, "elsewhere:2")):
        t.set_user_attr("worker", worker)
        store.optuna_storage.record_heartbeat(t._trial_id)
    assert ref.recover() == 0 and {t.state.name for t in ref.study.trials} == {"RUNNING"}  # all within grace
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE trial_heartbeats SET heartbeat = '2000-01-01 00:00:00' WHERE trial_id = ?",
                     (beating._trial_id,))
        conn.execute("UPDATE trials SET datetime_start = '2000-01-01 00:00:00' WHERE trial_id = ?",
                     (silent._trial_id,))
    ref.recover()
    states = {t.number: t.state.name for t in ref.study.trials}
    assert [states[t.number] for t in (beating, silent, fresh)] == ["FAIL", "FAIL", "RUNNING"]
    retries = [t for t in ref.study.trials if t.state.name == "WAITING"]
    assert sorted(t.system_attrs["failed_trial"] for t in retries) == sorted([beating.number, silent.number])


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_trial_of_a_live_process_is_left_alone(tmp_path):
    ref = Refiner(PROBLEM, ("triton",), Store(tmp_path / "s.db"), "sm_90a")
    t = ref.study.ask()
    t.set_user_attr("worker", f"{WORKER.rpartition(':')[0]}:{os.getppid()}")
    assert ref.recover() == 0
    assert [t.state.name for t in ref.study.trials] == ["RUNNING"]


SCRIPT = textwrap.dedent("""
    import sys
    from cudal2 import GemmProblem, KernelSpec
    from cudal2.tuner.loop import run_search
    from cudal2.proposers.proposal import Proposal
    from cudal2.tuner.recorded import RecordedRunner
    from cudal2.store.store import Store

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
    # the runner logs a measurement before the search stores it: the kill may land between the two for
    # the fifth (more often on a loaded machine, such as two test processes on two cores)
    assert 4 <= len(before) < 12
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
    assert not [t for t in trials if t.state.name in ("RUNNING", "WAITING")]


def _study(store):
    (name,) = store.study_names()
    return name


WORKER_SCRIPT = textwrap.dedent("""
    import sys
    from cudal2 import GemmProblem
    from cudal2.tuner.loop import run_search
    from cudal2.tuner.recorded import RecordedRunner
    from cudal2.store.store import Store

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


def test_a_sqlite_stores_studies_are_in_its_journal_and_read_by_another_process(tmp_path):
    """The studies of a SQLite store live in <db>.optuna-journal; a fresh Store (as another process
    opens it) reads the same trials back. A PostgreSQL store names its URL, password masked."""
    db = tmp_path / "s.db"
    run_search(PROBLEM, backends=("triton",), arch="sm_90a", proposer=None, runner=RecordedRunner(),
               store=Store(db), budget=3, seed=0, progress=False)
    assert Store(db).studies_at() == str(tmp_path / "s.db.optuna-journal")
    assert (tmp_path / "s.db.optuna-journal").stat().st_size > 0
    storage = Store(db).optuna_storage
    (study,) = storage.get_all_studies()
    trials = storage.get_all_trials(study._study_id)
    assert sum(t.state.name == "COMPLETE" for t in trials) == 3
    assert Store("postgresql://u:pw@host/db").studies_at() == "postgresql://u:***@host/db"


def test_the_studies_journal_is_written_without_an_fsync_per_record(tmp_path, monkeypatch):
    """Optuna forces each of its ~3,000 records a search to the disk; the store's journal leaves
    them to the operating system (a killed process loses none) and still holds the file's lock for
    each write, so that another process reads every record back."""
    import os

    def no_fsync(fd):
        raise AssertionError("fsync called")

    monkeypatch.setattr(os, "fsync", no_fsync)
    db = tmp_path / "s.db"
    run_search(PROBLEM, backends=("triton",), arch="sm_90a", proposer=None, runner=RecordedRunner(),
               store=Store(db), budget=4, seed=0, progress=False)
    monkeypatch.undo()
    storage = Store(db).optuna_storage
    (study,) = storage.get_all_studies()
    assert sum(t.state.name == "COMPLETE" for t in storage.get_all_trials(study._study_id)) == 4
    assert not (tmp_path / "s.db.optuna-journal.lock").exists()  # every write let go of the lock
