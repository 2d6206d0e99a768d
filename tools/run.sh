#!/usr/bin/env bash
# The main job: set up .venv, install cudal2, and search kernels for 4096x4096x4096 fp16 on the
# GPU (budget 16). Without a GPU it says so and runs a dry run instead (propose, validate,
# render and compile the kernels; nothing is timed). It ends with the command to type next.
#   bash tools/run.sh            extra arguments go to `cudal2 search`
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  # --system-site-packages: a CUDA build of torch already installed on the machine is reused
  python3 -m venv --system-site-packages .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip

has_cuda_torch() { python -c "import sys, torch; sys.exit(0 if torch.version.cuda else 1)" 2>/dev/null; }
has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

if ! has_cuda_torch; then
  if has_gpu; then
    python -m pip install -q torch            # the default Linux wheel brings CUDA
  else
    python -m pip install -q "torch==2.13.0"  # CPU is enough for a dry run
  fi
fi
extras="triton"
has_gpu && extras="triton,cublaslt,cute"  # cuBLASLt baselines (nvmath-python) and the CuTe DSL backend
python -m pip install -q -e ".[$extras]"

if python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  cudal2 search 4096x4096x4096 --budget 16 "$@"
  cudal2 show
  bash tools/next_command.sh .venv gpu
else
  echo "No GPU found (torch.cuda.is_available() is False): nothing can be timed on this machine."
  echo "Running a dry run instead: propose, validate, render and compile the kernels, without timing."
  cudal2 search 4096x4096x4096 --dry-run "$@"
  bash tools/next_command.sh .venv cpu
fi
