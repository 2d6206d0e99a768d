"""Shared base for the IR models: immutable, no unknown keys, canonical JSON, stable hash,
and every validation failure reported as one SpecError."""

from __future__ import annotations

import hashlib
import json
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from .errors import SpecError, Violation

# Bumped only when the meaning of an existing field changes; part of every key.
IR_VERSION = 1


def _violations_from_pydantic(err: ValidationError) -> list[Violation]:
    out: list[Violation] = []
    for e in err.errors():
        original = (e.get("ctx") or {}).get("error")
        if isinstance(original, SpecError):
            out.extend(original.violations)
            continue
        loc = ".".join(str(p) for p in e["loc"]) if e["loc"] else "<root>"
        loc = loc or "''"  # an unknown key that is the empty string
        kind = e["type"]
        if kind == "extra_forbidden":
            out.append(Violation(loc, e.get("input"), "unknown key",
                                 "remove it; the known keys are listed by json_schema()"))
        elif kind == "missing":
            out.append(Violation(loc, None, "required field is missing", f"give {loc}"))
        else:
            out.append(Violation(loc, e.get("input"), e["msg"],
                                 "use a value the message allows (see json_schema())"))
    return out


class IRModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)
    _what: ClassVar[str] = "IR object"
    # Fields added after IR_VERSION 1 shipped, left out of the canonical form (and so of every key)
    # while they hold their default: keys in existing stores and tuned tables stay valid, and an
    # object that sets one gets a key of its own.
    _LATER_FIELDS: ClassVar[tuple[str, ...]] = ()

    def __init__(self, /, **data: Any) -> None:  # positional-only: a key named "self" is just an unknown key
        try:
            super().__init__(**data)
        except ValidationError as e:
            raise SpecError(_violations_from_pydantic(e), what=type(self).__name__) from None

    @classmethod
    def from_dict(cls, data: dict) -> "IRModel":
        if not isinstance(data, dict):
            raise SpecError(Violation("<root>", data, "expected a JSON object",
                                      "pass an object of field: value"), what=cls.__name__)
        odd = [k for k in data if not isinstance(k, str)]
        if odd:
            raise SpecError([Violation(repr(k), k, "a key must be a field name (a string)", "remove it")
                             for k in odd], what=cls.__name__)
        return cls(**data)

    @classmethod
    def from_json(cls, text: str | bytes):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            why = f"{e.msg} at line {e.lineno} column {e.colno}"
        except UnicodeDecodeError as e:  # bytes that are not UTF-8 (nor UTF-16/32)
            why = f"not UTF-8 text: {e.reason} at byte {e.start}"
        except ValueError as e:  # an integer of more digits than Python converts (4300 by default)
            why = str(e).split(";")[0]
        except RecursionError:
            why = "arrays or objects nested too deeply"
        else:
            return cls.from_dict(data)
        raise SpecError(Violation("<json>", str(text)[:80], f"not valid JSON ({why})", "send one JSON object"),
                        what=cls.__name__) from None

    def to_dict(self) -> dict:
        return self.model_dump(mode="json")

    def to_json(self) -> str:
        """Canonical form: sorted keys, no whitespace; equal objects give equal text."""
        data = self.to_dict()
        for name in self._LATER_FIELDS:
            if data.get(name) == type(self).model_fields[name].default:
                del data[name]
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    def key(self) -> str:
        """Stable hash of the canonical form (sha256, 16 hex digits)."""
        payload = f"{type(self).__name__}:v{IR_VERSION}:{self.to_json()}".encode()
        return hashlib.sha256(payload).hexdigest()[:16]

    def replace(self, **changes: Any):
        """A validated copy with some fields changed (model_copy would skip validation)."""
        return type(self)(**{**self.to_dict(), **changes})

    @classmethod
    def json_schema(cls) -> dict:
        return cls.model_json_schema()
