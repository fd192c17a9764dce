// The two-chunk span decode kernel (attention.h, "split mode"; TERN_CUDA_ATTN_SPAN=2).
//
// Why: the one-chunk span kernel (attention_span.cu) measured bound by the issue rate and latency
// of its per-chunk steps, not by its copies (bench/RESULTS.md: more bytes in flight made it
// slower). Per 4 queries x 64 keys it spent 16 shuffles + 16 adds of the segment tree per 32
// FMAs, 4 block barriers, and a softmax that kept half the warps idle. This kernel computes the
// same floats with fewer instructions and barriers:
//   - scores: a lane holds two adjacent segments (2 s, 2 s + 1) of a key, so the tree's first
//     level is an add in registers and only the upper levels shuffle (12 shuffles + 16 adds per 64
//     FMAs); the K row is converted once for 4 queries. The lanes of a quarter warp load their two
//     segments in an order that puts them on 8 different 16-byte bank groups;
//   - two chunks per step: one barrier set (landed, scores, softmax, values) per two chunks, the
//     softmax of both chunks of a query in one warp (8 independent reductions instead of 4), and
//     each value thread runs the two chunks' fmaf chains side by side (two independent chains).
// The float sequence per query is attention.h's, exactly as attention_chunk.cuh computes it:
//   - a segment partial is the fmaf chain over its 8 dimensions from 0; the tree pairs segments
//     (2 s, 2 s + 1), then lanes at xor distance 1, 2, 4, ...: the butterfly over seg_lanes lanes
//     (float addition is commutative, so a + b and b + a are the same bits);
//   - p, m and l: chunk_softmax's expressions per chunk; the span statistics fold chunk 2 i before
//     chunk 2 i + 1 (one lane does both folds in order);
//   - each chunk's a_d is its own fmaf chain from 0 in position order over the query's valid
//     positions, folded into the span A in chunk order.
// The merge is attention_span.cu's. Bit-identical to the one-chunk kernel (tests/gpu).
#include <algorithm>
#include <cmath>

#include "backends/cuda/async_copy.cuh"
#include "backends/cuda/attention.h"
#include "backends/cuda/attention_chunk.cuh"
#include "backends/cuda/attention_span.cuh"
#include "backends/cuda/attention_span_merge.cuh"
#include "backends/cuda/common.cuh"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/launch.cuh"
#include "core/check.h"

namespace tern::cuda {
namespace {

using attn::C;
using attn::kSeg;
constexpr int kThreads = kSpanThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kPair = 2;                     // chunks per step
constexpr int kQueriesPerPass = attn::kQueriesPerPass;
static_assert(kAttnSpanTokens <= kThreads, "a span's block-table lookups take one thread each");
static_assert(kAttnSpanChunks % kPair == 0, "a span is whole pairs of chunks");

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
template <typename T>
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
#pragma unroll
        for (int qq = 0; qq < kQueriesPerPass; ++qq) {
          const int qi = qg + qq;
          if (qi >= Q.nq) break;
          const int tt = qi / Q.nh;
          float s = -INFINITY;
          if (j <= Q.tok_pos[tt] && j >= Q.tok_first[tt]) {
            s = __fmul_rn(dot[qq], scale);
            if (softcap > 0.0f) s = __fmul_rn(softcap, tanhf(__fdiv_rn(s, softcap)));
          }
          Q.p[qi * (kPair * C) + jj] = s;
        }
      }
    }
  }
}

// chunk_softmax's statistics for the step's n_chunks chunks of every query (a warp per query,
// both chunks' reductions side by side), folded into the span statistics in chunk order.
__device__ __forceinline__ void pair_softmax(const PairQueries& Q, int n_chunks) {
  const int lane = threadIdx.x & 31;
  for (int qi = threadIdx.x >> 5; qi < Q.nq; qi += kWarps) {
    float m[kPair], l[kPair];
#pragma unroll
    for (int c = 0; c < kPair; ++c) {
      m[c] = -INFINITY;
      l[c] = 0.0f;
      if (c >= n_chunks) continue;
      float* pr = Q.p + qi * (kPair * C) + c * C;
      const float s0 = pr[lane], s1 = pr[lane + 32];
      m[c] = warp_max(fmaxf(s0, s1));
      float p0 = 0.0f, p1 = 0.0f;
      if (m[c] != -INFINITY) {
        p0 = __expf(__fsub_rn(s0, m[c]));
        p1 = __expf(__fsub_rn(s1, m[c]));
        l[c] = warp_sum_tree(__fadd_rn(p0, p1));
      }
      pr[lane] = p0;
      pr[lane + 32] = p1;
    }
    if (lane == 0) {
#pragma unroll
      for (int c = 0; c < kPair; ++c) {
        if (c >= n_chunks) break;
        Q.m_c[c * Q.na + qi] = m[c];
        Q.l_c[c * Q.na + qi] = l[c];
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

// One block per (split item, KV head, head slice), as the one-chunk span kernel; chunk c of the
// span lives in stage c % kStages, and a step consumes chunks 2 i and 2 i + 1 while chunks up to
// 2 i + kStages - 1 are in flight.
template <typename T, int kStages>
__global__ void __launch_bounds__(kThreads, 2) attention_span_pair_kernel(AttentionArgs a) {
  static_assert(kStages >= kPair, "a step needs both of its chunks resident");
  extern __shared__ __align__(16) unsigned char sm[];
  const SpanShape sh = span_shape_of(a);
  const DevicePlan& P = a.plan;
  const int tid = threadIdx.x, hd = a.head_dim;
  const SpanItem it = span_item_of(a);
  const int tile = it.tile, span = it.span;
  const int g = blockIdx.y / sh.n_slices, slice = blockIdx.y % sh.n_slices;
  const int h0 = g * sh.group + slice * sh.hpb;
  const int nh = min(sh.hpb, sh.group - slice * sh.hpb);
  const int t0 = it.t0, nt = it.nt, n_tile_spans = it.n_tile_spans;
  const int nq = nt * nh;

  const SpanSmem L = span_smem(a, sh, kStages, kPair);
  float* q_s = reinterpret_cast<float*>(sm + L.q);
  float* span_a = reinterpret_cast<float*>(sm + L.span_a);
  float* p_s = reinterpret_cast<float*>(sm + L.p);
  float* stats = reinterpret_cast<float*>(sm + L.stats);
  const int na = sh.nq_alloc;
  int* tok_pos = reinterpret_cast<int*>(sm + L.tok);
  int* tok_first = tok_pos + kAttnTileTokens;
  int* tok_partial = tok_first + kAttnTileTokens;  // the folded merge's partial_begin of each token
  int* slots = reinterpret_cast<int*>(sm + L.slots);
  T* kv_s = reinterpret_cast<T*>(sm + L.kv);
  PairQueries Q;
  Q.nq = nq, Q.nh = nh, Q.hd = hd, Q.na = na, Q.seg_lanes = attn::seg_lanes_of(hd);
  Q.q = q_s, Q.p = p_s, Q.span_a = span_a;
  Q.m_c = stats, Q.l_c = stats + 2 * na, Q.span_m = stats + 4 * na, Q.span_l = stats + 5 * na;
  Q.sa = stats + 6 * na, Q.sb = stats + 8 * na;
  Q.tok_pos = tok_pos, Q.tok_first = tok_first;

  // As the one-chunk kernel: only the plan is read before the PDL wait.
  if (tid < nt) {
    const int pos = P.positions[t0 + tid];
    tok_pos[tid] = pos;
    tok_first[tid] = a.sliding_window > 0 ? max(0, pos + 1 - a.sliding_window) : 0;
    if (n_tile_spans > 1) tok_partial[tid] = P.token_partial_begin[t0 + tid];
  }
  const int32_t* blocks = P.block_ids + P.block_offsets[P.seq_index[t0]];
  __syncthreads();
  int max_pos = 0;
  for (int tt = 0; tt < nt; ++tt) max_pos = max(max_pos, tok_pos[tt]);
  const int j_begin = span * kAttnSpanTokens;
  const int n_rows = min(kAttnSpanTokens, max_pos + 1 - j_begin);
  if (tid < n_rows) {
    const int j = j_begin + tid;
    slots[tid] = blocks[j / a.block_tokens] * a.block_tokens + j % a.block_tokens;
  }
  pdl_wait();
  pdl_launch_dependents();
  __syncthreads();

  const SpanKvRing<T, kStages> kv(a, g, slots, kv_s, n_rows);
  const int n_iter = kv.n_iter;
  auto stage_k = [&](int i) { return kv.k(i); };
  auto issue = [&](int i) { kv.issue(i, tid); };
  // Chunks 0 .. kStages - 3 now; each step issues two more (its first step: up to kStages - 1).
  for (int i = 0; i + kPair < kStages; ++i) issue(i);

  for (int i = tid; i < nq * hd; i += kThreads) {
    const int qi = i / hd, d = i - qi * hd;
    q_s[i] = a.q[int64_t{t0 + qi / nh} * a.q_stride + int64_t{h0 + qi % nh} * hd + d];
    span_a[i] = 0.0f;
  }
  for (int i = tid; i < nq; i += kThreads) {
    Q.span_m[i] = -INFINITY;
    Q.span_l[i] = 0.0f;
  }

  for (int i = 0; i < n_iter; i += kPair) {
    // Stages of chunks i + kStages - 2 and i + kStages - 1 held chunks i - 2 and i - 1, which
    // the previous step finished with (its last barrier).
    issue(i + kStages - 2);
    issue(i + kStages - 1);
    cp_async_wait<kStages - kPair>();  // chunks i and i + 1 landed (this thread's pieces)
    __syncthreads();                   // ... every thread's, and q / the span state the first time
    const int n_chunks = min(kPair, n_iter - i);
    const int j0 = j_begin + i * C;
    const T* k0 = stage_k(i);
    const T* k1 = stage_k(i + 1);
    pair_scores(Q, k0, k1, n_chunks * C, j0, a.scale, a.softcap);
    __syncthreads();
    pair_softmax(Q, n_chunks);
    __syncthreads();
    pair_values<2>(Q, k0 + C * hd, k1 + C * hd, n_chunks, j0);
    __syncthreads();  // both stages, p_s and the statistics are free for the next step
  }
  const attn::Queries out{nq,      nh,      hd,      Q.seg_lanes, q_s,      p_s,      Q.m_c,     Q.l_c,
                          Q.span_m, Q.span_l, span_a, Q.sa,       Q.sb,     tok_pos,  tok_first};
  span_merge::finish_span<kThreads>(out, a, tile, n_tile_spans, tok_partial, t0, nt, h0, nh, span, sm + L.kv,
                                    L.total - L.kv);
}

template <typename T, int kStages>
void set_pair_smem(int max_smem_bytes) {
  TERN_CUDA_CHECK(cudaFuncSetAttribute(attention_span_pair_kernel<T, kStages>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem_bytes));
}

template <typename T>
void launch_pair(const AttentionArgs& a, const LaunchEnv& env, dim3 grid, size_t smem) {
  switch (a.kv_stages) {
    case 2: launch_kernel(env, attention_span_pair_kernel<T, 2>, grid, kThreads, smem, a); break;
    case 3: launch_kernel(env, attention_span_pair_kernel<T, 3>, grid, kThreads, smem, a); break;
    default: launch_kernel(env, attention_span_pair_kernel<T, 4>, grid, kThreads, smem, a); break;
  }
}

}  // namespace

void launch_attention_span_pair(const AttentionArgs& a, const LaunchEnv& env, dim3 grid, size_t smem) {
  TERN_CHECK_MSG(a.kv_stages >= kPair && a.kv_stages <= kSpanMaxStages, "span pair kernel: kv_stages out of 2..4");
  if (a.kv_dtype == DType::F16) {
    launch_pair<__half>(a, env, grid, smem);
  } else {
    launch_pair<float>(a, env, grid, smem);
  }
}

void init_attention_span_pair(int max_smem_bytes) {
  set_pair_smem<__half, 2>(max_smem_bytes);
  set_pair_smem<__half, 3>(max_smem_bytes);
  set_pair_smem<__half, 4>(max_smem_bytes);
  set_pair_smem<float, 2>(max_smem_bytes);
  set_pair_smem<float, 3>(max_smem_bytes);
  set_pair_smem<float, 4>(max_smem_bytes);
}

}  // namespace tern::cuda
