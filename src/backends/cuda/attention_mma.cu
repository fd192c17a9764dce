// The batch-invariant tensor-core attention (attention_mma.h): one kernel template in two modes
// (fused over the prefill tiles, split over (tile, span) items) and the split mode's merge.
#include <climits>

#include "backends/cuda/attention_mma.h"
#include "backends/cuda/attention_tc_tiles.cuh"
#include "backends/cuda/common.cuh"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/tc_fragments.cuh"

namespace tern::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kKeys = kTcKeys;           // keys per K/V tile = one softmax chunk
constexpr int kKeyTiles = kKeys / 8;     // a chunk's 8-key mma n tiles
constexpr int kChunks = kAttnSpanChunks;  // chunks per span
constexpr int kFusedStages = 2;          // fused: K/V tiles in flight (the next copies during this one)
constexpr int kFusedRows = 16 * kWarps;  // fused: a warp's 16 rows each
constexpr int kFusedMaxHeads = 8;        // fused: heads of a GQA group per block (larger ones sliced)
constexpr int kSplitHeads = 4;           // split: heads of a GQA group per block
// Split: the rows of a block, in kMT m tiles of 16 (two for up to 8 tokens x 4 heads; one where
// the plan's tiles x heads fit 16, e.g. a decode step's one token per sequence).
static_assert(kAttnTileTokens * kSplitHeads <= 32, "a split block's rows must fit two m tiles");
static_assert(kAttnSpanTokens == kChunks * kKeys, "spans are whole K/V tiles");
static_assert(kChunks == kWarps, "the span kernel gives each warp one chunk's scores");

template <int HD>
constexpr int row_halves() {
  return HD + 8;  // halves per shared row: 16 bytes of padding (ldmatrix without bank conflicts)
}

// Fused mode: how (KV group slice, 128-token tile, sub-tile) map onto blocks (host and device).
TERN_HOST_DEVICE inline TcTileMap fused_map(const AttentionArgs& a) { return TcTileMap(a, kFusedMaxHeads, kFusedRows); }
TERN_HOST_DEVICE inline int split_slices(const AttentionArgs& a) {
  return (a.n_heads / a.n_kv_heads + kSplitHeads - 1) / kSplitHeads;
}

template <int HD>
struct FusedShape {
  static constexpr int kRow = row_halves<HD>();
  static constexpr int kStage = 2 * kKeys * kRow;  // K rows, then V rows
  static constexpr size_t kSmem = (size_t{2} * kFusedRows * kRow + size_t{kFusedStages} * kStage) * sizeof(__half);
};

// The span kernel's shared memory: q hi and lo rows; the span's K tiles (chunk c's P fragments
// overwrite tile c once its scores are formed); kVStages V tiles (4: the whole span in flight; 2:
// a smaller block, two per SM); the chunks' row maxima and lane sums.
template <int HD, int kMT, int kVStages>
struct SpanShape {
  static constexpr int kRows = 16 * kMT;
  static constexpr int kRow = row_halves<HD>();
  static constexpr int kTile = kKeys * kRow;  // halves
  static constexpr int kDT = HD / 32;         // 8-wide output tiles per warp (a quarter of head_dim)
  static constexpr int kPWords = (kKeys / 16) * kMT * 8 * 32;  // a chunk's P fragments (hi, lo)
  static_assert(kPWords * 4 <= kTile * 2, "a chunk's P fragments must fit its K tile");
  static_assert(kDT % 2 == 0, "a warp's outputs are whole 16-wide ldmatrix tiles");
  static constexpr size_t kHalves = size_t{2} * kRows * kRow + size_t{kChunks + kVStages} * kTile;
  static constexpr size_t kFloats = size_t{kChunks} * kRows + size_t{kChunks} * kMT * 2 * 32;
  static constexpr size_t kSmem = kHalves * sizeof(__half) + kFloats * sizeof(float);
};

// Hopper and A100 hold 228 / 164 KiB of shared memory per SM, 1 KiB of it reserved per block: the
// two-stage head_dim 128 block fits two per SM on sm_90, the four-stage one a single block.
static_assert(SpanShape<128, 1, 2>::kSmem + 1024 <= 114 * 1024, "two split blocks per Hopper SM");
static_assert(SpanShape<64, 1, 4>::kSmem + 1024 <= 82 * 1024, "two head_dim 64 split blocks per A100 SM");

// q (or p) as f16 hi + lo: hi = f16(x), lo = f16(x - hi); two values packed per word.
__device__ __forceinline__ void split_pack(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const __half h0 = __float2half_rn(x0), h1 = __float2half_rn(x1);
  const __half l0 = __float2half_rn(x0 - __half2float(h0)), l1 = __float2half_rn(x1 - __half2float(h1));
  const __half2 h = __halves2half2(h0, h1), l = __halves2half2(l0, l1);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}

__device__ __forceinline__ int first_key(int p, int window) { return window > 0 ? max(0, p + 1 - window) : 0; }

// ---- The per-chunk steps: both kernels form every row from these, so both give the same bits.

// q rows (row r: token t0 + r / nh, head h0 + r % nh) -> hi and lo halves in shared memory;
// rows n_rows .. kRows - 1 are zero. Visible after the caller's next barrier.
template <int HD, int kRows>
__device__ __forceinline__ void stage_q(const AttentionArgs& a, int t0, int h0, int nh, int n_rows, __half* qh_s,
                                        __half* ql_s) {
  constexpr int kRow = row_halves<HD>(), kVec = HD / 4;
  const bool vec = (reinterpret_cast<uintptr_t>(a.q) & 15) == 0 && a.q_stride % 4 == 0;
  for (int i = static_cast<int>(threadIdx.x); i < kRows * kVec; i += kThreads) {
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

// Positions of this thread's fragment rows (mt, r) = row0 + 16 mt + gid + 8 r (padding rows: -1),
// and the warp's largest position and smallest first key (INT_MAX without rows).
template <int kMT>
__device__ __forceinline__ void fragment_positions(const DevicePlan& P, int t0, int nh, int n_rows, int row0, int gid,
                                                   int window, int (&pos)[kMT][2], int& w_max_pos, int& w_min_first) {
  w_max_pos = -1;
  int w_min_pos = INT_MAX;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + mt * 16 + gid + 8 * r;
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
  w_min_first = w_max_pos < 0 ? INT_MAX : first_key(w_min_pos, window);
}

// The block's key range over tokens [t0, t0 + nt): its largest position and the K/V tiles
// [kt_begin, kt_end) that cover its contexts (every warp reduces the same).
__device__ __forceinline__ void block_key_range(const DevicePlan& P, int t0, int nt, int window, int lane,
                                                int& max_pos, int& kt_begin, int& kt_end) {
  max_pos = 0;
  int min_first = INT_MAX;
  for (int tt = lane; tt < nt; tt += 32) {
    const int p = P.positions[t0 + tt];
    max_pos = max(max_pos, p);
    min_first = min(min_first, first_key(p, window));
  }
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    max_pos = max(max_pos, __shfl_xor_sync(kFullMask, max_pos, off));
    min_first = min(min_first, __shfl_xor_sync(kFullMask, min_first, off));
  }
  kt_begin = min_first / kKeys;
  kt_end = max_pos / kKeys + 1;
}

// Starts copying K/V tile kt (kParts) through the sequence's block table.
template <int HD, int kParts>
__device__ __forceinline__ void load_tile(const AttentionArgs& a, const int32_t* blocks, int64_t kv_col, int kt,
                                          int max_pos, __half* k_dst, __half* v_dst) {
  const int bt = a.block_tokens;
  if ((bt & (bt - 1)) == 0) {
    load_kv_tile<HD, kThreads, kKeys, kParts>(a, blocks, ShiftBlocks{__ffs(bt) - 1, bt - 1}, kv_col, kt * kKeys,
                                              max_pos, k_dst, v_dst);
  } else {
    load_kv_tile<HD, kThreads, kKeys, kParts>(a, blocks, DivBlocks{bt}, kv_col, kt * kKeys, max_pos, k_dst, v_dst);
  }
}

// S = q_hi K^T + q_lo K^T (per head_dim slice of 16: hi, then lo) for the m tiles at row0 and a
// chunk's 64 keys at k_s; m tiles from n_mt on stay 0 (padding).
template <int HD, int kMT>
__device__ __forceinline__ void chunk_scores(const __half* qh_s, const __half* ql_s, int row0, int n_mt,
                                             const __half* k_s, int mat, int mrow, float (&s)[kMT][kKeyTiles][4]) {
  constexpr int kRow = row_halves<HD>();
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int n = 0; n < kKeyTiles; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
  }
#pragma unroll
  for (int ks = 0; ks < HD / 16; ++ks) {
    uint32_t qh[kMT][4], ql[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      const int off = (row0 + mt * 16 + (mat & 1) * 8 + mrow) * kRow + ks * 16 + (mat >> 1) * 8;
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
}

// Softcap (into the raw scale's log2 domain), the mask outside [first(p), p] and each row's raw
// maximum over the chunk (the quad's, xor 1 then xor 2).
template <int kMT>
__device__ __forceinline__ void chunk_mask_max(float (&s)[kMT][kKeyTiles][4], const int (&pos)[kMT][2],
                                               const AttentionArgs& a, int j_base, int tig, float (&mx)[kMT][2]) {
  const bool softcap = a.softcap > 0.0f;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int p = pos[mt][r], f = first_key(p, a.sliding_window);
      float m = -INFINITY;
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& v = s[mt][n][2 * r + e];
          if (softcap) v = a.softcap * tanhf(v * a.scale / a.softcap) * kLog2e;
          const int j = j_base + n * 8 + tig * 2 + e;
          if (j > p || j < f) v = -INFINITY;
          m = fmaxf(m, v);
        }
      }
      m = fmaxf(m, __shfl_xor_sync(kFullMask, m, 1));
      mx[mt][r] = fmaxf(m, __shfl_xor_sync(kFullMask, m, 2));
    }
  }
}

// One row's online-softmax step: m' = max(m, mx * s_mul); m_use is the exponent's offset (0 while
// nothing is valid); returns alpha (1 when the maximum did not move).
__device__ __forceinline__ float softmax_step(float& m, float mx, float s_mul, float& m_use) {
  const float m_new = fmaxf(m, mx * s_mul);
  m_use = m_new == -INFINITY ? 0.0f : m_new;
  const float alpha = m_new == m ? 1.0f : exp2_approx(m - m_use);
  m = m_new;
  return alpha;
}

// p = ex2(s * s_mul - m_use) in place for row (mt, r); returns the lane's sum of them (n order).
template <int kMT>
__device__ __forceinline__ float chunk_exp(float (&s)[kMT][kKeyTiles][4], int mt, int r, float s_mul, float m_use) {
  float sum = 0.0f;
#pragma unroll
  for (int n = 0; n < kKeyTiles; ++n) {
    const float p0 = exp2_approx(fmaf(s[mt][n][2 * r], s_mul, -m_use));
    const float p1 = exp2_approx(fmaf(s[mt][n][2 * r + 1], s_mul, -m_use));
    s[mt][n][2 * r] = p0;
    s[mt][n][2 * r + 1] = p1;
    sum += p0 + p1;
  }
  return sum;
}

// The A fragments (hi, lo) of keys [16 kk, 16 kk + 16) of m tile mt: two adjacent key octets'
// accumulators.
template <int kMT>
__device__ __forceinline__ void pack_p(const float (&s)[kMT][kKeyTiles][4], int mt, int kk, uint32_t (&ph)[4],
                                       uint32_t (&pl)[4]) {
  split_pack(s[mt][2 * kk][0], s[mt][2 * kk][1], ph[0], pl[0]);
  split_pack(s[mt][2 * kk][2], s[mt][2 * kk][3], ph[1], pl[1]);
  split_pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1], ph[2], pl[2]);
  split_pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3], ph[3], pl[3]);
}

// O *= alpha per row; skipped when no row of the warp moved (multiplying by 1 changes nothing).
template <int kMT, int kDT>
__device__ __forceinline__ void rescale(float (&o)[kMT][kDT][4], const float (&alpha)[kMT][2]) {
  bool moved = false;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) moved = moved || alpha[mt][0] != 1.0f || alpha[mt][1] != 1.0f;
  if (!__any_sync(kFullMask, moved)) return;
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

// O += P_hi V, then + P_lo V, for keys [16 kk, 16 kk + 16) and output columns dim0 + [0, 8 kDT).
template <int HD, int kMT, int kDT>
__device__ __forceinline__ void pv_step(float (&o)[kMT][kDT][4], const uint32_t (&ph)[kMT][4],
                                        const uint32_t (&pl)[kMT][4], const __half* v_s, int kk, int dim0, int n_mt,
                                        int mat, int mrow) {
  constexpr int kRow = row_halves<HD>();
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

// A row's span sum: the quad's lane sums, xor 1 then xor 2 (the same value in all 4 lanes).
__device__ __forceinline__ float quad_sum(float l) {
  l += __shfl_xor_sync(kFullMask, l, 1);
  l += __shfl_xor_sync(kFullMask, l, 2);
  return l;
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

// ---- Fused mode: a block of 4 warps x 16 rows walks its keys tile by tile, each warp folding
// its rows' span partials into the result as the spans end.
template <int HD>
__global__ void __launch_bounds__(kThreads) attention_mma_fused_kernel(AttentionArgs a) {
  pdl_enter();
  using C = FusedShape<HD>;
  constexpr int kRow = C::kRow, kDT = HD / 8;
  extern __shared__ __align__(16) unsigned char sm_raw[];
  __half* qh_s = reinterpret_cast<__half*>(sm_raw);  // [kFusedRows][kRow] q_hi
  __half* ql_s = qh_s + kFusedRows * kRow;           // [kFusedRows][kRow] q_lo
  __half* kv_s = ql_s + kFusedRows * kRow;           // kFusedStages x (K [kKeys][kRow], V [kKeys][kRow])
  const DevicePlan& P = a.plan;
  TcTileWork w;
  if (!tc_tile_work(fused_map(a), P, static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y), w)) return;
  const int kv_head = w.kv_head, h0 = w.h0, nh = w.nh, t0 = w.t0, nt = w.nt;
  const int n_rows = nt * nh;
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int gid = lane >> 2, tig = lane & 3, mat = lane >> 3, mrow = lane & 7;

  stage_q<HD, kFusedRows>(a, t0, h0, nh, n_rows, qh_s, ql_s);
  int pos[1][2], w_max_pos, w_min_first, max_pos, kt_begin, kt_end;
  fragment_positions<1>(P, t0, nh, n_rows, warp * 16, gid, a.sliding_window, pos, w_max_pos, w_min_first);
  block_key_range(P, t0, nt, a.sliding_window, lane, max_pos, kt_begin, kt_end);
  const int32_t* blocks = P.block_ids + P.block_offsets[P.seq_index[t0]];
  const int64_t kv_col = int64_t{kv_head} * HD;
  const float s_mul = a.softcap > 0.0f ? 1.0f : a.scale * kLog2e;  // raw score -> log2 domain, in the exponent

  // The span partial being formed and the result its spans fold into.
  float o[1][kDT][4], m_run[2], l_run[2];
  float res_a[kDT][4], res_m[2], res_l[2];
  auto reset_span = [&]() {
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) o[0][dt][0] = o[0][dt][1] = o[0][dt][2] = o[0][dt][3] = 0.0f;
    m_run[0] = m_run[1] = -INFINITY;
    l_run[0] = l_run[1] = 0.0f;
  };
  reset_span();
#pragma unroll
  for (int dt = 0; dt < kDT; ++dt) res_a[dt][0] = res_a[dt][1] = res_a[dt][2] = res_a[dt][3] = 0.0f;
  res_m[0] = res_m[1] = -INFINITY;
  res_l[0] = res_l[1] = 0.0f;

  if (kt_begin < kt_end) load_tile<HD, kLoadK | kLoadV>(a, blocks, kv_col, kt_begin, max_pos, kv_s, kv_s + kKeys * kRow);
  cp_async_commit();
  for (int kt = kt_begin; kt < kt_end; ++kt) {
    const int it = kt - kt_begin;
    cp_async_wait<0>();
    __syncthreads();  // tile kt has landed for every thread, and every warp is done with tile kt - 1
    if (kt + 1 < kt_end) {
      __half* next = kv_s + ((it + 1) % kFusedStages) * C::kStage;
      load_tile<HD, kLoadK | kLoadV>(a, blocks, kv_col, kt + 1, max_pos, next, next + kKeys * kRow);
    }
    cp_async_commit();
    const __half* k_s = kv_s + (it % kFusedStages) * C::kStage;
    const __half* v_s = k_s + kKeys * kRow;
    const int j_base = kt * kKeys;
    // A chunk past every row of the warp (causal) or before all of them (window) would only add
    // exact no-ops: skipped.
    if (j_base <= w_max_pos && j_base + kKeys - 1 >= w_min_first) {
      float s[1][kKeyTiles][4], mx[1][2], alpha[1][2];
      chunk_scores<HD, 1>(qh_s, ql_s, warp * 16, 1, k_s, mat, mrow, s);
      chunk_mask_max<1>(s, pos, a, j_base, tig, mx);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float m_use;
        alpha[0][r] = softmax_step(m_run[r], mx[0][r], s_mul, m_use);
        l_run[r] = fmaf(l_run[r], alpha[0][r], chunk_exp<1>(s, 0, r, s_mul, m_use));
      }
      rescale<1, kDT>(o, alpha);
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        uint32_t ph[1][4], pl[1][4];
        pack_p<1>(s, 0, kk, ph[0], pl[0]);
        pv_step<HD, 1, kDT>(o, ph, pl, v_s, kk, 0, 1, mat, mrow);
      }
    }
    // The span ends with this tile (or the walk does): fold its partial into the result.
    if (kt % kChunks == kChunks - 1 || kt == kt_end - 1) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float l = quad_sum(l_run[r]);
        if (m_run[r] != -INFINITY) {
          const FoldScales f = fold_scales(res_m[r], m_run[r]);
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
  cp_async_wait<0>();  // no copy may still target shared memory when the block exits
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

// ---- Split mode: a block per ((tile, span) item, KV head, head slice); its up to 32 rows are
// shared by the 4 warps. The span's chunks are independent until the softmax: warp c forms chunk
// c's scores, row maxima, p and P fragments (so the block's K loads and score products are spread
// over the warps, all in flight at once); the running maxima follow from the chunk maxima in
// chunk order, and then every warp accumulates the chunks' P V in chunk order for its quarter of
// head_dim. Each step is the fused kernel's expression on the same operands, so the bits agree.
template <int HD, int kMT, int kVStages>
__global__ void __launch_bounds__(kThreads) attention_mma_span_kernel(AttentionArgs a) {
  pdl_enter();
  using C = SpanShape<HD, kMT, kVStages>;
  constexpr int kRow = C::kRow, kDT = C::kDT, kTile = C::kTile, kRows = C::kRows;
  extern __shared__ __align__(16) unsigned char sm_raw[];
  __half* qh_s = reinterpret_cast<__half*>(sm_raw);  // [kRows][kRow] q_hi
  __half* ql_s = qh_s + kRows * kRow;                // [kRows][kRow] q_lo
  __half* k_s = ql_s + kRows * kRow;                 // [kChunks][kTile]: K, then the chunk's P fragments
  __half* v_s = k_s + kChunks * kTile;               // [kVStages][kTile]
  float* mx_s = reinterpret_cast<float*>(v_s + kVStages * kTile);  // [kChunks][kRows] raw row maxima
  float* sum_s = mx_s + kChunks * kRows;                           // [kChunks][kMT][2][32] lane sums
  const DevicePlan& P = a.plan;
  const int group = a.n_heads / a.n_kv_heads;
  const int n_slices = split_slices(a), hpb = (group + n_slices - 1) / n_slices;
  const int slice = static_cast<int>(blockIdx.y) % n_slices;
  const int kv_head = static_cast<int>(blockIdx.y) / n_slices;
  const int h0 = kv_head * group + slice * hpb;
  const int nh = min(hpb, group - slice * hpb);
  const int tile = P.split_tile[blockIdx.x], span = P.split_span[blockIdx.x];
  const int t0 = P.tile_token_begin[tile], nt = P.tile_n_tokens[tile];
  const int n_rows = nt * nh;
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int gid = lane >> 2, tig = lane & 3, mat = lane >> 3, mrow = lane & 7;
  const int n_mt = (n_rows + 15) / 16;

  stage_q<HD, kRows>(a, t0, h0, nh, n_rows, qh_s, ql_s);
  int pos[kMT][2], w_max_pos, w_min_first, max_pos, kt_begin, kt_end;
  fragment_positions<kMT>(P, t0, nh, n_rows, 0, gid, a.sliding_window, pos, w_max_pos, w_min_first);
  block_key_range(P, t0, nt, a.sliding_window, lane, max_pos, kt_begin, kt_end);
  kt_begin = max(kt_begin, span * kChunks);
  kt_end = min(kt_end, (span + 1) * kChunks);
  const int n_chunks = kt_end - kt_begin;  // <= kChunks (may be <= 0: a window past the span)
  // Chunk c (tile kt_begin + c) adds something to some row (else it is an exact no-op: skipped).
  auto live = [&](int c) {
    const int j_base = (kt_begin + c) * kKeys;
    return c < n_chunks && j_base <= w_max_pos && j_base + kKeys - 1 >= w_min_first;
  };
  const int32_t* blocks = P.block_ids + P.block_offsets[P.seq_index[t0]];
  const int64_t kv_col = int64_t{kv_head} * HD;
  const float s_mul = a.softcap > 0.0f ? 1.0f : a.scale * kLog2e;

  // Copies: every K tile (one group), then the first kVStages V tiles (a group each).
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    if (c < n_chunks) load_tile<HD, kLoadK>(a, blocks, kv_col, kt_begin + c, max_pos, k_s + c * kTile, nullptr);
  }
  cp_async_commit();
#pragma unroll
  for (int c = 0; c < kVStages; ++c) {
    if (c < n_chunks) load_tile<HD, kLoadV>(a, blocks, kv_col, kt_begin + c, max_pos, nullptr, v_s + c * kTile);
    cp_async_commit();
  }
  cp_async_wait<kVStages>();
  __syncthreads();  // K and q are in place for every warp

  // Warp c: chunk c's scores and row maxima.
  float s[kMT][kKeyTiles][4];
  const bool mine = live(warp);
  if (mine) {
    float mx[kMT][2];
    chunk_scores<HD, kMT>(qh_s, ql_s, 0, n_mt, k_s + warp * kTile, mat, mrow, s);
    chunk_mask_max<kMT>(s, pos, a, (kt_begin + warp) * kKeys, tig, mx);
    if (tig == 0) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        mx_s[warp * kRows + mt * 16 + gid] = mx[mt][0];
        mx_s[warp * kRows + mt * 16 + gid + 8] = mx[mt][1];
      }
    }
  }
  __syncthreads();  // every chunk's maxima are in place

  // The running maxima in chunk order (every warp the same), then warp c's p, lane sums and P
  // fragments (over its K tile: only this warp read it).
  float m_run[kMT][2], alpha[kChunks][kMT][2], m_use_mine[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    m_run[mt][0] = m_run[mt][1] = -INFINITY;
    m_use_mine[mt][0] = m_use_mine[mt][1] = 0.0f;
  }
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const bool lc = live(c);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        alpha[c][mt][r] = 1.0f;
        if (!lc) continue;
        float m_use;
        alpha[c][mt][r] = softmax_step(m_run[mt][r], mx_s[c * kRows + mt * 16 + gid + 8 * r], s_mul, m_use);
        if (c == warp) m_use_mine[mt][r] = m_use;
      }
    }
  }
  if (mine) {
    uint32_t* p_s = reinterpret_cast<uint32_t*>(k_s + warp * kTile);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        sum_s[((warp * kMT + mt) * 2 + r) * 32 + lane] = chunk_exp<kMT>(s, mt, r, s_mul, m_use_mine[mt][r]);
      }
    }
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        uint32_t ph[4], pl[4];
        pack_p<kMT>(s, mt, kk, ph, pl);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          p_s[((kk * kMT + mt) * 8 + i) * 32 + lane] = ph[i];
          p_s[((kk * kMT + mt) * 8 + 4 + i) * 32 + lane] = pl[i];
        }
      }
    }
  }
  __syncthreads();  // every chunk's P fragments and lane sums are in place

  // O over the chunks in order: this warp's quarter of head_dim.
  const int dim0 = warp * (HD / kWarps);
  float o[kMT][kDT][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.0f;
  }
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    cp_async_wait<kVStages - 1>();  // outstanding: V tiles c .. c + kVStages - 1 (groups, some empty)
    __syncthreads();                // V tile c has landed for every thread
    if (live(c)) {
      rescale<kMT, kDT>(o, alpha[c]);
      const uint32_t* p_s = reinterpret_cast<const uint32_t*>(k_s + c * kTile);
      const __half* vt = v_s + (c % kVStages) * kTile;
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        uint32_t ph[kMT][4], pl[kMT][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            ph[mt][i] = p_s[((kk * kMT + mt) * 8 + i) * 32 + lane];
            pl[mt][i] = p_s[((kk * kMT + mt) * 8 + 4 + i) * 32 + lane];
          }
        }
        pv_step<HD, kMT, kDT>(o, ph, pl, vt, kk, dim0, n_mt, mat, mrow);
      }
    }
    if constexpr (kVStages < kChunks) {
      if (c + kVStages < kChunks) {
        __syncthreads();  // every warp is done with this V stage
        if (c + kVStages < n_chunks) {
          load_tile<HD, kLoadV>(a, blocks, kv_col, kt_begin + c + kVStages, max_pos, nullptr, v_s + (c % kVStages) * kTile);
        }
      }
    }
    cp_async_commit();
  }
  cp_async_wait<0>();  // no copy may still target shared memory when the block exits

  // The span partial of every row whose context reaches this span (m = -inf: nothing valid):
  // l = the lanes' chains l = l * alpha + sum over the live chunks, quad-summed.
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l_lane = 0.0f;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        if (live(c)) l_lane = fmaf(l_lane, alpha[c][mt][r], sum_s[((c * kMT + mt) * 2 + r) * 32 + lane]);
      }
      const float l = quad_sum(l_lane);
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
}

// Split mode: folds a (token, head)'s span partials in span order, skipping empty ones (the
// fused kernel's fold). One warp per (token, head, 32 dimensions); the records of the next batch
// of spans load while this batch folds (a 32k context has 128 spans).
constexpr int kMergeDims = 32;
template <int HD>
__global__ void __launch_bounds__(kMergeDims) attention_mma_merge_kernel(AttentionArgs a) {
  pdl_enter();
  const int t = static_cast<int>(blockIdx.x), h = static_cast<int>(blockIdx.y);
  const int d = static_cast<int>(blockIdx.z) * kMergeDims + static_cast<int>(threadIdx.x);
  const DevicePlan& P = a.plan;
  const int n_spans = P.positions[t] / kAttnSpanTokens + 1;
  const float* first = a.partials + (int64_t{P.token_partial_begin[t]} * a.n_heads + h) * (HD + 2);
  const int64_t span_stride = int64_t{a.n_heads} * (HD + 2);
  constexpr int kBatch = 16;
  auto load = [&](int s0, float (&m)[kBatch], float (&l)[kBatch], float (&o)[kBatch]) {
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      m[b] = -INFINITY;
      l[b] = o[b] = 0.0f;
      if (s0 + b < n_spans) {
        const float* rec = first + (s0 + b) * span_stride;
        m[b] = rec[0];
        l[b] = rec[1];
        o[b] = rec[2 + d];
      }
    }
  };
  float M = -INFINITY, L = 0.0f, A = 0.0f;
  auto fold_batch = [&](const float (&m)[kBatch], const float (&l)[kBatch], const float (&o)[kBatch]) {
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (m[b] == -INFINITY) continue;
      const FoldScales f = fold_scales(M, m[b]);
      L = fold(L, l[b], f);
      A = fold(A, o[b], f);
    }
  };
  float m0[kBatch], l0[kBatch], o0[kBatch], m1[kBatch], l1[kBatch], o1[kBatch];
  load(0, m0, l0, o0);
  for (int s0 = 0; s0 < n_spans; s0 += 2 * kBatch) {
    load(s0 + kBatch, m1, l1, o1);
    fold_batch(m0, l0, o0);
    load(s0 + 2 * kBatch, m0, l0, o0);
    fold_batch(m1, l1, o1);
  }
  a.out[int64_t{t} * a.out_stride + int64_t{h} * HD + d] = __fdiv_rn(A, L);
}

template <int HD, int kMT>
void launch_span(const AttentionArgs& a, dim3 grid, const LaunchEnv& env) {
  if (a.tc_variant == 4) {
    launch_kernel(env, attention_mma_span_kernel<HD, kMT, 4>, grid, dim3(kThreads), SpanShape<HD, kMT, 4>::kSmem, a);
  } else {
    launch_kernel(env, attention_mma_span_kernel<HD, kMT, 2>, grid, dim3(kThreads), SpanShape<HD, kMT, 2>::kSmem, a);
  }
}

template <int HD>
void launch_hd(const AttentionArgs& a, const LaunchEnv& env) {
  if (a.tc == kAttnMmaSplit) {
    const int n_slices = split_slices(a), group = a.n_heads / a.n_kv_heads;
    const dim3 grid(static_cast<unsigned>(a.plan.n_split_items), static_cast<unsigned>(a.n_kv_heads * n_slices));
    if (a.plan.max_tile_tokens * ((group + n_slices - 1) / n_slices) <= 16) {
      launch_span<HD, 1>(a, grid, env);
    } else {
      launch_span<HD, 2>(a, grid, env);
    }
    launch_kernel(env, attention_mma_merge_kernel<HD>,
                  dim3(static_cast<unsigned>(a.plan.n_tokens), static_cast<unsigned>(a.n_heads), HD / kMergeDims),
                  dim3(kMergeDims), 0, a);
    return;
  }
  const TcTileMap map = fused_map(a);
  const dim3 grid(static_cast<unsigned>(a.plan.n_tc_tiles * map.n_sub), static_cast<unsigned>(a.n_kv_heads * map.n_slices));
  launch_kernel(env, attention_mma_fused_kernel<HD>, grid, dim3(kThreads), FusedShape<HD>::kSmem, a);
}

template <typename Kernel>
bool allow_smem(Kernel kernel, size_t smem, int max_smem_bytes) {
  if (smem > static_cast<size_t>(max_smem_bytes)) return false;
  TERN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  return true;
}

template <int HD>
bool init_hd(int max_smem_bytes) {
  bool ok = allow_smem(attention_mma_fused_kernel<HD>, FusedShape<HD>::kSmem, max_smem_bytes);
  ok = allow_smem(attention_mma_span_kernel<HD, 1, 2>, SpanShape<HD, 1, 2>::kSmem, max_smem_bytes) && ok;
  ok = allow_smem(attention_mma_span_kernel<HD, 1, 4>, SpanShape<HD, 1, 4>::kSmem, max_smem_bytes) && ok;
  ok = allow_smem(attention_mma_span_kernel<HD, 2, 2>, SpanShape<HD, 2, 2>::kSmem, max_smem_bytes) && ok;
  ok = allow_smem(attention_mma_span_kernel<HD, 2, 4>, SpanShape<HD, 2, 4>::kSmem, max_smem_bytes) && ok;
  return ok;
}

}  // namespace

bool attention_mma_supports(const AttentionArgs& a) { return tc_tile_shape_supported(a); }

bool attention_mma_split(const AttentionArgs& a, int n_sm) {
  const TcTileMap map = fused_map(a);
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

int attention_mma_v_stages(const AttentionArgs& a, int n_sm) {
  if (a.head_dim == 64) return 4;  // the whole span fits two blocks per SM
  const int64_t blocks = int64_t{a.plan.n_split_items} * a.n_kv_heads * split_slices(a);
  return blocks <= n_sm ? 4 : 2;
}

bool init_attention_mma(int max_smem_bytes) {
  const bool ok64 = init_hd<64>(max_smem_bytes);
  const bool ok128 = init_hd<128>(max_smem_bytes);
  return ok64 && ok128;
}

}  // namespace tern::cuda
