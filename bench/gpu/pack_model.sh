#!/usr/bin/env bash
# Splits the default model (models/SmolLM2-135M-Instruct.Q4_1.gguf, ~98 MB) into two parts for the
# device machine, whose calls carry at most 64 MiB each (the working tree included): carry
# .device/model/part1 in one call and .device/model/part2 in the next (the first stays there while
# the machine is held), then run `MODEL_PARTS=.device/model bench/gpu/run_device.sh default-model`
# (run from the repository root; the parts' names sort in order).
set -euo pipefail
model=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
dest=${DEST:-.device/model}
split_at=${SPLIT_BYTES:-49500000}
mkdir -p "$dest/part1" "$dest/part2"
head -c "$split_at" "$model" >"$dest/part1/model.part1"
tail -c +"$((split_at + 1))" "$model" >"$dest/part2/model.part2"
du -sh "$dest"/part1 "$dest"/part2
