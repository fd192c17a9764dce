// The fold of a (token, head)'s chunk records (attention.h, "chunk split"), shared by the chunk
// merge kernel (attention_span.cu) and the fused decode's last block (attention_fused.cuh), so
// both give the same bits: chunk records folded into span partials in chunk order from
// (-inf, 0, 0), skipping empty chunks, and those into the result in span order, skipping empty
// spans, with fold_stats / fold_acc (the expressions and order of the span blocks and their
// merge). The batch size only groups loads (the folds stay in chunk order), so it changes no value.
#pragma once

#include <cmath>

#include "backends/cuda/attention_chunk.cuh"
#include "backends/cuda/kernels.h"

namespace tern::cuda::chunk_fold {

// One thread's fold state for dimensions d = d0 + k * d_step (k < kPer): the result (M, L, A)
// and the current span's partial (Ms, Ls, As), both from (-inf, 0, 0). Every fold of chunk
// records goes through add, so they all give the same bits.
template <int kPer>
struct FoldState {
  float M = -INFINITY, L = 0.0f, Ms = -INFINITY, Ls = 0.0f;
  float A[kPer], As[kPer];

  __device__ __forceinline__ FoldState() {
#pragma unroll
    for (int k = 0; k < kPer; ++k) A[k] = As[k] = 0.0f;
  }
  // Chunk record (m, l, a) into the span partial (an empty chunk, m = -inf, is skipped); where
  // the span ends, the partial into the result (an empty span skipped) and the partial reset.
  __device__ __forceinline__ void add(float m, float l, const float (&a)[kPer], bool span_ends) {
    if (m != -INFINITY) {
      const attn::FoldScales f = attn::fold_stats(Ms, Ls, m, l);
#pragma unroll
      for (int k = 0; k < kPer; ++k) As[k] = attn::fold_acc(As[k], a[k], f);
    }
    if (span_ends) {
      if (Ms != -INFINITY) {
        const attn::FoldScales f = attn::fold_stats(M, L, Ms, Ls);
#pragma unroll
        for (int k = 0; k < kPer; ++k) A[k] = attn::fold_acc(A[k], As[k], f);
      }
      Ms = -INFINITY;
      Ls = 0.0f;
#pragma unroll
      for (int k = 0; k < kPer; ++k) As[k] = 0.0f;
    }
  }
  // out[d] = A_d / L for this thread's dimensions below hd.
  __device__ __forceinline__ void store(float* out, int hd, int d0, int d_step) const {
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int d = d0 + k * d_step;
      if (d < hd) out[d] = __fdiv_rn(A[k], L);
    }
  }
};

// Whether chunk c = c0 + b (of n_chunks), at place b of a batch that starts on a span boundary,
// is the last of its span.
__device__ __forceinline__ bool span_ends(int b, int c, int n_chunks) {
  return (b + 1) % kAttnSpanChunks == 0 || c + 1 == n_chunks;
}

struct NoHook {
  __device__ __forceinline__ void operator()() const {}
};

// Chunk c's record of the token starts at rec_of(c): [m, l, a_0 .. a_{hd-1}], read with ld. This
// thread owns dimensions d = d0 + k * d_step (k < kPer, d < hd) and writes out[d] = A_d / L;
// on_folded() runs between the last fold and that store.
template <int kPer, int kBatch, typename RecOf, typename Ld, typename OnFolded = NoHook>
__device__ __forceinline__ void fold_records_at(const RecOf& rec_of, const Ld& ld, int n_chunks, int hd, int d0,
                                                int d_step, float* out, const OnFolded& on_folded = {}) {
  static_assert(kBatch % kAttnSpanChunks == 0, "a batch ends on a span boundary");
  FoldState<kPer> st;
  for (int c0 = 0; c0 < n_chunks; c0 += kBatch) {
    float m[kBatch], l[kBatch], av[kBatch][kPer];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      m[b] = -INFINITY;
      l[b] = 0.0f;
      if (c0 + b < n_chunks) {
        const float* rec = rec_of(c0 + b);
        m[b] = ld(rec);
        l[b] = ld(rec + 1);
#pragma unroll
        for (int k = 0; k < kPer; ++k) {
          const int d = d0 + k * d_step;
          av[b][k] = d < hd ? ld(rec + 2 + d) : 0.0f;
        }
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (c0 + b >= n_chunks) break;
      st.add(m[b], l[b], av[b], span_ends(b, c0 + b, n_chunks));
    }
  }
  on_folded();
  st.store(out, hd, d0, d_step);
}

// Records at rec0 + c * stride (the chunk merge kernel's global records). kL2: loads that bypass
// L1 (records written by other blocks of the same launch).
template <int kPer, int kBatch, bool kL2, typename OnFolded = NoHook>
__device__ __forceinline__ void fold_records(const float* rec0, int64_t stride, int n_chunks, int hd, int d0, int d_step,
                                             float* out, const OnFolded& on_folded = {}) {
  fold_records_at<kPer, kBatch>([=](int c) { return rec0 + c * stride; },
                                [](const float* p) { return kL2 ? __ldcg(p) : *p; }, n_chunks, hd, d0, d_step, out,
                                on_folded);
}

}  // namespace tern::cuda::chunk_fold
