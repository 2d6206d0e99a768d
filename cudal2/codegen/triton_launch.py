"""Relaunching a bound Triton GEMM's compiled kernels without the JIT's per-call dispatch.

Triton's JITFunction.run binds the arguments, computes the specialization key and looks the kernel
up in its cache on every launch. A bound run (TritonKernel.bind) serves one shape on one device,
so the kernels its first launch got through the JIT stay the right ones: CompiledLaunches keeps
them, each with its grid and its full argument list (in the kernel's parameter order, constexpr
values included, as JITFunction.run passes them), and later calls hand the operands straight to
each CompiledKernel's launcher, as Triton's own CompiledKernel[grid](...) runner does.

A call Triton would specialize differently (an operand's dtype or 16-byte alignment, None where a
tensor was, another current device) is refused, and the caller launches through the JIT. The
launcher's calling convention is Triton's private API, the same in 3.6 and 3.9: with another
version, or compiled kernels that lack what it needs, nothing is kept and every call takes the JIT.
"""

from __future__ import annotations

import inspect
import re
from typing import Any, Callable, NamedTuple, Optional, Sequence

# Triton releases whose CompiledKernel.run(gridX, gridY, gridZ, stream, function, packed_metadata,
# launch_metadata, enter_hook, exit_hook, *args) convention this module was written against
KNOWN_VERSIONS = ((3, 6), (3, 9))


class Runtime(NamedTuple):
    """What a direct launch reads from Triton on every call, as JITFunction.run does."""
    current_device: Callable[[], int]
    current_stream: Callable[[int], int]
    knobs: Any  # triton.knobs.runtime: launch_enter_hook and launch_exit_hook


def known_version(version: str) -> bool:
    found = re.match(r"(\d+)\.(\d+)", version)
    return found is not None and KNOWN_VERSIONS[0] <= (int(found[1]), int(found[2])) <= KNOWN_VERSIONS[1]


def triton_runtime() -> Optional[Runtime]:
    """Triton's Runtime, or None where its launcher convention is not known here (or no GPU driver
    is active)."""
    try:
        import triton
        from triton import knobs
        from triton.runtime import driver

        if not known_version(triton.__version__):
            return None
        active = driver.active
        runtime = Runtime(active.get_current_device, active.get_current_stream, knobs.runtime)
        runtime.knobs.launch_enter_hook, runtime.knobs.launch_exit_hook  # noqa: B018 (both must exist)
        return runtime
    except Exception:  # no driver, another API: the JIT path serves
        return None


def specialization(operands: Sequence) -> tuple:
    """What Triton specializes a pointer argument on: None, or its dtype and 16-byte alignment."""
    return tuple([None if t is None else (t.dtype, t.data_ptr() % 16 == 0) for t in operands])


class _Step(NamedTuple):
    launcher: Any  # CompiledKernel.run
    compiled: Any
    function: Any
    packed_metadata: Any
    grid: tuple  # as the launch gave it (for the launch hooks)
    grid_xyz: tuple
    args: list  # the full argument list of the first call, its operands left out (None)
    slots: tuple  # (argument position, operand index) of each operand argument


class CompiledLaunches:
    """The compiled kernels of one bound GEMM's launches: launch(operands) relaunches them."""

    def __init__(self, steps: list, key: tuple, device: int, runtime: Runtime) -> None:
        self.steps, self.key, self.device, self.runtime = steps, key, device, runtime
        self.launches = 0  # calls launched here, past the JIT

    @classmethod
    def keep(cls, plans: Sequence, compiled: Sequence, operands: Sequence,
             runtime: Optional[Runtime]) -> Optional["CompiledLaunches"]:
        """From a first call: plans as the module's launches() gave them, (kernel, grid, args, kwargs)
        each, compiled what each kernel[grid](*args, **kwargs) returned, operands the tensors (or None)
        of the call that later calls replace, by identity. None where the direct path is unavailable."""
        if runtime is None or len(plans) != len(compiled):
            return None
        steps = []
        try:
            for (kernel, grid, args, kwargs), kernel_run in zip(plans, compiled):
                signature = inspect.signature(kernel.fn)
                # the rest of kwargs (num_warps, num_stages) are compile options, no arguments
                bound = signature.bind(*args, **{k: v for k, v in kwargs.items() if k in signature.parameters})
                bound.apply_defaults()
                full = list(bound.arguments.values())
                slots = tuple((i, j) for i, arg in enumerate(full) for j, t in enumerate(operands)
                              if t is not None and arg is t)
                for i, _ in slots:  # not kept alive by the bound run
                    full[i] = None
                grid_xyz = tuple(grid) + (1,) * (3 - len(grid))
                launcher, function, packed = kernel_run.run, kernel_run.function, kernel_run.packed_metadata
                kernel_run.launch_metadata  # noqa: B018 (must exist)
                if function is None or len(grid_xyz) != 3:
                    return None
                steps.append(_Step(launcher, kernel_run, function, packed, grid, grid_xyz, full, slots))
            device = runtime.current_device()
        except Exception:  # an object without what the direct path needs: the JIT path serves
            return None
        return cls(steps, specialization(operands), device, runtime)

    def launch(self, operands: Sequence, vouched: bool = False) -> bool:
        """Enqueue the kept kernels for operands on the current stream. False, launching nothing,
        where Triton would specialize this call apart from the first: the caller takes the JIT.
        vouched: the caller vouches that the operands' dtypes and None-ness are the first call's and
        that every operand but the last is 16-byte aligned (a bound run's a, b and d: the op checks a
        and b on every call and allocates d); then only the last (the bias) is checked, for the
        alignment the first call's had. Triton's own check reads every operand's dtype and address,
        about half this method's Python time."""
        runtime = self.runtime
        device = runtime.current_device()
        if device != self.device:
            return False
        if vouched:
            last, kept = operands[-1], self.key[-1]
            if last is not None and kept is not None and kept[1] and last.data_ptr() & 15:
                return False
        elif specialization(operands) != self.key:
            return False
        stream = runtime.current_stream(device)
        enter, leave = runtime.knobs.launch_enter_hook, runtime.knobs.launch_exit_hook
        # the launch metadata is for the enter hook alone: not built where its chain is empty
        hooked = getattr(enter, "calls", True) != []
        for step in self.steps:
            args = step.args.copy()
            for i, j in step.slots:
                args[i] = operands[j]
            gx, gy, gz = step.grid_xyz
            metadata = step.compiled.launch_metadata(step.grid, stream, *args) if hooked else None
            step.launcher(gx, gy, gz, stream, step.function, step.packed_metadata, metadata, enter, leave, *args)
        self.launches += 1
        return True
