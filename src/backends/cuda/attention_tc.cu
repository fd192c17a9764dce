// The tensor-core prefill attention kernel (attention_tc.h).
#include <climits>

#include "backends/cuda/async_copy.cuh"
#include "backends/cuda/attention_tc.h"
#include "backends/cuda/attention_tc_tiles.cuh"
#include "backends/cuda/common.cuh"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/tc_fragments.cuh"
#include "core/check.h"

namespace tern::cuda {
namespace {

constexpr int kKeys = kTcKeys;  // keys per K/V tile
constexpr int kMaxHeads = 8;   // query heads of one KV group per block (larger groups are sliced)

// One block's shape: kWarps warps of kMTiles mma row tiles (16 rows each) = kRows query rows,
// each row one (token, head) pair; kStages K/V tiles in flight.
template <int HD, int kWarps, int kMTiles, int kStages>
struct TcShape {
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRows = 16 * kMTiles * kWarps;
  // One Q, K or V row in shared memory: head_dim halves + 16 bytes of padding, so the 8 rows an
  // ldmatrix reads start 4 banks apart (conflict-free).
  static constexpr int kRow = HD + 8;
  static constexpr int kStage = 2 * kKeys * kRow;  // halves of one stage: K rows, then V rows
  static constexpr size_t kSmem = (size_t{kRows} * kRow + size_t{kStages} * kStage) * sizeof(__half);
};

// The block shapes (TERN_CUDA_ATTN_TC_VARIANT, AttentionArgs::tc_variant; 0 is the default).
struct TcVariant {
  int warps, m_tiles, stages;
  int min_blocks = 1;  // __launch_bounds__ blocks per multiprocessor (caps the registers)
};
constexpr TcVariant kVariants[] = {
    {4, 2, 2},  // 0: 128 rows, 4 warps of 32 rows, 2 stages
    {8, 1, 2},  // 1: 128 rows, 8 warps of 16 rows
    {4, 2, 3},  // 2: as 0 with 3 stages
    {8, 2, 2},  // 3: 256 rows, 8 warps of 32 rows
    {4, 1, 2},  // 4: 64 rows, 4 warps of 16 rows (the previous kernel's tile)
    {8, 1, 2, 2},  // 5: as 1, at most 128 registers: two blocks (16 warps) per multiprocessor
};
constexpr int kNumVariants = sizeof(kVariants) / sizeof(kVariants[0]);
constexpr int kSmallVariant = 4;  // the fallback where a larger tile does not fit shared memory

template <int HD, int kWarps, int kMTiles, int kStages, int kMinBlocks>
__global__ void __launch_bounds__(32 * kWarps, kMinBlocks) attention_tc_kernel(AttentionArgs a) {
  pdl_enter();
  using C = TcShape<HD, kWarps, kMTiles, kStages>;
  constexpr int kRow = C::kRow;
  // Keys per score chunk: 32 where 32 rows of head_dim 128 leave no registers for 64 keys' scores.
  constexpr int kSub = kMTiles * HD >= 256 ? 32 : kKeys;
  extern __shared__ __align__(16) unsigned char sm_raw[];
  __half* q_s = reinterpret_cast<__half*>(sm_raw);  // [kRows][kRow]: Q rounded to f16
  __half* kv_s = q_s + C::kRows * kRow;             // kStages x (K [kKeys][kRow], V [kKeys][kRow])
  const DevicePlan& P = a.plan;
  TcTileWork w;
  if (!tc_tile_work(TcTileMap(a, kMaxHeads, C::kRows), P, static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y), w))
    return;
  const int g = w.kv_head, h0 = w.h0, nh = w.nh, t0 = w.t0, nt = w.nt;
  const int n_rows = nt * nh;  // live rows; row r is token r / nh, head r % nh (heads fastest)
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int gid = lane >> 2, tig = lane & 3;  // mma fragment coordinates

  // Q rows -> f16 in shared memory (padding rows zero). Visible after the loop's first barrier.
  {
    constexpr int kVec = HD / 4;
    const bool vec = (reinterpret_cast<uintptr_t>(a.q) & 15) == 0 && a.q_stride % 4 == 0;
#pragma unroll 4
    for (int i = static_cast<int>(threadIdx.x); i < C::kRows * kVec; i += C::kThreads) {
      const int r = i / kVec, c = (i % kVec) * 4;
      float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (r < n_rows) {
        const float* q = a.q + int64_t{t0 + r / nh} * a.q_stride + int64_t{h0 + r % nh} * HD + c;
        x = vec ? *reinterpret_cast<const float4*>(q) : make_float4(q[0], q[1], q[2], q[3]);
      }
      uint2 packed;
      packed.x = pack_half2(x.x, x.y);
      packed.y = pack_half2(x.z, x.w);
      *reinterpret_cast<uint2*>(q_s + r * kRow + c) = packed;
    }
  }

  // This thread's fragment rows: warp rows [warp * 16 * kMTiles, +16 * kMTiles), tile mt's rows
  // gid and gid + 8. Padding rows (past n_rows) get pos -1 and are never written. A row sees
  // keys [first_of(pos), pos].
  const int window = a.sliding_window;
  auto first_of = [window](int p) { return window > 0 ? max(0, p + 1 - window) : 0; };
  int pos[kMTiles][2];
  int w_max_pos = -1, w_min_pos = INT_MAX;  // over the warp's live rows
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = (warp * kMTiles + mt) * 16 + gid + 8 * r;
      pos[mt][r] = row < n_rows ? P.positions[t0 + row / nh] : -1;
      if (row < n_rows) {
        w_max_pos = max(w_max_pos, pos[mt][r]);
        w_min_pos = min(w_min_pos, pos[mt][r]);
      }
    }
  }
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    w_max_pos = max(w_max_pos, __shfl_xor_sync(kFullMask, w_max_pos, off));
    w_min_pos = min(w_min_pos, __shfl_xor_sync(kFullMask, w_min_pos, off));
  }
  // first_of is monotonic: the warp's smallest and largest first keys.
  const int w_min_first = w_max_pos < 0 ? INT_MAX : first_of(w_min_pos), w_max_first = first_of(w_max_pos);
  // The block's key range: every token's (all warps reduce the same positions).
  int max_pos = 0, min_first = INT_MAX;
  for (int tt = lane; tt < nt; tt += 32) {
    const int p = P.positions[t0 + tt];
    max_pos = max(max_pos, p);
    min_first = min(min_first, first_of(p));
  }
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    max_pos = max(max_pos, __shfl_xor_sync(kFullMask, max_pos, off));
    min_first = min(min_first, __shfl_xor_sync(kFullMask, min_first, off));
  }

  const int seq = P.seq_index[t0];
  const int32_t* blocks = P.block_ids + P.block_offsets[seq];
  const int64_t kv_col = int64_t{g} * HD;
  const int kt_begin = min_first / kKeys, kt_end = max_pos / kKeys + 1;
  const bool softcap = a.softcap > 0.0f;
  const float s_mul = softcap ? 1.0f : a.scale * kLog2e;  // raw score -> log2 domain, in the exponent
  const int bt = a.block_tokens;
  const bool bt_pow2 = (bt & (bt - 1)) == 0;
  const ShiftBlocks bt_shift{__ffs(bt) - 1, bt - 1};
  const DivBlocks bt_div{bt};
  auto load = [&](int kt, __half* dst) {
    if (bt_pow2) {
      load_kv_tile<HD, C::kThreads, kKeys>(a, blocks, bt_shift, kv_col, kt * kKeys, max_pos, dst, dst + kKeys * kRow);
    } else {
      load_kv_tile<HD, C::kThreads, kKeys>(a, blocks, bt_div, kv_col, kt * kKeys, max_pos, dst, dst + kKeys * kRow);
    }
  };

  float o[kMTiles][HD / 8][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int dt = 0; dt < HD / 8; ++dt) o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.0f;
  }
  float m_run[kMTiles][2], l_run[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    m_run[mt][0] = m_run[mt][1] = -INFINITY;
    l_run[mt][0] = l_run[mt][1] = 0.0f;
  }

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (kt_begin + s < kt_end) load(kt_begin + s, kv_s + s * C::kStage);
    cp_async_commit();
  }
  const int mat = lane >> 3, mrow = lane & 7;  // ldmatrix: which 8x8 matrix this lane addresses
  const __half* q_w = q_s + warp * kMTiles * 16 * kRow;
  for (int kt = kt_begin; kt < kt_end; ++kt) {
    const int it = kt - kt_begin;
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile kt has landed for every thread, and every warp is done with tile kt - 1
    if (kt + kStages - 1 < kt_end) load(kt + kStages - 1, kv_s + ((it + kStages - 1) % kStages) * C::kStage);
    cp_async_commit();
    const __half* k_s = kv_s + (it % kStages) * C::kStage;
    const __half* v_s = k_s + kKeys * kRow;
#pragma unroll
    for (int c = 0; c < kKeys / kSub; ++c) {
      const int j_base = kt * kKeys + c * kSub;
      // A warp whose rows all end before these keys (the causal diagonal) or start after them (a
      // sliding window) skips them: their scores would all be masked, adding exact zeros and
      // rescaling by exactly 1.
      if (j_base > w_max_pos || j_base + kSub - 1 < w_min_first) continue;
      // S = Q K^T: 16 * kMTiles rows x kSub keys per warp; each K fragment feeds kMTiles row tiles.
      float s[kMTiles][kSub / 8][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int n = 0; n < kSub / 8; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
      }
#pragma unroll
      for (int ks = 0; ks < HD / 16; ++ks) {
        uint32_t qa[kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          ldmatrix_x4(q_w + (mt * 16 + (mat & 1) * 8 + mrow) * kRow + ks * 16 + (mat >> 1) * 8, qa[mt]);
        }
#pragma unroll
        for (int np = 0; np < kSub / 16; ++np) {
          uint32_t b[4];
          ldmatrix_x4(k_s + (c * kSub + np * 16 + (mat >> 1) * 8 + mrow) * kRow + ks * 16 + (mat & 1) * 8, b);
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            mma_f16(s[mt][2 * np], qa[mt], b[0], b[1]);
            mma_f16(s[mt][2 * np + 1], qa[mt], b[2], b[3]);
          }
        }
      }
      // Softcap: s = softcap * tanh(s * scale / softcap), into the log2 domain here (s_mul = 1);
      // else the scale is applied inside the exponent (s_mul = scale * log2 e).
      if (softcap) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
          for (int n = 0; n < kSub / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mt][n][e] = a.softcap * tanhf(s[mt][n][e] * a.scale / a.softcap) * kLog2e;
          }
        }
      }
      // Mask where a row's window or causal limit crosses these keys.
      if (j_base + kSub - 1 > w_min_pos || j_base < w_max_first) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
          for (int n = 0; n < kSub / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int j = j_base + n * 8 + tig * 2 + (e & 1), r = e >> 1;
              if (j > pos[mt][r] || j < first_of(pos[mt][r])) s[mt][n][e] = -INFINITY;
            }
          }
        }
      }
      // Online softmax per row (a row's kSub scores sit in the 4 lanes of a quad); p = exp2(s *
      // s_mul - m), m the running max in the log2 domain.
      float alpha[kMTiles][2];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float mx = -INFINITY;
#pragma unroll
          for (int n = 0; n < kSub / 8; ++n) mx = fmaxf(mx, fmaxf(s[mt][n][2 * r], s[mt][n][2 * r + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
          const float m_new = fmaxf(m_run[mt][r], mx * s_mul);
          const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing valid yet
          alpha[mt][r] = exp2_approx(m_run[mt][r] - m_use);  // exactly 1 when the max holds
          m_run[mt][r] = m_new;
          float sum = 0.0f;
#pragma unroll
          for (int n = 0; n < kSub / 8; ++n) {
            s[mt][n][2 * r] = exp2_approx(fmaf(s[mt][n][2 * r], s_mul, -m_use));
            s[mt][n][2 * r + 1] = exp2_approx(fmaf(s[mt][n][2 * r + 1], s_mul, -m_use));
            sum += s[mt][n][2 * r] + s[mt][n][2 * r + 1];
          }
          l_run[mt][r] = l_run[mt][r] * alpha[mt][r] + sum;  // this lane's share; the quad is summed at the end
        }
      }
      // The output is rescaled only when some row's max moved (multiplying by 1 changes nothing).
      bool moved = false;
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) moved = moved || alpha[mt][0] != 1.0f || alpha[mt][1] != 1.0f;
      if (__any_sync(kFullMask, moved)) {
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
          for (int dt = 0; dt < HD / 8; ++dt) {
            o[mt][dt][0] *= alpha[mt][0];
            o[mt][dt][1] *= alpha[mt][0];
            o[mt][dt][2] *= alpha[mt][1];
            o[mt][dt][3] *= alpha[mt][1];
          }
        }
      }
      // O += P V: the S accumulators of two adjacent key octets are the A fragment of 16 keys;
      // each V fragment feeds kMTiles row tiles.
#pragma unroll
      for (int kk = 0; kk < kSub / 16; ++kk) {
        uint32_t pa[kMTiles][4];
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          pa[mt][0] = pack_half2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
          pa[mt][1] = pack_half2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
          pa[mt][2] = pack_half2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
          pa[mt][3] = pack_half2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < HD / 16; ++dp) {
          uint32_t b[4];
          ldmatrix_x4_trans(v_s + (c * kSub + kk * 16 + (mat & 1) * 8 + mrow) * kRow + dp * 16 + (mat >> 1) * 8, b);
#pragma unroll
          for (int mt = 0; mt < kMTiles; ++mt) {
            mma_f16(o[mt][2 * dp], pa[mt], b[0], b[1]);
            mma_f16(o[mt][2 * dp + 1], pa[mt], b[2], b[3]);
          }
        }
      }
    }
  }
  cp_async_wait<0>();  // no copy may still target shared memory when the block exits
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = (warp * kMTiles + mt) * 16 + gid + 8 * r;
      float l = l_run[mt][r];
      l += __shfl_xor_sync(kFullMask, l, 1);
      l += __shfl_xor_sync(kFullMask, l, 2);
      if (row >= n_rows) continue;
      const float inv = 1.0f / l;
      float* dst = a.out + int64_t{t0 + row / nh} * a.out_stride + int64_t{h0 + row % nh} * HD + tig * 2;
#pragma unroll
      for (int dt = 0; dt < HD / 8; ++dt) {
        dst[dt * 8] = o[mt][dt][2 * r] * inv;
        dst[dt * 8 + 1] = o[mt][dt][2 * r + 1] * inv;
      }
    }
  }
}

template <int HD, int V>
void launch_variant(const AttentionArgs& a, const LaunchEnv& env) {
  constexpr TcVariant v = kVariants[V];
  using C = TcShape<HD, v.warps, v.m_tiles, v.stages>;
  const TcTileMap map(a, kMaxHeads, C::kRows);
  const dim3 grid(static_cast<unsigned>(a.plan.n_tc_tiles * map.n_sub),
                  static_cast<unsigned>(a.n_kv_heads * map.n_slices));
  launch_kernel(env, attention_tc_kernel<HD, v.warps, v.m_tiles, v.stages, v.min_blocks>, grid, dim3(C::kThreads), C::kSmem, a);
}

template <int HD, int V>
void init_variant(int max_smem_bytes, bool* fits) {
  constexpr TcVariant v = kVariants[V];
  using C = TcShape<HD, v.warps, v.m_tiles, v.stages>;
  fits[V] = C::kSmem <= static_cast<size_t>(max_smem_bytes);
  if (fits[V]) {
    TERN_CUDA_CHECK(cudaFuncSetAttribute(attention_tc_kernel<HD, v.warps, v.m_tiles, v.stages, v.min_blocks>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(C::kSmem)));
  }
}

// Which variants fit the device's shared memory (init_attention_tc; the last device set up wins,
// which only matters for mixed GPUs of different shared-memory sizes).
bool g_fits[2][kNumVariants];

template <int HD>
void launch_hd(const AttentionArgs& a, const LaunchEnv& env) {
  int v = a.tc_variant >= 0 && a.tc_variant < kNumVariants ? a.tc_variant : 0;
  if (!g_fits[HD == 128][v]) v = g_fits[HD == 128][0] ? 0 : kSmallVariant;
  switch (v) {
    case 1: launch_variant<HD, 1>(a, env); break;
    case 2: launch_variant<HD, 2>(a, env); break;
    case 3: launch_variant<HD, 3>(a, env); break;
    case 4: launch_variant<HD, 4>(a, env); break;
    case 5: launch_variant<HD, 5>(a, env); break;
    default: launch_variant<HD, 0>(a, env); break;
  }
}

template <int HD>
void init_hd(int max_smem_bytes, bool* fits) {
  init_variant<HD, 0>(max_smem_bytes, fits);
  init_variant<HD, 1>(max_smem_bytes, fits);
  init_variant<HD, 2>(max_smem_bytes, fits);
  init_variant<HD, 3>(max_smem_bytes, fits);
  init_variant<HD, 4>(max_smem_bytes, fits);
  init_variant<HD, 5>(max_smem_bytes, fits);
}
static_assert(kNumVariants == 6, "launch_hd and init_hd list every variant");

}  // namespace

bool attention_tc_supports(const AttentionArgs& a) {
  return a.kv_dtype == DType::F16 && (a.head_dim == 64 || a.head_dim == 128) && a.k_cache_stride % 8 == 0 &&
         a.v_cache_stride % 8 == 0 && reinterpret_cast<uintptr_t>(a.k_cache) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(a.v_cache) % 16 == 0;
}

int attention_tc_variants() { return kNumVariants; }

void launch_attention_tc(const AttentionArgs& a, const LaunchEnv& env) {
  if (a.head_dim == 64) {
    launch_hd<64>(a, env);
  } else {
    launch_hd<128>(a, env);
  }
}

void init_attention_tc(int max_smem_bytes) {
  init_hd<64>(max_smem_bytes, g_fits[0]);
  init_hd<128>(max_smem_bytes, g_fits[1]);
  // Every variant fits sm_80 / sm_90 (163 / 227 KiB); sm_86 / sm_89 (99 KiB) take the small tile
  // where the default does not fit.
  TERN_CHECK_MSG(g_fits[0][kSmallVariant] && g_fits[1][kSmallVariant], "attention_tc: no tile fits shared memory");
}

}  // namespace tern::cuda
