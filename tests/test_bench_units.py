"""Plausibility floor, rotation sets, result types, the report table: no GPU, no processes."""

import pytest

from cudal2.bench.inputs import rotation_count
from cudal2.bench.plausibility import FALLBACK, floor_ms, implausibility, min_bytes, peak_for
from cudal2.bench.results import BaselineResult, CandidateResult, Environment, EvalReport, Timing
from cudal2.ir import GemmProblem, KernelSpec
from cudal2.bench.results import DEFAULT_MODE


def test_speed_of_light_floor_on_h100():
    big = GemmProblem.parse((4096, 4096, 4096))
    assert peak_for("NVIDIA H100 80GB HBM3").tflops_16bit == 1000.0
    assert floor_ms(big, "NVIDIA H100 80GB HBM3") == pytest.approx(2 * 4096**3 / 1e15 * 1e3)
    skinny = GemmProblem.parse((8192, 256, 256))  # memory-bound: the byte floor rules
    assert floor_ms(skinny, "NVIDIA H100 80GB HBM3") == pytest.approx(min_bytes(skinny) / 3.35e12 * 1e3)
    assert floor_ms(skinny, "NVIDIA H100 80GB HBM3", data_from_dram=False) < floor_ms(skinny, "H100")
    assert implausibility(big, 0.5 * floor_ms(big, "H100"), "H100").startswith("implausibly fast")
    assert implausibility(big, 0.2, "NVIDIA H100 80GB HBM3") is None  # 687 TFLOP/s: possible
    assert peak_for("Some Future GPU") == FALLBACK
    assert peak_for("NVIDIA H100 PCIe").tflops_16bit < 1000


def test_rotation_exceeds_twice_l2_within_budget():
    l2 = 50 << 20
    for shape in [(4096, 4096, 4096), (8192, 256, 256), (512, 128, 8192), (64, 64, 64)]:
        p = GemmProblem.parse(shape)
        n = rotation_count(p, l2)
        assert 2 <= n <= 64
        if n < 64:
            assert n * min_bytes(p) >= 2 * l2 or n * min_bytes(p) >= (2 << 30) // 2


def _report():
    p = GemmProblem.parse((1024, 1024, 1024))
    t = lambda ms: {DEFAULT_MODE: Timing(kernel_ms=ms, call_ms=ms + 0.01, groups=30)}  # noqa: E731
    cands = [CandidateResult(KernelSpec(), "ok", timing=t(0.02), name="fast"),
             CandidateResult(KernelSpec(), "incorrect", "relative error 1e-2 exceeds", name="bad")]
    base = {"torch": BaselineResult("torch", t(0.025)),
            "cublaslt_autotune": BaselineResult("cublaslt_autotune", {}, detail="not installed", available=False)}
    env = Environment("NVIDIA H100 80GB HBM3", 132, "570", "12.8", "2.11", "3.6", "0.1.0")
    return EvalReport(p, cands, base, env)


def test_speedup_uses_kernel_time_and_skips_unavailable_baselines():
    r = _report()
    assert r.speedup(r.candidates[0], "torch") == pytest.approx(1.25)
    assert r.speedup(r.candidates[0], "cublaslt_autotune") is None
    assert r.speedup(r.candidates[1], "torch") is None


def test_report_table_lists_candidates_against_every_baseline():
    from rich.console import Console

    from cudal2.bench.report import table_from_report

    table = table_from_report(_report(), (DEFAULT_MODE,))
    con = Console(width=250, record=True)
    con.print(table)
    text = con.export_text()
    assert "vs torch" in text and "vs cublaslt_autotune" in text
    assert "1.250" in text and "unavailable" in text and "incorrect" in text


def test_bad_mode_is_a_clear_error():
    from cudal2.bench.evaluator import _modes

    assert _modes("server") == ("server",)
    assert _modes(("offline", "sustained")) == ("offline", "sustained")
    with pytest.raises(ValueError, match="offline.*server.*sustained"):
        _modes(("warm",))


def test_importing_the_package_is_cheap():
    import subprocess
    import sys

    code = "import sys, cudal2.bench; print('torch' in sys.modules, 'triton' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split()[1] == "False"


def test_run_bench_prints_the_table_for_specs_from_a_file(tmp_path):
    from rich.console import Console

    from cudal2.bench.report import load_specs, run_bench

    spec = KernelSpec(block_m=32, block_n=32, block_k=32, arch="sm_80")
    f = tmp_path / "spec.json"
    f.write_text(spec.model_dump_json())
    assert load_specs(f) == [spec]
    con = Console(width=250, record=True)
    rep = run_bench("40x24x64", spec_file=f, modes=("offline",), baselines=("torch",), console=con,
                    device="cpu", accumulator_probe_k=0, compile_workers=1)
    assert rep.candidates[0].ok, rep.candidates[0].reason
    text = con.export_text()
    assert "40x24x64" in text and "vs torch" in text


def test_prefetched_compiles_are_picked_up_by_evaluate_unless_their_pool_died():
    """Evaluator.prefetch submits a later batch's compiles; _compile_futures reuses them in spec
    order and submits only the rest, or everything again after the pool was killed."""
    from cudal2.bench.evaluator import Evaluator

    class FakePool:
        generation = 0

        def __init__(self):
            self.submitted = []

        def submit_all(self, problem, specs):
            self.submitted.append((problem.k, [s.stages for s in specs]))
            return [f"k{problem.k}-s{s.stages}-g{self.generation}" for s in specs]

    ev = Evaluator(accumulator_probe_k=4096)
    ev._pool = pool = FakePool()
    p = GemmProblem.parse((256, 256, 512))
    s1, s2, s3 = (KernelSpec(stages=n) for n in (1, 2, 3))
    ev.prefetch(p, [s1, s2])
    assert pool.submitted == [(512, [1, 2]), (4096, [1, 2])]  # the candidates and their long-K probes
    futures, probes = ev._compile_futures(p, p.replace(k=4096), [s2, s3, s1])
    assert futures == ["k512-s2-g0", "k512-s3-g0", "k512-s1-g0"] and probes[1] == "k4096-s3-g0"
    assert pool.submitted[2:] == [(512, [3]), (4096, [3])]  # only s3 was new
    ev.prefetch(p, [s1])
    pool.generation = 1  # the pool was killed (a compile timed out): the prefetched future is lost
    futures, _ = ev._compile_futures(p, None, [s1])
    assert futures == ["k512-s1-g1"]
    ev._pool = None  # nothing to close


def _start_a_child(allowed: bool, results) -> None:
    import multiprocessing

    from cudal2.bench.baselines import _children_allowed

    try:
        if allowed:
            with _children_allowed():
                child = multiprocessing.get_context("fork").Process(target=int)
                child.start()
                child.join()
        else:
            multiprocessing.get_context("fork").Process(target=int).start()
        results.put("started")
    except AssertionError as e:
        results.put(str(e))
    results.put(multiprocessing.current_process().daemon)


def test_quack_s_autotuner_may_start_its_compile_processes_inside_the_daemon_gpu_worker():
    """quack's autotuner compiles in a process pool; the evaluator's GPU worker is a daemon
    process, where Python refuses children. Inside _children_allowed it may start them, and the
    worker is a daemon again afterwards."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    for allowed, said in ((False, "daemonic processes are not allowed to have children"), (True, "started")):
        results = ctx.Queue()
        worker = ctx.Process(target=_start_a_child, args=(allowed, results), daemon=True)
        worker.start()
        assert results.get(timeout=60) == said and results.get(timeout=60) is True
        worker.join(timeout=60)


def test_confirmation_baselines_are_planned_once_per_problem_while_kernels_compile():
    """The cuBLASLt baselines that the confirmation rounds time and the trials do not are planned in
    the worker while a batch's kernels compile: once per problem, never when every kernel is compiled
    already, and not at all where the trials time every baseline (a sweep) or inside full_timing()."""
    import concurrent.futures as cf

    from cudal2.bench.evaluator import Evaluator

    class FakeWorker:
        def __init__(self):
            self.requests = []

        def request(self, kind, payload, timeout, what):
            self.requests.append((kind, payload[0].key(), payload[1]))
            return ("ok", {"seconds": 0.0, "ready": list(payload[1])})

    pending, done = cf.Future(), cf.Future()
    done.set_result(None)
    p, q = GemmProblem.parse((256, 256, 512)), GemmProblem.parse((512, 256, 512))
    ev = Evaluator(baselines=("torch", "cublaslt_heuristic", "cublaslt_autotune"), trial_baselines=("torch",))
    ev._worker = worker = FakeWorker()
    ev._plan_confirmation_baselines(p, [done, None])  # compiled already: nothing to overlap
    assert worker.requests == []
    ev._plan_confirmation_baselines(p, [done, pending])
    ev._plan_confirmation_baselines(p, [pending])  # planned already
    with ev.full_timing():  # a confirmation round plans what it times itself
        ev._plan_confirmation_baselines(q, [pending])
    assert worker.requests == [("plan_baselines", p.key(), ("cublaslt_heuristic", "cublaslt_autotune"))]
    ev._plan_confirmation_baselines(q, [pending])
    assert [r[1] for r in worker.requests] == [p.key(), q.key()]

    sweep = Evaluator(baselines=("torch", "cublaslt_heuristic"), trial_baselines=None)
    sweep._worker = FakeWorker()
    sweep._plan_confirmation_baselines(p, [pending])
    assert sweep._worker.requests == []
    ev._worker = sweep._worker = None  # nothing to close


def test_the_worker_plans_baselines_into_the_plans_the_timing_job_reuses(monkeypatch):
    """_plan_baselines prepares each named baseline on operands of the problem with the worker's plan
    cache, which the timing job's baselines.prepare then finds, and answers the available ones."""
    from cudal2.bench import baselines as bl
    from cudal2.bench import worker as W

    seen = []

    def fake_cublaslt(name, problem, sets, cache=None):
        seen.append((name, tuple(sets[0].a.shape)))
        cache[(problem.key(), name)] = ("plan", "detail")
        return bl.PreparedBaseline(name, None if name == "cublaslt_autotune" else (lambda i: None))

    class Conn:
        sent = []

        def send(self, msg):
            self.sent.append(msg)

    monkeypatch.setattr(bl, "_cublaslt", fake_cublaslt)
    state = W._State("cpu")
    p = GemmProblem.parse((64, 32, 128))
    W._plan_baselines(state, Conn(), (p, ("cublaslt_heuristic", "cublaslt_autotune"), 7))
    assert seen == [("cublaslt_heuristic", (64, 128)), ("cublaslt_autotune", (64, 128))]
    assert set(state.baseline_plans) == {(p.key(), "cublaslt_heuristic"), (p.key(), "cublaslt_autotune")}
    status, reply = Conn.sent[0]
    assert status == "ok" and reply["ready"] == ["cublaslt_heuristic"] and reply["seconds"] >= 0
