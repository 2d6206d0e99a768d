#!/usr/bin/env bash
# On the GPU machine: install the carried wheels (packages its image lacks) into /tmp/site and
# print the PYTHONPATH to use. Usage: export PYTHONPATH=$(bash tools/device_env.sh)
set -eu
cd "$(dirname "$0")/.."
wheels=${CUDAL2_WHEELS:-.whl}  # another folder of wheels when a call must carry fewer
if [ -d "$wheels" ] && ls "$wheels"/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$wheels"/*.whl >&2
fi
echo "$(pwd):/tmp/site"
