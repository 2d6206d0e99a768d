"""cudal2.matmul and cudal2.linear against torch.matmul and F.linear over random cases on the CPU
(hypothesis): every dtype, 1-D to 4-D operands with broadcast batch dimensions, transposed and strided
views, empty dimensions, gradients, bias shapes and out=. Each case gives torch's result and
gradients, or raises the exception type torch raises. Values are -1, 0 or 1, so every sum is exact in
every dtype and results compare bit for bit whatever order a path sums in."""

import shutil

import pytest
import torch
import torch.nn.functional as F

import cudal2
from cudal2 import ops
from cudal2.ir import GemmProblem, KernelSpec
from cudal2.store.table import TunedEntry, TunedTable

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.int32, torch.int64]
GRAD_DTYPES = {torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64}
CHECKS = settings(max_examples=150, deadline=None, database=None)


@pytest.fixture(autouse=True, scope="module")
def _empty_table():
    ops.set_table(TunedTable())
    yield
    ops.set_table(None)


@st.composite
def operand(draw, shape: tuple[int, ...], dtype: torch.dtype, grad_ok: bool = True) -> torch.Tensor:
    """A tensor of shape with values in {-1, 0, 1} (each part of a complex one): contiguous, a transposed view, or every other element."""
    seed = draw(st.integers(0, 2**16))
    layout = draw(st.sampled_from(["contiguous", "transposed", "strided"])) if len(shape) >= 2 else \
        draw(st.sampled_from(["contiguous", "strided"]))
    made = shape[:-2] + (shape[-1], shape[-2]) if layout == "transposed" else \
        shape[:-1] + (2 * shape[-1],) if layout == "strided" and shape else shape
    generator = torch.Generator().manual_seed(seed)
    values = torch.randint(-1, 2, made, generator=generator).to(dtype)
    if dtype.is_complex:  # (an imaginary part too: a complex gradient is conjugated)
        values += 1j * torch.randint(-1, 2, made, generator=generator).to(dtype)
    t = values
    t = t.transpose(-1, -2) if layout == "transposed" else t[..., ::2] if layout == "strided" and shape else t
    assert t.shape == shape
    if grad_ok and dtype in GRAD_DTYPES and draw(st.booleans()):
        t.requires_grad_(True)
    return t


def _batch(draw, ndim: int, like: tuple[int, ...]) -> tuple[int, ...]:
    """ndim batch extents that broadcast against like (each 1 or like's), rarely one that does not."""
    out = []
    for i in range(ndim):
        j = i - ndim + len(like)
        choices = [1, like[j]] if j >= 0 else [1, 2, 3]
        out.append(draw(st.sampled_from(choices)) if draw(st.integers(0, 19)) else draw(st.integers(0, 3)))
    return tuple(out)


def _grads(run, tensors: list[torch.Tensor], seed: int):
    """The result of run() and the gradients of tensors under a random upstream gradient in {-1, 0, 1}."""
    for t in tensors:
        t.grad = None
    y = run()
    if not y.requires_grad:
        return y, None
    upstream = torch.randint(-1, 2, y.shape, generator=torch.Generator().manual_seed(seed)).to(y.dtype)
    y.backward(upstream)
    return y, [None if t.grad is None else t.grad.clone() for t in tensors]


def _outcomes(ours, theirs):
    """What ours() and theirs() each returned, or the exception each raised; None where either raised
    (after checking that both raised the same type): the case is settled."""
    outcome = []
    for run in (ours, theirs):
        try:
            outcome.append(run())
        except Exception as e:  # noqa: BLE001 - compared below
            outcome.append(e)
    got, want = outcome
    if isinstance(want, Exception) or isinstance(got, Exception):
        assert type(got) is type(want), (got, want)
        return None
    return got, want


def _compare(ours, theirs, tensors: list[torch.Tensor], seed: int,
             their_tensors: list[torch.Tensor] | None = None) -> None:
    """ours() against theirs(): the same result and the same gradients of tensors (theirs: of their_tensors, where
    theirs() computes with tensors of its own), or the same exception type."""
    both = _outcomes(lambda: _grads(ours, tensors, seed),
                     lambda: _grads(theirs, tensors if their_tensors is None else their_tensors, seed))
    if both is None:
        return
    got, want = both
    (y, grads), (y_torch, grads_torch) = got, want
    assert y.dtype == y_torch.dtype and y.shape == y_torch.shape
    torch.testing.assert_close(y.detach(), y_torch.detach(), rtol=0, atol=0)
    assert (grads is None) == (grads_torch is None)
    for g, g_torch in zip(grads or [], grads_torch or []):
        assert (g is None) == (g_torch is None)
        if g is not None:
            torch.testing.assert_close(g, g_torch, rtol=0, atol=0)


@st.composite
def matmul_case(draw):
    dtype = draw(st.sampled_from(DTYPES))
    b_dtype = dtype if draw(st.integers(0, 9)) else draw(st.sampled_from(DTYPES))
    m, n, k = (draw(st.integers(0, 5)) for _ in range(3))
    a_dims, b_dims = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    a_shape = (k,) if a_dims == 1 else _batch(draw, a_dims - 2, ()) + (m, k)
    b_k = k if draw(st.integers(0, 19)) else k + 1
    b_shape = (b_k,) if b_dims == 1 else _batch(draw, b_dims - 2, a_shape[:-2]) + (b_k, n)
    return draw(operand(a_shape, dtype)), draw(operand(b_shape, b_dtype)), draw(st.integers(0, 2**16))


@st.composite
def linear_case(draw):
    dtype = draw(st.sampled_from(DTYPES))
    m, n, k = (draw(st.integers(0, 5)) for _ in range(3))
    x_dims = draw(st.integers(1, 4))
    x_shape = _batch(draw, x_dims - 1, ()) + (k,)
    weight_k = k if draw(st.integers(0, 19)) else k + 1
    weight_shape = (n, weight_k) if draw(st.integers(0, 7)) else (weight_k,)
    out_n = weight_shape[0] if len(weight_shape) == 2 else None
    bias_shape = draw(st.sampled_from([None, "n", "scalar", "one", "rows"]))
    bias = None
    if bias_shape is not None:
        shape = {"n": (out_n,) if out_n is not None else (), "scalar": (), "one": (1,),
                 "rows": (x_shape[-2] if x_dims >= 2 else 1, out_n or 1)}[bias_shape]
        bias_dtype = dtype if draw(st.integers(0, 9)) else draw(st.sampled_from(DTYPES))
        bias = draw(operand(shape, bias_dtype))
    return draw(operand(x_shape, dtype)), draw(operand(weight_shape, dtype)), bias, draw(st.integers(0, 2**16))


@CHECKS
@given(matmul_case())
def test_matmul_is_torch_matmul(case):
    a, b, seed = case
    _compare(lambda: cudal2.matmul(a, b), lambda: torch.matmul(a, b), [a, b], seed)


@CHECKS
@given(matmul_case(), st.sampled_from(["empty", "right", "wrong dtype", "strided"]))
def test_matmul_out_is_torch_matmuls(case, out_kind):
    a, b, _ = case
    result = torch.result_type(a, b) if a.dtype.is_floating_point == b.dtype.is_floating_point else a.dtype

    def fresh_out():
        if out_kind == "empty":
            return torch.empty(0, dtype=result)
        if out_kind == "wrong dtype":
            return torch.empty(0, dtype=torch.int16 if result != torch.int16 else torch.float32)
        try:
            shape = torch.matmul(a.detach().to(result), b.detach().to(result)).shape
        except RuntimeError:  # (shapes torch refuses: any out does)
            shape = (1,)
        if out_kind == "strided":
            return torch.full((*shape[:-1], 2 * shape[-1]) if shape else (2,), 7, dtype=result)[..., ::2]
        return torch.full(shape, 7, dtype=result)

    def into_out(run):
        out = fresh_out()
        return run(a, b, out=out) is out, out.detach().clone()

    both = _outcomes(lambda: into_out(cudal2.matmul), lambda: into_out(torch.matmul))
    if both is None:
        return
    got, want = both
    assert got[0] and want[0]  # the out tensor itself is returned
    assert got[1].shape == want[1].shape and got[1].stride() == want[1].stride()
    torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)


@CHECKS
@given(linear_case())
def test_linear_is_f_linear(case):
    x, weight, bias, seed = case
    tensors = [x, weight] + ([bias] if bias is not None else [])
    _compare(lambda: cudal2.linear(x, weight, bias), lambda: F.linear(x, weight, bias), tensors, seed)


@CHECKS
@given(linear_case())
def test_linear_is_f_linear_again_once_its_weight_is_kept(case):
    """The second call of a case, where the first kept its weight (ops._torch_weights: every call of a weight no
    entry has, or its shape's unserved row counts, straight to F.linear), gives F.linear's result and gradients
    too. A table entry of a 3 x 4 weight at 2 rows keeps such weights by their shape's plan."""
    _twice_through_the_op([_entry(m=2, n=3, k=4, kernel_ms=0.1, torch_ms=0.2)], case)


def _entry(m: int, n: int, k: int, kernel_ms: float, torch_ms: float) -> TunedEntry:
    return TunedEntry(problem=GemmProblem(m=m, n=n, k=k, layout="NT"), spec=KernelSpec(block_m=32, block_n=32,
                      block_k=32, stages=2), kernel_ms=kernel_ms, baselines_ms={"torch": torch_ms}, gpu="")


def _twice_through_the_op(entries: list, case) -> None:
    """The case called twice through cudal2.linear with a table of entries (the first call keeps its weight, the
    second takes the kept path), each against F.linear."""
    ops.set_table(TunedTable(entries))
    try:
        x, weight, bias, seed = case
        tensors = [x, weight] + ([bias] if bias is not None else [])
        for _ in range(2):
            _compare(lambda: cudal2.linear(x, weight, bias), lambda: F.linear(x, weight, bias), tensors, seed)
    finally:
        ops.set_table(TunedTable())


@pytest.fixture(scope="module")
def probe_bound():
    """The C front with its probe bound (op_front.attach_probe: x's count and the capture test read in C++), as on
    a GPU host once it has built; unbound afterwards."""
    from cudal2 import op_front

    if ops._rebind_front is None or shutil.which("g++") is None:
        pytest.skip("no C front or no C++ compiler here: the front without its probe")
    bindings = op_front.attach_probe(wait=True)
    if bindings is None:
        pytest.fail(f"the probe did not bind: {op_front.probe_state()}")
    yield
    ops._rebind_front(numel_probe=0, capture_probe=0, linear_probe=0)


@CHECKS
@given(linear_case())
def test_linear_is_f_linear_with_the_front_s_probe_bound(probe_bound, case):
    """As above, with the front's probe answering for x's count and the capture test, and a second entry that
    serves a 5 x 4 weight only in graphs (its weights kept 'unless captured' once bound): every call's result
    and gradients are F.linear's."""
    small = ops.EAGER_MIN_SAVING_US / 4e3
    _twice_through_the_op([_entry(m=2, n=3, k=4, kernel_ms=0.1, torch_ms=0.2),
                           _entry(m=2, n=5, k=4, kernel_ms=small, torch_ms=2 * small)], case)


@st.composite
def routed_case(draw):
    """An nn.Linear of a float dtype (with a bias or not) and an input of 1 to 4 dims; the row counts a table serves
    its weight shape at (some eager, some only in graphs) and those check_routes declined."""
    dtype = draw(st.sampled_from([torch.float16, torch.bfloat16, torch.float32, torch.float64]))
    n, k = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    x_shape = _batch(draw, draw(st.integers(0, 3)), ()) + (k,)
    served = draw(st.lists(st.integers(1, 6), min_size=1, max_size=3, unique=True))
    graph_only = draw(st.sets(st.sampled_from(served)))
    declined = draw(st.sets(st.sampled_from(served)))
    return (dtype, n, k, draw(st.booleans()), draw(operand(x_shape, dtype)), served, graph_only, declined,
            draw(st.booleans()), draw(st.integers(0, 2**16)))


@CHECKS
@given(routed_case())
def test_a_routed_layer_is_nn_linear(case):
    """A layer route_linears routed (cudal2.ops.RoutedLinear: a row test, declined counts, the plan's eager counts,
    the gradient path, the op) gives nn.Linear's result and gradients, three calls in a row, with gradients on or
    off, whatever rows the table serves its shape at and check_routes declined."""
    dtype, n, k, with_bias, x, served, graph_only, declined, grad_on, seed = case
    small = ops.EAGER_MIN_SAVING_US / 4e3  # a win for calls captured in graphs only
    ops.set_table(TunedTable([_entry(m=m, n=n, k=k, kernel_ms=small if m in graph_only else 0.1,
                                     torch_ms=2 * small if m in graph_only else 0.2) for m in served]))
    try:
        torch.manual_seed(seed)
        plain = torch.nn.Linear(k, n, bias=with_bias).to(dtype)
        with torch.no_grad():  # values in {-1, 0, 1}: sums exact in every dtype, whatever the order
            for p in plain.parameters():
                p.copy_(torch.randint(-1, 2, p.shape, generator=torch.Generator().manual_seed(seed)))
        routed = torch.nn.Linear(k, n, bias=with_bias).to(dtype)
        routed.load_state_dict(plain.state_dict())
        cudal2.route_linears(routed, graphs=True)
        assert type(routed) is ops.RoutedLinear
        routed._cudal2_declined = frozenset(m * k for m in declined)  # as check_routes leaves them
        params = [p for p in (routed.weight, routed.bias) if p is not None]
        plain_params = [p for p in (plain.weight, plain.bias) if p is not None]
        with torch.set_grad_enabled(grad_on):
            for _ in range(3):
                _compare(lambda: routed(x), lambda: plain(x), [x, *params], seed, [x, *plain_params])
    finally:
        ops.set_table(TunedTable())
