#!/usr/bin/env bash
# Split cute-dsl-pack.sh's part1 (~51 MiB) into two halves, part1a and part1b, for when part1 and
# the repository's own files together pass the 64 MiB one device call carries; and compress part2's
# runtime library (~42 MiB, ~14 MiB with xz) into part2x, which with the repository and the wheels
# in .whl/ still fits one call.
# tools/gpu_cute_dsl.sh then takes part1a, part1b and part2x in three calls on one warm machine.
# Usage: bash tools/split_dsl_part1.sh DIR   (DIR: the folder cute-dsl-pack.sh wrote)
set -eu
dir=${1:?usage: split_dsl_part1.sh DIR (the folder cute-dsl-pack.sh wrote)}
[ -f "$dir/part1/dsl.tar.xz" ] || { echo "$dir/part1/dsl.tar.xz not found: run cute-dsl-pack.sh $dir first" >&2; exit 1; }
mkdir -p "$dir/part1a" "$dir/part1b"
split -n 2 -d "$dir/part1/dsl.tar.xz" "$dir/dsl.tar.xz."
mv "$dir/dsl.tar.xz.00" "$dir/part1a/"
mv "$dir/dsl.tar.xz.01" "$dir/part1b/"
cp "$dir/part1/cute-dsl-unpack.sh" "$dir/part1a/"
cp "$dir/part1/cute-dsl-unpack.sh" "$dir/part1b/"
du -sh "$dir/part1a" "$dir/part1b"
mkdir -p "$dir/part2x"
xz -T0 -6 -c "$dir/part2/libcute_dsl_runtime.so" > "$dir/part2x/libcute_dsl_runtime.so.xz"
cp "$dir/part2/cute-dsl-unpack.sh" "$dir/part2x/"
du -sh "$dir/part2x"
