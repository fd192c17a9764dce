// The span decode kernel and its merge (attention.h, "split mode: the span kernel").
//
// Why a second split-mode kernel: the chunk kernel (attention.cu) measured latency-bound on its
// copies (bench/RESULTS.md), at 17% of the copy bandwidth for a 32k decode. Here, per block:
//   - the span's block-table lookups are done once, one row per thread, all in flight, and
//     before the PDL wait (the plan is uploaded before the step's first kernel), so they overlap
//     the previous kernel;
//   - a chunk's copy is issued with no dependent load inside: each thread copies pieces of one
//     row whose slot it read from shared memory once;
//   - up to all four chunks of the span are in flight (kv_stages), 256 threads per block and two
//     blocks per SM at head_dim 128 (f16, 3 stages: ~100 KB each), so an SM keeps far more than
//     the ~26 KB that 4.2 TB/s x ~0.8 us of latency asks for per SM;
//   - a short context (too few spans x KV heads to fill the GPU) spreads a GQA group's q heads
//     over several blocks (heads_per_block), which then read the same K/V, mostly from L2.
// The arithmetic is attention_chunk.cuh's, called in the same order as the chunk kernel calls it,
// so every query's result is bit-identical to the chunk kernel's, split or fused (tested).
//
// The merge folds a (token, head)'s span partials in span order with fold_stats / fold_acc, as
// attention.cu's merge does, but loads a batch of partials at once (cp.async into shared memory)
// and computes the running maxima as a prefix max (max is exact, so any association gives the
// same values) and all fold scales in parallel, leaving only the L / A products sequential.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cmath>

#include "backends/cuda/async_copy.cuh"
#include "backends/cuda/attention.h"
#include "backends/cuda/attention_chunk.cuh"
#include "backends/cuda/attention_chunk_fold.cuh"
#include "backends/cuda/attention_span.cuh"
#include "backends/cuda/attention_span_merge.cuh"
#include "backends/cuda/common.cuh"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/launch.cuh"

namespace tern::cuda {
namespace {

using attn::C;
constexpr int kThreads = kSpanThreads;
constexpr int kWarps = kThreads / 32;
static_assert(kAttnSpanTokens <= kThreads, "a span's block-table lookups take one thread each");
constexpr int kMaxStages = kSpanMaxStages;
int g_n_sm = 132;  // the device's SMs (init_attention_span): persistent grids
// TERN_CUDA_ATTN_PERSIST_COLS=n (read when a backend is created; tests): persistent grids of n
// blocks per (KV head, head slice) wherever a plan has at least n spans.
int g_persist_cols = 0;
int g_max_smem = 0;  // the span kernels' shared-memory limit (init_attention_span)
std::atomic<int64_t> g_ws_launches{0};  // attention_span_ws_launches
std::atomic<int64_t> g_ws_lean_launches{0};  // attention_span_ws_lean_launches
std::atomic<int64_t> g_merge_sliced_launches{0};  // attention_span_merge_sliced_launches
std::atomic<int64_t> g_merge_prescaled_launches{0};  // attention_span_merge_prescaled_launches
// TERN_CUDA_ATTN_SPAN_HPB=1/2/4 (read when a backend is created; A/B timing): q heads per block
// of the span kernels instead of plan_attention_span's choice (capped at the GQA group).
int g_force_hpb = 0;

// One block per (split item, KV head, head slice): the span partials of the tile's queries.
template <typename T, int kStages>
__global__ void __launch_bounds__(kThreads, 2) attention_span_kernel(AttentionArgs a) {
  extern __shared__ __align__(16) unsigned char sm[];
  const SpanShape sh = span_shape_of(a);
  const DevicePlan& P = a.plan;
  const int tid = threadIdx.x, hd = a.head_dim;
  const SpanItem it = span_item_of(a);
  const int tile = it.tile, span = it.span;
  const int g = it.y / sh.n_slices, slice = it.y % sh.n_slices;
  const int h0 = g * sh.group + slice * sh.hpb;
  const int nh = min(sh.hpb, sh.group - slice * sh.hpb);
  const int t0 = it.t0, nt = it.nt, n_tile_spans = it.n_tile_spans;
  const int nq = nt * nh;

  const SpanSmem L = span_smem(a, sh, kStages);
  const SpanBuffers<T> B = span_buffers<T>(sm, L);
  float *q_s = B.q, *span_a = B.span_a, *p_s = B.p, *stats = B.stats;
  int *tok_pos = B.tok_pos, *tok_first = B.tok_first, *tok_partial = B.tok_partial, *slots = B.slots;
  T* kv_s = B.kv;
  const int na = sh.nq_alloc;
  const attn::Queries Q{nq,          nh,           hd,         attn::seg_lanes_of(hd), q_s,       p_s,
                        stats,       stats + na,   stats + 2 * na, stats + 3 * na,     span_a,    stats + 4 * na,
                        stats + 5 * na, tok_pos, tok_first};

  // Before the PDL wait only the plan is read, so these lookups overlap the previous kernel.
  const int max_pos = load_span_tokens(a, B, t0, nt, n_tile_spans);
  const int32_t* blocks = P.block_ids + P.block_offsets[P.seq_index[t0]];
  const int j_begin = span * kAttnSpanTokens;
  const int n_rows = min(kAttnSpanTokens, max_pos + 1 - j_begin);  // >= 1: the plan's spans cover max_pos
  if (tid < n_rows) {
    const int j = j_begin + tid;
    slots[tid] = blocks[j / a.block_tokens] * a.block_tokens + j % a.block_tokens;
  }
  pdl_wait();  // q, this step's K/V rows, and partials a predecessor may still read
  pdl_launch_dependents();
  __syncthreads();  // slots visible

  const SpanKvRing<T, kStages> kv(a, g, slots, kv_s, n_rows);
  const int n_iter = kv.n_iter;
  auto stage_k = [&](int i) { return kv.k(i); };
  auto issue = [&](int i) { kv.issue(i, tid); };
  for (int i = 0; i + 1 < kStages; ++i) issue(i);

  for (int i = tid; i < nq * hd; i += kThreads) {
    const int qi = i / hd, d = i - qi * hd;
    q_s[i] = a.q[int64_t{t0 + qi / nh} * a.q_stride + int64_t{h0 + qi % nh} * hd + d];
    span_a[i] = 0.0f;
  }
  for (int i = tid; i < nq; i += kThreads) {
    Q.span_m[i] = -INFINITY;
    Q.span_l[i] = 0.0f;
  }

  for (int i = 0; i < n_iter; ++i) {
    issue(i + kStages - 1);
    cp_async_wait<kStages - 1>();
    __syncthreads();  // chunk i (and, the first time, q and the span state) visible to every thread
    const int j0 = j_begin + i * C;
    const T* k_s = stage_k(i);
    attn::chunk_scores<kThreads>(Q, k_s, j0, a.scale, a.softcap);
    __syncthreads();
    attn::chunk_softmax<kWarps>(Q);
    __syncthreads();
    attn::chunk_values<kThreads, 2>(Q, k_s + C * hd, j0);
    __syncthreads();  // stage i, p_s and the statistics are free for the next chunk
  }
  span_merge::finish_span<kThreads>(Q, a, tile, n_tile_spans, tok_partial, t0, nt, h0, nh, span, it.y, it.ny,
                                    sm + L.kv, L.total - L.kv);
}

// Where the merge kernels let the o projection launch (kMergeTrigger*, attention_span_merge.cuh):
// after the fold where the model is wide enough that the o projection's first weight stages are
// megabytes (8B: 4096 = 32 x 128; its merge waited 6.5 us for records in L2 while those streamed
// in; H200 Q4_K_M 438.6 -> 442.3 tok/s at 1k, 248.4 -> 253.3 at 32k), right after the wait where it
// is narrow (SmolLM2: 576, the late launch cost 4%). TERN_CUDA_MERGE_TRIGGER=0/1 overrides
// (read once per process).
int merge_trigger(const AttentionArgs& a) {
  static const int forced = [] {
    const char* e = std::getenv("TERN_CUDA_MERGE_TRIGGER");
    return e != nullptr && (e[0] == '0' || e[0] == '1') && e[1] == '\0' ? e[0] - '0' : -1;
  }();
  if (forced >= 0) return forced;
  return a.n_heads * a.head_dim >= 2048 ? kMergeTriggerFolded : kMergeTriggerEnter;
}

constexpr int kMergeThreads = 128;
constexpr int kMergePerThread = kAttnMaxHeadDim / kMergeThreads;

// Chunk split (AttentionArgs::chunk_split): folds a (token, head)'s chunk records into span
// partials, chunk order from (-inf, 0, 0) skipping empty chunks (what a span block's pair steps
// do with fold_stats / fold_acc), and those into the result in span order, skipping empty spans
// (what the merge kernel does: fold_scales / fold_sum are fold_stats' expressions, its prefix
// max the same running max). The same sequence of the same expressions, so the same bits. A
// token reads its chunks up to its own position: record index first * 4 + k is chunk k % 4 of
// span first + k / 4. One block per (token, head), kChunkMergeBatch records in flight.
// kTrigger: where the block lets the next kernel launch (merge_trigger()).
constexpr int kChunkMergeBatch = 16;
template <int kTrigger>
__global__ void __launch_bounds__(kMergeThreads) attention_chunk_merge_kernel(AttentionArgs a) {
  const int t = blockIdx.x, h = blockIdx.y, hd = a.head_dim, tid = threadIdx.x;
  const DevicePlan& P = a.plan;
  const int n_chunks = P.positions[t] / kAttnChunkTokens + 1;
  const int64_t stride = int64_t{a.n_heads} * (hd + 2);
  const float* rec0 = a.partials + (int64_t{P.token_partial_begin[t]} * kAttnSpanChunks * a.n_heads + h) * (hd + 2);
  pdl_wait();
  if constexpr (kTrigger == kMergeTriggerEnter) pdl_launch_dependents();
  // (attention_chunk_fold.cuh, shared with the fused decode's last block)
  chunk_fold::fold_records<kMergePerThread, kChunkMergeBatch, false>(
      rec0, stride, n_chunks, hd, tid, kMergeThreads, a.out + t * a.out_stride + int64_t{h} * hd, [] {
        if constexpr (kTrigger == kMergeTriggerFolded) pdl_launch_dependents();
      });
}

void launch_chunk_merge(const AttentionArgs& a, const LaunchEnv& env) {
  const dim3 grid(static_cast<unsigned>(a.plan.n_tokens), static_cast<unsigned>(a.n_heads));
  if (merge_trigger(a) == kMergeTriggerFolded) {
    launch_kernel(env, attention_chunk_merge_kernel<kMergeTriggerFolded>, grid, kMergeThreads, 0, a);
  } else {
    launch_kernel(env, attention_chunk_merge_kernel<kMergeTriggerEnter>, grid, kMergeThreads, 0, a);
  }
}

inline size_t merge_smem_bytes(int head_dim) {
  return span_merge::batch_bytes(head_dim, span_merge::batch_spans(head_dim));
}

// Folds a (token, head)'s span partials in span order (the same fold_stats / fold_acc sequence
// as attention.cu's merge and the fused mode; attention_span_merge.cuh, shared with the folded
// merge). One block per (token, head).
__global__ void __launch_bounds__(kMergeThreads) attention_span_merge_kernel(AttentionArgs a) {
  extern __shared__ __align__(16) unsigned char sm[];
  span_merge::merge_token_head<kMergeThreads, kMergePerThread, false, true>(
      a, blockIdx.x, blockIdx.y, reinterpret_cast<float*>(sm), span_merge::batch_spans(a.head_dim));
}

// kSpanMergeSliced: the same fold with a block per (token, head, kMergeSliceDims dimensions), so a
// single decode's heads fill more SMs (merge_token_head_slice); kMergeSliceBatch spans per batch.
// kPrescaled (kSpanMergePrescaled): the fold's products formed by the whole block ahead of it.
constexpr int kMergeSliceDims = 32;
constexpr int kMergeSliceBatch = 256;
template <int kTrigger, bool kPrescaled>
__global__ void __launch_bounds__(kMergeThreads) attention_span_merge_sliced_kernel(AttentionArgs a) {
  extern __shared__ __align__(16) unsigned char sm[];
  span_merge::merge_token_head_slice<kMergeThreads, kMergeSliceDims, kTrigger, kPrescaled>(
      a, blockIdx.x, blockIdx.y, static_cast<int>(blockIdx.z) * kMergeSliceDims, reinterpret_cast<float*>(sm),
      kMergeSliceBatch);
}

template <typename T, int kStages>
void set_span_smem(int max_smem_bytes) {
  TERN_CUDA_CHECK(
      cudaFuncSetAttribute(attention_span_kernel<T, kStages>, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem_bytes));
}

template <typename T>
void launch_span(const AttentionArgs& a, const LaunchEnv& env, dim3 grid, size_t smem) {
  switch (a.kv_stages) {
    case 1: launch_kernel(env, attention_span_kernel<T, 1>, grid, kThreads, smem, a); break;
    case 2: launch_kernel(env, attention_span_kernel<T, 2>, grid, kThreads, smem, a); break;
    case 3: launch_kernel(env, attention_span_kernel<T, 3>, grid, kThreads, smem, a); break;
    default: launch_kernel(env, attention_span_kernel<T, 4>, grid, kThreads, smem, a); break;
  }
}

}  // namespace

bool plan_attention_span(AttentionArgs& a, int n_sm, int max_smem_bytes, int preferred_stages, int kernel) {
  const int group = a.n_heads / a.n_kv_heads;
  const int split_asked = a.chunk_split;
  a.chunk_split = 0;  // until a two-chunk kernel is planned
  if (merge_smem_bytes(a.head_dim) > static_cast<size_t>(max_smem_bytes)) return false;
  // Fewer q heads per block (more blocks reading the same K/V, mostly from L2) until the grid
  // covers every SM twice; a head's queries stay whole, so the split changes no arithmetic.
  // Chunk split (two-chunk kernels only): kAttnSpanChunks / chunk_split blocks per span item.
  const int base = kernel & kSpanKernelMask;
  const int cs = (base == 2 || base == 3) && (split_asked == 1 || split_asked == 2) ? split_asked : 0;
  const int parts = cs > 0 ? kAttnSpanChunks / cs : 1;
  int hpb = group < kAttnMaxHeadsPerBlock ? group : kAttnMaxHeadsPerBlock;
  auto n_blocks = [&](int h) { return int64_t{a.plan.n_split_items} * parts * a.n_kv_heads * ((group + h - 1) / h); };
  // With the chunk split the parts already multiply the blocks, and a whole GQA group per block
  // measured fastest (8B at 1k: 12.9 us/layer with 4 q heads per block, 19.4 with 2, 27.3 with 1).
  // So did whole spans once a tile has several (H200, session 7, bench/RESULTS.md "Mid-length
  // decode attention"): 8B shape (kernel 1779) at 1k / 2k / 4k / 6k 14.0 / 15.1 / 18.2 / 20.4
  // us/layer with the group whole against 21.9 / 26.8 / 25.6 / 42.8 with it spread over 1 or 2
  // q heads per block; SmolLM2's kernel 2 at 6k / 8k 21.7 / 22.4 against 23.2 / 35.9. Only plans
  // whose tiles each hold one span (short contexts, which the span blocks merge themselves)
  // still spread a group over blocks.
  const bool one_span_tiles = a.plan.n_split_items <= a.plan.n_tiles;
  while (cs == 0 && one_span_tiles && hpb > 1 && n_blocks(hpb) < 2 * int64_t{n_sm}) hpb = (hpb + 1) / 2;
  if (g_force_hpb > 0) hpb = std::min(g_force_hpb, std::min(group, kAttnMaxHeadsPerBlock));
  AttentionArgs trial = a;
  trial.heads_per_block = hpb;
  const SpanShape sh = span_shape_of(trial);
  // The two-chunk kernels compute two chunks per step, so they keep at least two stages. The
  // heads-first block order needs the items on grid y (at most 65535 of them).
  int flags = int64_t{a.plan.n_split_items} * parts <= 65535 ? kernel & kSpanHeadsFirst : 0;
  if ((base == 2 || base == 3) && cs == 0) flags |= kernel & kSpanPersistent;
  if (base == 3) flags |= kernel & kSpanValuePairs;
  // The split ring (and its all-warp values step) exists for the compile-time head_dim 128 f16
  // form with two value dimensions, and pays off across a block's steps: not for a chunk-split
  // block, which takes one step. Elsewhere the flags are dropped (same bits either way).
  const bool ring_form = a.head_dim == 128 && a.kv_dtype == DType::F16 && (flags & kSpanValuePairs) != 0;
  if (base == 3 && ring_form && cs == 0 && (kernel & kSpanSplitRing) != 0) {
    flags |= kernel & (kSpanSplitRing | kSpanValueQueryPairs | kSpanWarpSpecialized | kSpanWsLean);
  }
  flags |= kernel & (kSpanMergeSliced | kSpanMergePrescaled);  // (the merge kernel of whole spans; ignored elsewhere)
  const bool pair = base == 2 || base == 3;
  const int min_stages = pair ? 2 : 1;
  // A chunk-split block holds at most 2 chunks: 2 stages, and the smaller block fits more per SM.
  const int max_stages = cs > 0 ? 2 : kMaxStages;
  for (int stages = std::min(std::max(preferred_stages, min_stages), max_stages); stages >= min_stages; --stages) {
    if (span_smem(trial, sh, stages, pair ? 2 : 1).total <= static_cast<size_t>(max_smem_bytes)) {
      a.heads_per_block = hpb;
      a.kv_stages = stages;
      a.span_kernel = (pair ? base : 1) | flags;
      a.chunk_split = pair ? cs : 0;
      return true;
    }
  }
  return pair && plan_attention_span(a, n_sm, max_smem_bytes, preferred_stages, 1 | (flags & kSpanHeadsFirst));
}

void launch_attention_span(const AttentionArgs& a, const LaunchEnv& env) {
  if ((a.span_kernel & kSpanCompact) != 0) {  // the compact per-chunk kernel (attention_compact.cu), then the chunk merge
    launch_attention_compact(a, env);
    launch_chunk_merge(a, env);
    return;
  }
  const SpanShape sh = span_shape_of(a);
  const unsigned parts = a.chunk_split > 0 ? static_cast<unsigned>(kAttnSpanChunks / a.chunk_split) : 1u;
  const unsigned n_items = static_cast<unsigned>(a.plan.n_split_items) * parts;
  const unsigned ny = static_cast<unsigned>(a.n_kv_heads * sh.n_slices);
  dim3 grid = (a.span_kernel & kSpanHeadsFirst) != 0 ? dim3(ny, n_items) : dim3(n_items, ny);
  const int kernel = a.span_kernel & kSpanKernelMask;
  if (kernel == 2 || kernel == 3) {
    AttentionArgs b = a;
    // Persistent blocks only where a plan of one tile has at least three rounds of resident
    // blocks' spans (never with the folded merge, which reuses the K/V ring as scratch).
    b.span_kernel &= ~kSpanPersistent;
    // The split ring issues its prologue after the PDL wait: not with early_kv.
    if (a.early_kv) b.span_kernel &= ~(kSpanSplitRing | kSpanWarpSpecialized);
    const bool split_ring = (b.span_kernel & kSpanSplitRing) != 0;
    // The warp-specialized ring (attention_span_pair.cu): 3 stages, no folded merge, 16-byte
    // copies only, and its double-buffered p must fit; else the split ring kernel (same bits).
    if ((b.span_kernel & kSpanWarpSpecialized) != 0) {
      const bool aligned = a.k_cache_stride % 8 == 0 && a.v_cache_stride % 8 == 0 &&
                           reinterpret_cast<uintptr_t>(a.k_cache) % 16 == 0 &&
                           reinterpret_cast<uintptr_t>(a.v_cache) % 16 == 0;
      const bool fits = span_smem(a, sh, a.kv_stages, 4).total <= static_cast<size_t>(g_max_smem);
      if (!split_ring || a.kv_stages != 3 || a.fold_merge || a.chunk_split != 0 || !aligned || !fits) {
        b.span_kernel &= ~kSpanWarpSpecialized;
      }
    }
    // The lean form addresses cache rows with 32-bit byte strides.
    const int64_t max_row_bytes = int64_t{1} << 30;
    if (a.k_cache_stride * 2 >= max_row_bytes || a.v_cache_stride * 2 >= max_row_bytes) b.span_kernel &= ~kSpanWsLean;
    const bool warp_specialized = (b.span_kernel & kSpanWarpSpecialized) != 0;
    if (warp_specialized) g_ws_launches.fetch_add(1, std::memory_order_relaxed);
    if (warp_specialized && (b.span_kernel & kSpanWsLean) != 0) g_ws_lean_launches.fetch_add(1, std::memory_order_relaxed);
    const size_t smem = span_smem(a, sh, a.kv_stages, warp_specialized ? 4 : 2).total;
    if ((a.span_kernel & kSpanPersistent) != 0 && a.plan.n_tiles == 1 && !a.fold_merge && a.chunk_split == 0 &&
        (a.kv_stages >= 3 || split_ring)) {
      const int per_sm = attention_span_pair_blocks_per_sm(b, smem);
      int cols = std::max(1, per_sm * g_n_sm / static_cast<int>(ny));  // resident blocks per (KV head, slice)
      int rounds = 3;  // (measured slower at ~1 round: 4k contexts)
      if (g_persist_cols > 0) cols = g_persist_cols, rounds = 1;  // tests: many spans per block at any context
      if (static_cast<int>(n_items) >= rounds * cols) {
        const int per_block = (static_cast<int>(n_items) + cols - 1) / cols;  // spans per block, even split
        const int stride = (static_cast<int>(n_items) + per_block - 1) / per_block;
        grid = dim3(ny * static_cast<unsigned>(stride));
        b.span_kernel |= kSpanPersistent;
      }
    }
    launch_attention_span_pair(b, env, grid, smem);
  } else if (a.kv_dtype == DType::F16) {
    launch_span<__half>(a, env, grid, span_smem(a, sh, a.kv_stages).total);
  } else {
    launch_span<float>(a, env, grid, span_smem(a, sh, a.kv_stages).total);
  }
  if (a.fold_merge) return;  // the span blocks merged (attention_span_merge.cuh)
  if (a.chunk_split > 0) {
    launch_chunk_merge(a, env);
    return;
  }
  if ((a.span_kernel & kSpanMergeSliced) != 0 && a.head_dim % kMergeSliceDims == 0) {
    g_merge_sliced_launches.fetch_add(1, std::memory_order_relaxed);
    const dim3 grid(static_cast<unsigned>(a.plan.n_tokens), static_cast<unsigned>(a.n_heads),
                    static_cast<unsigned>(a.head_dim / kMergeSliceDims));
    const size_t smem = span_merge::batch_bytes(kMergeSliceDims, kMergeSliceBatch);
    const bool folded = merge_trigger(a) == kMergeTriggerFolded;
    if ((a.span_kernel & kSpanMergePrescaled) != 0) {
      g_merge_prescaled_launches.fetch_add(1, std::memory_order_relaxed);
      launch_kernel(env,
                    folded ? attention_span_merge_sliced_kernel<kMergeTriggerFolded, true>
                           : attention_span_merge_sliced_kernel<kMergeTriggerEnter, true>,
                    grid, kMergeThreads, smem, a);
    } else {
      launch_kernel(env,
                    folded ? attention_span_merge_sliced_kernel<kMergeTriggerFolded, false>
                           : attention_span_merge_sliced_kernel<kMergeTriggerEnter, false>,
                    grid, kMergeThreads, smem, a);
    }
    return;
  }
  launch_kernel(env, attention_span_merge_kernel,
                dim3(static_cast<unsigned>(a.plan.n_tokens), static_cast<unsigned>(a.n_heads)), kMergeThreads,
                merge_smem_bytes(a.head_dim), a);
}

int64_t attention_span_ws_launches() { return g_ws_launches.load(std::memory_order_relaxed); }
int64_t attention_span_ws_lean_launches() { return g_ws_lean_launches.load(std::memory_order_relaxed); }
int64_t attention_span_merge_sliced_launches() { return g_merge_sliced_launches.load(std::memory_order_relaxed); }
int64_t attention_span_merge_prescaled_launches() {
  return g_merge_prescaled_launches.load(std::memory_order_relaxed);
}

void init_attention_span(int max_smem_bytes) {
  int dev = 0;
  TERN_CUDA_CHECK(cudaGetDevice(&dev));
  TERN_CUDA_CHECK(cudaDeviceGetAttribute(&g_n_sm, cudaDevAttrMultiProcessorCount, dev));
  const char* cols = std::getenv("TERN_CUDA_ATTN_PERSIST_COLS");
  g_persist_cols = cols != nullptr ? std::max(0, std::atoi(cols)) : 0;
  const char* hpb = std::getenv("TERN_CUDA_ATTN_SPAN_HPB");
  g_force_hpb = hpb != nullptr ? std::max(0, std::atoi(hpb)) : 0;
  g_max_smem = max_smem_bytes;
  set_span_smem<__half, 1>(max_smem_bytes);
  set_span_smem<__half, 2>(max_smem_bytes);
  set_span_smem<__half, 3>(max_smem_bytes);
  set_span_smem<__half, 4>(max_smem_bytes);
  set_span_smem<float, 1>(max_smem_bytes);
  set_span_smem<float, 2>(max_smem_bytes);
  set_span_smem<float, 3>(max_smem_bytes);
  set_span_smem<float, 4>(max_smem_bytes);
  TERN_CUDA_CHECK(
      cudaFuncSetAttribute(attention_span_merge_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem_bytes));
  init_attention_span_pair(max_smem_bytes);
}

}  // namespace tern::cuda
