// k-quant scale unpacking in SSE registers, for the AVX2 and AVX-512 kernels (include only from
// files built with at least the AVX2 flags). Same layouts as matmul_kquant_layout.h; done in
// vector registers because byte-wise stores followed by a vector load stall store forwarding on
// every super-block. Internal linkage on purpose (see matmul_kquant_layout.h).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace tern::cpu::detail {
namespace {

// q4_k / q5_k: 12 packed bytes -> bytes {scale 0..7, min 0..7}. With dwords u0 = bytes 0-3,
// u1 = 4-7, u2 = 8-11: scales 0-3 = u0 & 0x3f.., scales 4-7 = (u2 & 0x0f..) | ((u0 >> 2) & 0x30..),
// mins 0-3 = u1 & 0x3f.., mins 4-7 = ((u2 >> 4) & 0x0f..) | ((u1 >> 2) & 0x30..).
// Reads 16 bytes at `packed` (the 4 after the scales belong to the same block).
inline __m128i unpack_q4k_scales_sse(const uint8_t* packed) {
  const __m128i p = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed));
  const __m128i low_src = _mm_srlv_epi32(_mm_shuffle_epi32(p, _MM_SHUFFLE(2, 1, 2, 0)), _mm_setr_epi32(0, 0, 0, 4));
  const __m128i high_src = _mm_srli_epi32(_mm_shuffle_epi32(p, _MM_SHUFFLE(1, 1, 0, 0)), 2);
  const __m128i low = _mm_and_si128(low_src, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
  const __m128i high = _mm_and_si128(high_src, _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
  // low_src lanes: u0, u2, u1, u2 >> 4 -> bytes {sc 0-3, sc 4-7 (low 4 bits), mn 0-3, mn 4-7 (low)}.
  return _mm_or_si128(low, high);
}

// q3_k: 12 packed bytes -> 16 signed scales in [-32, 31]. Scale j's low nibble is nibble j / 8 of
// byte j % 8, its top two bits are bit pair j / 4 of byte 8 + j % 4; stored +32.
// Reads the 16 bytes at packed - 4: the scales end 2 bytes before the block does (only d
// follows), so a load starting at the scales could run past the tensor; the qs before them are
// part of the same block.
inline __m128i unpack_q3k_scales_sse(const uint8_t* packed) {
  const __m128i p = _mm_srli_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(packed - 4)), 4);
  const __m128i low = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(p, _MM_SHUFFLE(1, 0, 1, 0)), _mm_setr_epi32(0, 0, 4, 4)),
                                    _mm_set1_epi8(0x0f));
  const __m128i high = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(p, _MM_SHUFFLE(2, 2, 2, 2)), _mm_setr_epi32(0, 2, 4, 6)),
                                     _mm_set1_epi8(0x03));
  return _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi32(high, 4)), _mm_set1_epi8(32));
}

}  // namespace
}  // namespace tern::cpu::detail
