// AVX-512 (VNNI) level: k-quant kernels (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) against x256
// activations of 1 or 2 digits (matmul_kernels.h), on 16-row panels like the legacy kernels
// (matmul_legacy_avx512.cpp): lane L computes panel row lane_row(L).
//
// Every k-quant super-block (256 elements) decodes as x = d * sc_g * u - dmin * mn_g, or as
// x = d * sc_g * (u - K), with an unsigned code u (q2: 0..3, q3: 0..7, q4: 0..15, q5: 0..31,
// q6: 0..63) and integer scales sc_g / mins mn_g per group g (32 elements for q4_k / q5_k, 16
// otherwise). Against an activation super-block (da, q, bsums) that is, in exact integers,
//   isum = sum_g sc_g * (sum_{k in g} dpbusd(z[k], q dword k)),  msum = sum_g mn_g * bsums_g
// (offset types: mn_g = K * sc_g), where z[k] lane L holds the codes of elements 4k .. 4k+3 of the
// lane's row, and msum pairs word pairs {mn_2p, mn_2p+1} with bsums dwords in vpdpwssd. Per
// output, per super-block, in order:
//   min types:    acc = fma(float(isum), d * da, acc); acc = fnmadd(float(msum), dmin * da, acc)
//   offset types: acc = fma(float(isum - msum), d * da, acc)
// Two digits: isum and msum are computed per digit k (each bounded like the one-digit sums) and
// every isum step above runs once per digit, hi first, with da_hi = 255 * da in place of da (a
// combined isum could overflow int32); the min types' msum = 255 * msum_hi + msum_lo is exact
// (|msum| <= 16 * 63 * 16 * 32512 < 2^31) and keeps its single fnmadd.
// Decode builds each group's codes in registers from 16x4 transposes and uses them at once;
// prefill repacks a panel once into scratch and streams the activation rows past it. Both run
// finish_super_block(), so an output's bits do not depend on n (batch invariance).
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/matmul_kernels.h"
#include "backends/cpu/matmul_panel_avx512.h"
#include "backends/cpu/matmul_simd_avx512.h"
#include "core/quant_blocks.h"

namespace tern::cpu::detail {
namespace {

constexpr int kCodeVectors = kQK_K / 4;  // 64 vectors of 4 codes per lane per super-block

struct PanelScales {
  __m512i sc[16];  // per group: the scale of each lane's row (8 groups of 32 or 16 of 16)
  __m512i mn[8];   // word pairs {mn_2p, mn_2p+1} per 16-element group pair
  __m512 d, dmin;
};

struct PanelSuperBlock : PanelScales {
  __m512i z[kCodeVectors];
};

inline __m512i byte_of(__m512i x, int i) { return _mm512_and_si512(_mm512_srli_epi32(x, 8 * i), _mm512_set1_epi32(0xff)); }
inline __m512i sbyte_of(__m512i x, int i) { return _mm512_srai_epi32(_mm512_slli_epi32(x, 24 - 8 * i), 24); }
inline __m512i word_pair(__m512i lo, __m512i hi) {  // lo, hi: int16-range int32 lanes
  return _mm512_or_si512(_mm512_and_si512(lo, _mm512_set1_epi32(0xffff)), _mm512_slli_epi32(hi, 16));
}
// A broadcast of the 4 bytes at p (activation bytes and bsums read as dwords; memcpy keeps the
// access well-defined, the compiler folds it into vpbroadcastd).
inline __m512i broadcast_dword(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}
inline __m512 halves_low(__m512i x) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(x)); }
inline __m512 halves_high(__m512i x) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(x, 16))); }

// n16 consecutive 16-byte slices of each row -> q[4 * n16] dwords in lane order.
template <int N16>
inline void transpose_slices(const uint8_t* src, size_t stride, __m512i (&q)[4 * N16]) {
#pragma GCC unroll 8
  for (int t = 0; t < N16; ++t) {
    __m512i part[4];
    transpose16x4(src + 16 * t, stride, part);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) q[4 * t + j] = part[j];
  }
}

template <DType T>
struct KPanel;

// Each KPanel<T> provides
//   scales(sb, rows, out):       per-lane scales, min words, d and dmin of super-block sb;
//   for_each_group(sb, rows, f): f(g, z) for every group g in order, z = its code vectors
//                                (z[i] lane L: codes of elements 4 (g * kPerGroup + i) .. +3).
// The codes are built in registers from a few 16x4 transposes at a time.

// q4_k / q5_k: d, dmin, 12 packed scale bytes, [q5_k: qh], qs. Elements of code vector
// k = 16c + r are the low (r < 8) or high nibbles of qs dword 8c + r % 8; q5_k's bit 4 is bit
// 2c + (r >= 8) of each byte of qh dword r % 8.
template <DType T>
struct KPanel45 {
  static constexpr bool kQ5 = T == DType::Q5_K;
  static constexpr size_t kBytes = kQ5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  static constexpr size_t kQs = kQ5 ? offsetof(BlockQ5_K, qs) : offsetof(BlockQ4_K, qs);
  static constexpr bool kMins = true;
  static constexpr int kPerGroup = 8;  // 32-element sub-blocks

  static void scales(const uint8_t* sb, const PanelRows& rows, PanelScales& out) {
    __m512i h[4];  // d | dmin << 16, then the scale dwords u0, u1, u2
    transpose16x4(sb, rows.stride, h);
    scales_from(h, out);
  }

  // The same from the block head's 4 dwords of each lane's row (h[k] lane L: dword k of row
  // lane_row(L)), however they were obtained (transposed here, or loaded from a decode pack).
  static void scales_from(const __m512i (&h)[4], PanelScales& out) {
    out.d = halves_low(h[0]);
    out.dmin = halves_high(h[0]);
    const __m512i m3f = _mm512_set1_epi32(0x3f3f3f3f), m0f = _mm512_set1_epi32(0x0f0f0f0f),
                  m30 = _mm512_set1_epi32(0x30303030);
    const __m512i sc_lo = _mm512_and_si512(h[1], m3f);
    const __m512i sc_hi = _mm512_or_si512(_mm512_and_si512(h[3], m0f), _mm512_and_si512(_mm512_srli_epi32(h[1], 2), m30));
    const __m512i mn_lo = _mm512_and_si512(h[2], m3f);
    const __m512i mn_hi =
        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(h[3], 4), m0f), _mm512_and_si512(_mm512_srli_epi32(h[2], 2), m30));
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      out.sc[j] = byte_of(j < 4 ? sc_lo : sc_hi, j % 4);
      const __m512i mn = byte_of(j < 4 ? mn_lo : mn_hi, j % 4);
      out.mn[j] = word_pair(mn, mn);  // both 16-element halves of sub-block j
    }
  }

  template <class F>
  [[gnu::always_inline]] static void for_each_group(const uint8_t* sb, const PanelRows& rows, F&& f) {
    [[maybe_unused]] __m512i qh[8];
    if constexpr (kQ5) transpose_slices<2>(sb + offsetof(BlockQ5_K, qh), rows.stride, qh);
    for_each_group_from([&](int c, __m512i (&q8)[8]) { transpose_slices<2>(sb + kQs + 32 * c, rows.stride, q8); },
                        qh, f);
  }

  // The same with the qs dwords supplied by load(c, q8): q8[m] lane L = dword m of bytes
  // [32c, 32c + 32) of row lane_row(L)'s qs.
  template <class Load, class F>
  [[gnu::always_inline]] static void for_each_group_from(Load&& load, [[maybe_unused]] const __m512i (&qh)[8], F&& f) {
    for (int c = 0; c < 4; ++c) {
      __m512i q8[8];
      load(c, q8);
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {
        __m512i z[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
          z[j] = _mm512_and_si512(half == 0 ? q8[j] : _mm512_srli_epi16(q8[j], 4), _mm512_set1_epi8(0x0f));
          if constexpr (kQ5) {
            const int bit = 2 * c + half;
            const __m512i hb = bit <= 4 ? _mm512_slli_epi16(qh[j], 4 - bit) : _mm512_srli_epi16(qh[j], bit - 4);
            z[j] = _mm512_ternarylogic_epi32(z[j], hb, _mm512_set1_epi8(0x10), 0xf8);  // z | (hb & 0x10)
          }
        }
        f(2 * c + half, z);
      }
    }
  }
};
template <>
struct KPanel<DType::Q4_K> : KPanel45<DType::Q4_K> {};
template <>
struct KPanel<DType::Q5_K> : KPanel45<DType::Q5_K> {};

// q6_k: code vector k = 32h + 8q + j (half h, quarter q) takes nibble q / 2 of ql dword
// 16h + 8 (q % 2) + j and bit pair q of qh dword 8h + j; x = d * sc * (u - 32).
template <>
struct KPanel<DType::Q6_K> {
  static constexpr size_t kBytes = sizeof(BlockQ6_K);
  static constexpr bool kMins = false;
  static constexpr int kPerGroup = 4;  // 16-element groups

  static void scales(const uint8_t* sb, const PanelRows& rows, PanelScales& out) {
    __m512i s[4];
    transpose16x4(sb + offsetof(BlockQ6_K, scales), rows.stride, s);
#pragma GCC unroll 16
    for (int g = 0; g < 16; ++g) out.sc[g] = sbyte_of(s[g / 4], g % 4);
#pragma GCC unroll 8
    for (int p = 0; p < 8; ++p) out.mn[p] = word_pair(_mm512_slli_epi32(out.sc[2 * p], 5), _mm512_slli_epi32(out.sc[2 * p + 1], 5));
    // d sits at the end of the block: gather it (2 bytes before it keep the gather in bounds).
    out.d = halves_high(_mm512_i32gather_epi32(rows.lane_offsets, sb + offsetof(BlockQ6_K, d) - 2, 1));
    out.dmin = _mm512_setzero_ps();
  }

  template <class F>
  [[gnu::always_inline]] static void for_each_group(const uint8_t* sb, const PanelRows& rows, F&& f) {
    for (int h = 0; h < 2; ++h) {
      __m512i qh[8];
      transpose_slices<2>(sb + offsetof(BlockQ6_K, qh) + 32 * h, rows.stride, qh);
#pragma GCC unroll 2
      for (int q_odd = 0; q_odd < 2; ++q_odd) {
        __m512i ql[8];
        transpose_slices<2>(sb + offsetof(BlockQ6_K, ql) + 64 * h + 32 * q_odd, rows.stride, ql);
#pragma GCC unroll 2
        for (int nibble = 0; nibble < 2; ++nibble) {
          const int q = 2 * nibble + q_odd;
#pragma GCC unroll 2
          for (int gi = 0; gi < 2; ++gi) {
            __m512i z[4];
#pragma GCC unroll 4
            for (int i = 0; i < 4; ++i) {
              const int j = 4 * gi + i;
              const __m512i lo = _mm512_and_si512(nibble == 0 ? ql[j] : _mm512_srli_epi16(ql[j], 4), _mm512_set1_epi8(0x0f));
              const __m512i hb = q <= 2 ? _mm512_slli_epi16(qh[j], 4 - 2 * q) : _mm512_srli_epi16(qh[j], 2);
              z[i] = _mm512_ternarylogic_epi32(lo, hb, _mm512_set1_epi8(0x30), 0xf8);  // lo | (hb & 0x30)
            }
            f(8 * h + 2 * q + gi, z);
          }
        }
      }
    }
  }
};

// q3_k: code vector k = 32h + 8j + i takes bit pair j of qs dword 8h + i and, as bit 2, bit 4h + j
// of hmask dword i; x = d * sc * (u - 4).
template <>
struct KPanel<DType::Q3_K> {
  static constexpr size_t kBytes = sizeof(BlockQ3_K);
  static constexpr bool kMins = false;
  static constexpr int kPerGroup = 4;

  static void scales(const uint8_t* sb, const PanelRows& rows, PanelScales& out) {
    constexpr size_t kScales = offsetof(BlockQ3_K, scales);
    const __m512i u0 = _mm512_i32gather_epi32(rows.lane_offsets, sb + kScales, 1);
    const __m512i u1 = _mm512_i32gather_epi32(rows.lane_offsets, sb + kScales + 4, 1);
    const __m512i u2 = _mm512_i32gather_epi32(rows.lane_offsets, sb + kScales + 8, 1);
    // Scale g: low nibble = nibble g / 8 of byte g % 8 (u0, u1); top bits = pair g / 4 of byte
    // 8 + g % 4 (u2); stored + 32.
    const __m512i m0f = _mm512_set1_epi32(0x0f0f0f0f), m03 = _mm512_set1_epi32(0x03030303);
    const __m512i low[4] = {_mm512_and_si512(u0, m0f), _mm512_and_si512(u1, m0f),
                            _mm512_and_si512(_mm512_srli_epi32(u0, 4), m0f), _mm512_and_si512(_mm512_srli_epi32(u1, 4), m0f)};
#pragma GCC unroll 4
    for (int qd = 0; qd < 4; ++qd) {
      const __m512i biased =
          _mm512_or_si512(low[qd], _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u2, 2 * qd), m03), 4));
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) out.sc[4 * qd + i] = _mm512_sub_epi32(byte_of(biased, i), _mm512_set1_epi32(32));
    }
#pragma GCC unroll 8
    for (int p = 0; p < 8; ++p) out.mn[p] = word_pair(_mm512_slli_epi32(out.sc[2 * p], 2), _mm512_slli_epi32(out.sc[2 * p + 1], 2));
    out.d = halves_high(_mm512_i32gather_epi32(rows.lane_offsets, sb + offsetof(BlockQ3_K, d) - 2, 1));
    out.dmin = _mm512_setzero_ps();
  }

  template <class F>
  [[gnu::always_inline]] static void for_each_group(const uint8_t* sb, const PanelRows& rows, F&& f) {
    __m512i hm[8];
    transpose_slices<2>(sb + offsetof(BlockQ3_K, hmask), rows.stride, hm);
    for (int h = 0; h < 2; ++h) {
      __m512i qs[8];
      transpose_slices<2>(sb + offsetof(BlockQ3_K, qs) + 32 * h, rows.stride, qs);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const int bit = 4 * h + j;
#pragma GCC unroll 2
        for (int gi = 0; gi < 2; ++gi) {
          __m512i z[4];
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i) {
            const int d = 4 * gi + i;
            const __m512i low2 = _mm512_and_si512(_mm512_srli_epi16(qs[d], 2 * j), _mm512_set1_epi8(3));
            const __m512i hb = bit <= 2 ? _mm512_slli_epi16(hm[d], 2 - bit) : _mm512_srli_epi16(hm[d], bit - 2);
            z[i] = _mm512_ternarylogic_epi32(low2, hb, _mm512_set1_epi8(4), 0xf8);  // low2 | (hb & 4)
          }
          f(8 * h + 2 * j + gi, z);
        }
      }
    }
  }
};

// q2_k: scales[g] = sc | mn << 4 per 16-element group; codes as q3_k's low bits.
template <>
struct KPanel<DType::Q2_K> {
  static constexpr size_t kBytes = sizeof(BlockQ2_K);
  static constexpr bool kMins = true;
  static constexpr int kPerGroup = 4;

  static void scales(const uint8_t* sb, const PanelRows& rows, PanelScales& out) {
    __m512i s[4];
    transpose16x4(sb + offsetof(BlockQ2_K, scales), rows.stride, s);
    __m512i mn[16];
#pragma GCC unroll 16
    for (int g = 0; g < 16; ++g) {
      const __m512i v = byte_of(s[g / 4], g % 4);
      out.sc[g] = _mm512_and_si512(v, _mm512_set1_epi32(0x0f));
      mn[g] = _mm512_srli_epi32(v, 4);
    }
#pragma GCC unroll 8
    for (int p = 0; p < 8; ++p) out.mn[p] = word_pair(mn[2 * p], mn[2 * p + 1]);
    const __m512i dd = _mm512_i32gather_epi32(rows.lane_offsets, sb + offsetof(BlockQ2_K, d), 1);
    out.d = halves_low(dd);
    out.dmin = halves_high(dd);
  }

  template <class F>
  [[gnu::always_inline]] static void for_each_group(const uint8_t* sb, const PanelRows& rows, F&& f) {
    for (int h = 0; h < 2; ++h) {
      __m512i qs[8];
      transpose_slices<2>(sb + offsetof(BlockQ2_K, qs) + 32 * h, rows.stride, qs);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
#pragma GCC unroll 2
        for (int gi = 0; gi < 2; ++gi) {
          __m512i z[4];
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i) z[i] = _mm512_and_si512(_mm512_srli_epi16(qs[4 * gi + i], 2 * j), _mm512_set1_epi8(3));
          f(8 * h + 2 * j + gi, z);
        }
      }
    }
  }
};

// Scratch form of one super-block of a panel (prefill): the codes of every group, in order.
template <DType T>
inline void repack(const uint8_t* sb, const PanelRows& rows, PanelSuperBlock& out) {
  using K = KPanel<T>;
  K::scales(sb, rows, out);
  K::for_each_group(sb, rows, [&](int g, const __m512i* z) {
#pragma GCC unroll 8
    for (int i = 0; i < K::kPerGroup; ++i) _mm512_store_si512(&out.z[g * K::kPerGroup + i], z[i]);
  });
}

// The end of one super-block for one activation row: msum from the mins and bsums, then the float
// sequence of the file comment. isum[k] and the bsums of digit k (at bsums16 + k * bsum_stride)
// belong to digit k.
template <bool kMins, int kDigits>
[[gnu::always_inline]] inline __m512 finish_super_block(const PanelScales& p, const __m512i (&isum)[kDigits],
                                                        const int16_t* bsums16, int64_t bsum_stride, float da,
                                                        __m512 acc) {
  __m512i msum[kDigits];
#pragma GCC unroll 2
  for (int k = 0; k < kDigits; ++k) {
    msum[k] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int pp = 0; pp < 8; ++pp)
      msum[k] = _mm512_dpwssd_epi32(msum[k], p.mn[pp], broadcast_dword(bsums16 + k * bsum_stride + 2 * pp));
  }
#pragma GCC unroll 2
  for (int k = 0; k < kDigits; ++k) {
    const __m512 d_da = _mm512_mul_ps(p.d, _mm512_set1_ps(k + 1 < kDigits ? da * static_cast<float>(kDigitBase) : da));
    const __m512i dot = kMins ? isum[k] : _mm512_sub_epi32(isum[k], msum[k]);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), d_da, acc);
  }
  if constexpr (kMins) {
    __m512i total = msum[0];
    if constexpr (kDigits == 2) {
      static_assert(kDigitBase == 255);
      total = _mm512_add_epi32(_mm512_sub_epi32(_mm512_slli_epi32(total, 8), total), msum[1]);
    }
    acc = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(p.dmin, _mm512_set1_ps(da)), acc);
  }
  return acc;
}

// Dependency chains per activation row and group: two for one digit (a chain of 8 would be
// latency-bound); with two digits, one per digit.
template <int kDigits>
constexpr int kChainsPerDigit = kDigits == 1 ? 2 : 1;

// Where a decode panel's super-blocks come from. Both give the kernel the same integers, so the
// results are bitwise the same whichever is used (and the same as prefill's).
// From the weight rows: 16x4 transposes in registers; the next panel's bytes are prefetched a
// slice per super-block (its 16 interleaved row streams defeat the hardware prefetchers).
template <DType T>
struct RowsSource {
  using K = KPanel<T>;
  const PanelRows& rows;
  const uint8_t* next;
  size_t next_bytes;
  size_t slice;
  void begin(int64_t s) const {
    for (size_t off = s * slice; off < (s + 1) * slice && off < next_bytes; off += 64)
      _mm_prefetch(reinterpret_cast<const char*>(next + off), _MM_HINT_T0);
  }
  void scales(int64_t s, PanelScales& ps) const { K::scales(rows.base + s * K::kBytes, rows, ps); }
  template <class F>
  [[gnu::always_inline]] void groups(int64_t s, F&& f) const {
    K::for_each_group(rows.base + s * K::kBytes, rows, f);
  }
};

// From a q4_k decode pack (avx512_pack_q4k_for_decode): per super-block, the 4 head vectors and
// the 32 qs vectors already in lane order. The same super-block of the next panel is prefetched
// (the hardware prefetchers alone measured slower on this VM).
constexpr int kQ4kPackVectors = 4 + 32;  // per super-block of a 16-row panel
struct PackedQ4kSource {
  const __m512i* panel;  // [n_super][kQ4kPackVectors]
  const __m512i* next;   // the next panel's pack, or nullptr
  void begin(int64_t s) const {
    if (next == nullptr) return;
    const char* p = reinterpret_cast<const char*>(next + s * kQ4kPackVectors);
    for (int line = 0; line < kQ4kPackVectors; ++line) _mm_prefetch(p + 64 * line, _MM_HINT_T0);
  }
  void scales(int64_t s, PanelScales& ps) const {
    const __m512i* p = panel + s * kQ4kPackVectors;
    const __m512i h[4] = {_mm512_load_si512(p), _mm512_load_si512(p + 1), _mm512_load_si512(p + 2),
                          _mm512_load_si512(p + 3)};
    KPanel<DType::Q4_K>::scales_from(h, ps);
  }
  template <class F>
  [[gnu::always_inline]] void groups(int64_t s, F&& f) const {
    const __m512i* p = panel + s * kQ4kPackVectors + 4;
    const __m512i no_qh[8] = {};
    KPanel<DType::Q4_K>::for_each_group_from(
        [&](int c, __m512i (&q8)[8]) {
#pragma GCC unroll 8
          for (int m = 0; m < 8; ++m) q8[m] = _mm512_load_si512(p + 8 * c + m);
        },
        no_qh, f);
  }
};

// Decode (NA <= 3 activation rows): each group's codes are built in registers and used at once,
// no scratch.
template <DType T, int kDigits, int NA, class Source>
void panel_fused(const Source& src, const Activations& x, float* y, int64_t ldy, int n_valid) {
  constexpr int kChains = 2;  // NA <= 3 rows leave too few chains otherwise (integer sums: exact in any order)
  using K = KPanel<T>;
  const int64_t n_super = x.cols / kQK_K;
  const int64_t n_groups16 = x.cols / kQ8x256SumGroup;
  __m512 acc[NA];
#pragma GCC unroll 4
  for (int a = 0; a < NA; ++a) acc[a] = _mm512_setzero_ps();
  for (int64_t s = 0; s < n_super; ++s) {
    src.begin(s);
    PanelScales ps;
    src.scales(s, ps);
    const int8_t* q[NA];
    __m512i isum[NA][kDigits];
#pragma GCC unroll 4
    for (int a = 0; a < NA; ++a) {
      q[a] = x.q8x256.qs + a * kDigits * x.cols + s * kQK_K;
#pragma GCC unroll 2
      for (int k = 0; k < kDigits; ++k) isum[a][k] = _mm512_setzero_si512();
    }
    src.groups(s, [&](int g, const __m512i* z) {
      __m512i part[NA][kDigits][kChains];
#pragma GCC unroll 4
      for (int a = 0; a < NA; ++a)
#pragma GCC unroll 2
        for (int k = 0; k < kDigits; ++k)
#pragma GCC unroll 2
          for (int c = 0; c < kChains; ++c) part[a][k][c] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int i = 0; i < K::kPerGroup; ++i)
#pragma GCC unroll 4
        for (int a = 0; a < NA; ++a)
#pragma GCC unroll 2
          for (int k = 0; k < kDigits; ++k) {
            __m512i& chain = part[a][k][i % kChains];
            chain = _mm512_dpbusd_epi32(chain, z[i], broadcast_dword(q[a] + k * x.cols + 4 * (g * K::kPerGroup + i)));
          }
#pragma GCC unroll 4
      for (int a = 0; a < NA; ++a)
#pragma GCC unroll 2
        for (int k = 0; k < kDigits; ++k) {
          const __m512i dot = kChains == 2 ? _mm512_add_epi32(part[a][k][0], part[a][k][kChains - 1]) : part[a][k][0];
          isum[a][k] = _mm512_add_epi32(isum[a][k], _mm512_mullo_epi32(dot, ps.sc[g]));
        }
    });
#pragma GCC unroll 4
    for (int a = 0; a < NA; ++a)
      acc[a] = finish_super_block<K::kMins, kDigits>(ps, isum[a], x.q8x256.bsums + a * kDigits * n_groups16 + s * 16,
                                                     n_groups16, x.q8x256.d[a * n_super + s], acc[a]);
  }
#pragma GCC unroll 4
  for (int a = 0; a < NA; ++a) store_panel(acc[a], y + a * ldy, n_valid);
}

// NA activation rows [i0, i0 + NA) against a repacked panel (n_super super-blocks).
template <DType T, int kDigits, int NA>
void panel_pass(const PanelSuperBlock* panel, const Activations& x, int64_t i0, float* y, int64_t ldy, int n_valid) {
  using K = KPanel<T>;
  constexpr int kChains = kChainsPerDigit<kDigits>;
  constexpr int kPerGroup = K::kPerGroup;  // code vectors per group
  constexpr int kGroups = kCodeVectors / kPerGroup;
  const int64_t n_super = x.cols / kQK_K;
  const int64_t n_groups16 = x.cols / kQ8x256SumGroup;
  __m512 acc[NA];
#pragma GCC unroll 8
  for (int a = 0; a < NA; ++a) acc[a] = _mm512_setzero_ps();
  for (int64_t s = 0; s < n_super; ++s) {
    const PanelSuperBlock& p = panel[s];
    const int8_t* q[NA];
#pragma GCC unroll 8
    for (int a = 0; a < NA; ++a) q[a] = x.q8x256.qs + (i0 + a) * kDigits * x.cols + s * kQK_K;
    __m512i isum[NA][kDigits];
#pragma GCC unroll 8
    for (int a = 0; a < NA; ++a)
#pragma GCC unroll 2
      for (int d = 0; d < kDigits; ++d) isum[a][d] = _mm512_setzero_si512();
    for (int g = 0; g < kGroups; ++g) {
      __m512i part[NA][kDigits][kChains];
#pragma GCC unroll 8
      for (int a = 0; a < NA; ++a)
#pragma GCC unroll 2
        for (int d = 0; d < kDigits; ++d)
#pragma GCC unroll 2
          for (int c = 0; c < kChains; ++c) part[a][d][c] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int kk = 0; kk < kPerGroup; ++kk) {
        const int k = g * kPerGroup + kk;
        const __m512i z = _mm512_load_si512(&p.z[k]);
#pragma GCC unroll 8
        for (int a = 0; a < NA; ++a)
#pragma GCC unroll 2
          for (int d = 0; d < kDigits; ++d) {
            __m512i& chain = part[a][d][kk % kChains];
            chain = _mm512_dpbusd_epi32(chain, z, broadcast_dword(q[a] + d * x.cols + 4 * k));
          }
      }
#pragma GCC unroll 8
      for (int a = 0; a < NA; ++a)
#pragma GCC unroll 2
        for (int d = 0; d < kDigits; ++d) {
          const __m512i dot = kChains == 2 ? _mm512_add_epi32(part[a][d][0], part[a][d][kChains - 1]) : part[a][d][0];
          isum[a][d] = _mm512_add_epi32(isum[a][d], _mm512_mullo_epi32(dot, p.sc[g]));
        }
    }
#pragma GCC unroll 8
    for (int a = 0; a < NA; ++a) {
      const int64_t i = i0 + a;
      acc[a] = finish_super_block<K::kMins, kDigits>(p, isum[a], x.q8x256.bsums + i * kDigits * n_groups16 + s * 16,
                                                     n_groups16, x.q8x256.d[i * n_super + s], acc[a]);
    }
  }
#pragma GCC unroll 8
  for (int a = 0; a < NA; ++a) store_panel(acc[a], y + (i0 + a) * ldy, n_valid);
}

template <DType T, int kDigits, class Source>
void decode_panel(const Source& src, const Activations& x, float* y, int64_t ldy, int n_valid) {
  switch (x.n) {
    case 1: panel_fused<T, kDigits, 1>(src, x, y, ldy, n_valid); break;
    case 2: panel_fused<T, kDigits, 2>(src, x, y, ldy, n_valid); break;
    default: panel_fused<T, kDigits, 3>(src, x, y, ldy, n_valid); break;
  }
}

template <DType T, int kDigits>
void kquant_panels(const WeightRows& w, const Activations& x, float* y, int64_t ldy) {
  using K = KPanel<T>;
  const int64_t n_super = x.cols / kQK_K;
  const size_t row_bytes = static_cast<size_t>(n_super) * K::kBytes;
  TERN_CHECK(w.row_stride * kPanel < (size_t{1} << 31));  // gather offsets are int32
  thread_local Scratch<uint8_t> tail_rows;
  thread_local Scratch<PanelSuperBlock> scratch;
  PanelSuperBlock* panel = scratch.reserve(static_cast<size_t>(n_super));
  for (int64_t r0 = 0; r0 < w.n_rows; r0 += kPanel) {
    const int n_valid = static_cast<int>(w.n_rows - r0 < kPanel ? w.n_rows - r0 : kPanel);
    const PanelRows rows = panel_rows_clamped(w.data + static_cast<size_t>(r0) * w.row_stride, w.row_stride, n_valid,
                                              row_bytes, tail_rows);
    if (x.n <= 3) {
      if constexpr (T == DType::Q4_K) {
        if (w.decode_pack != nullptr && n_valid == kPanel) {
          const __m512i* panel = reinterpret_cast<const __m512i*>(w.decode_pack) + r0 / kPanel * n_super * kQ4kPackVectors;
          const bool next_packed = w.n_rows - r0 >= 2 * kPanel;  // the run's next panel is full, so packed
          const PackedQ4kSource src{panel, next_packed ? panel + n_super * kQ4kPackVectors : nullptr};
          decode_panel<T, kDigits>(src, x, y + r0, ldy, n_valid);
          continue;
        }
      }
      const int64_t next_rows = w.n_rows - (r0 + kPanel) < kPanel ? w.n_rows - (r0 + kPanel) : kPanel;
      const uint8_t* next = w.data + static_cast<size_t>(r0 + kPanel) * w.row_stride;
      const size_t next_bytes = next_rows > 0 ? static_cast<size_t>(next_rows) * w.row_stride : 0;
      const size_t slice = (next_bytes / static_cast<size_t>(n_super) + 63) / 64 * 64;
      decode_panel<T, kDigits>(RowsSource<T>{rows, next, next_bytes, slice}, x, y + r0, ldy, n_valid);
      continue;
    }
    for (int64_t s = 0; s < n_super; ++s) repack<T>(rows.base + s * K::kBytes, rows, panel[s]);
    constexpr int kRows = 4;  // activation rows per pass over the panel
    for (int64_t i0 = 0; i0 < x.n; i0 += kRows) {
      switch (x.n - i0 < kRows ? x.n - i0 : kRows) {
        case 1: panel_pass<T, kDigits, 1>(panel, x, i0, y + r0, ldy, n_valid); break;
        case 2: panel_pass<T, kDigits, 2>(panel, x, i0, y + r0, ldy, n_valid); break;
        case 3: panel_pass<T, kDigits, 3>(panel, x, i0, y + r0, ldy, n_valid); break;
        default: panel_pass<T, kDigits, kRows>(panel, x, i0, y + r0, ldy, n_valid); break;
      }
    }
  }
}

template <int kDigits>
Kernel find(DType t) {
  switch (t) {
    case DType::Q2_K: return {ActFormat::kQ8x256, kquant_panels<DType::Q2_K, kDigits>};
    case DType::Q3_K: return {ActFormat::kQ8x256, kquant_panels<DType::Q3_K, kDigits>};
    case DType::Q4_K: return {ActFormat::kQ8x256, kquant_panels<DType::Q4_K, kDigits>};
    case DType::Q5_K: return {ActFormat::kQ8x256, kquant_panels<DType::Q5_K, kDigits>};
    case DType::Q6_K: return {ActFormat::kQ8x256, kquant_panels<DType::Q6_K, kDigits>};
    default: return {};
  }
}

}  // namespace

Kernel avx512_find_kquant_kernel(DType t, int digits) {
  return digits == 2 ? find<2>(t) : find<1>(t);
}

size_t avx512_q4k_decode_pack_bytes(int64_t rows, int64_t cols) {
  return static_cast<size_t>(rows / kPanel) * static_cast<size_t>(cols / kQK_K) * kQ4kPackVectors * sizeof(__m512i);
}

void avx512_pack_q4k_for_decode(const uint8_t* data, size_t row_stride, int64_t rows, int64_t cols, uint8_t* out) {
  const int64_t n_super = cols / kQK_K;
  auto* dst = reinterpret_cast<__m512i*>(out);
  for (int64_t r0 = 0; r0 + kPanel <= rows; r0 += kPanel) {
    const PanelRows panel = panel_rows(data + static_cast<size_t>(r0) * row_stride, row_stride);
    for (int64_t s = 0; s < n_super; ++s) {
      const uint8_t* sb = panel.base + s * sizeof(BlockQ4_K);
      __m512i h[4];
      transpose16x4(sb, row_stride, h);  // what KPanel45::scales reads
      for (const __m512i& v : h) _mm512_store_si512(dst++, v);
      for (int c = 0; c < 4; ++c) {  // what KPanel45::for_each_group reads
        __m512i q8[8];
        transpose_slices<2>(sb + offsetof(BlockQ4_K, qs) + 32 * c, row_stride, q8);
        for (const __m512i& v : q8) _mm512_store_si512(dst++, v);
      }
    }
  }
}

}  // namespace tern::cpu::detail
