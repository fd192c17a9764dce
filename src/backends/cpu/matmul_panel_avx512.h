// Panels for the AVX-512 matmul kernels: 16 weight rows computed together, one per vector lane.
// Include only from files built with the AVX-512 flags. Internal linkage on purpose (see
// matmul_kquant_layout.h).
//
// A 4x4 transpose of 128-bit lanes puts panel row 4 * (L % 4) + L / 4 in lane L; loads,
// gathers and stores all follow that order.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "backends/cpu/matmul_simd_avx512.h"
#include "core/check.h"

namespace tern::cpu::detail {
namespace {

constexpr int kPanel = 16;  // weight rows per panel (one per lane)

// Lane L holds panel row 4 * (L % 4) + L / 4 (its own inverse).
inline __m512i lane_rows() { return _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15); }
constexpr int lane_row(int lane) { return 4 * (lane % 4) + lane / 4; }

inline __m128i load16(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

// 16 bytes of each of 16 rows (row i at src + i * stride) -> q[j], lane L = dword j of row
// lane_row(L). note: addresses are formed inline from (src, stride); an array of 16 row pointers
// gets vectorized by the compiler into pointer extracts that cost more than the transpose.
inline void transpose16x4(const uint8_t* src, size_t stride, __m512i (&q)[4]) {
  __m512i r[4];  // r[g], 128-bit lane l: row 4g + l
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    const uint8_t* p = src + 4 * g * stride;
    // note: hides p's derivation so the compiler addresses the four rows as p + {0,1,2,3} *
    // stride instead of keeping 16 strength-reduced row pointers, which spill.
    __asm__("" : "+r"(p));
    __m512i v = _mm512_broadcast_i32x4(load16(p));
    v = _mm512_mask_broadcast_i32x4(v, 0x00f0, load16(p + stride));
    v = _mm512_mask_broadcast_i32x4(v, 0x0f00, load16(p + 2 * stride));
    r[g] = _mm512_mask_broadcast_i32x4(v, 0xf000, load16(p + 3 * stride));
  }
  const __m512i t0 = _mm512_unpacklo_epi32(r[0], r[1]);  // per 128-bit lane: A0 B0 A1 B1
  const __m512i t1 = _mm512_unpackhi_epi32(r[0], r[1]);  // A2 B2 A3 B3
  const __m512i t2 = _mm512_unpacklo_epi32(r[2], r[3]);  // C0 D0 C1 D1
  const __m512i t3 = _mm512_unpackhi_epi32(r[2], r[3]);  // C2 D2 C3 D3
  q[0] = _mm512_unpacklo_epi64(t0, t2);
  q[1] = _mm512_unpackhi_epi64(t0, t2);
  q[2] = _mm512_unpacklo_epi64(t1, t3);
  q[3] = _mm512_unpackhi_epi64(t1, t3);
}

// 16 weight rows, `stride` bytes apart, and the gather offsets of their rows in lane order.
struct PanelRows {
  const uint8_t* base;
  size_t stride;
  __m512i lane_offsets;  // lane L: lane_row(L) * stride
};

inline PanelRows panel_rows(const uint8_t* base, size_t stride) {
  return {base, stride, _mm512_mullo_epi32(lane_rows(), _mm512_set1_epi32(static_cast<int>(stride)))};
}

// Writes the 16 lanes of acc to out[0 .. n_valid) in row order.
inline void store_panel(__m512 acc, float* out, int n_valid) {
  _mm512_mask_storeu_ps(out, mask16(n_valid), _mm512_permutexvar_ps(lane_rows(), acc));
}

// Grow-only, 64-byte-aligned per-thread scratch.
template <typename T>
struct Scratch {
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> mem;
  size_t capacity = 0;
  T* reserve(size_t n) {
    if (n > capacity) {
      const size_t bytes = (sizeof(T) * n + 63) / 64 * 64;
      mem.reset(static_cast<T*>(std::aligned_alloc(64, bytes)));
      TERN_CHECK(mem != nullptr);
      capacity = n;
    }
    return mem.get();
  }
};

// The rows of a panel: n_valid rows from `base`, `stride` apart. A short panel (n_valid < 16) is
// copied into `copy` with its last row repeated, so that every load of all 16 rows stays inside
// the tensor; the extra lanes compute duplicates that store_panel never writes.
inline PanelRows panel_rows_clamped(const uint8_t* base, size_t stride, int n_valid, size_t row_bytes,
                                    Scratch<uint8_t>& copy) {
  if (n_valid == kPanel) return panel_rows(base, stride);
  uint8_t* dst = copy.reserve(row_bytes * kPanel);
  for (int i = 0; i < kPanel; ++i)
    std::memcpy(dst + i * row_bytes, base + static_cast<size_t>(i < n_valid ? i : n_valid - 1) * stride, row_bytes);
  return panel_rows(dst, row_bytes);
}

}  // namespace
}  // namespace tern::cpu::detail
