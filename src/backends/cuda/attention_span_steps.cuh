// The step functions of the two-chunk span decode kernels (attention_span_pair.cu, whose header
// comment gives the float sequence they compute): the block's per-query state for two chunks at
// a time (PairQueries), the score steps (pair_scores; group_scores, the GQA-group form), the
// softmax of a step (pair_softmax) and the value steps (pair_values; group_values). Included by
// attention_span_pair.cu alone; the kernels and their launchers stay there.
#pragma once

#include <cmath>

#include "backends/cuda/async_copy.cuh"
#include "backends/cuda/attention.h"
#include "backends/cuda/attention_chunk.cuh"
#include "backends/cuda/attention_span.cuh"
#include "backends/cuda/common.cuh"

namespace tern::cuda::span_steps {

using attn::C;
using attn::kSeg;
constexpr int kThreads = kSpanThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kPair = 2;                     // chunks per step
constexpr int kQueriesPerPass = attn::kQueriesPerPass;
static_assert(kAttnSpanTokens <= kThreads, "a span's block-table lookups take one thread each");
static_assert(kAttnSpanChunks % kPair == 0, "a span is whole pairs of chunks");
static_assert(kQueriesPerPass == 4, "a score pass covers one group of 4 queries (group-values layout)");

// Where query qi's score / probability of step position jj (0 .. 2 C - 1) lives in p. kGroup
// (span_kernel 3): queries in groups of 4, [group][2 C][4], so one 16-byte load gives a position's
// probabilities for the 4 queries of a group (the q heads that share a KV head); else [nq][2 C].
template <bool kGroup>
__device__ __forceinline__ int p_index(int qi, int jj) {
  return kGroup ? ((qi >> 2) * (kPair * C) + jj) * 4 + (qi & 3) : qi * (kPair * C) + jj;
}

// The block's queries and per-query state for two chunks at a time. Chunk c of the step (0 or 1)
// keeps its scores at p[qi][c * C ...] and its statistics at m_c[c * na + qi] etc.
struct PairQueries {
  int nq, nh, hd, na;
  int seg_lanes;      // attention.h's tree width: the power of two >= hd / kSeg
  const float* q;     // [nq][hd]
  float* p;           // [nq][2 C]
  float* m_c;         // [2][na] chunk max (-inf: no valid position in the chunk)
  float* l_c;         // [2][na]
  float* span_m;      // [na]
  float* span_l;      // [na]
  float* span_a;      // [nq][hd]
  float* sa;          // [2][na] fold scales of each chunk's fold
  float* sb;
  const int* tok_pos;
  const int* tok_first;
  // Chunk split (AttentionArgs::chunk_split): each chunk's own (m, l, a), unfolded, goes to its
  // record in chunk_out ([n_partials][kAttnSpanChunks][n_heads][hd + 2]) instead of into the span
  // state; the chunk merge folds them (attention_span.cu). nullptr: whole spans.
  float* chunk_out;
  const int* tok_partial;  // [tile tokens] first partial slot of each token
  int span, chunk0, n_heads, h0;

  // Query qi's record for chunk c of the step, or nullptr where its token does not reach that
  // chunk (the chunk merge reads a token's chunks up to its own position only).
  __device__ float* chunk_rec(int qi, int c) const {
    const int tt = qi / nh, cc = chunk0 + c;
    if (span * kAttnSpanTokens + cc * C > tok_pos[tt]) return nullptr;
    const int64_t rec = (int64_t{tok_partial[tt] + span} * kAttnSpanChunks + cc) * n_heads + h0 + qi % nh;
    return chunk_out + rec * (hd + 2);
  }
};

template <typename T>
__device__ __forceinline__ void load_seg(const T* p, bool live, float (&x)[kSeg]) {
  if (live) {
    attn::load8(p, x);
  } else {
#pragma unroll
    for (int e = 0; e < kSeg; ++e) x[e] = 0.0f;
  }
}

// Scores of every query against the n_keys (64 or 128) keys of the step's chunks (k0: the first
// chunk's rows, k1: the second's), keys j0 + jj.
template <bool kGroup, typename T>
__device__ __forceinline__ void pair_scores(const PairQueries& Q, const T* k0, const T* k1, int n_keys, int j0,
                                            float scale, float softcap) {
  const int hd = Q.hd, lane = threadIdx.x & 31;
  const int segs_per_lane = Q.seg_lanes >= 2 ? 2 : 1;
  const int lanes_per_key = Q.seg_lanes / segs_per_lane;
  const int sub = lane & (lanes_per_key - 1);
  // The lane's segments are 2 sub and 2 sub + 1; half the lanes load the odd one first, so the
  // first (and the second) loads of 8 consecutive lanes hit 8 different 16-byte bank groups.
  const int flip = segs_per_lane == 2 ? (lane >> 2) & 1 : 0;
  const int seg_x = segs_per_lane * sub + flip, seg_y = segs_per_lane * sub + (1 - flip);
  const bool live_x = seg_x * kSeg < hd, live_y = segs_per_lane == 2 && seg_y * kSeg < hd;
  const int key_stride = kThreads / lanes_per_key;
  const int key0 = threadIdx.x / lanes_per_key;
  for (int qg = 0; qg < Q.nq; qg += kQueriesPerPass) {
    float qx[kQueriesPerPass][kSeg], qy[kQueriesPerPass][kSeg];
#pragma unroll
    for (int qq = 0; qq < kQueriesPerPass; ++qq) {
      const bool q_live = qg + qq < Q.nq;
      load_seg(Q.q + (qg + qq) * hd + seg_x * kSeg, q_live && live_x, qx[qq]);
      load_seg(Q.q + (qg + qq) * hd + seg_y * kSeg, q_live && live_y, qy[qq]);
    }
    for (int jj = key0; jj < n_keys; jj += key_stride) {  // n_keys is a multiple of a warp's keys
      const T* krow = jj < C ? k0 + jj * hd : k1 + (jj - C) * hd;
      float kx[kSeg], ky[kSeg];
      load_seg(krow + seg_x * kSeg, live_x, kx);
      load_seg(krow + seg_y * kSeg, live_y, ky);
      float dot[kQueriesPerPass];
#pragma unroll
      for (int qq = 0; qq < kQueriesPerPass; ++qq) {
        float px = 0.0f, py = 0.0f;
#pragma unroll
        for (int e = 0; e < kSeg; ++e) {
          px = __fmaf_rn(qx[qq][e], kx[e], px);
          py = __fmaf_rn(qy[qq][e], ky[e], py);
        }
        dot[qq] = segs_per_lane == 2 ? __fadd_rn(px, py) : px;  // the tree's first level
      }
      for (int off = 1; off < lanes_per_key; off <<= 1) {
#pragma unroll
        for (int qq = 0; qq < kQueriesPerPass; ++qq) {
          dot[qq] = __fadd_rn(dot[qq], __shfl_xor_sync(kFullMask, dot[qq], off));
        }
      }
      if (sub == 0) {
        const int j = j0 + jj;
        float sc[kQueriesPerPass];
#pragma unroll
        for (int qq = 0; qq < kQueriesPerPass; ++qq) {
          const int qi = qg + qq;
          sc[qq] = -INFINITY;
          if (qi >= Q.nq) break;
          const int tt = qi / Q.nh;
          if (j <= Q.tok_pos[tt] && j >= Q.tok_first[tt]) {
            sc[qq] = __fmul_rn(dot[qq], scale);
            if (softcap > 0.0f) sc[qq] = __fmul_rn(softcap, tanhf(__fdiv_rn(sc[qq], softcap)));
          }
        }
        if (kGroup && qg + kQueriesPerPass <= Q.nq) {  // a whole group: one 16-byte store
          *reinterpret_cast<float4*>(Q.p + p_index<true>(qg, jj)) = make_float4(sc[0], sc[1], sc[2], sc[3]);
        } else {
#pragma unroll
          for (int qq = 0; qq < kQueriesPerPass; ++qq) {
            if (qg + qq >= Q.nq) break;
            Q.p[p_index<kGroup>(qg + qq, jj)] = sc[qq];
          }
        }
      }
    }
  }
}

// group_scores' arithmetic for one key (the row at krow): the lane's two segment partials per
// query (fmaf chains in d order), the tree's first level in registers, then the transposing
// reduction over the key's lanes (group_scores' comment); returns the dot of the lane's query.
template <int kLanesPerKey, typename T>
__device__ __forceinline__ float group_key_dot(const float (&qx)[kQueriesPerPass][kSeg],
                                               const float (&qy)[kQueriesPerPass][kSeg], const T* krow, int seg_x,
                                               int seg_y, bool b0, bool b1) {
  float kx[kSeg], ky[kSeg];
  attn::load8(krow + seg_x * kSeg, kx);
  attn::load8(krow + seg_y * kSeg, ky);
  float dot[kQueriesPerPass];
#pragma unroll
  for (int qq = 0; qq < kQueriesPerPass; ++qq) {
    float px = 0.0f, py = 0.0f;
#pragma unroll
    for (int e = 0; e < kSeg; ++e) {
      px = __fmaf_rn(qx[qq][e], kx[e], px);
      py = __fmaf_rn(qy[qq][e], ky[e], py);
    }
    dot[qq] = __fadd_rn(px, py);  // the tree's first level
  }
  // xor 1: keep queries 2 b0, 2 b0 + 1; xor 2: keep query 2 b0 + b1.
  const float send0 = b0 ? dot[0] : dot[2], send1 = b0 ? dot[1] : dot[3];
  const float keep0 = b0 ? dot[2] : dot[0], keep1 = b0 ? dot[3] : dot[1];
  const float e0 = __fadd_rn(keep0, __shfl_xor_sync(kFullMask, send0, 1));
  const float e1 = __fadd_rn(keep1, __shfl_xor_sync(kFullMask, send1, 1));
  float f = __fadd_rn(b1 ? e1 : e0, __shfl_xor_sync(kFullMask, b1 ? e0 : e1, 2));
#pragma unroll
  for (int off = 4; off < kLanesPerKey; off <<= 1) f = __fadd_rn(f, __shfl_xor_sync(kFullMask, f, off));
  return f;
}

// pair_scores<true> for a head_dim known at compile time (span_kernel 3, kHd = 128 with f16
// caches): the same segment partials and tree, with
//   - no runtime segment checks or tree loop (every lane's two segments are live), so the
//     compiler interleaves the 8 independent fmaf chains of a key;
//   - the tree's lane levels as a transposing reduction: at xor 1 a lane keeps two of the 4
//     queries and adds its partner's partials of those two (it sends the other two), at xor 2
//     one query, then plain butterfly levels. Every addition pairs the same two partial sums as
//     the butterfly (float addition is commutative), so each query's dot has the same bits, but
//     it takes 4 shuffles and 4 adds instead of 12 and 12 for 4 queries, and lane l ends with
//     query 2 (l & 1) + ((l >> 1) & 1), which it masks, scales and stores itself;
//   - the query's position range read once per pass, not per key.
//
// kRoleThreads / rtid: the threads that run it and this thread's index among them (the
// warp-specialized kernel scores on its producer warps only; each key's arithmetic is the same).
template <int kHd, int kRoleThreads = kThreads, typename T>
__device__ __forceinline__ void group_scores(const PairQueries& Q, const T* k0, const T* k1, int n_keys, int j0,
                                             float scale, float softcap, unsigned rtid) {
  constexpr int kSegLanes = kHd / kSeg;
  static_assert(kSegLanes * kSeg == kHd && (kSegLanes & (kSegLanes - 1)) == 0 && kSegLanes >= 8,
                "every lane's two segments are live, and a key has at least 4 lanes");
  constexpr int kLanesPerKey = kSegLanes / 2;
  constexpr int kKeyStride = kRoleThreads / kLanesPerKey;
  const int lane = rtid & 31;
  const int sub = lane & (kLanesPerKey - 1);
  const int flip = (lane >> 2) & 1;  // pair_scores' bank spread
  const int seg_x = 2 * sub + flip, seg_y = 2 * sub + (1 - flip);
  const int key0 = rtid / kLanesPerKey;
  const bool b0 = (lane & 1) != 0, b1 = (lane & 2) != 0;
  const int qsel = 2 * (lane & 1) + ((lane >> 1) & 1);
  const bool writer = (sub >> 2) == 0;  // lanes sub and sub + 4, + 8, ... end with the same query
  for (int qg = 0; qg < Q.nq; qg += kQueriesPerPass) {
    float qx[kQueriesPerPass][kSeg], qy[kQueriesPerPass][kSeg];
#pragma unroll
    for (int qq = 0; qq < kQueriesPerPass; ++qq) {
      const bool q_live = qg + qq < Q.nq;
      load_seg(Q.q + (qg + qq) * kHd + seg_x * kSeg, q_live, qx[qq]);
      load_seg(Q.q + (qg + qq) * kHd + seg_y * kSeg, q_live, qy[qq]);
    }
    const int my_q = qg + qsel;
    const bool store = writer && my_q < Q.nq;
    int my_pos = -1, my_first = 0;
    if (my_q < Q.nq) {
      const int tt = my_q / Q.nh;
      my_pos = Q.tok_pos[tt];
      my_first = Q.tok_first[tt];
    }
    float* my_p = Q.p + p_index<true>(qg, 0) + qsel;  // position jj at my_p[4 jj]
    for (int jj = key0; jj < n_keys; jj += kKeyStride) {  // n_keys is a multiple of a warp's keys
      const T* krow = jj < C ? k0 + jj * kHd : k1 + (jj - C) * kHd;
      const float f = group_key_dot<kLanesPerKey>(qx, qy, krow, seg_x, seg_y, b0, b1);
      if (store) {
        const int j = j0 + jj;
        float sc = -INFINITY;
        if (j <= my_pos && j >= my_first) {
          sc = __fmul_rn(f, scale);
          if (softcap > 0.0f) sc = __fmul_rn(softcap, tanhf(__fdiv_rn(sc, softcap)));
        }
        my_p[jj * 4] = sc;
      }
    }
  }
}

// group_scores for the lean warp-specialized kernel (kSpanWsLean) when the block's queries are
// one pass (at most 4: a decode's GQA group): the lane's q segments and its query's position
// range are loaded once for the block's whole walk instead of every step, and each chunk's keys
// run in their own loop (no per-key chunk select) with the softcap branch outside it. Each key's
// dot is group_key_dot and its score the same masking, scaling and softcap expressions: the same
// bits as group_scores.
template <int kHd, int kRoleThreads>
struct LeanScorer {
  static constexpr int kSegLanes = kHd / kSeg;
  static constexpr int kLanesPerKey = kSegLanes / 2;
  static constexpr int kKeyStride = kRoleThreads / kLanesPerKey;
  static_assert(C % kKeyStride == 0, "a chunk is whole passes of the role's keys");
  float qx[kQueriesPerPass][kSeg], qy[kQueriesPerPass][kSeg];
  int seg_x, seg_y, key0, qsel, my_pos, my_first;
  bool b0, b1, store;

  __device__ __forceinline__ void init(const PairQueries& Q, const int* q_pos, const int* q_first, unsigned rtid) {
    const int lane = rtid & 31;
    const int sub = lane & (kLanesPerKey - 1);
    const int flip = (lane >> 2) & 1;
    seg_x = 2 * sub + flip, seg_y = 2 * sub + (1 - flip);
    key0 = rtid / kLanesPerKey;
    b0 = (lane & 1) != 0, b1 = (lane & 2) != 0;
    qsel = 2 * (lane & 1) + ((lane >> 1) & 1);
#pragma unroll
    for (int qq = 0; qq < kQueriesPerPass; ++qq) {
      const bool q_live = qq < Q.nq;
      load_seg(Q.q + qq * kHd + seg_x * kSeg, q_live, qx[qq]);
      load_seg(Q.q + qq * kHd + seg_y * kSeg, q_live, qy[qq]);
    }
    store = (sub >> 2) == 0 && qsel < Q.nq;
    my_pos = qsel < Q.nq ? q_pos[qsel] : -1;
    my_first = qsel < Q.nq ? q_first[qsel] : 0;
  }

  template <bool kCap, typename T>
  __device__ __forceinline__ void chunk(float* p, const T* kc, int c, int j0, float scale, float softcap) const {
    float* my_p = p + p_index<true>(0, c * C) + qsel;  // position jj of the chunk at my_p[4 jj]
    for (int jj = key0; jj < C; jj += kKeyStride) {
      const float f = group_key_dot<kLanesPerKey>(qx, qy, kc + jj * kHd, seg_x, seg_y, b0, b1);
      if (store) {
        const int j = j0 + c * C + jj;
        float sc = -INFINITY;
        if (j <= my_pos && j >= my_first) {
          sc = __fmul_rn(f, scale);
          if (kCap) sc = __fmul_rn(softcap, tanhf(__fdiv_rn(sc, softcap)));
        }
        my_p[jj * 4] = sc;
      }
    }
  }

  template <typename T>
  __device__ __forceinline__ void score(float* p, const T* k0, const T* k1, int n_chunks, int j0, float scale,
                                        float softcap) const {
    if (softcap > 0.0f) {
      chunk<true>(p, k0, 0, j0, scale, softcap);
      if (n_chunks > 1) chunk<true>(p, k1, 1, j0, scale, softcap);
    } else {
      chunk<false>(p, k0, 0, j0, scale, softcap);
      if (n_chunks > 1) chunk<false>(p, k1, 1, j0, scale, softcap);
    }
  }
};

// chunk_softmax's statistics for the step's n_chunks chunks of every query (a warp per query,
// both chunks' reductions side by side), folded into the span statistics in chunk order.
// (kRoleWarps / rwarp: the warps that run it and this warp's index among them.)
template <bool kGroup, int kRoleWarps = kWarps>
__device__ __forceinline__ void pair_softmax(const PairQueries& Q, int n_chunks, unsigned rwarp) {
  const int lane = threadIdx.x & 31;
  for (int qi = rwarp; qi < Q.nq; qi += kRoleWarps) {
    float m[kPair], l[kPair];
#pragma unroll
    for (int c = 0; c < kPair; ++c) {
      m[c] = -INFINITY;
      l[c] = 0.0f;
      if (c >= n_chunks) continue;
      float* pr0 = Q.p + p_index<kGroup>(qi, c * C + lane);
      float* pr1 = Q.p + p_index<kGroup>(qi, c * C + lane + 32);
      const float s0 = *pr0, s1 = *pr1;
      m[c] = warp_max(fmaxf(s0, s1));
      float p0 = 0.0f, p1 = 0.0f;
      if (m[c] != -INFINITY) {
        p0 = __expf(__fsub_rn(s0, m[c]));
        p1 = __expf(__fsub_rn(s1, m[c]));
        l[c] = warp_sum_tree(__fadd_rn(p0, p1));
      }
      *pr0 = p0;
      *pr1 = p1;
    }
    if (lane == 0) {
#pragma unroll
      for (int c = 0; c < kPair; ++c) {
        if (c >= n_chunks) break;
        Q.m_c[c * Q.na + qi] = m[c];
        Q.l_c[c * Q.na + qi] = l[c];
        if (Q.chunk_out != nullptr) {
          if (float* rec = Q.chunk_rec(qi, c)) rec[0] = m[c], rec[1] = l[c];
          continue;  // the chunk merge folds the chunk statistics
        }
        if (m[c] != -INFINITY) {
          const attn::FoldScales f = attn::fold_stats(Q.span_m[qi], Q.span_l[qi], m[c], l[c]);
          Q.sa[c * Q.na + qi] = f.sa;
          Q.sb[c * Q.na + qi] = f.sb;
        }
      }
    }
  }
}

// acc += p_j v_j over positions [jb, je), in order (kDims dimensions at v).
template <int kDims, typename T>
__device__ __forceinline__ void fma_run(float (&acc)[kDims], const float* p, const T* v, int hd, int jb, int je) {
#pragma unroll 4
  for (int jj = jb; jj < je; ++jj) {
    float x[kDims];
    attn::loadv(v + jj * hd, x);
#pragma unroll
    for (int e = 0; e < kDims; ++e) acc[e] = __fmaf_rn(p[jj], x[e], acc[e]);
  }
}

// chunk_values for the step's chunks: each thread owns kDims dimensions of one query and runs
// the two chunks' chains together where both are inside the query's range (each chain still
// in position order), then folds chunk 0's result into the span A before chunk 1's.
template <int kDims, typename T>
__device__ __forceinline__ void pair_values(const PairQueries& Q, const T* v0, const T* v1, int n_chunks, int j0) {
  const int hd = Q.hd, hdn = hd / kDims;
  for (int o = threadIdx.x; o < Q.nq * hdn; o += kThreads) {
    const int qi = o / hdn, d0 = (o - qi * hdn) * kDims;
    const int tt = qi / Q.nh;
    const int pos = Q.tok_pos[tt], first = Q.tok_first[tt];
    const float* p0 = Q.p + qi * (kPair * C);
    const float* p1 = p0 + C;
    const T* va = v0 + d0;
    const T* vb = v1 + d0;
    // Valid positions of each chunk, [b, e) (empty when e <= b), and the range both share.
    const int b0 = max(0, first - j0), e0 = min(C, pos - j0 + 1);
    const int b1 = n_chunks > 1 ? max(0, first - j0 - C) : 0;
    const int e1 = n_chunks > 1 ? min(C, pos - j0 - C + 1) : 0;
    const int cb = max(b0, b1), ce = max(cb, min(e0, e1));
    float acc0[kDims], acc1[kDims];
#pragma unroll
    for (int e = 0; e < kDims; ++e) acc0[e] = acc1[e] = 0.0f;
    fma_run<kDims>(acc0, p0, va, hd, b0, min(cb, e0));  // before the shared range
    fma_run<kDims>(acc1, p1, vb, hd, b1, min(cb, e1));
#pragma unroll 2
    for (int jj = cb; jj < ce; ++jj) {
      float x0[kDims], x1[kDims];
      attn::loadv(va + jj * hd, x0);
      attn::loadv(vb + jj * hd, x1);
#pragma unroll
      for (int e = 0; e < kDims; ++e) {
        acc0[e] = __fmaf_rn(p0[jj], x0[e], acc0[e]);
        acc1[e] = __fmaf_rn(p1[jj], x1[e], acc1[e]);
      }
    }
    fma_run<kDims>(acc0, p0, va, hd, max(ce, b0), e0);  // after it
    fma_run<kDims>(acc1, p1, vb, hd, max(ce, b1), e1);
    if (Q.chunk_out != nullptr) {  // chunk split: each chunk's chain as it is
      if (float* rec = Q.chunk_rec(qi, 0)) {
#pragma unroll
        for (int e = 0; e < kDims; ++e) rec[2 + d0 + e] = acc0[e];
      }
      if (n_chunks > 1) {
        if (float* rec = Q.chunk_rec(qi, 1)) {
#pragma unroll
          for (int e = 0; e < kDims; ++e) rec[2 + d0 + e] = acc1[e];
        }
      }
      continue;
    }
    float* A = Q.span_a + qi * hd + d0;
    float a[kDims];
#pragma unroll
    for (int e = 0; e < kDims; ++e) a[e] = A[e];
    if (Q.m_c[qi] != -INFINITY) {
      const attn::FoldScales f{Q.sa[qi], Q.sb[qi]};
#pragma unroll
      for (int e = 0; e < kDims; ++e) a[e] = attn::fold_acc(a[e], acc0[e], f);
    }
    if (n_chunks > 1 && Q.m_c[Q.na + qi] != -INFINITY) {
      const attn::FoldScales f{Q.sa[Q.na + qi], Q.sb[Q.na + qi]};
#pragma unroll
      for (int e = 0; e < kDims; ++e) a[e] = attn::fold_acc(a[e], acc1[e], f);
    }
#pragma unroll
    for (int e = 0; e < kDims; ++e) A[e] = a[e];
  }
}

__device__ __forceinline__ float load1(const __half* p) {
  return half_bits_to_float(*reinterpret_cast<const uint16_t*>(p));
}
__device__ __forceinline__ float load1(const float* p) { return *p; }

// pair_values for span_kernel 3: a lane owns kDims dimensions (1, or 2 with kSpanValuePairs) of
// one chunk for the 4 queries of a group (the q heads that share the KV head: in a decode, a GQA group), so each V element is
// loaded and converted once for 4 queries and each position's 4 probabilities are one 16-byte
// load. Lanes 0-15 take chunk 0 and lanes 16-31 chunk 1 for the same 16 dimensions; lane l hands
// its chunk-1 results to lane l - 16, which folds chunk 0's then chunk 1's into the span A.
// Each (query, d, chunk) is still one fmaf chain from 0 over the query's valid positions in
// position order (queries of a group that belong to different tokens select their own range),
// folded in chunk order with the same expressions: the same bits as pair_values.
//
// kQ (kSpanValueQueryPairs: 2, else 4): the queries of the group a lane serves. With 2, the
// group's 4 queries take two lanes (two warps), so a decode's values step runs on all 8 warps
// instead of 4 and each lane's serial loop carries half the multiply-adds; the chains are the
// same (each (query, d, chunk) chain is still one lane's, in position order), so the same bits.
// (kRoleWarps / rwarp as pair_softmax's.)
template <int kHd, int kDims, int kQ = 4, int kRoleWarps = kWarps, typename T>
__device__ __forceinline__ void group_values(const PairQueries& Q, const T* v0, const T* v1, int n_chunks, int j0,
                                             unsigned rwarp) {
  static_assert(kDims == 1 || kDims == 2, "one or two dimensions per lane");
  static_assert(kQ == 4 || kQ == 2, "a lane serves a group's 4 queries or 2 of them");
  constexpr int kSets = 4 / kQ;  // lanes (warps) per dimension and chunk of a group
  const int hd = kHd != 0 ? kHd : Q.hd, lane = threadIdx.x & 31;
  constexpr int kSlab = 16 * kDims;           // dimensions per warp
  const int slabs = (hd + kSlab - 1) / kSlab;  // warps per group and query set
  const int c = lane >> 4;
  const int n_groups = (Q.nq + 3) / 4;
  const int jc = j0 + c * C;
  for (int w = rwarp; w < n_groups * kSets * slabs; w += kRoleWarps) {
    const int grp = w / (kSets * slabs);
    const int rem = w - grp * kSets * slabs;
    const int set = rem / slabs;
    const int d = (rem - set * slabs) * kSlab + kDims * (lane & 15);
    const bool live = d < hd;  // (head_dim % 8 == 0: both of a lane's dimensions or neither)
    const int q0 = 4 * grp + kQ * set;
    int b[kQ], e[kQ];
#pragma unroll
    for (int r = 0; r < kQ; ++r) {
      b[r] = C;
      e[r] = 0;
      if (q0 + r < Q.nq && c < n_chunks) {
        const int tt = (q0 + r) / Q.nh;
        b[r] = max(0, Q.tok_first[tt] - jc);
        e[r] = min(C, Q.tok_pos[tt] - jc + 1);
      }
    }
    const float* pg = Q.p + p_index<true>(4 * grp, c * C) + kQ * set;  // position jj at pg[4 jj]
    const T* v = (c == 0 ? v0 : v1) + (live ? d : 0);
    float acc[kQ][kDims];
#pragma unroll
    for (int r = 0; r < kQ; ++r) {
#pragma unroll
      for (int k = 0; k < kDims; ++k) acc[r][k] = 0.0f;
    }
    auto load_v = [&](int jj, float (&x)[kDims]) {
      if constexpr (kDims == 1) {
        x[0] = load1(v + jj * hd);
      } else {
        attn::loadv(v + jj * hd, x);
      }
    };
    auto load_p = [&](int jj, float (&pr)[kQ]) {
      if constexpr (kQ == 4) {
        const float4 p4 = *reinterpret_cast<const float4*>(pg + jj * 4);
        pr[0] = p4.x, pr[1] = p4.y, pr[2] = p4.z, pr[3] = p4.w;
      } else {
        const float2 p2 = *reinterpret_cast<const float2*>(pg + jj * 4);
        pr[0] = p2.x, pr[1] = p2.y;
      }
    };
    if (live) {
      if (q0 + kQ - 1 < Q.nq && q0 / Q.nh == (q0 + kQ - 1) / Q.nh) {  // one token: one range
#pragma unroll 4
        for (int jj = b[0]; jj < e[0]; ++jj) {
          float pr[kQ], x[kDims];
          load_p(jj, pr);
          load_v(jj, x);
#pragma unroll
          for (int k = 0; k < kDims; ++k) {
#pragma unroll
            for (int r = 0; r < kQ; ++r) acc[r][k] = __fmaf_rn(pr[r], x[k], acc[r][k]);
          }
        }
      } else {
        int lo = b[0], hi = e[0];
#pragma unroll
        for (int r = 1; r < kQ; ++r) lo = min(lo, b[r]), hi = max(hi, e[r]);
        for (int jj = lo; jj < hi; ++jj) {
          float pr[kQ], x[kDims];
          load_p(jj, pr);
          load_v(jj, x);
#pragma unroll
          for (int r = 0; r < kQ; ++r) {
            if (jj >= b[r] && jj < e[r]) {
#pragma unroll
              for (int k = 0; k < kDims; ++k) acc[r][k] = __fmaf_rn(pr[r], x[k], acc[r][k]);
            }
          }
        }
      }
    }
    float acc1[kQ][kDims];
#pragma unroll
    for (int r = 0; r < kQ; ++r) {
#pragma unroll
      for (int k = 0; k < kDims; ++k) acc1[r][k] = __shfl_xor_sync(kFullMask, acc[r][k], 16);
    }
    if (c == 0 && live && Q.chunk_out != nullptr) {  // chunk split: each chunk's chains as they are
#pragma unroll
      for (int r = 0; r < kQ; ++r) {
        const int qi = q0 + r;
        if (qi >= Q.nq) break;
        if (float* rec = Q.chunk_rec(qi, 0)) {
#pragma unroll
          for (int k = 0; k < kDims; ++k) rec[2 + d + k] = acc[r][k];
        }
        if (n_chunks > 1) {
          if (float* rec = Q.chunk_rec(qi, 1)) {
#pragma unroll
            for (int k = 0; k < kDims; ++k) rec[2 + d + k] = acc1[r][k];
          }
        }
      }
    } else if (c == 0 && live) {
#pragma unroll
      for (int r = 0; r < kQ; ++r) {
        const int qi = q0 + r;
        if (qi >= Q.nq) break;
#pragma unroll
        for (int k = 0; k < kDims; ++k) {
          float A = Q.span_a[qi * hd + d + k];
          if (Q.m_c[qi] != -INFINITY) A = attn::fold_acc(A, acc[r][k], attn::FoldScales{Q.sa[qi], Q.sb[qi]});
          if (n_chunks > 1 && Q.m_c[Q.na + qi] != -INFINITY) {
            A = attn::fold_acc(A, acc1[r][k], attn::FoldScales{Q.sa[Q.na + qi], Q.sb[Q.na + qi]});
          }
          Q.span_a[qi * hd + d + k] = A;
        }
      }
    }
  }
}

// group_values<kHd, 2, 4, kRoleWarps> for the lean warp-specialized kernel (kSpanWsLean): the
// same lanes, chains and folds, with what group_values recomputes every step read from tables
// the block fills once: each query's position and first position (q_pos, q_first: no division
// by the heads per token), and each query's fold scales loaded once per step, not per dimension.
// A group whose queries share one position range (a decode's GQA group) runs the one-range loop;
// the ranges decide the loop, not the tokens, and either loop runs each (query, d, chunk) chain
// over the query's own range in position order: the same bits as group_values.
template <int kHd, int kRoleWarps>
__device__ __forceinline__ void group_values_lean(const PairQueries& Q, const int* q_pos, const int* q_first,
                                                  const __half* v0, const __half* v1, int n_chunks, int j0,
                                                  unsigned rwarp) {
  constexpr int kDims = 2, kSlab = 16 * kDims, kSlabs = kHd / kSlab;
  static_assert(kSlabs * kSlab == kHd, "whole slabs: every lane's dimensions are live");
  const int lane = threadIdx.x & 31, c = lane >> 4;
  const int n_groups = (Q.nq + 3) / 4;
  const int jc = j0 + c * C;
  for (int w = rwarp; w < n_groups * kSlabs; w += kRoleWarps) {
    const int grp = w / kSlabs;
    const int d = (w - grp * kSlabs) * kSlab + kDims * (lane & 15);
    const int q0 = 4 * grp;
    int b[4], e[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      b[r] = C;
      e[r] = 0;
      if (q0 + r < Q.nq && c < n_chunks) {
        b[r] = max(0, q_first[q0 + r] - jc);
        e[r] = min(C, q_pos[q0 + r] - jc + 1);
      }
    }
    const float* pg = Q.p + p_index<true>(q0, c * C);  // position jj at pg[4 jj]
    const __half* v = (c == 0 ? v0 : v1) + d;
    float acc[4][kDims];
#pragma unroll
    for (int r = 0; r < 4; ++r) acc[r][0] = acc[r][1] = 0.0f;
    const bool one_range = b[1] == b[0] && b[2] == b[0] && b[3] == b[0] && e[1] == e[0] && e[2] == e[0] && e[3] == e[0];
    if (one_range) {
#pragma unroll 4
      for (int jj = b[0]; jj < e[0]; ++jj) {
        const float4 p4 = *reinterpret_cast<const float4*>(pg + jj * 4);
        float x[kDims];
        attn::loadv(v + jj * kHd, x);
        const float pr[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
        for (int k = 0; k < kDims; ++k) {
#pragma unroll
          for (int r = 0; r < 4; ++r) acc[r][k] = __fmaf_rn(pr[r], x[k], acc[r][k]);
        }
      }
    } else {
      const int lo = min(min(b[0], b[1]), min(b[2], b[3])), hi = max(max(e[0], e[1]), max(e[2], e[3]));
      for (int jj = lo; jj < hi; ++jj) {
        const float4 p4 = *reinterpret_cast<const float4*>(pg + jj * 4);
        float x[kDims];
        attn::loadv(v + jj * kHd, x);
        const float pr[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          if (jj >= b[r] && jj < e[r]) {
#pragma unroll
            for (int k = 0; k < kDims; ++k) acc[r][k] = __fmaf_rn(pr[r], x[k], acc[r][k]);
          }
        }
      }
    }
    float acc1[4][kDims];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
#pragma unroll
      for (int k = 0; k < kDims; ++k) acc1[r][k] = __shfl_xor_sync(kFullMask, acc[r][k], 16);
    }
    if (c == 0) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int qi = q0 + r;
        if (qi >= Q.nq) break;
        const bool f0 = Q.m_c[qi] != -INFINITY, f1 = n_chunks > 1 && Q.m_c[Q.na + qi] != -INFINITY;
        const attn::FoldScales s0{f0 ? Q.sa[qi] : 0.0f, f0 ? Q.sb[qi] : 0.0f};
        const attn::FoldScales s1{f1 ? Q.sa[Q.na + qi] : 0.0f, f1 ? Q.sb[Q.na + qi] : 0.0f};
        float* A = Q.span_a + qi * kHd + d;
        const float2 a2 = *reinterpret_cast<const float2*>(A);
        float out[kDims] = {a2.x, a2.y};
#pragma unroll
        for (int k = 0; k < kDims; ++k) {
          if (f0) out[k] = attn::fold_acc(out[k], acc[r][k], s0);
          if (f1) out[k] = attn::fold_acc(out[k], acc1[r][k], s1);
        }
        *reinterpret_cast<float2*>(A) = make_float2(out[0], out[1]);
      }
    }
  }
}

}  // namespace tern::cuda::span_steps
