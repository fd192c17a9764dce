// The batch-invariant tensor-core attention (attention_mma.h): the per-chunk steps, the fused
// kernel (prefill tiles) and the split mode's chunk kernel and merge.
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
constexpr int kKeys = kTcKeys;           // keys per K/V tile = one softmax chunk
constexpr int kKeyTiles = kKeys / 8;     // a chunk's 8-key mma n tiles
constexpr int kKeySlices = kKeys / 16;   // a chunk's 16-key mma k slices (P V)
constexpr int kChunks = kAttnSpanChunks;  // chunks per span
constexpr int kFusedStages = 2;          // fused: K/V tiles in flight (the next copies during this one)
constexpr int kFusedRows = 16 * kWarps;  // fused: a warp's 16 rows each
constexpr int kFusedMaxHeads = 8;        // fused: heads of a GQA group per block (larger ones sliced)
constexpr int kSplitHeads = 4;           // split: heads of a GQA group per block
constexpr int kChunkThreads = 32;        // split: one warp per chunk block
// Split: the rows of a block, in kMT m tiles of 16 (two for up to 8 tokens x 4 heads; one where
// the plan's tiles x heads fit 16, e.g. a decode step's one token per sequence).
static_assert(kAttnTileTokens * kSplitHeads <= 32, "a split block's rows must fit two m tiles");
static_assert(kAttnSpanTokens == kChunks * kKeys, "spans are whole K/V tiles");

template <int HD>
constexpr int row_halves() {
  return HD + 8;  // halves per shared row: 16 bytes of padding (ldmatrix without bank conflicts)
}

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

template <int HD>
struct FusedShape {
  static constexpr int kRow = row_halves<HD>();
  static constexpr int kStage = 2 * kKeys * kRow;  // K rows, then V rows
  static constexpr size_t kSmem = (size_t{2} * kFusedRows * kRow + size_t{kFusedStages} * kStage) * sizeof(__half);
};

// The chunk kernel's shared memory: q hi and lo rows, the chunk's K and V tiles.
template <int HD, int kMT>
struct ChunkShape {
  static constexpr int kRows = 16 * kMT;
  static constexpr int kRow = row_halves<HD>();
  static constexpr size_t kSmem = (size_t{2} * kRows * kRow + size_t{2} * kKeys * kRow) * sizeof(__half);
};
// Hopper holds 228 KiB of shared memory per SM, 1 KiB of it reserved per block: five decode
// blocks of head_dim 128 per SM (each a warp with 34 KiB of K/V in flight).
static_assert(5 * (ChunkShape<128, 1>::kSmem + 1024) <= 228 * 1024, "five decode chunk blocks per Hopper SM");

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
template <int HD, int kRows, int kNT>
__device__ __forceinline__ void stage_q(const AttentionArgs& a, int t0, int h0, int nh, int n_rows, __half* qh_s,
                                        __half* ql_s) {
  constexpr int kRow = row_halves<HD>(), kVec = HD / 4;
  const bool vec = (reinterpret_cast<uintptr_t>(a.q) & 15) == 0 && a.q_stride % 4 == 0;
  for (int i = static_cast<int>(threadIdx.x); i < kRows * kVec; i += kNT) {
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

// Starts copying K/V tile kt (kParts) through the sequence's block table with kNT threads
// (load_kv_tile: rows past max_pos zero-filled, skip_row left alone).
template <int HD, int kParts, int kNT>
__device__ __forceinline__ void load_tile(const AttentionArgs& a, const int32_t* blocks, int64_t kv_col, int kt,
                                          int max_pos, __half* k_dst, __half* v_dst, int skip_row = -1) {
  const int bt = a.block_tokens;
  if ((bt & (bt - 1)) == 0) {
    load_kv_tile<HD, kNT, kKeys, kParts>(a, blocks, ShiftBlocks{__ffs(bt) - 1, bt - 1}, kv_col, kt * kKeys, max_pos,
                                         k_dst, v_dst, skip_row);
  } else {
    load_kv_tile<HD, kNT, kKeys, kParts>(a, blocks, DivBlocks{bt}, kv_col, kt * kKeys, max_pos, k_dst, v_dst, skip_row);
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

// The P fragments of every 16-key slice (hi and lo).
template <int kMT>
__device__ __forceinline__ void pack_chunk_p(const float (&s)[kMT][kKeyTiles][4], uint32_t (&ph)[kKeySlices][kMT][4],
                                             uint32_t (&pl)[kKeySlices][kMT][4]) {
#pragma unroll
  for (int kk = 0; kk < kKeySlices; ++kk) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) pack_p<kMT>(s, mt, kk, ph[kk][mt], pl[kk][mt]);
  }
}

// A chunk's O columns [16 dp, 16 dp + 16) (two 8-wide tiles) of the m tiles below n_mt: from 0,
// per 16-key slice in order, += P_hi V, then += P_lo V.
template <int HD, int kMT>
__device__ __forceinline__ void chunk_values(const uint32_t (&ph)[kKeySlices][kMT][4],
                                             const uint32_t (&pl)[kKeySlices][kMT][4], const __half* v_s, int dp,
                                             int n_mt, int mat, int mrow, float (&oc)[kMT][2][4]) {
  constexpr int kRow = row_halves<HD>();
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) oc[mt][0][i] = oc[mt][1][i] = 0.0f;
  }
#pragma unroll
  for (int kk = 0; kk < kKeySlices; ++kk) {
    uint32_t b[4];
    ldmatrix_x4_trans(v_s + (kk * 16 + (mat & 1) * 8 + mrow) * kRow + dp * 16 + (mat >> 1) * 8, b);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      if (mt >= n_mt) continue;
      mma_f16(oc[mt][0], ph[kk][mt], b[0], b[1]);
      mma_f16(oc[mt][0], pl[kk][mt], b[0], b[1]);
      mma_f16(oc[mt][1], ph[kk][mt], b[2], b[3]);
      mma_f16(oc[mt][1], pl[kk][mt], b[2], b[3]);
    }
  }
}

// A row's chunk sum: the quad's lane sums, xor 1 then xor 2 (the same value in all 4 lanes).
__device__ __forceinline__ float quad_sum(float l) {
  l += __shfl_xor_sync(kFullMask, l, 1);
  l += __shfl_xor_sync(kFullMask, l, 2);
  return l;
}

// A chunk's softmax for every row (mt, r): m = its maximum in the log2 domain (-inf: no valid
// key in the chunk), p = ex2(s * s_mul - m) in place (offset 0 where m = -inf: every p is 0),
// l = the quad sum of the lanes' p sums.
template <int kMT>
__device__ __forceinline__ void chunk_softmax(float (&s)[kMT][kKeyTiles][4], const float (&mx)[kMT][2], float s_mul,
                                              float (&m)[kMT][2], float (&l)[kMT][2]) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      m[mt][r] = mx[mt][r] * s_mul;
      l[mt][r] = quad_sum(chunk_exp<kMT>(s, mt, r, s_mul, m[mt][r] == -INFINITY ? 0.0f : m[mt][r]));
    }
  }
}

// Folds a partial (m finite, l, o) into an accumulator (M, L, A): the contract's expressions for
// chunks into a span and spans into the result, shared by the fused kernel and the merge.
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
// its rows' chunk partials into the span partial, and that into the result as the span ends.
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
  const FusedMap map(a);
  const int slice = static_cast<int>(blockIdx.y) % map.n_slices;
  const int kv_head = static_cast<int>(blockIdx.y) / map.n_slices;
  const int h0 = kv_head * map.group + slice * map.heads_per_block;
  const int nh = min(map.heads_per_block, map.group - slice * map.heads_per_block);
  // Longest contexts (the last tiles, their last sub-tiles) first: shortens the causal tail.
  const int tile = P.n_tc_tiles - 1 - static_cast<int>(blockIdx.x) / map.n_sub;
  const int sub = map.n_sub - 1 - static_cast<int>(blockIdx.x) % map.n_sub;
  const int tile_nt = P.tc_tile_n_tokens[tile];
  if (sub * map.tokens_per_block >= tile_nt) return;  // the tile is shorter than this sub-tile
  const int t0 = P.tc_tile_token_begin[tile] + sub * map.tokens_per_block;
  const int nt = min(map.tokens_per_block, tile_nt - sub * map.tokens_per_block);
  const int n_rows = nt * nh;
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int gid = lane >> 2, tig = lane & 3, mat = lane >> 3, mrow = lane & 7;

  stage_q<HD, kFusedRows, kThreads>(a, t0, h0, nh, n_rows, qh_s, ql_s);
  int pos[1][2], w_max_pos, w_min_first, max_pos, kt_begin, kt_end;
  fragment_positions<1>(P, t0, nh, n_rows, warp * 16, gid, a.sliding_window, pos, w_max_pos, w_min_first);
  block_key_range(P, t0, nt, a.sliding_window, lane, max_pos, kt_begin, kt_end);
  const int32_t* blocks = P.block_ids + P.block_offsets[P.seq_index[t0]];
  const int64_t kv_col = int64_t{kv_head} * HD;
  const float s_mul = a.softcap > 0.0f ? 1.0f : a.scale * kLog2e;  // raw score -> log2 domain, in the exponent

  // The span partial being formed and the result its spans fold into.
  float o[kDT][4], m_run[2], l_run[2];
  float res_a[kDT][4], res_m[2], res_l[2];
  auto reset_span = [&]() {
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
    m_run[0] = m_run[1] = -INFINITY;
    l_run[0] = l_run[1] = 0.0f;
  };
  reset_span();
#pragma unroll
  for (int dt = 0; dt < kDT; ++dt) res_a[dt][0] = res_a[dt][1] = res_a[dt][2] = res_a[dt][3] = 0.0f;
  res_m[0] = res_m[1] = -INFINITY;
  res_l[0] = res_l[1] = 0.0f;

  if (kt_begin < kt_end) load_tile<HD, kLoadK | kLoadV, kThreads>(a, blocks, kv_col, kt_begin, max_pos, kv_s, kv_s + kKeys * kRow);
  cp_async_commit();
  for (int kt = kt_begin; kt < kt_end; ++kt) {
    const int it = kt - kt_begin;
    cp_async_wait<0>();
    __syncthreads();  // tile kt has landed for every thread, and every warp is done with tile kt - 1
    if (kt + 1 < kt_end) {
      __half* next = kv_s + ((it + 1) % kFusedStages) * C::kStage;
      load_tile<HD, kLoadK | kLoadV, kThreads>(a, blocks, kv_col, kt + 1, max_pos, next, next + kKeys * kRow);
    }
    cp_async_commit();
    const __half* k_s = kv_s + (it % kFusedStages) * C::kStage;
    const __half* v_s = k_s + kKeys * kRow;
    const int j_base = kt * kKeys;
    // A chunk past every row of the warp (causal) or before all of them (window) would only add
    // exact no-ops: skipped.
    if (j_base <= w_max_pos && j_base + kKeys - 1 >= w_min_first) {
      float s[1][kKeyTiles][4], mx[1][2], mc[1][2], lc[1][2];
      chunk_scores<HD, 1>(qh_s, ql_s, warp * 16, 1, k_s, mat, mrow, s);
      chunk_mask_max<1>(s, pos, a, j_base, tig, mx);
      chunk_softmax<1>(s, mx, s_mul, mc, lc);
      // The chunk partial folds into the span's (a row without keys here: skipped).
      bool take[2];
      FoldScales f[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        take[r] = mc[0][r] != -INFINITY;
        f[r] = FoldScales{1.0f, 0.0f};
        if (take[r]) {
          f[r] = fold_scales(m_run[r], mc[0][r]);
          l_run[r] = fold(l_run[r], lc[0][r], f[r]);
        }
      }
      uint32_t ph[kKeySlices][1][4], pl[kKeySlices][1][4];
      pack_chunk_p<1>(s, ph, pl);
#pragma unroll
      for (int dp = 0; dp < HD / 16; ++dp) {
        float oc[1][2][4];
        chunk_values<HD, 1>(ph, pl, v_s, dp, 1, mat, mrow, oc);
#pragma unroll
        for (int dt = 0; dt < 2; ++dt) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            if (!take[r]) continue;
            o[2 * dp + dt][2 * r] = fold(o[2 * dp + dt][2 * r], oc[0][dt][2 * r], f[r]);
            o[2 * dp + dt][2 * r + 1] = fold(o[2 * dp + dt][2 * r + 1], oc[0][dt][2 * r + 1], f[r]);
          }
        }
      }
    }
    // The span ends with this tile (or the walk does): fold its partial into the result.
    if (kt % kChunks == kChunks - 1 || kt == kt_end - 1) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (m_run[r] != -INFINITY) {
          const FoldScales f = fold_scales(res_m[r], m_run[r]);
          res_l[r] = fold(res_l[r], l_run[r], f);
#pragma unroll
          for (int dt = 0; dt < kDT; ++dt) {
            res_a[dt][2 * r] = fold(res_a[dt][2 * r], o[dt][2 * r], f);
            res_a[dt][2 * r + 1] = fold(res_a[dt][2 * r + 1], o[dt][2 * r + 1], f);
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

// ---- Split mode: a block of one warp per ((tile, span) item, chunk, KV head, head slice): the
// chunk's partial of each of its up to 32 rows, stored as a record (attention.cu's chunk-split
// layout: m, l, then O); the merge folds a row's records. The records do not depend on each
// other, so a decode step has a block per 64 positions (128 blocks at 1k for an 8B shape).
// Decode steps (one token per tile, AttentionArgs::early_kv) copy the chunk's K/V rows of
// earlier steps before the PDL wait, so they overlap the previous launch; only the step's own
// row (the token's position) is copied after it.
template <int HD, int kMT>
__global__ void __launch_bounds__(kChunkThreads) attention_mma_chunk_kernel(AttentionArgs a) {
  using C = ChunkShape<HD, kMT>;
  constexpr int kRow = C::kRow, kRows = C::kRows;
  extern __shared__ __align__(16) unsigned char sm_raw[];
  __half* qh_s = reinterpret_cast<__half*>(sm_raw);  // [kRows][kRow] q_hi
  __half* ql_s = qh_s + kRows * kRow;                // [kRows][kRow] q_lo
  __half* k_s = ql_s + kRows * kRow;                 // [kKeys][kRow]
  __half* v_s = k_s + kKeys * kRow;                  // [kKeys][kRow]
  const DevicePlan& P = a.plan;
  const int group = a.n_heads / a.n_kv_heads;
  const int n_slices = split_slices(a), hpb = (group + n_slices - 1) / n_slices;
  const int slice = static_cast<int>(blockIdx.y) % n_slices;
  const int kv_head = static_cast<int>(blockIdx.y) / n_slices;
  const int h0 = kv_head * group + slice * hpb;
  const int nh = min(hpb, group - slice * hpb);
  const int item = static_cast<int>(blockIdx.x) / kChunks, chunk = static_cast<int>(blockIdx.x) % kChunks;
  // The plan is uploaded before the step's first kernel: it may be read ahead of the PDL wait.
  const int tile = P.split_tile[item], span = P.split_span[item];
  const int t0 = P.tile_token_begin[tile], nt = P.tile_n_tokens[tile];
  const int n_rows = nt * nh, n_mt = (n_rows + 15) / 16;
  const int lane = static_cast<int>(threadIdx.x);
  const int gid = lane >> 2, tig = lane & 3, mat = lane >> 3, mrow = lane & 7;
  int pos[kMT][2], max_pos, min_first;
  fragment_positions<kMT>(P, t0, nh, n_rows, 0, gid, a.sliding_window, pos, max_pos, min_first);
  const int kt = span * kChunks + chunk, j_base = kt * kKeys;
  // No row's context meets this chunk: no records (the merge does not read them).
  if (j_base > max_pos || j_base + kKeys - 1 < min_first) return;
  const int32_t* blocks = P.block_ids + P.block_offsets[P.seq_index[t0]];
  const int64_t kv_col = int64_t{kv_head} * HD;
  // A decode step (early_kv): every K/V row of the chunk but the step's own (the tile's one
  // position) was written by an earlier step, and every kernel before the previous one has
  // completed once this one runs (each lets its successor launch only after its own wait): those
  // rows load before the wait. Other steps may attend to several rows of their own: all after it.
  const bool early = a.early_kv != 0;
  const int own = early ? max_pos : -1;
  if (!early) {
    pdl_wait();
    pdl_launch_dependents();
  }
  load_tile<HD, kLoadK | kLoadV, kChunkThreads>(a, blocks, kv_col, kt, max_pos, k_s, v_s, own);
  cp_async_commit();
  if (early) {
    pdl_wait();  // q, the step's own K/V row, and partials a previous merge may still read
    pdl_launch_dependents();
  }
  if (own >= j_base && own < j_base + kKeys) {  // (uniform over the block)
    constexpr int kPieces = HD / 8;
    const int64_t slot = int64_t{blocks[own / a.block_tokens]} * a.block_tokens + own % a.block_tokens;
    if (lane < 2 * kPieces) {
      const int piece = lane % kPieces;
      const bool v = lane >= kPieces;
      const __half* src = static_cast<const __half*>(v ? a.v_cache : a.k_cache) +
                          slot * (v ? a.v_cache_stride : a.k_cache_stride) + kv_col + piece * 8;
      cp_async16((v ? v_s : k_s) + (own - j_base) * kRow + piece * 8, src);
    }
    cp_async_commit();
  }
  stage_q<HD, kRows, kChunkThreads>(a, t0, h0, nh, n_rows, qh_s, ql_s);
  cp_async_wait<0>();
  __syncthreads();  // q, K and V are in place for every lane

  const float s_mul = a.softcap > 0.0f ? 1.0f : a.scale * kLog2e;
  float s[kMT][kKeyTiles][4], mx[kMT][2], mc[kMT][2], lc[kMT][2];
  chunk_scores<HD, kMT>(qh_s, ql_s, 0, n_mt, k_s, mat, mrow, s);
  chunk_mask_max<kMT>(s, pos, a, j_base, tig, mx);
  chunk_softmax<kMT>(s, mx, s_mul, mc, lc);
  uint32_t ph[kKeySlices][kMT][4], pl[kKeySlices][kMT][4];
  pack_chunk_p<kMT>(s, ph, pl);

  // This lane's records: rows whose token reaches this span (a token owns the slots of spans
  // 0 .. position / kAttnSpanTokens); a row whose keys all lie outside the chunk stores m = -inf.
  float* rec[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = mt * 16 + gid + 8 * r;
      rec[mt][r] = nullptr;
      if (row >= n_rows || pos[mt][r] / kAttnSpanTokens < span) continue;
      const int64_t slot = int64_t{P.token_partial_begin[t0 + row / nh]} + span;
      rec[mt][r] = a.partials + ((slot * kChunks + chunk) * a.n_heads + h0 + row % nh) * (HD + 2);
      if (tig == 0) {
        rec[mt][r][0] = mc[mt][r];
        rec[mt][r][1] = lc[mt][r];
      }
    }
  }
#pragma unroll
  for (int dp = 0; dp < HD / 16; ++dp) {
    float oc[kMT][2][4];
    chunk_values<HD, kMT>(ph, pl, v_s, dp, n_mt, mat, mrow, oc);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (rec[mt][r] == nullptr) continue;
#pragma unroll
        for (int dt = 0; dt < 2; ++dt) {
          const int d = dp * 16 + dt * 8 + tig * 2;
          rec[mt][r][2 + d] = oc[mt][dt][2 * r];
          rec[mt][r][2 + d + 1] = oc[mt][dt][2 * r + 1];
        }
      }
    }
  }
}

// Split mode: a (token, head)'s result from its chunk records, in the fused kernel's order: each
// span's partial folds the span's chunks in order, the result folds the spans in order, both
// skipping empty partials (m = -inf). A record is read only where the row's keys [first(p), p]
// meet the chunk (the chunk kernel stores those). A block of HD threads (one per dimension) per
// (token, head): the records of kMergeSpans spans at a time go to shared memory by cp.async,
// kMergeStages windows in flight, while the block folds the oldest (a 32k context has 512
// records per row). kFoldedTrigger: the next kernel (the o projection, whose weight stream would
// compete with these loads) launches once the fold is done, else right after the wait.
constexpr int kMergeSpans = 16;  // spans per window
constexpr int kMergeStages = 3;  // windows in flight
template <int HD>
struct MergeShape {
  static constexpr int kRec = HD + 2;                           // floats per record: m, l, O
  static constexpr int kWindow = kMergeSpans * kChunks * kRec;  // floats per window
  static constexpr size_t kSmem = size_t{kMergeStages} * kWindow * sizeof(float);
};
template <int HD, bool kFoldedTrigger>
__global__ void __launch_bounds__(HD) attention_mma_merge_kernel(AttentionArgs a) {
  using S = MergeShape<HD>;
  constexpr int kRec = S::kRec, kPieces = kRec / 2;  // 8-byte pieces per record
  static_assert(kRec % 2 == 0, "records are whole 8-byte pieces");
  extern __shared__ __align__(16) unsigned char sm_raw[];
  float* win_s = reinterpret_cast<float*>(sm_raw);  // [kMergeStages][kMergeSpans * kChunks][kRec]
  pdl_wait();
  if constexpr (!kFoldedTrigger) pdl_launch_dependents();
  const int t = static_cast<int>(blockIdx.x), h = static_cast<int>(blockIdx.y), d = static_cast<int>(threadIdx.x);
  const DevicePlan& P = a.plan;
  const int pos = P.positions[t], first = first_key(pos, a.sliding_window);
  const int n_windows = (pos / kAttnSpanTokens + kMergeSpans) / kMergeSpans;
  // Chunk kt's record: slot token_partial_begin + kt / kChunks, chunk kt % kChunks.
  const float* rec0 = a.partials + (int64_t{P.token_partial_begin[t]} * kChunks * a.n_heads + h) * kRec;
  const int64_t rec_stride = int64_t{a.n_heads} * kRec;
  auto stored = [&](int kt) {
    const int j = kt * kKeys;
    return j <= pos && j + kKeys - 1 >= first;
  };
  auto issue = [&](int w) {
    float* dst = win_s + (w % kMergeStages) * S::kWindow;
    const int kt0 = w * kMergeSpans * kChunks;
    for (int i = d; i < kMergeSpans * kChunks * kPieces; i += HD) {
      const int r = i / kPieces, piece = i - r * kPieces;
      if (stored(kt0 + r)) cp_async8(dst + r * kRec + piece * 2, rec0 + (kt0 + r) * rec_stride + piece * 2);
    }
  };
#pragma unroll
  for (int w = 0; w < kMergeStages - 1; ++w) {
    if (w < n_windows) issue(w);
    cp_async_commit();
  }
  float M = -INFINITY, L = 0.0f, A = 0.0f;
  for (int w = 0; w < n_windows; ++w) {
    if (w + kMergeStages - 1 < n_windows) issue(w + kMergeStages - 1);  // the stage freed last round
    cp_async_commit();
    cp_async_wait<kMergeStages - 1>();
    __syncthreads();  // window w has landed for every thread
    const float* win = win_s + (w % kMergeStages) * S::kWindow;
    const int kt0 = w * kMergeSpans * kChunks;
#pragma unroll
    for (int sp = 0; sp < kMergeSpans; ++sp) {
      float ms = -INFINITY, ls = 0.0f, os = 0.0f;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const int r = sp * kChunks + c;
        if (!stored(kt0 + r)) continue;
        const float* rec = win + r * kRec;
        const float m = rec[0];
        if (m == -INFINITY) continue;
        const FoldScales f = fold_scales(ms, m);
        ls = fold(ls, rec[1], f);
        os = fold(os, rec[2 + d], f);
      }
      if (ms == -INFINITY) continue;
      const FoldScales f = fold_scales(M, ms);
      L = fold(L, ls, f);
      A = fold(A, os, f);
    }
    __syncthreads();  // every thread is done with this stage before it is refilled
  }
  cp_async_wait<0>();
  if constexpr (kFoldedTrigger) pdl_launch_dependents();
  a.out[int64_t{t} * a.out_stride + int64_t{h} * HD + d] = __fdiv_rn(A, L);
}

template <int HD>
void launch_hd(const AttentionArgs& a, const LaunchEnv& env) {
  if (a.tc == kAttnMmaSplit) {
    const int n_slices = split_slices(a), group = a.n_heads / a.n_kv_heads;
    const dim3 grid(static_cast<unsigned>(a.plan.n_split_items * kChunks), static_cast<unsigned>(a.n_kv_heads * n_slices));
    if (a.plan.max_tile_tokens * ((group + n_slices - 1) / n_slices) <= 16) {
      launch_kernel(env, attention_mma_chunk_kernel<HD, 1>, grid, dim3(kChunkThreads), ChunkShape<HD, 1>::kSmem, a);
    } else {
      launch_kernel(env, attention_mma_chunk_kernel<HD, 2>, grid, dim3(kChunkThreads), ChunkShape<HD, 2>::kSmem, a);
    }
    const dim3 merge_grid(static_cast<unsigned>(a.plan.n_tokens), static_cast<unsigned>(a.n_heads));
    if (a.n_heads * HD >= 2048) {  // as attention_span.cu's merge_trigger
      launch_kernel(env, attention_mma_merge_kernel<HD, true>, merge_grid, dim3(HD), MergeShape<HD>::kSmem, a);
    } else {
      launch_kernel(env, attention_mma_merge_kernel<HD, false>, merge_grid, dim3(HD), MergeShape<HD>::kSmem, a);
    }
    return;
  }
  const FusedMap map(a);
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
  ok = allow_smem(attention_mma_chunk_kernel<HD, 1>, ChunkShape<HD, 1>::kSmem, max_smem_bytes) && ok;
  ok = allow_smem(attention_mma_chunk_kernel<HD, 2>, ChunkShape<HD, 2>::kSmem, max_smem_bytes) && ok;
  ok = allow_smem(attention_mma_merge_kernel<HD, true>, MergeShape<HD>::kSmem, max_smem_bytes) && ok;
  ok = allow_smem(attention_mma_merge_kernel<HD, false>, MergeShape<HD>::kSmem, max_smem_bytes) && ok;
  return ok;
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
  s.chunk_split = 1;  // a record per chunk
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
  const bool ok64 = init_hd<64>(max_smem_bytes);
  const bool ok128 = init_hd<128>(max_smem_bytes);
  return ok64 && ok128;
}

}  // namespace tern::cuda
