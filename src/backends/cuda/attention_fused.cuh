// Fused decode (attention.h, "fused decode"; AttentionArgs::fused): the pieces a chunk-split
// block of the two-chunk span kernels (attention_span_pair.cu) runs so that one launch does a
// decode layer's rope of q and k, its K/V cache write and the attention (the chunk merge kernel
// follows):
//   - load_q: the block's q heads, rotated as they are loaded (rope.cuh, the rope kernel's
//     expressions), instead of reading q rotated by the rope launch;
//   - is_new_row / write_new_rows: the rows of the step's tokens (position == a token's) are not
//     copied from the cache (nobody has written them yet); the block computes them itself (k
//     rotated, v as is, converted to the cache type as the rope launch's cache write converts
//     them) into its K/V ring, and the block of KV head slice 0 also writes them to the cache.
//     Only the block whose rows hold a position reads that row, so no block waits for another.
// The backend fuses only steps of one token per sequence (layout max_tile_tokens == 1): with
// several tokens of a sequence in a step, one tile's blocks would read rows another tile writes.
#pragma once

#include <cmath>

#include "backends/cuda/async_copy.cuh"
#include "backends/cuda/attention_chunk.cuh"
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

}  // namespace tern::cuda::fused
