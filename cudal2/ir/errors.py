"""The one error type of the IR: every violation names the field, the value, the limit and a fix."""

from __future__ import annotations

import reprlib
from dataclasses import dataclass

# Values in messages come from untrusted input too (an LLM reply, a spec file): a 10 MB string or a
# list nested a thousand deep is shown cut short, so a message stays a few lines (and an LLM's
# repair prompt stays small).
class _ShortRepr(reprlib.Repr):
    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 600:  # past ~180 digits; past 4300, repr() itself raises ValueError
            return f"<an integer of about {int(x.bit_length() * 0.30103) + 1} digits>"
        return super().repr_int(x, level)


_SHORT = _ShortRepr()
_SHORT.maxstring = _SHORT.maxother = _SHORT.maxlong = 200
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxdict = 3, 8, 8, 8


def short_repr(value: object) -> str:
    """repr(value), shortened where it is long or deep (reprlib's '...' marks the cut)."""
    return _SHORT.repr(value)


@dataclass(frozen=True)
class Violation:
    field: str
    value: object
    limit: str
    fix: str

    def __str__(self) -> str:
        field = self.field if len(self.field) <= 200 else short_repr(self.field)
        return f"{field}={short_repr(self.value)}: {self.limit}; fix: {self.fix}"


class SpecError(ValueError):
    """Raised for any invalid GemmProblem, KernelSpec, or problem/spec/backend combination."""

    def __init__(self, violations: list[Violation] | Violation, what: str = "KernelSpec"):
        if isinstance(violations, Violation):
            violations = [violations]
        self.violations: list[Violation] = list(violations)
        self.what = what
        lines = "\n  ".join(str(v) for v in self.violations)
        super().__init__(f"invalid {what} ({len(self.violations)} problem(s)):\n  {lines}")

    @property
    def fields(self) -> list[str]:
        return [v.field for v in self.violations]

    def __reduce__(self):
        # Pickled by its message and attributes, whatever a subclass's __init__ takes: an error
        # raised in a worker process (a Dask worker's search, say) reaches the caller as itself.
        return _rebuilt, (type(self), self.args), self.__dict__


def _rebuilt(cls: type, args: tuple) -> SpecError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    return error
