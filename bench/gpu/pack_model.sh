#!/usr/bin/env bash
# Packs the real default model (models/SmolLM2-135M-Instruct.Q4_1.gguf, ~98 MB) for the device
# machine, whose calls carry at most 64 MiB each (the working tree, ~10 MB, included), in two
# parts (run from the repository root, after a Release build with CUDA in $BUILD):
#   .device/model/part1: the model's first half and the stripped test_gpu (test_gpu.xz)
#   .device/model/part2: the rest of the model, the stripped tern binary (tern.xz) and the first
#                        three agent sessions of the replay (sessions.jsonl.xz, from
#                        $TERN_SHARED_DATA or ../shared/data)
# Carry .device/model/part1 in one call and .device/model/part2 in the next, at once (the first
# stays there while the machine is held, ~30 s idle), and run in the second
#   OUT=$OUT BIN=.device/model/part1 MODEL_PARTS=.device/model bench/gpu/run_device.sh default-model
set -euo pipefail
build=${BUILD:-build}
model=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
dest=${DEST:-.device/model}
shared=${TERN_SHARED_DATA:-../shared/data}
ninja -C "$build" tern test_gpu
rm -rf "$dest"
mkdir -p "$dest/part1" "$dest/part2"
strip -o "$dest/part1/test_gpu" "$build/tests/test_gpu"
xz -T2 -9 "$dest/part1/test_gpu"
strip -o "$dest/part2/tern" "$build/tern"
xz -T2 -9 "$dest/part2/tern"
if [[ -f $shared/agentic/swe-sessions.jsonl ]]; then  # the replay's first 3 sessions
  head -3 "$shared/agentic/swe-sessions.jsonl" | xz -T2 -9 >"$dest/part2/sessions.jsonl.xz"
fi
# The model, xz-compressed (98.4 -> 90.5 MB: the two binaries grew past what two calls carry
# uncompressed), split so that both calls carry the same bytes (with ~9 MB of tree: a call of
# 57.9 MB of carried files was refused, one of 55.4 MB went).
xz -T2 -6 -c "$model" >"$dest/model.xz"
size=$(stat -c %s "$dest/model.xz")
extra1=$(du -cb "$dest/part1" | tail -1 | cut -f1)
extra2=$(du -cb "$dest/part2" | tail -1 | cut -f1)
split_at=${SPLIT_BYTES:-$(((size + extra2 - extra1) / 2))}
head -c "$split_at" "$dest/model.xz" >"$dest/part1/model.xz.part1"
tail -c +"$((split_at + 1))" "$dest/model.xz" >"$dest/part2/model.xz.part2"
rm "$dest/model.xz"
du -sb "$dest"/part1 "$dest"/part2
