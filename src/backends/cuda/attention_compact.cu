// The compact chunk-split decode attention (attention.h "compact decode"; AttentionArgs::compact):
// one small block per (token, KV head, 64-position chunk) of a step of one token per sequence
// with an f16 cache, head_dim 64 or 128 and up to 4 q heads per KV head. It computes the chunk's
// record (m, l, a) with attention_chunk.cuh's float sequence and stores it where the two-chunk
// kernels' chunk split stores it; the chunk merge kernel then folds the records as usual.
//
// Why a second kernel for records the two-chunk kernels already write: at 128-2k positions a
// decode layer's attention is latency, and the general kernel (K/V rings, persistent spans, the
// fused rope, early copies) is over 200 KB of machine code that spills and stalls on instruction
// fetch for a block that runs one or two chunks (bench/RESULTS.md, session 8). This one has no
// ring and no merge of its own: V goes to shared memory with cp.async while the K rows come
// straight into registers (every load of the block in flight at once), then one score pass, one
// softmax per query (a warp each) and one values pass. With the rope taken in
// (TERN_CUDA_ATTN_COMPACT=2, a.fused & kAttnFusedRope) it rotates its q heads and computes the
// step's own K/V row with the fused decode's functions (attention_fused.cuh), so the same bits.
//
// Same floats as every other kernel (attention.h): per key, a lane per 8-dimension segment, fmaf
// in d order from 0, the butterfly over the power of two >= head_dim / 8 lanes (chunk_scores);
// masked positions -inf, s = dot * scale (softcap: cap * tanh(s / cap)); per query m = max,
// p = __expf(s - m) over positions lane and lane + 32, l = warp_sum_tree(p_lane + p_lane+32)
// (chunk_softmax); a_d = fmaf of p_j v_jd in j order over the query's valid positions from 0
// (chunk_values, unfolded: the chunk split's record). Tests: GpuAttentionCompact.*.
#include "backends/cuda/async_copy.cuh"
#include "backends/cuda/attention.h"
#include "backends/cuda/attention_chunk.cuh"
#include "backends/cuda/attention_fused.cuh"
#include "backends/cuda/common.cuh"
#include "backends/cuda/launch.cuh"

namespace tern::cuda {
namespace {

using attn::C;
using attn::kSeg;
constexpr int kThreads = 128;  // 4 warps: one per query in the softmax
constexpr int kMaxQ = kAttnMaxHeadsPerBlock;
static_assert(kThreads / 32 == kMaxQ, "a warp per query in the softmax");
static_assert(C <= kThreads, "a row's slot per thread");

template <int kHd>
__global__ void __launch_bounds__(kThreads) attention_compact_kernel(AttentionArgs a) {
  constexpr int kSegLanes = kHd / kSeg;                  // lanes per key: 8 or 16
  constexpr int kKeysPerPass = kThreads / kSegLanes;     // keys the block scores at once
  constexpr int kPasses = C / kKeysPerPass;              // K loads in flight per thread
  constexpr int kDims = kHd == 128 ? 4 : 2;              // values: dimensions per thread
  constexpr int kVPieces = C * kHd / 8;                  // 16-byte pieces of the chunk's V rows
  static_assert(kSegLanes * kSeg == kHd && (kSegLanes & (kSegLanes - 1)) == 0, "whole segments, a power of two");
  static_assert(kMaxQ * kHd / kDims == kThreads, "one values item per thread at a full group");
  // [K][V] rows of the chunk, fused::write_new_rows' ring of one stage: V rows by cp.async, the
  // K half holds only the step's own row when the rope is fused (other K rows go to registers).
  __shared__ __align__(16) __half kv_s[2 * C * kHd];
  __shared__ __align__(16) float q_s[kMaxQ * kHd];  // rotated q (fused rope)
  __shared__ float p_s[kMaxQ][C];
  __shared__ int slot_s[C];
  __shared__ int pos_s;
  __half* v_s = kv_s + C * kHd;

  const DevicePlan& P = a.plan;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // Item (tile, span), chunk of the span: the two-chunk kernels' chunk split with one chunk per
  // block (span_item_of). A decode tile is one token.
  const int item = blockIdx.x / kAttnSpanChunks, cis = blockIdx.x - item * kAttnSpanChunks;
  const int kvh = blockIdx.y;
  int span = item, t = 0;
  if (P.n_tiles != 1) {
    span = P.split_span[item];
    t = P.tile_token_begin[P.split_tile[item]];
  }
  // The plan is uploaded before the step's first kernel: its reads may run ahead of the PDL wait.
  const int pos = P.positions[t];
  const int j0 = (span * kAttnSpanChunks + cis) * C;
  if (j0 > pos) return;  // the token does not reach this chunk: no record (the merge stops at pos)
  const int first = attn::first_position(a, pos);
  const int jb = max(0, first - j0), je = min(C, pos - j0 + 1);  // the valid rows [jb, je)
  const int nq = a.n_heads / a.n_kv_heads, h0 = kvh * nq;
  // Fused rope: q is un-rotated in its buffer and the step's own K/V row (position pos) is
  // computed here by the block whose chunk holds it, not copied (nobody has written it yet).
  const bool rope = (a.fused & kAttnFusedRope) != 0;
  const int new_row = rope ? pos - j0 : -1;  // < C: this block's chunk is the token's last
  if (tid < C) {
    const int32_t* blocks = P.block_ids + P.block_offsets[P.seq_index[t]];
    const int j = j0 + tid;
    slot_s[tid] = tid >= jb && tid < je && tid != new_row
                      ? blocks[j / a.block_tokens] * a.block_tokens + j % a.block_tokens
                      : -1;
  }
  if (tid == 0) pos_s = pos;
  const int64_t rec0 = (int64_t{P.token_partial_begin[t] + span} * kAttnSpanChunks + cis) * a.n_heads + h0;
  __syncthreads();

  // The K/V rows are read ahead of the PDL wait, so that their loads overlap the predecessor's
  // tail (the rope launch): every row but the step's own was written by an earlier step, and
  // every kernel before the predecessor has completed once this one runs (each kernel lets its
  // successor launch only after its own wait). The step's own row (own_row < C: this chunk is
  // the token's last) is the predecessor's output, read after the wait; with the rope fused it is
  // computed here (new_row, no slot). Loads through L2 (.cg), as the span kernels' early copies.
  // H200 (bench/RESULTS.md, session 9): SmolLM2 +3% at ctx 128 and 1k, the 8B shape unchanged.
  const int own_row = rope ? -1 : pos - j0;
  const int64_t col = int64_t{kvh} * kHd;
  const __half* vc = static_cast<const __half*>(a.v_cache) + col;
  // Scores: lane `seg` of a key holds segment seg of each query and of the key.
  const int seg = lane & (kSegLanes - 1), key0 = tid / kSegLanes;
  const __half* kc = static_cast<const __half*>(a.k_cache) + col + seg * kSeg;
  uint4 kraw[kPasses];
  // V rows to shared memory, this thread's K segments to registers.
  for (int i = tid; i < kVPieces; i += kThreads) {
    const int r = i / (kHd / 8), e = (i - r * (kHd / 8)) * 8;
    const int slot = slot_s[r];
    if (slot >= 0 && r != own_row) cp_async16(v_s + r * kHd + e, vc + int64_t{slot} * a.v_cache_stride + e);
  }
  cp_async_commit();
#pragma unroll
  for (int ps = 0; ps < kPasses; ++ps) {
    const int jj = key0 + ps * kKeysPerPass;
    const int slot = slot_s[jj];
    kraw[ps] = slot >= 0 && jj != own_row
                   ? __ldcg(reinterpret_cast<const uint4*>(kc + int64_t{slot} * a.k_cache_stride))
                   : make_uint4(0, 0, 0, 0);
  }
  pdl_enter();  // q and the step's own K/V row come from the launch right before
  if (own_row >= 0 && own_row < C && slot_s[own_row] >= 0) {  // (uniform over the block)
    const int slot = slot_s[own_row];
    if (tid < kHd / 8) cp_async16(v_s + own_row * kHd + tid * 8, vc + int64_t{slot} * a.v_cache_stride + tid * 8);
    cp_async_commit();
#pragma unroll
    for (int ps = 0; ps < kPasses; ++ps) {
      if (key0 + ps * kKeysPerPass == own_row) {
        kraw[ps] = __ldcg(reinterpret_cast<const uint4*>(kc + int64_t{slot} * a.k_cache_stride));
      }
    }
  }
  if (rope) {  // (uniform over the block) the fused decode's own steps (attention_fused.cuh)
    fused::load_q<kThreads>(a, q_s, &pos_s, t, h0, nq, nq, kHd);
    fused::write_new_rows<__half, kThreads>(a, &pos_s, t, 1, kvh, true, j0, C, kv_s, 1);
    __syncthreads();
#pragma unroll
    for (int ps = 0; ps < kPasses; ++ps) {
      const int jj = key0 + ps * kKeysPerPass;
      if (jj == new_row) kraw[ps] = *reinterpret_cast<const uint4*>(kv_s + jj * kHd + seg * kSeg);
    }
  }
  float qr[kMaxQ][kSeg];
#pragma unroll
  for (int qq = 0; qq < kMaxQ; ++qq) {
    if (qq < nq) {
      if (rope) {
        attn::load8(q_s + qq * kHd + seg * kSeg, qr[qq]);
      } else {
        attn::load8(a.q + int64_t{t} * a.q_stride + int64_t{h0 + qq} * kHd + seg * kSeg, qr[qq]);
      }
    } else {
#pragma unroll
      for (int e = 0; e < kSeg; ++e) qr[qq][e] = 0.0f;
    }
  }
#pragma unroll
  for (int ps = 0; ps < kPasses; ++ps) {
    const uint32_t u[4] = {kraw[ps].x, kraw[ps].y, kraw[ps].z, kraw[ps].w};
    float kr[kSeg];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      kr[2 * e] = half_bits_to_float(static_cast<uint16_t>(u[e] & 0xffffu));
      kr[2 * e + 1] = half_bits_to_float(static_cast<uint16_t>(u[e] >> 16));
    }
    float part[kMaxQ];
#pragma unroll
    for (int qq = 0; qq < kMaxQ; ++qq) {
      part[qq] = 0.0f;
#pragma unroll
      for (int e = 0; e < kSeg; ++e) part[qq] = __fmaf_rn(qr[qq][e], kr[e], part[qq]);
    }
#pragma unroll
    for (int off = 1; off < kSegLanes; off <<= 1) {
#pragma unroll
      for (int qq = 0; qq < kMaxQ; ++qq) part[qq] = __fadd_rn(part[qq], __shfl_xor_sync(kFullMask, part[qq], off));
    }
    if (seg == 0) {
      const int jj = key0 + ps * kKeysPerPass;
      const bool valid = jj >= jb && jj < je;
#pragma unroll
      for (int qq = 0; qq < kMaxQ; ++qq) {
        float s = -INFINITY;
        if (valid) {
          s = __fmul_rn(part[qq], a.scale);
          if (a.softcap > 0.0f) s = __fmul_rn(a.softcap, tanhf(__fdiv_rn(s, a.softcap)));
        }
        p_s[qq][jj] = s;
      }
    }
  }
  __syncthreads();

  // Softmax: a warp per query; lane 0 stores the record's (m, l).
  if (warp < nq) {
    const float s0 = p_s[warp][lane], s1 = p_s[warp][lane + 32];
    const float m = warp_max(fmaxf(s0, s1));
    float p0 = 0.0f, p1 = 0.0f, l = 0.0f;
    if (m != -INFINITY) {
      p0 = __expf(__fsub_rn(s0, m));
      p1 = __expf(__fsub_rn(s1, m));
      l = warp_sum_tree(__fadd_rn(p0, p1));
    }
    p_s[warp][lane] = p0;
    p_s[warp][lane + 32] = p1;
    if (lane == 0) {
      float* rec = a.partials + (rec0 + warp) * (kHd + 2);
      rec[0] = m;
      rec[1] = l;
    }
  }
  cp_async_wait<0>();
  __syncthreads();

  // Values: kDims dimensions of one query per thread, one chain per dimension in j order.
  const int qi = tid / (kHd / kDims), d0 = (tid - qi * (kHd / kDims)) * kDims;
  if (qi < nq) {
    float acc[kDims];
#pragma unroll
    for (int e = 0; e < kDims; ++e) acc[e] = 0.0f;
    const float* p = p_s[qi];
#pragma unroll 4
    for (int jj = jb; jj < je; ++jj) {
      float x[kDims];
      attn::loadv(v_s + jj * kHd + d0, x);
#pragma unroll
      for (int e = 0; e < kDims; ++e) acc[e] = __fmaf_rn(p[jj], x[e], acc[e]);
    }
    float* rec = a.partials + (rec0 + qi) * (kHd + 2) + 2 + d0;
#pragma unroll
    for (int e = 0; e < kDims; ++e) rec[e] = acc[e];
  }
}

}  // namespace

bool attention_compact_applies(const AttentionArgs& a, int max_tile_tokens) {
  const int group = a.n_kv_heads > 0 ? a.n_heads / a.n_kv_heads : 0;
  return a.split == 1 && a.chunk_split > 0 && max_tile_tokens == 1 && a.kv_dtype == DType::F16 &&
         (a.head_dim == 64 || a.head_dim == 128) && group >= 1 && group <= kAttnMaxHeadsPerBlock &&
         group * a.n_kv_heads == a.n_heads && a.k_cache_stride % 8 == 0 && a.v_cache_stride % 8 == 0 &&
         reinterpret_cast<uintptr_t>(a.k_cache) % 16 == 0 && reinterpret_cast<uintptr_t>(a.v_cache) % 16 == 0 &&
         a.q_stride % 4 == 0 && reinterpret_cast<uintptr_t>(a.q) % 16 == 0;
}

void launch_attention_compact(const AttentionArgs& a, const LaunchEnv& env) {
  const dim3 grid(static_cast<unsigned>(a.plan.n_split_items * kAttnSpanChunks), static_cast<unsigned>(a.n_kv_heads));
  if (a.head_dim == 128) {
    launch_kernel(env, attention_compact_kernel<128>, grid, kThreads, 0, a);
  } else {
    launch_kernel(env, attention_compact_kernel<64>, grid, kThreads, 0, a);
  }
}

}  // namespace tern::cuda
