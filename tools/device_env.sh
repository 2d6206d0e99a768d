#!/usr/bin/env bash
# On the GPU machine: install the carried wheels (packages its image lacks) into /tmp/site and
# print the PYTHONPATH to use. Usage: export PYTHONPATH=$(bash tools/device_env.sh)
set -eu
cd "$(dirname "$0")/.."
wheels=${CUDAL2_WHEELS:-.whl}  # another folder of wheels when a call must carry fewer
if [ -d "$wheels" ] && ls "$wheels"/*.whl >/dev/null 2>&1; then
  # byte-compiled, as pip installs by default: otherwise every process that imports them (the compile
  # pool's, the GPU worker, the caller) compiles their source first (3.4 s of a profiled cold search's
  # main process, 5.3 s of its GPU worker with the CuTe DSL)
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site "$wheels"/*.whl >&2
fi
echo "$(pwd):/tmp/site"
