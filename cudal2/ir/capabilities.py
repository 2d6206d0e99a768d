"""What each backend declares it supports, as plain data the validator reads.

The IR knows no backend. A backend publishes a `Capabilities` (field -> allowed values,
optionally narrowed per arch); the codegen registry installs a resolver here so that a
KernelSpec naming a backend is checked against that declaration and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping


# Fields a backend has to declare to be offered anything but their default. A backend written before
# such a field existed renders every spec as if it held the default, so a spec that sets it must not
# validate for that backend (it would be measured as something it is not).
OPT_IN: Mapping[str, frozenset] = {"swap_ab": frozenset({False}), "shape_specialization": frozenset({"auto"})}


@dataclass(frozen=True)
class Capabilities:
    # field name -> allowed values; a field not listed accepts whatever the IR accepts (OPT_IN
    # fields: only their default)
    options: Mapping[str, frozenset] = field(default_factory=dict)
    # arch -> field -> allowed values; narrows `options` on that arch
    per_arch: Mapping[str, Mapping[str, frozenset]] = field(default_factory=dict)
    # spec fields (a mapping) -> bytes of shared memory the epilogue stages, for a backend whose
    # epilogue does not hold the whole output tile there (the IR's estimate otherwise); read by
    # KernelSpec.smem_bytes and the rules proposer's stage count
    epilogue_smem: Callable[[Mapping], int] | None = None

    def allowed(self, field_name: str, arch: str) -> frozenset | None:
        narrowed = self.per_arch.get(arch, {}).get(field_name)
        if narrowed is not None:
            return narrowed
        return self.options.get(field_name, OPT_IN.get(field_name))

    def as_table(self, archs: list[str]) -> dict[str, dict[str, list]]:
        """{field: {arch: sorted allowed values}} for documentation and the LLM prompt."""
        names = set(self.options)
        for per in self.per_arch.values():
            names |= set(per)
        out: dict[str, dict[str, list]] = {}
        for name in sorted(names):
            out[name] = {a: sorted(self.allowed(name, a), key=str) for a in archs
                         if self.allowed(name, a) is not None}
        return out


def options(**fields) -> dict[str, frozenset]:
    """Shorthand: options(load_path=["pointer", "tma"]) -> {"load_path": frozenset(...)}."""
    return {k: frozenset(v) for k, v in fields.items()}


# name -> Capabilities, or None when the backend is unknown. Installed by cudal2.codegen.
_resolver: Callable[[str], Capabilities | None] | None = None
_known: Callable[[], list[str]] = lambda: []


def set_resolver(resolver: Callable[[str], Capabilities | None], known: Callable[[], list[str]]) -> None:
    global _resolver, _known
    _resolver, _known = resolver, known


def resolve(backend: str) -> Capabilities | None:
    return _resolver(backend) if _resolver is not None else None


def known_backends() -> list[str]:
    return _known()


def resolver_installed() -> bool:
    return _resolver is not None
