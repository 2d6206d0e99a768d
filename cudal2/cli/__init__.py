"""The `cudal2` command: search, precompile, show, export, bench, compare, tune, sweep, dataset export, train.

common.py holds the app, its error handling and what the commands share; each other module adds
its commands to the app when imported, in the order `cudal2 --help` lists them. Everything heavy
is imported inside the commands, so `cudal2 --help` is quick.
"""

from __future__ import annotations

from .common import BackendName, ModeName, ProposerName, SamplerName, app
from . import search  # isort: skip
from . import compare  # isort: skip
from . import dataset  # isort: skip
from cudal2.cli.train import train  # isort: skip

app.command()(train)


def main() -> None:  # pragma: no cover
    app()


__all__ = ["BackendName", "ModeName", "ProposerName", "SamplerName", "app", "compare", "dataset", "main", "search"]
