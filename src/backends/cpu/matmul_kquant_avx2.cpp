// AVX2 level: k-quant kernels (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) against x256 activations of 1 or 2
// digits (matmul_kernels.h). Same arithmetic as the AVX-512 kernels (see matmul_kquant_avx512.cpp
// for the derivation and the two-digit float steps), on 32-element chunks: per chunk vpmaddubsw
// (codes x activations -> int16 pairs) and vpmaddwd with the chunk's scale words accumulate exact
// int32 lanes; per super-block and output, in order (one isum step per digit, hi first):
// acc = fma(float(isum), d * da, acc) and, for min types, acc = fnmadd(float(msum), dmin * da, acc).
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/matmul_kernels.h"
#include "backends/cpu/matmul_kquant_scales_simd.h"
#include "backends/cpu/matmul_simd_avx2.h"
#include "backends/cpu/matmul_tiling.h"
#include "core/quant_blocks.h"

namespace tern::cpu::detail {
namespace {

inline __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// pshufb index that repeats int16 word `lo` over the lower 128-bit lane and `hi` over the upper.
inline __m256i word_index(int lo, int hi) {
  const int16_t l = static_cast<int16_t>(2 * lo | (2 * lo + 1) << 8), h = static_cast<int16_t>(2 * hi | (2 * hi + 1) << 8);
  return _mm256_setr_epi16(l, l, l, l, l, l, l, l, h, h, h, h, h, h, h, h);
}

// Scale words for 16-element groups (16 int16 scales in `s16`): chunk k covers groups 2k (lower
// lane) and 2k + 1 (upper lane).
struct ScalesPer16 {
  __m256i low, high;  // words 0-7 and 8-15, each repeated in both lanes
  explicit ScalesPer16(__m256i s16)
      : low(_mm256_permute4x64_epi64(s16, _MM_SHUFFLE(1, 0, 1, 0))),
        high(_mm256_permute4x64_epi64(s16, _MM_SHUFFLE(3, 2, 3, 2))) {}
  __m256i chunk(int k) const { return _mm256_shuffle_epi8(k < 4 ? low : high, word_index((2 * k) % 8, (2 * k + 1) % 8)); }
};

// q2_k / q3_k low bits: chunk k = elements 32k .. 32k + 31 = bit pair k % 4 of qs[32 (k / 4) + l].
inline __m256i crumbs(const uint8_t* qs, int k) {
  const __m256i v = load32(qs + 32 * (k / 4));
  return _mm256_and_si256(_mm256_srli_epi16(v, 2 * (k % 4)), _mm256_set1_epi8(3));
}

template <DType T>
struct KQuant;

// Per super-block state is built by prepare(); codes(k) and scales(k) give chunk k.
template <DType T>
struct KQuant45 {
  static constexpr size_t kBytes = T == DType::Q4_K ? sizeof(BlockQ4_K) : sizeof(BlockQ5_K);
  static constexpr bool kMins = true;
  using Block = std::conditional_t<T == DType::Q4_K, BlockQ4_K, BlockQ5_K>;
  const Block* b;
  __m256i scales16;  // scale words 0-7 repeated in both lanes
  __m256i qh;
  __m256i corr;
  float d, dmin;

  explicit KQuant45(const uint8_t* src) : b(reinterpret_cast<const Block*>(src)) {
    const __m128i sm = unpack_q4k_scales_sse(b->scales);  // bytes: 8 scales, 8 mins
    scales16 = _mm256_permute4x64_epi64(_mm256_cvtepu8_epi16(sm), _MM_SHUFFLE(1, 0, 1, 0));
    corr = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm));  // min j pairs with bsums 2j, 2j + 1
    if constexpr (T == DType::Q5_K) qh = load32(b->qh);
    d = _cvtsh_ss(b->d);
    dmin = _cvtsh_ss(b->dmin);
  }
  // Chunk k = sub-block k: nibble k % 2 of qs[32 (k / 2) + l]; q5_k: bit k of qh[l] is bit 4.
  __m256i codes(int k) const {
    __m256i v = _mm256_and_si256(_mm256_srli_epi16(load32(b->qs + 32 * (k / 2)), 4 * (k % 2)), _mm256_set1_epi8(0x0f));
    if constexpr (T == DType::Q5_K) {
      const __m256i bit = k <= 4 ? _mm256_slli_epi16(qh, 4 - k) : _mm256_srli_epi16(qh, k - 4);
      v = _mm256_or_si256(v, _mm256_and_si256(bit, _mm256_set1_epi8(0x10)));
    }
    return v;
  }
  __m256i scales(int k) const { return _mm256_shuffle_epi8(scales16, word_index(k, k)); }
};

template <>
struct KQuant<DType::Q4_K> : KQuant45<DType::Q4_K> {
  using KQuant45::KQuant45;
};
template <>
struct KQuant<DType::Q5_K> : KQuant45<DType::Q5_K> {
  using KQuant45::KQuant45;
};

// q6_k: chunk k (half h = k / 4, quarter q = k % 4): low nibble (q < 2) or high nibble of
// ql[64h + 32 (q % 2) + l], plus bit pair q of qh[32h + l] as bits 4-5.
template <>
struct KQuant<DType::Q6_K> {
  static constexpr size_t kBytes = sizeof(BlockQ6_K);
  static constexpr bool kMins = false;
  const BlockQ6_K* b;
  ScalesPer16 s;
  __m256i corr;
  float d, dmin = 0.0f;

  explicit KQuant(const uint8_t* src)
      : b(reinterpret_cast<const BlockQ6_K*>(src)),
        s(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->scales)))) {
    corr = _mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->scales))), 5);
    d = _cvtsh_ss(b->d);
  }
  __m256i codes(int k) const {
    const int h = k / 4, q = k % 4;
    const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(load32(b->ql + 64 * h + 32 * (q % 2)), 4 * (q / 2)),
                                        _mm256_set1_epi8(0x0f));
    const __m256i hb = load32(b->qh + 32 * h);
    const __m256i hi = 2 * q <= 4 ? _mm256_slli_epi16(hb, 4 - 2 * q) : _mm256_srli_epi16(hb, 2 * q - 4);
    return _mm256_or_si256(lo, _mm256_and_si256(hi, _mm256_set1_epi8(0x30)));
  }
  __m256i scales(int k) const { return s.chunk(k); }
};

// q3_k: u = low 2 bits + 4 * (bit k of hmask[l]); x = d * sc * (u - 4).
template <>
struct KQuant<DType::Q3_K> {
  static constexpr size_t kBytes = sizeof(BlockQ3_K);
  static constexpr bool kMins = false;
  const BlockQ3_K* b;
  ScalesPer16 s;
  __m256i corr, hm;
  float d, dmin = 0.0f;

  explicit KQuant(const uint8_t* src)
      : b(reinterpret_cast<const BlockQ3_K*>(src)), s(_mm256_cvtepi8_epi16(unpack_q3k_scales_sse(b->scales))) {
    corr = _mm256_slli_epi16(_mm256_cvtepi8_epi16(unpack_q3k_scales_sse(b->scales)), 2);
    hm = load32(b->hmask);
    d = _cvtsh_ss(b->d);
  }
  __m256i codes(int k) const {
    const __m256i hi = k <= 2 ? _mm256_slli_epi16(hm, 2 - k) : _mm256_srli_epi16(hm, k - 2);
    return _mm256_or_si256(crumbs(b->qs, k), _mm256_and_si256(hi, _mm256_set1_epi8(4)));
  }
  __m256i scales(int k) const { return s.chunk(k); }
};

// q2_k: scales[g] = sc (low nibble) | mn (high nibble) per 16-element group.
template <>
struct KQuant<DType::Q2_K> {
  static constexpr size_t kBytes = sizeof(BlockQ2_K);
  static constexpr bool kMins = true;
  const BlockQ2_K* b;
  ScalesPer16 s;
  __m256i corr;
  float d, dmin;

  static __m128i packed(const BlockQ2_K* blk) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->scales)); }
  explicit KQuant(const uint8_t* src)
      : b(reinterpret_cast<const BlockQ2_K*>(src)),
        s(_mm256_cvtepu8_epi16(_mm_and_si128(packed(b), _mm_set1_epi8(0x0f)))) {
    corr = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed(b), 4), _mm_set1_epi8(0x0f)));
    d = _cvtsh_ss(b->d);
    dmin = _cvtsh_ss(b->dmin);
  }
  __m256i codes(int k) const { return crumbs(b->qs, k); }
  __m256i scales(int k) const { return s.chunk(k); }
};

template <DType T, int kDigits>
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
    __m256 acc[NA][NW];
#pragma GCC unroll 8
    for (int a = 0; a < NA; ++a)
#pragma GCC unroll 8
      for (int c = 0; c < NW; ++c) acc[a][c] = _mm256_setzero_ps();

    for (int64_t s = 0; s < n_super; ++s) {
      const uint8_t* blk[NW];
#pragma GCC unroll 8
      for (int c = 0; c < NW; ++c) blk[c] = w.data + static_cast<size_t>(r0 + c) * w.row_stride + s * Q::kBytes;
      __m256i isum[NA][NW][kDigits];
#pragma GCC unroll 8
      for (int a = 0; a < NA; ++a)
#pragma GCC unroll 8
        for (int c = 0; c < NW; ++c)
#pragma GCC unroll 2
          for (int d = 0; d < kDigits; ++d) isum[a][c][d] = _mm256_setzero_si256();
      for (int c = 0; c < NW; ++c) {
        const Q sb(blk[c]);
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
          const __m256i codes = sb.codes(k), scales = sb.scales(k);
#pragma GCC unroll 8
          for (int a = 0; a < NA; ++a)
#pragma GCC unroll 2
            for (int d = 0; d < kDigits; ++d) {
              const int8_t* digit = x.q8x256.qs + ((i0 + a) * kDigits + d) * x.cols;
              const __m256i q = load32(reinterpret_cast<const uint8_t*>(digit + s * kQK_K + 32 * k));
              const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(codes, q), scales);
              isum[a][c][d] = _mm256_add_epi32(isum[a][c][d], dot);
            }
        }
#pragma GCC unroll 8
        for (int a = 0; a < NA; ++a) {
          const int64_t i = i0 + a;
          const float da = x.q8x256.d[i * n_super + s];
          __m256i corr[kDigits];
#pragma GCC unroll 2
          for (int d = 0; d < kDigits; ++d) {
            const int16_t* bsums = x.q8x256.bsums + (i * kDigits + d) * n_groups + s * 16;
            corr[d] = _mm256_madd_epi16(sb.corr, load32(reinterpret_cast<const uint8_t*>(bsums)));
          }
#pragma GCC unroll 2
          for (int d = 0; d < kDigits; ++d) {
            const float da_d = d + 1 < kDigits ? da * static_cast<float>(kDigitBase) : da;
            const __m256i dot = Q::kMins ? isum[a][c][d] : _mm256_sub_epi32(isum[a][c][d], corr[d]);
            acc[a][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(sb.d * da_d), acc[a][c]);
          }
          if constexpr (Q::kMins) {
            __m256i msum = corr[0];
            if constexpr (kDigits == 2)  // exact, see matmul_kquant_avx512.cpp
              msum = _mm256_add_epi32(_mm256_mullo_epi32(msum, _mm256_set1_epi32(kDigitBase)), corr[1]);
            acc[a][c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_set1_ps(sb.dmin * da), acc[a][c]);
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

template <DType T, int kDigits>
void gemm_kquant(const WeightRows& w, const Activations& x, float* y, int64_t ldy) {
  run_tiles<4, 1, 2>(KQuantKernel<T, kDigits>{w, x, y, ldy}, w.n_rows, x.n);
}

template <int kDigits>
Kernel find(DType t) {
  switch (t) {
    case DType::Q2_K: return {ActFormat::kQ8x256, gemm_kquant<DType::Q2_K, kDigits>};
    case DType::Q3_K: return {ActFormat::kQ8x256, gemm_kquant<DType::Q3_K, kDigits>};
    case DType::Q4_K: return {ActFormat::kQ8x256, gemm_kquant<DType::Q4_K, kDigits>};
    case DType::Q5_K: return {ActFormat::kQ8x256, gemm_kquant<DType::Q5_K, kDigits>};
    case DType::Q6_K: return {ActFormat::kQ8x256, gemm_kquant<DType::Q6_K, kDigits>};
    default: return {};
  }
}

}  // namespace

Kernel avx2_find_kquant_kernel(DType t, int digits) { return digits == 2 ? find<2>(t) : find<1>(t); }

}  // namespace tern::cpu::detail
