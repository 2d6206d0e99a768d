"""Datasets of measured (spec, shape) pairs: the sweep that measures them into the store, and the
export that writes one row per pair for a cost model or a notebook."""

from .export import COLUMNS, export_rows, write_rows
from .sweep import SweepSummary, draw_shapes, resolve_shapes, run_sweep

__all__ = ["COLUMNS", "SweepSummary", "draw_shapes", "export_rows", "resolve_shapes", "run_sweep", "write_rows"]
