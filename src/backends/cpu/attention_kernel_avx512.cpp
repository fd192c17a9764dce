// The AVX-512 attention unit kernel (attention_kernel.h). Keys sit in vector lanes: the unit's K
// rows are converted once and transposed into 16-key tiles (kt[d][key]), so one query's scores for
// 16 keys are one FMA chain over d with q[d] broadcast, and the tile's loads are shared by up to
// kScoreBlock query vectors. V rows are converted once ([key][d]) and every query's acc is an FMA
// chain over its keys, shared loads again. Per query vector, at this ISA:
//   score lanes: two chains over d (even d, odd d), summed, times scale (then softcap);
//   m = max; p = exp(s - m) (exp_ps, simd_math_avx512.h) on the query's keys, 0 elsewhere; l = sum of the
//   16-lane p vectors over its key tiles in order, then hsum;
//   acc[d] = fma(p_j, v_j[d], acc[d]) over its keys j in order (masked off for other keys).
// None of this depends on which other queries share the unit (batch invariance).
#include <immintrin.h>

#include <cmath>

#include "backends/cpu/attention_kernel.h"
#include "backends/cpu/matmul_simd_avx512.h"
#include "backends/cpu/simd_math_avx512.h"

namespace tern::cpu::detail {
namespace {

constexpr int kScoreBlock = 8;  // query vectors per pass over a K tile
constexpr int kPvBlock = 4;     // query vectors per pass over V
constexpr int kPvStrips = 4;    // 16-column strips of acc per pass (kPvBlock x kPvStrips accumulators)

int round_up16(int n) { return (n + kKeyTile - 1) / kKeyTile * kKeyTile; }

// r[i] = row i -> r[c] = column c (16 x 16 floats).
inline void transpose16x16(__m512 (&r)[16]) {
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

// The K or V row of position j, from column kv_col.
inline const uint8_t* kv_row(const Tensor& cache, const int32_t* blocks, int block_tokens, int j, int64_t kv_col) {
  const int64_t slot = static_cast<int64_t>(blocks[j / block_tokens]) * block_tokens + j % block_tokens;
  return static_cast<const uint8_t*>(cache.row(slot)) + kv_col * (cache.dtype == DType::F16 ? 2 : 4);
}

// 16 values (lanes past `m` zero) of a K/V row from element d0.
inline __m512 load16(const uint8_t* row, bool f16, int d0, __mmask16 m) {
  if (f16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(row) + d0));
  return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + d0);
}

__mmask16 range_mask(int jt, int j0, int j1) {  // lanes jt + i with j0 <= jt + i < j1
  const int lo = j0 - jt > 0 ? j0 - jt : 0, hi = j1 - jt < kKeyTile ? j1 - jt : kKeyTile;
  if (hi <= lo) return 0;
  return static_cast<__mmask16>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}

// Scores of NB query vectors (q[b], head_dim floats) against one 16-key tile of kt (rows ks
// floats apart), scaled; written to out + b * ks.
template <int NB>
void score_tile(const float* const* q, const float* kt, int ks, int hd, float scale, float* out) {
  __m512 even[NB], odd[NB];
#pragma GCC unroll 8
  for (int b = 0; b < NB; ++b) even[b] = odd[b] = _mm512_setzero_ps();
  int d = 0;
  for (; d + 2 <= hd; d += 2) {
    const __m512 k0 = _mm512_loadu_ps(kt + static_cast<int64_t>(d) * ks);
    const __m512 k1 = _mm512_loadu_ps(kt + static_cast<int64_t>(d + 1) * ks);
#pragma GCC unroll 8
    for (int b = 0; b < NB; ++b) {
      even[b] = _mm512_fmadd_ps(_mm512_set1_ps(q[b][d]), k0, even[b]);
      odd[b] = _mm512_fmadd_ps(_mm512_set1_ps(q[b][d + 1]), k1, odd[b]);
    }
  }
  if (d < hd) {
    const __m512 k0 = _mm512_loadu_ps(kt + static_cast<int64_t>(d) * ks);
#pragma GCC unroll 8
    for (int b = 0; b < NB; ++b) even[b] = _mm512_fmadd_ps(_mm512_set1_ps(q[b][d]), k0, even[b]);
  }
#pragma GCC unroll 8
  for (int b = 0; b < NB; ++b)
    _mm512_storeu_ps(out + static_cast<int64_t>(b) * ks, _mm512_mul_ps(_mm512_add_ps(even[b], odd[b]), _mm512_set1_ps(scale)));
}

template <int NB>
void score_block(const float* const* q, int lo, int hi, int base, const float* kt, int ks, int hd, float scale,
                 float* out) {
  for (int jt = lo / kKeyTile * kKeyTile; jt < hi; jt += kKeyTile) score_tile<NB>(q, kt + (jt - base), ks, hd, scale, out + (jt - base));
}

// acc (NB query vectors x up to kPvStrips strips from column s0) = sum over each query's keys of
// p_j * v_j. p[b]: the query's probabilities, indexed by j - base.
template <int NB>
void pv_block(const float* const* p, const int* j0, const int* j1, int base, const float* v, int hd_pad, int hd, int s0,
              float* const* acc_out) {
  int lo = j0[0], hi = j1[0];
  for (int b = 1; b < NB; ++b) {
    lo = j0[b] < lo ? j0[b] : lo;
    hi = j1[b] > hi ? j1[b] : hi;
  }
  const int ns = (hd - s0 + 15) / 16 < kPvStrips ? (hd - s0 + 15) / 16 : kPvStrips;
  __m512 acc[NB][kPvStrips];
#pragma GCC unroll 4
  for (int b = 0; b < NB; ++b)
#pragma GCC unroll 4
    for (int s = 0; s < kPvStrips; ++s) acc[b][s] = _mm512_setzero_ps();
  for (int j = lo; j < hi; ++j) {
    const float* vj = v + static_cast<int64_t>(j - base) * hd_pad + s0;
    __mmask16 active[NB];
    __m512 pj[NB];
#pragma GCC unroll 4
    for (int b = 0; b < NB; ++b) {
      active[b] = static_cast<unsigned>(j - j0[b]) < static_cast<unsigned>(j1[b] - j0[b]) ? 0xffff : 0;
      pj[b] = _mm512_set1_ps(p[b][j - base]);
    }
#pragma GCC unroll 4
    for (int s = 0; s < kPvStrips; ++s) {
      if (s >= ns) break;
      const __m512 vs = _mm512_loadu_ps(vj + 16 * s);
#pragma GCC unroll 4
      for (int b = 0; b < NB; ++b) acc[b][s] = _mm512_mask3_fmadd_ps(pj[b], vs, acc[b][s], active[b]);
    }
  }
#pragma GCC unroll 4
  for (int b = 0; b < NB; ++b)
#pragma GCC unroll 4
    for (int s = 0; s < kPvStrips; ++s)
      if (s < ns) _mm512_mask_storeu_ps(acc_out[b] + s0 + 16 * s, mask16(hd - s0 - 16 * s), acc[b][s]);
}

}  // namespace

void attend_unit_avx512(const AttentionUnit& u) {
  const KvLayerView& kv = *u.kv;
  const int hd = u.head_dim, group = u.group;
  const int hd_pad = round_up16(hd);
  const int base = u.key_lo / kKeyTile * kKeyTile;
  const int ks = round_up16(u.key_hi) - base;  // keys in the unit's tiles: the K tile row stride
  const bool k_f16 = kv.k.dtype == DType::F16, v_f16 = kv.v.dtype == DType::F16;
  float* kt = u.scratch;                                          // [hd, ks]: K transposed
  float* v = kt + static_cast<int64_t>(hd_pad) * ks;              // [ks, hd_pad]
  float* scores = v + static_cast<int64_t>(ks) * hd_pad;          // [n_queries * group, ks]

  // K: 16 keys x 16 columns at a time, transposed in registers. Keys outside the unit are zero.
  for (int jt = base; jt < base + ks; jt += kKeyTile) {
    const uint8_t* rows[kKeyTile];
    for (int i = 0; i < kKeyTile; ++i) {
      const int j = jt + i;
      rows[i] = j >= u.key_lo && j < u.key_hi ? kv_row(kv.k, u.blocks, kv.block_tokens, j, u.kv_col) : nullptr;
    }
    for (int d0 = 0; d0 < hd; d0 += 16) {
      const __mmask16 m = mask16(hd - d0);
      __m512 r[16];
#pragma GCC unroll 16
      for (int i = 0; i < kKeyTile; ++i) r[i] = rows[i] != nullptr ? load16(rows[i], k_f16, d0, m) : _mm512_setzero_ps();
      transpose16x16(r);
      const int n_cols = hd - d0 < 16 ? hd - d0 : 16;
      for (int c = 0; c < n_cols; ++c) _mm512_storeu_ps(kt + static_cast<int64_t>(d0 + c) * ks + (jt - base), r[c]);
    }
  }
  for (int j = u.key_lo; j < u.key_hi; ++j) {
    const uint8_t* row = kv_row(kv.v, u.blocks, kv.block_tokens, j, u.kv_col);
    float* dst = v + static_cast<int64_t>(j - base) * hd_pad;
    for (int d0 = 0; d0 < hd_pad; d0 += 16) _mm512_storeu_ps(dst + d0, load16(row, v_f16, d0, mask16(hd - d0)));
  }

  // Query vector qv = (query qv / group, head qv % group).
  const int n_qv = u.n_queries * group;
  auto q_of = [&](int qv) { return u.queries[qv / group].q + static_cast<int64_t>(qv % group) * hd; };
  auto j0_of = [&](int qv) { return u.queries[qv / group].j0; };
  auto j1_of = [&](int qv) { return u.queries[qv / group].j1; };
  auto acc_of = [&](int qv) {
    return u.queries[qv / group].partial + 2 * group + static_cast<int64_t>(qv % group) * hd;
  };

  for (int qb = 0; qb < n_qv; qb += kScoreBlock) {
    const int nb = n_qv - qb < kScoreBlock ? n_qv - qb : kScoreBlock;
    const float* q[kScoreBlock];
    int lo = INT32_MAX, hi = -1;
    for (int b = 0; b < nb; ++b) {
      q[b] = q_of(qb + b);
      lo = j0_of(qb + b) < lo ? j0_of(qb + b) : lo;
      hi = j1_of(qb + b) > hi ? j1_of(qb + b) : hi;
    }
    float* out = scores + static_cast<int64_t>(qb) * ks;
    switch (nb) {
      case 1: score_block<1>(q, lo, hi, base, kt, ks, hd, u.scale, out); break;
      case 2: score_block<2>(q, lo, hi, base, kt, ks, hd, u.scale, out); break;
      case 3: score_block<3>(q, lo, hi, base, kt, ks, hd, u.scale, out); break;
      case 4: score_block<4>(q, lo, hi, base, kt, ks, hd, u.scale, out); break;
      case 5: score_block<5>(q, lo, hi, base, kt, ks, hd, u.scale, out); break;
      case 6: score_block<6>(q, lo, hi, base, kt, ks, hd, u.scale, out); break;
      case 7: score_block<7>(q, lo, hi, base, kt, ks, hd, u.scale, out); break;
      default: score_block<8>(q, lo, hi, base, kt, ks, hd, u.scale, out); break;
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

  // acc = P V.
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
      switch (nb) {
        case 1: pv_block<1>(p, j0, j1, base, v, hd_pad, hd, s0, acc); break;
        case 2: pv_block<2>(p, j0, j1, base, v, hd_pad, hd, s0, acc); break;
        case 3: pv_block<3>(p, j0, j1, base, v, hd_pad, hd, s0, acc); break;
        default: pv_block<4>(p, j0, j1, base, v, hd_pad, hd, s0, acc); break;
      }
    }
  }
}

}  // namespace tern::cpu::detail
