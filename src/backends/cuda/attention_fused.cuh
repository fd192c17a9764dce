// Fused decode (attention.h, "fused decode"; AttentionArgs::fused): the pieces a chunk-split
// block of the two-chunk span kernels (attention_span_pair.cu) runs so that one launch does a
// decode layer's rope of q and k, its K/V cache write, the attention and the chunk merge:
//   - load_q: the block's q heads, rotated as they are loaded (rope.cuh, the rope kernel's
//     expressions), instead of reading q rotated by the rope launch;
//   - is_new_row / write_new_rows: the rows of the step's tokens (position == a token's) are not
//     copied from the cache (nobody has written them yet); the block computes them itself (k
//     rotated, v as is, converted to the cache type as the rope launch's cache write converts
//     them) into its K/V ring, and the block of KV head slice 0 also writes them to the cache.
//     Only the block whose rows hold a position reads that row, so no block waits for another;
//   - merge_if_last: each block counts itself done on a per-(tile, KV head x head slice) counter
//     after its chunk records are stored and fenced; the last of the tile's live blocks folds the
//     records (attention_chunk_fold.cuh, the chunk merge kernel's sequence: the same bits) and
//     puts the counter back to zero for the next launch or graph replay.
// The backend fuses only steps of one token per sequence (layout max_tile_tokens == 1): with
// several tokens of a sequence in a step, one tile's blocks would read rows another tile writes.
#pragma once

#include <cmath>

#include "backends/cuda/async_copy.cuh"
#include "backends/cuda/attention_chunk.cuh"
#include "backends/cuda/attention_chunk_fold.cuh"
#include "backends/cuda/common.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/rope.cuh"

namespace tern::cuda::fused {

// The rotation factors (rope.cuh rope_factors) of every pair of the tile's tokens into f
// ([nt][n_rot / 2][c, s]): they depend on the plan's positions and the model's frequencies only
// (written at load), so a block may compute them before its PDL wait (AttentionArgs::early_kv 2).
template <int kThreads>
__device__ __forceinline__ void rope_factors_of(const AttentionArgs& a, const int* tok_pos, int nt, float* f) {
  const AttentionRope& r = a.rope;
  const int half = r.n_rot / 2;
  for (int i = threadIdx.x; i < nt * half; i += kThreads) {
    const int tt = i / half, e = i - tt * half;
    rope_factors(tok_pos[tt], r.inv_freq[e], r.mscale, f[2 * i], f[2 * i + 1]);
  }
}

// Pair e of tile token tt rotated: from the factors f (rope_factors_of, visible to the block)
// when given, else computed here (the same expressions: the same bits).
__device__ __forceinline__ void rotate_pair(const AttentionRope& r, const float* f, int half, int position, int tt, int e,
                                            float x0, float x1, float& y0, float& y1) {
  if (f != nullptr) {
    const int i = tt * half + e;
    rope_apply(f[2 * i], f[2 * i + 1], x0, x1, y0, y1);
  } else {
    rope_rotate(position, r.inv_freq[e], r.mscale, x0, x1, y0, y1);
  }
}

// The block's queries (query qi: head h0 + qi % nh of tile token qi / nh), rotated, into q_s
// ([nq][hd]): one thread per rotated pair, then the dimensions past n_rot as they are.
template <int kThreads>
__device__ __forceinline__ void load_q(const AttentionArgs& a, float* q_s, const int* tok_pos, int t0, int h0, int nh,
                                       int nq, int hd, const float* factors = nullptr) {
  const AttentionRope& r = a.rope;
  const int half = r.n_rot / 2, rest = hd - 2 * half, per_q = half + rest;
  const bool neox = r.neox != 0;
  for (int i = threadIdx.x; i < nq * per_q; i += kThreads) {
    const int qi = i / per_q, e = i - qi * per_q, tt = qi / nh;
    const float* x = a.q + int64_t{t0 + tt} * a.q_stride + int64_t{h0 + qi % nh} * hd;
    float* y = q_s + qi * hd;
    if (e < half) {
      const int i0 = rope_i0(e, half, neox), i1 = rope_i1(e, half, neox);
      rotate_pair(r, factors, half, tok_pos[tt], tt, e, x[i0], x[i1], y[i0], y[i1]);
    } else {
      const int d = 2 * half + (e - half);
      y[d] = x[d];
    }
  }
}

// Whether position j is one of the tile's tokens' (their K/V rows are computed, not copied).
__device__ __forceinline__ bool is_new_row(const int* tok_pos, int nt, int j) {
  bool hit = false;
  for (int tt = 0; tt < nt; ++tt) hit |= tok_pos[tt] == j;
  return hit;
}

__device__ __forceinline__ void store_elem(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store_elem(float* p, float v) { *p = v; }

// The K and V rows (KV head g) of the tile's tokens whose positions fall in the block's rows
// [j_begin, j_begin + n_rows): into the ring (chunk i of the block in stage i % n_stages, [K, V]
// [C][hd] each) and, when write_cache, into the cache at the token's slot. Values as the rope
// launch computes and stores them (elementwise.cu rope_kernel, store_cache).
template <typename T, int kThreads>
__device__ __forceinline__ void write_new_rows(const AttentionArgs& a, const int* tok_pos, int t0, int nt, int g,
                                               bool write_cache, int j_begin, int n_rows, T* ring, int n_stages,
                                               const float* factors = nullptr) {
  const AttentionRope& r = a.rope;
  const int hd = a.head_dim, half = r.n_rot / 2;
  const bool neox = r.neox != 0;
  constexpr int C = kAttnChunkTokens;
  for (int tt = 0; tt < nt; ++tt) {
    const int j = tok_pos[tt] - j_begin;
    if (j < 0 || j >= n_rows) continue;  // (the same for every thread)
    T* k_s = ring + static_cast<size_t>((j / C) % n_stages) * 2 * C * hd + (j % C) * hd;
    T* v_s = k_s + C * hd;
    const int t = t0 + tt;
    const float* k = r.k + int64_t{t} * r.k_stride + int64_t{g} * hd;
    const float* v = r.v + int64_t{t} * r.v_stride + int64_t{g} * hd;
    const int64_t slot = a.plan.kv_slots[t];
    T* k_c = static_cast<T*>(const_cast<void*>(a.k_cache)) + slot * a.k_cache_stride + int64_t{g} * hd;
    T* v_c = static_cast<T*>(const_cast<void*>(a.v_cache)) + slot * a.v_cache_stride + int64_t{g} * hd;
    for (int e = threadIdx.x; e < hd + (hd - half); e += kThreads) {
      if (e < hd) {  // V
        store_elem(v_s + e, v[e]);
        if (write_cache) store_elem(v_c + e, v[e]);
      } else if (e - hd < half) {  // a rotated K pair
        const int i = e - hd, i0 = rope_i0(i, half, neox), i1 = rope_i1(i, half, neox);
        float y0, y1;
        rotate_pair(r, factors, half, tok_pos[tt], tt, i, k[i0], k[i1], y0, y1);
        store_elem(k_s + i0, y0);
        store_elem(k_s + i1, y1);
        if (write_cache) {
          store_elem(k_c + i0, y0);
          store_elem(k_c + i1, y1);
        }
      } else {  // a K dimension past n_rot
        const int d = 2 * half + (e - hd - half);
        store_elem(k_s + d, k[d]);
        if (write_cache) store_elem(k_c + d, k[d]);
      }
    }
  }
}

// The lean last block's fold (kAttnFusedLeanMerge): chunk_fold::fold_records_at's sequence, the
// chunk records folded into span partials in chunk order from (-inf, 0, 0), skipping empty
// chunks, and those into the result in span order, skipping empty spans, with each record's (m,
// l) read from st ([chunk][m, l] in shared memory, -inf past the token's chunks) and its a values
// from the records (L2 loads, kBatch records in flight). The first batch's loads are issued
// before the barrier that publishes st, so both come in one round trip. Every thread of the block
// calls it (the barrier); n_chunks 0: a thread without a query (no loads, no output).
template <int kPer, int kBatch>
__device__ __forceinline__ void fold_staged(const float* rec0, int64_t stride, const float* st, int n_chunks, int hd,
                                            int d0, int d_step, float* out) {
  static_assert(kBatch % kAttnSpanChunks == 0, "a batch ends on a span boundary");
  chunk_fold::FoldState<kPer> fold;
  float av[kBatch][kPer];
  auto load_batch = [&](int c0) {
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        const int d = d0 + k * d_step;
        av[b][k] = c0 + b < n_chunks && d < hd ? __ldcg(rec0 + (c0 + b) * stride + 2 + d) : 0.0f;
      }
    }
  };
  load_batch(0);
  __syncthreads();  // st complete
  for (int c0 = 0; c0 < n_chunks; c0 += kBatch) {
    if (c0 > 0) load_batch(c0);
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (c0 + b >= n_chunks) break;
      fold.add(st[2 * (c0 + b)], st[2 * (c0 + b) + 1], av[b], chunk_fold::span_ends(b, c0 + b, n_chunks));
    }
  }
  if (n_chunks == 0) return;
  fold.store(out, hd, d0, d_step);
}

// The end of a fused chunk-split block, after its chunk records are stored (every thread of the
// block calls it): counts the block done; the last live block of the (tile, y) folds the tile's
// nt x nh queries from their records into out. Live blocks: those whose first row is at most the
// tile's last position max_pos (the others returned without records or a count).
template <int kThreads>
__device__ __forceinline__ void merge_if_last(const AttentionArgs& a, int tile, int y, int ny, int max_pos,
                                              const int* tok_pos, const int* tok_partial, int t0, int nt, int h0,
                                              int nh, float* scratch, size_t scratch_bytes) {
  const bool lean = (a.fused & kAttnFusedLeanMerge) != 0;
  // The block's record stores (every thread's, observed by thread 0 through the barrier) are
  // released at gpu scope by thread 0 before its count: one release per block instead of one
  // per thread (the release pattern of split-K semaphores). The previous form, two
  // sequentially consistent fences (membar.sc.gpu) around a relaxed atomic, measured 3 us
  // slower per layer than the chunk merge kernel (session 6); the lean form is one acq_rel
  // atomic: its release covers the block's stores (cumulativity through the barrier), its
  // acquire the other blocks' records for the last one (read after the next barrier).
  __syncthreads();
  int last = 0;
  if (threadIdx.x == 0) {
    int* counter = a.merge_counters + int64_t{tile} * ny + y;
    const int live = max_pos / (a.chunk_split * kAttnChunkTokens) + 1;
    if (lean) {
      int old = 0;
      asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;" : "=r"(old) : "l"(counter) : "memory");
      last = old == live - 1 ? 1 : 0;
      if (last) *counter = 0;  // every other block has counted: ready for the next launch
    } else {
      __threadfence();
      last = atomicAdd(counter, 1) == live - 1 ? 1 : 0;
      if (last) {
        *counter = 0;     // every other block has counted: ready for the next launch
        __threadfence();  // the other blocks' records, seen through their fences
      }
    }
  }
  if (!__syncthreads_or(last)) return;
  constexpr int kPerQuery = 64, kPass = kThreads / kPerQuery;
  const int hd = a.head_dim, nq = nt * nh;
  const int64_t stride = int64_t{a.n_heads} * (hd + 2);
  auto rec0_of = [&](int qi) {
    return a.partials + (int64_t{tok_partial[qi / nh]} * kAttnSpanChunks * a.n_heads + h0 + qi % nh) * (hd + 2);
  };
  const int n_max = max_pos / kAttnChunkTokens + 1;
  if (lean && nq <= kPass && hd <= 2 * kPerQuery && sizeof(float) * 2 * nq * n_max <= scratch_bytes) {
    // Every record's (m, l) into shared memory and the thread's first batch of a values into
    // registers, all issued before one barrier: one round trip below 20 (24) chunks.
    cp_async_wait<0>();  // (the ring held only landed chunks; scratch overlaps it)
    for (int i = threadIdx.x; i < nq * n_max; i += kThreads) {
      const int qi = i / n_max, c = i - qi * n_max;
      const bool valid = c <= tok_pos[qi / nh] / kAttnChunkTokens;  // the token reaches chunk c
      const float* rec = rec0_of(qi) + c * stride;
      scratch[2 * i] = valid ? __ldcg(rec) : -INFINITY;
      scratch[2 * i + 1] = valid ? __ldcg(rec + 1) : 0.0f;
    }
    const int qi = static_cast<int>(threadIdx.x) / kPerQuery, d0 = static_cast<int>(threadIdx.x) % kPerQuery;
    const bool live = qi < nq;
    const float* rec0 = live ? rec0_of(qi) : a.partials;
    const int n_chunks = live ? tok_pos[qi / nh] / kAttnChunkTokens + 1 : 0;
    const float* st = scratch + 2 * (live ? qi : 0) * n_max;
    float* out = live ? a.out + int64_t{t0 + qi / nh} * a.out_stride + int64_t{h0 + qi % nh} * hd : nullptr;
    if (hd <= kPerQuery) {
      fold_staged<1, 24>(rec0, stride, st, n_chunks, hd, d0, kPerQuery, out);
    } else {
      fold_staged<2, 20>(rec0, stride, st, n_chunks, hd, d0, kPerQuery, out);
    }
    return;
  }
  // 64 threads per query, 4 queries per pass, up to 4 dimensions each (head_dim <= 256); at
  // head_dim <= 128 two, with twice the records in flight per batch (16 chunks: a 1k context's
  // 17 records in two round trips).
  for (int q0 = 0; q0 < nq; q0 += kPass) {
    const int qi = q0 + static_cast<int>(threadIdx.x) / kPerQuery;
    if (qi >= nq) break;
    const int tt = qi / nh, h = h0 + qi % nh;
    const float* rec0 = rec0_of(qi);
    const int n_chunks = tok_pos[tt] / kAttnChunkTokens + 1, d0 = static_cast<int>(threadIdx.x) % kPerQuery;
    float* out = a.out + int64_t{t0 + tt} * a.out_stride + int64_t{h} * hd;
    if (hd <= 2 * kPerQuery) {
      chunk_fold::fold_records<2, 16, true>(rec0, stride, n_chunks, hd, d0, kPerQuery, out);
    } else {
      chunk_fold::fold_records<kAttnMaxHeadDim / kPerQuery, 8, true>(rec0, stride, n_chunks, hd, d0, kPerQuery, out);
    }
  }
}

}  // namespace tern::cuda::fused
