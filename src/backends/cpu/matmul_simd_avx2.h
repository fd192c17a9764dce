// Small AVX2 helpers shared by the matmul_*_avx2.cpp kernels. Include only from files built with
// the AVX2 flags. Internal linkage on purpose: see matmul_kquant_layout.h.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace tern::cpu::detail {
namespace {

// Sum of 8 lanes in one fixed order (halves, then pairs); part of every per-output sequence.
inline float hsum(__m256 v) {
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}

inline int32_t hsum_epi32(__m256i v) {
  __m128i q = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  q = _mm_add_epi32(q, _mm_shuffle_epi32(q, _MM_SHUFFLE(1, 0, 3, 2)));
  q = _mm_add_epi32(q, _mm_shuffle_epi32(q, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(q);
}

inline float hmax(__m256 v) {
  __m128 q = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  q = _mm_max_ps(q, _mm_movehl_ps(q, q));
  q = _mm_max_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}

// Lane mask for a tail of n < 8 elements (maskload / maskstore).
inline __m256i tail_mask(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Sum of the int16 pairs of maddubs output as 8 int32 lanes.
inline __m256i pair_sums(__m256i v16) { return _mm256_madd_epi16(v16, _mm256_set1_epi16(1)); }

}  // namespace
}  // namespace tern::cpu::detail
