"""The evaluator on a real GPU: every cheat caught, a real Triton spec evaluated end to end
against the baselines, crash isolation with a real illegal address.

Run on the GPU machine: CUDAL2_GPU_TESTS=1 python -m pytest -m gpu tests/test_gpu_bench.py -q -s
(or tools/gpu_bench.sh, which also runs benchmarks/measure_spread.py)."""

import pytest

from cheats import kernels as K
from cudal2.bench import evaluate, evaluate_kernels
from cudal2.ir import GemmProblem, KernelSpec, arch_from_capability

pytestmark = pytest.mark.gpu

# Long K so that fp16 accumulation shows; M, N moderate so the checks stay fast.
CHEAT_PROBLEM = GemmProblem.parse((1024, 512, 4096))

CHEATS = {
    "partial_write": ("incorrect", "never written"),
    "partial_write_one": ("incorrect", "never written"),
    "cached_by_pointer": ("incorrect", "relative error"),
    "stale_output": ("incorrect", "relative error"),
    "fp16_accumulate": ("incorrect", "relative error"),
    "write_past_end": ("incorrect", "outside the output"),
    "write_before_start": ("incorrect", "outside the output"),
    "new_tensor": ("incorrect", "returned a tensor"),
    "side_stream": ("incorrect", ""),  # stream order, graph capture or speed of light: any of them
    "triton_side_stream": ("incorrect", ""),
    "honest_then_cached": ("incorrect", "timed run"),
    "illegal_address": ("crash", ""),
}


@pytest.fixture(scope="module")
def cheat_report():
    kernels = {"honest": K.honest}
    for name in CHEATS:
        mod = "cheats.triton_cheats" if name.startswith("triton_") else "cheats.kernels"
        kernels[name] = f"{mod}:{name}"
    kernels["honest_after_crash"] = K.honest
    rep = evaluate_kernels(CHEAT_PROBLEM, kernels, mode=("layer", "chain", "mlp_chain", "offline", "server"),
                           baselines=("torch",))
    for c in rep.candidates:
        print(f"{c.name:22s} {c.status:10s} {c.reason[:160]}")
    return rep


@pytest.mark.parametrize("name", list(CHEATS))
def test_cheat_is_caught_on_the_gpu(cheat_report, name):
    c = {c.name: c for c in cheat_report.candidates}[name]
    status, why = CHEATS[name]
    assert c.status == status, f"{name}: {c.status} {c.reason}"
    assert why in c.reason


def test_honest_kernels_pass_and_are_timed_by_graph_replay(cheat_report):
    by = {c.name: c for c in cheat_report.candidates}
    for name in ("honest", "honest_after_crash"):  # the second runs after the illegal-address crash
        c = by[name]
        assert c.ok, c.reason
        assert "stream-order" in c.correctness.checks and "timed-output" in c.correctness.checks
        for mode in ("layer", "offline", "server"):
            t = c.timing[mode]
            assert t.method == "cuda-graph" and t.kernel_ms > 0 and t.call_ms > 0
        for mode in ("chain", "mlp_chain"):  # the replay less the floor's: positive
            t = c.timing[mode]
            assert t.method == "cuda-graph-marginal" and 0 < t.kernel_ms and t.call_ms > 0, mode
    # torch.matmul against itself through the same path: same kernel, so the same time within noise
    s = cheat_report.speedup(by["honest"], "torch", "offline")
    assert s is not None and 0.5 < s < 2.0


def _spec_for_this_gpu(**kw):
    import torch

    arch = arch_from_capability(*torch.cuda.get_device_capability())
    return KernelSpec(backend="triton", arch=arch, **kw)


def test_triton_spec_end_to_end_against_the_baselines():
    problem = GemmProblem.parse((2048, 2048, 2048))
    specs = [_spec_for_this_gpu(block_m=128, block_n=128, block_k=64, num_warps=8, stages=3),
             _spec_for_this_gpu(block_m=128, block_n=256, block_k=64, num_warps=8, stages=3)]
    rep = evaluate(problem, specs, mode=("offline", "server"))
    from rich.console import Console

    from cudal2.bench.report import table_from_report

    Console(width=220).print(table_from_report(rep, ("offline", "server")))
    ok = [c for c in rep.candidates if c.ok]
    assert ok, [(c.status, c.reason) for c in rep.candidates]
    for c in ok:
        assert c.correctness.rel_error < 1e-3 and c.source_digest
        assert c.timing["offline"].method == "cuda-graph"
        assert rep.speedup(c, "torch", "offline") is not None
    torch_b = rep.baselines["torch"]
    assert torch_b.available and torch_b.timing["offline"].kernel_ms > 0 and torch_b.timing["server"].kernel_ms > 0
    try:
        import nvmath  # noqa: F401
        have_nvmath = True
    except ImportError:
        have_nvmath = False
    for name in ("cublaslt_heuristic", "cublaslt_autotune"):
        b = rep.baselines[name]
        print(name, b.available, b.detail, b.timing)
        if have_nvmath:
            assert b.available and b.timing["offline"].kernel_ms > 0, b.detail
        else:
            assert not b.available and "nvmath" in b.detail
    env = rep.environment
    assert env.gpu_name != "cpu" and env.sm_count > 0 and env.torch and env.cuda
    print("environment:", env)


def test_layer_mode_times_each_call_alone_after_the_prelude_and_leaves_a_unchanged():
    """Layer timing (cudal2/bench/timing.py): the events around each call inside the graph time the
    call alone, not the prelude (a contender doing twice the work times at about twice the time,
    though the prelude's read of twice the L2 outlasts both), and the prelude leaves A as it was."""
    import torch

    from cudal2.bench.timing import LayerPrelude, TimingConfig, measure

    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    a = [torch.randn(256, 4096, device="cuda", dtype=torch.float16) for _ in range(2)]
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    c = torch.empty(256, 4096, device="cuda", dtype=torch.float16)
    before = [x.clone() for x in a]
    contenders = {"once": lambda i: torch.matmul(a[i], b, out=c),
                  "twice": lambda i: (torch.matmul(a[i], b, out=c), torch.matmul(a[i], b, out=c))}
    res = measure(contenders, 2, "layer", TimingConfig(groups=20), "cuda", LayerPrelude("cuda", l2, a))
    once, twice = res["once"].timing, res["twice"].timing
    assert once.method == "cuda-graph" and twice.method == "cuda-graph" and once.groups == 20
    # a group cycles over the sets for about target_group_ms (2 ms), not one pass of 2 calls
    assert res["once"].calls_per_group > 2 * 2 and res["once"].calls_per_group % 2 == 0, res["once"]
    assert 1.5 < twice.kernel_ms / once.kernel_ms < 2.5, (once, twice)
    assert all(torch.equal(x, y) for x, y in zip(a, before))


def test_sustained_mode_times_each_contender_alone_for_its_whole_window():
    """Sustained timing (cudal2/bench/timing.py): every contender runs alone past settle_ms, then
    window_ms of timed groups, per round. A contender doing twice the work must time at about twice
    the time, and the kept samples must cover the window, not a few stray groups."""
    import torch

    from cudal2.bench.timing import TimingConfig, measure

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    c = torch.empty_like(a)
    contenders = {"once": lambda i: torch.matmul(a, b, out=c),
                  "twice": lambda i: (torch.matmul(a, b, out=c), torch.matmul(a, b, out=c))}
    cfg = TimingConfig(settle_ms=200.0, window_ms=100.0, sustained_rounds=2)
    res = measure(contenders, 1, "sustained", cfg, device="cuda")
    once, twice = res["once"].timing, res["twice"].timing
    assert once.method == "cuda-graph" and twice.method == "cuda-graph"
    assert 1.8 < twice.kernel_ms / once.kernel_ms < 2.2
    # groups per round >= window / group length; kept samples x their length cover both windows
    assert once.groups >= 2 * 3
    calls = max(1, min(cfg.max_calls_per_group, int(cfg.target_group_ms / once.kernel_ms) + 1))
    assert once.kernel_ms * calls * once.groups >= 0.8 * cfg.sustained_rounds * cfg.window_ms


def test_a_contender_slow_on_the_host_is_timed_at_the_gpus_pace():
    """A call that spends a millisecond of Python before a 4-us kernel: its graph replays the kernel
    alone, so its kernel time must match the same kernel launched from a fast host path. Groups
    sized from the host's pace held 2 calls, and each replay's fixed cost read as kernel time."""
    import time

    import torch

    from cudal2.bench.timing import TimingConfig, measure

    a = [torch.randn(128, 64, device="cuda", dtype=torch.float16) for _ in range(2)]
    b = [torch.randn(64, 16384, device="cuda", dtype=torch.float16) for _ in range(2)]
    c = torch.empty(128, 16384, device="cuda", dtype=torch.float16)

    def slow(i):
        time.sleep(0.001)
        torch.matmul(a[i], b[i], out=c)

    contenders = {"fast": lambda i: torch.matmul(a[i], b[i], out=c), "slow": slow}
    res = measure(contenders, 2, "offline", TimingConfig(groups=10, call_groups=2), device="cuda")
    fast, slow_t = res["fast"].timing, res["slow"].timing
    assert fast.method == slow_t.method == "cuda-graph"
    assert slow_t.kernel_ms < 1.1 * fast.kernel_ms, (slow_t, fast)
    assert slow_t.call_ms > 50 * slow_t.kernel_ms  # the host's millisecond stays in its call time
