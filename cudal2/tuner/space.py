"""The refiner's search space, as plain data: one named Option per KernelSpec field that a
search may vary, derived from the IR's declared choices (Literal types, ge/le bounds) narrowed
by what the searched backend declares in its Capabilities.

An Option with one choice is a constant and is never sampled. Some options only mean
something when another field has a value (split_k only with decomposition='split_k'); they
carry that condition, so the sampler does not waste trials on combinations the IR rejects.

A search over several backends samples the backend first and then that backend's own options,
named "<backend>:<field>": each backend's fields range over what it declares, not over the union
of all of them. (Over the union, 90 of 106 trials that TPE sampled for triton+cute_dsl were
combinations one backend or the other refuses, each pruned at the cost of a trial in the study.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..ir import KernelSpec, capabilities as ir_capabilities
from cudal2.proposers.space import ir_domain

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

    name: str  # the sampler's name for it: the field's, or "<backend>:<field>" over several backends
    choices: tuple | None = None
    low: int | None = None
    high: int | None = None
    log: bool = False
    when: tuple[tuple[str, tuple], ...] = ()  # (field, values) pairs that must all hold for it to matter
    field: str = ""  # the KernelSpec field it sets, where that is not its name

    @property
    def target(self) -> str:
        return self.field or self.name

    @property
    def constant(self) -> bool:
        return (self.choices is not None and len(self.choices) == 1) or (
            self.choices is None and self.low == self.high)

    @property
    def constant_value(self) -> Any:
        return self.choices[0] if self.choices is not None else self.low

    def contains(self, value: Any) -> bool:
        if self.choices is not None:
            return value in self.choices
        return isinstance(value, int) and self.low <= value <= self.high

    def active(self, fields: dict[str, Any]) -> bool:
        return all(fields.get(dep) in values for dep, values in self.when)


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
    """Options for a search over `backends` on `arch`: each field over the values its backend
    declares. Over one backend the options are named by field; over several, the backend is an
    option and every field is one option per backend, active when that backend is chosen."""
    if not backends:
        raise ValueError("search_space needs at least one backend, e.g. ('triton',)")
    caps = []
    for b in backends:
        c = ir_capabilities.resolve(b)
        if c is None:
            known = ", ".join(ir_capabilities.known_backends()) or "none"
            raise ValueError(f"unknown backend {b!r} (known: {known})")
        caps.append(c)
    if len(backends) == 1:
        return [Option("backend", choices=tuple(backends)), *_backend_options(caps[0], arch)]
    out: list[Option] = [Option("backend", choices=tuple(backends))]
    per_backend = [_backend_options(c, arch, prefix=f"{b}:", when=(("backend", (b,)),))
                   for b, c in zip(backends, caps)]
    for group in zip(*per_backend):  # field by field, so a condition's field comes before it
        out.extend(group)
    return out


def _backend_options(caps, arch: str, prefix: str = "", when: tuple = ()) -> list[Option]:
    """One Option per searched field, over what the backend's Capabilities allow on arch (the IR's
    own domain where it declares nothing)."""
    out: list[Option] = []
    for name in KernelSpec.model_fields:
        if name in _FIXED or name == "backend":
            continue
        dom = _ir_domain(name)
        if dom is None:
            continue
        kind, values = dom
        allowed = caps.allowed(name, arch)
        cond = when + ((CONDITIONS[name],) if name in CONDITIONS else ())
        named = dict(name=prefix + name, when=cond, field=name if prefix else "")
        if kind == "range" and allowed is None:  # the backend takes the IR's range
            lo, hi = values
            out.append(Option(low=lo, high=hi, log=name in _LOG_INTS, **named))
            continue
        ir_values = tuple(range(values[0], values[1] + 1)) if kind == "range" else values
        choices = tuple(v for v in ir_values if allowed is None or v in allowed)
        if kind == "range" and len(choices) > 1 and choices[-1] - choices[0] + 1 == len(choices):
            # an unbroken run of integers (stages 1..8) stays ordered for the sampler
            out.append(Option(low=choices[0], high=choices[-1], log=name in _LOG_INTS, **named))
            continue
        out.append(Option(choices=choices, **named))
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
            row["when"] = {dep: list(values) for dep, values in o.when}
        rows.append(row)
    return rows


def choose(space: Sequence[Option], arch: str, pick: Callable[[Option], Any]) -> dict[str, Any]:
    """KernelSpec keyword arguments: in the space's order, each active option's constant or
    pick(option) (a sampler's suggestion, or a recorded value); an inactive option's field keeps
    the IR default."""
    fields: dict[str, Any] = {"arch": arch}
    for o in space:
        if o.active(fields):
            fields[o.target] = o.constant_value if o.constant else pick(o)
    return fields


def params_of(spec: KernelSpec, space: Sequence[Option]) -> dict[str, Any]:
    """The Optuna params that reproduce `spec` (for enqueue_trial): active, non-constant options."""
    fields = spec.to_dict()
    return {o.name: fields[o.target] for o in space if not o.constant and o.active(fields)}


def fields_from(values: dict[str, Any], space: Sequence[Option], arch: str) -> dict[str, Any]:
    """KernelSpec keyword arguments from sampled values (by option name)."""
    return choose(space, arch, lambda o: values.get(o.name, KernelSpec.model_fields[o.target].default))
