// AVX-512 level: float-weight kernels (F32, F16, BF16) and the activation quantizers (8 and 16 bit).
//
// Float kernels, per output: one 16-lane accumulator; element j goes to lane j % 16 through
// acc = fma(w[j..j+16), x[j..j+16), acc) in ascending j (the tail masked), then hsum. Tiles of
// several weight and activation rows only share the loads.
#include <cmath>
#include <immintrin.h>

#include "backends/cpu/matmul_kernels.h"
#include "backends/cpu/matmul_simd_avx512.h"
#include "backends/cpu/matmul_tiling.h"

namespace tern::cpu::detail {
namespace {

// 16 weights starting at element j as floats; `m` masks the tail.
template <DType T>
inline __m512 load_weights(const uint8_t* row, int64_t j, __mmask16 m) {
  if constexpr (T == DType::F32) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + j);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(row) + j);
    if constexpr (T == DType::F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));  // bf16: high half of f32
  }
}

template <DType T>
struct FloatKernel {
  const WeightRows& w;
  const Activations& x;
  float* y;
  int64_t ldy;

  template <int NA, int NW>
  void tile(int64_t r0, int64_t i0) const {
    const uint8_t* wr[NW];
#pragma GCC unroll 8
    for (int c = 0; c < NW; ++c) wr[c] = w.data + static_cast<size_t>(r0 + c) * w.row_stride;
    const float* xr[NA];
#pragma GCC unroll 8
    for (int a = 0; a < NA; ++a) xr[a] = x.f32 + (i0 + a) * x.cols;
    __m512 acc[NA][NW];
#pragma GCC unroll 8
    for (int a = 0; a < NA; ++a)
#pragma GCC unroll 8
      for (int c = 0; c < NW; ++c) acc[a][c] = _mm512_setzero_ps();
    for (int64_t j = 0; j < x.cols; j += 16) {
      const __mmask16 m = mask16(x.cols - j);
      __m512 wv[NW];
#pragma GCC unroll 8
      for (int c = 0; c < NW; ++c) wv[c] = load_weights<T>(wr[c], j, m);
#pragma GCC unroll 8
      for (int a = 0; a < NA; ++a) {
        const __m512 xv = _mm512_maskz_loadu_ps(m, xr[a] + j);
#pragma GCC unroll 8
        for (int c = 0; c < NW; ++c) acc[a][c] = _mm512_fmadd_ps(wv[c], xv, acc[a][c]);
      }
    }
#pragma GCC unroll 8
    for (int a = 0; a < NA; ++a)
#pragma GCC unroll 8
      for (int c = 0; c < NW; ++c) y[(i0 + a) * ldy + r0 + c] = hsum(acc[a][c]);
  }
};

template <DType T>
void gemm_float(const WeightRows& w, const Activations& x, float* y, int64_t ldy) {
  run_tiles<4, 4, 8>(FloatKernel<T>{w, x, y, ldy}, w.n_rows, x.n);
}

// Quantizes `len` floats (a multiple of 16, at most 256) to D digits per element with the scalar
// quantizer's bytes (matmul_scalar.cpp): max is exact, x * (q_max / amax) and q * (1 / 255) are
// single IEEE multiplies, and cvtps2dq rounds to nearest even like the scalar magic-number
// rounding. Digit k goes to qs + k * plane_stride; its 16-lane int32 chunks to chunks[k].
template <int kDigits>
inline float quantize_block(const float* x, int len, int8_t* qs, int64_t plane_stride, __m512i (*chunks)[16]) {
  constexpr float kQMax = kDigits == 1 ? 127.0f : 32512.0f;
  __m512 vmax = _mm512_setzero_ps();
  for (int j = 0; j < len; j += 16) vmax = _mm512_max_ps(vmax, _mm512_abs_ps(_mm512_loadu_ps(x + j)));
  const float amax = hmax(vmax);
  const float d = amax / kQMax;
  const float inv = kQMax / amax;  // inf for a zero or < ~1e-34 block: zeros (matmul_scalar.cpp)
  const __m512 id = _mm512_set1_ps(std::isfinite(inv) ? inv : 0.0f);
  for (int j = 0; j < len; j += 16) {
    const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + j), id));
    if constexpr (kDigits == 1) {
      chunks[0][j / 16] = q;
    } else {
      const __m512i hi = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_cvtepi32_ps(q), _mm512_set1_ps(1.0f / kDigitBase)));
      chunks[0][j / 16] = hi;
      chunks[1][j / 16] = _mm512_sub_epi32(q, _mm512_mullo_epi32(hi, _mm512_set1_epi32(kDigitBase)));
    }
#pragma GCC unroll 2
    for (int k = 0; k < kDigits; ++k)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + k * plane_stride + j), _mm512_cvtsepi32_epi8(chunks[k][j / 16]));
  }
  return d;
}

template <int kDigits>
void quantize_x32(const float* x, int64_t cols, int8_t* qs, float* ds) {
  for (int64_t b = 0; b < cols / kQ8x32Block; ++b) {
    __m512i chunks[kDigits][16];
    const float d = quantize_block<kDigits>(x + b * kQ8x32Block, kQ8x32Block, qs + b * kQ8x32Block, cols, chunks);
    int32_t sum = 0;  // sum(q) = sum over digits of 255^(D-1-k) * sum(digit k), exact
#pragma GCC unroll 2
    for (int k = 0; k < kDigits; ++k) sum = sum * kDigitBase + hsum_epi32(_mm512_add_epi32(chunks[k][0], chunks[k][1]));
    ds[2 * b] = d;
    ds[2 * b + 1] = d * static_cast<float>(sum);
  }
}

template <int kDigits>
void quantize_x256(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bsums) {
  constexpr int kChunks = kQ8x256Block / 16;
  static_assert(kQ8x256SumGroup == 16, "one bsum per 16-lane chunk");
  for (int64_t b = 0; b < cols / kQ8x256Block; ++b) {
    __m512i chunks[kDigits][16];
    d[b] = quantize_block<kDigits>(x + b * kQ8x256Block, kQ8x256Block, qs + b * kQ8x256Block, cols, chunks);
#pragma GCC unroll 2
    for (int k = 0; k < kDigits; ++k)
      for (int c = 0; c < kChunks; ++c)
        bsums[k * (cols / kQ8x256SumGroup) + b * kChunks + c] = static_cast<int16_t>(hsum_epi32(chunks[k][c]));
  }
}

}  // namespace

void avx512_quantize_q8x32(const float* x, int64_t cols, int8_t* qs, float* ds) { quantize_x32<1>(x, cols, qs, ds); }
void avx512_quantize_q16x32(const float* x, int64_t cols, int8_t* qs, float* ds) { quantize_x32<2>(x, cols, qs, ds); }
void avx512_quantize_q8x256(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bsums) {
  quantize_x256<1>(x, cols, qs, d, bsums);
}
void avx512_quantize_q16x256(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bsums) {
  quantize_x256<2>(x, cols, qs, d, bsums);
}

Kernel avx512_find_float_kernel(DType t, int /*digits*/) {
  switch (t) {
    case DType::F32: return {ActFormat::kF32, gemm_float<DType::F32>};
    case DType::F16: return {ActFormat::kF32, gemm_float<DType::F16>};
    case DType::BF16: return {ActFormat::kF32, gemm_float<DType::BF16>};
    default: return {};
  }
}

}  // namespace tern::cpu::detail
