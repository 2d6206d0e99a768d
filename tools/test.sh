#!/usr/bin/env bash
# Set up a virtual environment (CPU build of torch on machines without a GPU) and run the CPU tests, in
# CUDAL2_TEST_WORKERS processes (pytest-xdist; default 2, one per core of the CI machine). Then run the
# tests that exercise each direct dependency again, in a second environment where every direct
# dependency is at the lowest version pyproject.toml allows (uv's --resolution lowest-direct), so each
# declared lower bound is a tested one. Arguments go to both pytest runs (then the second runs them,
# not its own list). CUDAL2_LOWEST=0 skips the second run.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH="torch==2.13.0"  # the CPU build here (pip's own configuration finds it); the lowest run keeps it too
LOWEST=${CUDAL2_LOWEST:-1}
python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q "$TORCH" "uv>=0.5"
# uv installs the rest, much faster than pip; it keeps the torch above, which satisfies $TORCH
uv pip install -q -e ".[test]" "$TORCH"

lowest_environment() {
    .venv/bin/uv venv -q --seed .venv-lowest
    printf '*\n' > .venv-lowest/.gitignore  # git (and what copies the work tree) leaves it out
    # torch first, through pip as above, so it is the same CPU build; uv keeps it, as it satisfies $TORCH,
    # and resolves everything else, torch's own dependencies included, with the lowest direct versions.
    .venv-lowest/bin/python -m pip install -q --no-deps "$TORCH"
    .venv/bin/uv pip install -q --python .venv-lowest/bin/python --resolution lowest-direct -e ".[test]" "$TORCH"
}
if [ "$LOWEST" != "0" ]; then
    # built while the first run's tests run
    rm -rf .venv-lowest .venv-lowest.log
    start=$SECONDS
    # at the lowest CPU priority: it takes the time the tests leave (their waits on processes and files),
    # not theirs (at the same priority it slowed the first run by 30 s on 2 cores)
    ( renice -n 19 -p "$BASHPID" > /dev/null 2>&1 || true; lowest_environment ) > .venv-lowest.log 2>&1 &
    building=$!
    trap 'kill "$building" 2>/dev/null || true' EXIT
fi

WORKERS=${CUDAL2_TEST_WORKERS:-2}
python -m pytest -n "$WORKERS" "$@"
deactivate

[ "$LOWEST" = "0" ] && exit 0
echo "== the same tests with the lowest direct dependency versions pyproject.toml allows (.venv-lowest) =="
wait "$building" || { cat .venv-lowest.log; exit 1; }
trap - EXIT
.venv/bin/uv pip list --python .venv-lowest/bin/python 2>/dev/null \
    | grep -i -E '^(torch|pydantic|jinja2|numpy|optuna|sqlalchemy|typer|click|rich|httpx|matplotlib|platformdirs|pytest|pytest-timeout|pytest-xdist|import-linter|triton|openai|anthropic|hypothesis|lightgbm|psycopg|dask|distributed|transformers) ' \
    | awk '{printf "%s==%s  ", $1, $2} END {print ""}' || true
echo "== set up beside the first run ($((SECONDS - start)) s); pytest's closing line gives the tests' time =="
. .venv-lowest/bin/activate  # a test that runs `cudal2` or `python` finds this environment's
# the tests whose code calls each direct dependency: pydantic and hypothesis (IR), optuna and sqlalchemy
# (store, refiner), typer, click and rich (CLI), httpx, openai and anthropic (LLM), matplotlib (compare),
# numpy and lightgbm (learning), dask and distributed (scale-out), jinja2 and triton (Triton backend),
# platformdirs (isolation), import-linter (layers), psycopg (a PostgreSQL store that does not answer),
# transformers (the end-to-end model). torch is the same build in both runs: the first runs its tests.
BOUNDS_TESTS=(tests/test_ir.py tests/test_fuzz_boundary.py tests/test_store_resume.py tests/test_store_kill.py
              tests/test_journal_disk_faults.py tests/test_store_url_secrets.py tests/test_search_refiner.py
              tests/test_cli.py tests/test_cli_errors.py tests/test_proposer_llm.py
              tests/test_compare_report.py tests/test_learn.py tests/test_scale_out.py tests/test_triton_golden.py
              tests/test_triton_backend.py tests/test_isolation.py tests/test_layers.py
              tests/test_op_store_wait.py tests/test_e2e_model.py)
# Left out of this run, as they call the same dependencies as the tests above, at more length: the LLM
# proposer's endpoint faults (a CLI process each: httpx, openai and anthropic run in test_proposer_llm),
# one dynamic Triton kernel over every shape of twelve classes (Triton runs in the other tests of its
# file), and Ctrl-C on a local Dask cluster (Dask runs in the other scale-out tests).
SAME_CALLS=(--deselect "tests/test_triton_backend.py::test_one_dynamic_kernel_serves_every_shape_of_its_class"
            --deselect "tests/test_scale_out.py::test_ctrl_c_on_a_local_cluster_sweep_is_one_line_and_leaves_no_process")
[ $# -eq 0 ] && set -- "${BOUNDS_TESTS[@]}" "${SAME_CALLS[@]}"
python -m pytest -n "$WORKERS" "$@"
