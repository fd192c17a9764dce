#!/usr/bin/env bash
# Packs the GPU test and benchmark binaries of a Release build here for the device machine, which
# has no registries (run from the repository root): .device/gpu/test_gpu.xz, gpu_bench.xz and the
# CUPTI library gpu_bench links (the device's CUDA install lacks it), ~40 MB in all, under the
# 64 MiB a call carries. Then, with the device tool, carry .device/gpu and run e.g.
#   OUT=$OUT bench/gpu/run_device.sh tests-shards memcheck table
# (run_device.sh unpacks the binaries there). BUILD (default build) must be configured with
# -DCMAKE_CUDA_ARCHITECTURES covering 90a.
set -euo pipefail
build=${BUILD:-build}
dest=${DEST:-.device/gpu}
ninja -C "$build" test_gpu gpu_bench
mkdir -p "$dest"
rm -f "$dest/test_gpu" "$dest/gpu_bench"
xz -T2 -6 -c "$build/tests/test_gpu" >"$dest/test_gpu.xz"
xz -T2 -6 -c "$build/gpu_bench" >"$dest/gpu_bench.xz"
cupti=$(ldd "$build/gpu_bench" | awk '/libcupti/ { print $3 }')
if [[ -n $cupti ]]; then cp -L "$cupti" "$dest/"; fi
du -sh "$dest"
