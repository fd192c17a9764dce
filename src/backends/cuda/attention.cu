// Paged attention kernels: the chunk kernel (fused and split modes) and the split-mode merge.
// attention.h states the arithmetic every path shares; each step is one function used by both
// modes, so the modes cannot drift apart.
#include <cmath>

#include "backends/cuda/async_copy.cuh"
#include "backends/cuda/attention.h"
#include "backends/cuda/attention_mma.h"
#include "backends/cuda/attention_tiled.h"
#include "backends/cuda/attention_chunk.cuh"
#include "backends/cuda/common.cuh"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/launch.cuh"

namespace tern::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
using attn::C;

struct Shape {
  int group, hpb, n_slices, nq_alloc;
  int seg_lanes;  // lanes per key in the score phase: the power of two >= head_dim / kSeg
};

__host__ __device__ inline Shape shape_of(const AttentionArgs& a) {
  Shape s;
  s.group = a.n_heads / a.n_kv_heads;
  s.hpb = s.group < kAttnMaxHeadsPerBlock ? s.group : kAttnMaxHeadsPerBlock;
  s.n_slices = (s.group + s.hpb - 1) / s.hpb;
  s.nq_alloc = a.plan.max_tile_tokens * s.hpb;
  s.seg_lanes = attn::seg_lanes_of(a.head_dim);
  return s;
}

// Shared memory of one block, in bytes from the start: floats, then ints, then the K/V stages.
struct SmemLayout {
  size_t q, span_a, p, stats, tok, kv, total;
};
__host__ __device__ inline SmemLayout smem_layout(const AttentionArgs& a, const Shape& sh) {
  const size_t nq = sh.nq_alloc, hd = a.head_dim, elem = a.kv_dtype == DType::F16 ? 2 : 4;
  SmemLayout l;
  l.q = 0;                                      // [nq][hd] queries
  l.span_a = l.q + 4 * nq * hd;                 // [nq][hd] running A of the current span
  l.p = l.span_a + 4 * nq * hd;                 // [nq][C] scores, then probabilities
  l.stats = l.p + 4 * nq * C;                   // [8][nq] chunk / span / total statistics
  l.tok = l.stats + 4 * 8 * nq;                 // [2][kAttnTileTokens] positions, first positions
  l.kv = (l.tok + 4 * 2 * kAttnTileTokens + 15) / 16 * 16;  // [stages][K, V][C][hd]
  l.total = l.kv + static_cast<size_t>(a.kv_stages) * 2 * C * hd * elem;
  return l;
}

// Starts the copy of K and V rows j0 .. j0 + n_rows - 1 into k_dst / v_dst ([C][hd] each).
// 16-byte cp.async when every row is 16-byte aligned (the pool's layout), else plain loads.
// Each 16-byte piece looks its row up in the block table: a dependent global load per cp.async,
// which the asm's memory clobber keeps in order (the row_copy variant below avoids it).
template <typename T>
__device__ __forceinline__ void issue_chunk(const AttentionArgs& a, const int32_t* blocks, int64_t kv_col, int j0,
                                            int n_rows, bool vec, T* k_dst, T* v_dst) {
  const int hd = a.head_dim;
  const T* k_src = static_cast<const T*>(a.k_cache);
  const T* v_src = static_cast<const T*>(a.v_cache);
  if (vec) {
    constexpr int kPer16 = 16 / sizeof(T);
    const int per_row = hd / kPer16, n = n_rows * per_row;
    for (int i = threadIdx.x; i < 2 * n; i += kThreads) {
      const bool is_v = i >= n;
      const int r = is_v ? i - n : i;
      const int jj = r / per_row, e0 = (r - jj * per_row) * kPer16;
      const int j = j0 + jj;
      const int64_t slot = int64_t{blocks[j / a.block_tokens]} * a.block_tokens + j % a.block_tokens;
      const T* src = is_v ? v_src + slot * a.v_cache_stride : k_src + slot * a.k_cache_stride;
      cp_async16((is_v ? v_dst : k_dst) + jj * hd + e0, src + kv_col + e0);
    }
  } else {
    for (int i = threadIdx.x; i < n_rows * hd; i += kThreads) {
      const int jj = i / hd, d = i - jj * hd;
      const int j = j0 + jj;
      const int64_t slot = int64_t{blocks[j / a.block_tokens]} * a.block_tokens + j % a.block_tokens;
      k_dst[i] = k_src[slot * a.k_cache_stride + kv_col + d];
      v_dst[i] = v_src[slot * a.v_cache_stride + kv_col + d];
    }
  }
}

// The same copy (vec layouts only) with one block-table lookup per row, all in flight at once:
// lane k of warp w looks up row w + kWarps * k, then the warp copies its rows one after another,
// K and V pieces spread over the lanes, each row's slot taken by shuffle.
// AttentionArgs::row_copy (TERN_CUDA_ATTN_ROW_COPY=1) selects it.
template <typename T>
__device__ __forceinline__ void issue_chunk_rows(const AttentionArgs& a, const int32_t* blocks, int64_t kv_col, int j0,
                                                 int n_rows, T* k_dst, T* v_dst) {
  constexpr int kPer16 = 16 / sizeof(T);
  constexpr int kRowsPerWarp = C / kWarps;
  static_assert(kRowsPerWarp <= 32, "a lane looks up one row");
  const int hd = a.head_dim, per_row = hd / kPer16;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const T* k_src = static_cast<const T*>(a.k_cache);
  const T* v_src = static_cast<const T*>(a.v_cache);
  int my_slot = 0;
  if (lane < kRowsPerWarp && warp + kWarps * lane < n_rows) {
    const int j = j0 + warp + kWarps * lane;
    my_slot = blocks[j / a.block_tokens] * a.block_tokens + j % a.block_tokens;
  }
  for (int k = 0; k < kRowsPerWarp; ++k) {
    const int slot = __shfl_sync(kFullMask, my_slot, k);
    const int jj = warp + kWarps * k;
    if (jj >= n_rows) break;  // the same for every lane of the warp
    for (int piece = lane; piece < 2 * per_row; piece += 32) {
      const bool is_v = piece >= per_row;
      const int e0 = (is_v ? piece - per_row : piece) * kPer16;
      const T* src = is_v ? v_src + int64_t{slot} * a.v_cache_stride : k_src + int64_t{slot} * a.k_cache_stride;
      cp_async16((is_v ? v_dst : k_dst) + jj * hd + e0, src + kv_col + e0);
    }
  }
}

// Spans [s_begin, s_end) of one tile for the head slice of blockIdx.y (attention.h).
template <typename T, int kStages>
__device__ __forceinline__ void attend_tile(const AttentionArgs& a, const Shape& sh, int tile, int s_begin, int s_end,
                                            unsigned char* sm) {
  const DevicePlan& P = a.plan;
  const int hd = a.head_dim;
  const int g = blockIdx.y / sh.n_slices, slice = blockIdx.y % sh.n_slices;
  const int h0 = g * sh.group + slice * sh.hpb;
  const int nh = min(sh.hpb, sh.group - slice * sh.hpb);
  const int t0 = P.tile_token_begin[tile], nt = P.tile_n_tokens[tile];
  const int nq = nt * nh;

  const SmemLayout L = smem_layout(a, sh);
  float* q_s = reinterpret_cast<float*>(sm + L.q);
  float* span_a = reinterpret_cast<float*>(sm + L.span_a);
  float* p_s = reinterpret_cast<float*>(sm + L.p);
  float* stats = reinterpret_cast<float*>(sm + L.stats);
  const int na = sh.nq_alloc;
  float* m_c = stats;               // chunk max (then: span non-empty flag)
  float* l_c = stats + na;          // chunk sum
  float* span_m = stats + 2 * na;   // running span max
  float* span_l = stats + 3 * na;   // running span sum
  float* tot_m = stats + 4 * na;    // fused: running total max
  float* tot_l = stats + 5 * na;    // fused: running total sum
  float* sa_s = stats + 6 * na;     // fold scales of the current fold
  float* sb_s = stats + 7 * na;
  int* tok_pos = reinterpret_cast<int*>(sm + L.tok);
  int* tok_first = tok_pos + kAttnTileTokens;
  T* kv_s = reinterpret_cast<T*>(sm + L.kv);

  const int tid = threadIdx.x;
  const bool fused = !a.split;
  auto out_at = [&](int qi, int d) -> float& {
    return a.out[int64_t{t0 + qi / nh} * a.out_stride + int64_t{h0 + qi % nh} * hd + d];
  };
  if (tid < nt) {
    const int pos = P.positions[t0 + tid];
    tok_pos[tid] = pos;
    tok_first[tid] = attn::first_position(a, pos);
  }
  for (int i = tid; i < nq * hd; i += kThreads) {
    const int qi = i / hd, d = i - qi * hd;
    q_s[i] = a.q[int64_t{t0 + qi / nh} * a.q_stride + int64_t{h0 + qi % nh} * hd + d];
    span_a[i] = 0.0f;
    if (fused) out_at(qi, d) = 0.0f;  // the running total A lives in the output rows
  }
  for (int i = tid; i < nq; i += kThreads) {
    span_m[i] = -INFINITY;
    span_l[i] = 0.0f;
    tot_m[i] = -INFINITY;
    tot_l[i] = 0.0f;
  }
  __syncthreads();
  int max_pos = 0;
  for (int tt = 0; tt < nt; ++tt) max_pos = max(max_pos, tok_pos[tt]);
  const int seq = P.seq_index[t0];
  const int32_t* blocks = P.block_ids + P.block_offsets[seq];
  const int64_t kv_col = int64_t{g} * hd;
  const bool vec = a.k_cache_stride % (16 / sizeof(T)) == 0 && a.v_cache_stride % (16 / sizeof(T)) == 0 &&
                   reinterpret_cast<uintptr_t>(a.k_cache) % 16 == 0 && reinterpret_cast<uintptr_t>(a.v_cache) % 16 == 0;

  const int c_begin = s_begin * kAttnSpanChunks;
  const int c_end = min(s_end * kAttnSpanChunks, max_pos / C + 1);
  const int n_iter = c_end - c_begin;
  auto stage_k = [&](int i) { return kv_s + (i % kStages) * 2 * C * hd; };
  auto issue = [&](int i) {  // always commits a group, so the wait count below stays uniform
    if (i < n_iter) {
      const int j0 = (c_begin + i) * C;
      T* k_dst = stage_k(i);
      const int n_rows = min(C, max_pos + 1 - j0);
      if (vec && a.row_copy) {
        issue_chunk_rows<T>(a, blocks, kv_col, j0, n_rows, k_dst, k_dst + C * hd);
      } else {
        issue_chunk<T>(a, blocks, kv_col, j0, n_rows, vec, k_dst, k_dst + C * hd);
      }
    }
    cp_async_commit();
  };
  for (int i = 0; i + 1 < kStages; ++i) issue(i);

  const attn::Queries Q{nq, nh, hd, sh.seg_lanes, q_s, p_s, m_c, l_c, span_m, span_l, span_a, sa_s, sb_s, tok_pos, tok_first};
  for (int i = 0; i < n_iter; ++i) {
    issue(i + kStages - 1);
    cp_async_wait<kStages - 1>();
    __syncthreads();  // chunk i has landed for every thread
    const int c = c_begin + i, j0 = c * C;
    const T* k_s = stage_k(i);
    const T* v_s = k_s + C * hd;
    attn::chunk_scores<kThreads>(Q, k_s, j0, a.scale, a.softcap);
    __syncthreads();
    attn::chunk_softmax<kWarps>(Q);
    __syncthreads();
    attn::chunk_values<kThreads, 4>(Q, v_s, j0);
    if ((c + 1) % kAttnSpanChunks == 0 || i + 1 == n_iter) {  // the span is complete
      const int span = c / kAttnSpanChunks;
      __syncthreads();
      if (!fused) {
        attn::store_span_partial<kThreads>(Q, a, t0, h0, span);
      } else {
        for (int qi = tid; qi < nq; qi += kThreads) attn::end_span_stats(qi, span_m, span_l, tot_m, tot_l, sa_s, sb_s, m_c);
        __syncthreads();
        for (int o = tid; o < nq * hd; o += kThreads) {
          const int qi = o / hd, d = o - qi * hd;
          if (m_c[qi] != 0.0f) out_at(qi, d) = attn::fold_acc(out_at(qi, d), span_a[o], attn::FoldScales{sa_s[qi], sb_s[qi]});
          span_a[o] = 0.0f;
        }
      }
    }
    __syncthreads();  // stage i, p_s and the statistics are free for the next chunk
  }
  if (!fused) return;
  for (int o = tid; o < nq * hd; o += kThreads) {
    const int qi = o / hd, d = o - qi * hd;
    out_at(qi, d) = __fdiv_rn(out_at(qi, d), tot_l[qi]);
  }
}

// Fused mode: block x = one tile, all its spans. Split mode: block x = one (tile, span) item.
template <typename T, int kStages>
__global__ void __launch_bounds__(kThreads) attention_chunk_kernel(AttentionArgs a) {
  pdl_enter();
  extern __shared__ __align__(16) unsigned char sm[];
  const Shape sh = shape_of(a);
  const DevicePlan& P = a.plan;
  if (!a.split) {
    attend_tile<T, kStages>(a, sh, blockIdx.x, 0, P.tile_n_spans[blockIdx.x], sm);
    return;
  }
  const int span = P.split_span[blockIdx.x];
  attend_tile<T, kStages>(a, sh, P.split_tile[blockIdx.x], span, span + 1, sm);
}

// Split mode: folds a (token, head)'s span partials in span order. One block per (token, head).
__global__ void __launch_bounds__(kThreads) attention_merge_kernel(AttentionArgs a) {
  pdl_enter();
  constexpr int kPerThread = kAttnMaxHeadDim / kThreads;
  const int t = blockIdx.x, h = blockIdx.y, hd = a.head_dim;
  const DevicePlan& P = a.plan;
  const int n_spans = P.positions[t] / kAttnSpanTokens + 1;
  const int64_t first = int64_t{P.token_partial_begin[t]};
  float M = -INFINITY, L = 0.0f;
  float A[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) A[k] = 0.0f;
  // Loads a batch of partials (independent, all in flight together), then folds them in order.
  constexpr int kBatch = 16;
  for (int s0 = 0; s0 < n_spans; s0 += kBatch) {
    float m[kBatch], l[kBatch], av[kBatch][kPerThread];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      m[b] = -INFINITY;
      if (s0 + b < n_spans) {
        const float* rec = a.partials + ((first + s0 + b) * a.n_heads + h) * (hd + 2);
        m[b] = rec[0];
        l[b] = rec[1];
#pragma unroll
        for (int k = 0; k < kPerThread; ++k) {
          const int d = threadIdx.x + k * kThreads;
          av[b][k] = d < hd ? rec[2 + d] : 0.0f;
        }
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (m[b] == -INFINITY) continue;
      const attn::FoldScales f = attn::fold_stats(M, L, m[b], l[b]);
#pragma unroll
      for (int k = 0; k < kPerThread; ++k) A[k] = attn::fold_acc(A[k], av[b][k], f);
    }
  }
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int d = threadIdx.x + k * kThreads;
    if (d < hd) a.out[t * a.out_stride + int64_t{h} * hd + d] = __fdiv_rn(A[k], L);
  }
}

template <typename T>
void launch_chunk(const AttentionArgs& a, const LaunchEnv& env, dim3 grid, size_t smem) {
  if (a.kv_stages >= 2) {
    launch_kernel(env, attention_chunk_kernel<T, 2>, grid, kThreads, smem, a);
  } else {
    launch_kernel(env, attention_chunk_kernel<T, 1>, grid, kThreads, smem, a);
  }
}

}  // namespace

size_t attention_partials_bytes(const AttentionArgs& a) {
  const size_t per_slot = a.chunk_split > 0 ? kAttnSpanChunks : 1;  // chunk split: a record per chunk
  return sizeof(float) * per_slot * static_cast<size_t>(a.plan.n_partials) * a.n_heads * (a.head_dim + 2);
}

size_t attention_smem_bytes(const AttentionArgs& a) { return smem_layout(a, shape_of(a)).total; }

void launch_attention(const AttentionArgs& a, const LaunchEnv& env) {
  if (a.plan.n_tokens == 0) return;
  if (a.tc == kAttnMmaFused || a.tc == kAttnMmaSplit) {
    launch_attention_mma(a, env);
    return;
  }
  if (a.tc) {
    launch_attention_tc(a, env);
    return;
  }
  if (a.tiled > 0) {
    launch_attention_tiled(a, env);
    return;
  }
  if (a.split && a.span_kernel) {
    launch_attention_span(a, env);
    return;
  }
  const Shape sh = shape_of(a);
  const int64_t blocks_x = a.split ? a.plan.n_split_items : a.plan.n_tiles;
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(a.n_kv_heads * sh.n_slices));
  const size_t smem = attention_smem_bytes(a);
  if (a.kv_dtype == DType::F16) {
    launch_chunk<__half>(a, env, grid, smem);
  } else {
    launch_chunk<float>(a, env, grid, smem);
  }
  if (a.split) launch_attention_merge(a, env);
}

void launch_attention_merge(const AttentionArgs& a, const LaunchEnv& env) {
  launch_kernel(env, attention_merge_kernel, dim3(static_cast<unsigned>(a.plan.n_tokens), static_cast<unsigned>(a.n_heads)),
                kThreads, 0, a);
}

void init_attention(int max_smem_bytes) {
  init_attention_span(max_smem_bytes);
  TERN_CUDA_CHECK(cudaFuncSetAttribute(attention_chunk_kernel<__half, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       max_smem_bytes));
  TERN_CUDA_CHECK(cudaFuncSetAttribute(attention_chunk_kernel<__half, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       max_smem_bytes));
  TERN_CUDA_CHECK(cudaFuncSetAttribute(attention_chunk_kernel<float, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       max_smem_bytes));
  TERN_CUDA_CHECK(cudaFuncSetAttribute(attention_chunk_kernel<float, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       max_smem_bytes));
}

}  // namespace tern::cuda
