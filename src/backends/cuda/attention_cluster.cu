// Short-context decode attention in one launch, the chunk records merged on chip (attention.h
// "cluster merge"; sm_90 thread-block clusters and distributed shared memory).
//
// Why: with the chunk split a 1k decode of the 8B shape ran as a kernel of 17 one-chunk blocks per
// KV head (15.4 us in ncu) plus the chunk merge kernel (5.6 us), while its 4 MB of K/V take ~1 us
// at HBM speed. Folding the merge into the last block on a counter (attention_fused.cuh,
// kAttnFusedMerge) was 3 us slower: the count, the fence and the reload of every record from L2
// sat behind the last block. Here the blocks of one (tile, KV head x head slice) form a cluster:
// each computes the records of its chunks into its own shared memory, one cluster barrier
// (release / acquire) makes them visible, and every block folds a slice of the outputs reading
// the records from its peers' shared memory (mapa). No global round trip, no counter.
//
// Same bits as the chunk split + chunk merge kernel: a chunk's record (m, l, a) depends on its
// own positions only and is computed by the same step functions (attention_span_steps.cuh, whose
// chunk_rec writes to shared memory here), and the fold is attention_chunk_fold.cuh's, the chunk
// merge kernel's sequence (chunk order into span partials, span order into the result).
//
// Layout: grid (n_tiles x cluster_blocks, n_kv_heads x n_slices), cluster (cluster_blocks, 1, 1);
// block r of a tile's cluster takes chunks [r cpb, r cpb + cpb) of the tile (cpb =
// cluster_chunks), two per step, through a ring of cluster_stages K/V stages. With the fused rope
// (kAttnFusedRope) the rows of this step's tokens are computed in the launch, so no copy depends
// on the kernel before: the first K/V chunks are issued before the PDL wait.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "backends/cuda/async_copy.cuh"
#include "backends/cuda/attention.h"
#include "backends/cuda/attention_chunk.cuh"
#include "backends/cuda/attention_chunk_fold.cuh"
#include "backends/cuda/attention_fused.cuh"
#include "backends/cuda/attention_span.cuh"
#include "backends/cuda/attention_span_steps.cuh"
#include "backends/cuda/common.cuh"
#include "backends/cuda/cuda_check.h"

namespace tern::cuda {
namespace {

using namespace span_steps;  // attention_span_steps.cuh

constexpr int kMaxClusterBlocks = 16;  // non-portable cluster size (cudaFuncAttributeNonPortableClusterSizeAllowed)
constexpr int kMaxClusterChunks = 16;  // chunks per block (its slots and records in shared memory)

// The device code below runs on sm_90+ only (clusters); other device passes leave it out, so
// they do not see these helpers unused.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
constexpr int kMergeBatch = 16;        // records in flight per thread in the fold

// Cluster barrier: arrive with release, wait with acquire semantics at cluster scope (the PTX
// defaults), so shared-memory stores before it are visible to every block of the cluster after it.
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive;\nbarrier.cluster.wait;\n" ::: "memory");
#endif
}
// The generic address of p (this block's shared memory) in the shared memory of cluster block rank.
__device__ __forceinline__ const float* peer_shared(const float* p, int rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint64_t out;
  asm volatile("mapa.u64 %0, %1, %2;\n" : "=l"(out) : "l"(reinterpret_cast<uint64_t>(p)), "r"(rank));
  return reinterpret_cast<const float*>(out);
#else
  return p;
#endif
}
#endif

// Shared memory: the span kernels' layout for two chunks per step (span_smem), then this block's
// cache slots [cpb C] and chunk records [cpb][na][hd + 2].
struct ClusterSmem {
  size_t slots, recs, total;
};
__host__ __device__ inline ClusterSmem cluster_smem(const AttentionArgs& a, const SpanShape& sh, int stages, int cpb) {
  ClusterSmem l;
  l.slots = span_smem(a, sh, stages, kPair).total;
  l.recs = (l.slots + sizeof(int) * static_cast<size_t>(cpb) * kAttnChunkTokens + 15) / 16 * 16;
  l.total = l.recs + sizeof(float) * static_cast<size_t>(cpb) * sh.nq_alloc * (a.head_dim + 2);
  return l;
}

template <typename T, int kStages, bool kGroup, int kHd, int kVDims>
__global__ void __launch_bounds__(kThreads, 2) attention_cluster_kernel(AttentionArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  static_assert(kStages >= kPair, "a step needs both of its chunks resident");
  extern __shared__ __align__(16) unsigned char sm[];
  const SpanShape sh = span_shape_of(a);
  const DevicePlan& P = a.plan;
  const int tid = threadIdx.x, hd = kHd != 0 ? kHd : a.head_dim;
  const int n_blocks = a.cluster_blocks, cpb = a.cluster_chunks;
  const int rank = static_cast<int>(blockIdx.x) % n_blocks, tile = static_cast<int>(blockIdx.x) / n_blocks;
  const int y = blockIdx.y;
  const int g = y / sh.n_slices, slice = y % sh.n_slices;
  const int h0 = g * sh.group + slice * sh.hpb;
  const int nh = min(sh.hpb, sh.group - slice * sh.hpb);
  const int t0 = P.n_tiles == 1 ? 0 : P.tile_token_begin[tile];
  const int nt = P.n_tiles == 1 ? P.n_tokens : P.tile_n_tokens[tile];
  const int nq = nt * nh;

  const SpanSmem L = span_smem(a, sh, kStages, kPair);
  const ClusterSmem CL = cluster_smem(a, sh, kStages, cpb);
  const SpanBuffers<T> B = span_buffers<T>(sm, L);
  float *q_s = B.q, *p_s = B.p, *stats = B.stats;
  int* tok_pos = B.tok_pos;
  int* slots = reinterpret_cast<int*>(sm + CL.slots);
  float* recs = reinterpret_cast<float*>(sm + CL.recs);
  T* kv_s = B.kv;
  const int na = sh.nq_alloc;

  const int max_pos = load_span_tokens(a, B, t0, nt, 0);
  const int c_lo = rank * cpb;
  const int c_hi = min(c_lo + cpb, max_pos / C + 1);
  const int j_begin = c_lo * C;
  const int n_rows = max(0, min(c_hi * C, max_pos + 1) - j_begin);  // 0: a block past the tile's chunks
  const int n_iter = (n_rows + C - 1) / C;

  PairQueries Q;
  Q.nq = nq, Q.nh = nh, Q.hd = hd, Q.na = na, Q.seg_lanes = attn::seg_lanes_of(hd);
  Q.q = q_s, Q.p = p_s, Q.span_a = B.span_a;
  Q.m_c = stats, Q.l_c = stats + 2 * na, Q.span_m = stats + 4 * na, Q.span_l = stats + 5 * na;
  Q.sa = stats + 6 * na, Q.sb = stats + 8 * na;
  Q.tok_pos = tok_pos, Q.tok_first = B.tok_first;
  Q.chunk_out = recs, Q.tok_partial = B.tok_partial, Q.span = 0, Q.chunk0 = c_lo, Q.local0 = c_lo;
  Q.n_heads = a.n_heads, Q.h0 = h0;

  const int32_t* blocks = P.block_ids + P.block_offsets[P.seq_index[t0]];
  for (int r = tid; r < n_rows; r += kThreads) {  // only the plan is read: before the PDL wait
    const int j = j_begin + r;
    slots[r] = blocks[j / a.block_tokens] * a.block_tokens + j % a.block_tokens;
  }
  const bool rope = (a.fused & kAttnFusedRope) != 0;
  const SpanKvRing<T, kStages> ring(a, g, slots, kv_s, n_rows);
  constexpr int kLanesPerRow = SpanKvRing<T, kStages>::kLanesPerRow;
  auto stage_k = [&](int gi) { return kv_s + (gi % kStages) * 2 * C * hd; };
  // Ring position gi = the block's chunk gi, K then V as two cp.async groups (empty past the
  // last); with the fused rope the rows of the step's tokens are computed (new_rows), not copied.
  auto issue = [&](int gi) {
    const int j = j_begin + gi * C + tid / kLanesPerRow;
    ring.issue_split_at(gi, gi, tid, rope && fused::is_new_row(tok_pos, nt, j));
  };
  auto new_rows = [&](int gi) {  // (after the PDL wait: the k and v rows are the kernel before's)
    if (gi < n_iter) {
      fused::write_new_rows<T, kThreads>(a, tok_pos, t0, nt, g, slice == 0, j_begin + gi * C,
                                         min(C, n_rows - gi * C), stage_k(gi), 1);
    }
  };
  // With the fused rope every row a copy reads was written by an earlier step (this step's rows
  // are computed above), so ring positions 0 .. kStages - 1 go out before the PDL wait, overlapping
  // the kernel before (attention.h early_kv's argument, with no row to defer).
  if (rope) {
    __syncthreads();  // slots visible
    for (int gi = 0; gi < kStages; ++gi) issue(gi);
  }
  pdl_wait();
  pdl_launch_dependents();
  if (rope) {
    fused::load_q<kThreads>(a, q_s, tok_pos, t0, h0, nh, nq, hd);
    for (int gi = 0; gi < kStages; ++gi) new_rows(gi);
  } else {
    __syncthreads();  // slots visible
    for (int gi = 0; gi + kPair < kStages; ++gi) issue(gi);
    for (int i = tid; i < nq * hd; i += kThreads) {
      const int qi = i / hd, d = i - qi * hd;
      q_s[i] = a.q[int64_t{t0 + qi / nh} * a.q_stride + int64_t{h0 + qi % nh} * hd + d];
    }
  }

  // The block's chunks, two per step, as the chunk-split span blocks compute them (attention_span_pair.cu).
  for (int i = 0; i < n_iter; i += kPair) {
    const int gi = i;
    // Stages of ring positions gi + kStages - 2 and gi + kStages - 1 held gi - 2 and gi - 1,
    // which the previous step finished with (its last barrier).
    if (gi > 0 || !rope) {
      issue(gi + kStages - 2);
      issue(gi + kStages - 1);
      if (rope) {
        new_rows(gi + kStages - 2);
        new_rows(gi + kStages - 1);
      }
    }
    cp_async_wait<2 * (kStages - kPair) + 1>();  // chunks gi's K and V and gi + 1's K landed
    __syncthreads();
    const int n_chunks = min(kPair, n_iter - i);
    const int j0 = j_begin + i * C;
    Q.chunk0 = c_lo + i;
    const T* k0 = stage_k(gi);
    const T* k1 = stage_k(gi + 1);
    if constexpr (kGroup && kHd != 0) {
      group_scores<kHd>(Q, k0, k1, n_chunks * C, j0, a.scale, a.softcap, threadIdx.x);
    } else {
      pair_scores<kGroup>(Q, k0, k1, n_chunks * C, j0, a.scale, a.softcap);
    }
    __syncthreads();
    pair_softmax<kGroup>(Q, n_chunks, threadIdx.x >> 5);
    cp_async_wait<2 * (kStages - kPair)>();  // chunk gi + 1's V landed too
    __syncthreads();
    if constexpr (kGroup) {
      group_values<kHd, kVDims>(Q, k0 + C * hd, k1 + C * hd, n_chunks, j0, threadIdx.x >> 5);
    } else {
      pair_values<2>(Q, k0 + C * hd, k1 + C * hd, n_chunks, j0);
    }
    __syncthreads();  // both stages, p_s and the statistics are free for the next step
  }
  cp_async_wait<0>();  // (empty groups past the last chunk: nothing may be in flight at exit)

  // Every block's records are in its shared memory (the cluster barrier releases and acquires
  // them); block rank folds outputs [rank per, rank per + per) of the tile's nq x hd, each a
  // thread's fold over its token's chunks in the chunk merge kernel's order.
  cluster_sync();
  const int n_out = nq * hd, per = (n_out + n_blocks - 1) / n_blocks;
  for (int o = rank * per + tid; o < min(n_out, rank * per + per); o += kThreads) {
    const int qi = o / hd, d = o - qi * hd, tt = qi / nh;
    const int n_chunks = tok_pos[tt] / C + 1;
    auto rec_of = [&](int c) {
      const int owner = c / cpb;
      return peer_shared(recs + (int64_t{c - owner * cpb} * na + qi) * (hd + 2), owner);
    };
    float* out = a.out + int64_t{t0 + tt} * a.out_stride + int64_t{h0 + qi % nh} * hd;
    chunk_fold::fold_records_at<1, kMergeBatch>(rec_of, [](const float* p) { return *p; }, n_chunks, hd, d, 0, out);
  }
  cluster_sync();  // no block leaves while a peer may still read its records
#endif
}

using ClusterKernel = void (*)(AttentionArgs);

template <typename T, bool kGroup, int kHd, int kVDims>
ClusterKernel cluster_kernel_for(int stages) {
  switch (stages) {
    case 2: return attention_cluster_kernel<T, 2, kGroup, kHd, kVDims>;
    case 3: return attention_cluster_kernel<T, 3, kGroup, kHd, kVDims>;
    default: return attention_cluster_kernel<T, 4, kGroup, kHd, kVDims>;
  }
}

// The instance for `a` (as pair_kernel_of picks the chunk-split span kernel): span kernel 3 with
// f16 caches at head_dim 128 and two value dimensions per lane (the default's chunk split, 83),
// else the generic two-chunk forms; nullptr where none is compiled (the chunk merge stays).
ClusterKernel cluster_kernel_of(const AttentionArgs& a, int stages) {
  const bool group = (a.span_kernel & kSpanKernelMask) == 3, f16 = a.kv_dtype == DType::F16;
  if (group && f16 && a.head_dim == 128) {
    return (a.span_kernel & kSpanValuePairs) != 0 ? cluster_kernel_for<__half, true, 128, 2>(stages) : nullptr;
  }
  if (f16) return group ? cluster_kernel_for<__half, true, 0, 1>(stages) : cluster_kernel_for<__half, false, 0, 1>(stages);
  return group ? cluster_kernel_for<float, true, 0, 1>(stages) : cluster_kernel_for<float, false, 0, 1>(stages);
}

bool g_cluster_pdl = true;   // TERN_CUDA_ATTN_CLUSTER_PDL=0: cluster launches without PDL (A/B)
int g_cluster_stages = 0;    // TERN_CUDA_ATTN_CLUSTER_STAGES=2-4: K/V stages of multi-step blocks (A/B)
bool g_cluster_debug = false;  // TERN_CUDA_ATTN_CLUSTER_DEBUG=1: print each new plan's shape

// How many clusters of `blocks` blocks of `kernel` with `smem` bytes each can be resident at
// once (cudaOccupancyMaxActiveClusters; 0: none), asked once per combination.
int active_clusters(ClusterKernel kernel, int blocks, size_t smem) {
  static std::mutex mu;
  static std::map<std::tuple<ClusterKernel, int, size_t>, int> known;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(kernel, blocks, smem);
  const auto found = known.find(key);
  if (found != known.end()) return found->second;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks), 1, 1);
  config.blockDim = dim3(kThreads, 1, 1);
  config.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(blocks);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, kernel, &config) != cudaSuccess) {
    (void)cudaGetLastError();  // (a refused query leaves no sticky error)
    n = 0;
  }
  known.emplace(key, n);
  return n;
}

}  // namespace

bool plan_attention_cluster(AttentionArgs& a, int max_blocks, int max_position, int max_smem_bytes) {
  a.cluster_blocks = a.cluster_chunks = a.cluster_stages = 0;
  if (a.chunk_split <= 0 || max_blocks < 1) return false;
  const int n_chunks = max_position / kAttnChunkTokens + 1;
  const int limit = std::min(max_blocks, kMaxClusterBlocks);
  const int cpb = (n_chunks + limit - 1) / limit;
  if (cpb > kMaxClusterChunks) return false;
  const int blocks = (n_chunks + cpb - 1) / cpb;
  const SpanShape sh = span_shape_of(a);
  // Every cluster of the launch resident at once (a second wave of clusters would double the
  // launch): the most stages (up to 4: the next step's pair in flight during this one) that keep
  // them so. One step per block needs two.
  const int n_clusters = a.plan.n_tiles * a.n_kv_heads * sh.n_slices;
  const int most = cpb <= kPair ? 2 : g_cluster_stages > 0 ? g_cluster_stages : 4;
  for (int stages = most; stages >= 2; --stages) {
    const size_t smem = cluster_smem(a, sh, stages, cpb).total;
    const ClusterKernel k = cluster_kernel_of(a, stages);
    if (k == nullptr || smem > static_cast<size_t>(max_smem_bytes)) continue;
    const int active = active_clusters(k, blocks, smem);
    if (g_cluster_debug) {
      static std::mutex mu;
      static std::set<std::tuple<int, int, int, int>> told;
      std::lock_guard<std::mutex> lock(mu);
      if (told.insert(std::make_tuple(n_chunks, blocks, stages, n_clusters)).second) {
        std::fprintf(stderr, "cluster plan: %d chunks, %d blocks x %d chunks, %d stages, %zu B smem: %d clusters, %d resident\n",
                     n_chunks, blocks, cpb, stages, smem, n_clusters, active);
      }
    }
    if (active < n_clusters) continue;
    a.cluster_blocks = blocks;
    a.cluster_chunks = cpb;
    a.cluster_stages = stages;
    return true;
  }
  return false;
}

void launch_attention_cluster(const AttentionArgs& a, const LaunchEnv& env) {
  const SpanShape sh = span_shape_of(a);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(a.plan.n_tiles * a.cluster_blocks),
                        static_cast<unsigned>(a.n_kv_heads * sh.n_slices), 1);
  config.blockDim = dim3(kThreads, 1, 1);
  config.dynamicSmemBytes = cluster_smem(a, sh, a.cluster_stages, a.cluster_chunks).total;
  config.stream = env.stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(a.cluster_blocks);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = env.pdl && g_cluster_pdl ? 2 : 1;
  TERN_CUDA_CHECK(cudaLaunchKernelEx(&config, cluster_kernel_of(a, a.cluster_stages), a));
}

void init_attention_cluster(int max_smem_bytes) {
  int dev = 0, cc_major = 0;
  TERN_CUDA_CHECK(cudaGetDevice(&dev));
  TERN_CUDA_CHECK(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, dev));
  if (cc_major < 9) return;  // (clusters need sm_90; plan_attention_cluster is then never asked)
  const char* pdl = std::getenv("TERN_CUDA_ATTN_CLUSTER_PDL");
  g_cluster_pdl = pdl == nullptr || std::strcmp(pdl, "0") != 0;
  const char* stages_env = std::getenv("TERN_CUDA_ATTN_CLUSTER_STAGES");
  g_cluster_stages = stages_env != nullptr ? std::clamp(std::atoi(stages_env), 0, 4) : 0;
  if (g_cluster_stages == 1) g_cluster_stages = 2;
  const char* debug = std::getenv("TERN_CUDA_ATTN_CLUSTER_DEBUG");
  g_cluster_debug = debug != nullptr && std::strcmp(debug, "1") == 0;
  for (int stages = 2; stages <= 4; ++stages) {
    for (ClusterKernel k : {cluster_kernel_for<__half, true, 128, 2>(stages), cluster_kernel_for<__half, true, 0, 1>(stages),
                            cluster_kernel_for<__half, false, 0, 1>(stages), cluster_kernel_for<float, true, 0, 1>(stages),
                            cluster_kernel_for<float, false, 0, 1>(stages)}) {
      TERN_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem_bytes));
      TERN_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    }
  }
}

}  // namespace tern::cuda
