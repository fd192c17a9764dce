// Register-tiled attention for large steps (prefill chunks, long appends) on attention.h's
// contract, bit for bit: the same float sequence per query, computed like a SIMT GEMM instead of
// a lane per 8-dimension segment.
//
// Why: attention.h's kernels give each (query, key) pair 16 lanes (one 8-dimension segment each)
// and a 4-step shuffle tree, and load q and K from shared memory for every multiply-add: a 4096
// token prefill of the Llama-3-8B shape ran at 3.1 TFLOP/s (H100, bench/RESULTS.md), 5% of the
// f32 rate, and long appends to cached contexts were bound by it. Nothing in the contract asks
// for that mapping: each pair's dot is a fixed tree over fixed segment chains, which one thread
// can form as well as 16 lanes.
//
// Work: a block per (sub-tile of up to 64 / heads query rows' tokens, KV head, head slice; split
// mode: and a group of spans). Sub-tiles cut the plan's tensor-core tiles (up to 128 consecutive
// tokens of one sequence, DevicePlan::tc_tile_*). 256 threads; rows r = token * nh + head as in
// attention.h (at most 64). Per 64-key chunk of the context:
//   K and V (f16) arrive by cp.async (two chunks in flight) and K is widened to f32 in shared
//   memory once; a thread forms 4 rows x 4 keys: per segment the 8-term fmaf chain from 0 for
//   each of its 16 pairs, then folds the segment into the pair's pending tree (post-order: the
//   pairwise tree over segments in order is exactly the butterfly xor 1, 2, 4, 8 of attention.h,
//   since __fadd_rn commutes); s = dot * scale (softcap), -inf where masked;
//   the softmax is attention_chunk.cuh's chunk_softmax (a warp per row, the same function);
//   V is widened into the same buffer and a thread forms 4 rows x 8 dimensions (4 at head_dim
//   64): fmaf over the row's valid positions in order from 0 (a per-row predicate where the
//   chunk is not valid for every row of the block), folded into the span A with fold_acc.
// At a span's end the span partial folds into the running total (fused) or is stored as the
// split mode's record (attention.cu's layout: m, l, then A) for attention.cu's merge kernel.
// f16 caches at head_dim 64 or 128 with 16-byte aligned rows (attention_tiled_supports); the
// rest keeps attention.h's kernels. Tests: GpuAttention.Tiled* (bit identity with the chunk
// kernel's fused mode and the split span kernels).
#pragma once

#include "backends/cuda/kernels.h"

namespace tern::cuda {

// Whether attention `a` (cache, head_dim, alignment) can run on the tiled kernel.
bool attention_tiled_supports(const AttentionArgs& a);
// Fills a.tiled / a.tiled_spans for a step of the plan a.plan describes on n_sm SMs, given the
// step's largest position (host side). Split mode (a.split = 1, records and the merge kernel)
// when the fused blocks would not fill every SM and the records fit max_partials_bytes.
void plan_attention_tiled(AttentionArgs& a, int max_position, int n_sm, size_t max_partials_bytes);
// Launches the tiled kernel (and in split mode the merge). Precondition: a.tiled set by
// plan_attention_tiled; split mode: a.partials sized by attention_partials_bytes.
void launch_attention_tiled(const AttentionArgs& a, const LaunchEnv& env);
// Raises the kernels' shared-memory limits; false if they do not fit max_smem_bytes.
bool init_attention_tiled(int max_smem_bytes);

// attention.cu's split-mode merge (a block per (token, head) folding its span records in order).
void launch_attention_merge(const AttentionArgs& a, const LaunchEnv& env);

}  // namespace tern::cuda
