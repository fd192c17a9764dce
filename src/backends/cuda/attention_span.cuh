// Shared-memory layout and launch shape of the span decode kernels (attention_span.cu: one chunk
// per step; attention_span_pair.cu: two chunks per step). Internal to those two files.
#pragma once

#include <cstddef>

#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"

namespace tern::cuda {

constexpr int kSpanThreads = 256;
constexpr int kSpanMaxStages = 4;
static_assert(kSpanMaxStages == kAttnSpanChunks, "4 stages hold a whole span");

struct SpanShape {
  int group, hpb, n_slices, nq_alloc;
};
__host__ __device__ inline SpanShape span_shape_of(const AttentionArgs& a) {
  SpanShape s;
  s.group = a.n_heads / a.n_kv_heads;
  s.hpb = a.heads_per_block;
  s.n_slices = (s.group + s.hpb - 1) / s.hpb;
  s.nq_alloc = a.plan.max_tile_tokens * s.hpb;
  return s;
}

// Shared memory of one block, in bytes: floats, then ints, then the K/V stages. A kernel that
// computes chunks_per_step chunks between two barriers keeps that many chunks' scores and
// statistics (per chunk: max, sum and the two fold scales; plus the span's max and sum).
struct SpanSmem {
  size_t q, span_a, p, stats, tok, slots, kv, total;
};
__host__ __device__ inline SpanSmem span_smem(const AttentionArgs& a, const SpanShape& sh, int stages,
                                              int chunks_per_step = 1) {
  const size_t nq = sh.nq_alloc, hd = a.head_dim, elem = a.kv_dtype == DType::F16 ? 2 : 4;
  const size_t cps = chunks_per_step;
  SpanSmem l;
  l.q = 0;                                           // [nq][hd] queries
  l.span_a = l.q + 4 * nq * hd;                      // [nq][hd] running span A
  l.p = l.span_a + 4 * nq * hd;                      // [nq][cps * C] scores, then probabilities
  l.stats = l.p + 4 * nq * cps * kAttnChunkTokens;   // [4 cps + 2][nq] statistics, fold scales
  l.tok = l.stats + 4 * (4 * cps + 2) * nq;          // [2][kAttnTileTokens] positions, first positions
  l.slots = l.tok + 4 * 2 * kAttnTileTokens;         // [kAttnSpanTokens] cache slot of each span row
  l.kv = (l.slots + 4 * kAttnSpanTokens + 15) / 16 * 16;  // [stages][K, V][C][hd]
  l.total = l.kv + static_cast<size_t>(stages) * 2 * kAttnChunkTokens * hd * elem;
  return l;
}

// The two-chunk span kernel (attention_span_pair.cu); a.kv_stages in 2..4.
void launch_attention_span_pair(const AttentionArgs& a, const LaunchEnv& env, dim3 grid, size_t smem);
void init_attention_span_pair(int max_smem_bytes);

}  // namespace tern::cuda
