"""Correctness checks. Plain torch, so they run on CPU tensors too (the CPU tests feed them
cheating "kernels" written in torch) and on the GPU inside the worker.

The error bound is relative, not absolute: a trusted result (torch.matmul in the problem's
dtypes, i.e. cuBLAS with fp32 accumulation, rounded to the output dtype) is compared with the
same fp32 reference as the candidate, and the candidate may be at most FACTOR times worse
(and never has to beat a small floor). Rounding the output alone costs about 2e-4 for fp16
and about 2e-3 for bf16 (relative Frobenius); fp16 accumulation over a long K costs 1e-3 to
5e-3 more, so with FACTOR = 3 a kernel that declares fp32 accumulation but accumulates in
fp16 fails, while any honest fp32-accumulate kernel (split-K, different summation order) passes.
The separation needs a long K: over a short K fp16 accumulation is as accurate as fp32
accumulation for that shape, and the check then (correctly) has nothing to reject.
"""

from __future__ import annotations

import contextlib
import math
import secrets
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from ..ir import GemmProblem
from . import memory
from .inputs import GuardedOutput, Operands, make_operands, torch_dtype
from .results import Correctness

# Error sums and finite counts take their temporaries this many elements at a time (a float64
# block of 256 MiB), so that checking an output costs a bounded amount beside it, whatever its size.
CHECK_BLOCK_ELEMENTS = 1 << 25
# The fp32 reference stays on the device only if this much is left beside it for the blocks that
# compute it and the error sums; otherwise it is kept on the host, and compared block by block.
SCRATCH_MIN = 256 << 20


@dataclass(frozen=True)
class AccuracyPolicy:
    factor: float = 3.0  # candidate error may be this many times the trusted reference's error
    floors: dict[str, float] = field(default_factory=lambda: {"float16": 1e-4, "bfloat16": 8e-4})
    fp16_accumulate_bound: float = 2e-2  # for problems that declare accumulator="float16"
    seeds: int = 3
    stream_order: bool = True  # the stream-order check (CUDA only); the long-K probe skips it


class CheckFailure(Exception):
    """A correctness check failed; str(e) is the reason recorded with the candidate."""


def _activation(x, name: str):
    import torch.nn.functional as F

    return {"none": lambda t: t, "relu": F.relu, "gelu": F.gelu, "silu": F.silu}[name](x)


def _epilogue(problem: GemmProblem, acc, ops: Operands, rows: slice = slice(None), cols: slice = slice(None)):
    """alpha * acc + beta * C + bias, then the activation, in fp32 (acc: the block rows x cols)."""
    e = problem.epilogue
    out = acc * e.alpha if e.alpha != 1.0 else acc
    if e.beta != 0:
        out = out + e.beta * ops.c_in[rows, cols].float()
    if e.bias:
        out = out + ops.bias[cols].float()
    return _activation(out, e.activation)


def _blocks(m: int, n: int, rows: int, cols: int) -> Iterator[tuple[slice, slice]]:
    for r0 in range(0, m, rows):
        for c0 in range(0, n, cols):
            yield slice(r0, min(r0 + rows, m)), slice(c0, min(c0 + cols, n))


def _check_blocks(m: int, n: int) -> Iterator[tuple[slice, slice]]:
    """Blocks of at most CHECK_BLOCK_ELEMENTS: whole rows where a row fits, else pieces of rows."""
    max_elements = CHECK_BLOCK_ELEMENTS
    cols = min(n, max_elements)
    return _blocks(m, n, memory.row_block(m, cols, max_elements), cols)


@contextlib.contextmanager
def _exact_fp32(on_cuda: bool):
    """fp32 products in fp32 (TF32 off) on the GPU."""
    import torch

    if not on_cuda:
        yield
        return
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


@contextlib.contextmanager
def _no_reduced_precision():
    """cuBLAS keeps fp32 partial sums for fp16/bf16 products (as a trusted library should)."""
    import torch

    m = torch.backends.cuda.matmul
    prev = (m.allow_fp16_reduced_precision_reduction, m.allow_bf16_reduced_precision_reduction)
    m.allow_fp16_reduced_precision_reduction = m.allow_bf16_reduced_precision_reduction = False
    try:
        yield
    finally:
        m.allow_fp16_reduced_precision_reduction, m.allow_bf16_reduced_precision_reduction = prev


def reference(problem: GemmProblem, ops: Operands, budget: int | None = None, device=None):
    """The fp32 reference (inputs are exact in fp32; TF32 disabled).

    budget: bytes its temporaries may take on the operands' device (None: no limit). Within it,
    one product, as ever; beyond it, the product is taken in blocks of rows and columns (and of
    K where a single column of full depth does not fit), each from fp32 copies of its slices of
    A and B alone. device: where the result is kept (default: the operands' device; "cpu" keeps
    an fp32 copy of an output the GPU cannot hold beside it)."""
    import torch

    m, n, k = problem.shape
    rows, cols, depth = memory.block_plan(m, n, k, None if budget is None else budget // 4)
    home = ops.a.device if device is None else torch.device(device)
    with _exact_fp32(ops.a.is_cuda):
        if (rows, cols, depth) == (m, n, k) and home == ops.a.device:
            return _epilogue(problem, ops.a.float() @ ops.b.float(), ops)
        out = torch.empty((m, n), dtype=torch.float32, device=home)
        for r, c in _blocks(m, n, rows, cols):
            acc = None
            for d0 in range(0, k, depth):
                d = slice(d0, min(d0 + depth, k))
                part = ops.a[r, d].float() @ ops.b[d, c].float()
                acc = part if acc is None else acc.add_(part)
            out[r, c].copy_(_epilogue(problem, acc, ops, r, c))
        return out


def trusted_output(problem: GemmProblem, ops: Operands, ref=None):
    """What a trusted library produces in the problem's dtypes: torch.matmul (cuBLAS, fp32
    accumulation with reduced-precision reductions disabled) with the epilogue in fp32, rounded
    to the output dtype. On the CPU the fp32 reference rounded to the output dtype stands in.
    The whole output at once; expected_for() takes the same in blocks where memory is short."""
    import torch

    out_dt = torch_dtype(problem.c_dtype)
    if ops.a.is_cuda:
        with _no_reduced_precision():
            acc = torch.matmul(ops.a, ops.b)
        return _epilogue(problem, acc.float(), ops).to(out_dt)
    ref = reference(problem, ops) if ref is None else ref
    return ref.to(out_dt)


def _squares(x, ref) -> tuple[float, float]:
    """(sum of (x - ref)^2, sum of ref^2) in float64, CHECK_BLOCK_ELEMENTS at a time (ref, which
    may live on the host, is moved to x's device a block at a time)."""
    import torch

    diff_sq = ref_sq = 0.0
    pieces = ((x[r, c], ref[r, c]) for r, c in _check_blocks(*x.shape)) if x.dim() == 2 else [(x, ref)]
    for xb, refb in pieces:
        rb = refb.to(device=x.device, dtype=torch.float64)
        diff_sq += torch.linalg.vector_norm(xb.double() - rb).item() ** 2
        ref_sq += torch.linalg.vector_norm(rb).item() ** 2
    return diff_sq, ref_sq


def _ratio(diff_sq: float, ref_sq: float) -> float:
    return math.sqrt(diff_sq) / max(math.sqrt(ref_sq), 1e-300)


def rel_error(x, ref) -> float:
    """Relative Frobenius error ||x - ref|| / ||ref||, in float64, block by block (ref may live on
    another device: the host, for an output the GPU cannot hold twice)."""
    return _ratio(*_squares(x, ref))


def count_nonfinite(t) -> int:
    """Elements of a 2-D tensor that are NaN or +-Inf, counted block by block."""
    import torch

    return sum(int((~torch.isfinite(t[r, c])).sum().item()) for r, c in _check_blocks(*t.shape))


def bound_for(problem: GemmProblem, trusted_error: float, policy: AccuracyPolicy = AccuracyPolicy()) -> float:
    floor = policy.floors.get(problem.c_dtype, 1e-3)
    if problem.accumulator == "float16":
        floor = max(floor, policy.fp16_accumulate_bound)
    return max(policy.factor * trusted_error, floor)


@dataclass
class Expected:
    """The reference of one input set, computed once and reused by every check of it."""

    ref: Any  # fp32 (M, N); on the host where the device could not hold it
    trusted_error: float
    bound: float


def expected_for(problem: GemmProblem, ops: Operands, policy: AccuracyPolicy = AccuracyPolicy(),
                 budget: int | None = None) -> Expected:
    """The reference and the error bound of one input set. budget: bytes this may take on the
    operands' device (None: no limit). The fp32 reference stays there if it leaves SCRATCH_MIN of
    the budget for the blocks; otherwise it is kept on the host. The trusted library's output is
    taken in blocks of the same rows and columns and never held whole."""
    import torch

    m, n, _ = problem.shape
    ref_bytes = memory.reference_bytes(problem)
    on_device = budget is None or not ops.a.is_cuda or ref_bytes + SCRATCH_MIN <= budget
    scratch = None if budget is None else max(SCRATCH_MIN, budget - (ref_bytes if on_device else 0))
    ref = reference(problem, ops, scratch, device=None if on_device else "cpu")
    out_dt = torch_dtype(problem.c_dtype)
    if scratch is None:
        rows, cols = m, n
    else:  # a trusted block: 16-bit product, fp32 epilogue, rounded copies: ~32 bytes an element
        block = max(CHECK_BLOCK_ELEMENTS, (scratch - 3 * 8 * CHECK_BLOCK_ELEMENTS) // 32)
        cols = min(n, block)
        rows = memory.row_block(m, cols, block)
    trusted_sq = rounded_sq = ref_sq = 0.0
    for r, c in _blocks(m, n, rows, cols):
        ref_block = ref[r, c].to(ops.a.device)
        rounded = ref_block.to(out_dt)
        d, q = _squares(rounded, ref_block)
        rounded_sq, ref_sq = rounded_sq + d, ref_sq + q
        if ops.a.is_cuda:
            with _no_reduced_precision():
                acc = torch.matmul(ops.a[r], ops.b[:, c])
            trusted = _epilogue(problem, acc.float(), ops, r, c).to(out_dt)
            trusted_sq += _squares(trusted, ref_block)[0]
            del acc, trusted
        else:
            trusted_sq += d
        del ref_block, rounded
    t_err = max(_ratio(trusted_sq, ref_sq), _ratio(rounded_sq, ref_sq))
    return Expected(ref, t_err, bound_for(problem, t_err, policy))


def verify_output(problem: GemmProblem, out: GuardedOutput, expected: Expected, returned=None) -> float:
    """Check an output buffer after a call; return the relative error or raise CheckFailure."""
    if returned is not None and (not hasattr(returned, "data_ptr") or returned.data_ptr() != out.c.data_ptr()
                                 or tuple(returned.shape) != tuple(out.c.shape)):
        raise CheckFailure("returned a tensor other than the output it was given (results must be written "
                           "into c, not into a new or cached tensor)")
    intact, changed = out.intact_guards()
    if not intact:
        raise CheckFailure(f"wrote outside the output: {changed} guard elements around it changed")
    bad = count_nonfinite(out.c)
    if bad:
        what = "never written (they still hold the NaN poison) or NaN/Inf"
        raise CheckFailure(f"{bad} of {out.c.numel()} output elements {what}")
    err = rel_error(out.c, expected.ref)
    if not err <= expected.bound:
        acc = problem.accumulator
        raise CheckFailure(
            f"relative error {err:.3e} exceeds the bound {expected.bound:.3e} "
            f"(the trusted reference's error is {expected.trusted_error:.3e}); "
            f"with accumulator={acc!r} declared, errors like this mean fp16 accumulation or a wrong result")
    return err


def call_and_verify(kernel: Callable, problem: GemmProblem, ops: Operands, out: GuardedOutput,
                    expected: Expected, sync: Callable[[], None] = lambda: None) -> float:
    out.poison(ops.c_in)
    sync()
    ret = kernel(ops.a, ops.b, out.c, ops.bias)
    sync()  # the whole device: work hidden on another stream has finished before we look
    err = verify_output(problem, out, expected, ret)
    # A backend's kernel owns a split-K or stream-K workspace with guards of its own (the evaluator's
    # guards surround only the buffers it hands over); a callable without one has nothing to say.
    intact = getattr(kernel, "workspace_intact", None)
    if intact is not None and not intact():
        raise CheckFailure("wrote outside its own workspace: a guard zone around the split-K/stream-K workspace "
                           "it allocated changed")
    return err


# The stream-order check's device-side delay must outlast the launches enqueued behind it. For a
# group: a floor and a share for each kernel (a launch takes well under a millisecond, and an event
# tells when the group's launches outlasted the delay anyway: its kernels are then checked again
# one at a time). In GPU clock cycles, at 1.98 GHz: about 5 ms and 2.5 ms a kernel (16 kernels:
# 45 ms; 4: 15 ms). A kernel checked alone, where lateness is not held against it (it may wait for
# the device before it launches), gets the long delay: about 50 ms.
DELAY_CYCLES = 10_000_000
DELAY_CYCLES_PER_KERNEL = 5_000_000
LONE_DELAY_CYCLES = 100_000_000


def delay_cycles(kernels: int) -> int:
    return LONE_DELAY_CYCLES if kernels <= 1 else DELAY_CYCLES + DELAY_CYCLES_PER_KERNEL * kernels


def stream_order_check(kernel: Callable, problem: GemmProblem, ops: Operands, policy: AccuracyPolicy, seed: int,
                       spin_cycles: int | None = None, reserved: int = 0) -> float:
    """CUDA only: stream_order_many for one kernel. Returns its relative error, or raises
    CheckFailure with the reason. reserved: device bytes to leave free for the kernel (its workspace)."""
    found = stream_order_many({"kernel": kernel}, problem, ops, policy, seed, spin_cycles, reserved)["kernel"]
    if isinstance(found, str):
        raise CheckFailure(found)
    return found


def stream_order_many(kernels: dict[str, Callable], problem: GemmProblem, ops: Operands, policy: AccuracyPolicy,
                      seed: int, spin_cycles: int | None = None, reserved: int = 0) -> dict[str, float | str]:
    """The stream-order check of many kernels behind one device-side delay (spin_cycles, by default
    delay_cycles(len(kernels))): new inputs are written on the caller's stream behind the delay,
    then every kernel is called at once, each into its own poisoned output. Every launch must be
    enqueued while the delay still runs (an event behind it says so); a kernel whose work on
    another stream does not wait reads the old inputs and fails.
    Returns name -> relative error, or the reason it failed ("inconclusive: ..." where the
    launches outlasted the delay, so the caller checks those kernels again, fewer at a time).
    CUDA only."""
    import torch

    fresh = make_operands(problem, seed, ops.a.device)
    exp = expected_for(problem, fresh, policy, memory.spare_bytes(ops.a.device, reserved))
    outs = {name: GuardedOutput(problem, ops.a.device, seed=seed + i) for i, name in enumerate(kernels)}
    for out in outs.values():
        out.poison(fresh.c_in)
    torch.cuda.synchronize()
    # the caller's stream is busy; other streams are not
    torch.cuda._sleep(delay_cycles(len(kernels)) if spin_cycles is None else spin_cycles)
    delay_over = torch.cuda.Event()
    delay_over.record()
    for dst, src in ((ops.a, fresh.a), (ops.b, fresh.b), (ops.bias, fresh.bias), (ops.c_in, fresh.c_in)):
        if dst is not None:
            dst.copy_(src)
    returned: dict[str, Any] = {}
    found: dict[str, float | str] = {}
    for name, kernel in kernels.items():
        try:
            returned[name] = kernel(ops.a, ops.b, outs[name].c, ops.bias)
        except Exception as e:  # noqa: BLE001 - this kernel's failure; the others still run
            found[name] = f"raised {type(e).__name__}: {e}"
    # The delay ended before the last launch: the test did not hold for the later kernels. Alone, a
    # kernel that waits for the device before it launches (and so honours the order) is checked as
    # stream_order_check does it.
    late = len(kernels) > 1 and delay_over.query()
    torch.cuda.synchronize()
    for name in kernels:
        if name in found:
            continue
        if late:
            found[name] = "inconclusive: the launches outlasted the delay"
            continue
        try:
            found[name] = verify_output(problem, outs[name], exp, returned[name])
        except CheckFailure as e:
            found[name] = (f"stream order: inputs written on the caller's stream just before the call were not "
                           f"seen (work on another stream that does not wait for the caller's): {e}")
    return found


CHECKS = ("fresh-normal-inputs", "refilled-same-pointers", "nan-poison", "guard-zones", "finite",
          "rel-frobenius-vs-trusted")


# A reference the checks of many kernels share (check_kernel's `references`) is kept only up to this
# size: 72 MB for a 1000x17920 output; a larger one is taken again for each kernel, as memory allows.
SHARED_REFERENCE_BYTES = 512 << 20


def check_kernel(kernel: Callable, problem: GemmProblem, device="cpu", policy: AccuracyPolicy = AccuracyPolicy(),
                 sync: Callable[[], None] = lambda: None, base_seed: int | None = None,
                 reserved: int = 0, storage: tuple[Operands, GuardedOutput] | None = None,
                 stream_order: bool | None = None, references: dict | None = None) -> Correctness:
    """The checks before any timing: `policy.seeds` input sets, each written into the same
    operand storage (same pointers, new values), each call into a freshly poisoned, guarded
    output. Raises CheckFailure on the first failing check.

    On a GPU the references are sized to the memory left (see expected_for), less `reserved`
    bytes kept free for the kernel itself (its workspace, allocated on its first call); the
    stream-order check, which needs a second input set, is skipped (and said so in the checks)
    where that set does not fit.

    storage: operands and output to reuse (the checks of many kernels on one problem allocate
    them once; every seed is written into them anew). stream_order: False leaves the stream-order
    check to the caller (stream_order_many checks many kernels behind one delay); None follows
    the policy. references: a dict kept by a caller that checks many kernels on the same seeds
    (the worker, for the candidates of one request): the reference of each (problem, seed) is
    taken once and kept there (up to SHARED_REFERENCE_BYTES, on the device)."""
    base = secrets.randbits(31) if base_seed is None else base_seed
    if storage is None:
        ops, out = make_operands(problem, base, device), GuardedOutput(problem, device)
    else:
        ops, out = storage
        ops.refill(base)
    worst, bound = 0.0, 0.0
    exp = None
    for i in range(policy.seeds):
        if i:
            ops.refill(base + i)
        exp = None  # the last set's reference goes before the next one is made
        key = (problem.key(), base + i)
        exp = references.get(key) if references is not None else None
        if exp is None:
            exp = expected_for(problem, ops, policy, memory.spare_bytes(device, reserved))
            if (references is not None and memory.reference_bytes(problem) <= SHARED_REFERENCE_BYTES
                    and getattr(exp.ref, "device", None) == getattr(ops.a, "device", None)):
                references[key] = exp
        try:
            err = call_and_verify(kernel, problem, ops, out, exp, sync)
        except CheckFailure as e:
            raise CheckFailure(f"seed {base + i}: {e}") from None
        worst, bound = max(worst, err), max(bound, exp.bound)
    exp = None
    checks = CHECKS if problem.epilogue.beta == 0 else tuple(c for c in CHECKS if c != "nan-poison")
    if (policy.stream_order if stream_order is None else stream_order) and getattr(ops.a, "is_cuda", False):
        spare = memory.spare_bytes(device, reserved)
        second_set = memory.input_set_bytes(problem)
        if spare is not None and second_set + SCRATCH_MIN > spare:
            checks += ((f"stream-order skipped: a second input set ({second_set} bytes) does not fit in the "
                        f"{spare} bytes left"),)
        else:
            err = stream_order_check(kernel, problem, ops, policy, base + policy.seeds, reserved=reserved)
            worst, checks = max(worst, err), checks + ("stream-order",)
    return Correctness(rel_error=worst, bound=bound, seeds=policy.seeds, checks=checks)
