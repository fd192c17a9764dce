// The AVX-512 attention unit kernel (attention_kernel.h). Keys sit in vector lanes: the unit's K
// rows are converted and transposed one 16-key tile at a time into a small L1 buffer (kt[d][key]),
// and every block of up to kScoreBlock query vectors that reaches the tile scores it there: one
// query's scores for 16 keys are one FMA chain over d with q[d] broadcast. V is read in key order
// into per-query FMA chains: straight from the cache when the unit has one block of query vectors
// (decode), from V rows converted once into scratch otherwise. Per query vector, at this ISA:
//   score lanes: two chains over d (even d, odd d), summed, times scale (then softcap);
//   m = max; p = exp(s - m) (exp_ps, simd_math_avx512.h) on the query's keys, 0 elsewhere; l = sum of the
//   16-lane p vectors over its key tiles in order, then hsum;
//   acc[d] = fma(p_j, v_j[d], acc[d]) over its keys j in order (masked off for other keys).
// None of this depends on which other queries share the unit, or on where V was converted
// (conversion is exact), so decode and any prefill tiling give the same bits (batch invariance).
// Keep each query's multiplies and adds as they are written here: GCC may fuse a separate
// _mm512_mul_ps + _mm512_add_ps into an FMA (it treats them as plain vector arithmetic), and a
// path-specific rewrite could then round differently on one path only (the tests catch it).
#include <immintrin.h>

#include <cmath>

#include "backends/cpu/attention_kernel.h"
#include "backends/cpu/matmul_simd_avx512.h"
#include "backends/cpu/simd_math_avx512.h"

namespace tern::cpu::detail {
namespace {

constexpr int kScoreBlock = 8;     // query vectors per pass over a K tile
constexpr int kPvBlock = 4;        // query vectors per pass over V
constexpr int kPvStrips = 4;       // 16-column strips of acc per pass (kPvBlock x kPvStrips accumulators)

int round_up16(int n) { return (n + kKeyTile - 1) / kKeyTile * kKeyTile; }

// r[i] = row i -> r[c] = column c (16 x 16 floats).
[[gnu::always_inline]] inline void transpose16x16(__m512 (&r)[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {  // r[4i + k], 128-bit lane L: element 4L + k of rows 4i .. 4i+3
    r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    t[k] = _mm512_shuffle_f32x4(r[k], r[4 + k], 0x88);
    t[4 + k] = _mm512_shuffle_f32x4(r[k], r[4 + k], 0xdd);
    t[8 + k] = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x88);
    t[12 + k] = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0xdd);
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    r[k] = _mm512_shuffle_f32x4(t[k], t[8 + k], 0x88);
    r[8 + k] = _mm512_shuffle_f32x4(t[k], t[8 + k], 0xdd);
    r[4 + k] = _mm512_shuffle_f32x4(t[4 + k], t[12 + k], 0x88);
    r[12 + k] = _mm512_shuffle_f32x4(t[4 + k], t[12 + k], 0xdd);
  }
}

// Row addressing of one K or V cache at a kv head's columns. T: the element (uint16_t = F16).
template <typename T>
struct CacheRows {
  const uint8_t* data;  // row 0, at the kv head's first column
  int64_t stride;       // bytes between rows
  const int32_t* blocks;
  int block_tokens;

  CacheRows(const Tensor& cache, const int32_t* block_table, int tokens_per_block, int64_t kv_col)
      : data(static_cast<const uint8_t*>(cache.data) + kv_col * static_cast<int64_t>(sizeof(T))),
        stride(static_cast<int64_t>(cache.row_stride)),
        blocks(block_table),
        block_tokens(tokens_per_block) {}

  const T* row(int j) const {
    const int64_t slot = static_cast<int64_t>(blocks[j / block_tokens]) * block_tokens + j % block_tokens;
    return reinterpret_cast<const T*>(data + slot * stride);
  }
  // Tiles are aligned to 16 positions, so when blocks hold whole tiles (the usual 16 tokens) a
  // tile's rows are consecutive, `stride` apart, from row(jt): one block-table lookup per tile.
  bool whole_tiles() const { return block_tokens % kKeyTile == 0; }
  // Rows of positions jt .. jt+15; null outside [lo, hi).
  void tile(int jt, int lo, int hi, const T** rows) const {
    if (whole_tiles()) {
      // Anchored at a position in range: the table may hold no valid block for the others (before
      // a sliding window, past the sequence).
      const int anchor = jt > lo ? jt : lo;
      if (anchor >= hi || anchor >= jt + kKeyTile) {
        for (int i = 0; i < kKeyTile; ++i) rows[i] = nullptr;
        return;
      }
      const uint8_t* first = reinterpret_cast<const uint8_t*>(row(anchor)) - (anchor - jt) * stride;
      for (int i = 0; i < kKeyTile; ++i)
        rows[i] = jt + i >= lo && jt + i < hi ? reinterpret_cast<const T*>(first + i * stride) : nullptr;
      return;
    }
    for (int i = 0; i < kKeyTile; ++i) rows[i] = jt + i >= lo && jt + i < hi ? row(jt + i) : nullptr;
  }
};

// 16 values (lanes past `m` zero) of a K/V row from element d0, as floats.
inline __m512 load16(const uint16_t* row, int d0, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + d0));
}
inline __m512 load16(const float* row, int d0, __mmask16 m) { return _mm512_maskz_loadu_ps(m, row + d0); }

__mmask16 range_mask(int jt, int j0, int j1) {  // lanes jt + i with j0 <= jt + i < j1
  const int lo = j0 - jt > 0 ? j0 - jt : 0, hi = j1 - jt < kKeyTile ? j1 - jt : kKeyTile;
  if (hi <= lo) return 0;
  return static_cast<__mmask16>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}

// Scores of NB query vectors (q[b], head_dim floats) against one 16-key tile of transposed K (kt,
// [hd_pad][16]), scaled; written to out + b * out_stride. Per lane (key): two FMA chains over d
// (even d, odd d) from zero, summed, times scale.
template <int NB>
void score_tile(const float* const* q, const float* kt, int hd, float scale, float* out, int out_stride) {
  __m512 even[NB], odd[NB];
#pragma GCC unroll 8
  for (int b = 0; b < NB; ++b) even[b] = odd[b] = _mm512_setzero_ps();
  int d = 0;
  for (; d + 2 <= hd; d += 2) {
    const __m512 k0 = _mm512_load_ps(kt + static_cast<int64_t>(d) * kKeyTile);
    const __m512 k1 = _mm512_load_ps(kt + static_cast<int64_t>(d + 1) * kKeyTile);
#pragma GCC unroll 8
    for (int b = 0; b < NB; ++b) {
      even[b] = _mm512_fmadd_ps(_mm512_set1_ps(q[b][d]), k0, even[b]);
      odd[b] = _mm512_fmadd_ps(_mm512_set1_ps(q[b][d + 1]), k1, odd[b]);
    }
  }
  if (d < hd) {
    const __m512 k0 = _mm512_load_ps(kt + static_cast<int64_t>(d) * kKeyTile);
#pragma GCC unroll 8
    for (int b = 0; b < NB; ++b) even[b] = _mm512_fmadd_ps(_mm512_set1_ps(q[b][d]), k0, even[b]);
  }
#pragma GCC unroll 8
  for (int b = 0; b < NB; ++b)
    _mm512_storeu_ps(out + static_cast<int64_t>(b) * out_stride,
                     _mm512_mul_ps(_mm512_add_ps(even[b], odd[b]), _mm512_set1_ps(scale)));
}

// Converts K tile jt (positions [lo, hi) of it; other keys zero) and transposes it into kt
// ([hd_pad][16]: kt[d][key]).
template <typename KT>
void load_k_tile(const CacheRows<KT>& k, int jt, int lo, int hi, int hd, float* kt) {
  const bool full = jt >= lo && jt + kKeyTile <= hi && k.whole_tiles();
  const KT* rows[kKeyTile];
  const uint8_t* first = nullptr;
  if (full) {
    first = reinterpret_cast<const uint8_t*>(k.row(jt));
  } else {
    k.tile(jt, lo, hi, rows);
  }
  for (int d0 = 0; d0 < hd; d0 += 16) {
    const __mmask16 m = mask16(hd - d0);
    __m512 r[16];
    if (full) {  // the common case: no per-row checks
#pragma GCC unroll 16
      for (int i = 0; i < kKeyTile; ++i) r[i] = load16(reinterpret_cast<const KT*>(first + i * k.stride), d0, m);
    } else {
#pragma GCC unroll 16
      for (int i = 0; i < kKeyTile; ++i) r[i] = rows[i] != nullptr ? load16(rows[i], d0, m) : _mm512_setzero_ps();
    }
    transpose16x16(r);
    // All 16 columns (kt has hd_pad rows; those past hd are zero and never read): a store count
    // known at compile time keeps r in registers.
#pragma GCC unroll 16
    for (int c = 0; c < 16; ++c) _mm512_store_ps(kt + static_cast<int64_t>(d0 + c) * kKeyTile, r[c]);
  }
}

// acc[b][s] += p_j * v_j (strips s of columns from s0) for the keys j in [j_lo, j_hi) of one
// tile, in key order; kMasked: only for the query vectors whose range holds j (an unmasked FMA is
// the masked one with every lane on, so the fast path for tiles inside every range is bit-exact).
template <int NB, bool kMasked, bool kStaged, typename VT>
[[gnu::always_inline]] inline void pv_keys(__m512 (&acc)[NB][kPvStrips], int j_lo, int j_hi, int jt,
                                           const float* const* p, const int* j0, const int* j1, int base,
                                           const VT* const* rows, const float* staged, int hd_pad, int s0, int ns,
                                           const __mmask16* col_mask) {
  for (int j = j_lo; j < j_hi; ++j) {
    __mmask16 active[NB];
    __m512 pj[NB];
#pragma GCC unroll 4
    for (int b = 0; b < NB; ++b) {
      if constexpr (kMasked)
        active[b] = static_cast<unsigned>(j - j0[b]) < static_cast<unsigned>(j1[b] - j0[b]) ? 0xffff : 0;
      pj[b] = _mm512_set1_ps(p[b][j - base]);
    }
#pragma GCC unroll 4
    for (int s = 0; s < kPvStrips; ++s) {
      if (s >= ns) break;
      __m512 v;
      if constexpr (kStaged) {
        v = _mm512_load_ps(staged + static_cast<int64_t>(j - base) * hd_pad + s0 + 16 * s);
      } else {
        v = load16(rows[j - jt], s0 + 16 * s, col_mask[s]);
      }
#pragma GCC unroll 4
      for (int b = 0; b < NB; ++b) {
        if constexpr (kMasked) {
          acc[b][s] = _mm512_mask3_fmadd_ps(pj[b], v, acc[b][s], active[b]);
        } else {
          acc[b][s] = _mm512_fmadd_ps(pj[b], v, acc[b][s]);
        }
      }
    }
  }
}

// acc (NB query vectors x up to kPvStrips strips from column s0) = sum over each query's keys of
// p_j * v_j, in key order. p[b]: the query's probabilities, indexed by j - base. kStaged: V rows
// come from `staged` ([j - base][hd_pad], converted there once), else straight from the cache
// (converted as they are read); the values are the same.
template <int NB, bool kStaged, typename VT>
void pv_block(const float* const* p, const int* j0, const int* j1, int base, const CacheRows<VT>& vc,
              const float* staged, int hd_pad, int hd, int s0, float* const* acc_out) {
  int lo = j0[0], hi = j1[0], all_lo = j0[0], all_hi = j1[0];  // union and intersection of the ranges
  for (int b = 1; b < NB; ++b) {
    lo = j0[b] < lo ? j0[b] : lo;
    hi = j1[b] > hi ? j1[b] : hi;
    all_lo = j0[b] > all_lo ? j0[b] : all_lo;
    all_hi = j1[b] < all_hi ? j1[b] : all_hi;
  }
  const int ns = (hd - s0 + 15) / 16 < kPvStrips ? (hd - s0 + 15) / 16 : kPvStrips;
  __mmask16 col_mask[kPvStrips];
  for (int s = 0; s < kPvStrips; ++s) col_mask[s] = s < ns ? mask16(hd - s0 - 16 * s) : 0;
  __m512 acc[NB][kPvStrips];
#pragma GCC unroll 4
  for (int b = 0; b < NB; ++b)
#pragma GCC unroll 4
    for (int s = 0; s < kPvStrips; ++s) acc[b][s] = _mm512_setzero_ps();
  for (int jt = lo / kKeyTile * kKeyTile; jt < hi; jt += kKeyTile) {
    const VT* rows[kKeyTile];
    if constexpr (!kStaged) {
      vc.tile(jt, lo, hi, rows);
    }
    const int j_lo = jt > lo ? jt : lo, j_hi = jt + kKeyTile < hi ? jt + kKeyTile : hi;
    if (j_lo >= all_lo && j_hi <= all_hi) {
      pv_keys<NB, false, kStaged>(acc, j_lo, j_hi, jt, p, j0, j1, base, rows, staged, hd_pad, s0, ns, col_mask);
    } else {
      pv_keys<NB, true, kStaged>(acc, j_lo, j_hi, jt, p, j0, j1, base, rows, staged, hd_pad, s0, ns, col_mask);
    }
  }
#pragma GCC unroll 4
  for (int b = 0; b < NB; ++b)
#pragma GCC unroll 4
    for (int s = 0; s < kPvStrips; ++s)
      if (s < ns) _mm512_mask_storeu_ps(acc_out[b] + s0 + 16 * s, col_mask[s], acc[b][s]);
}

template <bool kStaged, typename VT>
void pv_blocks(int nb, const float* const* p, const int* j0, const int* j1, int base, const CacheRows<VT>& vc,
               const float* staged, int hd_pad, int hd, int s0, float* const* acc) {
  switch (nb) {
    case 1: pv_block<1, kStaged>(p, j0, j1, base, vc, staged, hd_pad, hd, s0, acc); break;
    case 2: pv_block<2, kStaged>(p, j0, j1, base, vc, staged, hd_pad, hd, s0, acc); break;
    case 3: pv_block<3, kStaged>(p, j0, j1, base, vc, staged, hd_pad, hd, s0, acc); break;
    default: pv_block<4, kStaged>(p, j0, j1, base, vc, staged, hd_pad, hd, s0, acc); break;
  }
}

template <typename KT, typename VT>
void attend_unit(const AttentionUnit& u) {
  const KvLayerView& kv = *u.kv;
  const int hd = u.head_dim, group = u.group;
  const int hd_pad = round_up16(hd);
  const int base = u.key_lo / kKeyTile * kKeyTile;
  const int ks = round_up16(u.key_hi) - base;  // keys in the unit's tiles: the scores' row stride
  const int n_qv = u.n_queries * group;
  const CacheRows<KT> kc(kv.k, u.blocks, kv.block_tokens, u.kv_col);
  const CacheRows<VT> vc(kv.v, u.blocks, kv.block_tokens, u.kv_col);
  float* kt = u.scratch;                                         // [hd_pad, 16]: one K tile, transposed
  float* scores = kt + static_cast<int64_t>(hd_pad) * kKeyTile;  // [n_qv, ks]
  float* v = scores + static_cast<int64_t>(n_qv) * ks;           // [ks, hd_pad], only when V is staged

  // Query vector qv = (query qv / group, head qv % group).
  auto q_of = [&](int qv) { return u.queries[qv / group].q + static_cast<int64_t>(qv % group) * hd; };
  auto j0_of = [&](int qv) { return u.queries[qv / group].j0; };
  auto j1_of = [&](int qv) { return u.queries[qv / group].j1; };
  auto acc_of = [&](int qv) {
    return u.queries[qv / group].partial + 2 * group + static_cast<int64_t>(qv % group) * hd;
  };

  // Scores, one 16-key tile at a time: its K rows are converted and transposed into kt (which
  // stays in L1) and scored there by every block of query vectors whose keys reach the tile.
  for (int jt = base; jt < u.key_hi; jt += kKeyTile) {
    load_k_tile(kc, jt, u.key_lo, u.key_hi, hd, kt);
    for (int qb = 0; qb < n_qv; qb += kScoreBlock) {
      const int nb = n_qv - qb < kScoreBlock ? n_qv - qb : kScoreBlock;
      bool reached = false;  // does any query vector of the block attend to a key of this tile?
      const float* q[kScoreBlock];
      for (int b = 0; b < nb; ++b) {
        q[b] = q_of(qb + b);
        reached |= j0_of(qb + b) < jt + kKeyTile && j1_of(qb + b) > jt;
      }
      if (!reached) continue;
      float* out = scores + static_cast<int64_t>(qb) * ks + (jt - base);
      switch (nb) {
        case 1: score_tile<1>(q, kt, hd, u.scale, out, ks); break;
        case 2: score_tile<2>(q, kt, hd, u.scale, out, ks); break;
        case 3: score_tile<3>(q, kt, hd, u.scale, out, ks); break;
        case 4: score_tile<4>(q, kt, hd, u.scale, out, ks); break;
        case 5: score_tile<5>(q, kt, hd, u.scale, out, ks); break;
        case 6: score_tile<6>(q, kt, hd, u.scale, out, ks); break;
        case 7: score_tile<7>(q, kt, hd, u.scale, out, ks); break;
        default: score_tile<8>(q, kt, hd, u.scale, out, ks); break;
      }
    }
  }

  // Softmax of each query vector over its own keys.
  for (int qv = 0; qv < n_qv; ++qv) {
    float* s = scores + static_cast<int64_t>(qv) * ks;
    const int j0 = j0_of(qv), j1 = j1_of(qv);
    const int t_lo = j0 / kKeyTile * kKeyTile;
    if (u.softcap > 0.0f) {
      for (int j = j0; j < j1; ++j) s[j - base] = u.softcap * std::tanh(s[j - base] / u.softcap);
    }
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int jt = t_lo; jt < j1; jt += kKeyTile)
      mx = _mm512_mask_max_ps(mx, range_mask(jt, j0, j1), mx, _mm512_loadu_ps(s + (jt - base)));
    const float m = hmax(mx);
    __m512 l = _mm512_setzero_ps();
    for (int jt = t_lo; jt < j1; jt += kKeyTile) {
      const __m512 p = _mm512_maskz_mov_ps(range_mask(jt, j0, j1),
                                           exp_ps(_mm512_sub_ps(_mm512_loadu_ps(s + (jt - base)), _mm512_set1_ps(m))));
      _mm512_storeu_ps(s + (jt - base), p);
      l = _mm512_add_ps(l, p);
    }
    float* partial = u.queries[qv / group].partial;
    partial[qv % group] = m;
    partial[group + qv % group] = hsum(l);
  }

  // acc = P V. With a single block of query vectors (decode) each V row is converted straight from
  // the cache into registers, once; a bigger tile converts the unit's V rows into scratch once and
  // every block reads them there. The values and each query's FMA sequence are the same either way.
  const float* staged = nullptr;
  if (n_qv > kPvBlock) {
    for (int jt = base; jt < u.key_hi; jt += kKeyTile) {
      const VT* rows[kKeyTile];
      vc.tile(jt, u.key_lo, u.key_hi, rows);
      for (int i = 0; i < kKeyTile; ++i) {
        if (rows[i] == nullptr) continue;
        float* dst = v + static_cast<int64_t>(jt + i - base) * hd_pad;
        for (int d0 = 0; d0 < hd_pad; d0 += 16) _mm512_store_ps(dst + d0, load16(rows[i], d0, mask16(hd - d0)));
      }
    }
    staged = v;
  }
  for (int s0 = 0; s0 < hd; s0 += 16 * kPvStrips) {
    for (int qb = 0; qb < n_qv; qb += kPvBlock) {
      const int nb = n_qv - qb < kPvBlock ? n_qv - qb : kPvBlock;
      const float* p[kPvBlock];
      int j0[kPvBlock], j1[kPvBlock];
      float* acc[kPvBlock];
      for (int b = 0; b < nb; ++b) {
        p[b] = scores + static_cast<int64_t>(qb + b) * ks;
        j0[b] = j0_of(qb + b);
        j1[b] = j1_of(qb + b);
        acc[b] = acc_of(qb + b);
      }
      if (staged != nullptr) {
        pv_blocks<true>(nb, p, j0, j1, base, vc, staged, hd_pad, hd, s0, acc);
      } else {
        pv_blocks<false>(nb, p, j0, j1, base, vc, staged, hd_pad, hd, s0, acc);
      }
    }
  }
}

}  // namespace

void attend_unit_avx512(const AttentionUnit& u) {
  const bool k_f16 = u.kv->k.dtype == DType::F16, v_f16 = u.kv->v.dtype == DType::F16;
  if (k_f16 && v_f16) {
    attend_unit<uint16_t, uint16_t>(u);
  } else if (k_f16) {
    attend_unit<uint16_t, float>(u);
  } else if (v_f16) {
    attend_unit<float, uint16_t>(u);
  } else {
    attend_unit<float, float>(u);
  }
}

}  // namespace tern::cpu::detail
