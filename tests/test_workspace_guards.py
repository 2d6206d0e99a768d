"""A kernel's own workspace carries guard zones, and the evaluator's checks catch a kernel that
writes past it (on the CPU: the Workspace itself, and a Triton split-K kernel under the interpreter
made to write one element too far)."""

import pytest
import torch

from cudal2.bench.correctness import CheckFailure, check_kernel
from cudal2.codegen import get_backend
from cudal2.codegen.workspace import GUARD, Workspace
from cudal2.ir import GemmProblem, KernelSpec

CPU = torch.device("cpu")


def test_guards_follow_the_part_a_call_uses():
    ws = Workspace()
    assert ws.for_call(CPU, 0) is None and ws.intact()
    part = ws.for_call(CPU, 100)
    assert part.numel() == 100 and ws.intact()
    part.fill_(1.0)  # all of its own part: fine
    assert ws.intact()
    smaller = ws.for_call(CPU, 40)  # a shape-generic kernel meets a smaller shape: same buffer
    assert smaller.data_ptr() == part.data_ptr() and ws.intact()
    part[40] = 2.0  # one element past what the smaller call uses
    assert not ws.intact()
    ws.for_call(CPU, 100)  # back to the larger shape: its tail guard is laid afresh
    assert ws.intact()
    ws.body(CPU).zero_()
    before = ws.body(CPU).data_ptr()
    ws.for_call(CPU, 500)  # grown: a new buffer, both guards laid
    assert ws.body(CPU).data_ptr() != before and ws.body(CPU).numel() == 500 and ws.intact()


def test_a_grown_workspace_keeps_the_buffer_earlier_launchers_hold():
    """A launcher (the op's, a C++ slot's, a captured graph's launch) keeps the address it was bound
    with; a larger shape's call later must not free that buffer under it."""
    ws = Workspace()
    old = ws.for_call(CPU, 100).data_ptr()
    ws.for_call(CPU, 5000)
    held = [t.data_ptr() for t in ws._retired]
    assert ws.body(CPU).data_ptr() != old and any(p <= old < p + 4 * (2 * GUARD + 100) for p in held)


def test_a_write_before_the_start_is_caught():
    ws = Workspace()
    part = ws.for_call(CPU, 64)
    part._base[GUARD - 1] = 0.0
    assert not ws.intact()


def test_a_zeroed_workspace_stays_zero_where_a_larger_call_reads():
    """Stream-K flags and atomic split-K read zeros: the tail guard stays at the allocation's end."""
    ws = Workspace(zeroed=True)
    ws.for_call(CPU, 100)
    ws.for_call(CPU, 30)
    assert torch.count_nonzero(ws.for_call(CPU, 100)) == 0 and ws.intact()
    ws.body(CPU)._base[GUARD + 100] = 1.0
    assert not ws.intact()


@pytest.fixture
def split_k_kernel():
    problem = GemmProblem(m=48, n=40, k=128, layout="NT")
    spec = KernelSpec(block_m=16, block_n=16, block_k=32, arch="sm_80", decomposition="split_k", split_k=2)
    backend = get_backend("triton")
    kernel = backend.compile(backend.render(problem, spec))
    kernel.num_sms = 3
    return problem, kernel


def test_the_checks_pass_a_kernel_that_keeps_inside_its_workspace(split_k_kernel):
    problem, kernel = split_k_kernel
    check_kernel(kernel, problem)
    assert kernel.workspace_intact()


def test_the_checks_catch_a_kernel_that_writes_past_its_workspace(split_k_kernel, monkeypatch):
    problem, kernel = split_k_kernel
    launch = kernel._launch

    def overhanging(a, b, c, bias, ws, num_sms):  # as the kernel, then one fp32 past its workspace
        launch(a, b, c, bias, ws, num_sms)
        ws._base[GUARD + ws.numel()] = 0.0

    monkeypatch.setattr(kernel, "_launch", overhanging)
    with pytest.raises(CheckFailure, match="wrote outside its own workspace"):
        check_kernel(kernel, problem)
