// The span partials' merge of the span decode kernels (attention.h, "split mode"), as device
// functions shared by the separate merge kernel (attention_span.cu) and the merge the span
// kernels run in their last block (AttentionArgs::fold_merge). Both fold a (token, head)'s span
// partials in span order with exactly these expressions, so the two give the same bits; only the
// thread count (each thread owns dimensions tid + k * kThreads: the arithmetic of a dimension
// does not depend on which thread runs it), the batch size (the running max is exact, so batches
// change no value) and the loads differ.
//
// Folded merge (fold_merge = 1): the last of a tile's span blocks to finish (per KV head and head
// slice) merges the tile's tokens x heads itself, which saves the merge kernel's launch and its
// gap in the step. "Last" is an atomic counter per (tile, KV head x head slice) in a device buffer the
// backend zero-fills once: every block fences its partial stores and increments the counter; the
// block that sees n_spans - 1 fences again (acquire), reads every partial with L1-bypassing loads
// (another SM wrote them during this kernel, and this SM's L1 may hold a line of a neighbouring
// record it read earlier), and puts the counter back to zero, so the next launch (or CUDA graph
// replay) starts from zero. It merges all its (token, head) queries at once where their partials
// fit its free shared memory (the K/V ring), else one after another. A tile with one span needs
// no counter: its only block merges its own partial straight from shared memory (the same
// expressions as a one-span merge).
#pragma once

#include <cmath>

#include "backends/cuda/async_copy.cuh"
#include "backends/cuda/attention_chunk.cuh"
#include "backends/cuda/common.cuh"
#include "backends/cuda/kernels.h"

namespace tern::cuda {

// Where a merge kernel (the chunk merge, the sliced span merge) lets the next kernel of the
// stream launch (griddepcontrol.launch_dependents): right after its own wait (enter), or after
// its last fold, before the store (folded). The next kernel is the o projection, whose blocks
// stream their first weight stages as soon as they launch; the merge only reads records from L2
// and folds them.
constexpr int kMergeTriggerEnter = 0, kMergeTriggerFolded = 1;

}  // namespace tern::cuda

namespace tern::cuda::span_merge {

// Spans per merge batch of the merge kernel: 64 KB of partial A values at most.
__host__ __device__ inline int batch_spans(int head_dim) { return min(128, max(32, 16384 / head_dim)); }
// Shared memory a batch of `batch` spans takes: [batch][hd] A, then max, sum and two fold scales.
__host__ __device__ inline size_t batch_bytes(int head_dim, int batch) {
  return sizeof(float) * (static_cast<size_t>(batch) * head_dim + 4 * static_cast<size_t>(batch));
}

// The fold scales of a span partial with max m folded after spans whose running max is run
// (-inf before the first span); returns the new running max. m > -inf (empty spans are skipped).
__device__ __forceinline__ float fold_scales(float run, float m, attn::FoldScales& f) {
  const float m_new = fmaxf(run, m);
  f.sa = __expf(__fsub_rn(run, m_new));
  f.sb = __expf(__fsub_rn(m, m_new));
  return m_new;
}

// The running sum's fold (fold_stats' L expression).
__device__ __forceinline__ float fold_sum(float L, float l, attn::FoldScales f) {
  return __fadd_rn(__fmul_rn(L, f.sa), __fmul_rn(l, f.sb));
}

// A batch of span partials staged in shared memory.
struct Batch {
  float* a;  // [batch][hd]
  float* m;  // [batch]
  float* l;
  float* sa;
  float* sb;
  int nb;
};
__device__ __forceinline__ Batch batch_at(float* sm, int hd, int batch) {
  Batch b;
  b.a = sm;
  b.m = b.a + batch * hd;
  b.l = b.m + batch;
  b.sa = b.l + batch;
  b.sb = b.sa + batch;
  b.nb = 0;
  return b;
}

// Stages spans [s0, s0 + nb) of the partial records at rec0 (record stride rec_stride floats).
// kL2: loads that bypass L1 (the folded merge), else cp.async (committed; wait before use).
template <int kThreads, bool kL2>
__device__ __forceinline__ void load_batch(Batch& b, const float* rec0, int64_t rec_stride, int nb, int hd) {
  const int tid = threadIdx.x;
  b.nb = nb;
  if constexpr (kL2) {
#pragma unroll 4
    for (int i = tid; i < nb * hd; i += kThreads) {
      const int s = i / hd, e = i - s * hd;
      b.a[s * hd + e] = __ldcg(rec0 + s * rec_stride + 2 + e);
    }
    for (int s = tid; s < nb; s += kThreads) {
      b.m[s] = __ldcg(rec0 + s * rec_stride);
      b.l[s] = __ldcg(rec0 + s * rec_stride + 1);
    }
  } else {
    const int half = hd / 2;  // hd + 2 is even, so every record's A starts 8-byte aligned
    if (kThreads % half == 0) {  // a thread keeps one column: no division per copy
      const int e = (tid % half) * 2, step = kThreads / half;
      for (int s = tid / half; s < nb; s += step) cp_async8(b.a + s * hd + e, rec0 + s * rec_stride + 2 + e);
    } else {
      for (int i = tid; i < nb * half; i += kThreads) {
        const int s = i / half, e = (i - s * half) * 2;
        cp_async8(b.a + s * hd + e, rec0 + s * rec_stride + 2 + e);
      }
    }
    cp_async_commit();
    for (int s = tid; s < nb; s += kThreads) {
      b.m[s] = rec0[s * rec_stride];
      b.l[s] = rec0[s * rec_stride + 1];
    }
  }
}

// Warp 0 (all its lanes): the running maxima of the batch (a prefix max over the lanes' runs:
// max is exact, so any association gives the same values) and every span's fold scales.
// carry: the running max after the spans of earlier batches (-inf before the first).
__device__ __forceinline__ void batch_scales(const Batch& b, float& carry) {
  const int lane = threadIdx.x & 31, nb = b.nb;
  const int per = (nb + 31) / 32, sbeg = min(nb, lane * per), send = min(nb, sbeg + per);
  float local = -INFINITY;
  for (int s = sbeg; s < send; ++s) local = fmaxf(local, b.m[s]);
  float incl = local;
  for (int off = 1; off < 32; off <<= 1) {
    const float o = __shfl_up_sync(kFullMask, incl, off);
    if (lane >= off) incl = fmaxf(incl, o);
  }
  const float excl = __shfl_up_sync(kFullMask, incl, 1);
  float run = fmaxf(carry, lane == 0 ? -INFINITY : excl);  // the max before span sbeg
  for (int s = sbeg; s < send; ++s) {
    const float m = b.m[s];
    if (m == -INFINITY) continue;  // an empty span is skipped by the fold
    attn::FoldScales f;
    run = fold_scales(run, m, f);
    b.sa[s] = f.sa;
    b.sb[s] = f.sb;
  }
  carry = fmaxf(carry, __shfl_sync(kFullMask, incl, 31));
}

// Every thread: folds the batch's spans, in span order, into L and its dimensions
// d = tid + k * kThreads of A.
template <int kThreads, int kPer>
__device__ __forceinline__ void batch_fold(const Batch& b, int hd, float& L, float (&A)[kPer]) {
  const int tid = threadIdx.x;
  // Spans in groups of kGroup: a group's statistics and values are loaded together ahead of its
  // folds, which then run in span order with the expressions below (a span at a time, each fold
  // waited on its own shared-memory loads: a 32k decode's 129 spans made a serial chain of loads).
  constexpr int kGroup = 8;
  int s = 0;
  for (; s + kGroup <= b.nb; s += kGroup) {
    float m[kGroup], sa[kGroup], sb[kGroup], l[kGroup], av[kGroup][kPer];
#pragma unroll
    for (int u = 0; u < kGroup; ++u) {
      m[u] = b.m[s + u];
      sa[u] = b.sa[s + u];  // (not written for an empty span, whose fold is skipped)
      sb[u] = b.sb[s + u];
      l[u] = b.l[s + u];
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        const int d = tid + k * kThreads;
        av[u][k] = d < hd ? b.a[(s + u) * hd + d] : 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < kGroup; ++u) {
      if (m[u] == -INFINITY) continue;
      const attn::FoldScales f{sa[u], sb[u]};
      L = fold_sum(L, l[u], f);
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        if (tid + k * kThreads < hd) A[k] = attn::fold_acc(A[k], av[u][k], f);
      }
    }
  }
  for (; s < b.nb; ++s) {
    if (b.m[s] == -INFINITY) continue;
    const attn::FoldScales f{b.sa[s], b.sb[s]};
    L = fold_sum(L, b.l[s], f);
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int d = tid + k * kThreads;
      if (d < hd) A[k] = attn::fold_acc(A[k], b.a[s * hd + d], f);
    }
  }
}

// Merges token t's span partials for head h into out, batch spans at a time through `sm`
// (batch_bytes(hd, batch) of shared memory). Called by all kThreads threads of the block, which
// must hold kPer * kThreads >= hd; ends with a barrier (sm is free again). kPdl: the merge
// kernel, which reads the plan (uploaded before the step) ahead of the PDL wait.
template <int kThreads, int kPer, bool kL2, bool kPdl = false>
__device__ __forceinline__ void merge_token_head(const AttentionArgs& a, int t, int h, float* sm, int batch) {
  const int hd = a.head_dim, tid = threadIdx.x;
  const DevicePlan& P = a.plan;
  const int n_spans = P.positions[t] / kAttnSpanTokens + 1;
  const int64_t first = int64_t{P.token_partial_begin[t]};
  const int64_t rec_stride = int64_t{a.n_heads} * (hd + 2);
  if constexpr (kPdl) pdl_enter();
  Batch b = batch_at(sm, hd, batch);
  float carry = -INFINITY;  // warp 0
  float L = 0.0f;
  float A[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) A[k] = 0.0f;
  for (int s0 = 0; s0 < n_spans; s0 += batch) {
    const int nb = min(batch, n_spans - s0);
    load_batch<kThreads, kL2>(b, a.partials + ((first + s0) * a.n_heads + h) * (hd + 2), rec_stride, nb, hd);
    __syncthreads();
    if (tid < 32) batch_scales(b, carry);
    if constexpr (!kL2) cp_async_wait<0>();
    __syncthreads();
    batch_fold<kThreads>(b, hd, L, A);
    __syncthreads();  // the batch's shared memory is free
  }
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int d = tid + k * kThreads;
    if (d < hd) a.out[t * a.out_stride + int64_t{h} * hd + d] = __fdiv_rn(A[k], L);
  }
}

// The prescaled fold of the sliced merge (kSpanMergePrescaled), for one batch after its fold scales:
// every thread of the block replaces the batch's span sums and values by their fold products l x sb
// and a x sb, and an empty span's fold by the identity (sa = 1, products -0: x * 1 + -0 is x for
// every x, +0 and -0 included), so the folding warp (prescaled_fold) runs one multiply and one add
// per span for L and for its dimension, with no branch. fold_sum and fold_acc round each product
// on its own before the add (__fmul_rn / __fadd_rn are never contracted), so every value keeps its
// bits. (H200, session 10, ncu source view of the serial fold: ~37 cycles per span on one warp per
// scheduler, against ~8 for its two dependent operations; 40% of the 32k merge's stall samples.)
template <int kThreads, int kDims>
__device__ __forceinline__ void prescale_batch(const Batch& b) {
  static_assert(kThreads % kDims == 0, "a thread keeps one dimension");
  constexpr int kRows = kThreads / kDims;
  const int e = threadIdx.x % kDims;
  // Rows s = threadIdx.x / kDims + k * kRows: a warp's lanes read the same span's max and scale
  // (one shared-memory broadcast each) and consecutive values.
#pragma unroll 4
  for (int s = threadIdx.x / kDims; s < b.nb; s += kRows) {
    float* v = b.a + s * kDims + e;
    *v = b.m[s] == -INFINITY ? -0.0f : __fmul_rn(*v, b.sb[s]);
  }
  for (int s = threadIdx.x; s < b.nb; s += kThreads) {
    const bool empty = b.m[s] == -INFINITY;
    b.l[s] = empty ? -0.0f : __fmul_rn(b.l[s], b.sb[s]);
    if (empty) b.sa[s] = 1.0f;  // (batch_scales wrote no scales for it)
  }
}

// Thread e < kDims: folds a prescaled batch (prescale_batch) into L and dimension e's A, in span
// order, with fold_sum's and fold_acc's adds. Spans in groups of kGroup whose scales, sums and
// values are loaded one group ahead of the folds (the chain then waits on no shared-memory load).
template <int kDims>
__device__ __forceinline__ void prescaled_fold(const Batch& b, float& L, float& A) {
  constexpr int kGroup = 8;
  const int e = threadIdx.x;
  const int n_groups = b.nb / kGroup;
  float sa[2][kGroup], l[2][kGroup], av[2][kGroup];
  auto load = [&](int buf, int s0) {
#pragma unroll
    for (int u = 0; u < kGroup; ++u) {
      sa[buf][u] = b.sa[s0 + u];
      l[buf][u] = b.l[s0 + u];
      av[buf][u] = b.a[(s0 + u) * kDims + e];
    }
  };
  auto fold = [&](int buf) {
#pragma unroll
    for (int u = 0; u < kGroup; ++u) {
      L = __fadd_rn(__fmul_rn(L, sa[buf][u]), l[buf][u]);
      A = __fadd_rn(__fmul_rn(A, sa[buf][u]), av[buf][u]);
    }
  };
  if (n_groups > 0) load(0, 0);
  int g = 0;
  for (; g + 2 <= n_groups; g += 2) {  // two groups per trip: the buffers keep constant indices
    load(1, (g + 1) * kGroup);
    fold(0);
    if (g + 2 < n_groups) load(0, (g + 2) * kGroup);
    fold(1);
  }
  if (g < n_groups) fold(0);
  for (int s = n_groups * kGroup; s < b.nb; ++s) {
    const float f = b.sa[s];
    L = __fadd_rn(__fmul_rn(L, f), b.l[s]);
    A = __fadd_rn(__fmul_rn(A, f), b.a[s * kDims + e]);
  }
}

// merge_token_head for dimensions [d0, d0 + kDims) of the head only (kSpanMergeSliced: the merge
// kernel with a block per (token, head, slice of kDims dimensions), so a 32k decode's 32 heads
// take 128 blocks, not 32, and each loads a quarter of the records' values). Every value is the
// same: a dimension's fold (batch_fold, its expressions and span order) does not depend on the
// others, every thread computes the same L, and batch_scales the same scales (the running max is
// exact, so the batch size changes no value). Threads d < kDims fold dimension d0 + d.
// kPrescaled: the batch's fold products formed by the whole block ahead of the fold
// (prescale_batch, prescaled_fold: the same bits).
template <int kThreads, int kDims, int kTrigger = kMergeTriggerEnter, bool kPrescaled = false>
__device__ __forceinline__ void merge_token_head_slice(const AttentionArgs& a, int t, int h, int d0, float* sm,
                                                       int batch) {
  static_assert(kDims % 2 == 0 && kDims <= kThreads, "8-byte copies, one folding thread per dimension");
  constexpr int kPieces = kDims / 2;  // 8-byte copies per record (hd + 2 is even: 8-byte aligned)
  const int hd = a.head_dim, tid = threadIdx.x;
  const DevicePlan& P = a.plan;
  const int n_spans = P.positions[t] / kAttnSpanTokens + 1;
  const int64_t first = int64_t{P.token_partial_begin[t]};
  const int64_t rec_stride = int64_t{a.n_heads} * (hd + 2);
  pdl_wait();
  if constexpr (kTrigger == kMergeTriggerEnter) pdl_launch_dependents();
  Batch b = batch_at(sm, kDims, batch);
  float carry = -INFINITY;  // warp 0
  float L = 0.0f;
  float A[1] = {0.0f};
  for (int s0 = 0; s0 < n_spans; s0 += batch) {
    const int nb = min(batch, n_spans - s0);
    const float* rec0 = a.partials + ((first + s0) * a.n_heads + h) * (hd + 2);
    b.nb = nb;
    for (int i = tid; i < nb * kPieces; i += kThreads) {
      const int s = i / kPieces, e = (i - s * kPieces) * 2;
      cp_async8(b.a + s * kDims + e, rec0 + s * rec_stride + 2 + d0 + e);
    }
    cp_async_commit();
    for (int s = tid; s < nb; s += kThreads) {
      b.m[s] = rec0[s * rec_stride];
      b.l[s] = rec0[s * rec_stride + 1];
    }
    __syncthreads();
    if (tid < 32) batch_scales(b, carry);
    cp_async_wait<0>();
    __syncthreads();
    if constexpr (kPrescaled) {
      prescale_batch<kThreads, kDims>(b);
      __syncthreads();
      if (tid < kDims) prescaled_fold<kDims>(b, L, A[0]);
    } else {
      batch_fold<kThreads, 1>(b, kDims, L, A);
    }
    __syncthreads();  // the batch's shared memory is free
  }
  if constexpr (kTrigger == kMergeTriggerFolded) pdl_launch_dependents();
  if (tid < kDims) a.out[t * a.out_stride + int64_t{h} * hd + d0 + tid] = __fdiv_rn(A[0], L);
}

// The span kernels' end in folded mode, for a tile with one span: the block's own span partial
// (still in shared memory) merged alone: out = A / L after one fold from (-inf, 0, 0), the merge
// kernel's expressions for a one-span token, for every query of the block at once.
template <int kThreads>
__device__ __forceinline__ void store_single_span(const attn::Queries& Q, const AttentionArgs& a, int t0, int h0) {
  const int hd = Q.hd;
  for (int o = threadIdx.x; o < Q.nq * hd; o += kThreads) {
    const int qi = o / hd, d = o - qi * hd;
    const int t = t0 + qi / Q.nh;
    const float m = Q.span_m[qi];
    float L = 0.0f, A = 0.0f;
    if (m != -INFINITY) {
      attn::FoldScales f;
      (void)fold_scales(-INFINITY, m, f);
      L = fold_sum(L, Q.span_l[qi], f);
      A = attn::fold_acc(A, Q.span_a[o], f);
    }
    a.out[t * a.out_stride + int64_t{h0 + qi % Q.nh} * hd + d] = __fdiv_rn(A, L);
  }
}

// The folded merge of every (token, head) query of the block at once, when all their partials
// fit `sm` together (returns false, doing nothing, when not): one load phase for all of them,
// then warp w computes the fold scales of queries w, w + 8, ... (batch_scales over all of a
// query's spans: one batch), then each thread folds one (query, dimension) over the spans in
// order. Per value the same expressions as merge_token_head, so the same bits; in latency one
// query's merge instead of nq in a row.
template <int kThreads>
__device__ __forceinline__ bool merge_all_queries(const attn::Queries& Q, const AttentionArgs& a, const int* tok_partial,
                                                  int t0, int h0, int n_tile_spans, float* sm, size_t sm_bytes) {
  const int hd = Q.hd, nq = Q.nq, S = n_tile_spans, tid = threadIdx.x;
  const size_t per_query = batch_bytes(hd, S);
  if (per_query * nq > sm_bytes) return false;
  const int per_query_floats = static_cast<int>(per_query / sizeof(float));
  const int64_t rec_stride = int64_t{a.n_heads} * (hd + 2);
  auto spans_of = [&](int qi) { return Q.tok_pos[qi / Q.nh] / kAttnSpanTokens + 1; };
  auto rec0_of = [&](int qi) {
    return a.partials + (int64_t{tok_partial[qi / Q.nh]} * a.n_heads + h0 + qi % Q.nh) * (hd + 2);
  };
  // Query qi's batch: its spans' A, then max, sum and fold scales (batch_at's layout for S spans).
#pragma unroll 4
  for (int i = tid; i < nq * S * hd; i += kThreads) {
    const int qi = i / (S * hd), r = i - qi * (S * hd), sp = r / hd, e = r - sp * hd;
    if (sp < spans_of(qi)) sm[qi * per_query_floats + r] = __ldcg(rec0_of(qi) + sp * rec_stride + 2 + e);
  }
  for (int i = tid; i < nq * S; i += kThreads) {
    const int qi = i / S, sp = i - qi * S;
    if (sp < spans_of(qi)) {
      const Batch b = batch_at(sm + qi * per_query_floats, hd, S);
      b.m[sp] = __ldcg(rec0_of(qi) + sp * rec_stride);
      b.l[sp] = __ldcg(rec0_of(qi) + sp * rec_stride + 1);
    }
  }
  __syncthreads();
  for (int qi = tid / 32; qi < nq; qi += kThreads / 32) {
    Batch b = batch_at(sm + qi * per_query_floats, hd, S);
    b.nb = spans_of(qi);
    float carry = -INFINITY;
    batch_scales(b, carry);
  }
  __syncthreads();
  for (int o = tid; o < nq * hd; o += kThreads) {
    const int qi = o / hd, d = o - qi * hd;
    const Batch b = batch_at(sm + qi * per_query_floats, hd, S);
    const int nb = spans_of(qi);
    float L = 0.0f, A = 0.0f;
    for (int sp = 0; sp < nb; ++sp) {
      if (b.m[sp] == -INFINITY) continue;
      const attn::FoldScales f{b.sa[sp], b.sb[sp]};
      L = fold_sum(L, b.l[sp], f);
      A = attn::fold_acc(A, b.a[sp * hd + d], f);
    }
    a.out[(t0 + qi / Q.nh) * a.out_stride + int64_t{h0 + qi % Q.nh} * hd + d] = __fdiv_rn(A, L);
  }
  return true;
}

// The span kernels' end in folded mode, for a tile of several spans, after the block stored its
// partials: the block that finishes the tile's (KV head, head slice) last merges the tile's
// nt tokens x nh heads through `sm` (sm_bytes of free shared memory, 16-byte aligned): all at
// once where their partials fit, else one (token, head) at a time with all threads.
template <int kThreads>
__device__ __forceinline__ void merge_if_last(const attn::Queries& Q, const AttentionArgs& a, int tile,
                                              int n_tile_spans, const int* tok_partial, int t0, int nt, int h0,
                                              int nh, int y, int ny, float* sm, size_t sm_bytes) {
  __threadfence();  // this thread's partial stores, before the counter says the block is done
  __syncthreads();
  int last = 0;
  if (threadIdx.x == 0) {
    int* counter = a.merge_counters + int64_t{tile} * ny + y;
    last = atomicAdd(counter, 1) == n_tile_spans - 1 ? 1 : 0;
    if (last) {
      *counter = 0;     // every other block of the tile has counted: ready for the next launch
      __threadfence();  // the other blocks' partials, seen through their fences
    }
  }
  // A barrier that also tells every thread (no static shared memory: the dynamic part may take
  // the whole opt-in limit).
  if (!__syncthreads_or(last)) return;
  cp_async_wait<0>();  // (the K/V ring held only landed chunks; sm may overlap it)
  if (merge_all_queries<kThreads>(Q, a, tok_partial, t0, h0, n_tile_spans, sm, sm_bytes)) return;
  const int hd = a.head_dim;
  const int batch = min(batch_spans(hd), static_cast<int>(sm_bytes / batch_bytes(hd, 1)));
  constexpr int kPer = (kAttnMaxHeadDim + kThreads - 1) / kThreads;
  for (int tt = 0; tt < nt; ++tt) {
    for (int k = 0; k < nh; ++k) merge_token_head<kThreads, kPer, true>(a, t0 + tt, h0 + k, sm, batch);
  }
}

// The end of a span block (both span kernels; n_tile_spans = plan.tile_n_spans[tile] and, where
// it is > 1, tok_partial[tt] = plan.token_partial_begin[t0 + tt], read early): the span partials
// of its queries, to global memory for the merge kernel, or with fold_merge the block's share of
// the folded merge. free_sm: shared memory the block no longer needs (its K/V ring).
template <int kThreads>
__device__ __forceinline__ void finish_span(const attn::Queries& Q, const AttentionArgs& a, int tile, int n_tile_spans,
                                            const int* tok_partial, int t0, int nt, int h0, int nh, int span,
                                            int y, int ny, unsigned char* free_sm, size_t free_bytes) {
  if (a.fold_merge && n_tile_spans == 1) {
    store_single_span<kThreads>(Q, a, t0, h0);
    return;
  }
  attn::store_span_partial<kThreads>(Q, a, t0, h0, span);
  if (a.fold_merge) {
    merge_if_last<kThreads>(Q, a, tile, n_tile_spans, tok_partial, t0, nt, h0, nh, y, ny,
                            reinterpret_cast<float*>(free_sm), free_bytes);
  }
}

}  // namespace tern::cuda::span_merge
