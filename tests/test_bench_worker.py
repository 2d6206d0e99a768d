"""The worker machinery on the CPU (device injected): a kernel that aborts the process or
hangs is recorded as crash / timeout, the worker is replaced, and the next candidate is still
evaluated; specs go through the compile pool and the backend registry."""

import pytest

from cheats import kernels as K
from cudal2.bench import evaluate, evaluate_kernels
from cudal2.ir import GemmProblem, KernelSpec
from cudal2.bench.results import DEFAULT_MODE


@pytest.fixture(scope="module")
def report():
    p = GemmProblem.parse((48, 40, 256))
    kernels = {"honest": K.honest, "aborts": K.aborts, "hangs": K.hangs, "raises": K.raises,
               "partial": K.partial_write, "stale": "cheats.kernels:stale_output", "after": K.honest}
    return evaluate_kernels(p, kernels, device="cpu", baselines=("torch", "cublaslt_heuristic"),
                            run_timeout_s=4, compile_workers=1)


def test_crash_and_hang_are_recorded_and_the_run_goes_on(report):
    by = {c.name: c for c in report.candidates}
    assert by["aborts"].status == "crash" and "SIGABRT" in by["aborts"].reason
    assert by["hangs"].status == "timeout" and "did not finish" in by["hangs"].reason
    assert by["raises"].status == "crash" and "always fails" in by["raises"].reason
    assert by["partial"].status == "incorrect" and "never written" in by["partial"].reason
    assert by["stale"].status == "incorrect"
    for name in ("honest", "after"):  # "after" runs on a replacement worker
        c = by[name]
        assert c.ok, c.reason
        assert c.timing[DEFAULT_MODE].kernel_ms > 0 and c.correctness.rel_error <= c.correctness.bound
        assert "timed-output" in c.correctness.checks


def test_baselines_report_availability_with_the_reason(report):
    assert report.baselines["torch"].available and report.baselines["torch"].timing[DEFAULT_MODE].kernel_ms > 0
    assert report.baselines["torch"].correctness.rel_error < 1e-3
    lt = report.baselines["cublaslt_heuristic"]
    try:
        import nvmath  # noqa: F401
    except ImportError:
        assert not lt.available and "nvmath" in lt.detail
    assert report.environment is not None and report.environment.torch


def test_quack_baselines_are_unavailable_with_the_reason_where_it_is_not_installed():
    import importlib.util

    if importlib.util.find_spec("quack") is not None:
        pytest.skip("quack-kernels is installed here")
    p = GemmProblem.parse((48, 40, 256))
    rep = evaluate_kernels(p, {"honest": K.honest}, device="cpu", compile_workers=1)
    assert {"torch", "quack_heuristic", "quack_autotune"} <= set(rep.baselines)
    for name in ("quack_heuristic", "quack_autotune"):
        assert not rep.baselines[name].available and "quack-kernels is not installed" in rep.baselines[name].detail
    assert rep.candidates[0].ok and rep.baselines["torch"].available


def test_specs_go_through_the_compile_pool_and_registry():
    p = GemmProblem.parse((40, 24, 64))
    good = KernelSpec(block_m=32, block_n=32, block_k=32, arch="sm_80")
    other = KernelSpec(block_m=16, block_n=16, block_k=16, arch="sm_80", decomposition="split_k", split_k=2)
    rep = evaluate(p, [good, other], device="cpu", baselines=(), compile_workers=2)
    for c in rep.candidates:
        assert c.ok, c.reason
        assert c.source_digest and c.spec.backend == "triton"
    unsupported = evaluate(p.replace(accumulator="float16"), [good], device="cpu", baselines=(), compile_workers=1)
    assert unsupported.candidates[0].status == "unsupported"


def test_a_cheat_that_starts_after_the_checks_is_caught_on_the_timed_output():
    p = GemmProblem.parse((32, 32, 512))
    rep = evaluate_kernels(p, {"late": "cheats.kernels:honest_then_cached", "honest": K.honest}, device="cpu",
                           baselines=())
    by = {c.name: c for c in rep.candidates}
    assert by["honest"].ok
    assert by["late"].status == "incorrect" and "timed run" in by["late"].reason


def test_long_k_probe_exposes_fp16_accumulation_that_a_short_k_hides():
    p = GemmProblem.parse((64, 64, 128))  # over K=128 fp16 accumulation is within the bound
    kernels = {"fp16acc": K.fp16_accumulate, "honest": K.honest}
    plain = evaluate_kernels(p, kernels, device="cpu", baselines=())
    assert all(c.ok for c in plain.candidates), [c.reason for c in plain.candidates]
    probed = evaluate_kernels(p, kernels, device="cpu", baselines=(), probe_prebuilt=True)
    by = {c.name: c for c in probed.candidates}
    assert by["fp16acc"].status == "incorrect" and "long-K accumulator probe" in by["fp16acc"].reason
    assert by["honest"].ok and any(x.startswith("long-k-probe(") for x in by["honest"].correctness.checks)


def test_compile_pool_times_out_a_hung_compile_and_still_compiles_the_rest():
    from cheats.slow_compile import hang_on_block_m_16
    from cudal2.bench.compile_pool import CompilePool

    p = GemmProblem.parse((64, 64, 64))
    specs = [KernelSpec(block_m=b, arch="sm_80") for b in (32, 16, 64, 128)]
    pool = CompilePool(workers=2, timeout_s=3, task=hang_on_block_m_16)
    try:
        futures = pool.submit_all(p, specs)
        got = [pool.result(futures, i, p, specs) for i in range(len(specs))]
    finally:
        pool.close()
    assert [g.status for g in got] == ["ok", "compile_error", "ok", "ok"]
    assert "did not finish within 3 s" in got[1].reason
    assert got[3].reason == "compiled 128"


def test_compile_processes_run_below_the_search_and_the_gpu_worker():
    # Compiles ahead are background work; the GPU worker's checks and the search's own steps are
    # what a search waits on.
    import os

    from cheats.slow_compile import report_niceness
    from cudal2.bench.compile_pool import NICENESS, CompilePool

    p = GemmProblem.parse((64, 64, 64))
    pool = CompilePool(workers=1, timeout_s=60, task=report_niceness)
    try:
        (got,) = [pool.result(f, 0, p, [KernelSpec()]) for f in [pool.submit_all(p, [KernelSpec()])]]
    finally:
        pool.close()
    assert int(got.reason) == min(19, os.nice(0) + NICENESS)


def test_a_compile_that_kills_its_process_costs_only_its_own_spec():
    # An H100 search lost its run to this: the CuTe DSL compiler aborted on one spec, the pool broke
    # under the candidates and their long-K probes alike, and a cancelled probe future escaped.
    from cheats.slow_compile import die_on_block_m_16
    from cudal2.bench.compile_pool import CompilePool

    p, probe = GemmProblem.parse((64, 64, 64)), GemmProblem.parse((64, 64, 4096))
    specs = [KernelSpec(block_m=b, arch="sm_80") for b in (32, 16, 64, 128, 16, 64)]
    pool = CompilePool(workers=3, timeout_s=30, task=die_on_block_m_16)
    try:
        futures, probes = pool.submit_all(p, specs), pool.submit_all(probe, specs)
        got = []
        for i in range(len(specs)):  # in the evaluator's order: a candidate, then its probe
            got.append((pool.result(futures, i, p, specs), pool.result(probes, i, probe, specs)))
    finally:
        pool.close()
    for spec, (cand, prb) in zip(specs, got):
        if spec.block_m == 16:
            assert cand.status == prb.status == "compile_error"
            assert "died on this spec twice, the second time alone" in cand.reason
        else:
            assert (cand.status, cand.reason) == ("ok", f"compiled {spec.block_m} for K=64")
            assert (prb.status, prb.reason) == ("ok", f"compiled {spec.block_m} for K=4096")
    assert pool.generation >= 2


def test_spec_long_k_probe_is_compiled_in_the_pool_and_the_phases_are_accounted():
    from cudal2.bench.evaluator import Evaluator

    p = GemmProblem.parse((40, 24, 64))
    spec = KernelSpec(block_m=32, block_n=32, block_k=32, arch="sm_80")
    with Evaluator(device="cpu", baselines=(), compile_workers=2, accumulator_probe_k=256) as ev:
        (res,) = ev.evaluate(p, [spec])
        assert res.ok, res.reason
        assert "long-k-probe(K=256)" in res.correctness.checks
        st = ev.stats
        assert st.candidates == 1 and st.checking_s > 0 and st.timing_s > 0
        assert "1 candidates" in st.line()


def test_a_hang_costs_the_check_timeout_scaled_from_torchs_time_not_the_full_cap():
    from cudal2.bench.evaluator import Evaluator

    p = GemmProblem.parse((48, 40, 256))
    with Evaluator(device="cpu", baselines=("torch",), run_timeout_s=60, check_floor_s=3,
                   check_per_torch_ms=0.0, compile_workers=1) as ev:
        assert ev.check_timeout(p) == 60  # torch not timed yet: the cap
        ev.baselines(p)
        assert ev.check_timeout(p) == 3
        import time

        t0 = time.monotonic()
        (res,) = ev.evaluate_kernels(p, {"hangs": K.hangs})
        assert res.status == "timeout" and "within 3 s" in res.reason
        assert time.monotonic() - t0 < 30


def test_a_shape_generic_spec_is_compiled_once_for_every_shape_of_its_class():
    """A dynamic spec compiled for one shape serves the next shape of the same class without the
    compile pool; its long-K probe is the same kernel (no probe compile of its own)."""
    from cudal2.bench.evaluator import Evaluator

    spec = KernelSpec(block_m=32, block_n=32, block_k=32, arch="sm_80", shape_specialization="dynamic")
    first, second = GemmProblem.parse((40, 24, 64)), GemmProblem.parse((72, 40, 96))
    with Evaluator(device="cpu", baselines=(), compile_workers=1, accumulator_probe_k=256) as ev:
        submitted = []
        real = ev.pool.submit_all
        ev.pool.submit_all = lambda prob, specs: (submitted.extend((prob.label(), s.key()) for s in specs), real(prob, specs))[1]
        (a,) = ev.evaluate(first, [spec])
        (b,) = ev.evaluate(second, [spec])
        odd = ev.evaluate(second.replace(layout="TN"), [spec])[0]  # another class: compiled anew
    assert a.ok and b.ok and odd.ok, (a.reason, b.reason, odd.reason)
    assert a.source_digest == b.source_digest != odd.source_digest
    # the first shape and the other class, nothing for the second shape and no probe variants
    assert submitted == [(first.label(), spec.key()), (second.replace(layout="TN").label(), spec.key())]
    assert "long-k-probe(K=256)" in b.correctness.checks


def test_a_batch_pins_a_crash_on_its_candidate_and_checks_the_rest_on_a_new_worker():
    from cudal2.bench.evaluator import Evaluator

    p = GemmProblem.parse((32, 48, 128))
    kernels = {"first": K.honest, "partial": K.partial_write_one, "aborts": K.aborts, "cached": K.cached_by_pointer,
               "last": K.honest}
    with Evaluator(device="cpu", baselines=(), compile_workers=1) as ev:
        res = {c.name: c for c in ev.evaluate_kernels(p, kernels)}
        assert ev.restarts == 1
    assert res["first"].ok and res["last"].ok
    assert res["aborts"].status == "crash" and "SIGABRT" in res["aborts"].reason
    assert res["partial"].status == "incorrect" and "poison" in res["partial"].reason
    assert res["cached"].status == "incorrect"  # its own fresh seeds in the same storage


class ScriptedWorker:
    """Stands in for the GPU worker: answers each check_many request from a script, and dies (raises
    WorkerDied) where the script says so."""

    def __init__(self, script):
        self.script, self.pending, self.sent, self.restarts = list(script), [], [], 0

    def send(self, kind, req):
        self.sent.append([r.name for r in req.candidates])
        self.pending = list(self.script.pop(0))

    def receive(self, limit, what):
        from cudal2.bench.worker import WorkerDied

        msg = self.pending.pop(0)
        if msg == "die":
            raise WorkerDied("crash", f"worker died during {what}")
        return msg

    def _answering(self):
        return True

    def restart(self):
        self.restarts += 1


def test_a_death_in_the_shared_stream_order_check_is_found_alone_and_ends():
    """The stream-order check of several kernels dies: each is checked again alone; the one that
    dies alone is recorded as the crash, and the others keep their verdict."""
    from cudal2.bench.evaluator import Evaluator
    from cudal2.bench.results import Correctness
    from cudal2.bench.worker import KernelRef

    corr = Correctness(rel_error=1e-4, bound=1e-3, seeds=3, checks=("finite",))

    def passes(name):
        return [("compiled", name, 0.1), ("checked", name, "ok", "", corr, 0.1)]

    ev = Evaluator(device="cpu")
    ev._worker = ScriptedWorker([
        passes("a") + passes("b") + ["die"],  # together: the shared check dies
        passes("a") + [("ok", {"a": 2e-4})],  # a alone: fine
        passes("b") + ["die"],  # b alone: dies again, so b did it
    ])
    out = ev._check_many(GemmProblem.parse((32, 32, 64)), [(KernelRef("a", kernel=K.honest), None),
                                                           (KernelRef("b", kernel=K.honest), None)])
    assert ev._worker.sent == [["a", "b"], ["a"], ["b"]]
    assert out["a"][0] == "ok" and "stream-order" in out["a"][2].checks and out["a"][2].rel_error == 2e-4
    assert out["b"][0] == "crash" and "stream-order check" in out["b"][1]


def test_a_kernel_that_cannot_be_sent_to_the_worker_fails_alone():
    from cudal2.bench.evaluator import Evaluator

    p = GemmProblem.parse((32, 48, 64))
    with Evaluator(device="cpu", baselines=(), compile_workers=1) as ev:
        res = {c.name: c for c in ev.evaluate_kernels(p, {"first": K.honest, "local": lambda a, b, c=None, bias=None: c,
                                                           "last": K.honest})}
    assert res["first"].ok and res["last"].ok
    assert res["local"].status == "crash" and "could not send local to the worker" in res["local"].reason


_HOLDER = """
import sys, time
from cudal2.bench.compile_pool import CompilePool
from cudal2.ir import GemmProblem, KernelSpec
from cheats.slow_compile import hang_on_block_m_16
pool = CompilePool(workers=2, timeout_s=60, task=hang_on_block_m_16)
pool.submit_all(GemmProblem.parse((64, 64, 64)), [KernelSpec(block_m=32, arch="sm_80")] * 2)
time.sleep(1.0)
print(*pool._executor()._processes, flush=True)
time.sleep(60)
"""


def test_compile_processes_end_when_their_parent_is_killed(tmp_path):
    # A sweep's Dask worker killed with SIGKILL never closes its pool; its compile processes must
    # not linger as orphans (they held the sweep's output pipe open on a 2-GPU machine).
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "tests")])}
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER], stdout=subprocess.PIPE, text=True, env=env)
    pids = [int(p) for p in holder.stdout.readline().split()]
    assert len(pids) == 2
    holder.send_signal(signal.SIGKILL)
    holder.wait()

    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(p) for p in pids)


def _alive(pid: int) -> bool:
    import os
    from pathlib import Path

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")  # a zombie not yet reaped counts as gone
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


@pytest.mark.parametrize("end", ["close", "kill", "parent gone"])
def test_processes_a_worker_started_end_with_it(end):
    # quack's autotuner, run in the worker, starts a forkserver and a compile pool; once the worker
    # stopped they lived on as orphans, holding memory and a finished sweep's output pipe. Here a
    # process put in the worker's group stands for them.
    import os
    import subprocess
    import time

    from cudal2.bench.worker import Worker

    w = Worker("cpu")
    deadline = time.monotonic() + 30
    while os.getpgid(w.proc.pid) != w.proc.pid and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.getpgid(w.proc.pid) == w.proc.pid  # the worker leads a group of its own
    started = subprocess.Popen(["sleep", "120"], process_group=w.proc.pid)
    try:
        if end == "close":
            w.close()
        elif end == "kill":  # a hung worker: killed, its own cleanup never runs
            w.kill()
        else:  # the parent died: the worker reads the end of its pipe and stops
            w.conn.close()
            w.proc.join(10)
        deadline = time.monotonic() + 10
        while started.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started.poll() is not None and not _alive(started.pid)
    finally:
        started.kill()
        w.kill()


def test_the_worker_records_each_backend_s_device_facts_before_it_answers_the_environment():
    """Backend.record_device_facts runs in the GPU worker (a CUDA context) when the environment is
    first asked, before any compile reaches the pool; a backend that fails to record is skipped."""
    from cudal2.bench import worker as W
    from cudal2.codegen import registry
    from cudal2.codegen.triton import TritonBackend

    calls = []

    class Recording(TritonBackend):
        name = "recording"

        def record_device_facts(self, device):
            calls.append(device)

    class Broken(TritonBackend):
        name = "broken"

        def record_device_facts(self, device):
            raise RuntimeError("no context")

    registry.register("recording", Recording)
    registry.register("broken", Broken)
    try:
        class State:
            is_cuda, device = True, "cuda:3"

        W._record_device_facts(State())
        assert calls == ["cuda:3"]
        State.is_cuda = False  # a CPU worker has nothing to record
        W._record_device_facts(State())
        assert calls == ["cuda:3"]
    finally:
        registry.refresh()
