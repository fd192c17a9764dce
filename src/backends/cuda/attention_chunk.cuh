// The per-chunk steps of the batch-invariant attention (attention.h states the arithmetic), as
// functions shared by the chunk kernel (attention.cu) and the span decode kernel
// (attention_span.cu). Both kernels call exactly these, so a query's float sequence cannot depend
// on which kernel, block size or thread mapping served it: only the memory movement around them
// differs. Every function is called by all threads of the block (they stride over the work).
#pragma once

#include <cmath>

#include "backends/cuda/common.cuh"
#include "backends/cuda/kernels.h"

namespace tern::cuda::attn {

constexpr int C = kAttnChunkTokens;
constexpr int kSeg = 8;             // dimensions per score segment (one 16-byte f16 load)
constexpr int kQueriesPerPass = 4;  // queries whose q segments a thread holds in registers
static_assert(C == 64, "the softmax phase gives each lane positions lane and lane + 32");
static_assert(kAttnMaxHeadDim <= 32 * kSeg, "a key's segments must fit one warp");

// Folds partial (m, l) into the running (M, L); returns the scales of the old state and of the
// partial. Precondition: m > -inf (empty chunks and spans are skipped by the callers).
struct FoldScales {
  float sa, sb;
};
__device__ __forceinline__ FoldScales fold_stats(float& M, float& L, float m, float l) {
  const float m_new = fmaxf(M, m);
  FoldScales f;
  f.sa = __expf(__fsub_rn(M, m_new));
  f.sb = __expf(__fsub_rn(m, m_new));
  L = __fadd_rn(__fmul_rn(L, f.sa), __fmul_rn(l, f.sb));
  M = m_new;
  return f;
}
__device__ __forceinline__ float fold_acc(float A, float a, FoldScales f) {
  return __fadd_rn(__fmul_rn(A, f.sa), __fmul_rn(a, f.sb));
}

// The first position a query at `pos` may attend (attention.h: the sliding window, else 0).
__device__ __forceinline__ int first_position(const AttentionArgs& a, int pos) {
  return a.sliding_window > 0 ? max(0, pos + 1 - a.sliding_window) : 0;
}

// A fused mode's span end for query qi: the span's statistics fold into the running total where
// the span saw a valid position (the scales left in sa / sb, live[qi] = 1, else 0), then the span
// statistics restart from (-inf, 0).
__device__ __forceinline__ void end_span_stats(int qi, float* span_m, float* span_l, float* tot_m, float* tot_l, float* sa,
                                               float* sb, float* live) {
  const bool is_live = span_m[qi] != -INFINITY;
  if (is_live) {
    const FoldScales f = fold_stats(tot_m[qi], tot_l[qi], span_m[qi], span_l[qi]);
    sa[qi] = f.sa;
    sb[qi] = f.sb;
  }
  live[qi] = is_live ? 1.0f : 0.0f;
  span_m[qi] = -INFINITY;
  span_l[qi] = 0.0f;
}

__device__ __forceinline__ void load8(const __half* p, float (&x)[8]) {
  const uint4 w = *reinterpret_cast<const uint4*>(p);
  const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    x[2 * e] = half_bits_to_float(static_cast<uint16_t>(u[e] & 0xffffu));
    x[2 * e + 1] = half_bits_to_float(static_cast<uint16_t>(u[e] >> 16));
  }
}
__device__ __forceinline__ void load8(const float* p, float (&x)[8]) {
  const float4 lo = reinterpret_cast<const float4*>(p)[0], hi = reinterpret_cast<const float4*>(p)[1];
  x[0] = lo.x, x[1] = lo.y, x[2] = lo.z, x[3] = lo.w, x[4] = hi.x, x[5] = hi.y, x[6] = hi.z, x[7] = hi.w;
}
__device__ __forceinline__ void loadv(const __half* p, float (&x)[4]) {
  const uint2 w = *reinterpret_cast<const uint2*>(p);
  x[0] = half_bits_to_float(static_cast<uint16_t>(w.x & 0xffffu));
  x[1] = half_bits_to_float(static_cast<uint16_t>(w.x >> 16));
  x[2] = half_bits_to_float(static_cast<uint16_t>(w.y & 0xffffu));
  x[3] = half_bits_to_float(static_cast<uint16_t>(w.y >> 16));
}
__device__ __forceinline__ void loadv(const float* p, float (&x)[4]) {
  const float4 v = *reinterpret_cast<const float4*>(p);
  x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
}
__device__ __forceinline__ void loadv(const __half* p, float (&x)[2]) {
  const uint32_t w = *reinterpret_cast<const uint32_t*>(p);
  x[0] = half_bits_to_float(static_cast<uint16_t>(w & 0xffffu));
  x[1] = half_bits_to_float(static_cast<uint16_t>(w >> 16));
}
__device__ __forceinline__ void loadv(const float* p, float (&x)[2]) {
  const float2 v = *reinterpret_cast<const float2*>(p);
  x[0] = v.x, x[1] = v.y;
}

// The queries a block serves and its per-query shared-memory state. Query qi is head
// h0 + qi % nh of tile token qi / nh.
struct Queries {
  int nq, nh, hd;
  int seg_lanes;          // lanes per key in the score phase: the power of two >= hd / kSeg
  const float* q;         // [nq][hd]
  float* p;               // [nq][C] scores, then probabilities
  float* m_c;             // [nq] chunk max (-inf: the query has no valid position in the chunk)
  float* l_c;             // [nq] chunk sum
  float* span_m;          // [nq] running span max
  float* span_l;          // [nq] running span sum
  float* span_a;          // [nq][hd] running span A
  float* sa;              // [nq] fold scales of the current fold
  float* sb;
  const int* tok_pos;     // [tile tokens] position of each token
  const int* tok_first;   // [tile tokens] first position it may attend (sliding window)
};

__host__ __device__ inline int seg_lanes_of(int head_dim) {
  int s = 1;
  while (s * kSeg < head_dim) s *= 2;
  return s;
}

// Scores of every query against the C keys of the chunk at j0: seg_lanes lanes per (query, key),
// a segment each (fmaf in d order), then the butterfly tree; masked positions get -inf.
template <int kThreads, typename T>
__device__ __forceinline__ void chunk_scores(const Queries& Q, const T* k_s, int j0, float scale, float softcap) {
  const int hd = Q.hd, lane = threadIdx.x & 31;
  const int seg_lanes = Q.seg_lanes;
  const int seg = lane & (seg_lanes - 1);
  const bool seg_live = seg * kSeg < hd;
  const int key_stride = kThreads / seg_lanes;  // keys the block scores at once
  const int key0 = threadIdx.x / seg_lanes;
  for (int qg = 0; qg < Q.nq; qg += kQueriesPerPass) {
    float qr[kQueriesPerPass][kSeg];
#pragma unroll
    for (int qq = 0; qq < kQueriesPerPass; ++qq) {
      if (qg + qq < Q.nq && seg_live) {
        load8(Q.q + (qg + qq) * hd + seg * kSeg, qr[qq]);
      } else {
#pragma unroll
        for (int e = 0; e < kSeg; ++e) qr[qq][e] = 0.0f;
      }
    }
    for (int jj = key0; jj < C; jj += key_stride) {
      float kr[kSeg];
      if (seg_live) {
        load8(k_s + jj * hd + seg * kSeg, kr);
      } else {
#pragma unroll
        for (int e = 0; e < kSeg; ++e) kr[e] = 0.0f;
      }
      float part[kQueriesPerPass];
#pragma unroll
      for (int qq = 0; qq < kQueriesPerPass; ++qq) {
        part[qq] = 0.0f;
#pragma unroll
        for (int e = 0; e < kSeg; ++e) part[qq] = __fmaf_rn(qr[qq][e], kr[e], part[qq]);
      }
      for (int off = 1; off < seg_lanes; off <<= 1) {
#pragma unroll
        for (int qq = 0; qq < kQueriesPerPass; ++qq) {
          part[qq] = __fadd_rn(part[qq], __shfl_xor_sync(kFullMask, part[qq], off));
        }
      }
      if (seg == 0) {
        const int j = j0 + jj;
#pragma unroll
        for (int qq = 0; qq < kQueriesPerPass; ++qq) {
          const int qi = qg + qq;
          if (qi >= Q.nq) break;
          const int tt = qi / Q.nh;
          float s = -INFINITY;
          if (j <= Q.tok_pos[tt] && j >= Q.tok_first[tt]) {
            s = __fmul_rn(part[qq], scale);
            if (softcap > 0.0f) s = __fmul_rn(softcap, tanhf(__fdiv_rn(s, softcap)));
          }
          Q.p[qi * C + jj] = s;
        }
      }
    }
  }
}

// Chunk softmax statistics (a warp per query) and the fold of (m, l) into the span statistics;
// leaves the fold scales in Q.sa / Q.sb for chunk_values.
template <int kWarps>
__device__ __forceinline__ void chunk_softmax(const Queries& Q) {
  const int lane = threadIdx.x & 31;
  for (int qi = threadIdx.x >> 5; qi < Q.nq; qi += kWarps) {
    const float s0 = Q.p[qi * C + lane], s1 = Q.p[qi * C + lane + 32];
    const float m = warp_max(fmaxf(s0, s1));
    float p0 = 0.0f, p1 = 0.0f, l = 0.0f;
    if (m != -INFINITY) {
      p0 = __expf(__fsub_rn(s0, m));
      p1 = __expf(__fsub_rn(s1, m));
      l = warp_sum_tree(__fadd_rn(p0, p1));
    }
    Q.p[qi * C + lane] = p0;
    Q.p[qi * C + lane + 32] = p1;
    if (lane == 0) {
      Q.m_c[qi] = m;
      Q.l_c[qi] = l;
      if (m != -INFINITY) {
        const FoldScales f = fold_stats(Q.span_m[qi], Q.span_l[qi], m, l);
        Q.sa[qi] = f.sa;
        Q.sb[qi] = f.sb;
      }
    }
  }
}

// Weighted values of the chunk at j0 (kDims dimensions of one query per thread step, positions in
// order over the query's valid range) folded into the span A.
template <int kThreads, int kDims, typename T>
__device__ __forceinline__ void chunk_values(const Queries& Q, const T* v_s, int j0) {
  const int hd = Q.hd, hdn = hd / kDims;
  for (int o = threadIdx.x; o < Q.nq * hdn; o += kThreads) {
    const int qi = o / hdn, d0 = (o - qi * hdn) * kDims;
    const int tt = qi / Q.nh;
    const int jb = max(0, Q.tok_first[tt] - j0);
    const int je = min(C, Q.tok_pos[tt] - j0 + 1);
    float acc[kDims];
#pragma unroll
    for (int e = 0; e < kDims; ++e) acc[e] = 0.0f;
#pragma unroll 4
    for (int jj = jb; jj < je; ++jj) {
      const float p = Q.p[qi * C + jj];
      float v[kDims];
      loadv(v_s + jj * hd + d0, v);
#pragma unroll
      for (int e = 0; e < kDims; ++e) acc[e] = __fmaf_rn(p, v[e], acc[e]);
    }
    if (Q.m_c[qi] != -INFINITY) {
      const FoldScales f{Q.sa[qi], Q.sb[qi]};
      float* A = Q.span_a + qi * hd + d0;
#pragma unroll
      for (int e = 0; e < kDims; ++e) A[e] = fold_acc(A[e], acc[e], f);
    }
  }
}

// Split mode: stores the span partial (M, L, A) of every query whose token owns a slot for this
// span (position >= the span's first position); partials are [slot][n_heads][hd + 2].
template <int kThreads>
__device__ __forceinline__ void store_span_partial(const Queries& Q, const AttentionArgs& a, int t0, int h0, int span) {
  const int hd = Q.hd;
  for (int o = threadIdx.x; o < Q.nq * hd; o += kThreads) {
    const int qi = o / hd, d = o - qi * hd;
    const int t = t0 + qi / Q.nh;
    if (span * kAttnSpanTokens > Q.tok_pos[qi / Q.nh]) continue;  // the token owns no slot here
    float* rec = a.partials + (int64_t{a.plan.token_partial_begin[t] + span} * a.n_heads + h0 + qi % Q.nh) * (hd + 2);
    rec[2 + d] = Q.span_a[o];
    if (d == 0) {
      rec[0] = Q.span_m[qi];
      rec[1] = Q.span_l[qi];
    }
  }
}

}  // namespace tern::cuda::attn
