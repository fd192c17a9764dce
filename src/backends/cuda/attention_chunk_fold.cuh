// The fold of a (token, head)'s chunk records (attention.h, "chunk split"), shared by the chunk
// merge kernel (attention_span.cu) and the fused decode's last block (attention_fused.cuh), so
// both give the same bits: chunk records folded into span partials in chunk order from
// (-inf, 0, 0), skipping empty chunks, and those into the result in span order, skipping empty
// spans, with fold_stats / fold_acc (the expressions and order of the span blocks and their
// merge). The batch size only groups loads (the folds stay in chunk order), so it changes no value.
#pragma once

#include <cmath>

#include "backends/cuda/async_copy.cuh"
#include "backends/cuda/attention_chunk.cuh"
#include "backends/cuda/kernels.h"

namespace tern::cuda::chunk_fold {

// Chunk c's record of the token starts at rec_of(c): [m, l, a_0 .. a_{hd-1}], read with ld. This
// thread owns dimensions d = d0 + k * d_step (k < kPer, d < hd) and writes out[d] = A_d / L.
template <int kPer, int kBatch, typename RecOf, typename Ld>
__device__ __forceinline__ void fold_records_at(const RecOf& rec_of, const Ld& ld, int n_chunks, int hd, int d0,
                                                int d_step, float* out) {
  static_assert(kBatch % kAttnSpanChunks == 0, "a batch ends on a span boundary");
  float M = -INFINITY, L = 0.0f, Ms = -INFINITY, Ls = 0.0f;
  float A[kPer], As[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) A[k] = As[k] = 0.0f;
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
      if (m[b] != -INFINITY) {
        const attn::FoldScales f = attn::fold_stats(Ms, Ls, m[b], l[b]);
#pragma unroll
        for (int k = 0; k < kPer; ++k) As[k] = attn::fold_acc(As[k], av[b][k], f);
      }
      if ((b + 1) % kAttnSpanChunks == 0 || c0 + b + 1 == n_chunks) {  // the span is complete
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
  }
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int d = d0 + k * d_step;
    if (d < hd) out[d] = __fdiv_rn(A[k], L);
  }
}

// Records at rec0 + c * stride (the chunk merge kernel's global records). kL2: loads that bypass
// L1 (records written by other blocks of the same launch).
template <int kPer, int kBatch, bool kL2>
__device__ __forceinline__ void fold_records(const float* rec0, int64_t stride, int n_chunks, int hd, int d0, int d_step,
                                             float* out) {
  fold_records_at<kPer, kBatch>([=](int c) { return rec0 + c * stride; },
                                [](const float* p) { return kL2 ? __ldcg(p) : *p; }, n_chunks, hd, d0, d_step, out);
}

// fold_records' sequence in compact code, for a block folding the records of nq (token, head)
// queries (kAttnFusedLeanMerge: the fused decode's last block, and the chunk merge kernel). Why:
// fold_records unrolls a batch of records into ~10 KB of straight-line code per instance, which
// the one block that runs it fetches cold (ncu, session 8: the last block of the fused merge ran
// ~28k cycles past the others at ctx 1k; the chunk merge kernel's blocks ~8k cycles for 17
// records). Here the records of a batch of chunks are copied into shared memory (8-byte
// cp.async, every copy of the batch in flight at once: one round trip), then every thread folds
// its outputs o = tid, tid + kThreads, ... (query o / hd, dimension o % hd) in a rolled loop over
// the chunks: per query, chunk records into span partials in chunk order from (-inf, 0, 0),
// skipping empty chunks, spans into the result in span order, skipping empty spans, with
// fold_stats / fold_acc: the same expressions in the same order as fold_records_at, so the same
// bits. Query qi's chunk c record starts at rec0_of(qi) + c * stride ([m, l, a_0 .. a_{hd-1}],
// 8-byte aligned); n_chunks_of(qi) its chunk count (at most n_max), out_of(qi) its output row.
// sm / sm_bytes: shared memory for at least one chunk's nq records. Every thread of the block
// calls it (barriers). Records written by other blocks of the launch need an acquire before the
// call (the copies go through L1, as the folded span merge's do).
template <int kThreads, int kMaxOut, typename Rec0Of, typename NChunksOf, typename OutOf>
__device__ __forceinline__ void fold_staged(const Rec0Of& rec0_of, const NChunksOf& n_chunks_of, const OutOf& out_of,
                                            int nq, int n_max, int hd, int64_t stride, float* sm, size_t sm_bytes) {
  const int rec_f = hd + 2, per_chunk = nq * rec_f;
  const int batch = max(1, min(n_max, static_cast<int>(sm_bytes / (sizeof(float) * per_chunk))));
  float M[kMaxOut], L[kMaxOut], Ms[kMaxOut], Ls[kMaxOut], A[kMaxOut], As[kMaxOut];
  int qo[kMaxOut], dout[kMaxOut], nco[kMaxOut];
#pragma unroll
  for (int k = 0; k < kMaxOut; ++k) {
    M[k] = Ms[k] = -INFINITY;
    L[k] = Ls[k] = A[k] = As[k] = 0.0f;
    const int o = static_cast<int>(threadIdx.x) + k * kThreads;
    qo[k] = o < nq * hd ? o / hd : -1;
    dout[k] = o < nq * hd ? o - qo[k] * hd : 0;
    nco[k] = qo[k] >= 0 ? n_chunks_of(qo[k]) : 0;
  }
  const int pairs = rec_f / 2;  // 8-byte copies per record
  for (int c0 = 0; c0 < n_max; c0 += batch) {
    const int nb = min(batch, n_max - c0);
    if (c0 > 0) __syncthreads();  // every thread is done with the previous batch
#pragma unroll 1
    for (int e = threadIdx.x; e < nb * nq * pairs; e += kThreads) {
      const int rq = e / pairs, j = e - rq * pairs;  // record rq = chunk (c0 + rq / nq), query rq % nq
      const int c = c0 + rq / nq, qi = rq - (rq / nq) * nq;
      if (c < n_chunks_of(qi)) cp_async8(sm + rq * rec_f + 2 * j, rec0_of(qi) + c * stride + 2 * j);
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
#pragma unroll 1
    for (int c = c0; c < c0 + nb; ++c) {
#pragma unroll
      for (int k = 0; k < kMaxOut; ++k) {
        if (c >= nco[k]) continue;
        const float* rec = sm + ((c - c0) * nq + qo[k]) * rec_f;
        const float m = rec[0];
        if (m != -INFINITY) {
          const attn::FoldScales f = attn::fold_stats(Ms[k], Ls[k], m, rec[1]);
          As[k] = attn::fold_acc(As[k], rec[2 + dout[k]], f);
        }
        if ((c + 1) % kAttnSpanChunks == 0 || c + 1 == nco[k]) {  // the span is complete
          if (Ms[k] != -INFINITY) {
            const attn::FoldScales f = attn::fold_stats(M[k], L[k], Ms[k], Ls[k]);
            A[k] = attn::fold_acc(A[k], As[k], f);
          }
          Ms[k] = -INFINITY;
          Ls[k] = 0.0f;
          As[k] = 0.0f;
        }
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kMaxOut; ++k) {
    if (qo[k] >= 0) out_of(qo[k])[dout[k]] = __fdiv_rn(A[k], L[k]);
  }
}

}  // namespace tern::cuda::chunk_fold
