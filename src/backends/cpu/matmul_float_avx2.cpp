// AVX2 level: float-weight kernels (F32, F16, BF16) and the activation quantizers (8 and 16 bit).
//
// Float kernels, per output: one 8-lane accumulator; element j goes to lane j % 8 through
// acc = fma(w[j..j+8), x[j..j+8), acc) in ascending j (a tail is zero-padded), then hsum.
#include <cmath>
#include <immintrin.h>

#include "backends/cpu/matmul_kernels.h"
#include "backends/cpu/matmul_simd_avx2.h"
#include "backends/cpu/matmul_tiling.h"

namespace tern::cpu::detail {
namespace {

// 8 weights from element j as floats; `n` < 8 for a zero-padded tail.
template <DType T>
inline __m256 load_weights(const uint8_t* row, int64_t j, int64_t n) {
  if constexpr (T == DType::F32) {
    const float* p = reinterpret_cast<const float*>(row) + j;
    return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, tail_mask(n));
  } else {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + j;
    __m128i h;
    if (n >= 8) {
      h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    } else {
      alignas(16) uint16_t tmp[8] = {};
      for (int64_t k = 0; k < n; ++k) tmp[k] = p[k];
      h = _mm_load_si128(reinterpret_cast<const __m128i*>(tmp));
    }
    if constexpr (T == DType::F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));  // bf16: high half of f32
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
    __m256 acc[NA][NW];
#pragma GCC unroll 8
    for (int a = 0; a < NA; ++a)
#pragma GCC unroll 8
      for (int c = 0; c < NW; ++c) acc[a][c] = _mm256_setzero_ps();
    for (int64_t j = 0; j < x.cols; j += 8) {
      const int64_t n = x.cols - j;
      __m256 wv[NW];
#pragma GCC unroll 8
      for (int c = 0; c < NW; ++c) wv[c] = load_weights<T>(wr[c], j, n);
#pragma GCC unroll 8
      for (int a = 0; a < NA; ++a) {
        const __m256 xv = n >= 8 ? _mm256_loadu_ps(xr[a] + j) : _mm256_maskload_ps(xr[a] + j, tail_mask(n));
#pragma GCC unroll 8
        for (int c = 0; c < NW; ++c) acc[a][c] = _mm256_fmadd_ps(wv[c], xv, acc[a][c]);
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
  run_tiles<3, 4, 8>(FloatKernel<T>{w, x, y, ldy}, w.n_rows, x.n);
}

// Quantizes `len` floats (a multiple of 32, at most 256) to D digits per element with the scalar
// quantizer's bytes (see matmul_float_avx512.cpp). Digit k goes to qs + k * plane_stride; its
// 8-lane int32 chunks to chunks[k].
template <int kDigits>
inline float quantize_block(const float* x, int len, int8_t* qs, int64_t plane_stride, __m256i (*chunks)[32]) {
  constexpr float kQMax = kDigits == 1 ? 127.0f : 32512.0f;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 vmax = _mm256_setzero_ps();
  for (int j = 0; j < len; j += 8) vmax = _mm256_max_ps(vmax, _mm256_and_ps(_mm256_loadu_ps(x + j), abs_mask));
  const float amax = hmax(vmax);
  const float d = amax / kQMax;
  const float inv = kQMax / amax;  // inf for a zero or < ~1e-34 block: zeros (matmul_scalar.cpp)
  const __m256 id = _mm256_set1_ps(std::isfinite(inv) ? inv : 0.0f);
  for (int j = 0; j < len; j += 8) {
    const __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j), id));
    if constexpr (kDigits == 1) {
      chunks[0][j / 8] = q;
    } else {
      const __m256i hi = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_cvtepi32_ps(q), _mm256_set1_ps(1.0f / kDigitBase)));
      chunks[0][j / 8] = hi;
      chunks[1][j / 8] = _mm256_sub_epi32(q, _mm256_mullo_epi32(hi, _mm256_set1_epi32(kDigitBase)));
    }
  }
  // Pack 32 lanes at a time to bytes; packs works per 128-bit lane, the permute restores order.
  for (int k = 0; k < kDigits; ++k) {
    for (int j = 0; j < len; j += 32) {
      const __m256i w01 = _mm256_packs_epi32(chunks[k][j / 8], chunks[k][j / 8 + 1]);
      const __m256i w23 = _mm256_packs_epi32(chunks[k][j / 8 + 2], chunks[k][j / 8 + 3]);
      const __m256i b = _mm256_packs_epi16(w01, w23);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + k * plane_stride + j),
                          _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    }
  }
  return d;
}

template <int kDigits>
void quantize_x32(const float* x, int64_t cols, int8_t* qs, float* ds) {
  for (int64_t b = 0; b < cols / kQ8x32Block; ++b) {
    __m256i chunks[kDigits][32];
    const float d = quantize_block<kDigits>(x + b * kQ8x32Block, kQ8x32Block, qs + b * kQ8x32Block, cols, chunks);
    int32_t sum = 0;  // sum(q), exact (see matmul_float_avx512.cpp)
    for (int k = 0; k < kDigits; ++k) {
      const __m256i c =
          _mm256_add_epi32(_mm256_add_epi32(chunks[k][0], chunks[k][1]), _mm256_add_epi32(chunks[k][2], chunks[k][3]));
      sum = sum * kDigitBase + hsum_epi32(c);
    }
    ds[2 * b] = d;
    ds[2 * b + 1] = d * static_cast<float>(sum);
  }
}

template <int kDigits>
void quantize_x256(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bsums) {
  constexpr int kGroupsPerBlock = kQ8x256Block / kQ8x256SumGroup;
  for (int64_t b = 0; b < cols / kQ8x256Block; ++b) {
    __m256i chunks[kDigits][32];
    d[b] = quantize_block<kDigits>(x + b * kQ8x256Block, kQ8x256Block, qs + b * kQ8x256Block, cols, chunks);
    for (int k = 0; k < kDigits; ++k)
      for (int g = 0; g < kGroupsPerBlock; ++g)
        bsums[k * (cols / kQ8x256SumGroup) + b * kGroupsPerBlock + g] =
            static_cast<int16_t>(hsum_epi32(_mm256_add_epi32(chunks[k][2 * g], chunks[k][2 * g + 1])));
  }
}

}  // namespace

void avx2_quantize_q8x32(const float* x, int64_t cols, int8_t* qs, float* ds) { quantize_x32<1>(x, cols, qs, ds); }
void avx2_quantize_q16x32(const float* x, int64_t cols, int8_t* qs, float* ds) { quantize_x32<2>(x, cols, qs, ds); }
void avx2_quantize_q8x256(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bsums) {
  quantize_x256<1>(x, cols, qs, d, bsums);
}
void avx2_quantize_q16x256(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bsums) {
  quantize_x256<2>(x, cols, qs, d, bsums);
}

Kernel avx2_find_float_kernel(DType t, int /*digits*/) {
  switch (t) {
    case DType::F32: return {ActFormat::kF32, gemm_float<DType::F32>};
    case DType::F16: return {ActFormat::kF32, gemm_float<DType::F16>};
    case DType::BF16: return {ActFormat::kF32, gemm_float<DType::BF16>};
    default: return {};
  }
}

}  // namespace tern::cpu::detail
