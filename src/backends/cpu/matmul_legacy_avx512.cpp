// AVX-512 (VNNI) level: legacy-quant kernels (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) against x32
// activations of 1 or 2 digits (matmul_kernels.h).
//
// Every legacy block decodes as x = d * u + m with an unsigned code u (q4: 0..15, q5: 0..31,
// q8_0: q + 128) and a per-block offset m (q4_0: -8d, q5_0: -16d, q8_0: -128d, q4_1/q5_1: the
// stored min). A block's dot with activation block (d_a, q, s = d_a * sum q) is therefore
//   (d * d_a) * isum + m * s,   isum = sum(u * q), exact in int32 (what vpdpbusd computes).
// With two digits, isum = 255 * sum(u * hi) + sum(u * lo): two vpdpbusd passes over the same
// codes, combined exactly (|isum| <= 32 * 255 * 32512 < 2^31); the float steps do not change.
//
// Panels: 16 weight rows are computed together, one per vector lane (lane L holds panel row
// lane_row(L), the order a 4x4 transpose leaves; matmul_panel_avx512.h). Per block, the rows' codes are transposed so
// that vector k holds, in each lane, codes 4k .. 4k+3 of that lane's row; eight vpdpbusd against
// broadcast activation dwords then leave the 16 rows' exact isum in one register, with no
// horizontal reductions. Per output (lane), per block, in order:
//   acc = fma(float(isum), d * d_a, acc);  acc = fma(m, s, acc).
// Decode (few activation rows) transposes in registers block by block; prefill transposes a
// panel once into scratch and streams every activation row past it. Both run block_step(), so
// an output's float operations do not depend on n (batch invariance).
#include <immintrin.h>

#include <cstring>
#include <memory>

#include "backends/cpu/matmul_kernels.h"
#include "backends/cpu/matmul_panel_avx512.h"
#include "backends/cpu/matmul_simd_avx512.h"
#include "core/check.h"
#include "core/quant_blocks.h"

namespace tern::cpu::detail {
namespace {

constexpr int kCodeVectors = 8;   // vectors of 4 codes per lane per block
constexpr int kFusedMaxRows = 3;  // up to this many activation rows: transpose on the fly

// Nibble codes: qs byte l holds element l (low nibble) and l + 16 (high nibble), so dword j's
// low nibbles are elements 4j .. 4j+3 and its high nibbles elements 16 + 4j ...
inline void split_nibbles(const __m512i (&q)[4], __m512i (&z)[kCodeVectors]) {
  const __m512i low = _mm512_set1_epi8(0x0f);
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    z[j] = _mm512_and_si512(q[j], low);
    z[j + 4] = _mm512_and_si512(_mm512_srli_epi16(q[j], 4), low);
  }
}

// q4: the same with the high nibbles left in place (16 * code): block_step shifts the sum
// instead, one shift per block rather than four.
inline void split_nibbles_x16(const __m512i (&q)[4], __m512i (&z)[kCodeVectors]) {
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    z[j] = _mm512_and_si512(q[j], _mm512_set1_epi8(0x0f));
    z[j + 4] = _mm512_and_si512(q[j], _mm512_set1_epi8(static_cast<char>(0xf0)));
  }
}

// q5: bit 4 of element e is bit e of the row's 32-bit qh (qh: lane L = row lane_row(L)'s qh).
inline void add_high_bits(__m512i qh, __m512i (&z)[kCodeVectors]) {
#pragma GCC unroll 8
  for (int k = 0; k < kCodeVectors; ++k) {
    // Byte k / 2 of each lane's qh holds the bits of elements 4k .. 4k+3 in nibble k % 2.
    const char b = static_cast<char>(k / 2);
    const __m512i spread = _mm512_shuffle_epi8(
        qh, _mm512_broadcast_i32x4(_mm_setr_epi8(b, b, b, b, b + 4, b + 4, b + 4, b + 4, b + 8, b + 8, b + 8, b + 8,
                                                 b + 12, b + 12, b + 12, b + 12)));
    const int s = 4 * (k % 2);
    const __m512i bits = _mm512_set1_epi32(static_cast<int>((1u << s) | (2u << (s + 8)) | (4u << (s + 16)) | (8u << (s + 24))));
    z[k] = _mm512_mask_add_epi8(z[k], _mm512_test_epi8_mask(spread, bits), z[k], _mm512_set1_epi8(0x10));
  }
}

template <DType T>
struct Legacy;

template <>
struct Legacy<DType::Q4_0> {
  static constexpr int kBytes = sizeof(BlockQ4_0);
  static constexpr bool kStoredMin = false;
  static constexpr float kOffset = -8.0f;  // m = kOffset * d
  static constexpr bool kHighTimes16 = true;  // z[4..7] hold 16 * code
  static void codes(const uint8_t* b, size_t stride, __m512i (&z)[kCodeVectors]) {
    __m512i q[4];
    transpose16x4(b + 2, stride, q);
    split_nibbles_x16(q, z);
  }
};
template <>
struct Legacy<DType::Q4_1> {
  static constexpr int kBytes = sizeof(BlockQ4_1);
  static constexpr bool kStoredMin = true;
  static constexpr float kOffset = 0.0f;
  static constexpr bool kHighTimes16 = true;
  static void codes(const uint8_t* b, size_t stride, __m512i (&z)[kCodeVectors]) {
    __m512i q[4];
    transpose16x4(b + 4, stride, q);
    split_nibbles_x16(q, z);
  }
};

// q5 codes also need the 16 rows' qh words: gathered in lane order by the caller's gather of
// the block heads (see Gathered).
template <DType T>
struct Legacy5 {
  static constexpr bool kQ50 = T == DType::Q5_0;
  static constexpr int kBytes = kQ50 ? sizeof(BlockQ5_0) : sizeof(BlockQ5_1);
  static constexpr bool kStoredMin = !kQ50;
  static constexpr float kOffset = kQ50 ? -16.0f : 0.0f;
  static constexpr int kQhOffset = kQ50 ? 2 : 4;
  static constexpr bool kHighTimes16 = false;
  static void codes(const uint8_t* b, size_t stride, __m512i (&z)[kCodeVectors], __m512i qh) {
    __m512i q[4];
    transpose16x4(b + kQhOffset + 4, stride, q);
    split_nibbles(q, z);
    add_high_bits(qh, z);
  }
};
template <>
struct Legacy<DType::Q5_0> : Legacy5<DType::Q5_0> {};
template <>
struct Legacy<DType::Q5_1> : Legacy5<DType::Q5_1> {};

template <>
struct Legacy<DType::Q8_0> {
  static constexpr int kBytes = sizeof(BlockQ8_0);
  static constexpr bool kStoredMin = false;
  static constexpr float kOffset = -128.0f;
  static constexpr bool kHighTimes16 = false;
  static void codes(const uint8_t* b, size_t stride, __m512i (&z)[kCodeVectors]) {
    __m512i q[4];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      transpose16x4(b + 2 + 16 * h, stride, q);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) z[4 * h + j] = _mm512_xor_si512(q[j], _mm512_set1_epi8(static_cast<char>(0x80)));
    }
  }
};

// One block of a panel, ready for block_step: codes plus per-lane d and m.
struct PanelBlock {
  __m512i z[kCodeVectors];
  __m512 d, m;
};

// Decodes block b of a panel.
template <DType T>
inline void load_panel_block(const PanelRows& rows, int64_t b, PanelBlock& out) {
  using L = Legacy<T>;
  const uint8_t* first = rows.base + b * L::kBytes;
  // The first dword of each block: d (low half) and m or the start of qh / qs (high half).
  const __m512i head = _mm512_i32gather_epi32(rows.lane_offsets, first, 1);
  if constexpr (L::kStoredMin) {
    // head as 32 halves {d, m} per lane: convert both halves, then deinterleave.
    const __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(head));
    const __m512 hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(head, 1));
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    out.d = _mm512_permutex2var_ps(lo, even, hi);
    out.m = _mm512_permutex2var_ps(lo, _mm512_add_epi32(even, _mm512_set1_epi32(1)), hi);
  } else {
    out.d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(head));
    out.m = _mm512_mul_ps(out.d, _mm512_set1_ps(L::kOffset));  // exact: a power of two
  }
  if constexpr (T == DType::Q5_0 || T == DType::Q5_1) {
    const __m512i qh = _mm512_i32gather_epi32(rows.lane_offsets, first + L::kQhOffset, 1);
    L::codes(first, rows.stride, out.z, qh);
  } else {
    L::codes(first, rows.stride, out.z);
  }
}

// sum(u * q) of one block against one activation digit (32 int8 at q).
// kHighTimes16: z[4..7] hold 16 * code, so their partial sum is divided back (exactly).
template <bool kHighTimes16>
[[gnu::always_inline]] inline __m512i digit_isum(const PanelBlock& pb, const int8_t* q) {
  // Two dependency chains (codes 0-15 and 16-31): one chain of eight would be latency-bound.
  __m512i isum[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
#pragma GCC unroll 8
  for (int k = 0; k < kCodeVectors; ++k) {
    int32_t word;
    std::memcpy(&word, q + 4 * k, 4);
    isum[k / 4] = _mm512_dpbusd_epi32(isum[k / 4], pb.z[k], _mm512_set1_epi32(word));
  }
  const __m512i high = kHighTimes16 ? _mm512_srai_epi32(isum[1], 4) : isum[1];
  return _mm512_add_epi32(isum[0], high);  // exact
}

// load_panel_block with every code unscaled (q4's high nibbles shifted down once per panel rather
// than their sums once per activation row and digit): the prefill form, measured ~6% faster there.
template <DType T>
inline void load_plain_panel_block(const PanelRows& rows, int64_t b, PanelBlock& out) {
  load_panel_block<T>(rows, b, out);
  if constexpr (Legacy<T>::kHighTimes16) {
    // 16 * code >> 4 per 16-bit lane: the high byte's zero low nibble is what shifts into the
    // low byte, so every byte becomes its own code.
#pragma GCC unroll 4
    for (int k = kCodeVectors / 2; k < kCodeVectors; ++k) out.z[k] = _mm512_srli_epi16(out.z[k], 4);
  }
}

// The per-output sequence for one block and one activation row (see the file comment): q is the
// block's first digit, later digits follow `plane_stride` bytes apart. The integer work depends on
// the code form (kHighTimes16); the float steps do not.
template <bool kHighTimes16, int kDigits>
[[gnu::always_inline]] inline __m512 block_step(const PanelBlock& pb, const int8_t* q, int64_t plane_stride, float da,
                                                float sa, __m512 acc) {
  __m512i total = digit_isum<kHighTimes16>(pb, q);
  if constexpr (kDigits == 2) {
    static_assert(kDigitBase == 255);
    total = _mm512_sub_epi32(_mm512_slli_epi32(total, 8), total);  // 255 * hi part, exact
    total = _mm512_add_epi32(total, digit_isum<kHighTimes16>(pb, q + plane_stride));
  }
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(pb.d, _mm512_set1_ps(da)), acc);
  return _mm512_fmadd_ps(pb.m, _mm512_set1_ps(sa), acc);
}


// Decode: NA (<= kFusedMaxRows) activation rows, each block transposed in registers and used once.
// Meanwhile the next panel's bytes [next, next + next_bytes) are prefetched, a slice per block:
// the 16 interleaved row streams of a panel defeat the hardware prefetchers on cold weights.
template <DType T, int kDigits, int NA>
void panel_fused(const PanelRows& rows, const Activations& x, int64_t i0, float* y, int64_t ldy, int n_valid,
                 const uint8_t* next, size_t next_bytes) {
  const int64_t n_blocks = x.cols / kQK;
  const size_t slice = (next_bytes / static_cast<size_t>(n_blocks) + 63) / 64 * 64;
  __m512 acc[NA];
#pragma GCC unroll 4
  for (int a = 0; a < NA; ++a) acc[a] = _mm512_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    for (size_t off = b * slice; off < (b + 1) * slice && off < next_bytes; off += 64)
      _mm_prefetch(reinterpret_cast<const char*>(next + off), _MM_HINT_T0);
    PanelBlock pb;
    load_panel_block<T>(rows, b, pb);
#pragma GCC unroll 4
    for (int a = 0; a < NA; ++a) {
      const int64_t i = i0 + a;
      const float* ds = x.q8x32.ds + (i * n_blocks + b) * 2;
      acc[a] = block_step<Legacy<T>::kHighTimes16, kDigits>(pb, x.q8x32.qs + i * kDigits * x.cols + b * kQK, x.cols,
                                                             ds[0], ds[1], acc[a]);
    }
  }
#pragma GCC unroll 4
  for (int a = 0; a < NA; ++a) store_panel(acc[a], y + (i0 + a) * ldy, n_valid);
}

// Prefill: the panel is transposed once into scratch (codes unscaled: see load_plain_panel_block),
// then activation rows [i0, i0 + NA) pass over it.
template <DType T, int kDigits, int NA>
void panel_rows_pass(const PanelBlock* panel, const Activations& x, int64_t i0, float* y, int64_t ldy, int n_valid) {
  const int64_t n_blocks = x.cols / kQK;
  __m512 acc[NA];
#pragma GCC unroll 8
  for (int a = 0; a < NA; ++a) acc[a] = _mm512_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const PanelBlock& pb = panel[b];
#pragma GCC unroll 8
    for (int a = 0; a < NA; ++a) {
      const int64_t i = i0 + a;
      const float* ds = x.q8x32.ds + (i * n_blocks + b) * 2;
      acc[a] = block_step<false, kDigits>(pb, x.q8x32.qs + i * kDigits * x.cols + b * kQK, x.cols, ds[0], ds[1],
                                             acc[a]);
    }
  }
#pragma GCC unroll 8
  for (int a = 0; a < NA; ++a) store_panel(acc[a], y + (i0 + a) * ldy, n_valid);
}

template <DType T, int kDigits>
void gemm_legacy(const WeightRows& w, const Activations& x, float* y, int64_t ldy) {
  const int64_t n_blocks = x.cols / kQK;
  const int64_t n = x.n;
  const size_t row_bytes = static_cast<size_t>(n_blocks) * Legacy<T>::kBytes;
  TERN_CHECK(w.row_stride * kPanel < (size_t{1} << 31));  // gather offsets are int32
  thread_local Scratch<uint8_t> tail_rows;
  thread_local Scratch<PanelBlock> panel;
  for (int64_t r0 = 0; r0 < w.n_rows; r0 += kPanel) {
    const int n_valid = static_cast<int>(w.n_rows - r0 < kPanel ? w.n_rows - r0 : kPanel);
    const PanelRows rows = panel_rows_clamped(w.data + static_cast<size_t>(r0) * w.row_stride, w.row_stride, n_valid,
                                              row_bytes, tail_rows);
    float* y_panel = y + r0;
    const int64_t next_rows = w.n_rows - (r0 + kPanel) < kPanel ? w.n_rows - (r0 + kPanel) : kPanel;
    const uint8_t* next = w.data + static_cast<size_t>(r0 + kPanel) * w.row_stride;
    const size_t next_bytes = next_rows > 0 ? static_cast<size_t>(next_rows) * w.row_stride : 0;
    static_assert(kFusedMaxRows == 3);
    if (n <= kFusedMaxRows) {
      switch (n) {
        case 1: panel_fused<T, kDigits, 1>(rows, x, 0, y_panel, ldy, n_valid, next, next_bytes); break;
        case 2: panel_fused<T, kDigits, 2>(rows, x, 0, y_panel, ldy, n_valid, next, next_bytes); break;
        default: panel_fused<T, kDigits, 3>(rows, x, 0, y_panel, ldy, n_valid, next, next_bytes); break;
      }
      continue;
    }
    PanelBlock* blocks = panel.reserve(static_cast<size_t>(n_blocks));
    for (int64_t b = 0; b < n_blocks; ++b) load_plain_panel_block<T>(rows, b, blocks[b]);
    constexpr int kRows = 4;  // activation rows per pass over the panel
    for (int64_t i0 = 0; i0 < n; i0 += kRows) {
      switch (n - i0 < kRows ? n - i0 : kRows) {
        case 1: panel_rows_pass<T, kDigits, 1>(blocks, x, i0, y_panel, ldy, n_valid); break;
        case 2: panel_rows_pass<T, kDigits, 2>(blocks, x, i0, y_panel, ldy, n_valid); break;
        case 3: panel_rows_pass<T, kDigits, 3>(blocks, x, i0, y_panel, ldy, n_valid); break;
        default: panel_rows_pass<T, kDigits, kRows>(blocks, x, i0, y_panel, ldy, n_valid); break;
      }
    }
  }
}

template <int kDigits>
Kernel find(DType t) {
  switch (t) {
    case DType::Q4_0: return {ActFormat::kQ8x32, gemm_legacy<DType::Q4_0, kDigits>};
    case DType::Q4_1: return {ActFormat::kQ8x32, gemm_legacy<DType::Q4_1, kDigits>};
    case DType::Q5_0: return {ActFormat::kQ8x32, gemm_legacy<DType::Q5_0, kDigits>};
    case DType::Q5_1: return {ActFormat::kQ8x32, gemm_legacy<DType::Q5_1, kDigits>};
    case DType::Q8_0: return {ActFormat::kQ8x32, gemm_legacy<DType::Q8_0, kDigits>};
    default: return {};
  }
}

}  // namespace

Kernel avx512_find_legacy_kernel(DType t, int digits) {
  return digits == 2 ? find<2>(t) : find<1>(t);
}

}  // namespace tern::cpu::detail
