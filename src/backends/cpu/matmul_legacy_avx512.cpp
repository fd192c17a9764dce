// AVX-512 (VNNI) level: legacy-quant kernels (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) against q8x32
// activations.
//
// Every legacy block decodes as x = d * u + m with an unsigned code u (q4: 0..15, q5: 0..31,
// q8_0: q + 128) and a per-block offset m (q4_0: -8d, q5_0: -16d, q8_0: -128d, q4_1/q5_1: the
// stored min). So a block's dot with activation block (da, q, s = da * sum q) is
//   (d * da) * sum(u * q) + m * s,
// and sum(u * q) is what vpdpbusd computes (u8 x s8) with no sign tricks.
//
// Per output, over groups of up to 16 blocks, in order: one gather fetches the 16 blocks' (d, m)
// fp16 pair; acc = fma(m, s, acc) over the 16 block lanes; then for each pair of blocks the 64
// codes meet the 64 activation bytes in one vpdpbusd (lanes 0-7 hold block 2p, lanes 8-15 block
// 2p+1) and acc = fma(float(dot), d * da expanded to those lanes, acc). One hsum at the end.
#include <immintrin.h>

#include "backends/cpu/matmul_kernels.h"
#include "backends/cpu/matmul_simd_avx512.h"
#include "backends/cpu/matmul_tiling.h"
#include "core/quant_blocks.h"

namespace tern::cpu::detail {
namespace {

// Codes of two blocks as 64 bytes in element order (block b1 may equal b0 for an odd tail; the
// activation side is zero there).
template <DType T>
struct Legacy;

// qs[l] holds element l (low nibble) and l + 16 (high nibble).
inline __m512i nibble_pair(const uint8_t* q0, const uint8_t* q1) {
  const __m256i a = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q0)));
  const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q1)));
  __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);  // 128-bit lanes: q0 q0 q1 q1
  v = _mm512_mask_srli_epi16(v, 0xff00ff00u, v, 4);                 // lanes 1 and 3: high nibbles
  return _mm512_and_si512(v, _mm512_set1_epi8(0x0f));
}

// q5: bit 4 of element l is bit l of the 32-bit qh.
inline __m512i add_high_bits(__m512i v, const uint8_t* qh0, const uint8_t* qh1) {
  uint32_t h0, h1;
  __builtin_memcpy(&h0, qh0, 4);
  __builtin_memcpy(&h1, qh1, 4);
  const __mmask64 k = _cvtu64_mask64(static_cast<uint64_t>(h0) | (static_cast<uint64_t>(h1) << 32));
  return _mm512_mask_add_epi8(v, k, v, _mm512_set1_epi8(0x10));
}

template <>
struct Legacy<DType::Q4_0> {
  static constexpr int kBytes = sizeof(BlockQ4_0);
  static constexpr bool kStoredMin = false;
  static constexpr float kOffset = -8.0f;  // m = kOffset * d
  static __m512i codes(const uint8_t* b0, const uint8_t* b1) { return nibble_pair(b0 + 2, b1 + 2); }
};
template <>
struct Legacy<DType::Q4_1> {
  static constexpr int kBytes = sizeof(BlockQ4_1);
  static constexpr bool kStoredMin = true;
  static constexpr float kOffset = 0.0f;
  static __m512i codes(const uint8_t* b0, const uint8_t* b1) { return nibble_pair(b0 + 4, b1 + 4); }
};
template <>
struct Legacy<DType::Q5_0> {
  static constexpr int kBytes = sizeof(BlockQ5_0);
  static constexpr bool kStoredMin = false;
  static constexpr float kOffset = -16.0f;
  static __m512i codes(const uint8_t* b0, const uint8_t* b1) {
    return add_high_bits(nibble_pair(b0 + 6, b1 + 6), b0 + 2, b1 + 2);
  }
};
template <>
struct Legacy<DType::Q5_1> {
  static constexpr int kBytes = sizeof(BlockQ5_1);
  static constexpr bool kStoredMin = true;
  static constexpr float kOffset = 0.0f;
  static __m512i codes(const uint8_t* b0, const uint8_t* b1) {
    return add_high_bits(nibble_pair(b0 + 8, b1 + 8), b0 + 4, b1 + 4);
  }
};
template <>
struct Legacy<DType::Q8_0> {
  static constexpr int kBytes = sizeof(BlockQ8_0);
  static constexpr bool kStoredMin = false;
  static constexpr float kOffset = -128.0f;
  static __m512i codes(const uint8_t* b0, const uint8_t* b1) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + 2));
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
    return _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));  // q + 128
  }
};

constexpr int kGroupBlocks = 16;  // blocks per scale gather (one per lane)

template <DType T>
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
    for (int c = 0; c < NW; ++c) wr[c] = w.data + static_cast<size_t>(r0 + c) * w.row_stride;
    const int8_t* qa[NA];
    const float* da[NA];
    const float* sa[NA];
    for (int a = 0; a < NA; ++a) {
      qa[a] = x.q8x32.qs + (i0 + a) * x.cols;
      da[a] = x.q8x32.d + (i0 + a) * n_blocks;
      sa[a] = x.q8x32.s + (i0 + a) * n_blocks;
    }
    const __m512i block_offsets = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(L::kBytes));
    const __m512i pair_lanes = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);

    __m512 acc[NA][NW];
    for (int a = 0; a < NA; ++a)
      for (int c = 0; c < NW; ++c) acc[a][c] = _mm512_setzero_ps();

    for (int64_t g = 0; g < n_blocks; g += kGroupBlocks) {
      const int nb = static_cast<int>(n_blocks - g < kGroupBlocks ? n_blocks - g : kGroupBlocks);
      const __mmask16 m = mask16(nb);
      // Per weight row: the group's block scales d and offsets m, one lane per block.
      __m512 dw[NW], mw[NW];
      for (int c = 0; c < NW; ++c) {
        const __m512i dm = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, block_offsets,
                                                       wr[c] + g * L::kBytes, 1);
        dw[c] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));
        if constexpr (L::kStoredMin) {
          mw[c] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));
        } else {
          mw[c] = _mm512_mul_ps(dw[c], _mm512_set1_ps(L::kOffset));  // exact: a power of two
        }
      }
      __m512 scale[NA][NW];  // d_w * d_a per block lane
      for (int a = 0; a < NA; ++a) {
        const __m512 dav = _mm512_maskz_loadu_ps(m, da[a] + g);
        const __m512 sav = _mm512_maskz_loadu_ps(m, sa[a] + g);
        for (int c = 0; c < NW; ++c) {
          scale[a][c] = _mm512_mul_ps(dw[c], dav);
          acc[a][c] = _mm512_fmadd_ps(mw[c], sav, acc[a][c]);
        }
      }
      __m512i lanes = pair_lanes;
      for (int p = 0; 2 * p < nb; ++p) {
        const bool pair = 2 * p + 1 < nb;
        __m512i codes[NW];
        for (int c = 0; c < NW; ++c) {
          const uint8_t* b0 = wr[c] + (g + 2 * p) * L::kBytes;
          codes[c] = L::codes(b0, pair ? b0 + L::kBytes : b0);
        }
        for (int a = 0; a < NA; ++a) {
          const int8_t* q = qa[a] + (g + 2 * p) * kQK;
          const __m512i av = pair ? _mm512_loadu_si512(q)
                                  : _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
          for (int c = 0; c < NW; ++c) {
            const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes[c], av);
            acc[a][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(lanes, scale[a][c]), acc[a][c]);
          }
        }
        lanes = _mm512_add_epi32(lanes, _mm512_set1_epi32(2));
      }
    }
    for (int a = 0; a < NA; ++a)
      for (int c = 0; c < NW; ++c) y[(i0 + a) * ldy + r0 + c] = hsum(acc[a][c]);
  }
};

template <DType T>
void gemm_legacy(const WeightRows& w, const Activations& x, float* y, int64_t ldy) {
  run_tiles<4, 2, 4>(LegacyKernel<T>{w, x, y, ldy}, w.n_rows, x.n);
}

}  // namespace

Kernel avx512_find_legacy_kernel(DType t) {
  switch (t) {
    case DType::Q4_0: return {ActFormat::kQ8x32, gemm_legacy<DType::Q4_0>};
    case DType::Q4_1: return {ActFormat::kQ8x32, gemm_legacy<DType::Q4_1>};
    case DType::Q5_0: return {ActFormat::kQ8x32, gemm_legacy<DType::Q5_0>};
    case DType::Q5_1: return {ActFormat::kQ8x32, gemm_legacy<DType::Q5_1>};
    case DType::Q8_0: return {ActFormat::kQ8x32, gemm_legacy<DType::Q8_0>};
    default: return {};
  }
}

}  // namespace tern::cpu::detail
