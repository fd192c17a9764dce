// AVX-512 rows of the fast row-wise ops (elementwise.h). Tails use masked loads, so every row
// length works and a row's arithmetic depends only on the row.
#include <immintrin.h>

#include <cmath>

#include "backends/cpu/elementwise.h"
#include "backends/cpu/matmul_simd_avx512.h"
#include "backends/cpu/simd_math_avx512.h"

namespace tern::cpu::detail {

void rms_norm_row_avx512(const float* x, const float* w, float eps, int64_t cols, float* out) {
  // Four accumulators (a chain of one would be latency-bound), combined in a fixed order.
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  int64_t c = 0;
  for (; c + 64 <= cols; c += 64)
    for (int k = 0; k < 4; ++k) {
      const __m512 v = _mm512_loadu_ps(x + c + 16 * k);
      acc[k] = _mm512_fmadd_ps(v, v, acc[k]);
    }
  for (; c < cols; c += 16) {
    const __m512 v = _mm512_maskz_loadu_ps(mask16(cols - c), x + c);
    acc[0] = _mm512_fmadd_ps(v, v, acc[0]);
  }
  const float sum_sq = hsum(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
  const __m512 inv = _mm512_set1_ps(1.0f / std::sqrt(sum_sq / static_cast<float>(cols) + eps));
  for (c = 0; c < cols; c += 16) {
    const __mmask16 m = mask16(cols - c);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + c), inv);
    _mm512_mask_storeu_ps(out + c, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + c)));
  }
}

void swiglu_row_avx512(const float* gate, const float* up, int64_t cols, float* out) {
  for (int64_t c = 0; c < cols; c += 16) {
    const __mmask16 m = mask16(cols - c);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + c);
    const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g))));
    _mm512_mask_storeu_ps(out + c, m, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(m, up + c)));
  }
}

void add_row_avx512(const float* a, const float* b, int64_t cols, float* out) {
  for (int64_t c = 0; c < cols; c += 16) {
    const __mmask16 m = mask16(cols - c);
    _mm512_mask_storeu_ps(out + c, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, a + c), _mm512_maskz_loadu_ps(m, b + c)));
  }
}

}  // namespace tern::cpu::detail
