// Batch-invariant attention on the tensor cores (opt-in: CudaBackendOptions::attention_mma,
// TERN_CUDA_ATTN_MMA=1). One contract for every step (prefill, decode, speculative verify, mixed
// batches), like attention.h's, with another arithmetic: the products run on mma.sync m16n8k16
// (f16 x f16, f32 accumulation) at close to f32 accuracy, so prefill at long contexts stops
// being bound by the f32 multiply-adds of attention.h's kernels.
//
// The arithmetic of one query row (a (token, head) pair) at position p, over its keys
// [first(p), p] (causal, sliding window), positions cut into chunks of 64 (kAttnChunkTokens) and
// spans of 4 chunks (kAttnSpanTokens) at absolute positions:
//   q = q_hi + q_lo, each rounded to f16 (q_hi = f16(q), q_lo = f16(q - q_hi));
//   per chunk of 64 keys: S = [q_hi K^T, then + q_lo K^T] per head_dim slice of 16, in slice
//     order, accumulated in the mma's f32 registers from 0 (per element: mma(hi), mma(lo) per
//     slice); scaled into the log2 domain (s * scale * log2 e inside the exponent; softcap:
//     softcap * tanh(s * scale / softcap) * log2 e), masked to -inf outside [first(p), p];
//   online softmax within a span, from (m, l_lane, O) = (-inf, 0, 0): m' = max(m, max_j s_j);
//     alpha = 1 if m' == m else ex2(m - m'); p_j = ex2(s_j - m'); l_lane = l_lane * alpha +
//     the lane's 16 p_j (the mma C layout: a row's keys sit in the 4 lanes of a quad, lane t
//     holding keys 8n + 2t, 8n + 2t + 1, summed in n order); O = O * alpha, then per 16 keys
//     O += P_hi V, then O += P_lo V (P split as q is);
//   the span partial: (m, l = quad sum of l_lane (xor 1, then xor 2), O);
//   the result folds the span partials in span order from (-inf, 0, 0), skipping empty spans
//     (m = -inf): M' = max(M, m); a = 1 if M' == M else ex2(M - M'); b likewise for m;
//     L = fma(l, b, L * a); A = fma(O, b, A * a); out = A / L (round to nearest).
// A row's result depends only on its q, its position and its sequence's K/V: the mma computes
// each output element from its own A row and B column, fully masked chunks are exact no-ops
// (alpha = 1, p = 0), and the chunk and span cuts are absolute. So rows are bit-identical
// whatever the step, tile, block, warp or mode computes them (tests/gpu/attention_mma_test.cpp).
//
// Two modes, the same bits (AttentionArgs::tc):
//   kAttnMmaFused (prefill, large steps): the tensor-core prefill kernel's tiling (128-token
//     tiles of one sequence cut into blocks of 64 query rows, 4 warps of 16 rows, K/V tiles of
//     64 keys double-buffered through shared memory); each warp folds its rows' span partials
//     into the result as it walks;
//   kAttnMmaSplit (decode, small steps): a block per ((tile of <= 8 tokens, span), KV head,
//     slice of <= 4 heads of the group): up to 32 rows shared by 4 warps. Warp c forms chunk c's
//     scores, maxima and P (the chunks are independent until the softmax; the running maxima
//     follow from the chunk maxima in chunk order), then every warp accumulates P V over the
//     chunks in order for its quarter of head_dim; the span partials go to
//     AttentionArgs::partials (attention.cu's record layout: m, l, then O) and a merge kernel
//     per (token, head) folds them. AttentionArgs::tc_variant: V tiles in flight (4: the whole
//     span, when the grid is one wave; 2: two blocks per SM; attention_mma_v_stages).
// Numerics: q and p carry ~22 bits (hi + lo), K and V are the cache's f16 values, sums are the
// tensor cores' f32 (products exact, accumulation in hardware order), exp2 is ex2.approx:
// close to the f32 kernels (tests: rel. L2 <= 1e-5 against the CPU reference), not their bits.
// f16 caches with head_dim 64 or 128 (attention_mma_supports); other shapes keep attention.h's
// kernels for every step, so each model stays on one contract. |q| must stay below 65504 (f16's
// range): q_hi would overflow to inf.
#pragma once

#include "backends/cuda/kernels.h"

namespace tern::cuda {

// AttentionArgs::tc values (1 is the opt-in tensor-core prefill kernel, attention_tc.h).
constexpr int kAttnMmaFused = 2;
constexpr int kAttnMmaSplit = 3;

// Whether the contract above can run attention `a` (cache dtype, head_dim, alignment).
bool attention_mma_supports(const AttentionArgs& a);
// Whether attention `a` (a.plan filled) should run split rather than fused on n_sm SMs: split
// while the fused blocks would not cover every SM twice and the span partials stay under 256 MiB.
// Either gives the same bits.
bool attention_mma_split(const AttentionArgs& a, int n_sm);
// Split mode's AttentionArgs::tc_variant for attention `a` on n_sm SMs (the same bits either way).
int attention_mma_v_stages(const AttentionArgs& a, int n_sm);
// Launches a.tc's mode (split: the span blocks, then the merge; a.partials sized by
// attention_partials_bytes with chunk_split = 0).
void launch_attention_mma(const AttentionArgs& a, const LaunchEnv& env);
// Raises the kernels' shared-memory limits; false if they do not fit max_smem_bytes.
bool init_attention_mma(int max_smem_bytes);

}  // namespace tern::cuda
