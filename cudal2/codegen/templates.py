"""Jinja2 environments: cudal2's own templates/ folder, and the template folder or package a
third-party backend ships with it."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

import jinja2

_PACKAGE = Path(__file__).resolve().parent.parent
# A wheel carries the templates inside the package (pyproject force-include); a source
# checkout or editable install reads them from the repository's top-level templates/.
TEMPLATE_ROOT = next((p for p in (_PACKAGE / "templates", _PACKAGE.parent / "templates") if p.is_dir()),
                     _PACKAGE / "templates")

# Where a backend's templates are: None for cudal2's own folder; a folder (a path); or a package
# name, whose templates/ folder jinja2.PackageLoader reads (from a zipped install too).
TemplateSource = str | os.PathLike | None


def _loader(source: TemplateSource) -> jinja2.BaseLoader:
    if source is None:
        return jinja2.FileSystemLoader(str(TEMPLATE_ROOT))
    if isinstance(source, os.PathLike):
        folder = Path(source)
        if not folder.is_dir():
            raise jinja2.TemplateNotFound(f"template folder {folder} does not exist")
        return jinja2.FileSystemLoader(str(folder))
    try:
        return jinja2.PackageLoader(source, "templates")
    except (ValueError, ImportError, AssertionError) as e:  # no templates/ folder; no such package
        raise jinja2.TemplateNotFound(f"package {source!r} has no templates/ folder ({e})") from None


@lru_cache(maxsize=None)
def environment(source: TemplateSource = None) -> jinja2.Environment:
    return jinja2.Environment(
        loader=_loader(source),
        undefined=jinja2.StrictUndefined,  # a missing variable is a bug, not an empty string
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render(name: str, **variables) -> str:
    """A template of cudal2's own folder, by its path under it ("triton/matmul.py.j2")."""
    return environment().get_template(name).render(**variables)
