// The batch-invariant tensor-core attention (attention_mma.h): one kernel template in two modes
// (fused over the prefill tiles, split over (tile, span) items) and the split mode's merge.
#include <climits>

#include "backends/cuda/attention_mma.h"
#include "backends/cuda/common.cuh"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/tc_fragments.cuh"

namespace tern::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kStages = 2;               // K/V tiles in flight: the next one copies during this one
constexpr int kKeys = kTcKeys;           // keys per K/V tile = one softmax chunk
constexpr int kFusedRows = 16 * kWarps;  // fused: a warp's 16 rows each
constexpr int kFusedMaxHeads = 8;        // fused: heads of a GQA group per block (larger ones sliced)
constexpr int kSplitHeads = 4;           // split: heads of a GQA group per block
// Split: the rows every warp shares, in kMT m tiles of 16 (two for up to 8 tokens x 4 heads; one
// where the plan's tiles x heads fit 16, e.g. a decode step's one token per sequence).
static_assert(kAttnTileTokens * kSplitHeads <= 32, "a split block's rows must fit two m tiles");
static_assert(kAttnSpanTokens == kAttnSpanChunks * kKeys, "spans are whole K/V tiles");

// kSplitMT: 0 = fused (a warp's own m tile), 1 / 2 = split with that many m tiles shared by the warps.
template <int HD, int kSplitMT>
struct MmaShape {
  static constexpr bool kSplit = kSplitMT > 0;
  static constexpr int kRows = kSplit ? 16 * kSplitMT : kFusedRows;
  static constexpr int kMT = kSplit ? kSplitMT : 1;      // 16-row mma tiles per warp
  static constexpr int kDT = kSplit ? HD / 32 : HD / 8;  // 8-wide output tiles per warp
  static constexpr int kRow = HD + 8;  // halves per shared row: 16 bytes of padding (ldmatrix without conflicts)
  static constexpr int kStage = 2 * kKeys * kRow;  // K rows, then V rows
  static constexpr size_t kSmem = (size_t{2} * kRows * kRow + size_t{kStages} * kStage) * sizeof(__half);
  static_assert(kDT % 2 == 0, "a warp's outputs are whole 16-wide ldmatrix tiles");
};

// Fused mode: how (KV group slice, 128-token tile, sub-tile) map onto blocks (host and device).
struct FusedMap {
  int group, n_slices, heads_per_block, tokens_per_block, n_sub;
  TERN_HOST_DEVICE explicit FusedMap(const AttentionArgs& a) {
    group = a.n_heads / a.n_kv_heads;
    n_slices = (group + kFusedMaxHeads - 1) / kFusedMaxHeads;
    heads_per_block = (group + n_slices - 1) / n_slices;
    tokens_per_block = kFusedRows / heads_per_block;
    n_sub = (kAttnTcTileTokens + tokens_per_block - 1) / tokens_per_block;
  }
};
TERN_HOST_DEVICE inline int split_slices(const AttentionArgs& a) {
  return (a.n_heads / a.n_kv_heads + kSplitHeads - 1) / kSplitHeads;
}

// q (or p) as f16 hi + lo: hi = f16(x), lo = f16(x - hi); two values packed per word.
__device__ __forceinline__ void split_pack(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const __half h0 = __float2half_rn(x0), h1 = __float2half_rn(x1);
  const __half l0 = __float2half_rn(x0 - __half2float(h0)), l1 = __float2half_rn(x1 - __half2float(h1));
  const __half2 h = __halves2half2(h0, h1), l = __halves2half2(l0, l1);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}

// Folds a span partial (m finite, l, o) into the result (M, L, A): the contract's expressions,
// shared by the fused kernel and the merge kernel.
struct FoldScales {
  float a, b;
};
__device__ __forceinline__ FoldScales fold_scales(float& M, float m) {
  const float mn = fmaxf(M, m);
  FoldScales f;
  f.a = M == mn ? 1.0f : exp2_approx(M - mn);  // M = -inf (nothing yet): ex2(-inf) = 0
  f.b = m == mn ? 1.0f : exp2_approx(m - mn);
  M = mn;
  return f;
}
__device__ __forceinline__ float fold(float acc, float part, FoldScales f) { return fmaf(part, f.b, acc * f.a); }

template <int HD, int kSplitMT>
__global__ void __launch_bounds__(kThreads) attention_mma_kernel(AttentionArgs a) {
  pdl_enter();
  using C = MmaShape<HD, kSplitMT>;
  constexpr bool kSplit = C::kSplit;
  constexpr int kRow = C::kRow, kMT = C::kMT, kDT = C::kDT;
  extern __shared__ __align__(16) unsigned char sm_raw[];
  __half* qh_s = reinterpret_cast<__half*>(sm_raw);  // [kRows][kRow] q_hi
  __half* ql_s = qh_s + C::kRows * kRow;             // [kRows][kRow] q_lo
  __half* kv_s = ql_s + C::kRows * kRow;             // kStages x (K [kKeys][kRow], V [kKeys][kRow])
  const DevicePlan& P = a.plan;
  const int group = a.n_heads / a.n_kv_heads;
  int kv_head, h0, nh, t0, nt, span = 0;
  if constexpr (kSplit) {
    const int n_slices = split_slices(a), hpb = (group + n_slices - 1) / n_slices;
    const int slice = static_cast<int>(blockIdx.y) % n_slices;
    kv_head = static_cast<int>(blockIdx.y) / n_slices;
    h0 = kv_head * group + slice * hpb;
    nh = min(hpb, group - slice * hpb);
    const int tile = P.split_tile[blockIdx.x];
    span = P.split_span[blockIdx.x];
    t0 = P.tile_token_begin[tile];
    nt = P.tile_n_tokens[tile];
  } else {
    const FusedMap map(a);
    const int slice = static_cast<int>(blockIdx.y) % map.n_slices;
    kv_head = static_cast<int>(blockIdx.y) / map.n_slices;
    h0 = kv_head * group + slice * map.heads_per_block;
    nh = min(map.heads_per_block, group - slice * map.heads_per_block);
    // Longest contexts (the last tiles, their last sub-tiles) first: shortens the causal tail.
    const int tile = P.n_tc_tiles - 1 - static_cast<int>(blockIdx.x) / map.n_sub;
    const int sub = map.n_sub - 1 - static_cast<int>(blockIdx.x) % map.n_sub;
    const int tile_nt = P.tc_tile_n_tokens[tile];
    if (sub * map.tokens_per_block >= tile_nt) return;  // the tile is shorter than this sub-tile
    t0 = P.tc_tile_token_begin[tile] + sub * map.tokens_per_block;
    nt = min(map.tokens_per_block, tile_nt - sub * map.tokens_per_block);
  }
  const int n_rows = nt * nh;  // row r: token t0 + r / nh, head h0 + r % nh
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int gid = lane >> 2, tig = lane & 3;  // mma fragment coordinates
  const int n_mt = kSplit ? (n_rows + 15) / 16 : 1;
  auto row_base = [&](int mt) { return kSplit ? mt * 16 : warp * 16; };

  // q -> hi and lo halves in shared memory (padding rows zero); visible after the first barrier.
  {
    constexpr int kVec = HD / 4;
    const bool vec = (reinterpret_cast<uintptr_t>(a.q) & 15) == 0 && a.q_stride % 4 == 0;
    for (int i = static_cast<int>(threadIdx.x); i < C::kRows * kVec; i += kThreads) {
      const int r = i / kVec, c = (i % kVec) * 4;
      float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (r < n_rows) {
        const float* q = a.q + int64_t{t0 + r / nh} * a.q_stride + int64_t{h0 + r % nh} * HD + c;
        x = vec ? *reinterpret_cast<const float4*>(q) : make_float4(q[0], q[1], q[2], q[3]);
      }
      uint2 hi, lo;
      split_pack(x.x, x.y, hi.x, lo.x);
      split_pack(x.z, x.w, hi.y, lo.y);
      *reinterpret_cast<uint2*>(qh_s + r * kRow + c) = hi;
      *reinterpret_cast<uint2*>(ql_s + r * kRow + c) = lo;
    }
  }

  // This thread's fragment rows (mt, r): row_base(mt) + gid + 8 r; padding rows get pos -1.
  const int window = a.sliding_window;
  auto first_of = [window](int p) { return window > 0 ? max(0, p + 1 - window) : 0; };
  int pos[kMT][2];
  int w_max_pos = -1, w_min_pos = INT_MAX;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row_base(mt) + gid + 8 * r;
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
  const int w_min_first = w_max_pos < 0 ? INT_MAX : first_of(w_min_pos);
  int max_pos = 0, min_first = INT_MAX;  // the block's key range (every warp reduces the same)
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
  int kt_begin = min_first / kKeys, kt_end = max_pos / kKeys + 1;
  if constexpr (kSplit) {
    kt_begin = max(kt_begin, span * kAttnSpanChunks);
    kt_end = min(kt_end, (span + 1) * kAttnSpanChunks);
  }

  const int32_t* blocks = P.block_ids + P.block_offsets[P.seq_index[t0]];
  const int64_t kv_col = int64_t{kv_head} * HD;
  const bool softcap = a.softcap > 0.0f;
  const float s_mul = softcap ? 1.0f : a.scale * kLog2e;  // raw score -> log2 domain, in the exponent
  const int bt = a.block_tokens;
  const bool bt_pow2 = (bt & (bt - 1)) == 0;
  const ShiftBlocks bt_shift{__ffs(bt) - 1, bt - 1};
  const DivBlocks bt_div{bt};
  auto load = [&](int kt, __half* dst) {
    if (bt_pow2) {
      load_kv_tile<HD, kThreads, kKeys>(a, blocks, bt_shift, kv_col, kt * kKeys, max_pos, dst, dst + kKeys * kRow);
    } else {
      load_kv_tile<HD, kThreads, kKeys>(a, blocks, bt_div, kv_col, kt * kKeys, max_pos, dst, dst + kKeys * kRow);
    }
  };

  // The span partial being formed (o: this warp's output columns dim0 + [0, 8 kDT)) and, fused,
  // the result its spans fold into.
  const int dim0 = kSplit ? warp * (HD / kWarps) : 0;
  float o[kMT][kDT][4], m_run[kMT][2], l_run[kMT][2];
  float res_a[kDT][4], res_m[2], res_l[2];
  auto reset_span = [&]() {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt) o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.0f;
      m_run[mt][0] = m_run[mt][1] = -INFINITY;
      l_run[mt][0] = l_run[mt][1] = 0.0f;
    }
  };
  reset_span();
#pragma unroll
  for (int dt = 0; dt < kDT; ++dt) res_a[dt][0] = res_a[dt][1] = res_a[dt][2] = res_a[dt][3] = 0.0f;
  res_m[0] = res_m[1] = -INFINITY;
  res_l[0] = res_l[1] = 0.0f;
  // A row's span sum: the quad's lane sums, xor 1 then xor 2 (the same value in all 4 lanes).
  auto span_sum = [&](int mt, int r) {
    float l = l_run[mt][r];
    l += __shfl_xor_sync(kFullMask, l, 1);
    l += __shfl_xor_sync(kFullMask, l, 2);
    return l;
  };

  if (kt_begin < kt_end) load(kt_begin, kv_s);
  cp_async_commit();
  const int mat = lane >> 3, mrow = lane & 7;  // ldmatrix: which 8x8 matrix this lane addresses
  for (int kt = kt_begin; kt < kt_end; ++kt) {
    const int it = kt - kt_begin;
    cp_async_wait<0>();
    __syncthreads();  // tile kt has landed for every thread, and every warp is done with tile kt - 1
    if (kt + 1 < kt_end) load(kt + 1, kv_s + ((it + 1) % kStages) * C::kStage);
    cp_async_commit();
    const __half* k_s = kv_s + (it % kStages) * C::kStage;
    const __half* v_s = k_s + kKeys * kRow;
    const int j_base = kt * kKeys;
    // A chunk past every row of the warp (causal) or before all of them (window) would only add
    // exact no-ops: skipped.
    if (j_base <= w_max_pos && j_base + kKeys - 1 >= w_min_first) {
      // S = q_hi K^T + q_lo K^T per head_dim slice of 16.
      float s[kMT][kKeys / 8][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
      }
#pragma unroll
      for (int ks = 0; ks < HD / 16; ++ks) {
        uint32_t qh[kMT][4], ql[kMT][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          const int off = (row_base(mt) + (mat & 1) * 8 + mrow) * kRow + ks * 16 + (mat >> 1) * 8;
          ldmatrix_x4(qh_s + off, qh[mt]);
          ldmatrix_x4(ql_s + off, ql[mt]);
        }
#pragma unroll
        for (int np = 0; np < kKeys / 16; ++np) {
          uint32_t b[4];
          ldmatrix_x4(k_s + (np * 16 + (mat >> 1) * 8 + mrow) * kRow + ks * 16 + (mat & 1) * 8, b);
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            if (mt >= n_mt) continue;
            mma_f16(s[mt][2 * np], qh[mt], b[0], b[1]);
            mma_f16(s[mt][2 * np], ql[mt], b[0], b[1]);
            mma_f16(s[mt][2 * np + 1], qh[mt], b[2], b[3]);
            mma_f16(s[mt][2 * np + 1], ql[mt], b[2], b[3]);
          }
        }
      }
      // Softcap into the log2 domain; mask outside [first(p), p]; online softmax per row.
      float alpha[kMT][2];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int p = pos[mt][r], f = first_of(p);
          float mx = -INFINITY;
#pragma unroll
          for (int n = 0; n < kKeys / 8; ++n) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              float& v = s[mt][n][2 * r + e];
              if (softcap) v = a.softcap * tanhf(v * a.scale / a.softcap) * kLog2e;
              const int j = j_base + n * 8 + tig * 2 + e;
              if (j > p || j < f) v = -INFINITY;
              mx = fmaxf(mx, v);
            }
          }
          mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
          const float m_new = fmaxf(m_run[mt][r], mx * s_mul);
          const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing valid yet
          alpha[mt][r] = m_new == m_run[mt][r] ? 1.0f : exp2_approx(m_run[mt][r] - m_use);
          m_run[mt][r] = m_new;
          float sum = 0.0f;
#pragma unroll
          for (int n = 0; n < kKeys / 8; ++n) {
            const float p0 = exp2_approx(fmaf(s[mt][n][2 * r], s_mul, -m_use));
            const float p1 = exp2_approx(fmaf(s[mt][n][2 * r + 1], s_mul, -m_use));
            s[mt][n][2 * r] = p0;
            s[mt][n][2 * r + 1] = p1;
            sum += p0 + p1;
          }
          l_run[mt][r] = fmaf(l_run[mt][r], alpha[mt][r], sum);
        }
      }
      bool moved = false;
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) moved = moved || alpha[mt][0] != 1.0f || alpha[mt][1] != 1.0f;
      if (__any_sync(kFullMask, moved)) {  // multiplying by 1 changes nothing: skipped
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
          for (int dt = 0; dt < kDT; ++dt) {
            o[mt][dt][0] *= alpha[mt][0];
            o[mt][dt][1] *= alpha[mt][0];
            o[mt][dt][2] *= alpha[mt][1];
            o[mt][dt][3] *= alpha[mt][1];
          }
        }
      }
      // O += P_hi V + P_lo V per 16 keys: two adjacent key octets' accumulators are the A
      // fragment of 16 keys.
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        uint32_t ph[kMT][4], pl[kMT][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          split_pack(s[mt][2 * kk][0], s[mt][2 * kk][1], ph[mt][0], pl[mt][0]);
          split_pack(s[mt][2 * kk][2], s[mt][2 * kk][3], ph[mt][1], pl[mt][1]);
          split_pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1], ph[mt][2], pl[mt][2]);
          split_pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3], ph[mt][3], pl[mt][3]);
        }
#pragma unroll
        for (int dp = 0; dp < kDT / 2; ++dp) {
          uint32_t b[4];
          ldmatrix_x4_trans(v_s + (kk * 16 + (mat & 1) * 8 + mrow) * kRow + dim0 + dp * 16 + (mat >> 1) * 8, b);
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            if (mt >= n_mt) continue;
            mma_f16(o[mt][2 * dp], ph[mt], b[0], b[1]);
            mma_f16(o[mt][2 * dp], pl[mt], b[0], b[1]);
            mma_f16(o[mt][2 * dp + 1], ph[mt], b[2], b[3]);
            mma_f16(o[mt][2 * dp + 1], pl[mt], b[2], b[3]);
          }
        }
      }
    }
    if constexpr (!kSplit) {
      // Fused: the span ends with this tile (or the walk does): fold its partial into the result.
      if (kt % kAttnSpanChunks == kAttnSpanChunks - 1 || kt == kt_end - 1) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float l = span_sum(0, r);
          if (m_run[0][r] != -INFINITY) {
            const FoldScales f = fold_scales(res_m[r], m_run[0][r]);
            res_l[r] = fold(res_l[r], l, f);
#pragma unroll
            for (int dt = 0; dt < kDT; ++dt) {
              res_a[dt][2 * r] = fold(res_a[dt][2 * r], o[0][dt][2 * r], f);
              res_a[dt][2 * r + 1] = fold(res_a[dt][2 * r + 1], o[0][dt][2 * r + 1], f);
            }
          }
        }
        reset_span();
      }
    }
  }
  cp_async_wait<0>();  // no copy may still target shared memory when the block exits

  if constexpr (kSplit) {
    // The span partial of every row whose context reaches this span (m = -inf: nothing valid).
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float l = span_sum(mt, r);
        const int row = mt * 16 + gid + 8 * r;
        if (row >= n_rows || pos[mt][r] / kAttnSpanTokens < span) continue;
        const int64_t slot = int64_t{P.token_partial_begin[t0 + row / nh]} + span;
        float* rec = a.partials + (slot * a.n_heads + h0 + row % nh) * (HD + 2);
        if (warp == 0 && tig == 0) {
          rec[0] = m_run[mt][r];
          rec[1] = l;
        }
#pragma unroll
        for (int dt = 0; dt < kDT; ++dt) {
          const int d = dim0 + dt * 8 + tig * 2;
          rec[2 + d] = o[mt][dt][2 * r];
          rec[2 + d + 1] = o[mt][dt][2 * r + 1];
        }
      }
    }
  } else {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp * 16 + gid + 8 * r;
      if (row >= n_rows) continue;
      float* dst = a.out + int64_t{t0 + row / nh} * a.out_stride + int64_t{h0 + row % nh} * HD + tig * 2;
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt) {
        dst[dt * 8] = __fdiv_rn(res_a[dt][2 * r], res_l[r]);
        dst[dt * 8 + 1] = __fdiv_rn(res_a[dt][2 * r + 1], res_l[r]);
      }
    }
  }
}

// Split mode: folds a (token, head)'s span partials in span order, skipping empty ones (the
// fused kernel's fold). One block per (token, head), a thread per dimension.
template <int HD>
__global__ void __launch_bounds__(HD) attention_mma_merge_kernel(AttentionArgs a) {
  pdl_enter();
  const int t = static_cast<int>(blockIdx.x), h = static_cast<int>(blockIdx.y), d = static_cast<int>(threadIdx.x);
  const DevicePlan& P = a.plan;
  const int n_spans = P.positions[t] / kAttnSpanTokens + 1;
  const int64_t first = int64_t{P.token_partial_begin[t]};
  float M = -INFINITY, L = 0.0f, A = 0.0f;
  constexpr int kBatch = 32;  // records loaded together (latency: a 32k context has 128), then folded in order
  for (int s0 = 0; s0 < n_spans; s0 += kBatch) {
    float m[kBatch], l[kBatch], o[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      m[b] = -INFINITY;
      l[b] = o[b] = 0.0f;
      if (s0 + b < n_spans) {
        const float* rec = a.partials + ((first + s0 + b) * a.n_heads + h) * (HD + 2);
        m[b] = rec[0];
        l[b] = rec[1];
        o[b] = rec[2 + d];
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (m[b] == -INFINITY) continue;
      const FoldScales f = fold_scales(M, m[b]);
      L = fold(L, l[b], f);
      A = fold(A, o[b], f);
    }
  }
  a.out[int64_t{t} * a.out_stride + int64_t{h} * HD + d] = __fdiv_rn(A, L);
}

template <int HD>
void launch_hd(const AttentionArgs& a, const LaunchEnv& env) {
  if (a.tc == kAttnMmaSplit) {
    const int n_slices = split_slices(a), group = a.n_heads / a.n_kv_heads;
    const dim3 grid(static_cast<unsigned>(a.plan.n_split_items), static_cast<unsigned>(a.n_kv_heads * n_slices));
    if (a.plan.max_tile_tokens * ((group + n_slices - 1) / n_slices) <= 16) {
      launch_kernel(env, attention_mma_kernel<HD, 1>, grid, dim3(kThreads), MmaShape<HD, 1>::kSmem, a);
    } else {
      launch_kernel(env, attention_mma_kernel<HD, 2>, grid, dim3(kThreads), MmaShape<HD, 2>::kSmem, a);
    }
    launch_kernel(env, attention_mma_merge_kernel<HD>,
                  dim3(static_cast<unsigned>(a.plan.n_tokens), static_cast<unsigned>(a.n_heads)), dim3(HD), 0, a);
    return;
  }
  const FusedMap map(a);
  const dim3 grid(static_cast<unsigned>(a.plan.n_tc_tiles * map.n_sub), static_cast<unsigned>(a.n_kv_heads * map.n_slices));
  launch_kernel(env, attention_mma_kernel<HD, 0>, grid, dim3(kThreads), MmaShape<HD, 0>::kSmem, a);
}

template <int HD, int kSplitMT>
bool init_one(int max_smem_bytes) {
  constexpr size_t smem = MmaShape<HD, kSplitMT>::kSmem;
  if (smem > static_cast<size_t>(max_smem_bytes)) return false;
  TERN_CUDA_CHECK(cudaFuncSetAttribute(attention_mma_kernel<HD, kSplitMT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
  return true;
}

}  // namespace

bool attention_mma_supports(const AttentionArgs& a) {
  return a.kv_dtype == DType::F16 && (a.head_dim == 64 || a.head_dim == 128) && a.n_kv_heads > 0 &&
         a.n_heads % a.n_kv_heads == 0 && a.k_cache_stride % 8 == 0 && a.v_cache_stride % 8 == 0 &&
         reinterpret_cast<uintptr_t>(a.k_cache) % 16 == 0 && reinterpret_cast<uintptr_t>(a.v_cache) % 16 == 0;
}

bool attention_mma_split(const AttentionArgs& a, int n_sm) {
  const FusedMap map(a);
  const int64_t fused_blocks =
      (int64_t{a.plan.n_tokens} / map.tokens_per_block + a.plan.n_tc_tiles) * a.n_kv_heads * map.n_slices;
  if (fused_blocks >= 2 * int64_t{n_sm}) return false;
  AttentionArgs s = a;
  s.chunk_split = 0;
  return attention_partials_bytes(s) <= (size_t{256} << 20);
}

void launch_attention_mma(const AttentionArgs& a, const LaunchEnv& env) {
  if (a.plan.n_tokens == 0) return;
  if (a.head_dim == 64) {
    launch_hd<64>(a, env);
  } else {
    launch_hd<128>(a, env);
  }
}

bool init_attention_mma(int max_smem_bytes) {
  bool ok = true;
  ok = init_one<64, 0>(max_smem_bytes) && ok;
  ok = init_one<64, 1>(max_smem_bytes) && ok;
  ok = init_one<64, 2>(max_smem_bytes) && ok;
  ok = init_one<128, 0>(max_smem_bytes) && ok;
  ok = init_one<128, 1>(max_smem_bytes) && ok;
  ok = init_one<128, 2>(max_smem_bytes) && ok;
  return ok;
}

}  // namespace tern::cuda
