#!/usr/bin/env bash
# Validate the CuTe DSL backend on a Hopper GPU machine that has no network and whose Python
# lacks nvidia-cutlass-dsl. The DSL arrives in two parts made by cute-dsl-pack.sh (one device
# call carries at most 64 MiB), each unpacked by the cute-dsl-unpack.sh that travels with it:
#
#   here:    bash /work/shared/tools/cute-dsl-pack.sh .carry/cute-dsl        # part1 ~51, part2 ~42 MiB
#   call 1:  bash tools/gpu_cute_dsl.sh .carry/cute-dsl/part1                 carry: .carry/cute-dsl/part1
#   call 2:  bash tools/gpu_cute_dsl.sh .carry/cute-dsl/part2 [pytest args]   carry: .carry/cute-dsl/part2
#
# Call 2 must reach the same (still warm) machine: the site folder part1 went into lives in /tmp.
# Where part1 and the repository's files pass 64 MiB together, split part1 in halves with
# tools/split_dsl_part1.sh .carry/cute-dsl and give the calls part1a, part1b, then part2x (part2's
# library compressed, for when part2, the repository and .whl/ together pass 64 MiB).
# After part2 the script runs tests/test_gpu_cute_dsl.py (correctness of every variant, then a
# timing table vs torch.mm); without a PARTDIR it just runs the tests (DSL already importable).
# Anything after "--" runs instead of the tests, with the DSL importable, e.g. the search:
#   bash tools/gpu_cute_dsl.sh .carry/cute-dsl/part2 -- python3 benchmarks/search_48.py probe.json --backend cute_dsl
# The DSL needs cuda-bindings, protobuf and typing-extensions: carry their wheels in .whl/ when
# the image lacks them (tools/device_env.sh installs .whl/ into /tmp/site).
set -euo pipefail
cd "$(dirname "$0")/.."
site=${CUTE_DSL_SITE:-/tmp/cute-dsl-site}
dsl_path=""
if [ $# -gt 0 ] && [ -d "$1" ] && [ -f "$1/dsl.tar.xz.00" ]; then
  # the first half of a split part1: kept beside the site folder for the call with the second
  mkdir -p "$site.parts" && cp "$1/dsl.tar.xz.00" "$site.parts/"
  echo "kept the first half of part1 in $site.parts; now run this script with part1b (same machine, while it is warm)"
  exit 0
fi
if [ $# -gt 0 ] && [ -d "$1" ]; then
  part=$1; shift
  unpack="$part/cute-dsl-unpack.sh"
  if [ -f "$part/libcute_dsl_runtime.so.xz" ]; then  # part2x: part2 with its library compressed
    mkdir -p "$site.parts/part2"
    xz -d -c "$part/libcute_dsl_runtime.so.xz" > "$site.parts/part2/libcute_dsl_runtime.so"
    part="$site.parts/part2"
  fi
  if [ -f "$part/dsl.tar.xz.01" ]; then  # the second half: joined with the first into a whole part1
    [ -f "$site.parts/dsl.tar.xz.00" ] || { echo "the first half of part1 is not on this machine (a new one?): start again with part1a" >&2; exit 1; }
    mkdir -p "$site.parts/part1"
    cat "$site.parts/dsl.tar.xz.00" "$part/dsl.tar.xz.01" > "$site.parts/part1/dsl.tar.xz"
    part="$site.parts/part1"
  fi
  dsl_path=$(bash "$unpack" "$part" "$site")
  # byte-compile what was unpacked, as pip would (see tools/device_env.sh); a file that does not
  # compile on this Python is left to its import
  python3 -m compileall -q -j 0 "$site" >/dev/null 2>&1 || true
  if [ ! -f "$part/libcute_dsl_runtime.so" ]; then
    echo "unpacked $part into $site; now run this script with part2 (same machine, while it is warm)"
    exit 0
  fi
elif [ -d "$site/nvidia_cutlass_dsl" ]; then
  dsl_path="$site:$site/nvidia_cutlass_dsl/dsl_packages"
fi
if [ -f tools/device_env.sh ]; then
  base=$(bash tools/device_env.sh)
else
  base=$PWD
fi
export PYTHONPATH="$base${dsl_path:+:$dsl_path}${PYTHONPATH:+:$PYTHONPATH}"
export CUDAL2_GPU_TESTS=1
unset TRITON_INTERPRET CUTE_DSL_ARCH
python3 - <<'EOF'
import sys
try:
    import torch, cutlass, cutlass.cute  # noqa: F401
except Exception as e:
    sys.exit(f"cannot import the CuTe DSL: {type(e).__name__}: {e}\n"
             "unpack part1 then part2 on the same machine; carry wheels for cuda-bindings, protobuf and "
             "typing-extensions in .whl/ if the image lacks them")
print("torch", torch.__version__, "| nvidia-cutlass-dsl", getattr(cutlass, "__version__", "?"), "|",
      torch.cuda.get_device_name())
EOF
if [ "${1:-}" = "--" ]; then
  shift
  exec "$@"
fi
python3 -m pytest -m gpu tests/test_gpu_cute_dsl.py -s -q -p no:cacheprovider "$@"
