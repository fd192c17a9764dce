// AVX2 level: float-weight kernels (F32, F16, BF16) and the activation quantizers.
//
// Float kernels, per output: one 8-lane accumulator; element j goes to lane j % 8 through
// acc = fma(w[j..j+8), x[j..j+8), acc) in ascending j (a tail is zero-padded), then hsum.
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

// Quantizes `len` floats (a multiple of 8) to int8 with scale amax / 127; the scalar quantizer's
// bytes (see matmul_float_avx512.cpp). Writes 8-lane int32 chunks to `chunks`.
inline float quantize_block(const float* x, int len, int8_t* q, __m256i* chunks) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 vmax = _mm256_setzero_ps();
  for (int j = 0; j < len; j += 8) vmax = _mm256_max_ps(vmax, _mm256_and_ps(_mm256_loadu_ps(x + j), abs_mask));
  const float amax = hmax(vmax);
  const float d = amax / 127.0f;
  const __m256 id = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
  for (int j = 0; j < len; j += 8) chunks[j / 8] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j), id));
  // Pack 32 lanes at a time to bytes; packs works per 128-bit lane, the permute restores order.
  for (int j = 0; j < len; j += 32) {
    const __m256i w01 = _mm256_packs_epi32(chunks[j / 8], chunks[j / 8 + 1]);
    const __m256i w23 = _mm256_packs_epi32(chunks[j / 8 + 2], chunks[j / 8 + 3]);
    const __m256i b = _mm256_packs_epi16(w01, w23);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + j),
                        _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  }
  return d;
}

}  // namespace

void avx2_quantize_q8x32(const float* x, int64_t cols, int8_t* qs, float* ds) {
  for (int64_t b = 0; b < cols / kQ8x32Block; ++b) {
    __m256i chunks[4];
    const float d = quantize_block(x + b * kQ8x32Block, kQ8x32Block, qs + b * kQ8x32Block, chunks);
    const __m256i sum = _mm256_add_epi32(_mm256_add_epi32(chunks[0], chunks[1]), _mm256_add_epi32(chunks[2], chunks[3]));
    ds[2 * b] = d;
    ds[2 * b + 1] = d * static_cast<float>(hsum_epi32(sum));
  }
}

void avx2_quantize_q8x256(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bsums) {
  constexpr int kChunks = kQ8x256Block / 8;
  for (int64_t b = 0; b < cols / kQ8x256Block; ++b) {
    __m256i chunks[kChunks];
    d[b] = quantize_block(x + b * kQ8x256Block, kQ8x256Block, qs + b * kQ8x256Block, chunks);
    for (int g = 0; g < kQ8x256Block / kQ8x256SumGroup; ++g)
      bsums[b * 16 + g] = static_cast<int16_t>(hsum_epi32(_mm256_add_epi32(chunks[2 * g], chunks[2 * g + 1])));
  }
}

Kernel avx2_find_float_kernel(DType t) {
  switch (t) {
    case DType::F32: return {ActFormat::kF32, gemm_float<DType::F32>};
    case DType::F16: return {ActFormat::kF32, gemm_float<DType::F16>};
    case DType::BF16: return {ActFormat::kF32, gemm_float<DType::BF16>};
    default: return {};
  }
}

}  // namespace tern::cpu::detail
