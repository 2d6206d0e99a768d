#!/usr/bin/env bash
# On the GPU machine: the evaluator's GPU tests, then the timing-spread benchmark.
# Usage (from the repository root): bash tools/gpu_bench.sh [OUTDIR]   (default: $OUT or /tmp/cudal2-bench)
# Runtime: about 3-5 minutes on one H100.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-/tmp/cudal2-bench}}"
mkdir -p "$out"
PYTHONPATH="$(bash tools/device_env.sh)"
export PYTHONPATH CUDAL2_GPU_TESTS=1
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
python3 -m pytest -m gpu tests/test_gpu_bench.py -q -rA -s -p no:cacheprovider 2>&1 | tee "$out/gpu_bench_tests.txt"
tests_rc=${PIPESTATUS[0]}
python3 benchmarks/measure_spread.py "$out/spread.md" 2>&1 | tee "$out/spread.txt"
spread_rc=${PIPESTATUS[0]}
echo "gpu tests rc=$tests_rc, spread rc=$spread_rc; outputs in $out"
exit $(( tests_rc != 0 || spread_rc != 0 ))
