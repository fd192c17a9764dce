// Paged causal attention on the device, one kernel for prefill, decode, speculative verify and
// mixed batches.
//
// Work unit: a tile of up to kAttnTileTokens consecutive plan tokens of one sequence, one KV head
// and up to kAttnMaxHeadsPerBlock of its query heads (larger GQA groups take several slices).
// The context is cut at absolute positions into chunks of kAttnChunkTokens (64); a block loads a
// chunk's K and V rows (through the sequence's block table) into shared memory once and serves
// every query of its tile from them.
//
// Per query and chunk, the partial (m, l, a) is
//   s_j = cap? * (sum_d q_d k_jd, fmaf in d order) * scale     for valid j (window, causality)
//   m = max_j s_j;  p_j = __expf(s_j - m);  l = butterfly sum of (p_j + p_{j+32});
//   a_d = sum_j p_j v_jd, fmaf in j order over the query's valid j
// and the partials of a query are folded in chunk order, starting from (-inf, 0, 0):
//   M' = max(M, m);  sA = __expf(M - M');  sB = __expf(m - M');
//   L' = L sA + l sB;  A' = A sA + a sB;      out = A / L
// skipping chunks with no valid position. A query's result depends on its own position, its
// sequence's KV and nothing else: not on the tile it shares, the number of tokens in the step or
// the mode below, so attention is batch-invariant bit for bit.
//
// Two modes compute the same thing:
//   fused: one block per (tile, head slice) walks all chunks and folds in shared memory
//          (prefill: many tiles keep the GPU busy);
//   split: one block per (tile, chunk, head slice) writes each partial to global memory and a
//          merge kernel folds them (decode: few tokens, long contexts; flash-decoding).
#pragma once

#include "backends/cuda/kernels.h"

namespace tern::cuda {

constexpr int kAttnMaxHeadsPerBlock = 4;

}  // namespace tern::cuda
