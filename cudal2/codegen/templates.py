"""Jinja2 environment over the templates/ folder shipped inside the package."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import jinja2

_PACKAGE = Path(__file__).resolve().parent.parent
# A wheel carries the templates inside the package (pyproject force-include); a source
# checkout or editable install reads them from the repository's top-level templates/.
TEMPLATE_ROOT = next((p for p in (_PACKAGE / "templates", _PACKAGE.parent / "templates") if p.is_dir()),
                     _PACKAGE / "templates")


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_ROOT)),
        undefined=jinja2.StrictUndefined,  # a missing variable is a bug, not an empty string
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render(name: str, **variables) -> str:
    return environment().get_template(name).render(**variables)
