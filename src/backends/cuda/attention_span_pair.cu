// The two-chunk span decode kernels (attention.h, "split mode"; TERN_CUDA_ATTN_SPAN=2, and its
// GQA-group form 3 with the flags of attention_span.cuh: 83 = 3 + 16 + 64, and the split-ring
// forms on top of it; the default at head dim 128 with an f16 cache is the lean warp-specialized
// ring 1779, backend_settings.cpp default_span_kernel).
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
//
// span_kernel 3 (group_scores, group_values below) cuts the instructions per chunk further: ncu
// of kernel 2 at a 32k decode counted 64.8 M warp instructions for 134 MB of K/V (~16k per
// 64-key chunk of 4 queries, for ~2k warp FMAs of useful work): runtime head_dim branches kept
// the fmaf chains serial, the segment tree's shuffle loop ran with divergence checks, and each
// key recomputed its queries' positions with integer divisions.
#include <algorithm>
#include <cmath>

#include "backends/cuda/async_copy.cuh"
#include "backends/cuda/attention.h"
#include "backends/cuda/attention_chunk.cuh"
#include "backends/cuda/attention_fused.cuh"
#include "backends/cuda/attention_span.cuh"
#include "backends/cuda/attention_span_merge.cuh"
#include "backends/cuda/attention_span_steps.cuh"
#include "backends/cuda/common.cuh"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/launch.cuh"
#include "core/check.h"

namespace tern::cuda {
namespace {

using namespace span_steps;  // attention_span_steps.cuh

// One block per (split item, KV head, head slice), as the one-chunk span kernel; chunk c of the
// span lives in stage c % kStages, and a step consumes chunks 2 i and 2 i + 1 while chunks up to
// 2 i + kStages - 1 are in flight. Persistent blocks (kSpanPersistent: one-tile plans, no folded
// merge) keep their (KV head, head slice), y = blockIdx.x % ny, and walk spans blockIdx.x / ny,
// + gridDim.x / ny, ...: chunk c of their k-th span is ring position 4 k + c, so the copies run on
// into the next span while this one is computed, and the block-table lookups of span k + 1 are
// made at the start of span k (slot buffer (k + 1) % 2). Each span's arithmetic is the same.
//
// kSplit (kSpanSplitRing): a stage's K half and V half are reissued separately, K(gi + kStages)
// and K(gi + kStages + 1) right after the scores step of chunks gi, gi + 1 (the last reads of
// those K halves) and their V halves right after the values step, so the next step's second
// chunk is in flight during this step's softmax and values instead of being waited on right
// after its issue (3 stages: one chunk ahead beyond the pair in use for K and for V alike).
// kVQueries: group_values' queries per lane (kSpanValueQueryPairs: 2). kMinBlocks: the resident
// blocks per SM the registers are sized for.
template <typename T, int kStages, bool kGroup, int kHd = 0, int kVDims = 1, bool kSplit = false, int kVQueries = 4,
          int kMinBlocks = 2>
__global__ void __launch_bounds__(kThreads, kMinBlocks) attention_span_pair_kernel(AttentionArgs a) {
  static_assert(kStages >= kPair, "a step needs both of its chunks resident");
  // The split ring's cp.async groups, per thread: a prologue of ring positions 0 .. kStages - 1
  // in pairs (K 2p, K 2p + 1, V 2p, V 2p + 1; an odd last position K then V), then per step two
  // K groups after the scores and two V groups after the values. Groups committed after the
  // step's last needed one (K of its second chunk at the step's start, V of it before the
  // values), the smallest over every step (bench/RESULTS.md lists the count): 2 stages: 2 and 2;
  // 3: 3 and 3 (the first step 4); 4: 6 and 6.
  constexpr int kSplitWait = kStages == 2 ? 2 : kStages == 3 ? 3 : 6;
  extern __shared__ __align__(16) unsigned char sm[];
  const SpanShape sh = span_shape_of(a);
  const DevicePlan& P = a.plan;
  const int tid = threadIdx.x, hd = kHd != 0 ? kHd : a.head_dim;
  SpanItem it;
  int span_stride = 1, n_items = 1;
  if ((a.span_kernel & kSpanPersistent) != 0) {
    const int ny = a.n_kv_heads * sh.n_slices;
    it.tile = 0, it.t0 = 0, it.nt = P.n_tokens, it.n_tile_spans = 0, it.part = 0;
    it.y = blockIdx.x % ny, it.ny = ny, it.span = blockIdx.x / ny;
    span_stride = gridDim.x / ny;
    n_items = (P.n_split_items - it.span + span_stride - 1) / span_stride;
  } else {
    it = span_item_of(a);
  }
  const int tile = it.tile;
  const int g = it.y / sh.n_slices, slice = it.y % sh.n_slices;
  const int h0 = g * sh.group + slice * sh.hpb;
  const int nh = min(sh.hpb, sh.group - slice * sh.hpb);
  const int t0 = it.t0, nt = it.nt, n_tile_spans = it.n_tile_spans;
  const int nq = nt * nh;

  const SpanSmem L = span_smem(a, sh, kStages, kPair);
  const SpanBuffers<T> B = span_buffers<T>(sm, L);
  float *q_s = B.q, *span_a = B.span_a, *p_s = B.p, *stats = B.stats;
  int *tok_pos = B.tok_pos, *tok_first = B.tok_first, *tok_partial = B.tok_partial, *slots = B.slots;
  T* kv_s = B.kv;
  const int na = sh.nq_alloc;
  PairQueries Q;
  Q.nq = nq, Q.nh = nh, Q.hd = hd, Q.na = na, Q.seg_lanes = attn::seg_lanes_of(hd);
  Q.q = q_s, Q.p = p_s, Q.span_a = span_a;
  Q.m_c = stats, Q.l_c = stats + 2 * na, Q.span_m = stats + 4 * na, Q.span_l = stats + 5 * na;
  Q.sa = stats + 6 * na, Q.sb = stats + 8 * na;
  Q.tok_pos = tok_pos, Q.tok_first = tok_first;
  // Chunk split: this block's rows are chunks [part * cs, part * cs + cs) of its span.
  const int cs = a.chunk_split;
  const int block_rows = cs > 0 ? cs * C : kAttnSpanTokens;
  const int row_off = cs > 0 ? it.part * block_rows : 0;
  Q.chunk_out = cs > 0 ? a.partials : nullptr;
  Q.tok_partial = tok_partial, Q.span = it.span, Q.chunk0 = cs > 0 ? it.part * cs : 0;
  Q.n_heads = a.n_heads, Q.h0 = h0;

  // As the one-chunk kernel: only the plan is read before the PDL wait.
  const int max_pos = load_span_tokens(a, B, t0, nt, n_tile_spans);
  const int32_t* blocks = P.block_ids + P.block_offsets[P.seq_index[t0]];
  auto rows_of = [&](int k) {
    return min(block_rows, max_pos + 1 - (it.span + k * span_stride) * kAttnSpanTokens - row_off);
  };
  // A chunk-split part past the tile's last position has no rows (and no token reads its records).
  if (rows_of(0) <= 0) return;
  auto lookup = [&](int k) {  // the cache slots of the k-th span's rows
    const int j = (it.span + k * span_stride) * kAttnSpanTokens + row_off + tid;
    if (tid < rows_of(k)) slots[(k & 1) * kAttnSpanTokens + tid] = blocks[j / a.block_tokens] * a.block_tokens + j % a.block_tokens;
  };
  lookup(0);
  if (n_items > 1) lookup(1);

  // Ring position gi: chunk gi % 4 of the block's span gi / 4 (empty groups past the last), as
  // two cp.async groups, its K rows then its V rows: a step waits for its second chunk's K
  // before the scores and for its V only before the values.
  auto issue = [&](int gi, bool skip = false) {
    const int k = gi / kAttnSpanChunks;
    if (k >= n_items) {
      cp_async_commit();
      cp_async_commit();
      return;
    }
    const SpanKvRing<T, kStages> r(a, g, slots + (k & 1) * kAttnSpanTokens, kv_s, rows_of(k));
    // (fused decode: a row of the step's tokens is computed by write_new_rows, not copied)
    const int j = (it.span + k * span_stride) * kAttnSpanTokens + row_off + (gi % kAttnSpanChunks) * C +
                  tid / SpanKvRing<T, kStages>::kLanesPerRow;
    r.issue_split_at(gi % kAttnSpanChunks, gi, tid, skip || ((a.fused & kAttnFusedRope) && fused::is_new_row(tok_pos, nt, j)));
  };
  auto stage_k = [&](int gi) { return kv_s + (gi % kStages) * 2 * C * hd; };
  // Split ring: ring position gi's K (v = false) or V rows as one group (empty past the last span).
  auto issue_half = [&](int gi, bool v) {
    const int k = gi / kAttnSpanChunks;
    if (k >= n_items) {
      cp_async_commit();
      return;
    }
    const SpanKvRing<T, kStages> r(a, g, slots + (k & 1) * kAttnSpanTokens, kv_s, rows_of(k));
    r.issue_half_at(gi % kAttnSpanChunks, gi, tid, v);
  };
  // early_kv: ring positions 0 .. kStages - 1 (all of the first span's, kStages <= 4) are issued
  // before the PDL wait, in the same groups and order as below, so they overlap the previous
  // kernel. Sound because at most one kernel runs ahead of this one (common.cuh: each calls
  // launch_dependents after its own wait), and what it may still write in the cache are the rows
  // of this step's tokens (the kv_write of the rope launch before attention): a thread whose row
  // is one of those (kv_slots) skips it and copies it after the wait. With the fused rope the
  // kernel before is the q/k/v projection, which writes no cache row, and the rows of the step's
  // tokens are not copied at all (issue skips them; write_new_rows computes them after the
  // wait), so nothing is deferred (the default: backend_settings.h kDefaultFusedEarlyKv).
  // early_kv 2 (fused rope only): the rope's rotation factors
  // (positions and the model's frequencies, written at load) are computed before the wait too,
  // into p_s, which nothing else touches before the first step's barrier.
  const bool fused_rope = (a.fused & kAttnFusedRope) != 0;
  const float* rope_f = nullptr;
  if (fused_rope && a.early_kv == 2) {
    fused::rope_factors_of<kThreads>(a, tok_pos, nt, p_s);  // (visible after the barrier below)
    rope_f = p_s;
  }
  unsigned deferred = 0;  // bit gi: this thread's row of ring position gi waits for the PDL wait
  if (kSplit) {
    // (launch_attention_span never asks for early_kv with the split ring)
  } else if (a.early_kv) {
    __syncthreads();  // slots visible
    const SpanKvRing<T, kStages> r(a, g, slots, kv_s, rows_of(0));
    for (int gi = 0; gi < kStages; ++gi) {
      const bool written = !fused_rope && r.row_written(gi, tid, P.kv_slots, P.n_tokens);
      deferred |= written ? 1u << gi : 0u;
      issue(gi, written);
    }
  }
  pdl_wait();
  pdl_launch_dependents();
  if (kSplit) {
    __syncthreads();  // slots visible
    for (int p = 0; 2 * p + 1 < kStages; ++p) {
      issue_half(2 * p, false);
      issue_half(2 * p + 1, false);
      issue_half(2 * p, true);
      issue_half(2 * p + 1, true);
    }
    if (kStages % 2 != 0) {
      issue_half(kStages - 1, false);
      issue_half(kStages - 1, true);
    }
  } else if (a.early_kv) {
    const SpanKvRing<T, kStages> r(a, g, slots, kv_s, rows_of(0));
    for (int gi = 0; gi < kStages; ++gi) {
      if ((deferred >> gi) & 1u) r.copy_row_now(gi, gi, tid);
    }
  } else {
    __syncthreads();  // slots visible
    // Ring positions 0 .. kStages - 3 now; each step issues two more (its first: up to kStages - 1).
    for (int gi = 0; gi + kPair < kStages; ++gi) issue(gi);
  }

  if (fused_rope) {  // attention_fused.cuh (chunk split, no split ring)
    fused::load_q<kThreads>(a, q_s, tok_pos, t0, h0, nh, nq, hd, rope_f);
    fused::write_new_rows<T, kThreads>(a, tok_pos, t0, nt, g, slice == 0, it.span * kAttnSpanTokens + row_off,
                                       rows_of(0), kv_s, kStages, rope_f);
  } else {
    for (int i = tid; i < nq * hd; i += kThreads) {
      const int qi = i / hd, d = i - qi * hd;
      q_s[i] = a.q[int64_t{t0 + qi / nh} * a.q_stride + int64_t{h0 + qi % nh} * hd + d];
    }
  }
  const attn::Queries out{nq,      nh,      hd,      Q.seg_lanes, q_s,      p_s,      Q.m_c,     Q.l_c,
                          Q.span_m, Q.span_l, span_a, Q.sa,       Q.sb,     tok_pos,  tok_first};
  for (int k = 0; k < n_items; ++k) {
    const int span = it.span + k * span_stride;
    const int j_begin = span * kAttnSpanTokens + row_off;
    const int n_iter = (rows_of(k) + C - 1) / C;
    // Slot buffer (k + 1) % 2 held span k - 1's, whose chunks were all issued; the lookups are
    // visible (a step's barrier) before span k + 1's first chunk is issued.
    if (k >= 1 && k + 1 < n_items) lookup(k + 1);
    for (int i = tid; i < nq * hd; i += kThreads) span_a[i] = 0.0f;
    for (int i = tid; i < nq; i += kThreads) {
      Q.span_m[i] = -INFINITY;
      Q.span_l[i] = 0.0f;
    }
    for (int i = 0; i < n_iter; i += kPair) {
      const int gi = k * kAttnSpanChunks + i;
      // Stages of ring positions gi + kStages - 2 and gi + kStages - 1 held gi - 2 and gi - 1,
      // which the previous step finished with (its last barrier). (early_kv: the first step's
      // were issued before the PDL wait.)
      if (!kSplit && (gi > 0 || !a.early_kv)) {
        issue(gi + kStages - 2);
        issue(gi + kStages - 1);
      }
      // Groups: K and V of each ring position. Chunk i and chunk i + 1's K landed (this thread's
      // pieces), leaving chunk i + 1's V and the kStages - 2 later chunks in flight ...
      if constexpr (kSplit) {
        cp_async_wait<kSplitWait>();
      } else {
        cp_async_wait<2 * (kStages - kPair) + 1>();
      }
      __syncthreads();  // ... every thread's, and q / the span state the first time
      const int n_chunks = min(kPair, n_iter - i);
      const int j0 = j_begin + i * C;
      const T* k0 = stage_k(gi);
      const T* k1 = stage_k(gi + 1);
      if constexpr (kGroup && kHd != 0) {
        group_scores<kHd>(Q, k0, k1, n_chunks * C, j0, a.scale, a.softcap, threadIdx.x);
      } else {
        pair_scores<kGroup>(Q, k0, k1, n_chunks * C, j0, a.scale, a.softcap);
      }
      __syncthreads();
      if constexpr (kSplit) {  // every thread is done with the K halves of gi and gi + 1
        issue_half(gi + kStages, false);
        issue_half(gi + kStages + 1, false);
      }
      pair_softmax<kGroup>(Q, n_chunks, threadIdx.x >> 5);
      if constexpr (kSplit) {
        cp_async_wait<kSplitWait>();
      } else {
        cp_async_wait<2 * (kStages - kPair)>();  // chunk i + 1's V landed too
      }
      __syncthreads();
      if constexpr (kGroup) {
        group_values<kHd, kVDims, kVQueries>(Q, k0 + C * hd, k1 + C * hd, n_chunks, j0, threadIdx.x >> 5);
      } else {
        pair_values<2>(Q, k0 + C * hd, k1 + C * hd, n_chunks, j0);
      }
      __syncthreads();  // both stages, p_s and the statistics are free for the next step
      if constexpr (kSplit) {
        issue_half(gi + kStages, true);
        issue_half(gi + kStages + 1, true);
      }
    }
    if (cs > 0) return;  // the chunk records are stored (one step, one item)
    span_merge::finish_span<kThreads>(out, a, tile, n_tile_spans, tok_partial, t0, nt, h0, nh, span, it.y, it.ny,
                                      sm + L.kv, L.total - L.kv);
    if (k + 1 < n_items) __syncthreads();  // the partial stored before the next span resets the state
  }
}

// ---- Warp-specialized split ring (kSpanWarpSpecialized; the long-decode default, 755) ----
//
// Why: ncu of the split ring kernel (bench/RESULTS.md) found it bound by the serial latency of
// its phases: every step runs scores (8 warps), barrier, softmax (4 warps), barrier, values (4
// warps), barrier, with 0.66 eligible warps per scheduler. Here warps 0-3 (producers) compute the
// scores of step s + 1 while warps 4-7 (consumers) run the softmax and values of step s, so the
// two halves' latencies overlap instead of adding up. Handoffs by named barriers (bar.sync /
// bar.arrive with a count, id 0 is __syncthreads):
//   - p is double-buffered: step s's scores go to buffer s % 2; FULL[b]: producers arrive after
//     writing the scores, consumers sync before the softmax; EMPTY[b]: consumers arrive after the
//     values step read the probabilities, producers sync before writing the buffer again (step
//     s + 2). Every arrive has its sync (the consumers skip EMPTY for the last two steps).
//   - the ring: producers copy, wait for and read only the K halves, consumers only the V halves
//     (each role its own cp.async groups and its own 128-thread barrier). Ring position gi's K is
//     reissued for gi + 3 once every producer has scored it, its V once every consumer has used
//     it: 3 stages, a wait for all but the newest group of the role's half.
//   - slots (persistent blocks: span k + 1's lookups at span k's first step) are written by the
//     producers after EMPTY of step 2 k - 2, by which the consumers issued every V of span k - 1,
//     and seen by the consumers through FULL before their first read (the V issues after step 2 k).
// The floats are kernel 3's: the same group_scores (per key), pair_softmax and group_values (per
// query, dimension and chunk), folds in chunk order by one consumer lane per query, the span
// partial stored as store_span_partial does. Only the order in time across warps changes.
// Constraints (the launcher drops the flag elsewhere): head_dim 128, f16 caches with 16-byte
// rows and bases, 3 stages, whole spans, no folded merge, no early_kv.
constexpr int kWsRoleThreads = kThreads / 2;
constexpr int kWsRoleWarps = kWsRoleThreads / 32;
constexpr int kWsStages = 3;
constexpr int kBarProducers = 1, kBarConsumers = 2, kBarFull0 = 3, kBarEmpty0 = 5;  // ids 3, 4 and 5, 6

// Immediate barrier ids and counts (a register id makes ptxas reserve all 16 barriers).
template <int kId, int kCount>
__device__ __forceinline__ void named_sync() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kCount) : "memory");
}
template <int kId, int kCount>
__device__ __forceinline__ void named_arrive() {
  asm volatile("bar.arrive %0, %1;\n" ::"n"(kId), "n"(kCount) : "memory");
}
// FULL[b] / EMPTY[b] of the whole block (producers and consumers).
template <int kId0>
__device__ __forceinline__ void buffer_sync(int b) {
  if (b == 0) {
    named_sync<kId0, kThreads>();
  } else {
    named_sync<kId0 + 1, kThreads>();
  }
}
template <int kId0>
__device__ __forceinline__ void buffer_arrive(int b) {
  if (b == 0) {
    named_arrive<kId0, kThreads>();
  } else {
    named_arrive<kId0 + 1, kThreads>();
  }
}

template <int kHd, typename T, bool kLean = false>
__global__ void __launch_bounds__(kThreads, 2) attention_span_ws_kernel(AttentionArgs a) {
  static_assert(!kLean || (kHd == kWsRoleThreads && sizeof(T) == 2), "the lean form: a consumer thread per dimension, f16");
  constexpr int kStages = kWsStages;
  constexpr int kPer16 = 16 / sizeof(T);
  constexpr int kRowPieces = kHd / kPer16;
  static_assert(kRowPieces * kPer16 == kHd, "rows of whole 16-byte pieces");
  extern __shared__ __align__(16) unsigned char sm[];
  const SpanShape sh = span_shape_of(a);
  const DevicePlan& P = a.plan;
  const int tid = threadIdx.x;
  SpanItem it;
  int span_stride = 1, n_items = 1;
  if ((a.span_kernel & kSpanPersistent) != 0) {
    const int ny = a.n_kv_heads * sh.n_slices;
    it.tile = 0, it.t0 = 0, it.nt = P.n_tokens, it.n_tile_spans = 0, it.part = 0;
    it.y = blockIdx.x % ny, it.ny = ny, it.span = blockIdx.x / ny;
    span_stride = gridDim.x / ny;
    n_items = (P.n_split_items - it.span + span_stride - 1) / span_stride;
  } else {
    it = span_item_of(a);
  }
  const int g = it.y / sh.n_slices, slice = it.y % sh.n_slices;
  const int h0 = g * sh.group + slice * sh.hpb;
  const int nh = min(sh.hpb, sh.group - slice * sh.hpb);
  const int t0 = it.t0, nt = it.nt;
  const int nq = nt * nh;

  // p and the statistics for two steps (p double-buffered; the statistics use the first 10 na).
  const SpanSmem L = span_smem(a, sh, kStages, 2 * kPair);
  const SpanBuffers<T> B = span_buffers<T>(sm, L);
  float *q_s = B.q, *span_a = B.span_a, *p_s = B.p, *stats = B.stats;
  int* slots = B.slots;
  T* kv_s = B.kv;
  const int na = sh.nq_alloc;
  const int p_buf = (na + 3) / 4 * 4 * kPair * C;  // floats per p buffer
  PairQueries Q;
  Q.nq = nq, Q.nh = nh, Q.hd = kHd, Q.na = na, Q.seg_lanes = attn::seg_lanes_of(kHd);
  Q.q = q_s, Q.p = p_s, Q.span_a = span_a;
  Q.m_c = stats, Q.l_c = stats + 2 * na, Q.span_m = stats + 4 * na, Q.span_l = stats + 5 * na;
  Q.sa = stats + 6 * na, Q.sb = stats + 8 * na;
  Q.tok_pos = B.tok_pos, Q.tok_first = B.tok_first;
  Q.chunk_out = nullptr, Q.tok_partial = B.tok_partial, Q.span = it.span, Q.chunk0 = 0;
  Q.n_heads = a.n_heads, Q.h0 = h0;

  const int max_pos = load_span_tokens(a, B, t0, nt, 0);
  // Lean form: per-query tables in the statistics' free tail (they take 10 of the 18 na): the
  // query's token position and first position, its token's first partial slot and its head.
  int* q_pos = reinterpret_cast<int*>(stats + 10 * na);
  int* q_first = q_pos + na;
  int* q_rec = q_pos + 2 * na;
  int* q_head = q_pos + 3 * na;
  if constexpr (kLean) {
    for (int i = tid; i < nq; i += kThreads) {  // plan data only: before the PDL wait
      const int tt = i / nh;
      q_pos[i] = B.tok_pos[tt];
      q_first[i] = B.tok_first[tt];
      q_rec[i] = P.token_partial_begin[t0 + tt];
      q_head[i] = h0 + i % nh;
    }
  }
  const int32_t* blocks = P.block_ids + P.block_offsets[P.seq_index[t0]];
  auto rows_of = [&](int k) {
    return min(kAttnSpanTokens, max_pos + 1 - (it.span + k * span_stride) * kAttnSpanTokens);
  };
  if (rows_of(0) <= 0) return;
  // The cache slots of the k-th span's rows, by n_threads threads from index r0.
  auto lookup = [&](int k, int r0, int n_threads) {
    const int n_rows = rows_of(k), base = (it.span + k * span_stride) * kAttnSpanTokens;
    for (int r = r0; r < n_rows; r += n_threads) {
      const int j = base + r;
      slots[(k & 1) * kAttnSpanTokens + r] = blocks[j / a.block_tokens] * a.block_tokens + j % a.block_tokens;
    }
  };
  lookup(0, tid, kThreads);
  if (n_items > 1) lookup(1, tid, kThreads);

  const bool producer = tid < kWsRoleThreads;
  const int rtid = producer ? tid : tid - kWsRoleThreads, rwarp = rtid >> 5;
  auto stage_k = [&](int gi) { return kv_s + (gi % kStages) * 2 * C * kHd; };
  // Ring position gi's K (v = false, producers) or V rows (consumers), the role's 128 threads
  // taking consecutive 16-byte pieces; one cp.async group, empty past the block's last span.
  auto issue_half = [&](int gi, bool v) {
    const int k = gi / kAttnSpanChunks;
    if (k < n_items) {
      const int n_rows = rows_of(k), c0 = (gi % kAttnSpanChunks) * C;
      const int* sl = slots + (k & 1) * kAttnSpanTokens + c0;
      T* dst = stage_k(gi) + (v ? C * kHd : 0);
      const T* src = static_cast<const T*>(v ? a.v_cache : a.k_cache) + int64_t{g} * kHd;
      const int64_t stride = v ? a.v_cache_stride : a.k_cache_stride;
#pragma unroll
      for (int piece = rtid; piece < C * kRowPieces; piece += kWsRoleThreads) {
        const int r = piece / kRowPieces, e = (piece - r * kRowPieces) * kPer16;
        if (c0 + r < n_rows) cp_async16(dst + r * kHd + e, src + int64_t{sl[r]} * stride + e);
      }
    }
    cp_async_commit();
  };
  // Lean form of issue_half(gi, !producer): ncu of the generic one at a 32k decode counted ~25
  // instructions per 16-byte copy (signed divisions of the piece index, bounds checks, 64-bit
  // address arithmetic; 19% of the kernel's instructions). Here a thread keeps one column
  // (cp_col) of rows cp_r0 + kRowStep i of every chunk, so a copy is a slot load, one wide
  // multiply-add and the cp.async, with the shared address an immediate offset. Same bytes into
  // the same places.
  constexpr int kRowStep = kWsRoleThreads / kRowPieces;  // rows one pass of the role covers
  static_assert(C % kRowStep == 0, "whole passes per chunk");
  const int cp_r0 = rtid / kRowPieces, cp_col = (rtid % kRowPieces) * kPer16;
  const char* cp_src = reinterpret_cast<const char*>(producer ? a.k_cache : a.v_cache) +
                       (int64_t{g} * kHd + cp_col) * static_cast<int64_t>(sizeof(T));
  const int cp_row_bytes = static_cast<int>((producer ? a.k_cache_stride : a.v_cache_stride) * sizeof(T));
  const unsigned cp_dst0 = static_cast<unsigned>(__cvta_generic_to_shared(kv_s)) +
                           static_cast<unsigned>(((producer ? 0 : C * kHd) + cp_r0 * kHd + cp_col) * sizeof(T));
  auto issue_own = [&](int gi) {
    const int k = gi / kAttnSpanChunks;
    if (k < n_items) {
      const int c0 = (gi % kAttnSpanChunks) * C;
      const int* sl = slots + (k & 1) * kAttnSpanTokens + c0 + cp_r0;
      const unsigned dst = cp_dst0 + static_cast<unsigned>((gi % kStages) * 2 * C * kHd * sizeof(T));
      const int n_left = rows_of(k) - c0 - cp_r0;  // this thread's row i is valid while kRowStep i < n_left
      constexpr unsigned kRowStepBytes = kRowStep * kHd * sizeof(T);
      if (n_left > C - kRowStep) {
#pragma unroll
        for (int i = 0; i < C / kRowStep; ++i) {
          cp_async16_shared(dst + i * kRowStepBytes, cp_src + int64_t{sl[i * kRowStep]} * cp_row_bytes);
        }
      } else {
#pragma unroll
        for (int i = 0; i < C / kRowStep; ++i) {
          if (i * kRowStep < n_left) {
            cp_async16_shared(dst + i * kRowStepBytes, cp_src + int64_t{sl[i * kRowStep]} * cp_row_bytes);
          }
        }
      }
    }
    cp_async_commit();
  };

  pdl_wait();
  pdl_launch_dependents();
  if constexpr (kLean) {
    // q (written by the kernel before) loaded into registers before the ring's prologue, so its
    // loads do not queue behind 48 KB of K/V copies per block (ncu: the block's first shared
    // store of q was the kernel's most stalled instruction); a decode's 4 queries are 2 per thread.
    constexpr int kQEarly = 2;
    float q_early[kQEarly] = {};
#pragma unroll
    for (int u = 0; u < kQEarly; ++u) {
      const int i = tid + u * kThreads, qi = i / kHd, d = i - qi * kHd;
      if (i < nq * kHd) q_early[u] = a.q[int64_t{t0 + qi / nh} * a.q_stride + int64_t{h0 + qi % nh} * kHd + d];
    }
    __syncthreads();  // slots visible
    for (int gi = 0; gi < kStages; ++gi) issue_own(gi);
#pragma unroll
    for (int u = 0; u < kQEarly; ++u) {
      if (tid + u * kThreads < nq * kHd) q_s[tid + u * kThreads] = q_early[u];
    }
    for (int i = tid + kQEarly * kThreads; i < nq * kHd; i += kThreads) {
      const int qi = i / kHd, d = i - qi * kHd;
      q_s[i] = a.q[int64_t{t0 + qi / nh} * a.q_stride + int64_t{h0 + qi % nh} * kHd + d];
    }
  } else {
    __syncthreads();  // slots visible
    for (int gi = 0; gi < kStages; ++gi) issue_half(gi, !producer);
    for (int i = tid; i < nq * kHd; i += kThreads) {
      const int qi = i / kHd, d = i - qi * kHd;
      q_s[i] = a.q[int64_t{t0 + qi / nh} * a.q_stride + int64_t{h0 + qi % nh} * kHd + d];
    }
  }
  for (int i = tid; i < nq * kHd; i += kThreads) span_a[i] = 0.0f;
  for (int i = tid; i < nq; i += kThreads) {
    Q.span_m[i] = -INFINITY;
    Q.span_l[i] = 0.0f;
  }
  int total_steps = 0;
  for (int k = 0; k < n_items; ++k) total_steps += ((rows_of(k) + C - 1) / C + kPair - 1) / kPair;
  __syncthreads();  // q and the span state; from here on only named barriers

  if constexpr (kLean) {
    // The same steps, barriers and copies as the loop below, as one loop per role, so each role's
    // registers are its own (a decode's q stays in the producers' registers for the whole walk).
    // The producers' walk with score_step(p, gi, n_chunks, j0) scoring a step into p.
    auto produce = [&](auto&& score_step) {
      int s = 0;
      for (int k = 0; k < n_items; ++k) {
        const int j_begin = (it.span + k * span_stride) * kAttnSpanTokens;
        const int n_iter = (rows_of(k) + C - 1) / C;
        for (int i = 0; i < n_iter; i += kPair, ++s) {
          const int b = s & 1, gi = k * kAttnSpanChunks + i;
          const int n_chunks = min(kPair, n_iter - i), j0 = j_begin + i * C;
          if (s >= 2) buffer_sync<kBarEmpty0>(b);  // the consumers are done with p[b] (step s - 2)
          if (i == 0 && k >= 1 && k + 1 < n_items) lookup(k + 1, rtid, kWsRoleThreads);
          cp_async_wait<1>();  // K(gi), K(gi + 1) landed (this thread's pieces), K(gi + 2) may fly
          named_sync<kBarProducers, kWsRoleThreads>();
          score_step(p_s + b * p_buf, gi, n_chunks, j0);
          buffer_arrive<kBarFull0>(b);
          named_sync<kBarProducers, kWsRoleThreads>();  // every producer is done with K(gi), K(gi + 1)
          issue_own(gi + kStages);
          issue_own(gi + kStages + 1);
        }
      }
    };
    if (producer && nq <= kQueriesPerPass) {  // one score pass: q in registers for the whole walk
      LeanScorer<kHd, kWsRoleThreads> scorer;
      scorer.init(Q, q_pos, q_first, static_cast<unsigned>(rtid));
      produce([&](float* p, int gi, int n_chunks, int j0) {
        scorer.score(p, stage_k(gi), stage_k(gi + 1), n_chunks, j0, a.scale, a.softcap);
      });
    } else if (producer) {
      produce([&](float* p, int gi, int n_chunks, int j0) {
        PairQueries Qb = Q;
        Qb.p = p;
        group_scores<kHd, kWsRoleThreads>(Qb, stage_k(gi), stage_k(gi + 1), n_chunks * C, j0, a.scale, a.softcap,
                                          static_cast<unsigned>(rtid));
      });
    } else {
      int s = 0;
      for (int k = 0; k < n_items; ++k) {
        const int span = it.span + k * span_stride;
        const int j_begin = span * kAttnSpanTokens;
        const int n_iter = (rows_of(k) + C - 1) / C;
        for (int i = 0; i < n_iter; i += kPair, ++s) {
          const int b = s & 1, gi = k * kAttnSpanChunks + i;
          const int n_chunks = min(kPair, n_iter - i), j0 = j_begin + i * C;
          PairQueries Qb = Q;
          Qb.p = p_s + b * p_buf;
          buffer_sync<kBarFull0>(b);
          pair_softmax<true, kWsRoleWarps>(Qb, n_chunks, rwarp);
          cp_async_wait<1>();
          named_sync<kBarConsumers, kWsRoleThreads>();
          group_values_lean<kHd, kWsRoleWarps>(Qb, q_pos, q_first, stage_k(gi) + C * kHd, stage_k(gi + 1) + C * kHd,
                                               n_chunks, j0, rwarp);
          named_sync<kBarConsumers, kWsRoleThreads>();
          issue_own(gi + kStages);
          issue_own(gi + kStages + 1);
          if (s + 2 < total_steps) buffer_arrive<kBarEmpty0>(b);
        }
        // The span partial (as the generic loop's below), consumer thread rtid owning dimension
        // rtid of every query (kHd is the role's thread count), the record's slot and head from
        // the query tables.
        for (int qi = 0; qi < nq; ++qi) {
          const int o = qi * kHd + rtid;
          if (span * kAttnSpanTokens <= q_pos[qi]) {
            float* rec = a.partials + (int64_t{q_rec[qi] + span} * a.n_heads + q_head[qi]) * (kHd + 2);
            rec[2 + rtid] = span_a[o];
            if (rtid == 0) {
              rec[0] = Q.span_m[qi];
              rec[1] = Q.span_l[qi];
            }
          }
          span_a[o] = 0.0f;
          if (rtid == 0) {
            Q.span_m[qi] = -INFINITY;
            Q.span_l[qi] = 0.0f;
          }
        }
      }
    }
    return;
  }

  int s = 0;  // the block's step (both roles count the same steps)
  for (int k = 0; k < n_items; ++k) {
    const int span = it.span + k * span_stride;
    const int j_begin = span * kAttnSpanTokens;
    const int n_iter = (rows_of(k) + C - 1) / C;
    for (int i = 0; i < n_iter; i += kPair, ++s) {
      const int b = s & 1, gi = k * kAttnSpanChunks + i;
      const int n_chunks = min(kPair, n_iter - i), j0 = j_begin + i * C;
      PairQueries Qb = Q;
      Qb.p = p_s + b * p_buf;
      if (producer) {
        if (s >= 2) buffer_sync<kBarEmpty0>(b);  // the consumers are done with p[b] (step s - 2)
        if (i == 0 && k >= 1 && k + 1 < n_items) lookup(k + 1, rtid, kWsRoleThreads);
        cp_async_wait<1>();  // K(gi), K(gi + 1) landed (this thread's pieces), K(gi + 2) may fly
        named_sync<kBarProducers, kWsRoleThreads>();
        group_scores<kHd, kWsRoleThreads>(Qb, stage_k(gi), stage_k(gi + 1), n_chunks * C, j0, a.scale, a.softcap,
                                          static_cast<unsigned>(rtid));
        buffer_arrive<kBarFull0>(b);
        named_sync<kBarProducers, kWsRoleThreads>();  // every producer is done with K(gi), K(gi + 1)
        issue_half(gi + kStages, false);
        issue_half(gi + kStages + 1, false);
      } else {
        buffer_sync<kBarFull0>(b);  // step s's scores in p[b]
        pair_softmax<true, kWsRoleWarps>(Qb, n_chunks, rwarp);
        cp_async_wait<1>();  // V(gi), V(gi + 1) landed
        named_sync<kBarConsumers, kWsRoleThreads>();  // ... and the probabilities and statistics
        group_values<kHd, 2, 4, kWsRoleWarps>(Qb, stage_k(gi) + C * kHd, stage_k(gi + 1) + C * kHd, n_chunks, j0,
                                             rwarp);
        named_sync<kBarConsumers, kWsRoleThreads>();  // every consumer is done with V(gi), V(gi + 1) and p[b]
        issue_half(gi + kStages, true);
        issue_half(gi + kStages + 1, true);
        if (s + 2 < total_steps) buffer_arrive<kBarEmpty0>(b);
      }
    }
    if (!producer) {
      // The span partial, as attn::store_span_partial (same records, same values), each element
      // reset by the thread that stored it; the next step's FULL barrier orders the resets
      // before the next span's softmax and values.
      for (int o = rtid; o < nq * kHd; o += kWsRoleThreads) {
        const int qi = o / kHd, d = o - qi * kHd, tt = qi / nh;
        if (span * kAttnSpanTokens <= Q.tok_pos[tt]) {
          float* rec = a.partials + (int64_t{P.token_partial_begin[t0 + tt] + span} * a.n_heads + h0 + qi % nh) * (kHd + 2);
          rec[2 + d] = span_a[o];
          if (d == 0) {
            rec[0] = Q.span_m[qi];
            rec[1] = Q.span_l[qi];
          }
        }
        span_a[o] = 0.0f;
        if (d == 0) {
          Q.span_m[qi] = -INFINITY;
          Q.span_l[qi] = 0.0f;
        }
      }
    }
  }
}

using PairKernel = void (*)(AttentionArgs);

template <typename T, bool kGroup, int kHd, int kVDims = 1, bool kSplit = false, int kVQueries = 4>
PairKernel pair_kernel_for(int stages) {
  switch (stages) {
    // Split ring at 2 stages: ~73 KB per block, registers sized for 3 blocks per SM (measured
    // 1.6x slower at 32k than 3 stages with 2 blocks: spills; bench/RESULTS.md).
    case 2: return attention_span_pair_kernel<T, 2, kGroup, kHd, kVDims, kSplit, kVQueries, kSplit ? 3 : 2>;
    case 3: return attention_span_pair_kernel<T, 3, kGroup, kHd, kVDims, kSplit, kVQueries>;
    default: return attention_span_pair_kernel<T, 4, kGroup, kHd, kVDims, kSplit, kVQueries>;
  }
}

// The instance that runs `a`: span_kernel 3 with f16 caches at head_dim 128 (Llama, Qwen, ...)
// takes the compile-time head_dim kernel (group_scores), every other shape the generic ones.
PairKernel pair_kernel_of(const AttentionArgs& a) {
  const bool group = (a.span_kernel & kSpanKernelMask) == 3, f16 = a.kv_dtype == DType::F16;
  if (group && f16 && a.head_dim == 128) {
    if ((a.span_kernel & kSpanValuePairs) != 0 && (a.span_kernel & kSpanSplitRing) != 0 &&
        (a.span_kernel & kSpanWarpSpecialized) != 0 && a.kv_stages == kWsStages) {
      return (a.span_kernel & kSpanWsLean) != 0 ? attention_span_ws_kernel<128, __half, true>
                                                : attention_span_ws_kernel<128, __half>;
    }
    if ((a.span_kernel & kSpanValuePairs) != 0 && (a.span_kernel & kSpanSplitRing) != 0) {
      return (a.span_kernel & kSpanValueQueryPairs) != 0 ? pair_kernel_for<__half, true, 128, 2, true, 2>(a.kv_stages)
                                                         : pair_kernel_for<__half, true, 128, 2, true>(a.kv_stages);
    }
    return (a.span_kernel & kSpanValuePairs) != 0 ? pair_kernel_for<__half, true, 128, 2>(a.kv_stages)
                                                  : pair_kernel_for<__half, true, 128>(a.kv_stages);
  }
  if (f16) return group ? pair_kernel_for<__half, true, 0>(a.kv_stages) : pair_kernel_for<__half, false, 0>(a.kv_stages);
  return group ? pair_kernel_for<float, true, 0>(a.kv_stages) : pair_kernel_for<float, false, 0>(a.kv_stages);
}

}  // namespace

void launch_attention_span_pair(const AttentionArgs& a, const LaunchEnv& env, dim3 grid, size_t smem) {
  TERN_CHECK_MSG(a.kv_stages >= kPair && a.kv_stages <= kSpanMaxStages, "span pair kernel: kv_stages out of 2..4");
  launch_kernel(env, pair_kernel_of(a), grid, kThreads, smem, a);
}

int attention_span_pair_blocks_per_sm(const AttentionArgs& a, size_t smem) {
  int n = 0;
  TERN_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, pair_kernel_of(a), kThreads, smem));
  return n;
}

void init_attention_span_pair(int max_smem_bytes) {
  for (PairKernel k : {attention_span_ws_kernel<128, __half>, attention_span_ws_kernel<128, __half, true>}) {
    TERN_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem_bytes));
  }
  for (int stages = 2; stages <= kSpanMaxStages; ++stages) {
    for (PairKernel k : {pair_kernel_for<__half, false, 0>(stages), pair_kernel_for<__half, true, 0>(stages),
                         pair_kernel_for<__half, true, 128>(stages), pair_kernel_for<__half, true, 128, 2>(stages),
                         pair_kernel_for<__half, true, 128, 2, true>(stages),
                         pair_kernel_for<__half, true, 128, 2, true, 2>(stages),
                         pair_kernel_for<float, false, 0>(stages),
                         pair_kernel_for<float, true, 0>(stages)}) {
      TERN_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem_bytes));
    }
  }
}

}  // namespace tern::cuda
