// AVX-512 (VNNI) level: k-quant kernels (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) against q8x256 activations.
//
// Every k-quant super-block (256 elements) decodes as x = d * sc_g * u - dmin * mn_g, or as
// x = d * sc_g * (u - K), with an unsigned code u (q2: 0..3, q3: 0..7, q4: 0..15, q5: 0..31,
// q6: 0..63) and integer sub-block scales sc_g / mins mn_g per 16-element group g. Its dot with an
// activation super-block (da, q, bsums) is therefore
//   da * (d * isum - dmin * msum),  isum = sum_g sc_g * dot_g(u, q),  msum = sum_g mn_g * bsum_g
// (offset types: msum = K * sum_g sc_g * bsum_g, subtracted from isum in integers).
//
// Weight side, once per super-block and weight row: decode() yields the codes of four 64-element
// chunks, per chunk the scale words that pair with vpmaddubsw's int16 pair sums, and the 16
// words that pair with bsums. Activation side, per row: vpmaddubsw (u8 x s8 -> int16 pairs; every
// code is small enough not to saturate) then vpdpwssd with the scales accumulates exact int32
// lanes. Per output, per super-block, in order: acc = fma(float(isum lanes), d * da, acc) and
// for min types acc = fnmadd(float(msum lanes), dmin * da, acc); one hsum at the end.
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/matmul_kernels.h"
#include "backends/cpu/matmul_kquant_scales_simd.h"
#include "backends/cpu/matmul_simd_avx512.h"
#include "backends/cpu/matmul_tiling.h"
#include "core/quant_blocks.h"

namespace tern::cpu::detail {
namespace {

// One super-block of one weight row, ready for the integer dot products.
struct SuperBlock {
  __m512i codes[4];   // unsigned codes of elements 64c .. 64c + 63
  __m512i scales[4];  // int16 words: both words of dword lane l scale maddubs pairs of lane l
  __m256i corr;       // 16 int16 words, one per bsums entry (mins, or K * scale)
  float d;
  float dmin;         // min types only
};

// Scale words for each 64-element chunk from 16 int16 scales: every word of 128-bit lane l of
// chunk c is the scale of 16-element group 4c + l (so both words of a maddubs pair sum agree).
inline void scales_per_16(__m256i s16, __m512i* scales) {
  const __m512i src = _mm512_castsi256_si512(s16);
  #pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512i idx = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_setr_epi16(4 * c, 4 * c, 4 * c, 4 * c, 4 * c, 4 * c, 4 * c, 4 * c, 4 * c + 1,
                                                 4 * c + 1, 4 * c + 1, 4 * c + 1, 4 * c + 1, 4 * c + 1, 4 * c + 1,
                                                 4 * c + 1)),
        _mm256_setr_epi16(4 * c + 2, 4 * c + 2, 4 * c + 2, 4 * c + 2, 4 * c + 2, 4 * c + 2, 4 * c + 2, 4 * c + 2,
                          4 * c + 3, 4 * c + 3, 4 * c + 3, 4 * c + 3, 4 * c + 3, 4 * c + 3, 4 * c + 3, 4 * c + 3),
        1);
    scales[c] = _mm512_permutexvar_epi16(idx, src);
  }
}

// The same for 32-element sub-blocks (scales in words 0-7): chunk c is sub-blocks 2c (lower 256
// bits) and 2c + 1.
inline void scales_per_32(__m256i s16, __m512i* scales) {
  const __m512i src = _mm512_castsi256_si512(s16);
  #pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512i idx = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(2 * c)),
                                           _mm256_set1_epi16(static_cast<int16_t>(2 * c + 1)), 1);
    scales[c] = _mm512_permutexvar_epi16(idx, src);
  }
}

inline __m512i load_bytes_twice(const uint8_t* p) {  // 32 bytes into both 256-bit halves
  return _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

template <DType T>
struct KQuant;

// q4_k: chunk c = 32 bytes qs[32c..]: low nibbles are sub-block 2c, high nibbles sub-block 2c+1.
// q5_k adds bit 4 from qh: bit 2c (low half) / 2c+1 (high half) of qh[l].
template <DType T>
inline void decode_q45k(const uint8_t* src, SuperBlock& sb) {
  using Block = std::conditional_t<T == DType::Q4_K, BlockQ4_K, BlockQ5_K>;
  const auto& b = *reinterpret_cast<const Block*>(src);
  const __m256i sm = _mm256_cvtepu8_epi16(unpack_q4k_scales_sse(b.scales));  // 8 scales, 8 mins
  scales_per_32(sm, sb.scales);
  // bsums are per 16 elements: min j pairs with bsums 2j and 2j + 1.
  sb.corr = _mm256_permutexvar_epi16(_mm256_setr_epi16(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15), sm);
  [[maybe_unused]] __m512i qh;
  if constexpr (T == DType::Q5_K) qh = load_bytes_twice(b.qh);
  #pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    __m512i v = load_bytes_twice(b.qs + 32 * c);
    v = _mm512_mask_srli_epi16(v, 0xffff0000u, v, 4);  // upper half: high nibbles
    v = _mm512_and_si512(v, _mm512_set1_epi8(0x0f));
    if constexpr (T == DType::Q5_K) {
      const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << (2 * c))),
                                             _mm256_set1_epi8(static_cast<char>(1 << (2 * c + 1))), 1);
      v = _mm512_mask_add_epi8(v, _mm512_test_epi8_mask(qh, bit), v, _mm512_set1_epi8(16));
    }
    sb.codes[c] = v;
  }
  sb.d = half_to_float(b.d);
  sb.dmin = half_to_float(b.dmin);
}

template <>
struct KQuant<DType::Q4_K> {
  static constexpr size_t kBytes = sizeof(BlockQ4_K);
  static constexpr bool kMins = true;
  static void decode(const uint8_t* src, SuperBlock& sb) { decode_q45k<DType::Q4_K>(src, sb); }
};
template <>
struct KQuant<DType::Q5_K> {
  static constexpr size_t kBytes = sizeof(BlockQ5_K);
  static constexpr bool kMins = true;
  static void decode(const uint8_t* src, SuperBlock& sb) { decode_q45k<DType::Q5_K>(src, sb); }
};

// q6_k: per 128-element half h, ql[64h..] holds elements 0-63 (low nibbles) and 64-127 (high
// nibbles); qh[32h + l] holds the top two bits of elements l, l+32, l+64, l+96 in bit pairs 0-1,
// 2-3, 4-5, 6-7. u = code, x = d * sc * (u - 32).
template <>
struct KQuant<DType::Q6_K> {
  static constexpr size_t kBytes = sizeof(BlockQ6_K);
  static constexpr bool kMins = false;
  static void decode(const uint8_t* src, SuperBlock& sb) {
    const auto& b = *reinterpret_cast<const BlockQ6_K*>(src);
    const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    scales_per_16(sc, sb.scales);
    sb.corr = _mm256_slli_epi16(sc, 5);  // 32 * sc
    #pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(b.ql + 64 * h);
      const __m512i qh = load_bytes_twice(b.qh + 32 * h);
      const __m512i low_nibbles = _mm512_set1_epi8(0x0f), bits45 = _mm512_set1_epi8(0x30);
      // Elements 0-63: bit pairs 0-1 (lower half) and 2-3 (upper half) moved to bits 4-5.
      const __m512i up_lo = _mm512_sllv_epi16(qh, _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1));
      sb.codes[2 * h] = _mm512_ternarylogic_epi32(_mm512_and_si512(ql, low_nibbles), up_lo, bits45, 0xf8);
      // Elements 64-127: bit pairs 4-5 (already in place) and 6-7 (shift right by 2).
      const __m512i up_hi = _mm512_srlv_epi16(qh, _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1));
      sb.codes[2 * h + 1] =
          _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low_nibbles), up_hi, bits45, 0xf8);
    }
    sb.d = half_to_float(b.d);
    sb.dmin = 0.0f;
  }
};

// q2_k / q3_k low bits: per half h, byte l of qs[32h..] holds elements 128h + 32j + l in bit pair j.
// Chunk c (half c / 2) takes bit pairs 2(c % 2) (lower 256 bits) and 2(c % 2) + 1 (upper).
inline __m512i crumbs(__m512i q, int c) {
  const int s = 4 * (c % 2);
  const __m512i counts = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(s)),
                                            _mm256_set1_epi16(static_cast<int16_t>(s + 2)), 1);
  return _mm512_and_si512(_mm512_srlv_epi16(q, counts), _mm512_set1_epi8(3));
}

// q3_k: u = low 2 bits + 4 * hmask bit (bit 4h + j of hmask[l]); x = d * sc * (u - 4).
template <>
struct KQuant<DType::Q3_K> {
  static constexpr size_t kBytes = sizeof(BlockQ3_K);
  static constexpr bool kMins = false;
  static void decode(const uint8_t* src, SuperBlock& sb) {
    const auto& b = *reinterpret_cast<const BlockQ3_K*>(src);
    const __m256i sc = _mm256_cvtepi8_epi16(unpack_q3k_scales_sse(b.scales));
    scales_per_16(sc, sb.scales);
    sb.corr = _mm256_slli_epi16(sc, 2);  // 4 * sc
    const __m512i hm = load_bytes_twice(b.hmask);
    #pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m512i u = crumbs(load_bytes_twice(b.qs + 32 * (c / 2)), c);
      const int j = 2 * (c % 2), h = c / 2;
      const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << (4 * h + j))),
                                             _mm256_set1_epi8(static_cast<char>(1 << (4 * h + j + 1))), 1);
      sb.codes[c] = _mm512_mask_add_epi8(u, _mm512_test_epi8_mask(hm, bit), u, _mm512_set1_epi8(4));
    }
    sb.d = half_to_float(b.d);
    sb.dmin = 0.0f;
  }
};

// q2_k: scales[g] = sc (low nibble) | mn (high nibble) per 16-element group.
template <>
struct KQuant<DType::Q2_K> {
  static constexpr size_t kBytes = sizeof(BlockQ2_K);
  static constexpr bool kMins = true;
  static void decode(const uint8_t* src, SuperBlock& sb) {
    const auto& b = *reinterpret_cast<const BlockQ2_K*>(src);
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
    const __m128i sc8 = _mm_and_si128(packed, _mm_set1_epi8(0x0f));
    const __m128i mn8 = _mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0f));
    scales_per_16(_mm256_cvtepu8_epi16(sc8), sb.scales);
    sb.corr = _mm256_cvtepu8_epi16(mn8);
    #pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) sb.codes[c] = crumbs(load_bytes_twice(b.qs + 32 * (c / 2)), c);
    sb.d = half_to_float(b.d);
    sb.dmin = half_to_float(b.dmin);
  }
};

template <DType T>
struct KQuantKernel {
  using Q = KQuant<T>;
  const WeightRows& w;
  const Activations& x;
  float* y;
  int64_t ldy;

  template <int NA, int NW>
  void tile(int64_t r0, int64_t i0) const {
    const int64_t n_super = x.cols / kQK_K;
    const int64_t n_groups = x.cols / kQ8x256SumGroup;
    __m512 acc[NA][NW];
#pragma GCC unroll 8
    for (int a = 0; a < NA; ++a)
#pragma GCC unroll 8
      for (int c = 0; c < NW; ++c) acc[a][c] = _mm512_setzero_ps();

    for (int64_t s = 0; s < n_super; ++s) {
      SuperBlock sb[NW];
#pragma GCC unroll 8
      for (int c = 0; c < NW; ++c)
        Q::decode(w.data + static_cast<size_t>(r0 + c) * w.row_stride + s * Q::kBytes, sb[c]);
#pragma GCC unroll 8
      for (int a = 0; a < NA; ++a) {
        const int64_t i = i0 + a;
        const int8_t* q = x.q8x256.qs + i * x.cols + s * kQK_K;
        const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q8x256.bsums + i * n_groups + s * 16));
        const float da = x.q8x256.d[i * n_super + s];
        __m512i qv[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) qv[k] = _mm512_loadu_si512(q + 64 * k);
#pragma GCC unroll 8
        for (int c = 0; c < NW; ++c) {
          __m512i isum = _mm512_setzero_si512();
#pragma GCC unroll 4
          for (int k = 0; k < 4; ++k)
            isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(sb[c].codes[k], qv[k]), sb[c].scales[k]);
          const __m512i corr = _mm512_zextsi256_si512(_mm256_madd_epi16(sb[c].corr, bsums));
          if constexpr (Q::kMins) {
            acc[a][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(sb[c].d * da), acc[a][c]);
            acc[a][c] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(corr), _mm512_set1_ps(sb[c].dmin * da), acc[a][c]);
          } else {
            isum = _mm512_sub_epi32(isum, corr);
            acc[a][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(sb[c].d * da), acc[a][c]);
          }
        }
      }
    }
#pragma GCC unroll 8
    for (int a = 0; a < NA; ++a)
#pragma GCC unroll 8
      for (int c = 0; c < NW; ++c) y[(i0 + a) * ldy + r0 + c] = hsum(acc[a][c]);
  }
};

template <DType T>
void gemm_kquant(const WeightRows& w, const Activations& x, float* y, int64_t ldy) {
  run_tiles<4, 1, 2>(KQuantKernel<T>{w, x, y, ldy}, w.n_rows, x.n);
}

}  // namespace

Kernel avx512_find_kquant_kernel(DType t) {
  switch (t) {
    case DType::Q2_K: return {ActFormat::kQ8x256, gemm_kquant<DType::Q2_K>};
    case DType::Q3_K: return {ActFormat::kQ8x256, gemm_kquant<DType::Q3_K>};
    case DType::Q4_K: return {ActFormat::kQ8x256, gemm_kquant<DType::Q4_K>};
    case DType::Q5_K: return {ActFormat::kQ8x256, gemm_kquant<DType::Q5_K>};
    case DType::Q6_K: return {ActFormat::kQ8x256, gemm_kquant<DType::Q6_K>};
    default: return {};
  }
}

}  // namespace tern::cpu::detail
