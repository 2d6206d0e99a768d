"""A search killed (SIGKILL) at each stage of a batch, then resumed, and a search interrupted
(KeyboardInterrupt) inside the runner: the store stays exact. Each spec has one kernel record and
counts once towards the budget; once a search has spent its budget no trial is WAITING or
RUNNING; the SQLite file passes its integrity check."""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from cudal2 import GemmProblem, KernelSpec
from cudal2.tuner.loop import run_search
from cudal2.proposers.proposal import Proposal
from cudal2.tuner.recorded import RecordedRunner, specs_measured
from cudal2.tuner.space import params_of, search_space
from cudal2.store.store import Store

PROBLEM = GemmProblem(m=2048, n=512, k=1024, layout="NT")
BUDGET = 20

# The search in a process of its own, killed by its own hand at the n-th time it reaches one stage:
# "compile" (a batch handed to the runner, nothing measured yet), "measure" (a spec measured, its
# batch not returned), "kernel-write" (inside the kernel table's transaction, before its commit),
# "after-write" (a measurement committed, Optuna not told yet) or "tell" (as Optuna completes a
# trial, before the study's journal records it). "twins" queues one spec twice before the search starts, so
# that a trial waits for its twin in the batch in flight.
SCRIPT = textwrap.dedent("""
    import os, signal, sys
    from sqlalchemy import event
    from cudal2 import GemmProblem, KernelSpec
    from cudal2.tuner.loop import run_search
    from cudal2.proposers.proposal import Proposal
    from cudal2.tuner.recorded import RecordedRunner
    from cudal2.tuner.refiner import Refiner
    from cudal2.tuner.space import params_of
    from cudal2.store.store import Store

    db, log, kill_at, budget = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    stage, _, nth = kill_at.partition(":")
    reached_count = {}

    def reached(name):
        reached_count[name] = reached_count.get(name, 0) + 1
        if name == stage and reached_count[name] == int(nth):
            os.kill(os.getpid(), signal.SIGKILL)

    class KillingRunner(RecordedRunner):
        def evaluate(self, problem, specs, modes=("layer",)):
            reached("compile")
            out = []
            for spec in specs:
                out += super().evaluate(problem, [spec], modes)
                reached("measure")
            return out

    class Fixed:
        name = "fixed"
        def propose(self, problem, history, n):
            return [Proposal(KernelSpec(stages=s, block_k=32), source="fixed") for s in (1, 2, 3, 4)][:n]

    store = Store(db)

    def kernel_write(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith(("INSERT INTO CUDAL2_KERNELS", "UPDATE CUDAL2_KERNELS")):
            reached("kernel-write")

    storage = store.optuna_storage
    set_state = storage.set_trial_state_values

    def trial_completed(trial_id, state, values=None):
        if state.name == "COMPLETE":
            reached("tell")  # before the completion is written: a transaction killed before its commit
        return set_state(trial_id, state, values)

    event.listen(store.engine, "after_cursor_execute", kernel_write)
    storage.set_trial_state_values = trial_completed
    record_kernel = store.record_kernel

    def record_then_maybe_die(*args, **kwargs):
        record_kernel(*args, **kwargs)
        reached("after-write")

    store.record_kernel = record_then_maybe_die
    problem = GemmProblem(m=2048, n=512, k=1024, layout="NT")
    if "twins" in sys.argv[5:]:
        refiner = Refiner(problem, ("triton",), store, "sm_90a")
        twin = params_of(KernelSpec(stages=6, block_k=64), refiner.space)
        refiner.study.enqueue_trial(twin)
        refiner.study.enqueue_trial(twin)
    res = run_search(problem, backends=("triton",), arch="sm_90a", proposer=Fixed(),
                     runner=KillingRunner(log=log), store=store, budget=budget, seed=3, n_proposals=4,
                     progress=False, batch_size=3, lookahead=True)
    print("EVALUATIONS", res.evaluations)
""")


def _trial_states(db) -> list[str]:
    return [t.state.name for t in _study_trials(Store(db))]


def _check_store(db) -> tuple[int, int]:
    """Kernel records and distinct (problem, spec) among them; fails unless the file is intact."""
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        records, distinct = conn.execute(
            "SELECT COUNT(*), COUNT(DISTINCT problem_key || ' ' || spec_key) FROM cudal2_kernels").fetchone()
    return records, distinct


@pytest.mark.timeout(120)
def test_killed_at_each_stage_and_resumed_counts_each_spec_once(tmp_path):
    script = tmp_path / "search.py"
    script.write_text(SCRIPT)
    db, log = tmp_path / "store.db", tmp_path / "measured.log"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}

    def run(kill_at: str, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(script), str(db), str(log), kill_at, str(BUDGET), *extra],
                              env=env, capture_output=True, text=True, timeout=100)

    stored = 0
    for kill_at, extra in (("compile:2", ()), ("measure:2", ()), ("kernel-write:2", ()),
                           ("after-write:3", ("twins",)), ("tell:6", ())):
        out = run(kill_at, *extra)
        assert out.returncode == -signal.SIGKILL, (kill_at, out.returncode, out.stderr[-2000:])
        records, distinct = _check_store(db)
        assert records == distinct, kill_at  # one record per spec
        assert stored <= records < BUDGET, kill_at  # nothing stored was lost, and there is budget left
        stored = records
    assert "RUNNING" in _trial_states(db)  # the last kill left trials behind for the resume to settle

    out = run("none")
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"EVALUATIONS {BUDGET}" in out.stdout
    records, distinct = _check_store(db)
    assert records == distinct == BUDGET  # the budget counts distinct specs, and was met exactly
    assert not {"WAITING", "RUNNING"} & set(_trial_states(db))
    # every record was measured by the runner; a spec is measured again only when a kill cut its
    # first measurement short of the store (at most one batch a kill)
    measured = specs_measured(log)
    keys = {r["result"].spec.key() for r in Store(db).kernels(PROBLEM)}
    assert keys <= {line.split()[1] for line in measured}
    assert len(measured) - len(set(measured)) <= 5 * 3
    # the twins ran as one spec: one record, and both of their trials are settled
    twin = KernelSpec(stages=6, block_k=64, arch="sm_90a", shape_specialization="dynamic").key()  # measured shape-generic
    assert twin in keys


class ListProposer:
    name = "list"

    def __init__(self, specs):
        self.specs = specs

    def propose(self, problem, history, n):
        return [Proposal(s, source="list") for s in self.specs[:n]]


class InterruptedOnSecondBatch(RecordedRunner):
    """Ctrl-C arrives while the second batch is measured (after one of its specs)."""

    def evaluate(self, problem, specs, modes=("layer",)):
        if sum(1 for kind, _ in self.events if kind == "evaluate") >= 1:
            super().evaluate(problem, specs[:1], modes)
            raise KeyboardInterrupt
        return super().evaluate(problem, specs, modes)


class InterruptedStore(Store):
    """Ctrl-C arrives after the first kernel write of the second batch."""

    writes = 0

    def record_kernel(self, *args, **kwargs):
        super().record_kernel(*args, **kwargs)
        self.writes += 1
        if self.writes == 4:
            raise KeyboardInterrupt


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
@pytest.mark.parametrize("where", ["runner", "store write"])
@pytest.mark.parametrize("lookahead", [False, True])
def test_keyboard_interrupt_gives_the_batch_back(tmp_path, lookahead, where):
    specs = [KernelSpec(stages=s, block_k=32, shape_specialization="dynamic") for s in (1, 2, 3, 4, 5, 6, 7, 8)]
    interrupted = where == "store write"
    store = (InterruptedStore if interrupted else Store)(tmp_path / "s.db")
    kw = dict(backends=("triton",), arch="sm_90a", seed=0, batch_size=3, progress=False, lookahead=lookahead,
              budget=9)
    with pytest.raises(KeyboardInterrupt):
        run_search(PROBLEM, proposer=ListProposer(specs), runner=RecordedRunner() if interrupted
                   else InterruptedOnSecondBatch(), store=store, n_proposals=8, **kw)
    study_trials = _study_trials(store)
    assert not [t for t in study_trials if t.state.name == "RUNNING"]
    space = search_space(("triton",), "sm_90a")
    queued = [t.system_attrs.get("fixed_params", t.params) for t in study_trials if t.state.name == "WAITING"]
    written = {r["result"].spec for r in store.kernels(PROBLEM)}
    # the interrupted batch is queued again (a spec stored before the interrupt is told from the store)
    assert written == set(specs[:4] if interrupted else specs[:3])
    assert all(params_of(s, space) in queued for s in specs[3:6])

    store = Store(tmp_path / "s.db")
    runner = RecordedRunner()
    res = run_search(PROBLEM, proposer=None, runner=runner, store=store, **kw)
    # the queue (proposals, the batch given back) comes first; a stored spec is not measured again
    assert set(runner.calls[:5 - interrupted]) == set(specs[3:]) - written
    assert res.evaluations == 9 and len(store.kernels(PROBLEM)) == 9
    assert not [t for t in _study_trials(store) if t.state.name in ("RUNNING", "WAITING")]


def _study_trials(store):
    (name,) = store.study_names()
    storage = store.optuna_storage
    return storage.get_all_trials(storage.get_study_id_from_name(name))
