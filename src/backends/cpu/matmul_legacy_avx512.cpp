// AVX-512 (VNNI) level: legacy-quant kernels (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) against q8x32
// activations.
//
// Every legacy block decodes as x = d * u + m with an unsigned code u (q4: 0..15, q5: 0..31,
// q8_0: q + 128) and a per-block offset m (q4_0: -8d, q5_0: -16d, q8_0: -128d, q4_1/q5_1: the
// stored min). So a block's dot with activation block (da, q, s = da * sum q) is
//   (d * da) * sum(u * q) + m * s,
// and sum(u * q) is what vpdpbusd computes (u8 x s8) with no sign tricks.
//
// Per output, over groups of up to 8 blocks, in order: one gather fetches the 8 blocks' {d, m}
// fp16 pairs, which multiply the activation's {d_a, s} pairs lane by lane into
// {d * d_a, m * s} (offset-only types build m from d); the m * s lanes are added into acc. Then
// for each pair of blocks the 64 codes meet the 64 activation bytes in one vpdpbusd (lanes 0-7
// hold block 2p, lanes 8-15 block 2p+1) and acc = fma(float(dot), d * d_a expanded to those
// lanes, acc). One hsum at the end.
//
// note: q4 codes skip the shift of the high nibbles: the byte is masked to 0xf0, i.e. 16 * u, and
// those lanes take (d * d_a) / 16 as their scale. Both factors are exact rescalings (a power of
// two, an integer below 2^24), so the product is the same float as (d * d_a) * dot.
#include <immintrin.h>

#include "backends/cpu/matmul_kernels.h"
#include "backends/cpu/matmul_simd_avx512.h"
#include "backends/cpu/matmul_tiling.h"
#include "core/quant_blocks.h"

namespace tern::cpu::detail {
namespace {

// Per type: block size, how m is formed, and codes(b0, b1) = the codes of two blocks as 64 bytes
// in element order (b1 may equal b0 for an odd tail; the activation side is zero there).
template <DType T>
struct Legacy;

// qs[l] holds element l (low nibble) and l + 16 (high nibble). Returns 128-bit lanes
// {u(q0 low), 16 * u(q0 high), u(q1 low), 16 * u(q1 high)}: see the note above.
inline __m512i nibble_pair_x16(const uint8_t* q0, const uint8_t* q1) {
  // q0 q0 q1 q1 from two broadcast loads: the merge runs on either vector port, where an insert
  // would be one more shuffle on the busiest one.
  __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q0)));
  v = _mm512_mask_broadcast_i32x4(v, 0xff00, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q1)));
  const __m512i nibble_masks = _mm512_set_epi64(-0x0f0f0f0f0f0f0f10ll, -0x0f0f0f0f0f0f0f10ll, 0x0f0f0f0f0f0f0f0fll,
                                                0x0f0f0f0f0f0f0f0fll, -0x0f0f0f0f0f0f0f10ll, -0x0f0f0f0f0f0f0f10ll,
                                                0x0f0f0f0f0f0f0f0fll, 0x0f0f0f0f0f0f0f0fll);
  return _mm512_and_si512(v, nibble_masks);
}

// Same lanes with the high nibbles shifted down: {u(q0 low), u(q0 high), u(q1 low), u(q1 high)}.
inline __m512i nibble_pair(const uint8_t* q0, const uint8_t* q1) {
  __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q0)));
  v = _mm512_mask_broadcast_i32x4(v, 0xff00, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q1)));
  v = _mm512_mask_srli_epi16(v, 0xff00ff00u, v, 4);  // lanes 1 and 3: high nibbles
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
  static constexpr float kOffset = -8.0f;   // m = kOffset * d
  static constexpr bool kHighTimes16 = true;  // codes of lanes 4-7 and 12-15 are 16 * u
  static __m512i codes(const uint8_t* b0, const uint8_t* b1) { return nibble_pair_x16(b0 + 2, b1 + 2); }
};
template <>
struct Legacy<DType::Q4_1> {
  static constexpr int kBytes = sizeof(BlockQ4_1);
  static constexpr bool kStoredMin = true;
  static constexpr float kOffset = 0.0f;
  static constexpr bool kHighTimes16 = true;
  static __m512i codes(const uint8_t* b0, const uint8_t* b1) { return nibble_pair_x16(b0 + 4, b1 + 4); }
};
template <>
struct Legacy<DType::Q5_0> {
  static constexpr int kBytes = sizeof(BlockQ5_0);
  static constexpr bool kStoredMin = false;
  static constexpr float kOffset = -16.0f;
  static constexpr bool kHighTimes16 = false;
  static __m512i codes(const uint8_t* b0, const uint8_t* b1) {
    return add_high_bits(nibble_pair(b0 + 6, b1 + 6), b0 + 2, b1 + 2);
  }
};
template <>
struct Legacy<DType::Q5_1> {
  static constexpr int kBytes = sizeof(BlockQ5_1);
  static constexpr bool kStoredMin = true;
  static constexpr float kOffset = 0.0f;
  static constexpr bool kHighTimes16 = false;
  static __m512i codes(const uint8_t* b0, const uint8_t* b1) {
    return add_high_bits(nibble_pair(b0 + 8, b1 + 8), b0 + 4, b1 + 4);
  }
};
template <>
struct Legacy<DType::Q8_0> {
  static constexpr int kBytes = sizeof(BlockQ8_0);
  static constexpr bool kStoredMin = false;
  static constexpr float kOffset = -128.0f;
  static constexpr bool kHighTimes16 = false;
  static __m512i codes(const uint8_t* b0, const uint8_t* b1) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + 2));
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
    return _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));  // q + 128
  }
};

constexpr int kGroupBlocks = 8;  // blocks per scale gather: 8 {d, m} fp16 pairs = 16 float lanes

template <DType T>
struct LegacyKernel {
  using L = Legacy<T>;
  const WeightRows& w;
  const Activations& x;
  float* y;
  int64_t ldy;

  // One pair of blocks (kFull) or a lone last block: codes meet activations, scaled into acc.
  // scale: {d * d_a, m * s} per block; scale16: the same / 16 (kHighTimes16 only).
  template <int NA, int NW, bool kFull>
  [[gnu::always_inline]] static inline void pair_step(const uint8_t* const (&b0)[NW], const int8_t* const (&q)[NA],
                                                      __m512i lanes, const __m512 (&scale)[NA][NW],
                                                      const __m512 (&scale16)[NA][NW], __m512 (&acc)[NA][NW]) {
    __m512i codes[NW];
#pragma GCC unroll 8
    for (int c = 0; c < NW; ++c) codes[c] = L::codes(b0[c], kFull ? b0[c] + L::kBytes : b0[c]);
#pragma GCC unroll 8
    for (int a = 0; a < NA; ++a) {
      const __m512i av = kFull ? _mm512_loadu_si512(q[a])
                               : _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[a])));
#pragma GCC unroll 8
      for (int c = 0; c < NW; ++c) {
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes[c], av);
        const __m512 lane_scale = L::kHighTimes16 ? _mm512_permutex2var_ps(scale[a][c], lanes, scale16[a][c])
                                                  : _mm512_permutexvar_ps(lanes, scale[a][c]);
        acc[a][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), lane_scale, acc[a][c]);
      }
    }
  }

  template <int NA, int NW>
  void tile(int64_t r0, int64_t i0) const {
    const int64_t n_blocks = x.cols / kQK;
    const uint8_t* wr[NW];
#pragma GCC unroll 8
    for (int c = 0; c < NW; ++c) wr[c] = w.data + static_cast<size_t>(r0 + c) * w.row_stride;
    const int8_t* qa[NA];
    const float* ds[NA];
#pragma GCC unroll 8
    for (int a = 0; a < NA; ++a) {
      qa[a] = x.q8x32.qs + (i0 + a) * x.cols;
      ds[a] = x.q8x32.ds + (i0 + a) * n_blocks * 2;
    }
    const __m256i block_offsets =
        _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(L::kBytes));
    // Lanes of the {d * d_a, m * s} vector that hold blocks 2p and 2p + 1 (p = 0; +4 per pair);
    // 16 + lane selects the / 16 copy (for the 16 * u code lanes).
    const __m512i first_pair_lanes = L::kHighTimes16
                                         ? _mm512_setr_epi32(0, 0, 0, 0, 16, 16, 16, 16, 2, 2, 2, 2, 18, 18, 18, 18)
                                         : _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
    constexpr __mmask16 kOddLanes = 0xaaaa;

    __m512 acc[NA][NW];
#pragma GCC unroll 8
    for (int a = 0; a < NA; ++a)
#pragma GCC unroll 8
      for (int c = 0; c < NW; ++c) acc[a][c] = _mm512_setzero_ps();

    for (int64_t g = 0; g < n_blocks; g += kGroupBlocks) {
      const int nb = static_cast<int>(n_blocks - g < kGroupBlocks ? n_blocks - g : kGroupBlocks);
      const __mmask8 block_mask = static_cast<__mmask8>((1u << nb) - 1u);
      const __mmask16 lane_mask = static_cast<__mmask16>((1u << (2 * nb)) - 1u);
      // Per weight row: {d, m} per block as floats.
      __m512 dm[NW];
#pragma GCC unroll 8
      for (int c = 0; c < NW; ++c) {
        const __m256i h = _mm256_mmask_i32gather_epi32(_mm256_setzero_si256(), block_mask, block_offsets,
                                                       wr[c] + g * L::kBytes, 1);
        dm[c] = _mm512_cvtph_ps(h);
        if constexpr (!L::kStoredMin) {  // odd lanes hold code bytes: replace them by kOffset * d
          dm[c] = _mm512_moveldup_ps(dm[c]);
          dm[c] = _mm512_mask_mul_ps(dm[c], kOddLanes, dm[c], _mm512_set1_ps(L::kOffset));  // exact
        }
      }
      __m512 scale[NA][NW], scale16[NA][NW];  // {d * d_a, m * s} per block, and / 16
#pragma GCC unroll 8
      for (int a = 0; a < NA; ++a) {
        const __m512 act = _mm512_maskz_loadu_ps(lane_mask, ds[a] + 2 * g);
#pragma GCC unroll 8
        for (int c = 0; c < NW; ++c) {
          scale[a][c] = _mm512_mul_ps(dm[c], act);
          acc[a][c] = _mm512_mask_add_ps(acc[a][c], kOddLanes, acc[a][c], scale[a][c]);
          if constexpr (L::kHighTimes16) scale16[a][c] = _mm512_mul_ps(scale[a][c], _mm512_set1_ps(1.0f / 16));
        }
      }
      __m512i lanes = first_pair_lanes;
      const uint8_t* b0[NW];
      const int8_t* q[NA];
      for (int p = 0; 2 * p < nb; ++p) {
#pragma GCC unroll 8
        for (int c = 0; c < NW; ++c) b0[c] = wr[c] + (g + 2 * p) * L::kBytes;
#pragma GCC unroll 8
        for (int a = 0; a < NA; ++a) q[a] = qa[a] + (g + 2 * p) * kQK;
        if (2 * p + 1 < nb) {
          pair_step<NA, NW, true>(b0, q, lanes, scale, scale16, acc);
        } else {
          pair_step<NA, NW, false>(b0, q, lanes, scale, scale16, acc);
        }
        lanes = _mm512_add_epi32(lanes, _mm512_set1_epi32(4));
      }
    }
#pragma GCC unroll 8
    for (int a = 0; a < NA; ++a)
#pragma GCC unroll 8
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
