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

import secrets
from dataclasses import dataclass, field
from typing import Any, Callable

from ..ir import GemmProblem
from .inputs import GuardedOutput, Operands, make_operands, torch_dtype
from .results import Correctness


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


def _epilogue(problem: GemmProblem, acc, ops: Operands):
    """alpha * acc + beta * C + bias, then the activation, in fp32."""
    e = problem.epilogue
    out = acc * e.alpha if e.alpha != 1.0 else acc
    if e.beta != 0:
        out = out + e.beta * ops.c_in.float()
    if e.bias:
        out = out + ops.bias.float()
    return _activation(out, e.activation)


def reference(problem: GemmProblem, ops: Operands):
    """The fp32 reference (inputs are exact in fp32; TF32 disabled)."""
    import torch

    if ops.a.is_cuda:
        prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            acc = ops.a.float() @ ops.b.float()
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev
    else:
        acc = ops.a.float() @ ops.b.float()
    return _epilogue(problem, acc, ops)


def trusted_output(problem: GemmProblem, ops: Operands, ref=None):
    """What a trusted library produces in the problem's dtypes: torch.matmul (cuBLAS, fp32
    accumulation with reduced-precision reductions disabled) with the epilogue in fp32, rounded
    to the output dtype. On the CPU the fp32 reference rounded to the output dtype stands in."""
    import torch

    out_dt = torch_dtype(problem.c_dtype)
    if ops.a.is_cuda:
        m = torch.backends.cuda.matmul
        prev = (m.allow_fp16_reduced_precision_reduction, m.allow_bf16_reduced_precision_reduction)
        m.allow_fp16_reduced_precision_reduction = m.allow_bf16_reduced_precision_reduction = False
        try:
            acc = torch.matmul(ops.a, ops.b)
        finally:
            m.allow_fp16_reduced_precision_reduction, m.allow_bf16_reduced_precision_reduction = prev
        return _epilogue(problem, acc.float(), ops).to(out_dt)
    ref = reference(problem, ops) if ref is None else ref
    return ref.to(out_dt)


def rel_error(x, ref) -> float:
    """Relative Frobenius error ||x - ref|| / ||ref||, in float64."""
    import torch

    d = x.double() - ref.double()
    den = torch.linalg.vector_norm(ref.double()).item()
    return torch.linalg.vector_norm(d).item() / max(den, 1e-300)


def bound_for(problem: GemmProblem, trusted_error: float, policy: AccuracyPolicy = AccuracyPolicy()) -> float:
    floor = policy.floors.get(problem.c_dtype, 1e-3)
    if problem.accumulator == "float16":
        floor = max(floor, policy.fp16_accumulate_bound)
    return max(policy.factor * trusted_error, floor)


@dataclass
class Expected:
    """The reference of one input set, computed once and reused by every check of it."""

    ref: Any
    trusted_error: float
    bound: float


def expected_for(problem: GemmProblem, ops: Operands, policy: AccuracyPolicy = AccuracyPolicy()) -> Expected:
    ref = reference(problem, ops)
    trusted = trusted_output(problem, ops, ref)
    t_err = max(rel_error(trusted, ref), rel_error(ref.to(trusted.dtype), ref))
    return Expected(ref, t_err, bound_for(problem, t_err, policy))


def verify_output(problem: GemmProblem, out: GuardedOutput, expected: Expected, returned=None) -> float:
    """Check an output buffer after a call; return the relative error or raise CheckFailure."""
    import torch

    if returned is not None and (not hasattr(returned, "data_ptr") or returned.data_ptr() != out.c.data_ptr()
                                 or tuple(returned.shape) != tuple(out.c.shape)):
        raise CheckFailure("returned a tensor other than the output it was given (results must be written "
                           "into c, not into a new or cached tensor)")
    intact, changed = out.intact_guards()
    if not intact:
        raise CheckFailure(f"wrote outside the output: {changed} guard elements around it changed")
    bad = int((~torch.isfinite(out.c)).sum().item())
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
    return verify_output(problem, out, expected, ret)


def stream_order_check(kernel: Callable, problem: GemmProblem, ops: Operands, out: GuardedOutput,
                       policy: AccuracyPolicy, seed: int, spin_cycles: int = 100_000_000) -> float:
    """CUDA only: new input values are written on the caller's stream behind a device-side
    delay (about 50 ms), and the kernel is called at once. A kernel that honours stream order
    reads the new values; work launched on another stream that does not wait for the caller's
    stream reads the old ones and fails. Then the whole device is synchronized and the output
    checked."""
    import torch

    fresh = make_operands(problem, seed, ops.a.device)  # staged on the device before the delay
    exp = expected_for(problem, fresh, policy)
    out.poison(fresh.c_in)
    torch.cuda.synchronize()
    torch.cuda._sleep(spin_cycles)  # the caller's stream is busy; other streams are not
    for dst, src in ((ops.a, fresh.a), (ops.b, fresh.b), (ops.bias, fresh.bias), (ops.c_in, fresh.c_in)):
        if dst is not None:
            dst.copy_(src)  # device to device: asynchronous, ordered on the caller's stream
    ret = kernel(ops.a, ops.b, out.c, ops.bias)
    torch.cuda.synchronize()
    try:
        return verify_output(problem, out, exp, ret)
    except CheckFailure as e:
        raise CheckFailure(f"stream order: inputs written on the caller's stream just before the call were not "
                           f"seen (work on another stream that does not wait for the caller's): {e}") from None


CHECKS = ("fresh-normal-inputs", "refilled-same-pointers", "nan-poison", "guard-zones", "finite",
          "rel-frobenius-vs-trusted")


def check_kernel(kernel: Callable, problem: GemmProblem, device="cpu", policy: AccuracyPolicy = AccuracyPolicy(),
                 sync: Callable[[], None] = lambda: None, base_seed: int | None = None) -> Correctness:
    """The checks before any timing: `policy.seeds` input sets, each written into the same
    operand storage (same pointers, new values), each call into a freshly poisoned, guarded
    output. Raises CheckFailure on the first failing check."""
    base = secrets.randbits(31) if base_seed is None else base_seed
    ops = make_operands(problem, base, device)
    out = GuardedOutput(problem, device)
    worst, bound = 0.0, 0.0
    for i in range(policy.seeds):
        if i:
            ops.refill(base + i)
        exp = expected_for(problem, ops, policy)
        try:
            err = call_and_verify(kernel, problem, ops, out, exp, sync)
        except CheckFailure as e:
            raise CheckFailure(f"seed {base + i}: {e}") from None
        worst, bound = max(worst, err), max(bound, exp.bound)
    checks = CHECKS if problem.epilogue.beta == 0 else tuple(c for c in CHECKS if c != "nan-poison")
    if policy.stream_order and getattr(ops.a, "is_cuda", False):
        err = stream_order_check(kernel, problem, ops, out, policy, base + policy.seeds)
        worst, checks = max(worst, err), checks + ("stream-order",)
    return Correctness(rel_error=worst, bound=bound, seeds=policy.seeds, checks=checks)
