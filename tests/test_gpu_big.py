"""GPU: problems at the edges of device memory and of 32-bit indexing, through the search (the
evaluator) and through cudal2.matmul. Each must come out correct, or be refused with an error that
names the bytes needed and available: never wrong, and never an out-of-memory crash of the
evaluator's own making (before its buffers were sized to the free memory, 50000x50000x64 crashed
every candidate on an H100 asking for 18.6 GiB with 13.0 GiB free).

Run on the GPU machine: CUDAL2_GPU_TESTS=1 python -m pytest -m gpu tests/test_gpu_big.py -q -s"""

import math

import pytest

pytestmark = pytest.mark.gpu

BIG_OUTPUT = "50000x50000x64"  # D: 2.5e9 elements (past 2**31), 4.7 GiB; torch.matmul needs about that
BIG_B = "1x70000x40000"  # B: 2.8e9 elements, 5.2 GiB
BIG_A = "70000x16x40000"  # A: 2.8e9 elements, 5.2 GiB


def _backends():
    out = ["triton"]
    try:
        import cutlass.cute  # noqa: F401 (importable is all that is asked)
    except Exception:  # noqa: BLE001 - the CuTe DSL is optional (it travels in two parts to the GPU machine)
        return out
    return out + ["cute_dsl"]


def _search(shape: str, backend: str, store: str):
    import cudal2

    return cudal2.search(shape, layout="NT", backends=(backend,), budget=2, confirm=None, progress=False,
                         store=store, seed=0)


def _check_honest(res) -> None:
    """No result is an out-of-memory crash, and every correct one is within its bound."""
    for r in res.history:
        print(f"  {r.status:13s} {r.spec.summary():60s} {r.reason[:200]}")
        assert "out of memory" not in r.reason.lower(), r.reason
        if r.ok:
            assert r.correctness.rel_error <= r.correctness.bound, r
            print(f"    rel_error {r.correctness.rel_error:.2e} (bound {r.correctness.bound:.2e}), "
                  f"{r.kernel_ms('offline') * 1e3:.1f} us; checks {', '.join(r.correctness.checks)}")
    torch_b = res.baselines.get("torch")
    print(f"  torch: {torch_b.kernel_ms('offline') * 1e3 if torch_b else float('nan'):.1f} us; best: "
          f"{res.summary()}")
    assert torch_b is not None and torch_b.available, torch_b


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """shape -> (SearchResult, store path) of a Triton search of budget 2, run once per shape."""
    done: dict = {}

    def run(shape: str):
        if shape not in done:
            store = str(tmp_path_factory.mktemp("big") / "store.db")
            print(f"\nsearch {shape} NT, triton, budget 2")
            done[shape] = (_search(shape, "triton", store), store)
        return done[shape]

    return run


@pytest.mark.parametrize("shape", [BIG_OUTPUT, BIG_B, BIG_A])
def test_triton_search_is_correct_past_two_to_the_31_elements(searched, shape):
    res, _ = searched(shape)
    _check_honest(res)
    assert res.best is not None, f"no correct Triton kernel for {shape}: {[r.reason for r in res.history]}"


@pytest.mark.skipif("cute_dsl" not in _backends(), reason="the CuTe DSL is not importable here")
def test_cute_dsl_search_of_the_big_output_is_correct_or_refused(tmp_path):
    print(f"\nsearch {BIG_OUTPUT} NT, cute_dsl, budget 2")
    res = _search(BIG_OUTPUT, "cute_dsl", str(tmp_path / "dsl.db"))
    _check_honest(res)  # a kernel that cannot index this output is caught (incorrect or crash), never ok


def _relative_error(x, ref) -> float:
    import torch

    return (torch.linalg.vector_norm(x.double() - ref.double()) / torch.linalg.vector_norm(ref.double())).item()


def _sampled_rows_reference(a, b, rows, cols_per_block: int = 8192):
    """fp32 reference of out[rows] = a[rows] @ b, B taken a block of columns at a time (no fp32 copy
    of a whole operand past 2**31 elements)."""
    import torch

    a_rows = a[rows].float()
    return torch.cat([a_rows @ b[:, c0:c0 + cols_per_block].float() for c0 in range(0, b.shape[1], cols_per_block)],
                     dim=1)


def _forced_table(res):
    """A table that sends the problem to the search's best kernel whatever its speed: the op's
    tuned path on this shape (the table the search writes sends it to torch where torch is faster)."""
    from cudal2.store.table import TunedEntry, TunedTable

    ms = res.best.time_ms["offline"]
    return TunedTable([TunedEntry(res.problem, res.best.spec, ms, {"torch": 2 * ms})])


@pytest.mark.parametrize("shape", [BIG_OUTPUT, BIG_B, BIG_A])
@pytest.mark.parametrize("table", ["searched", "forced"])
def test_matmul_op_is_as_accurate_as_torch_on_sampled_rows(searched, shape, table):
    """cudal2.matmul with the table the search wrote (its tuned kernel where it beats torch, else
    torch), or with one forced to the search's best kernel, checked on sampled rows against an fp32
    reference, next to torch.matmul's own rows."""
    import torch

    import cudal2
    import cudal2.ops as ops
    from cudal2.store.table import TunedTable

    res, store = searched(shape)
    m, n, k = (int(x) for x in shape.split("x"))
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.float16, generator=g)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16, generator=g).t()  # NT: W.t()
    ops.set_table(TunedTable.from_store(store) if table == "searched" else _forced_table(res))
    try:
        out = cudal2.matmul(a, b)
        torch.cuda.synchronize()
        tuned = ops._launchers.get(ops._matmul_key(a, b)) is not None  # the kernel ran, not torch
    finally:
        ops.set_table(None)
    assert tuned or table == "searched"
    assert out.shape == (m, n) and out.dtype == torch.float16
    rows = torch.randperm(m, generator=g, device="cuda")[:64].sort().values
    ref = _sampled_rows_reference(a, b, rows)
    ours = _relative_error(out[rows], ref)
    theirs = _relative_error(torch.matmul(a[rows], b), ref)
    last = _relative_error(out[-1:], _sampled_rows_reference(a, b, torch.tensor([m - 1], device="cuda")))
    print(f"\n{shape} NT, {table} table: cudal2.matmul ({'tuned ' + res.best.spec.summary() if tuned else 'torch'}) "
          f"error {ours:.2e} on {rows.numel()} sampled rows, {last:.2e} on the last row; torch.matmul {theirs:.2e}")
    del a, b, out
    torch.cuda.empty_cache()  # the evaluator's worker, a process of its own, needs this memory next
    assert math.isfinite(ours) and ours <= 3 * theirs + 1e-4
    assert math.isfinite(last) and last <= 3 * theirs + 1e-4  # the far end, past 2**31 elements


def test_the_big_output_is_searched_with_little_memory_left(tmp_path):
    """Another process holds most of the GPU: the search gets the problem's own bytes and 12 GiB,
    less than one fp32 reference (9.3 GiB) beside one output per contender. The reference goes to
    the host, the contenders share their outputs, a split-K workspace that does not fit is refused
    uncompiled; the kernels found are correct. (Refused with the bytes named is acceptable too.)"""
    import torch

    from cudal2.ir import GemmProblem, SpecError

    p = GemmProblem.parse(BIG_OUTPUT, layout="NT")
    free, _total = torch.cuda.mem_get_info()
    ballast = torch.empty(max(0, free - (p.nbytes + 12 * 2**30)), dtype=torch.uint8, device="cuda")
    print(f"\nsearch {BIG_OUTPUT} NT, triton, budget 2, with {torch.cuda.mem_get_info()[0] / 2**30:.1f} GiB free")
    try:
        res = _search(BIG_OUTPUT, "triton", str(tmp_path / "tight.db"))
    except SpecError as e:
        print(f"refused: {e}")
        assert "bytes" in str(e) and "free on" in str(e)
        return
    finally:
        del ballast
        torch.cuda.empty_cache()
    _check_honest(res)
    assert res.best is not None, [r.reason for r in res.history]


def test_a_problem_larger_than_the_free_memory_is_refused_before_anything_compiles(tmp_path):
    import torch

    from cudal2.ir import SpecError

    _free, total = torch.cuda.mem_get_info()
    side = math.isqrt(int(1.05 * total) // 2) + 1  # an output alone a little larger than the GPU
    with pytest.raises(SpecError) as e:
        _search(f"{side}x{side}x64", "triton", str(tmp_path / "refused.db"))
    text = str(e.value)
    print(f"\nrefused: {text}")
    assert "bytes" in text and ("free on" in text or "largest GPU" in text)
    assert str(side * side * 2 + 2 * side * 64 * 2) in text  # the bytes needed
