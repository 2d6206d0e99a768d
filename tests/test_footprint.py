"""Size checks and the evaluator's memory sizing, on the CPU: the footprint arithmetic, the refusal
(bytes needed and bytes available) with and without a GPU, the blocked fp32 reference and error
sums against the whole ones, the rotation count and the timing job's layout when memory is short."""

import pytest
import torch
from typer.testing import CliRunner

from cheats import kernels as K
from cudal2.bench import correctness, inputs, memory
from cudal2.bench.correctness import AccuracyPolicy, count_nonfinite, expected_for, reference, rel_error
from cudal2.bench.inputs import make_operands, rotation_count
from cudal2.bench.memory import DeviceMemory, block_plan, plan_timing
from cudal2.ir import Epilogue, GemmProblem, KernelSpec, SpecError
from cudal2.ir.footprint import (MemoryFitError, check_fits, largest_memory, operand_bytes, problem_bytes,
                                 workspace_bytes)

GiB = 2**30


# ---- the arithmetic ---------------------------------------------------------------------------------
def test_operand_bytes_count_what_the_caller_holds():
    p = GemmProblem(m=1000, n=300, k=70, layout="NT", out_dtype="bfloat16",
                    epilogue=Epilogue(beta=0.5, bias=True))
    assert operand_bytes(p) == {"a": 1000 * 70 * 2, "b": 70 * 300 * 2, "c": 1000 * 300 * 2, "bias": 300 * 2,
                                "d": 1000 * 300 * 2}
    assert problem_bytes(p) == p.nbytes == 140000 + 42000 + 600000 + 600 + 600000
    plain = GemmProblem.parse("50000x50000x64", layout="NT")  # no C read, no bias: A, B and D
    assert plain.nbytes == 2 * (50000 * 64 * 2) + 50000 * 50000 * 2


def test_workspace_bytes_of_split_k_and_stream_k():
    p = GemmProblem.parse("512x256x8192")
    assert workspace_bytes(p, KernelSpec()) == 0
    assert workspace_bytes(p, KernelSpec(decomposition="split_k", split_k=4)) == 4 * 4 * 512 * 256
    atomic = KernelSpec(arch="sm_80", decomposition="split_k", split_k=4, split_k_reduction="atomic")
    assert workspace_bytes(p, atomic) == 4 * 512 * 256  # one shared fp32 sum
    serial = KernelSpec(decomposition="split_k", split_k=4, split_k_reduction="serial")  # 128x128 tiles: 8
    assert workspace_bytes(p, serial) == 4 * ((1 << 16) + 4 * 512 * 256)  # the tile counters, then the partials
    stream = KernelSpec.model_construct(**{**KernelSpec().to_dict(), "decomposition": "stream_k"})
    assert workspace_bytes(p, stream) == 4 * 132 * (128 * 128 + 1)  # a tile and a flag per SM


def test_largest_part_of_each_arch():
    assert largest_memory("sm_80") == (80 * GiB, "A100 80GB")
    assert largest_memory("sm_90a")[0] == largest_memory("sm_90")[0] == 144 * GiB
    assert largest_memory() == (144 * GiB, "GH200 144GB HBM3e")
    with pytest.raises(SpecError, match="unknown arch"):
        largest_memory("sm_75")


# ---- refusals -----------------------------------------------------------------------------------------
def test_refusal_names_the_bytes_needed_and_available():
    p = GemmProblem.parse("50000x50000x64", layout="NT")
    with pytest.raises(MemoryFitError) as e:
        check_fits(p, 4 * GiB, "free on Some GPU")
    err = e.value
    assert isinstance(err, SpecError) and err.needed == p.nbytes and err.available == 4 * GiB
    text = str(err)
    assert f"need {p.nbytes} bytes" in text and f"{4 * GiB} bytes (4.0 GiB) free on Some GPU" in text
    assert "shape='50000x50000x64'" in text and "fix:" in text
    check_fits(p, p.nbytes, "free on Some GPU")  # exactly enough is enough


def test_a_workspace_that_does_not_fit_is_refused_per_spec():
    p = GemmProblem.parse("8192x8192x8192")
    spec = KernelSpec(decomposition="split_k", split_k=8)
    check_fits(p, p.nbytes + 10, "free")  # the problem alone fits
    with pytest.raises(MemoryFitError, match="split-K workspace need") as e:
        check_fits(p, p.nbytes + 10, "free", spec)
    assert e.value.needed == p.nbytes + 8 * 4 * 8192 * 8192
    assert e.value.violations[0].field == "split_k"


def test_a_problem_no_gpu_could_hold_is_refused_by_the_ir():
    with pytest.raises(SpecError) as e:
        GemmProblem.parse("100000000x100000000x100000000")
    text = str(e.value)
    assert "60000000000000000 bytes" in text and f"{144 * GiB} bytes" in text and "GH200" in text


def test_without_a_gpu_the_target_archs_largest_part_is_the_limit(monkeypatch):
    import cudal2.api as api

    monkeypatch.setattr(api, "gpu_available", lambda: False)
    p = GemmProblem.parse("200000x250000x64")  # 93 GiB: more than an A100, less than a GH200
    assert api.target_memory("sm_80") == (80 * GiB, "of the largest sm_80 part (A100 80GB; no GPU is visible here)")
    with pytest.raises(MemoryFitError, match=f"{80 * GiB} bytes .80.0 GiB. of the largest sm_80 part"):
        api.check_problem_fits(p, "sm_80")
    api.check_problem_fits(p, "sm_90a")


def test_search_refuses_before_the_runner_is_asked_anything(monkeypatch, tmp_path):
    import cudal2
    import cudal2.api as api
    from cudal2.tuner.recorded import RecordedRunner

    monkeypatch.setattr(api, "gpu_available", lambda: False)
    runner = RecordedRunner()
    with pytest.raises(MemoryFitError) as e:
        cudal2.search("200000x250000x64", runner=runner, arch="sm_80", store=str(tmp_path / "s.db"),
                      budget=2, progress=False)
    assert e.value.available == 80 * GiB
    assert runner.events == [] and runner.calls == []


def test_the_command_refuses_a_shape_no_gpu_holds_in_one_line(tmp_path, monkeypatch):
    from cudal2.cli import app

    monkeypatch.setenv("CUDAL2_STORE", str(tmp_path / "store.db"))
    result = CliRunner().invoke(app, ["search", "100000000x100000000x100000000", "--runner", "recorded"])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in result.output
    assert "60000000000000000 bytes" in errors[0] and f"{144 * GiB} bytes" in errors[0]


def test_the_evaluator_refuses_a_problem_and_a_workspace_that_do_not_fit(monkeypatch):
    from cudal2.bench.evaluator import Evaluator

    p = GemmProblem.parse("4096x4096x4096")
    ev = Evaluator(device="cpu", baselines=(), compile_workers=1)
    free = p.nbytes + (64 << 20)
    monkeypatch.setattr(ev, "device_memory", lambda problem=None: DeviceMemory(free, 80 * GiB, "Fake GPU"))
    monkeypatch.setattr(ev, "environment", lambda: None)
    compiled = []
    monkeypatch.setattr(ev, "_run", lambda problem, items, modes, baselines: compiled.extend(items) or [])
    try:
        (res,) = ev.evaluate(p, [KernelSpec(decomposition="split_k", split_k=4)])
        assert compiled == []  # refused uncompiled
        assert res.status == "unsupported" and f"{free} bytes" in res.reason and "split-K workspace" in res.reason
        small = DeviceMemory(p.nbytes - 1, 80 * GiB, "Fake GPU")
        monkeypatch.setattr(ev, "device_memory", lambda problem=None: small)
        for call in (lambda: ev.evaluate(p, [KernelSpec()]), lambda: ev.baselines(p),
                     lambda: ev.evaluate_kernels(p, {"honest": K.honest})):
            with pytest.raises(MemoryFitError, match=f"more than the {p.nbytes - 1} bytes"):
                call()
        assert compiled == []
    finally:
        ev.close()


def test_the_long_k_probe_is_skipped_where_it_does_not_fit():
    from cudal2.bench.evaluator import Evaluator

    p = GemmProblem.parse("50000x50000x64", layout="NT")
    ev = Evaluator(device="cpu", accumulator_probe_k=4096)
    ev._memory = DeviceMemory(p.nbytes + (1 << 20), 80 * GiB, "Fake GPU")
    assert ev._probe_problem(p) is None
    assert "K=4096 variant needs" in ev._probe_skipped(p)
    ev._memory = DeviceMemory(80 * GiB, 80 * GiB, "Fake GPU")
    assert ev._probe_problem(p).k == 4096


# ---- the blocked reference and checks -----------------------------------------------------------------
@pytest.mark.parametrize("layout", ["NN", "NT", "TN"])
def test_the_blocked_reference_equals_the_whole_one(layout):
    """Equal up to fp32 summation order: a relative difference near 1e-7, a thousand times below
    what rounding the output to fp16 costs (2e-4), so no check can tell them apart."""
    p = GemmProblem(m=37, n=29, k=300, layout=layout, epilogue=Epilogue(alpha=0.5, beta=1.5, bias=True,
                                                                          activation="gelu"))
    ops = make_operands(p, seed=3)
    whole = reference(p, ops)
    tiny = 500  # fp32 elements: blocks of rows, of columns and of K
    rows, cols, depth = block_plan(p.m, p.n, p.k, tiny)
    assert rows < p.m and cols < p.n and depth < p.k
    rows_only = p.k + p.k * p.n + 5 * p.n  # one row at a time, whole columns and K
    assert block_plan(p.m, p.n, p.k, rows_only) == (1, p.n, p.k)
    for blocked in (reference(p, ops, 4 * tiny), reference(p, ops, 4 * rows_only),
                    reference(p, ops, 4 * tiny, device="cpu")):
        assert blocked.shape == whole.shape and blocked.dtype == torch.float32
        assert rel_error(blocked, whole) < 1e-6


def test_block_plan_stays_within_its_budget_and_keeps_k_whole_where_it_can():
    for m, n, k, budget in [(1, 70000, 40000, 2**28), (70000, 16, 40000, 2**26), (50000, 50000, 64, 2**27),
                            (4, 4, 10**9, 10**6)]:
        rows, cols, depth = block_plan(m, n, k, budget)
        assert rows * depth + depth * cols + 5 * rows * cols <= budget
        assert 1 <= rows <= m and 1 <= cols <= n and 1 <= depth <= k
    assert block_plan(1, 70000, 40000, 2**28)[2] == 40000  # columns shrink first
    assert block_plan(4, 4, 10**9, 10**6)[2] < 10**9  # K is cut only when one column cannot hold it
    assert block_plan(7, 5, 3, None) == (7, 5, 3)


def test_expected_for_in_blocks_matches_the_whole(monkeypatch):
    p = GemmProblem(m=64, n=48, k=512, layout="NT")
    ops = make_operands(p, seed=11)
    whole = expected_for(p, ops)
    blocked = expected_for(p, ops, budget=correctness.SCRATCH_MIN + 4 * p.m * p.n)
    assert blocked.trusted_error == pytest.approx(whole.trusted_error, rel=1e-9)
    assert blocked.bound == pytest.approx(whole.bound, rel=1e-9)
    torch.testing.assert_close(blocked.ref, whole.ref)


def test_error_sums_and_finite_counts_in_blocks(monkeypatch):
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(33, 21, generator=g)
    x = (ref + 1e-3 * torch.randn(33, 21, generator=g)).half()
    direct = (torch.linalg.vector_norm(x.double() - ref.double()) / torch.linalg.vector_norm(ref.double())).item()
    assert rel_error(x, ref) == pytest.approx(direct, rel=1e-12)
    x[5, 7] = float("nan")
    x[30, 0] = float("inf")
    monkeypatch.setattr(correctness, "CHECK_BLOCK_ELEMENTS", 10)  # pieces of rows
    assert count_nonfinite(x) == 2
    x[5, 7] = x[30, 0] = 0.0
    assert rel_error(x, ref) == pytest.approx(
        (torch.linalg.vector_norm(x.double() - ref.double()) / torch.linalg.vector_norm(ref.double())).item(), rel=1e-12)


def test_operands_are_drawn_in_pieces_with_the_same_values_below_one_piece(monkeypatch):
    p = GemmProblem(m=40, n=24, k=96, layout="TN")
    whole = make_operands(p, seed=5)
    g = torch.Generator().manual_seed(5)
    assert torch.equal(whole.a.t(), torch.randn(96, 40, generator=g).half())  # as one torch.randn always gave
    monkeypatch.setattr(inputs, "DRAW_ELEMENTS", 500)
    pieces = make_operands(p, seed=5)
    assert pieces.a.stride() == whole.a.stride() and pieces.b.stride() == whole.b.stride()
    assert torch.equal(pieces.a, make_operands(p, seed=5).a)  # a seed still fixes the values
    assert abs(pieces.a.float().mean().item()) < 0.1 and 0.9 < pieces.a.float().std().item() < 1.1
    before = pieces.b.clone()
    pieces.refill(6)
    assert not torch.equal(before, pieces.b)


# ---- rotation and the timing job's layout ---------------------------------------------------------------
def test_rotation_goes_to_one_set_when_a_set_is_larger_than_l2_and_memory_is_short():
    l2 = 50 << 20
    big = GemmProblem.parse("50000x50000x64", layout="NT")  # 4.7 GiB a set
    set_cost = memory.input_set_bytes(big) + memory.output_bytes(big)
    assert rotation_count(big, l2, set_cost=set_cost, free_bytes=60 * GiB) == 2
    assert rotation_count(big, l2, set_cost=set_cost, free_bytes=int(1.5 * set_cost)) == 1
    small = GemmProblem.parse("1024x1024x1024")  # 6 MiB a set: many sets, all within memory
    assert rotation_count(small, l2, free_bytes=40 << 20) == 40 // 6
    assert rotation_count(small, l2) == 17


def test_timing_layout_shares_outputs_then_drops_cublaslt_when_memory_is_short():
    p = GemmProblem.parse("50000x50000x64", layout="NT")
    out, ins = memory.output_bytes(p), memory.input_set_bytes(p)
    names = ("torch", "cublaslt_heuristic", "cublaslt_autotune")
    assert plan_timing(p, 50 << 20, None, 4, names) == memory.TimingPlan(2, False)  # the CPU: as always
    roomy = plan_timing(p, 50 << 20, 75 * GiB, 4, names)
    assert roomy.n_sets == 1 and not roomy.shared_outputs and not roomy.dropped
    tight = plan_timing(p, 50 << 20, ins + 4 * out + 2 * GiB, 4, names)
    assert tight.shared_outputs and not tight.dropped and "outputs shared" in tight.note
    tighter = plan_timing(p, 50 << 20, ins + out + 2 * GiB, 4, names)
    assert tighter.shared_outputs and tighter.dropped == ("cublaslt_heuristic", "cublaslt_autotune")
    assert tighter.n_sets == 1


def test_shared_outputs_still_catch_a_stale_result(monkeypatch):
    """Contenders that share outputs are each checked right after their own timed run: an honest
    kernel's result in the shared buffer cannot hide a kernel that returns a remembered one."""
    from cudal2.bench import worker
    from cudal2.bench.timing import TimingConfig

    p = GemmProblem.parse((48, 40, 256))
    room = memory.input_set_bytes(p) + memory.output_bytes(p) + 4 * p.m * p.n + 1000  # one set, shared
    monkeypatch.setattr(memory, "spare_bytes", lambda device, reserved=0: room)
    sent = []

    class Conn:
        def send(self, msg):
            sent.append(msg)

    refs = [worker.KernelRef("honest", kernel=K.honest),
            worker.KernelRef("cached", kernel=K.HonestThenCached(honest_calls=1))]
    req = worker.TimeRequest(p, refs, ("torch",), ("offline",), TimingConfig(groups=2), AccuracyPolicy(), seed=1)
    worker._time(worker._State("cpu"), Conn(), req)
    (kind, payload), = sent
    assert kind == "ok" and payload["n_sets"] == 1
    assert "cached" in payload["failures"] and "honest" not in payload["failures"]
    assert "outputs shared" in payload["notes"]["honest"]
    assert payload["baselines"]["torch"]["available"]


def test_the_op_falls_back_to_torch_when_a_tuned_kernel_runs_out_of_memory():
    """A kernel whose workspace does not fit (its launcher allocates it once, when the call key is first
    seen) leaves that call key to torch, with one warning."""
    import cudal2.ops as ops

    class Hungry:
        def bind(self, m, n, k, device):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 18.63 GiB")

    p = GemmProblem(m=8, n=4, k=16)
    with pytest.warns(RuntimeWarning, match="ran out of device memory"):
        assert ops._launcher(Hungry(), p, (8, 4), torch.device("cpu")) is None


def test_checks_get_time_for_the_references_trips_to_the_host_only_where_it_cannot_stay():
    from cudal2.bench.evaluator import HOST_BYTES_PER_S, Evaluator

    p = GemmProblem.parse("50000x50000x64", layout="NT")
    ev = Evaluator(device="cpu")
    ev._memory = DeviceMemory(78 * GiB, 80 * GiB, "Fake GPU")
    roomy = ev.check_timeout(p)
    assert ev.host_reference_s(p, 4) == 0.0 and roomy == ev.config.run_timeout_s
    ev._memory = DeviceMemory(p.nbytes + 12 * GiB, 80 * GiB, "Fake GPU")  # 9.3 GiB of reference won't stay
    seeds_and_stream_order = ev.config.policy.seeds + 1
    allowance = seeds_and_stream_order * 3 * 4 * 50000 * 50000 / HOST_BYTES_PER_S
    assert ev.host_reference_s(p, seeds_and_stream_order) == pytest.approx(allowance)
    assert ev.check_timeout(p) == pytest.approx(roomy + allowance)
    assert ev.check_timeout(p, passes=1) == pytest.approx(roomy + allowance / seeds_and_stream_order)
