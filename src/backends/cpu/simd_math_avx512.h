// Vector math for the AVX-512 kernels (attention softmax, SwiGLU). Include only from files built
// with the AVX-512 flags. Internal linkage on purpose (see matmul_kquant_layout.h).
#pragma once

#include <immintrin.h>

namespace tern::cpu::detail {
namespace {

// exp(x), 16 lanes: Cody-Waite reduction to r in [-ln2/2, ln2/2], a degree-6 Taylor polynomial
// (relative error < 2e-7, about 2 ulp), scaled by 2^n. x is clamped to [-87, 88]: below, it
// returns ~1.6e-38 where the true value is smaller still; above, ~1.7e38 instead of overflowing
// (callers divide by 1 + exp(x) or subtract a max first, so neither end matters).
inline __m512 exp_ps(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

}  // namespace
}  // namespace tern::cpu::detail
