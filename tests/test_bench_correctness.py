"""The correctness checker on CPU tensors, against cheating "kernels" written in torch."""

import pytest
import torch

from cheats import kernels as K
from cudal2.bench.correctness import (AccuracyPolicy, CheckFailure, bound_for, check_kernel, expected_for,
                                      rel_error, verify_output)
from cudal2.bench.inputs import GuardedOutput, make_operands
from cudal2.ir import Epilogue, GemmProblem

LONG_K = 4096  # long enough that fp16 accumulation shows


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
def test_honest_kernel_passes_with_error_near_the_trusted_reference(dtype, layout):
    p = GemmProblem.parse((37, 53, 1000), dtype=dtype, layout=layout)
    c = check_kernel(K.honest, p)
    assert c.seeds == 3 and "guard-zones" in c.checks and "nan-poison" in c.checks
    assert c.rel_error <= c.bound
    # the error is the output rounding of the dtype: ~2e-4 for fp16, ~2e-3 for bf16
    lo, hi = (1e-4, 5e-4) if dtype == "float16" else (8e-4, 4e-3)
    assert lo < c.rel_error < hi


CAUGHT = [
    ("partial_write", "float16", "never written"),
    ("partial_write_one", "float16", "1 of"),
    ("cached_by_pointer", "float16", "relative error"),
    ("stale_output", "float16", "relative error"),
    ("fp16_accumulate", "float16", "relative error"),
    ("bf16_accumulate", "bfloat16", "relative error"),
    ("write_past_end", "float16", "outside the output"),
    ("write_before_start", "bfloat16", "outside the output"),
    ("new_tensor", "float16", "returned a tensor other than"),
]


@pytest.mark.parametrize("name,dtype,why", CAUGHT)
def test_each_cheat_is_caught(name, dtype, why):
    p = GemmProblem.parse((64, 48, LONG_K), dtype=dtype)
    with pytest.raises(CheckFailure, match=why):
        check_kernel(getattr(K, name), p)


def test_fp16_accumulation_error_is_several_times_the_trusted_error():
    """The bound separates fp32 from fp16 accumulation with margin at long K."""
    p = GemmProblem.parse((64, 64, LONG_K))
    ops = make_operands(p, 11)
    exp = expected_for(p, ops)
    cheat = rel_error(K.fp16_accumulate(ops.a, ops.b), exp.ref)
    honest = rel_error(K.honest(ops.a, ops.b), exp.ref)
    assert honest <= exp.bound < cheat
    assert cheat > 4 * exp.trusted_error


def test_bound_follows_the_declared_accumulator_and_dtype():
    pol = AccuracyPolicy()
    p32 = GemmProblem.parse((8, 8, 8))
    assert bound_for(p32, 2e-4, pol) == pytest.approx(6e-4)
    assert bound_for(p32, 0.0, pol) == pol.floors["float16"]  # tiny trusted error: the floor
    assert bound_for(p32.replace(dtype="bfloat16"), 0.0, pol) == pol.floors["bfloat16"]
    p16 = p32.replace(accumulator="float16")
    assert bound_for(p16, 2e-4, pol) == pol.fp16_accumulate_bound


def test_inputs_are_fresh_normal_and_refill_keeps_pointers():
    p = GemmProblem.parse((64, 32, 128), layout="TT")
    ops = make_operands(p, 3)
    assert ops.a.shape == (64, 128) and ops.a.stride() == (1, 64)  # column-major view
    assert ops.b.shape == (128, 32) and ops.b.stride() == (1, 128)
    before = (ops.a.data_ptr(), ops.a.clone())
    ops.refill(4)
    assert ops.a.data_ptr() == before[0] and not torch.equal(ops.a, before[1])
    x = ops.a.float()
    assert (x != 0).float().mean() > 0.99 and 0.8 < x.std() < 1.2 and abs(x.mean()) < 0.05
    assert len(torch.unique(x)) > 1000  # not 0/1


def test_guarded_output_sees_unwritten_and_stray_writes():
    p = GemmProblem.parse((16, 24, 32))
    ops = make_operands(p, 5)
    exp = expected_for(p, ops)
    out = GuardedOutput(p)
    out.poison()
    assert torch.isnan(out.c).all() and out.intact_guards() == (True, 0)
    K.honest(ops.a, ops.b, out.c)
    assert verify_output(p, out, exp) <= exp.bound
    out.storage[out.guard + out.c.numel()] += 1  # one element past the end
    assert out.intact_guards() == (False, 1)


def test_epilogue_reference_with_c_and_bias_and_activation():
    p = GemmProblem.parse((32, 48, 256), epilogue=Epilogue(alpha=0.5, beta=1.5, bias=True, activation="relu"))

    def fused(a, b, c=None, bias=None):  # an honest kernel with the epilogue (C comes in through c)
        acc = 0.5 * (a.float() @ b.float()) + 1.5 * c.float() + bias.float()
        c.copy_(torch.relu(acc))
        return c

    corr = check_kernel(fused, p)
    assert "nan-poison" not in corr.checks and corr.rel_error <= corr.bound
    with pytest.raises(CheckFailure):
        check_kernel(K.honest, p)  # ignores the epilogue


def test_kernels_checked_on_the_same_inputs_share_references_and_every_cheat_is_still_caught(monkeypatch):
    """The worker checks a request's candidates on the same fresh inputs (written anew before each
    call) and takes each input set's reference once: the cheats are caught all the same, and an
    honest kernel checked after them still passes."""
    import cudal2.bench.correctness as C

    p = GemmProblem.parse((64, 48, LONG_K))
    storage, references, taken = (make_operands(p, 5), GuardedOutput(p)), {}, []
    real = C.expected_for
    monkeypatch.setattr(C, "expected_for", lambda *a, **k: taken.append(1) or real(*a, **k))

    def check(kernel):
        return check_kernel(kernel, p, base_seed=5, storage=storage, references=references)

    assert check(K.honest).rel_error > 0
    for name, dtype, why in CAUGHT:
        if dtype == "float16":
            with pytest.raises(CheckFailure, match=why):
                check(getattr(K, name))
    assert check(K.honest).seeds == 3
    assert len(taken) == 3  # one reference an input set, for every kernel checked on it
