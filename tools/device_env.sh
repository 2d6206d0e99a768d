#!/usr/bin/env bash
# On the GPU machine: install the carried wheels (packages its image lacks) into /tmp/site and
# print the PYTHONPATH to use. Usage: export PYTHONPATH=$(bash tools/device_env.sh)
set -eu
cd "$(dirname "$0")/.."
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >&2
fi
echo "$(pwd):/tmp/site"
