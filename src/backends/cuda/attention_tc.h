// Tensor-core prefill attention (opt-in, with the tensor-core prefill of matmul_tc.h:
// CudaBackendOptions::tc_prefill / TERN_CUDA_TC_PREFILL=1; CudaBackendOptions::tc_attention or
// TERN_CUDA_TC_ATTENTION=0 keeps attention on the batch-invariant kernel of attention.h).
//
// FlashAttention-2 style, on mma.sync m16n8k16 (f16 inputs, f32 accumulation), causal, over the
// paged KV cache (block tables), GQA-aware:
//   - a block takes one tile of up to kAttnTcTileTokens (16) consecutive tokens of a sequence
//     and up to 4 query heads of one KV group; warp w owns head w's 16 rows, so every K/V tile
//     loaded into shared memory serves 16 tokens x the group's heads;
//   - K/V tiles of 64 keys are copied with 16-byte cp.async, double-buffered (the next tile is
//     in flight while this one is used), through the block table; rows past the tile's last
//     position are zero-filled;
//   - S = Q K^T (Q rounded to f16 once, held in registers), scaled into the log2 domain, masked
//     (causality, sliding window) only on tiles that cross a row's limits, online softmax per
//     row (running max and sum in registers, the output rescaled per tile), P rounded to f16 and
//     O += P V with V fragments from ldmatrix.trans; out = O / l at the end.
// Blocks run the longest contexts (the last tiles) first, which shortens the causal tail.
//
// Numerics: q and p are rounded to f16 (relative 2^-11 each), K and V are the cache's f16
// values, every sum is f32 in the tensor cores' order and exp2 is ex2.approx; measured rel. L2
// against the CPU reference ~1e-3 (tests/gpu/attention_tc_test.cpp). Each row's arithmetic is
// its own (key tiles past a row's limits add exact zeros), but it is not the batch-invariant
// kernel's (another summation order, f16 q and p): prefill
// rows computed here are NOT bit-identical to decode rows, which is why this is opt-in.
//
// Handles f16 caches with head_dim 64 or 128 (attention_tc_supports); other shapes fall back to
// the batch-invariant kernel.
#pragma once

#include "backends/cuda/kernels.h"
