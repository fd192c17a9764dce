// The register-tiled attention kernel (attention_tiled.h states what and why; attention.h the
// arithmetic it reproduces).
#include <algorithm>
#include <cmath>

#include "backends/cuda/async_copy.cuh"
#include "backends/cuda/attention.h"
#include "backends/cuda/attention_chunk.cuh"
#include "backends/cuda/attention_tc_tiles.cuh"
#include "backends/cuda/attention_tiled.h"
#include "backends/cuda/common.cuh"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/launch.cuh"

namespace tern::cuda {
namespace {

using attn::C;
using attn::kSeg;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRows = 64;    // query rows per block (tokens x heads of the slice)
constexpr int kRowsPT = 4;   // rows per thread: tq + 16 i
constexpr int kKeysPT = 4;   // keys per thread in the score step: tk + 16 k
constexpr int kGroups = 16;  // row groups (tq) and key / dimension groups (tk)
static_assert(kRows == kGroups * kRowsPT && C == kGroups * kKeysPT, "a 16 x 16 thread grid");
static_assert(kWarps * 2 == kGroups, "a warp covers two row groups");
static_assert(kRows <= kThreads, "a row's statistics per thread");

// Shared memory, in bytes from the start.
template <int kHd>
struct Layout {
  static constexpr int kPitch = kHd + 4;  // f32 rows: consecutive rows 16 bytes of banks apart
  static constexpr int q = 0;                                // [kRows][kPitch] f32 queries
  static constexpr int kv = q + 4 * kRows * kPitch;          // [C][kPitch] f32: K, then V
  static constexpr int tot_a = kv + 4 * C * kPitch;          // [kRows][kPitch] f32 running total A
  static constexpr int p = tot_a + 4 * kRows * kPitch;       // [kRows][C] scores, probabilities
  static constexpr int stats = p + 4 * kRows * C;            // [11][kRows]
  static constexpr int tok = stats + 4 * 11 * kRows;         // [2][kRows] positions, first positions
  static constexpr int stage = tok + 4 * 2 * kRows;          // [2][K, V][C][kHd] f16 stages
  static constexpr int total = stage + 2 * 2 * C * kHd * 2;
  static_assert(stage % 16 == 0 && kv % 16 == 0, "16-byte aligned buffers");
};

// Rows of 16 tokens x 4 heads of a KV group (64 / heads tokens of smaller groups; larger groups
// in balanced slices of at most 4 heads).
TERN_HOST_DEVICE inline TcTileMap tiled_map(const AttentionArgs& a) {
  return TcTileMap(a, kAttnMaxHeadsPerBlock, kRows);
}

struct Work {  // one block's rows and spans
  TcTileWork rows;
  int nq;
  int s_begin, s_end;
  bool split;
};

// Block (x, y)'s work: x counts span groups fastest, then the map's sub-tiles.
__device__ __forceinline__ bool block_work(const AttentionArgs& a, Work& w) {
  const int n_groups = a.tiled_groups, bx = static_cast<int>(blockIdx.x);
  const int sg = bx % n_groups;
  if (!tc_tile_work(tiled_map(a), a.plan, bx / n_groups, static_cast<int>(blockIdx.y), w.rows)) return false;
  w.nq = w.rows.nt * w.rows.nh;
  w.split = a.tiled_spans > 0;
  w.s_begin = w.split ? sg * a.tiled_spans : 0;
  w.s_end = w.split ? w.s_begin + a.tiled_spans : 1 << 30;  // clipped to the block's spans later
  return true;
}

// Starts the copy of K and V rows j0 .. j0 + n_rows - 1 of KV head column kv_col into stage
// (K rows [C][kHd], then V rows): 16-byte pieces, each looking its row up in the block table.
template <int kHd>
__device__ __forceinline__ void issue_chunk(const AttentionArgs& a, const int32_t* blocks, int64_t kv_col, int j0,
                                            int n_rows, __half* stage) {
  constexpr int kPerRow = kHd / 8;
  const __half* k_src = static_cast<const __half*>(a.k_cache);
  const __half* v_src = static_cast<const __half*>(a.v_cache);
  const int n = n_rows * kPerRow;
  for (int i = threadIdx.x; i < 2 * n; i += kThreads) {
    const bool is_v = i >= n;
    const int r = is_v ? i - n : i;
    const int jj = r / kPerRow, e0 = (r - jj * kPerRow) * 8;
    const int j = j0 + jj;
    const int64_t slot = int64_t{blocks[j / a.block_tokens]} * a.block_tokens + j % a.block_tokens;
    const __half* src = is_v ? v_src + slot * a.v_cache_stride : k_src + slot * a.k_cache_stride;
    cp_async16(stage + (is_v ? C * kHd : 0) + jj * kHd + e0, src + kv_col + e0);
  }
}

// Widens C rows of f16 (pitch kHd) into f32 rows of pitch kHd + 4.
template <int kHd>
__device__ __forceinline__ void widen(const __half* src, float* dst) {
  constexpr int kPieces = C * kHd / 8;
  for (int i = threadIdx.x; i < kPieces; i += kThreads) {
    const int row = i / (kHd / 8), e0 = (i - row * (kHd / 8)) * 8;
    float x[8];
    attn::load8(src + row * kHd + e0, x);
    float4* d = reinterpret_cast<float4*>(dst + row * Layout<kHd>::kPitch + e0);
    d[0] = make_float4(x[0], x[1], x[2], x[3]);
    d[1] = make_float4(x[4], x[5], x[6], x[7]);
  }
}

// Pending sums of the segment tree of one pair (post-order): slot l holds a finished subtree of
// 2^l segments waiting for its right sibling.
template <int kLevels>
struct Tree {
  float pend[kLevels + 1];
};

// Adds segment s's partial to the tree: it pairs with the pending left subtrees its index closes
// (s = ...0111: three of them), as the butterfly's levels would.
template <int kLevels, int kS>
__device__ __forceinline__ void tree_push(Tree<kLevels>& t, float v) {
  int level = 0;
#pragma unroll
  for (int l = 0; l < kLevels; ++l) {
    if (((kS >> l) & 1) == 0) break;
    v = __fadd_rn(t.pend[l], v);
    level = l + 1;
  }
  t.pend[level] = v;
}

// The score step of one chunk: thread (tq, tk) forms rows tq + 16 i against keys tk + 16 k.
template <int kHd, int kS>
__device__ __forceinline__ void score_segment(const float* q_s, const float* k_s, int tq, int tk,
                                              Tree<__builtin_ctz(kHd / kSeg)> (&tree)[kRowsPT][kKeysPT]) {
  constexpr int kP = Layout<kHd>::kPitch;
  float part[kRowsPT][kKeysPT];
#pragma unroll
  for (int i = 0; i < kRowsPT; ++i)
#pragma unroll
    for (int k = 0; k < kKeysPT; ++k) part[i][k] = 0.0f;
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // the segment's two halves of 4 dimensions, in d order
    float4 qv[kRowsPT], kv[kKeysPT];
#pragma unroll
    for (int i = 0; i < kRowsPT; ++i)
      qv[i] = *reinterpret_cast<const float4*>(q_s + (tq + kGroups * i) * kP + kS * kSeg + 4 * h);
#pragma unroll
    for (int k = 0; k < kKeysPT; ++k)
      kv[k] = *reinterpret_cast<const float4*>(k_s + (tk + kGroups * k) * kP + kS * kSeg + 4 * h);
#pragma unroll
    for (int i = 0; i < kRowsPT; ++i)
#pragma unroll
      for (int k = 0; k < kKeysPT; ++k) {
        part[i][k] = __fmaf_rn(qv[i].x, kv[k].x, part[i][k]);
        part[i][k] = __fmaf_rn(qv[i].y, kv[k].y, part[i][k]);
        part[i][k] = __fmaf_rn(qv[i].z, kv[k].z, part[i][k]);
        part[i][k] = __fmaf_rn(qv[i].w, kv[k].w, part[i][k]);
      }
  }
#pragma unroll
  for (int i = 0; i < kRowsPT; ++i)
#pragma unroll
    for (int k = 0; k < kKeysPT; ++k) tree_push<__builtin_ctz(kHd / kSeg), kS>(tree[i][k], part[i][k]);
}

template <int kHd, int kS = 0>
__device__ __forceinline__ void score_segments(const float* q_s, const float* k_s, int tq, int tk,
                                               Tree<__builtin_ctz(kHd / kSeg)> (&tree)[kRowsPT][kKeysPT]) {
  if constexpr (kS < kHd / kSeg) {
    score_segment<kHd, kS>(q_s, k_s, tq, tk, tree);
    score_segments<kHd, kS + 1>(q_s, k_s, tq, tk, tree);
  }
}

template <int kHd>
__device__ __forceinline__ void chunk_scores(const AttentionArgs& a, const Work& w, const float* q_s, const float* k_s,
                                             float* p_s, const int* tok_pos, const int* tok_first, int j0) {
  constexpr int kLevels = __builtin_ctz(kHd / kSeg);
  static_assert((1 << kLevels) * kSeg == kHd, "head_dim / 8 segments, a power of two");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int tq = warp * 2 + (lane >> 4), tk = lane & 15;
  Tree<kLevels> tree[kRowsPT][kKeysPT];
  score_segments<kHd>(q_s, k_s, tq, tk, tree);
#pragma unroll
  for (int i = 0; i < kRowsPT; ++i) {
    const int r = tq + kGroups * i;
    if (r >= w.nq) continue;
    const int tt = r / w.rows.nh;
    const int pos = tok_pos[tt], first = tok_first[tt];
#pragma unroll
    for (int k = 0; k < kKeysPT; ++k) {
      const int jj = tk + kGroups * k, j = j0 + jj;
      float s = -INFINITY;
      if (j <= pos && j >= first) {
        s = __fmul_rn(tree[i][k].pend[kLevels], a.scale);
        if (a.softcap > 0.0f) s = __fmul_rn(a.softcap, tanhf(__fdiv_rn(s, a.softcap)));
      }
      p_s[r * C + jj] = s;
    }
  }
}

// The values step of one chunk: thread (tq, tk) forms rows tq + 16 i, dimensions 4 tk + 64 h + e
// (h < kHd / 64), fmaf in position order over each row's valid positions, then folds them into
// its span A (registers) with the chunk's fold scales. `all_valid`: every position of the chunk
// is valid for every row of the block (no predicate).
template <int kHd>
__device__ __forceinline__ void chunk_values(const Work& w, const float* v_s, const float* p_s, const int* tok_pos,
                                             const int* tok_first, const float* m_c, const float* sa, const float* sb,
                                             int j0, int j_end, bool all_valid, float (&span_a)[kRowsPT][kHd / 16]) {
  constexpr int kP = Layout<kHd>::kPitch;
  constexpr int kH = kHd / 64;  // 16-byte column groups per thread
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int tq = warp * 2 + (lane >> 4), tk = lane & 15;
  float acc[kRowsPT][4 * kH];
#pragma unroll
  for (int i = 0; i < kRowsPT; ++i)
#pragma unroll
    for (int e = 0; e < 4 * kH; ++e) acc[i][e] = 0.0f;
  if (all_valid) {
#pragma unroll 2
    for (int jj = 0; jj < C; jj += 4) {
      float4 pv[kRowsPT];
#pragma unroll
      for (int i = 0; i < kRowsPT; ++i) pv[i] = *reinterpret_cast<const float4*>(p_s + (tq + kGroups * i) * C + jj);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        float4 v[kH];
#pragma unroll
        for (int h = 0; h < kH; ++h) v[h] = *reinterpret_cast<const float4*>(v_s + (jj + u) * kP + 4 * tk + 64 * h);
#pragma unroll
        for (int i = 0; i < kRowsPT; ++i) {
          const float p = u == 0 ? pv[i].x : u == 1 ? pv[i].y : u == 2 ? pv[i].z : pv[i].w;
#pragma unroll
          for (int h = 0; h < kH; ++h) {
            acc[i][4 * h + 0] = __fmaf_rn(p, v[h].x, acc[i][4 * h + 0]);
            acc[i][4 * h + 1] = __fmaf_rn(p, v[h].y, acc[i][4 * h + 1]);
            acc[i][4 * h + 2] = __fmaf_rn(p, v[h].z, acc[i][4 * h + 2]);
            acc[i][4 * h + 3] = __fmaf_rn(p, v[h].w, acc[i][4 * h + 3]);
          }
        }
      }
    }
  } else {
    int jb[kRowsPT], je[kRowsPT];
#pragma unroll
    for (int i = 0; i < kRowsPT; ++i) {
      const int r = tq + kGroups * i;
      jb[i] = C;
      je[i] = 0;
      if (r < w.nq) {
        const int tt = r / w.rows.nh;
        jb[i] = max(0, tok_first[tt] - j0);
        je[i] = min(C, tok_pos[tt] - j0 + 1);
      }
    }
    for (int jj = 0; jj < j_end; ++jj) {
      float v[kH][4];
#pragma unroll
      for (int h = 0; h < kH; ++h) {
        const float4 x = *reinterpret_cast<const float4*>(v_s + jj * kP + 4 * tk + 64 * h);
        v[h][0] = x.x, v[h][1] = x.y, v[h][2] = x.z, v[h][3] = x.w;
      }
#pragma unroll
      for (int i = 0; i < kRowsPT; ++i) {
        if (jj < jb[i] || jj >= je[i]) continue;
        const float p = p_s[(tq + kGroups * i) * C + jj];
#pragma unroll
        for (int h = 0; h < kH; ++h)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[i][4 * h + e] = __fmaf_rn(p, v[h][e], acc[i][4 * h + e]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kRowsPT; ++i) {
    const int r = tq + kGroups * i;
    if (r >= w.nq || m_c[r] == -INFINITY) continue;
    const attn::FoldScales f{sa[r], sb[r]};
#pragma unroll
    for (int e = 0; e < 4 * kH; ++e) span_a[i][e] = attn::fold_acc(span_a[i][e], acc[i][e], f);
  }
}

template <int kHd>
__global__ void __launch_bounds__(kThreads, 1) attention_tiled_kernel(AttentionArgs a) {
  using L = Layout<kHd>;
  constexpr int kP = L::kPitch;
  constexpr int kH = kHd / 64;
  pdl_enter();
  extern __shared__ __align__(16) unsigned char sm[];
  Work w;
  if (!block_work(a, w)) return;
  const int t0 = w.rows.t0, nt = w.rows.nt, nh = w.rows.nh, h0 = w.rows.h0;
  const DevicePlan& P = a.plan;
  float* q_s = reinterpret_cast<float*>(sm + L::q);
  float* kv_s = reinterpret_cast<float*>(sm + L::kv);
  float* tot_a = reinterpret_cast<float*>(sm + L::tot_a);
  float* p_s = reinterpret_cast<float*>(sm + L::p);
  float* st = reinterpret_cast<float*>(sm + L::stats);
  float *m_c = st, *l_c = st + kRows, *span_m = st + 2 * kRows, *span_l = st + 3 * kRows;
  float *sa = st + 4 * kRows, *sb = st + 5 * kRows, *tot_m = st + 6 * kRows, *tot_l = st + 7 * kRows;
  float *tsa = st + 8 * kRows, *tsb = st + 9 * kRows, *live = st + 10 * kRows;
  int* tok_pos = reinterpret_cast<int*>(sm + L::tok);
  int* tok_first = tok_pos + kRows;
  __half* stages = reinterpret_cast<__half*>(sm + L::stage);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int tq = warp * 2 + (lane >> 4), tk = lane & 15;

  if (tid < nt) {
    const int pos = P.positions[t0 + tid];
    tok_pos[tid] = pos;
    tok_first[tid] = attn::first_position(a, pos);
  }
  for (int i = tid; i < kRows * kHd; i += kThreads) {
    const int r = i / kHd, d = i - r * kHd;
    q_s[r * kP + d] = r < w.nq ? a.q[int64_t{t0 + r / nh} * a.q_stride + int64_t{h0 + r % nh} * kHd + d] : 0.0f;
    tot_a[r * kP + d] = 0.0f;
  }
  if (tid < kRows) {
    span_m[tid] = -INFINITY;
    span_l[tid] = 0.0f;
    tot_m[tid] = -INFINITY;
    tot_l[tid] = 0.0f;
  }
  __syncthreads();
  int max_pos = 0, min_pos = 1 << 30, min_first = 1 << 30, max_first = 0;
  for (int tt = 0; tt < nt; ++tt) {
    max_pos = max(max_pos, tok_pos[tt]);
    min_pos = min(min_pos, tok_pos[tt]);
    min_first = min(min_first, tok_first[tt]);
    max_first = max(max_first, tok_first[tt]);
  }
  const int n_spans = max_pos / kAttnSpanTokens + 1;
  const int s_begin = w.s_begin, s_end = min(w.s_end, n_spans);
  if (s_begin >= s_end) return;  // a span group past this block's context
  // Chunks no row of the block can see are no-ops of the contract: skipped.
  const int c_begin = max(s_begin * kAttnSpanChunks, min_first / C);
  const int c_end = min(s_end * kAttnSpanChunks, max_pos / C + 1);
  const int n_iter = max(0, c_end - c_begin);
  const int32_t* blocks = P.block_ids + P.block_offsets[P.seq_index[t0]];
  const int64_t kv_col = int64_t{w.rows.kv_head} * kHd;

  auto stage_of = [&](int i) { return stages + (i & 1) * 2 * C * kHd; };
  auto issue = [&](int i) {  // always commits a group, so the wait count stays uniform
    if (i < n_iter) {
      const int j0 = (c_begin + i) * C;
      issue_chunk<kHd>(a, blocks, kv_col, j0, min(C, max_pos + 1 - j0), stage_of(i));
    }
    cp_async_commit();
  };
  // Split mode: a span's record, for every row whose token owns a slot there (attention.cu).
  auto store_records = [&](int span, const float (&span_a)[kRowsPT][kHd / 16]) {
#pragma unroll
    for (int i = 0; i < kRowsPT; ++i) {
      const int r = tq + kGroups * i;
      if (r >= w.nq) continue;
      const int tt = r / nh;
      if (span * kAttnSpanTokens > tok_pos[tt]) continue;
      float* rec = a.partials +
                   (int64_t{P.token_partial_begin[t0 + tt] + span} * a.n_heads + h0 + r % nh) * (kHd + 2);
      // Records are hd + 2 floats apart: 8-byte aligned at A, not 16.
#pragma unroll
      for (int h = 0; h < kH; ++h) {
        float2* dst = reinterpret_cast<float2*>(rec + 2 + 4 * tk + 64 * h);
        dst[0] = make_float2(span_a[i][4 * h], span_a[i][4 * h + 1]);
        dst[1] = make_float2(span_a[i][4 * h + 2], span_a[i][4 * h + 3]);
      }
      if (tk == 0) {
        rec[0] = span_m[r];
        rec[1] = span_l[r];
      }
    }
  };
  float span_a[kRowsPT][kHd / 16];
#pragma unroll
  for (int i = 0; i < kRowsPT; ++i)
#pragma unroll
    for (int e = 0; e < kHd / 16; ++e) span_a[i][e] = 0.0f;
  if (w.split) {  // spans of the group before the first visible chunk: empty records
    for (int span = s_begin; span < min(s_end, n_iter > 0 ? c_begin / kAttnSpanChunks : s_end); ++span)
      store_records(span, span_a);
  }

  issue(0);
  const attn::Queries Q{w.nq, nh, kHd, 0, q_s, p_s, m_c, l_c, span_m, span_l, nullptr, sa, sb, tok_pos, tok_first};
  for (int i = 0; i < n_iter; ++i) {
    issue(i + 1);
    cp_async_wait<1>();
    __syncthreads();  // chunk i has landed
    const int c = c_begin + i, j0 = c * C;
    const __half* stage = stage_of(i);
    widen<kHd>(stage, kv_s);
    __syncthreads();
    chunk_scores<kHd>(a, w, q_s, kv_s, p_s, tok_pos, tok_first, j0);
    __syncthreads();
    attn::chunk_softmax<kWarps>(Q);
    widen<kHd>(stage + C * kHd, kv_s);
    __syncthreads();
    const bool all_valid = min_pos >= j0 + C - 1 && max_first <= j0;
    const int j_end = min(C, max_pos - j0 + 1);
    chunk_values<kHd>(w, kv_s, p_s, tok_pos, tok_first, m_c, sa, sb, j0, j_end, all_valid, span_a);
    if ((c + 1) % kAttnSpanChunks == 0 || i + 1 == n_iter) {  // the span is complete
      const int span = c / kAttnSpanChunks;
      __syncthreads();
      if (w.split) {
        store_records(span, span_a);
        __syncthreads();  // span_m / span_l read before the reset
      }
      if (tid < w.nq) {
        if (w.split) {
          span_m[tid] = -INFINITY;
          span_l[tid] = 0.0f;
        } else {
          attn::end_span_stats(tid, span_m, span_l, tot_m, tot_l, tsa, tsb, live);
        }
      }
      __syncthreads();
      if (!w.split) {
#pragma unroll
        for (int ii = 0; ii < kRowsPT; ++ii) {
          const int r = tq + kGroups * ii;
          if (r >= w.nq || live[r] == 0.0f) continue;
          const attn::FoldScales f{tsa[r], tsb[r]};
#pragma unroll
          for (int h = 0; h < kH; ++h)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              float& t = tot_a[r * kP + 4 * tk + 64 * h + e];
              t = attn::fold_acc(t, span_a[ii][4 * h + e], f);
            }
        }
      }
#pragma unroll
      for (int ii = 0; ii < kRowsPT; ++ii)
#pragma unroll
        for (int e = 0; e < kHd / 16; ++e) span_a[ii][e] = 0.0f;
    }
    __syncthreads();  // the stage, the K/V buffer, p and the statistics are free again
  }
  if (w.split) {  // spans of the group after the last visible chunk: empty records
    const int after = n_iter > 0 ? (c_end - 1) / kAttnSpanChunks + 1 : s_end;
    for (int span = max(after, s_begin); span < s_end; ++span) store_records(span, span_a);
    return;
  }
  for (int i = tid; i < w.nq * kHd; i += kThreads) {
    const int r = i / kHd, d = i - r * kHd;
    a.out[int64_t{t0 + r / nh} * a.out_stride + int64_t{h0 + r % nh} * kHd + d] =
        __fdiv_rn(tot_a[r * kP + d], tot_l[r]);
  }
}

}  // namespace

bool attention_tiled_supports(const AttentionArgs& a) { return tc_tile_shape_supported(a); }

void plan_attention_tiled(AttentionArgs& a, int max_position, int n_sm, size_t max_partials_bytes) {
  const TcTileMap map = tiled_map(a);
  a.tiled = map.tokens_per_block;
  a.tiled_spans = 0;
  a.tiled_groups = 1;
  a.split = 0;
  // Blocks that hold rows (an estimate from the token count: a tile's last sub-tile may be
  // partial). Fused when they make a wave.
  const int64_t row_blocks = (int64_t{a.plan.n_tokens} + a.tiled - 1) / a.tiled * a.n_kv_heads * map.n_slices;
  if (row_blocks >= n_sm) return;
  // Split: spans per block such that the blocks fill about two waves, at least 2 spans each.
  const int64_t max_spans = max_position / kAttnSpanTokens + 1;
  const int64_t want = 2 * int64_t{n_sm};
  const int64_t per = std::max<int64_t>(2, (row_blocks * max_spans + want - 1) / want);
  if (per >= max_spans) return;
  a.chunk_split = 0;  // one record per (token, span)
  if (attention_partials_bytes(a) > max_partials_bytes) return;
  a.tiled_spans = static_cast<int>(per);
  a.tiled_groups = static_cast<int>((max_spans + per - 1) / per);
  a.split = 1;
}

void launch_attention_tiled(const AttentionArgs& a, const LaunchEnv& env) {
  const TcTileMap map = tiled_map(a);
  const dim3 grid(static_cast<unsigned>(int64_t{a.plan.n_tc_tiles} * map.n_sub * a.tiled_groups),
                  static_cast<unsigned>(a.n_kv_heads * map.n_slices));
  if (a.head_dim == 64) {
    launch_kernel(env, attention_tiled_kernel<64>, grid, kThreads, Layout<64>::total, a);
  } else {
    launch_kernel(env, attention_tiled_kernel<128>, grid, kThreads, Layout<128>::total, a);
  }
  if (a.tiled_spans > 0) launch_attention_merge(a, env);
}

bool init_attention_tiled(int max_smem_bytes) {
  if (Layout<128>::total > max_smem_bytes) return false;
  TERN_CUDA_CHECK(cudaFuncSetAttribute(attention_tiled_kernel<64>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Layout<64>::total));
  TERN_CUDA_CHECK(cudaFuncSetAttribute(attention_tiled_kernel<128>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Layout<128>::total));
  return true;
}

}  // namespace tern::cuda
