// AVX2 level: legacy-quant kernels (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) against x32 activations of 1
// or 2 digits (matmul_kernels.h).
//
// Block by block, per output: the 32 codes meet the 32 activation bytes in vpmaddubsw + vpmaddwd
// (8 int32 lanes), then acc = fma(float(dot), broadcast(d * d_a), acc) and, in a scalar
// accumulator, off = fma(m, s, off). Result hsum(acc) + off. With two digits the int16 pair sums
// of the hi digit are weighted by 255 in vpmaddwd, so dot = 255 * dot(hi) + dot(lo) stays exact
// per lane (|dot| <= 4 * 255 * 32512).
// Codes are unsigned (u8 operand of maddubs): q4 0..15, q5 0..31, with x = d * u + m
// (q4_0: m = -8d, q5_0: m = -16d). q8_0 keeps signed codes via maddubs(|q|, sign(a, q)); its
// pair sums stay below 2 * 128 * 127, inside int16.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "backends/cpu/matmul_kernels.h"
#include "backends/cpu/matmul_simd_avx2.h"
#include "backends/cpu/matmul_tiling.h"
#include "core/quant_blocks.h"

namespace tern::cpu::detail {
namespace {

inline float half_to_float(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// qs[l] holds element l (low nibble) and l + 16 (high nibble): codes in element order.
inline __m256i nibbles(const uint8_t* qs) {
  const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  return _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0f));
}

// q5: bit 4 of element l is bit l of the 32-bit qh: spread each qh byte over 8 code bytes.
inline __m256i add_high_bits(__m256i codes, const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                                             _mm256_setr_epi64x(0, 0x0101010101010101ll, 0x0202020202020202ll,
                                                                0x0303030303030303ll));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_or_si256(codes, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
}

template <DType T>
struct Legacy;

template <>
struct Legacy<DType::Q4_0> {
  static constexpr int kBytes = sizeof(BlockQ4_0);
  static constexpr bool kSigned = false;
  static __m256i codes(const uint8_t* b) { return nibbles(b + 2); }
  static float offset(const uint8_t* b, float d) { return -8.0f * d; }
};
template <>
struct Legacy<DType::Q4_1> {
  static constexpr int kBytes = sizeof(BlockQ4_1);
  static constexpr bool kSigned = false;
  static __m256i codes(const uint8_t* b) { return nibbles(b + 4); }
  static float offset(const uint8_t* b, float) { return half_to_float(b + 2); }
};
template <>
struct Legacy<DType::Q5_0> {
  static constexpr int kBytes = sizeof(BlockQ5_0);
  static constexpr bool kSigned = false;
  static __m256i codes(const uint8_t* b) { return add_high_bits(nibbles(b + 6), b + 2); }
  static float offset(const uint8_t* b, float d) { return -16.0f * d; }
};
template <>
struct Legacy<DType::Q5_1> {
  static constexpr int kBytes = sizeof(BlockQ5_1);
  static constexpr bool kSigned = false;
  static __m256i codes(const uint8_t* b) { return add_high_bits(nibbles(b + 8), b + 4); }
  static float offset(const uint8_t* b, float) { return half_to_float(b + 2); }
};
template <>
struct Legacy<DType::Q8_0> {
  static constexpr int kBytes = sizeof(BlockQ8_0);
  static constexpr bool kSigned = true;
  static __m256i codes(const uint8_t* b) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)); }
  static float offset(const uint8_t*, float) { return 0.0f; }
};

template <DType T, int kDigits>
struct LegacyKernel {
  using L = Legacy<T>;
  const WeightRows& w;
  const Activations& x;
  float* y;
  int64_t ldy;

  template <int NA, int NW>
  void tile(int64_t r0, int64_t i0) const {
    const int64_t n_blocks = x.cols / kQK;
    const uint8_t* wr[NW];
#pragma GCC unroll 8
    for (int c = 0; c < NW; ++c) wr[c] = w.data + static_cast<size_t>(r0 + c) * w.row_stride;
    __m256 acc[NA][NW];
    float off[NA][NW];
#pragma GCC unroll 8
    for (int a = 0; a < NA; ++a)
#pragma GCC unroll 8
      for (int c = 0; c < NW; ++c) {
        acc[a][c] = _mm256_setzero_ps();
        off[a][c] = 0.0f;
      }
    for (int64_t b = 0; b < n_blocks; ++b) {
      __m256i codes[NW];
      float d[NW], m[NW];
#pragma GCC unroll 8
      for (int c = 0; c < NW; ++c) {
        const uint8_t* blk = wr[c] + b * L::kBytes;
        codes[c] = L::codes(blk);
        d[c] = half_to_float(blk);
        m[c] = L::offset(blk, d[c]);
      }
#pragma GCC unroll 8
      for (int a = 0; a < NA; ++a) {
        const int64_t i = i0 + a;
        __m256i q[kDigits];
#pragma GCC unroll 2
        for (int k = 0; k < kDigits; ++k) {
          const int8_t* digit = x.q8x32.qs + (i * kDigits + k) * x.cols + b * kQK;
          q[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(digit));
        }
        const float da = x.q8x32.ds[(i * n_blocks + b) * 2];
        const float sa = x.q8x32.ds[(i * n_blocks + b) * 2 + 1];
#pragma GCC unroll 8
        for (int c = 0; c < NW; ++c) {
          __m256i pairs[kDigits];
#pragma GCC unroll 2
          for (int k = 0; k < kDigits; ++k) {
            if constexpr (L::kSigned) {
              pairs[k] = _mm256_maddubs_epi16(_mm256_abs_epi8(codes[c]), _mm256_sign_epi8(q[k], codes[c]));
            } else {
              pairs[k] = _mm256_maddubs_epi16(codes[c], q[k]);
            }
          }
          __m256i dot32 = pair_sums(pairs[kDigits - 1]);
          if constexpr (kDigits == 2)
            dot32 = _mm256_add_epi32(_mm256_madd_epi16(pairs[0], _mm256_set1_epi16(kDigitBase)), dot32);
          const __m256 dot = _mm256_cvtepi32_ps(dot32);
          acc[a][c] = _mm256_fmadd_ps(dot, _mm256_set1_ps(d[c] * da), acc[a][c]);
          if constexpr (!L::kSigned) off[a][c] = std::fma(m[c], sa, off[a][c]);
        }
      }
    }
#pragma GCC unroll 8
    for (int a = 0; a < NA; ++a)
#pragma GCC unroll 8
      for (int c = 0; c < NW; ++c) y[(i0 + a) * ldy + r0 + c] = hsum(acc[a][c]) + off[a][c];
  }
};

template <DType T, int kDigits>
void gemm_legacy(const WeightRows& w, const Activations& x, float* y, int64_t ldy) {
  run_tiles<2, 2, 4>(LegacyKernel<T, kDigits>{w, x, y, ldy}, w.n_rows, x.n);
}

template <int kDigits>
Kernel find(DType t) {
  switch (t) {
    case DType::Q4_0: return {ActFormat::kQ8x32, gemm_legacy<DType::Q4_0, kDigits>};
    case DType::Q4_1: return {ActFormat::kQ8x32, gemm_legacy<DType::Q4_1, kDigits>};
    case DType::Q5_0: return {ActFormat::kQ8x32, gemm_legacy<DType::Q5_0, kDigits>};
    case DType::Q5_1: return {ActFormat::kQ8x32, gemm_legacy<DType::Q5_1, kDigits>};
    case DType::Q8_0: return {ActFormat::kQ8x32, gemm_legacy<DType::Q8_0, kDigits>};
    default: return {};
  }
}

}  // namespace

Kernel avx2_find_legacy_kernel(DType t, int digits) { return digits == 2 ? find<2>(t) : find<1>(t); }

}  // namespace tern::cpu::detail
