// Tensor-core prefill attention (opt-in, with the tensor-core prefill of matmul_tc.h:
// CudaBackendOptions::tc_prefill / TERN_CUDA_TC_PREFILL=1; CudaBackendOptions::tc_attention or
// TERN_CUDA_TC_ATTENTION=0 keeps attention on the batch-invariant kernel of attention.h).
//
// FlashAttention-2 style, on mma.sync m16n8k16 (f16 inputs, f32 accumulation), causal, over the
// paged KV cache (block tables), GQA-aware:
//   - a block takes 128 query rows, each a (token, head) pair: the heads of one KV group (up to
//     8; larger groups are cut into even slices) times as many consecutive tokens of a sequence
//     as fill the rows (group 4: 32 tokens; group 1: 128; group 3: 42 tokens, 126 rows), heads
//     fastest. The plan cuts tiles of up to kAttnTcTileTokens (128) tokens of one sequence and
//     each tile is split into such sub-tiles (the blocks past a short tile's end exit at once).
//     So every K/V tile loaded into shared memory serves 128 rows, and a 30k-token context is
//     streamed once per 128 rows instead of once per 64 (the previous kernel's 16 tokens x 4
//     heads);
//   - 4 warps of 32 rows (two mma row tiles): each K or V fragment read from shared memory feeds
//     two mmas. Q is rounded to f16 once into shared memory and read back with ldmatrix (holding
//     it in registers next to 32 rows' accumulators would spill);
//   - K/V tiles of 64 keys are copied with 16-byte cp.async, double-buffered (the next tile is
//     in flight while this one is used, one barrier per tile), through the block table: each
//     thread looks up the block of each of its rows once per tile (a shift and a mask for
//     power-of-two block sizes), all lookups independent; rows past the block's last position
//     are zero-filled;
//   - S = Q K^T, scaled into the log2 domain, masked (causality, sliding window) only on tiles
//     that cross a row's limits, online softmax per row (running max and sum in registers, the
//     output rescaled per tile), P rounded to f16 and O += P V with V fragments from
//     ldmatrix.trans; out = O / l at the end. A warp whose rows all end before a tile (the
//     causal diagonal) or start after it (a sliding window) skips it: its scores there would be
//     all masked, adding exact zeros.
// Blocks run the longest contexts (the last tiles and sub-tiles) first, which shortens the causal
// tail. Other block shapes (8 warps of 16 rows, 3 stages, 256 rows, the previous 64 rows) stay
// selectable for A/B timing: TERN_CUDA_ATTN_TC_VARIANT=0..5 (AttentionArgs::tc_variant,
// attention_tc.cu kVariants). Each row's arithmetic depends only on the score chunk (32 keys for
// 32-row warps at head_dim 128, else 64), not on the block or warp that computes it.
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

namespace tern::cuda {

// Block shapes launch_attention_tc can take (AttentionArgs::tc_variant 0 .. n-1, 0 the default).
int attention_tc_variants();

}  // namespace tern::cuda
