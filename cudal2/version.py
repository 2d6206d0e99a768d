"""The package's version: pyproject.toml reads it from here (hatch), and the evaluator's environment
record without importing the package's upper layers."""

__version__ = "0.1.0"
