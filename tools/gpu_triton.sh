#!/usr/bin/env bash
# Validate the Triton backend on a GPU machine (H100: a few minutes, mostly Triton compiles).
# cudal2 need not be installed: the repository root goes on PYTHONPATH. It needs pydantic and
# jinja2 importable (carry pydantic as a wheel where the image lacks it; see tools/device_env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -f tools/device_env.sh ]; then  # installs carried wheels (.whl/) into /tmp/site
  export PYTHONPATH="$(bash tools/device_env.sh)${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export CUDAL2_GPU_TESTS=1
unset TRITON_INTERPRET
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
python3 -m pytest -m gpu tests/test_gpu_triton.py -s -q -p no:cacheprovider "$@"
