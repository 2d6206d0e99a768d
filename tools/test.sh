#!/usr/bin/env bash
# Set up a virtual environment (CPU build of torch on machines without a GPU) and run the CPU tests.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[test]"
python -m pytest "$@"
