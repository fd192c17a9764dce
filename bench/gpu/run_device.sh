#!/usr/bin/env bash
# GPU tests and benchmarks in one go, for a machine with an NVIDIA GPU (run from the repository
# root). Uses the prebuilt test_gpu and gpu_bench in $BIN (bench/gpu/pack_device.sh packs them)
# when they start there; otherwise builds them with that machine's nvcc (GTest from
# $BIN/googletest). Full logs go to $OUT; the console gets a short summary.
#
#   OUT=/tmp/out BIN=.device/gpu bench/gpu/run_device.sh [tests] [tests-shards] [memcheck] [table]
#       [merge-ab] [sanitize] [bench-small] [bench-8b-q4k] [bench-8b-q8] [bench-8b-f16] [bench-long]
#       [bench-tc] [gemm] [profile-small] [profile-8b] ...
# bench-tc: 8B Q4_K_M prefill at 512 / 4096 tokens with the opt-in tensor-core prefill (one chunk).
# attn: the attention op alone (gpu_bench --attn): decode at 1k / 32k (default kernel), prefill
#   512 without and 512 / 4096 / 2048-on-30720 with the tensor-core kernel.
# long-tc-q4k / long-tc-f16: 8B decode at 1k / 32k (contexts filled with the tensor-core prefill)
#   and tensor-core prefill of 512, 4096 and 32768 tokens in 4096-token chunks.
# gemv: each GEMV alone (gpu_bench --gemv), previous vs default kernels, per type and shape, at
#   one and four activation rows; gemv-ab: 8B Q4_K_M / F16 and SmolLM2 decode with
#   TERN_CUDA_GEMV=legacy and =default in one session.
# attn-span: the attention op alone at decode 1k / 4k / 32k: the chunk kernel (with and without
#   TERN_CUDA_ATTN_ROW_COPY), then the span kernel (TERN_CUDA_ATTN_SPAN=1) at 2 / 3 / 4 stages.
# long-span-q4k: 8B Q4_K_M decode at 1k / 32k with the chunk kernel, then the span kernel.
# profile-attn: ncu of the split-mode attention kernels at a 32k decode, chunk then span kernel
#   (speed of light, warp stall reasons, occupancy; full reports in $OUT/ncu-attn-span*.txt).
# attn-pair: the two-chunk span kernel (TERN_CUDA_ATTN_SPAN=2) against the span kernel (=1): the
#   attention op alone at decode 1k / 4k / 32k (span at 3 stages, pair at 2 / 3 / 4 stages).
# long-pair-q4k: 8B Q4_K_M decode at 1k / 32k with the span kernel, then the two-chunk kernel.
# tests-attn-pair: the attention and model invariance tests with the two-chunk kernel as the
#   split-mode kernel (TERN_CUDA_ATTN_SPAN=2; PairSpanKernelEqualsSpanKernelBitwise runs in tests).
# profile-attn-pair: ncu of the span kernel, then the two-chunk kernel, at a 32k decode.
# gemv-rows: each GEMV alone with the multi-row / split-row kernel (TERN_CUDA_GEMV=rows) in each
#   shape (RxP: R rows per warp step, P warps per row) next to the default, then 8B Q4_K_M / Q8_0
#   decode with TERN_CUDA_GEMV=default and =rows.
# tests-shards: the whole test_gpu in four parallel gtest shards, with the long
#   PersistentSpanBlocksEqualOneBlockPerSpan as a fifth process beside them (~3 minutes on an
#   H200 in sessions 9-10, against ~6 for tests); memcheck: compute-sanitizer on the attention at
#   200 / 1,024 / 8,192 positions and a SmolLM2-shape Q4_K_M prefill + decode.
# table: the issue-7 decode table in separate processes (8B Q4_K_M at 1k / 2k / 4k / 32k, Q8_0
#   and F16 at 1k, F16 at 32k, SmolLM2 Q4_1 at 128 / 1k), the 4k prefills, the 30k + 2k append,
#   batch 8 / 32.
# act-bits-ab: 16-bit (the default) against 8-bit quantized activations: 8B Q4_K_M decode at 1k /
#   32k and batch 8 / 32, Q8_0 at 1k, SmolLM2 Q4_1 at 128 / 1k and batch 8 / 32 (in-process A/Bs),
#   then 8B Q4_K_M prefill of 512 / 4096 tokens at each precision.
# merge-ab: the sliced span merge's serial fold (TERN_CUDA_ATTN_SPLIT_RING=5, the default until
#   session 12) against its prescaled fold (6, the default since): the attention alone at 32k, then
#   8B Q4_K_M and F16 decode at 32k, each as gpu_bench's in-process A/B (--split-ring "5;6": two
#   rounds, the second reversed).
# default-model: the real default model (SmolLM2-135M-Instruct Q4_1) end to end on the GPU:
#   GpuDefaultModel.* (against the transformers goldens and the CPU), then, where the tern binary
#   and the agent sessions came with it, three replays of 3 sessions at 64 tokens a turn (GPU with
#   reuse and the suffix drafter plus its no-reuse baseline; GPU with neither; CPU with reuse and
#   drafts) and how many turns' texts they share (replay_compare.py). The file is $TERN_MODEL, or
#   is put together from $MODEL_PARTS/*/*.part* (bench/gpu/pack_model.sh packs its xz for two calls:
#   one call carries at most 64 MiB) and checked against the sha256 that scripts/fetch-model pins.
# attn-mma: the invariant tensor-core attention (attention_mma.h, TERN_CUDA_ATTN_MMA=1): its tests
#   (GpuAttentionMma.*, and GpuAttentionTc.* which shares its fragment helpers), compute-sanitizer
#   on it, the attention alone against the default kernels (decode 1k / 8k / 32k, prefill 4096)
#   and alone (2048 on 30720), 8B Q4_K_M decode at 1k / 32k with and without it, its prefill of
#   512 / 4096 / 32768 tokens on the invariant products and the F16 30k + 2k append with it.
# profile-attn-mma: the attention alone, default kernels against TERN_CUDA_ATTN_MMA=1 (decode 1k /
#   32k, prefill 4096), then ncu of the tensor-core kernels at a 1k and a 32k decode.
# attn-mma-early: for commit 009c453 (restore it first: git revert dc0f6e9), the span kernel's early
#   K/V copies: the MMA tests, then the attention alone at decode 1k / 8k / 32k with
#   TERN_CUDA_ATTN_MMA_EARLY=0 and =1 (two rounds), then 8B Q4_K_M decode at 1k / 32k each way.
# tiled: the register-tiled attention (attention_tiled.h; opt-in until this step has passed on a
#   device): its bit-identity tests (against the chunk kernel's fused mode and the decode rows)
#   and compute-sanitizer on them, the attention alone at prefill 0 + 4096, 30000 + 512 / 128 / 32
#   without and with it, 8B Q4_K_M prefill of 4096 tokens and the 30k + 2k append each way, then
#   the whole test_gpu in 4 shards with it on (TERN_CUDA_ATTN_TILED=32: every model test's large
#   steps take it).
# TERN_CUDA_PDL=0 in the environment turns programmatic dependent launch off (A/B timing).
set -uo pipefail
OUT=${OUT:-gpu-out}
BIN=${BIN:-.device/gpu}
mkdir -p "$OUT"
export TERN_TEST_DATA="$PWD/tests/data"
# Binaries packed by bench/gpu/pack_device.sh: unpacked here; the CUPTI library beside them.
for f in test_gpu gpu_bench; do
  if [[ -f "$BIN/$f.xz" && ! -x "$BIN/$f" ]]; then xz -dkf "$BIN/$f.xz" && chmod +x "$BIN/$f"; fi
done
export LD_LIBRARY_PATH="$PWD/$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(tests bench-small bench-8b-q4k)

echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1)"

if ! "$BIN/test_gpu" --gtest_list_tests >/dev/null 2>&1; then
  echo "== prebuilt binaries do not start here; building with $(nvcc --version | tail -1)"
  gt=/tmp/gtest-install
  cmake -S "$BIN/googletest" -B /tmp/gtest-build -G Ninja -DCMAKE_INSTALL_PREFIX=$gt -DBUILD_GMOCK=OFF >/dev/null &&
    ninja -C /tmp/gtest-build install >/dev/null
  cmake -B /tmp/build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DCMAKE_PREFIX_PATH=$gt >"$OUT/build.txt" 2>&1 &&
    ninja -C /tmp/build-dev test_gpu gpu_bench >>"$OUT/build.txt" 2>&1 || { tail -30 "$OUT/build.txt"; exit 1; }
  cp /tmp/build-dev/tests/test_gpu /tmp/build-dev/test_gpu
  BIN=/tmp/build-dev
fi

bench() {  # name, timeout, args...
  local name=$1 limit=$2
  shift 2
  echo "== gpu_bench $*"
  timeout "$limit" "$BIN/gpu_bench" "$@" 2>&1 | tee "$OUT/bench-$name.txt" | grep -v "^synth"
  echo "   (exit ${PIPESTATUS[0]})"
}

# Nsight Compute of the split-mode attention kernels at a 32k decode with TERN_CUDA_ATTN_SPAN=$1:
# kernels matching regex $2, full report in $OUT/$3.txt, the headline metrics on the console.
ncu_attention() {
  local kernel=$1 regex=$2 report="$OUT/$3.txt"
  echo "== ncu split-mode attention at 32k, TERN_CUDA_ATTN_SPAN=$kernel"
  TERN_CUDA_ATTN_SPAN=$kernel timeout 120 ncu --kernel-name regex:"$regex" --launch-skip 64 --launch-count 3 \
    --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
    "$BIN/gpu_bench" --attn --attn-ctx 32768 --attn-prefill "" >"$report" 2>&1
  echo "   (exit $?)"
  grep -E "attention_.*kernel|Duration|DRAM Throughput|Compute \(SM\) Throughput|Issue Slots Busy|Achieved Occupancy|Theoretical Occupancy|Stall|Registers Per" \
    "$report" | head -40
}

for step in "${steps[@]}"; do
  case "$step" in
    tests)
      # The whole suite takes ~6 minutes on an H200 (session 6: ~290 s plus 67 s for
      # PersistentSpanBlocksEqualOneBlockPerSpan), so it runs in two parts, each with its own
      # limit: a part that times out does not hide the other's results.
      echo "== test_gpu: the attention tests, then the rest"
      : >"$OUT/test_gpu.txt"
      for part in 'GpuAttention*' '-GpuAttention*'; do
        timeout 300 "$BIN/test_gpu" --gtest_color=no --gtest_filter="$part" >>"$OUT/test_gpu.txt" 2>&1
        echo "   $part: exit $?"
      done
      grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" "$OUT/test_gpu.txt" | head -40
      # The first failures in full (trace lines name the case).
      grep -B1 -A10 "Failure$" "$OUT/test_gpu.txt" | head -120
      tail -3 "$OUT/test_gpu.txt"
      ;;
    tests-shards)
      echo "== test_gpu: 4 shards + PersistentSpanBlocksEqualOneBlockPerSpan, in parallel"
      long='GpuAttention.PersistentSpanBlocksEqualOneBlockPerSpan'
      pids=()
      for i in 0 1 2 3; do
        GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$i timeout 400 "$BIN/test_gpu" --gtest_color=no \
          --gtest_filter="-$long" >"$OUT/test_gpu-shard$i.txt" 2>&1 &
        pids+=($!)
      done
      timeout 400 "$BIN/test_gpu" --gtest_color=no --gtest_filter="$long" >"$OUT/test_gpu-long.txt" 2>&1 &
      pids+=($!)
      for p in "${pids[@]}"; do wait "$p"; echo "   process $p: exit $?"; done
      cat "$OUT"/test_gpu-shard*.txt "$OUT/test_gpu-long.txt" >"$OUT/test_gpu.txt"
      rm -f "$OUT"/test_gpu-shard*.txt "$OUT/test_gpu-long.txt"  # one file back (a call returns few)
      grep -E "^\[  (PASSED|FAILED) " "$OUT/test_gpu.txt"
      awk '/^\[  PASSED  \]/ { p += $4 } /^\[  FAILED  \] [0-9]+ test/ { f += $4 }
           END { printf "   test_gpu: %d passed, %d failed\n", p, f }' "$OUT/test_gpu.txt"
      grep -B1 -A10 "Failure$" "$OUT/test_gpu.txt" | head -120
      ;;
    attn-mma)
      echo "== test_gpu GpuAttentionMma.* GpuAttentionTc.*"
      timeout 300 "$BIN/test_gpu" --gtest_color=no --gtest_filter='GpuAttentionMma.*:GpuAttentionTc.*' \
        >"$OUT/test_gpu-mma.txt" 2>&1
      echo "   exit $?"
      grep -E "^\[  (PASSED|FAILED) |mma attn" "$OUT/test_gpu-mma.txt" | head -60
      grep -B1 -A10 "Failure$" "$OUT/test_gpu-mma.txt" | head -80
      bench attn-mma 120 --attn --attn-ctx 1024,8192,32768 --attn-prefill "0+4096" --attn-reps 5 \
        --attn-env "TERN_CUDA_ATTN_MMA=0;TERN_CUDA_ATTN_MMA=1"
      TERN_CUDA_ATTN_MMA=1 bench attn-mma-append 60 --attn --attn-ctx "" --attn-prefill "30720+2048" --attn-reps 3
      bench decode-q4k-default 100 --preset llama3-8b --mix q4_k_m --ctx 1024,32768 --prefill "" --chunk 4096 \
        --tc-prefill --decode-steps 32
      TERN_CUDA_ATTN_MMA=1 bench decode-q4k-mma 100 --preset llama3-8b --mix q4_k_m --ctx 1024,32768 --prefill "" \
        --chunk 4096 --tc-prefill --decode-steps 32
      TERN_CUDA_ATTN_MMA=1 bench append-f16-mma 100 --preset llama3-8b --mix f16 --ctx "" --prefill "" \
        --decode-steps 0 --append 30720+2048 --chunk 2048 --tc-prefill
      echo "== compute-sanitizer memcheck, attention with TERN_CUDA_ATTN_MMA=1"
      TERN_CUDA_ATTN_MMA=1 timeout 120 compute-sanitizer --tool memcheck --print-limit 10 "$BIN/gpu_bench" --attn \
        --attn-ctx 200,1024,8192 --attn-prefill "0+300,1000+200" --attn-reps 1 >"$OUT/memcheck-mma.txt" 2>&1
      echo "   exit $?; $(grep -h "ERROR SUMMARY" "$OUT/memcheck-mma.txt")"
      TERN_CUDA_ATTN_MMA=1 bench prefill-q4k-mma 150 --preset llama3-8b --mix q4_k_m --ctx "" \
        --prefill 512,4096,32768 --chunk 4096 --decode-steps 0
      ;;
    tiled)
      tf='GpuAttention.TiledKernelEqualsChunkKernelBitwise:GpuAttention.PrefillRowsEqualDecodeRowsBitwise:GpuAttention.PrefillAndMixedBatches'
      echo "== test_gpu $tf (TERN_CUDA_ATTN_TILED=32)"
      TERN_CUDA_ATTN_TILED=32 timeout 150 "$BIN/test_gpu" --gtest_color=no --gtest_filter="$tf" >"$OUT/test_gpu-tiled.txt" 2>&1
      echo "   exit $?"
      grep -E "^\[  (PASSED|FAILED) " "$OUT/test_gpu-tiled.txt"
      grep -B2 -A12 "Failure$" "$OUT/test_gpu-tiled.txt" | head -60
      echo "== compute-sanitizer memcheck on GpuAttention.TiledKernelEqualsChunkKernelBitwise"
      timeout 150 compute-sanitizer --tool memcheck "$BIN/test_gpu" --gtest_color=no \
        --gtest_filter='GpuAttention.TiledKernelEqualsChunkKernelBitwise' >"$OUT/memcheck-tiled.txt" 2>&1
      echo "   exit $?"; tail -3 "$OUT/memcheck-tiled.txt"
      bench attn-tiled 150 --attn --attn-ctx "" --attn-prefill "0+4096,0+512,30000+512,30000+128,30000+32" \
        --attn-reps 3 --attn-rounds 2 --attn-env "TERN_CUDA_ATTN_TILED=0;TERN_CUDA_ATTN_TILED=32"
      for tiled in 0 32; do
        TERN_CUDA_ATTN_TILED=$tiled bench prefill-tiled$tiled 100 --preset llama3-8b --mix q4_k_m --ctx "" --prefill 4096 \
          --decode-steps 0
      done
      TERN_CUDA_ATTN_TILED=32 bench append-tiled 100 --preset llama3-8b --mix q4_k_m --ctx "" --prefill "" \
        --append 30720+2048 --chunk 2048 --decode-steps 0
      TERN_CUDA_ATTN_TILED=32 OUT="$OUT" BIN="$BIN" bash "$0" tests-shards
      ;;
    attn-mma-early)
      # Only with 009c453's code in the binaries: without it the variable is ignored and both
      # sides of the A/B would time the same kernel.
      if ! grep -q TERN_CUDA_ATTN_MMA_EARLY "$BIN/gpu_bench"; then
        echo "== attn-mma-early: $BIN/gpu_bench lacks TERN_CUDA_ATTN_MMA_EARLY (git revert dc0f6e9, rebuild); skipped"
        continue
      fi
      echo "== test_gpu GpuAttentionMma.* GpuAttentionTc.*"
      timeout 200 "$BIN/test_gpu" --gtest_color=no --gtest_filter='GpuAttentionMma.*:GpuAttentionTc.*' \
        >"$OUT/test_gpu-mma.txt" 2>&1
      echo "   exit $?"
      grep -E "^\[  (PASSED|FAILED) " "$OUT/test_gpu-mma.txt"
      grep -B1 -A10 "Failure$" "$OUT/test_gpu-mma.txt" | head -60
      bench attn-mma-early 120 --attn --attn-ctx 1024,8192,32768 --attn-prefill "" --attn-reps 5 --attn-rounds 2 \
        --attn-env "TERN_CUDA_ATTN_MMA=1,TERN_CUDA_ATTN_MMA_EARLY=0;TERN_CUDA_ATTN_MMA=1,TERN_CUDA_ATTN_MMA_EARLY=1"
      for early in 0 1; do
        TERN_CUDA_ATTN_MMA=1 TERN_CUDA_ATTN_MMA_EARLY=$early bench decode-q4k-mma-early$early 100 --preset llama3-8b \
          --mix q4_k_m --ctx 1024,32768 --prefill "" --chunk 4096 --tc-prefill --decode-steps 32
      done
      ;;
    profile-attn-mma)
      bench attn-mma-ab 200 --attn --attn-ctx 1024,32768 --attn-prefill "0+4096" --attn-reps 5 \
        --attn-env "TERN_CUDA_ATTN_MMA=0;TERN_CUDA_ATTN_MMA=1"
      for ctx in 1024 32768; do
        echo "== ncu attention_mma at a $ctx decode"
        TERN_CUDA_ATTN_MMA=1 timeout 150 ncu --kernel-name regex:"attention_mma" --launch-skip 64 --launch-count 2 \
          --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
          --section SchedulerStats --section MemoryWorkloadAnalysis "$BIN/gpu_bench" --attn --attn-ctx $ctx \
          --attn-prefill "" --attn-reps 1 >"$OUT/ncu-mma-$ctx.txt" 2>&1
        echo "   (exit $?)"
        grep -E "attention_mma.*kernel|Duration|DRAM Throughput|Compute \(SM\) Throughput|Issue Slots Busy|Achieved Occupancy|Theoretical Occupancy|Stall|Registers Per|Block Limit|Eligible Warps|Active Warps Per|Warp Cycles Per Issued|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth" \
          "$OUT/ncu-mma-$ctx.txt" | head -60
      done
      ;;
    memcheck)
      echo "== compute-sanitizer memcheck: attention at 200 / 1,024 / 8,192, SmolLM2-shape Q4_K_M"
      timeout 200 compute-sanitizer --tool memcheck --print-limit 10 "$BIN/gpu_bench" --attn \
        --attn-ctx 200,1024,8192 --attn-prefill "" --attn-reps 1 >"$OUT/memcheck-attn.txt" 2>&1
      echo "   attention: exit $?; $(grep -h "ERROR SUMMARY" "$OUT/memcheck-attn.txt")"
      timeout 200 compute-sanitizer --tool memcheck --print-limit 10 "$BIN/gpu_bench" --preset smollm2-135m \
        --mix q4_k_m --ctx 128 --prefill 64 --decode-steps 4 >"$OUT/memcheck-model.txt" 2>&1
      echo "   model: exit $?; $(grep -h "ERROR SUMMARY" "$OUT/memcheck-model.txt")"
      ;;
    table)
      bench table-q4k 200 --preset llama3-8b --mix q4_k_m --ctx 1024,2048,4096 --prefill 4096 --batch 8,32
      bench table-q4k-32k 200 --preset llama3-8b --mix q4_k_m --ctx 32768 --prefill "" --chunk 4096 --tc-prefill --decode-steps 32
      bench table-q8 150 --preset llama3-8b --mix q8_0 --ctx 1024 --prefill ""
      bench table-f16 200 --preset llama3-8b --mix f16 --ctx 1024 --prefill 4096 --gemm-peak
      bench table-f16-32k 200 --preset llama3-8b --mix f16 --ctx 32768 --prefill "" --chunk 4096 --tc-prefill --decode-steps 32
      bench table-append 200 --preset llama3-8b --mix f16 --ctx "" --prefill "" --decode-steps 0 --append 30720+2048 --chunk 2048 --tc-prefill
      bench table-small 60 --preset smollm2-135m --mix q4_1 --ctx 128,1024 --prefill "" --batch 8,32
      ;;
    act-bits-ab)
      # 16-bit against 8-bit quantized activations (CudaBackendOptions::act_bits): decode and batch
      # rows as gpu_bench's in-process A/B (--act-bits "16;8": two rounds, the second reversed),
      # then the invariant 4k prefill of 8B Q4_K_M in one process per precision.
      bench ab-q4k 200 --preset llama3-8b --mix q4_k_m --ctx 1024,32768 --prefill "" --chunk 4096 --tc-prefill \
        --batch 8,32 --act-bits "16;8"
      bench ab-q8 150 --preset llama3-8b --mix q8_0 --ctx 1024 --prefill "" --act-bits "16;8"
      bench ab-small 60 --preset smollm2-135m --mix q4_1 --ctx 128,1024 --prefill 512 --batch 8,32 --act-bits "16;8"
      TERN_CUDA_ACT_BITS=16 bench ab-prefill16 150 --preset llama3-8b --mix q4_k_m --ctx "" --prefill 512,4096
      TERN_CUDA_ACT_BITS=8 bench ab-prefill8 150 --preset llama3-8b --mix q4_k_m --ctx "" --prefill 512,4096
      ;;
    merge-ab)
      bench merge-ab-attn 60 --attn --attn-ctx 32768 --attn-prefill "" \
        --attn-env "TERN_CUDA_ATTN_SPLIT_RING=5;TERN_CUDA_ATTN_SPLIT_RING=6" --attn-rounds 2
      bench merge-ab-q4k 200 --preset llama3-8b --mix q4_k_m --ctx 32768 --prefill "" --chunk 4096 --tc-prefill \
        --decode-steps 32 --split-ring "5;6"
      bench merge-ab-f16 200 --preset llama3-8b --mix f16 --ctx 32768 --prefill "" --chunk 4096 --tc-prefill \
        --decode-steps 32 --split-ring "5;6"
      ;;
    sanitize)
      echo "== compute-sanitizer memcheck (subset)"
      timeout 150 compute-sanitizer --tool memcheck --print-limit 10 "$BIN/test_gpu" --gtest_color=no \
        --gtest_filter='GpuOps.*:*GpuMatmul.KQuants*:*GpuMatmul.LegacyQuants*:GpuAttention.PrefillAndMixedBatches:GpuAttention.SplitAndFusedModesAreBitIdentical:GpuModel.GraphReplayEqualsEagerLaunches' \
        >"$OUT/sanitize.txt" 2>&1
      echo "   (exit $?)"
      grep -E "ERROR SUMMARY|Invalid|out of bounds|^\[  (PASSED|FAILED)" "$OUT/sanitize.txt" | head -30
      ;;
    gemm)
      echo "== torch bf16 GEMM 8192^3 (ceiling)"
      timeout 90 python3 - <<'PY' 2>&1 | tail -3
import torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
for _ in range(3): a @ b
torch.cuda.synchronize()
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
ts = []
for _ in range(10):
    s.record(); a @ b; e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
ts.sort()
print(f"bf16 gemm 8192^3: {2 * 8192**3 / (ts[5] * 1e-3) / 1e12:.0f} TFLOP/s (median of 10, random data)")
PY
      ;;
    bench-small) bench small 60 --preset smollm2-135m --mix q4_1 --ctx 128,1024 --prefill 512 --batch 8,32 ;;
    bench-8b-q4k) bench 8b-q4k 150 --preset llama3-8b --mix q4_k_m --ctx 1024 --prefill 512 --batch 8 ;;
    bench-8b-q8) bench 8b-q8 150 --preset llama3-8b --mix q8_0 --ctx 1024 --prefill 512 ;;
    bench-8b-f16) bench 8b-f16 200 --preset llama3-8b --mix f16 --ctx 1024 --prefill 512 ;;
    bench-tc) bench tc 150 --preset llama3-8b --mix q4_k_m --ctx "" --decode-steps 0 --prefill 512,4096 --chunk 4096 --tc-prefill ;;
    attn)
      bench attn 60 --attn --attn-prefill 0+512
      bench attn-tc 60 --attn --attn-ctx "" --attn-prefill 0+512,0+4096,30720+2048 --tc-prefill
      ;;
    long-tc-q4k) bench long-tc-q4k 100 --preset llama3-8b --mix q4_k_m --ctx 1024,32768 --prefill 512,4096,32768 --chunk 4096 --tc-prefill --decode-steps 16 ;;
    long-tc-f16) bench long-tc-f16 150 --preset llama3-8b --mix f16 --ctx 1024,32768 --prefill 512,4096,32768 --chunk 4096 --tc-prefill --decode-steps 16 ;;
    gemv)
      bench gemv 60 --gemv
      bench gemv-n4 40 --gemv --gemv-n 4 --gemv-filter 8b
      ;;
    gemv-ab)
      for path in legacy default; do
        TERN_CUDA_GEMV=$path bench "gemv-ab-small-$path" 60 --preset smollm2-135m --mix q4_1 --ctx 1024 --prefill "" --decode-steps 64
        TERN_CUDA_GEMV=$path bench "gemv-ab-q4k-$path" 60 --preset llama3-8b --mix q4_k_m --ctx 1024 --prefill "" --decode-steps 32
        TERN_CUDA_GEMV=$path bench "gemv-ab-f16-$path" 90 --preset llama3-8b --mix f16 --ctx 1024 --prefill "" --decode-steps 32
      done
      ;;
    gemv-rows)  # TERN_CUDA_GEMV=rows (gemv_rows.cu): per shape (bits checked against the default), then decode
      bench gemv-rows 120 --gemv --gemv-no-legacy --gemv-filter q4_k,q6_k,q8_0 --gemv-rows auto,1x1,2x1,4x1,1x2,1x4
      for path in default rows; do
        TERN_CUDA_GEMV=$path bench "gemv-rows-q4k-$path" 60 --preset llama3-8b --mix q4_k_m --ctx 1024 --prefill "" --decode-steps 32
        TERN_CUDA_GEMV=$path bench "gemv-rows-q8-$path" 60 --preset llama3-8b --mix q8_0 --ctx 1024 --prefill "" --decode-steps 32
      done
      ;;
    attn-span)
      TERN_CUDA_ATTN_SPAN=0 bench attn-chunk 40 --attn --attn-ctx 1024,4096,32768 --attn-prefill ""
      TERN_CUDA_ATTN_SPAN=0 TERN_CUDA_ATTN_ROW_COPY=1 bench attn-chunk-rows 40 --attn --attn-ctx 1024,4096,32768 --attn-prefill ""
      for st in 2 3 4; do
        TERN_CUDA_ATTN_SPAN=1 TERN_CUDA_ATTN_SPAN_STAGES=$st bench "attn-span$st" 40 --attn --attn-ctx 1024,4096,32768 --attn-prefill ""
      done
      ;;
    long-span-q4k)
      for v in 0 1; do
        TERN_CUDA_ATTN_SPAN=$v bench "long-span$v-q4k" 100 --preset llama3-8b --mix q4_k_m --ctx 1024,32768 --prefill "" --chunk 4096 --tc-prefill --decode-steps 16
      done
      ;;
    profile-attn) for v in 0 1; do ncu_attention "$v" 'attention_(chunk|span)' "ncu-attn-span$v"; done ;;
    attn-pair)
      TERN_CUDA_ATTN_SPAN=1 bench attn-span3 40 --attn --attn-ctx 1024,4096,32768 --attn-prefill ""
      for st in 2 3 4; do
        TERN_CUDA_ATTN_SPAN=2 TERN_CUDA_ATTN_SPAN_STAGES=$st bench "attn-pair$st" 40 --attn --attn-ctx 1024,4096,32768 --attn-prefill ""
      done
      ;;
    long-pair-q4k)
      for v in 1 2; do
        TERN_CUDA_ATTN_SPAN=$v bench "long-pair$v-q4k" 100 --preset llama3-8b --mix q4_k_m --ctx 1024,32768 --prefill "" --chunk 4096 --tc-prefill --decode-steps 16
      done
      ;;
    tests-attn-pair)
      echo "== test_gpu with TERN_CUDA_ATTN_SPAN=2"
      TERN_CUDA_ATTN_SPAN=2 timeout 200 "$BIN/test_gpu" --gtest_color=no \
        --gtest_filter='DevicePlan.*:GpuAttention*:GpuModel.*:GpuTcPrefill.*' >"$OUT/test_gpu-attn-pair.txt" 2>&1
      echo "   (exit $?)"
      grep -E "^\[  (PASSED|FAILED) |FAILED|tests ran" "$OUT/test_gpu-attn-pair.txt" | head -20
      ;;
    profile-attn-pair) for v in 1 2; do ncu_attention "$v" 'attention_span' "ncu-attn-pair$v"; done ;;
    append-f16) bench append-f16 200 --preset llama3-8b --mix f16 --ctx "" --prefill "" --decode-steps 0 --append 30720+2048 --chunk 2048 --tc-prefill ;;
    append-q4k) bench append-q4k 150 --preset llama3-8b --mix q4_k_m --ctx "" --prefill "" --decode-steps 0 --append 30720+2048 --chunk 2048 --tc-prefill ;;
    bench-long) bench long 200 --preset llama3-8b --mix q4_k_m --ctx 32768 --prefill 4096 --decode-steps 32 ;;
    profile-small | profile-8b)  # per-kernel device times of a decode step (ncu serializes kernels)
      if [[ $step == profile-small ]]; then model=(--preset smollm2-135m --mix q4_1); else model=(--preset llama3-8b --mix q4_k_m); fi
      echo "== ncu $step"
      timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --csv "$BIN/gpu_bench" "${model[@]}" \
        --ctx 64 --prefill "" --decode-steps 2 >"$OUT/ncu-$step.csv" 2>&1
      echo "   (exit $?)"
      python3 bench/gpu/ncu_step_summary.py "$OUT/ncu-$step.csv" | head -16
      ;;
    default-model)
      parts=${MODEL_PARTS:-.device/model}
      if [[ -z ${TERN_MODEL:-} ]]; then
        export TERN_MODEL=/tmp/default-model.gguf
        if compgen -G "$parts/*/*.xz.part*" >/dev/null; then  # pack_model.sh: parts of the model's xz
          cat "$parts"/*/*.xz.part* | xz -dc >"$TERN_MODEL" 2>/dev/null
        else
          cat "$parts"/*/*.part* >"$TERN_MODEL" 2>/dev/null
        fi
      fi
      pinned=$(sed -n 's/^sha256="\([0-9a-f]*\)"$/\1/p' scripts/fetch-model)
      if ! echo "$pinned  $TERN_MODEL" | sha256sum --check --status; then
        echo "== default-model: $TERN_MODEL is missing or not the pinned file"
      else
        echo "== test_gpu GpuDefaultModel.* on $TERN_MODEL"
        timeout 300 "$BIN/test_gpu" --gtest_color=no --gtest_filter='*GpuDefaultModel.*' >"$OUT/test_gpu-default-model.txt" 2>&1
        echo "   (exit $?)"
        grep -E "^\[  (PASSED|FAILED|SKIPPED) |diverged|worst|Failure|Expected|Which is|where" "$OUT/test_gpu-default-model.txt" | head -60
        if compgen -G "$parts/*/tern.xz" >/dev/null && compgen -G "$parts/*/sessions.jsonl.xz" >/dev/null; then
          xz -dc "$parts"/*/tern.xz >/tmp/tern && chmod +x /tmp/tern
          xz -dc "$parts"/*/sessions.jsonl.xz >/tmp/sessions.jsonl
          replay=(/tmp/tern bench replay -m "$TERN_MODEL" --sessions /tmp/sessions.jsonl --n-sessions 3 --max-tokens 64 --json)
          echo "== tern bench replay, 3 sessions: GPU reuse + suffix drafts (and baseline), GPU neither, CPU"
          timeout 150 "${replay[@]}" --backend cuda --drafter suffix >"$OUT/replay-cuda.json" 2>"$OUT/replay-cuda.err"
          timeout 90 "${replay[@]}" --backend cuda --drafter none --restart turn --no-baseline \
            >"$OUT/replay-cuda-plain.json" 2>"$OUT/replay-cuda-plain.err"
          timeout 150 "${replay[@]}" --backend cpu -t "$(nproc)" --drafter suffix --no-baseline \
            >"$OUT/replay-cpu.json" 2>"$OUT/replay-cpu.err"
          python3 bench/gpu/replay_compare.py "$OUT/replay-cuda.json" "$OUT/replay-cuda-plain.json" "$OUT/replay-cpu.json"
        fi
      fi
      ;;
    *) echo "unknown step $step" ;;
  esac
done
