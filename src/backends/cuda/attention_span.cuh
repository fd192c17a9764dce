// Shared-memory layout and launch shape of the span decode kernels (attention_span.cu: one chunk
// per step; attention_span_pair.cu: two chunks per step). Internal to those two files.
#pragma once

#include <cstddef>

#include "backends/cuda/async_copy.cuh"
#include "backends/cuda/attention_chunk.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"

namespace tern::cuda {

constexpr int kSpanThreads = 256;
constexpr int kSpanMaxStages = 4;
// AttentionArgs::span_kernel: the kernel in the low bits (1: one chunk per step, 2: two chunks
// per step, 3: two chunks per step with GQA-group values), plus the block-order flag.
constexpr int kSpanKernelMask = 15;
constexpr int kSpanHeadsFirst = 16;
// Persistent blocks (two-chunk kernels, one-tile plans without the folded merge): a block keeps
// one (KV head, head slice) and walks every gridDim.x / ny-th span, its K/V ring running on into
// the next span's chunks while it computes the current one's (attention_span_pair.cu).
constexpr int kSpanPersistent = 32;
// Span kernel 3 at head_dim 128 (f16): each lane of the values step owns two dimensions (half the
// lanes busy in a decode, fewer instructions and shared-memory wavefronts per multiply-add).
constexpr int kSpanValuePairs = 64;
// Split K/V ring (span kernel 3 + 64 at head_dim 128, f16; not with early_kv): a stage's K half
// is reissued for a later chunk as soon as the scores step is done with it and its V half after
// the values step, instead of both after the values step, so a step's second chunk is in flight
// during the previous step's softmax and values (attention_span_pair.cu). Same bytes, same bits.
constexpr int kSpanSplitRing = 128;
// With kSpanSplitRing and kSpanValuePairs: each lane of the values step serves 2 of a group's 4
// queries (two lanes per dimension and chunk), so a decode's values step runs on all 8 warps.
// Same bits; measured no faster at 32k (88.4 vs 85.6 us/layer without it), so opt-in.
constexpr int kSpanValueQueryPairs = 256;
// Warp-specialized split ring (with kSpanSplitRing, 3 stages, no folded merge, 16-byte aligned
// caches; attention_span_pair.cu attention_span_ws_kernel): warps 0-3 compute the scores of step
// s + 1 while warps 4-7 run the softmax and values of step s (named barriers, double-buffered
// probabilities); the producers copy the K halves, the consumers the V halves. kSpanValueQueryPairs
// is ignored with it (values on the 4 consumer warps). Same bits (run on the H200 since session 6).
constexpr int kSpanWarpSpecialized = 512;
// Lean warp-specialized kernel (with kSpanWarpSpecialized; attention_span_pair.cu, kLean): the
// same steps with fewer instructions around them (ncu of 755 at a 32k decode: 36.4 M warp
// instructions, 23% of them the FMAs, 19% the K/V copies' address arithmetic, ~10% per-step
// divisions and reloads): copies of one column per thread at immediate shared offsets, per-query
// tables instead of divisions by the heads per token, q loaded ahead of the ring's prologue.
// Same bytes, same floats in the same order: same bits. Needs cache rows under 1 GB apart (the
// launcher drops the flag otherwise). H200, 32k decode of the 8B shape: 74 -> 60 us/layer.
constexpr int kSpanWsLean = 1024;
// The span merge kernel with a block per (token, head, 32 dimensions) instead of per (token,
// head) (attention_span.cu; session 9): each dimension's fold unchanged, so the same bits.
constexpr int kSpanMergeSliced = 16384;
// With kSpanMergeSliced: the sliced merge's fold products (l x sb, a x sb) formed by the whole block
// ahead of the serial fold, which then runs one multiply and one add per span and value, with no
// branch (span_merge::prescale_batch, prescaled_fold; session 11). The same bits.
constexpr int kSpanMergePrescaled = 32768;
static_assert(kSpanMaxStages == kAttnSpanChunks, "4 stages hold a whole span");

struct SpanShape {
  int group, hpb, n_slices, nq_alloc;
};
__host__ __device__ inline SpanShape span_shape_of(const AttentionArgs& a) {
  SpanShape s;
  s.group = a.n_heads / a.n_kv_heads;
  s.hpb = a.heads_per_block;
  s.n_slices = (s.group + s.hpb - 1) / s.hpb;
  s.nq_alloc = a.plan.max_tile_tokens * s.hpb;
  return s;
}

// A span block's work item: split item blockIdx.x is span `span` of tile `tile`, tokens
// [t0, t0 + nt); n_tile_spans (with fold_merge only, else 0) is the tile's span count. A plan of
// one tile (one sequence's tokens: a decode, a verify) has items (0, 0), (0, 1), ... and its tile
// is every token, so its blocks skip the work-list loads: those were the first links of a chain
// of dependent loads (item -> tile -> positions and block table -> block ids) that runs ahead of
// the PDL wait, and that a short previous kernel (the rope) does not cover.
// With chunk split (AttentionArgs::chunk_split = cs chunks per block) item blockIdx.x is part
// `part` (chunks [part * cs, part * cs + cs) of the span) of split item blockIdx.x / (4 / cs).
struct SpanItem {
  int tile, span, t0, nt, n_tile_spans, part;
  int y, ny;  // the block's (KV head, head slice) index, g * n_slices + slice, and their count
};
__device__ __forceinline__ SpanItem span_item_of(const AttentionArgs& a) {
  const DevicePlan& P = a.plan;
  SpanItem it;
  // Block order (kSpanHeadsFirst): grid (ny, items) puts the KV heads of one span next to each
  // other in launch order, so the blocks resident together read whole cache rows (all heads of
  // the same positions) instead of one head's 1 / n_kv_heads of each row over many spans.
  const bool heads_first = (a.span_kernel & kSpanHeadsFirst) != 0;
  const int raw = heads_first ? blockIdx.y : blockIdx.x;
  const int parts = a.chunk_split > 0 ? kAttnSpanChunks / a.chunk_split : 1;
  const int item = raw / parts;
  it.part = raw - item * parts;
  it.y = heads_first ? blockIdx.x : blockIdx.y;
  it.ny = heads_first ? gridDim.x : gridDim.y;
  if (P.n_tiles == 1) {
    it.tile = 0;
    it.span = item;
    it.t0 = 0;
    it.nt = P.n_tokens;
    it.n_tile_spans = a.fold_merge ? P.n_split_items : 0;
  } else {
    it.tile = P.split_tile[item];
    it.span = P.split_span[item];
    it.t0 = P.tile_token_begin[it.tile];
    it.nt = P.tile_n_tokens[it.tile];
    it.n_tile_spans = a.fold_merge ? P.tile_n_spans[it.tile] : 0;
  }
  return it;
}

// Shared memory of one block, in bytes: floats, then ints, then the K/V stages. A kernel that
// computes chunks_per_step chunks between two barriers keeps that many chunks' scores and
// statistics (per chunk: max, sum and the two fold scales; plus the span's max and sum).
struct SpanSmem {
  size_t q, span_a, p, stats, tok, slots, kv, total;
};
__host__ __device__ inline SpanSmem span_smem(const AttentionArgs& a, const SpanShape& sh, int stages,
                                              int chunks_per_step = 1) {
  const size_t nq = sh.nq_alloc, hd = a.head_dim, elem = a.kv_dtype == DType::F16 ? 2 : 4;
  const size_t nq4 = (nq + 3) / 4 * 4;  // the group-values kernel keeps p in groups of 4 queries
  const size_t cps = chunks_per_step;
  SpanSmem l;
  l.q = 0;                                           // [nq][hd] queries
  l.span_a = l.q + 4 * nq * hd;                      // [nq][hd] running span A
  l.p = l.span_a + 4 * nq * hd;                      // [nq4][cps * C] scores, then probabilities
  l.stats = l.p + 4 * nq4 * cps * kAttnChunkTokens;  // [4 cps + 2][nq] statistics, fold scales
  l.tok = l.stats + 4 * (4 * cps + 2) * nq;          // [3][kAttnTileTokens] positions, first positions,
                                                     // first partial slots
  l.slots = l.tok + 4 * 3 * kAttnTileTokens;         // [2][kAttnSpanTokens] cache slot of each span row
                                                     // (persistent blocks: this span's and the next's)
  l.kv = (l.slots + 4 * 2 * kAttnSpanTokens + 15) / 16 * 16;  // [stages][K, V][C][hd]
  l.total = l.kv + static_cast<size_t>(stages) * 2 * kAttnChunkTokens * hd * elem;
  return l;
}

// The span kernels' views of their shared memory: span_smem's offsets applied to the block's
// buffer. tok holds three [kAttnTileTokens] arrays: positions, first positions, and the folded
// merge's first partial slot of each token.
template <typename T>
struct SpanBuffers {
  float* q;
  float* span_a;
  float* p;
  float* stats;
  int* tok_pos;
  int* tok_first;
  int* tok_partial;
  int* slots;
  T* kv;
};
template <typename T>
__device__ __forceinline__ SpanBuffers<T> span_buffers(unsigned char* sm, const SpanSmem& l) {
  SpanBuffers<T> b;
  b.q = reinterpret_cast<float*>(sm + l.q);
  b.span_a = reinterpret_cast<float*>(sm + l.span_a);
  b.p = reinterpret_cast<float*>(sm + l.p);
  b.stats = reinterpret_cast<float*>(sm + l.stats);
  b.tok_pos = reinterpret_cast<int*>(sm + l.tok);
  b.tok_first = b.tok_pos + kAttnTileTokens;
  b.tok_partial = b.tok_first + kAttnTileTokens;
  b.slots = reinterpret_cast<int*>(sm + l.slots);
  b.kv = reinterpret_cast<T*>(sm + l.kv);
  return b;
}

// Reads the tile's token positions, first visible positions (sliding window) and, when its tile
// has several spans or the launch splits spans into chunks, first partial slots into b, and returns the tile's last position. Only the
// plan is read (uploaded before the step's first kernel, written by none), so the span kernels
// call this before the PDL wait and these dependent lookups overlap the previous kernel. Every
// thread of the block calls it (one __syncthreads).
template <typename T>
__device__ __forceinline__ int load_span_tokens(const AttentionArgs& a, const SpanBuffers<T>& b, int t0, int nt,
                                                int n_tile_spans) {
  const DevicePlan& P = a.plan;
  const int tid = threadIdx.x;
  if (tid < nt) {
    const int pos = P.positions[t0 + tid];
    b.tok_pos[tid] = pos;
    b.tok_first[tid] = attn::first_position(a, pos);
    if (n_tile_spans > 1 || a.chunk_split > 0) b.tok_partial[tid] = P.token_partial_begin[t0 + tid];
  }
  __syncthreads();
  int max_pos = 0;
  for (int tt = 0; tt < nt; ++tt) max_pos = max(max_pos, b.tok_pos[tt]);
  return max_pos;
}

// The span's K/V rows, chunk by chunk, into a ring of kStages stages of [K, V][chunk][hd] in
// shared memory. Each row is copied by kSpanThreads / chunk threads: 16-byte cp.async when both
// caches allow it, element copies otherwise. issue(i) always commits a group, so the callers'
// cp.async wait counts stay uniform. Shared by both span kernels, so they stage the same bytes.
template <typename T, int kStages>
struct SpanKvRing {
  static constexpr int kRows = kAttnChunkTokens;
  static constexpr int kLanesPerRow = kSpanThreads / kRows;
  static_assert(kLanesPerRow * kRows == kSpanThreads, "every thread copies pieces of one row per chunk");
  static constexpr int kPer16 = 16 / sizeof(T);

  const T* k_src;
  const T* v_src;
  int64_t k_stride, v_stride, kv_col;
  const int* slots;  // cache slot of each span row
  T* ring;
  int hd, n_rows, n_iter;
  bool vec;

  __device__ SpanKvRing(const AttentionArgs& a, int kv_head, const int* slots_, T* ring_, int n_rows_)
      : k_src(static_cast<const T*>(a.k_cache)),
        v_src(static_cast<const T*>(a.v_cache)),
        k_stride(a.k_cache_stride),
        v_stride(a.v_cache_stride),
        kv_col(int64_t{kv_head} * a.head_dim),
        slots(slots_),
        ring(ring_),
        hd(a.head_dim),
        n_rows(n_rows_),
        n_iter((n_rows_ + kRows - 1) / kRows),
        vec(a.k_cache_stride % kPer16 == 0 && a.v_cache_stride % kPer16 == 0 &&
            reinterpret_cast<uintptr_t>(a.k_cache) % 16 == 0 && reinterpret_cast<uintptr_t>(a.v_cache) % 16 == 0) {}

  // Chunk i's K rows (its V rows follow them).
  __device__ T* k(int i) const { return ring + (i % kStages) * 2 * kRows * hd; }

  __device__ void issue(int i, int tid) const { issue_at(i, i, tid); }
  // Chunk i's rows into the stage of ring position `at` (persistent blocks number the chunks of
  // all their spans in one sequence).
  __device__ void issue_at(int i, int at, int tid) const {
    const int r = tid / kLanesPerRow, part = tid % kLanesPerRow;
    if (i < n_iter && i * kRows + r < n_rows) {
      T* k_dst = k(at) + r * hd;
      T* v_dst = k_dst + kRows * hd;
      const int64_t slot = slots[i * kRows + r];
      const T* ks = k_src + slot * k_stride + kv_col;
      const T* vs = v_src + slot * v_stride + kv_col;
      if (vec) {
        for (int e = part * kPer16; e < hd; e += kLanesPerRow * kPer16) {
          cp_async16(k_dst + e, ks + e);
          cp_async16(v_dst + e, vs + e);
        }
      } else {
        for (int e = part; e < hd; e += kLanesPerRow) {
          k_dst[e] = ks[e];
          v_dst[e] = vs[e];
        }
      }
    }
    cp_async_commit();
  }
  // Whether this thread's row of chunk i is one of the span's rows and a token of this step
  // writes its cache slot (kv_slots[0, n_tokens)): early_kv copies such a row after the PDL wait.
  __device__ bool row_written(int i, int tid, const int32_t* kv_slots, int n_tokens) const {
    const int r = tid / kLanesPerRow;
    if (i >= n_iter || i * kRows + r >= n_rows) return false;
    const int slot = slots[i * kRows + r];
    bool hit = false;
    for (int t = 0; t < n_tokens; ++t) hit |= kv_slots[t] == slot;
    return hit;
  }
  // This thread's pieces of its row of chunk i, K and V, into ring position `at` with L2 loads
  // (the row was just written by another kernel; no L1 line of it may be used) and plain stores
  // (visible to the block after its next barrier).
  __device__ void copy_row_now(int i, int at, int tid) const {
    const int r = tid / kLanesPerRow, part = tid % kLanesPerRow;
    T* k_dst = k(at) + r * hd;
    T* v_dst = k_dst + kRows * hd;
    const int64_t slot = slots[i * kRows + r];
    const T* ks = k_src + slot * k_stride + kv_col;
    const T* vs = v_src + slot * v_stride + kv_col;
    if (vec) {
      for (int e = part * kPer16; e < hd; e += kLanesPerRow * kPer16) {
        *reinterpret_cast<uint4*>(k_dst + e) = __ldcg(reinterpret_cast<const uint4*>(ks + e));
        *reinterpret_cast<uint4*>(v_dst + e) = __ldcg(reinterpret_cast<const uint4*>(vs + e));
      }
    } else {
      for (int e = part; e < hd; e += kLanesPerRow) {
        k_dst[e] = __ldcg(ks + e);
        v_dst[e] = __ldcg(vs + e);
      }
    }
  }
  // Only the K rows (v = false) or only the V rows of chunk i into ring position `at`, as one
  // cp.async group (the split K/V ring).
  __device__ void issue_half_at(int i, int at, int tid, bool v) const {
    const int r = tid / kLanesPerRow, part = tid % kLanesPerRow;
    if (i < n_iter && i * kRows + r < n_rows) {
      const int64_t slot = slots[i * kRows + r];
      T* dst = k(at) + (v ? kRows * hd : 0) + r * hd;
      const T* src = v ? v_src + slot * v_stride + kv_col : k_src + slot * k_stride + kv_col;
      if (vec) {
        for (int e = part * kPer16; e < hd; e += kLanesPerRow * kPer16) cp_async16(dst + e, src + e);
      } else {
        for (int e = part; e < hd; e += kLanesPerRow) dst[e] = src[e];
      }
    }
    cp_async_commit();
  }
  // issue_at with the K rows and the V rows in two groups (K first), so a caller can wait for a
  // chunk's K while its V is still in flight (the two-chunk kernels: V is needed one phase later).
  // skip: this thread copies nothing (its row is copied later), the groups are still committed.
  __device__ void issue_split_at(int i, int at, int tid, bool skip = false) const {
    if (skip) {
      cp_async_commit();
      cp_async_commit();
      return;
    }
    issue_half_at(i, at, tid, false);
    issue_half_at(i, at, tid, true);
  }
};

// The two-chunk span kernels (attention_span_pair.cu; span_kernel 2 or 3); a.kv_stages in 2..4.
void launch_attention_span_pair(const AttentionArgs& a, const LaunchEnv& env, dim3 grid, size_t smem);
void init_attention_span_pair(int max_smem_bytes);
// Resident blocks per SM of the two-chunk kernel that `a` launches with `smem` bytes.
int attention_span_pair_blocks_per_sm(const AttentionArgs& a, size_t smem);

}  // namespace tern::cuda
