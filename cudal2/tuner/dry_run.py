"""A search without the GPU: propose, validate, render and compile (`cudal2 search --dry-run`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

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
            compile: bool = True) -> list[DryRunRow]:
    """Propose, validate, render and compile, without launching or timing. Compiling means the
    backend's compile() (the rendered module imports) and precompile(), which without a GPU
    lowers the kernel to machine code for spec.arch (Triton's ptxas; CuTe DSL compile-only), except
    under Triton's CPU interpreter, where the module is only imported (each row's compiled_as)."""
    rows: list[DryRunRow] = []
    for p in proposer.propose(problem, [], n):
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
