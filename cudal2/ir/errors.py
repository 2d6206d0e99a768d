"""The one error type of the IR: every violation names the field, the value, the limit and a fix."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Violation:
    field: str
    value: object
    limit: str
    fix: str

    def __str__(self) -> str:
        return f"{self.field}={self.value!r}: {self.limit}; fix: {self.fix}"


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
