#!/usr/bin/env bash
# Set up a virtual environment (CPU build of torch on machines without a GPU) and run the CPU tests.
# Then run them again in a second environment where every direct dependency is at the lowest version
# pyproject.toml allows (uv's --resolution lowest-direct), so each declared lower bound is a tested one.
# Arguments go to both pytest runs. CUDAL2_LOWEST=0 skips the second run.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH="torch==2.13.0"  # the CPU build here (pip's own configuration finds it); the lowest run keeps it too
python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q "$TORCH"
python -m pip install -q -e ".[test]" "uv>=0.5"
python -m pytest "$@"
deactivate

[ "${CUDAL2_LOWEST:-1}" = "0" ] && exit 0
echo "== the same tests with the lowest direct dependency versions pyproject.toml allows (.venv-lowest) =="
start=$SECONDS
rm -rf .venv-lowest
.venv/bin/uv venv -q --seed .venv-lowest
printf '*\n' > .venv-lowest/.gitignore  # git (and what copies the work tree) leaves it out
# torch first, through pip as above, so it is the same CPU build; uv keeps it, as it satisfies $TORCH,
# and resolves everything else, torch's own dependencies included, with the lowest direct versions.
.venv-lowest/bin/python -m pip install -q --no-deps "$TORCH"
.venv/bin/uv pip install -q --python .venv-lowest/bin/python --resolution lowest-direct -e ".[test]" "$TORCH"
.venv/bin/uv pip list --python .venv-lowest/bin/python 2>/dev/null \
    | grep -i -E '^(torch|pydantic|jinja2|numpy|optuna|sqlalchemy|typer|click|rich|httpx|matplotlib|platformdirs|pytest|pytest-timeout|triton|openai|anthropic|hypothesis|lightgbm|dask|distributed) ' \
    | awk '{printf "%s==%s  ", $1, $2} END {print ""}' || true
echo "== set up in $((SECONDS - start)) s; pytest's closing line gives the tests' time =="
. .venv-lowest/bin/activate  # a test that runs `cudal2` or `python` finds this environment's
python -m pytest "$@"
