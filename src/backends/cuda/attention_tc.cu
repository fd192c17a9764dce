// The tensor-core prefill attention kernel (attention_tc.h).
#include <climits>

#include "backends/cuda/async_copy.cuh"
#include "backends/cuda/attention_tc.h"
#include "backends/cuda/common.cuh"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/launch.cuh"

namespace tern::cuda {
namespace {

constexpr int kKeys = 64;        // keys per K/V tile
constexpr int kMaxWarps = 4;     // query heads of one KV group per block, one warp each
constexpr float kLog2e = 1.4426950408889634f;
static_assert(kAttnTcTileTokens == 16, "a warp's 16 mma rows are the tile's 16 tokens");

// One K or V row in shared memory: head_dim halves + 16 bytes of padding, so the 8 rows an
// ldmatrix reads start 4 banks apart (conflict-free).
template <int HD>
constexpr int kRowHalves = HD + 8;
template <int HD>
constexpr size_t kSmemBytes = size_t{2} * 2 * kKeys * kRowHalves<HD> * sizeof(__half);  // 2 stages of K, V

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldmatrix_x4(const __half* p, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(const __half* p, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
// c[16x8] += a[16x16] b[16x8] (fragments in the PTX ISA's m16n8k16 layouts).
__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ float exp2_approx(float x) {  // ex2.approx(-inf) = +0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Starts copying K and V rows [j0, j0 + kKeys) of the sequence into k_dst / v_dst; rows past
// last_row are zero-filled (masked, but V must not hold NaN: p = 0 times NaN is NaN). Each piece
// looks its row up in the block table (a dependent load per cp.async; see load_tile_rows).
template <int HD>
__device__ __forceinline__ void load_tile(const AttentionArgs& a, const int32_t* blocks, int64_t kv_col, int j0,
                                          int last_row, __half* k_dst, __half* v_dst) {
  constexpr int kPerRow = HD / 8;  // 16-byte pieces
  const __half* k_src = static_cast<const __half*>(a.k_cache);
  const __half* v_src = static_cast<const __half*>(a.v_cache);
  for (int i = threadIdx.x; i < 2 * kKeys * kPerRow; i += blockDim.x) {
    const bool is_v = i >= kKeys * kPerRow;
    const int r = is_v ? i - kKeys * kPerRow : i;
    const int jj = r / kPerRow, e0 = (r - jj * kPerRow) * 8;
    const int j = j0 + jj;
    const bool live = j <= last_row;
    const __half* src = is_v ? v_src : k_src;
    if (live) {
      const int64_t slot = int64_t{blocks[j / a.block_tokens]} * a.block_tokens + j % a.block_tokens;
      src += slot * (is_v ? a.v_cache_stride : a.k_cache_stride) + kv_col + e0;
    }
    cp_async16_zfill((is_v ? v_dst : k_dst) + jj * kRowHalves<HD> + e0, src, live ? 16 : 0);
  }
}

// The same copy with one block-table lookup per row, all in flight at once (row_copy): lane k of
// warp w looks up rows w + n_warps * k and w + n_warps * (k + 32); each warp then copies its
// rows, kRowsPerStep at a time, the K and V pieces of a row spread over the lanes.
template <int HD>
__device__ __forceinline__ void load_tile_rows(const AttentionArgs& a, const int32_t* blocks, int64_t kv_col, int j0,
                                               int last_row, __half* k_dst, __half* v_dst) {
  constexpr int kPieces = 2 * HD / 8;  // K then V 16-byte pieces of one row
  static_assert(32 % kPieces == 0 || kPieces % 32 == 0, "pieces must tile the warp");
  constexpr int kRowsPerStep = kPieces >= 32 ? 1 : 32 / kPieces;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  const __half* k_src = static_cast<const __half*>(a.k_cache);
  const __half* v_src = static_cast<const __half*>(a.v_cache);
  auto slot_of = [&](int jj) {
    const int j = j0 + jj;
    return jj < kKeys && j <= last_row ? blocks[j / a.block_tokens] * a.block_tokens + j % a.block_tokens : 0;
  };
  const int slot0 = slot_of(warp + n_warps * lane), slot1 = slot_of(warp + n_warps * (lane + 32));
  const int rows = (kKeys - warp + n_warps - 1) / n_warps;  // rows of this warp
  for (int k0 = 0; k0 < rows; k0 += kRowsPerStep) {
    const int k = k0 + (kRowsPerStep > 1 ? lane / kPieces : 0);
    const int s0 = __shfl_sync(kFullMask, slot0, k & 31), s1 = __shfl_sync(kFullMask, slot1, k & 31);
    const int jj = warp + n_warps * k;
    if (k >= rows) continue;
    const int slot = k < 32 ? s0 : s1;
    const bool live = j0 + jj <= last_row;
    for (int piece = kRowsPerStep > 1 ? lane % kPieces : lane; piece < kPieces; piece += 32) {
      const bool is_v = piece >= kPieces / 2;
      const int e0 = (is_v ? piece - kPieces / 2 : piece) * 8;
      const __half* src = is_v ? v_src : k_src;
      if (live) src += int64_t{slot} * (is_v ? a.v_cache_stride : a.k_cache_stride) + kv_col + e0;
      cp_async16_zfill((is_v ? v_dst : k_dst) + jj * kRowHalves<HD> + e0, src, live ? 16 : 0);
    }
  }
}

template <int HD>
__global__ void __launch_bounds__(32 * kMaxWarps) attention_tc_kernel(AttentionArgs a) {
  pdl_enter();
  constexpr int kRow = kRowHalves<HD>;
  constexpr int kStage = 2 * kKeys * kRow;  // halves of one stage: K rows, then V rows
  extern __shared__ __align__(16) unsigned char sm_raw[];
  __half* sm = reinterpret_cast<__half*>(sm_raw);
  const DevicePlan& P = a.plan;
  const int tile = P.n_tc_tiles - 1 - static_cast<int>(blockIdx.x);  // longest contexts first
  const int group = a.n_heads / a.n_kv_heads;
  const int hpb = min(group, kMaxWarps);
  const int n_slices = (group + hpb - 1) / hpb;
  const int g = blockIdx.y / n_slices, slice = blockIdx.y % n_slices;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int nh = min(hpb, group - slice * hpb);
  const bool active = warp < nh;  // the last slice of a group may have fewer heads than warps
  const int h = g * group + slice * hpb + warp;
  const int t0 = P.tc_tile_token_begin[tile], nt = P.tc_tile_n_tokens[tile];
  const int gid = lane >> 2, tig = lane & 3;  // mma fragment coordinates

  // This thread's rows are tokens gid and gid + 8; padding rows (past nt) are never written.
  int pos[2], first[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int tt = gid + 8 * r;
    pos[r] = tt < nt ? P.positions[t0 + tt] : -1;
    first[r] = a.sliding_window > 0 ? max(0, pos[r] + 1 - a.sliding_window) : 0;
  }
  int max_pos = 0, min_pos = INT_MAX, min_first = INT_MAX, max_first = 0;
  for (int tt = 0; tt < nt; ++tt) {
    const int p = P.positions[t0 + tt];
    const int f = a.sliding_window > 0 ? max(0, p + 1 - a.sliding_window) : 0;
    max_pos = max(max_pos, p);
    min_pos = min(min_pos, p);
    min_first = min(min_first, f);
    max_first = max(max_first, f);
  }

  // Q fragments (A operand, rows = tokens), rounded to f16 once.
  uint32_t qf[HD / 16][4];
#pragma unroll
  for (int ks = 0; ks < HD / 16; ++ks) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int tt = gid + 8 * r;
      float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (active && tt < nt) {
        const float* q = a.q + int64_t{t0 + tt} * a.q_stride + int64_t{h} * HD + ks * 16 + tig * 2;
        x[0] = q[0], x[1] = q[1], x[2] = q[8], x[3] = q[9];
      }
      qf[ks][r] = pack_half2(x[0], x[1]);
      qf[ks][r + 2] = pack_half2(x[2], x[3]);
    }
  }

  const int seq = P.seq_index[t0];
  const int32_t* blocks = P.block_ids + P.block_offsets[seq];
  const int64_t kv_col = int64_t{g} * HD;
  const int kt_begin = min_first / kKeys, kt_end = max_pos / kKeys + 1;
  const float scale_log2 = a.scale * kLog2e;

  float o[HD / 8][4];
#pragma unroll
  for (int dt = 0; dt < HD / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

  auto load = [&](int kt, __half* dst) {
    if (a.row_copy) {
      load_tile_rows<HD>(a, blocks, kv_col, kt * kKeys, max_pos, dst, dst + kKeys * kRow);
    } else {
      load_tile<HD>(a, blocks, kv_col, kt * kKeys, max_pos, dst, dst + kKeys * kRow);
    }
  };
  load(kt_begin, sm);
  cp_async_commit();
  for (int kt = kt_begin; kt < kt_end; ++kt) {
    const int it = kt - kt_begin;
    if (kt + 1 < kt_end) {
      load(kt + 1, sm + ((it + 1) & 1) * kStage);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();  // tile kt has landed for every thread
    if (active) {
      const __half* k_s = sm + (it & 1) * kStage;
      const __half* v_s = k_s + kKeys * kRow;
      const int mat = lane >> 3, mrow = lane & 7;  // ldmatrix: which 8x8 matrix this lane addresses
      // S = Q K^T: 16 rows x 64 keys per warp.
      float s[kKeys / 8][4];
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
      for (int ks = 0; ks < HD / 16; ++ks) {
#pragma unroll
        for (int np = 0; np < kKeys / 16; ++np) {
          uint32_t b[4];
          ldmatrix_x4(k_s + (np * 16 + (mat >> 1) * 8 + mrow) * kRow + ks * 16 + (mat & 1) * 8, b);
          mma_f16(s[2 * np], qf[ks], b[0], b[1]);
          mma_f16(s[2 * np + 1], qf[ks], b[2], b[3]);
        }
      }
      // Scale into the log2 domain; mask where a row's window or causal limit crosses the tile.
      const int j_base = kt * kKeys;
      const bool need_mask = j_base + kKeys - 1 > min_pos || j_base < max_first;
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float v = s[n][e];
          v = a.softcap > 0.0f ? a.softcap * tanhf(v * a.scale / a.softcap) * kLog2e : v * scale_log2;
          if (need_mask) {
            const int j = j_base + n * 8 + tig * 2 + (e & 1), r = e >> 1;
            if (j > pos[r] || j < first[r]) v = -INFINITY;
          }
          s[n][e] = v;
        }
      }
      // Online softmax per row (a row's 64 scores sit in the 4 lanes of a quad).
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
        const float m_new = fmaxf(m_run[r], mx);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing valid yet
        const float alpha = exp2_approx(m_run[r] - m_use);
        m_run[r] = m_new;
        float sum = 0.0f;
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n) {
          s[n][2 * r] = exp2_approx(s[n][2 * r] - m_use);
          s[n][2 * r + 1] = exp2_approx(s[n][2 * r + 1] - m_use);
          sum += s[n][2 * r] + s[n][2 * r + 1];
        }
        l_run[r] = l_run[r] * alpha + sum;  // this lane's share; the quad is summed at the end
#pragma unroll
        for (int dt = 0; dt < HD / 8; ++dt) {
          o[dt][2 * r] *= alpha;
          o[dt][2 * r + 1] *= alpha;
        }
      }
      // O += P V: the S accumulators of two adjacent key octets are the A fragment of 16 keys.
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        const uint32_t pa[4] = {pack_half2(s[2 * kk][0], s[2 * kk][1]), pack_half2(s[2 * kk][2], s[2 * kk][3]),
                                pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int dp = 0; dp < HD / 16; ++dp) {
          uint32_t b[4];
          ldmatrix_x4_trans(v_s + (kk * 16 + (mat & 1) * 8 + mrow) * kRow + dp * 16 + (mat >> 1) * 8, b);
          mma_f16(o[2 * dp], pa, b[0], b[1]);
          mma_f16(o[2 * dp + 1], pa, b[2], b[3]);
        }
      }
    }
    __syncthreads();  // everyone is done with this stage before it is refilled
  }
  if (!active) return;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int tt = gid + 8 * r;
    float l = l_run[r];
    l += __shfl_xor_sync(kFullMask, l, 1);
    l += __shfl_xor_sync(kFullMask, l, 2);
    if (tt >= nt) continue;
    const float inv = 1.0f / l;
    float* dst = a.out + int64_t{t0 + tt} * a.out_stride + int64_t{h} * HD + tig * 2;
#pragma unroll
    for (int dt = 0; dt < HD / 8; ++dt) {
      dst[dt * 8] = o[dt][2 * r] * inv;
      dst[dt * 8 + 1] = o[dt][2 * r + 1] * inv;
    }
  }
}

}  // namespace

bool attention_tc_supports(const AttentionArgs& a) {
  return a.kv_dtype == DType::F16 && (a.head_dim == 64 || a.head_dim == 128) && a.k_cache_stride % 8 == 0 &&
         a.v_cache_stride % 8 == 0 && reinterpret_cast<uintptr_t>(a.k_cache) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(a.v_cache) % 16 == 0;
}

void launch_attention_tc(const AttentionArgs& a, const LaunchEnv& env) {
  const int group = a.n_heads / a.n_kv_heads;
  const int hpb = group < kMaxWarps ? group : kMaxWarps;
  const int n_slices = (group + hpb - 1) / hpb;
  const dim3 grid(static_cast<unsigned>(a.plan.n_tc_tiles), static_cast<unsigned>(a.n_kv_heads * n_slices));
  const dim3 block(static_cast<unsigned>(32 * hpb));
  if (a.head_dim == 64) {
    launch_kernel(env, attention_tc_kernel<64>, grid, block, kSmemBytes<64>, a);
  } else {
    launch_kernel(env, attention_tc_kernel<128>, grid, block, kSmemBytes<128>, a);
  }
}

void init_attention_tc(int max_smem_bytes) {
  (void)max_smem_bytes;  // both instances need less than any sm_80+ device's opt-in limit
  TERN_CUDA_CHECK(cudaFuncSetAttribute(attention_tc_kernel<64>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(kSmemBytes<64>)));
  TERN_CUDA_CHECK(cudaFuncSetAttribute(attention_tc_kernel<128>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(kSmemBytes<128>)));
}

}  // namespace tern::cuda
