"""The search space a proposer may draw from: for each KernelSpec field, the values the IR
accepts, narrowed by what a backend declares it supports on an arch.

Proposers read domains from here and never hard-code what a backend can do; a new backend
(or a narrower declaration) changes what they propose without touching them.
"""

from __future__ import annotations

import typing
from functools import lru_cache
from typing import Any, Sequence

from cudal2.ir import Capabilities, GemmProblem, KernelSpec, SpecError, check_compatible
from cudal2.codegen import get_backend

# Integer fields without an enumerated domain are bounded by their ge/le constraints; these
# two are not (they are None unless a warp-specialized backend sets them).
_OPEN_FIELDS = {"backend", "producer_registers", "consumer_registers"}


@lru_cache(maxsize=None)
def ir_domain(name: str) -> tuple | None:
    """Every value the IR accepts for a field, in declaration order; None when unbounded."""
    if name in _OPEN_FIELDS:
        return None
    info = KernelSpec.model_fields[name]
    if typing.get_origin(info.annotation) is typing.Literal:
        return typing.get_args(info.annotation)
    if info.annotation is bool:
        return (False, True)
    if info.annotation is int:
        lo = next(m.ge for m in info.metadata if hasattr(m, "ge"))
        hi = next(m.le for m in info.metadata if hasattr(m, "le"))
        return tuple(range(lo, hi + 1))
    return None


def domain(caps: Capabilities, name: str, arch: str) -> tuple | None:
    """Values of a field that both the IR and the backend accept on arch (IR order)."""
    ir = ir_domain(name)
    allowed = caps.allowed(name, arch)
    if allowed is None:
        return ir
    if ir is None:
        return tuple(sorted(allowed, key=str))
    return tuple(v for v in ir if v in allowed)


def allows(caps: Capabilities, name: str, value: Any, arch: str) -> bool:
    d = domain(caps, name, arch)
    return d is None or value in d


def prefer(caps: Capabilities, name: str, arch: str, preferred: Sequence) -> list:
    """The preferred values that the backend allows, in preference order."""
    return [v for v in preferred if allows(caps, name, v, arch)]


def widths(caps: Capabilities, name: str, arch: str, preferred: Sequence | None) -> list:
    """A tile width field's values to try: the preferred ones the backend allows, in preference
    order, or with no preference every value it declares, largest first."""
    if preferred is None:
        return sorted(domain(caps, name, arch) or (), reverse=True)
    return prefer(caps, name, arch, preferred)


def base_fields(backend: str, caps: Capabilities, arch: str) -> dict[str, Any]:
    """A starting point for every field: the IR default where the backend allows it,
    otherwise the first value the backend declares (e.g. load_path='tma' for a TMA-only
    backend)."""
    out: dict[str, Any] = {"backend": backend, "arch": arch}
    for name, info in KernelSpec.model_fields.items():
        if name in out:
            continue
        default = info.default
        d = domain(caps, name, arch)
        out[name] = default if d is None or default in d else d[0]
    return out


def backend_runs_on(caps: Capabilities, arch: str) -> bool:
    return allows(caps, "arch", arch, arch)


def validate(problem: GemmProblem, fields: dict[str, Any]) -> tuple[KernelSpec | None, str]:
    """(spec, "") when the fields make a spec that the problem and its backend accept,
    else (None, why)."""
    try:
        spec = KernelSpec.from_dict(fields)
        check_compatible(problem, spec)
    except SpecError as e:
        return None, str(e)
    support = get_backend(spec.backend).supports(problem, spec)
    if not support:
        return None, support.reason or f"backend {spec.backend!r} does not support this spec"
    return spec, ""
