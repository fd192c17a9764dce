// Paged attention kernels: the chunk kernel (fused and split modes) and the split-mode merge.
// attention.h states the arithmetic every path shares; the fold is one function used by both.
#include <cmath>

#include "backends/cuda/attention.h"
#include "backends/cuda/common.cuh"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/launch.cuh"

namespace tern::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int C = kAttnChunkTokens;
static_assert(C == 64, "the softmax phase gives each lane positions lane and lane + 32");

struct Shape {
  int group, hpb, n_slices, nq_alloc;
};

__host__ __device__ inline Shape shape_of(const AttentionArgs& a) {
  Shape s;
  s.group = a.n_heads / a.n_kv_heads;
  s.hpb = s.group < kAttnMaxHeadsPerBlock ? s.group : kAttnMaxHeadsPerBlock;
  s.n_slices = (s.group + s.hpb - 1) / s.hpb;
  s.nq_alloc = a.plan.max_tile_tokens * s.hpb;
  return s;
}

// Folds chunk partial (m, l) into the running (M, L); returns the scales of the old state and of
// the partial. Precondition: m > -inf (empty chunks are skipped by the callers).
struct FoldScales {
  float sa, sb;
};
__device__ __forceinline__ FoldScales fold_stats(float& M, float& L, float m, float l) {
  const float m_new = fmaxf(M, m);
  FoldScales f;
  f.sa = __expf(__fsub_rn(M, m_new));
  f.sb = __expf(__fsub_rn(m, m_new));
  L = __fadd_rn(__fmul_rn(L, f.sa), __fmul_rn(l, f.sb));
  M = m_new;
  return f;
}
__device__ __forceinline__ float fold_acc(float A, float a, FoldScales f) {
  return __fadd_rn(__fmul_rn(A, f.sa), __fmul_rn(a, f.sb));
}

__device__ __forceinline__ float load_kv(const void* base, bool f16, int64_t idx) {
  return f16 ? __half2float(static_cast<const __half*>(base)[idx]) : static_cast<const float*>(base)[idx];
}

// Chunks [c_begin, c_end) of one tile for the head slice of blockIdx.y (attention.h).
__device__ __forceinline__ void attend_tile(const AttentionArgs& a, const Shape& sh, int tile, int c_begin, int c_end,
                                            float* sm) {
  const DevicePlan& P = a.plan;
  const int hd = a.head_dim;
  const int g = blockIdx.y / sh.n_slices, slice = blockIdx.y % sh.n_slices;
  const int h0 = g * sh.group + slice * sh.hpb;
  const int nh = min(sh.hpb, sh.group - slice * sh.hpb);
  const int t0 = P.tile_token_begin[tile], nt = P.tile_n_tokens[tile];
  const int nq = nt * nh;

  float* q_s = sm;                          // [nq_alloc][hd]
  float* acc_s = q_s + sh.nq_alloc * hd;    // [nq_alloc][hd]   fused mode: running A
  float* k_s = acc_s + sh.nq_alloc * hd;    // [C][hd + 1]      padded: conflict-free dot loop
  float* v_s = k_s + C * (hd + 1);          // [C][hd]
  float* p_s = v_s + C * hd;                // [nq_alloc][C]    scores, then probabilities
  float* m_c = p_s + sh.nq_alloc * C;       // [nq_alloc] chunk max
  float* l_c = m_c + sh.nq_alloc;           // [nq_alloc] chunk sum
  float* M_s = l_c + sh.nq_alloc;           // [nq_alloc] running max (fused)
  float* L_s = M_s + sh.nq_alloc;           // [nq_alloc] running sum (fused)
  float* sa_s = L_s + sh.nq_alloc;          // [nq_alloc] fold scales of this chunk (fused)
  float* sb_s = sa_s + sh.nq_alloc;
  int* tok_pos = reinterpret_cast<int*>(sb_s + sh.nq_alloc);  // [kAttnTileTokens]
  int* tok_first = tok_pos + kAttnTileTokens;                  // first attended position

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  __syncthreads();  // a previous call's readers are done with this shared memory
  if (tid < nt) {
    const int pos = P.positions[t0 + tid];
    tok_pos[tid] = pos;
    tok_first[tid] = a.sliding_window > 0 ? max(0, pos + 1 - a.sliding_window) : 0;
  }
  for (int i = tid; i < nq * hd; i += kThreads) {
    const int qi = i / hd, d = i % hd;
    const int tt = qi / nh, hh = qi % nh;
    q_s[i] = a.q[(t0 + tt) * a.q_stride + int64_t{h0 + hh} * hd + d];
    acc_s[i] = 0.0f;
  }
  for (int i = tid; i < nq; i += kThreads) {
    M_s[i] = -INFINITY;
    L_s[i] = 0.0f;
  }
  __syncthreads();
  int max_pos = 0;
  for (int tt = 0; tt < nt; ++tt) max_pos = max(max_pos, tok_pos[tt]);
  const int seq = P.seq_index[t0];
  const int32_t* blocks = P.block_ids + P.block_offsets[seq];
  const bool f16 = a.kv_dtype == DType::F16;
  const int64_t kv_col = int64_t{g} * hd;
  const bool vec_f16 = f16 && hd % 8 == 0 && a.k_cache_stride % 8 == 0 && a.v_cache_stride % 8 == 0 &&
                       reinterpret_cast<uintptr_t>(a.k_cache) % 16 == 0 && reinterpret_cast<uintptr_t>(a.v_cache) % 16 == 0;

  for (int c = c_begin; c < c_end; ++c) {
    const int j0 = c * C;
    const int n_load = min(C, max_pos + 1 - j0);
    __syncthreads();  // the previous chunk's readers are done with k_s, v_s, p_s
    if (vec_f16) {  // 16-byte loads: 8 halves of a row per thread step
      const int per_row = hd / 8;
      for (int i = tid; i < n_load * per_row; i += kThreads) {
        const int jj = i / per_row, d0 = (i % per_row) * 8;
        const int j = j0 + jj;
        const int64_t slot = int64_t{blocks[j / a.block_tokens]} * a.block_tokens + j % a.block_tokens;
        const uint4 kw = *reinterpret_cast<const uint4*>(static_cast<const __half*>(a.k_cache) +
                                                         slot * a.k_cache_stride + kv_col + d0);
        const uint4 vw = *reinterpret_cast<const uint4*>(static_cast<const __half*>(a.v_cache) +
                                                         slot * a.v_cache_stride + kv_col + d0);
        const uint32_t kk[4] = {kw.x, kw.y, kw.z, kw.w}, vv[4] = {vw.x, vw.y, vw.z, vw.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          k_s[jj * (hd + 1) + d0 + 2 * e] = half_bits_to_float(static_cast<uint16_t>(kk[e] & 0xffffu));
          k_s[jj * (hd + 1) + d0 + 2 * e + 1] = half_bits_to_float(static_cast<uint16_t>(kk[e] >> 16));
          v_s[jj * hd + d0 + 2 * e] = half_bits_to_float(static_cast<uint16_t>(vv[e] & 0xffffu));
          v_s[jj * hd + d0 + 2 * e + 1] = half_bits_to_float(static_cast<uint16_t>(vv[e] >> 16));
        }
      }
    } else {
      for (int i = tid; i < n_load * hd; i += kThreads) {
        const int jj = i / hd, d = i % hd;
        const int j = j0 + jj;
        const int64_t slot = int64_t{blocks[j / a.block_tokens]} * a.block_tokens + j % a.block_tokens;
        k_s[jj * (hd + 1) + d] = load_kv(a.k_cache, f16, slot * a.k_cache_stride + kv_col + d);
        v_s[jj * hd + d] = load_kv(a.v_cache, f16, slot * a.v_cache_stride + kv_col + d);
      }
    }
    __syncthreads();
    // Scores, one (query, position) pair per thread step.
    for (int i = tid; i < nq * C; i += kThreads) {
      const int qi = i / C, jj = i % C;
      const int tt = qi / nh;
      const int j = j0 + jj;
      float s = -INFINITY;
      if (j <= tok_pos[tt] && j >= tok_first[tt]) {
        const float* qv = q_s + qi * hd;
        const float* kv = k_s + jj * (hd + 1);
        float dot = 0.0f;
        for (int d = 0; d < hd; ++d) dot = __fmaf_rn(qv[d], kv[d], dot);
        s = __fmul_rn(dot, a.scale);
        if (a.softcap > 0.0f) s = __fmul_rn(a.softcap, tanhf(__fdiv_rn(s, a.softcap)));
      }
      p_s[i] = s;
    }
    __syncthreads();
    // Chunk softmax statistics: a warp per query.
    for (int qi = warp; qi < nq; qi += kWarps) {
      const float s0 = p_s[qi * C + lane], s1 = p_s[qi * C + lane + 32];
      const float m = warp_max(fmaxf(s0, s1));
      float p0 = 0.0f, p1 = 0.0f, l = 0.0f;
      if (m != -INFINITY) {
        p0 = __expf(__fsub_rn(s0, m));
        p1 = __expf(__fsub_rn(s1, m));
        l = warp_sum_tree(__fadd_rn(p0, p1));
      }
      p_s[qi * C + lane] = p0;
      p_s[qi * C + lane + 32] = p1;
      if (lane == 0) {
        m_c[qi] = m;
        l_c[qi] = l;
        if (!a.split && m != -INFINITY) {
          const FoldScales f = fold_stats(M_s[qi], L_s[qi], m, l);
          sa_s[qi] = f.sa;
          sb_s[qi] = f.sb;
        }
      }
    }
    __syncthreads();
    // Weighted values: one (query, dim) output per thread step, positions in order.
    for (int i = tid; i < nq * hd; i += kThreads) {
      const int qi = i / hd, d = i % hd;
      const int tt = qi / nh, hh = qi % nh;
      const int jb = max(0, tok_first[tt] - j0);
      const int je = min(C, tok_pos[tt] - j0 + 1);
      float acc = 0.0f;
      for (int jj = jb; jj < je; ++jj) acc = __fmaf_rn(p_s[qi * C + jj], v_s[jj * hd + d], acc);
      if (a.split) {
        if (j0 <= tok_pos[tt]) {  // the token owns a partial slot for this chunk
          const int t = t0 + tt;
          float* rec = a.partials +
                       (int64_t{P.token_partial_begin[t] + c} * a.n_heads + h0 + hh) * (hd + 2);
          rec[2 + d] = acc;
          if (d == 0) {
            rec[0] = m_c[qi];
            rec[1] = l_c[qi];
          }
        }
      } else if (m_c[qi] != -INFINITY) {
        acc_s[i] = fold_acc(acc_s[i], acc, FoldScales{sa_s[qi], sb_s[qi]});
      }
    }
  }
  if (a.split) return;
  __syncthreads();
  for (int i = tid; i < nq * hd; i += kThreads) {
    const int qi = i / hd, d = i % hd;
    const int tt = qi / nh, hh = qi % nh;
    a.out[(t0 + tt) * a.out_stride + int64_t{h0 + hh} * hd + d] = __fdiv_rn(acc_s[i], L_s[qi]);
  }
}

// Fused mode: block x = one tile, all its chunks. Split mode: block x = items
// [x * items_per_block, ...) of the (tile, chunk) list, one partial each.
__global__ void __launch_bounds__(kThreads) attention_chunk_kernel(AttentionArgs a) {
  pdl_enter();
  extern __shared__ __align__(16) float sm[];
  const Shape sh = shape_of(a);
  const DevicePlan& P = a.plan;
  if (!a.split) {
    attend_tile(a, sh, blockIdx.x, 0, P.tile_n_chunks[blockIdx.x], sm);
    return;
  }
  const int first = blockIdx.x * a.items_per_block;
  const int last = min(P.n_split_items, first + a.items_per_block);
  for (int item = first; item < last; ++item) {
    const int c = P.split_chunk[item];
    attend_tile(a, sh, P.split_tile[item], c, c + 1, sm);
  }
}

// Split mode: folds a (token, head)'s chunk partials in chunk order. One block per (token, head).
__global__ void __launch_bounds__(kThreads) attention_merge_kernel(AttentionArgs a) {
  pdl_enter();
  constexpr int kPerThread = kAttnMaxHeadDim / kThreads;
  const int t = blockIdx.x, h = blockIdx.y, hd = a.head_dim;
  const DevicePlan& P = a.plan;
  const int n_chunks = P.positions[t] / C + 1;
  const int64_t first = int64_t{P.token_partial_begin[t]};
  float M = -INFINITY, L = 0.0f;
  float A[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) A[k] = 0.0f;
  // Loads a batch of partials (independent, all in flight together), then folds them in order.
  constexpr int kBatch = 16;
  for (int c0 = 0; c0 < n_chunks; c0 += kBatch) {
    float m[kBatch], l[kBatch], av[kBatch][kPerThread];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      m[b] = -INFINITY;
      if (c0 + b < n_chunks) {
        const float* rec = a.partials + ((first + c0 + b) * a.n_heads + h) * (hd + 2);
        m[b] = rec[0];
        l[b] = rec[1];
#pragma unroll
        for (int k = 0; k < kPerThread; ++k) {
          const int d = threadIdx.x + k * kThreads;
          av[b][k] = d < hd ? rec[2 + d] : 0.0f;
        }
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (m[b] == -INFINITY) continue;
      const FoldScales f = fold_stats(M, L, m[b], l[b]);
#pragma unroll
      for (int k = 0; k < kPerThread; ++k) A[k] = fold_acc(A[k], av[b][k], f);
    }
  }
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int d = threadIdx.x + k * kThreads;
    if (d < hd) a.out[t * a.out_stride + int64_t{h} * hd + d] = __fdiv_rn(A[k], L);
  }
}

}  // namespace

size_t attention_partials_bytes(const AttentionArgs& a) {
  return sizeof(float) * static_cast<size_t>(a.plan.n_partials) * a.n_heads * (a.head_dim + 2);
}

size_t attention_smem_bytes(const AttentionArgs& a) {
  const Shape sh = shape_of(a);
  const size_t hd = a.head_dim, nq = sh.nq_alloc;
  const size_t floats = 2 * nq * hd + C * (hd + 1) + C * hd + nq * C + 6 * nq;
  return floats * sizeof(float) + 2 * kAttnTileTokens * sizeof(int);
}

void launch_attention(const AttentionArgs& a, const LaunchEnv& env) {
  if (a.plan.n_tokens == 0) return;
  const Shape sh = shape_of(a);
  const int64_t blocks_x = a.split ? (a.plan.n_split_items + a.items_per_block - 1) / a.items_per_block : a.plan.n_tiles;
  const dim3 grid(static_cast<unsigned>(blocks_x), static_cast<unsigned>(a.n_kv_heads * sh.n_slices));
  launch_kernel(env, attention_chunk_kernel, grid, kThreads, attention_smem_bytes(a), a);
  if (a.split) {
    launch_kernel(env, attention_merge_kernel, dim3(static_cast<unsigned>(a.plan.n_tokens), static_cast<unsigned>(a.n_heads)),
                  kThreads, 0, a);
  }
}

void init_attention(int max_smem_bytes) {
  TERN_CUDA_CHECK(
      cudaFuncSetAttribute(attention_chunk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem_bytes));
}

}  // namespace tern::cuda
