"""The refiner's search space, as plain data: one named Option per KernelSpec field that a
search may vary, derived from the IR's declared choices (Literal types, ge/le bounds) narrowed
by what the searched backends declare in their Capabilities.

An Option with one choice is a constant and is never sampled. Some options only mean
something when another field has a value (split_k only with decomposition='split_k'); they
carry that condition, so the sampler does not waste trials on combinations the IR rejects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..ir import KernelSpec, capabilities as ir_capabilities
from .proposers.space import ir_domain

# Fields fixed per search (not sampled): the backend is an option only when several are searched.
# A search measures the backend's own kernels (shape_specialization "auto"); static specialization
# is a choice for a final winner, made by measuring it against that winner, not by the sampler.
_FIXED = {"arch", "shape_specialization"}
# Integer fields sampled on a log scale (their useful values are powers of two).
_LOG_INTS = {"split_k", "raster_group"}
# field -> (field it depends on, values of that field under which it matters)
CONDITIONS: dict[str, tuple[str, tuple]] = {
    "split_k": ("decomposition", ("split_k",)),
    "split_k_reduction": ("decomposition", ("split_k",)),
    "producer_registers": ("warp_specialization", ("cooperative", "pingpong")),
    "consumer_registers": ("warp_specialization", ("cooperative", "pingpong")),
}
# Register counts for setmaxnreg: the IR accepts multiples of 8 in [24, 256]; None = compiler's choice.
_REGISTER_CHOICES = (None, *range(24, 257, 8))


@dataclass(frozen=True)
class Option:
    """One searched field. Either `choices` (categorical) or an integer range [low, high]."""

    name: str
    choices: tuple | None = None
    low: int | None = None
    high: int | None = None
    log: bool = False
    when: tuple[str, tuple] | None = None  # (field, values) under which this option is active

    @property
    def constant(self) -> bool:
        return (self.choices is not None and len(self.choices) == 1) or (
            self.choices is None and self.low == self.high)

    def contains(self, value: Any) -> bool:
        if self.choices is not None:
            return value in self.choices
        return isinstance(value, int) and self.low <= value <= self.high

    def active(self, fields: dict[str, Any]) -> bool:
        if self.when is None:
            return True
        dep, values = self.when
        return fields.get(dep) in values


def _ir_domain(name: str) -> tuple | tuple[int, int] | None:
    """('choices', values) or ('range', (lo, hi)) for a KernelSpec field, None if unbounded.
    The values are the proposers' IR domain; bounded integers become an Optuna int range."""
    if name in ("producer_registers", "consumer_registers"):
        return ("choices", _REGISTER_CHOICES)
    values = ir_domain(name)
    if values is None:
        return None
    if KernelSpec.model_fields[name].annotation is int:
        return ("range", (values[0], values[-1]))
    return ("choices", values)


def search_space(backends: Sequence[str], arch: str) -> list[Option]:
    """Options for a search over `backends` on `arch`: for each field, the union over the
    backends of the values each declares (a value only one backend allows is still searched;
    the other backend's specs with it are pruned by validation, before any GPU)."""
    if not backends:
        raise ValueError("search_space needs at least one backend, e.g. ('triton',)")
    caps = []
    for b in backends:
        c = ir_capabilities.resolve(b)
        if c is None:
            known = ", ".join(ir_capabilities.known_backends()) or "none"
            raise ValueError(f"unknown backend {b!r} (known: {known})")
        caps.append(c)
    out: list[Option] = [Option("backend", choices=tuple(backends))]
    for name in KernelSpec.model_fields:
        if name in _FIXED or name == "backend":
            continue
        dom = _ir_domain(name)
        if dom is None:
            continue
        kind, values = dom
        allowed_sets = [c.allowed(name, arch) for c in caps]
        when = CONDITIONS.get(name)
        if kind == "range" and any(a is None for a in allowed_sets):  # some backend takes the IR's range
            lo, hi = values
            out.append(Option(name, low=lo, high=hi, log=name in _LOG_INTS, when=when))
            continue
        ir_values = tuple(range(values[0], values[1] + 1)) if kind == "range" else values
        union: set = set()
        for a in allowed_sets:
            union |= set(ir_values) if a is None else set(a)
        choices = tuple(v for v in ir_values if v in union)
        if kind == "range" and len(choices) > 1 and choices[-1] - choices[0] + 1 == len(choices):
            # an unbroken run of integers (stages 1..8) stays ordered for the sampler
            out.append(Option(name, low=choices[0], high=choices[-1], log=name in _LOG_INTS, when=when))
            continue
        out.append(Option(name, choices=choices, when=when))
    return out


def describe(space: Sequence[Option]) -> list[dict[str, Any]]:
    """The space as JSON-able rows (for docs, the CLI and the study's user attrs)."""
    rows = []
    for o in space:
        row: dict[str, Any] = {"name": o.name}
        if o.choices is not None:
            row["choices"] = list(o.choices)
        else:
            row.update(low=o.low, high=o.high, log=o.log)
        if o.when:
            row["when"] = {o.when[0]: list(o.when[1])}
        rows.append(row)
    return rows


def params_of(spec: KernelSpec, space: Sequence[Option]) -> dict[str, Any]:
    """The Optuna params that reproduce `spec` (for enqueue_trial): active, non-constant options."""
    fields = spec.to_dict()
    return {o.name: fields[o.name] for o in space if not o.constant and o.active(fields)}


def fields_from(values: dict[str, Any], space: Sequence[Option], arch: str) -> dict[str, Any]:
    """KernelSpec keyword arguments from sampled values; inactive options take the IR default."""
    fields: dict[str, Any] = {"arch": arch}
    for o in space:
        if o.name in values:
            fields[o.name] = values[o.name]
        elif o.constant:
            fields[o.name] = o.choices[0] if o.choices is not None else o.low
    for o in space:
        if o.when is not None and not o.active(fields):
            fields[o.name] = KernelSpec.model_fields[o.name].default
    return fields
