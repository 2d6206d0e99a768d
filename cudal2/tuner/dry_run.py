"""A search without the GPU: propose, validate, render and compile (`cudal2 search --dry-run`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from ..ir import GemmProblem, KernelSpec
from cudal2.proposers.proposal import Proposer
from .refiner import validate
from ..codegen import get_backend


@dataclass
class DryRunRow:
    spec: KernelSpec
    source: str  # which proposer
    valid: bool
    rendered: bool
    compiled: bool  # compile() and precompile() passed
    compiled_as: str = ""  # what they amount to here (Backend.compiled_as): "compiled", "imported (interpreter)"
    error: str = ""


def dry_run(problem: GemmProblem, *, backends: Sequence[str], arch: str, proposer: Proposer, n: int = 8,
            compile: bool = True,
            proposer_for: Callable[[tuple[str, ...]], Proposer] | None = None) -> list[DryRunRow]:
    """Propose, validate, render and compile, without launching or timing. Compiling means the
    backend's compile() (the rendered module imports) and precompile(), which without a GPU
    lowers the kernel to machine code for spec.arch (Triton's ptxas; CuTe DSL compile-only), except
    under Triton's CPU interpreter, where the module is only imported (each row's compiled_as).
    proposer_for(backends) makes a proposer of those backends alone: each backend of the run that
    none of the n proposals names gets one proposal of its own from it (a proposer's n best may all
    be of one backend, and a dry run is how a backend is seen to build here)."""
    proposals = list(proposer.propose(problem, [], n))
    if proposer_for is not None:
        for name in backends:
            if not any(p.spec.backend == name for p in proposals):
                proposals += proposer_for((name,)).propose(problem, [], 1)[:1]
    rows: list[DryRunRow] = []
    for p in proposals:
        row = DryRunRow(spec=p.spec, source=p.source, valid=False, rendered=False, compiled=False)
        rows.append(row)
        try:
            validate(problem, p.spec)
            row.valid = True
            backend = get_backend(p.spec.backend)
            src = backend.render(problem, p.spec)
            row.rendered = True
            if compile:
                backend.compile(src)
                backend.precompile(src)
                row.compiled, row.compiled_as = True, backend.compiled_as()
        except Exception as e:  # noqa: BLE001 - each row reports its own failure
            row.error = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    return rows
