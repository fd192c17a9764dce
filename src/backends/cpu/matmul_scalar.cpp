// The scalar level: baseline x86-64, no SIMD assumptions. It is the fallback on old CPUs and the
// level TERN_CPU_ISA=scalar forces. Each weight row is decoded once into small integers plus
// per-group scales (thread-local scratch), then dotted with every activation row; the per-output
// arithmetic is one fixed loop, so batch invariance holds by construction. Its quantizers define
// the activation bytes every level must reproduce (matmul_kernels.h).
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/matmul_kernels.h"
#include "backends/cpu/matmul_kquant_layout.h"
#include "core/fp16.h"
#include "core/quant_blocks.h"

namespace tern::cpu::detail {
namespace {

// Round to nearest, ties to even, for |v| < 2^22: adding 1.5 * 2^23 pushes the fraction out of the
// mantissa under the default rounding mode. Bitwise what cvtps2dq does in the SIMD quantizers.
inline int round_to_int(float v) {
  constexpr float kMagic = 12582912.0f;
  return static_cast<int>((v + kMagic) - kMagic);
}

// Quantizes one block of `len` (<= 256) floats to q = rne(x * q_max / amax), |q| <= q_max, and
// writes its D digits to digit planes `plane_stride` bytes apart; returns the scale amax / q_max.
// Digits (D = 2): hi = rne(q * (1 / 255)), lo = q - 255 hi. q / 255 is never within 1/510 of a
// half-integer (q is an integer, 255 odd), far beyond the product's rounding error, so hi is the
// exact nearest integer and |lo| <= 127.
template <int kDigits>
float quantize_block(const float* x, int len, int8_t* qs, int64_t plane_stride, int32_t* q) {
  constexpr float kQMax = kDigits == 1 ? 127.0f : 32512.0f;
  float amax = 0.0f;
  for (int j = 0; j < len; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  const float d = amax / kQMax;
  // q_max / amax overflows to inf for amax below ~1e-34 (and is inf for amax = 0); such a block
  // quantizes to zeros, since 0 * inf would be NaN and NaN -> int is undefined.
  const float inv = kQMax / amax;
  const float id = std::isfinite(inv) ? inv : 0.0f;
  for (int j = 0; j < len; ++j) {
    q[j] = round_to_int(x[j] * id);
    if constexpr (kDigits == 1) {
      qs[j] = static_cast<int8_t>(q[j]);
    } else {
      const int hi = round_to_int(static_cast<float>(q[j]) * (1.0f / kDigitBase));
      qs[j] = static_cast<int8_t>(hi);
      qs[plane_stride + j] = static_cast<int8_t>(q[j] - kDigitBase * hi);
    }
  }
  return d;
}

// ---- float weights ---------------------------------------------------------------------------

// Weight j of a row as float. Rows may sit at any byte offset (row_stride is arbitrary), hence
// memcpy rather than a typed load.
template <DType T>
float load_weight(const uint8_t* row, int64_t j) {
  if constexpr (T == DType::F32) {
    float v;
    std::memcpy(&v, row + 4 * j, 4);
    return v;
  } else {
    uint16_t h;
    std::memcpy(&h, row + 2 * j, 2);
    return T == DType::F16 ? fp16_to_f32(h) : bf16_to_f32(h);
  }
}

// Four interleaved partial sums (element j goes to sum j % 4), then ((s0 + s1) + (s2 + s3)).
template <DType T>
void gemm_float(const WeightRows& w, const Activations& x, float* y, int64_t ldy) {
  for (int64_t r = 0; r < w.n_rows; ++r) {
    const uint8_t* row = w.data + static_cast<size_t>(r) * w.row_stride;
    for (int64_t i = 0; i < x.n; ++i) {
      const float* a = x.f32 + i * x.cols;
      float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (int64_t j = 0; j < x.cols; ++j) s[j % 4] += load_weight<T>(row, j) * a[j];
      y[i * ldy + r] = (s[0] + s[1]) + (s[2] + s[3]);
    }
  }
}

// ---- legacy quants (blocks of 32) -------------------------------------------------------------

// A weight row decoded to signed values v (x = d * v + m per block) and per-block d and m.
struct LegacyRow {
  std::vector<int8_t> v;
  std::vector<float> d, m;
};

void decode_nibbles(const uint8_t* qs, int8_t* v, int offset) {
  for (int l = 0; l < 16; ++l) {
    v[l] = static_cast<int8_t>((qs[l] & 0x0f) - offset);
    v[l + 16] = static_cast<int8_t>((qs[l] >> 4) - offset);
  }
}

void add_high_bits(uint32_t qh, int8_t* v) {
  for (int l = 0; l < kQK; ++l) v[l] = static_cast<int8_t>(v[l] + static_cast<int>((qh >> l) & 1u) * 16);
}

template <DType T>
void decode_legacy_row(const uint8_t* row, int64_t cols, LegacyRow& out) {
  const int64_t n_blocks = cols / kQK;
  for (int64_t b = 0; b < n_blocks; ++b) {
    int8_t* v = out.v.data() + b * kQK;
    float m = 0.0f;
    uint16_t d;
    if constexpr (T == DType::Q4_0) {
      const auto& blk = reinterpret_cast<const BlockQ4_0*>(row)[b];
      d = blk.d;
      decode_nibbles(blk.qs, v, 8);
    } else if constexpr (T == DType::Q4_1) {
      const auto& blk = reinterpret_cast<const BlockQ4_1*>(row)[b];
      d = blk.d;
      m = fp16_to_f32(blk.m);
      decode_nibbles(blk.qs, v, 0);
    } else if constexpr (T == DType::Q5_0 || T == DType::Q5_1) {
      using Block = std::conditional_t<T == DType::Q5_0, BlockQ5_0, BlockQ5_1>;
      const auto& blk = reinterpret_cast<const Block*>(row)[b];
      d = blk.d;
      uint32_t qh;
      std::memcpy(&qh, blk.qh, 4);
      if constexpr (T == DType::Q5_1) m = fp16_to_f32(blk.m);
      // q5_0 is centred on 16: decode the nibble unsigned, add bit 4, then subtract.
      decode_nibbles(blk.qs, v, 0);
      add_high_bits(qh, v);
      if constexpr (T == DType::Q5_0)
        for (int l = 0; l < kQK; ++l) v[l] = static_cast<int8_t>(v[l] - 16);
    } else {
      static_assert(T == DType::Q8_0);
      const auto& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
      d = blk.d;
      std::memcpy(v, blk.qs, kQK);
    }
    out.d[b] = fp16_to_f32(d);
    out.m[b] = m;
  }
}

// y = sum over blocks of (d_w * d_a) * dot(v, q) + m_w * s_a, accumulated block by block; with two
// digits dot(v, q) = 255 * dot(v, hi) + dot(v, lo), exact in int32 (|v| <= 128, |q| <= 32512).
template <DType T, int kDigits>
void gemm_legacy(const WeightRows& w, const Activations& x, float* y, int64_t ldy) {
  constexpr bool kHasMin = T == DType::Q4_1 || T == DType::Q5_1;
  const int64_t n_blocks = w.cols / kQK;
  thread_local LegacyRow dec;
  if (static_cast<int64_t>(dec.v.size()) < w.cols) dec.v.resize(w.cols);
  if (static_cast<int64_t>(dec.d.size()) < n_blocks) {
    dec.d.resize(n_blocks);
    dec.m.resize(n_blocks);
  }
  for (int64_t r = 0; r < w.n_rows; ++r) {
    decode_legacy_row<T>(w.data + static_cast<size_t>(r) * w.row_stride, w.cols, dec);
    for (int64_t i = 0; i < x.n; ++i) {
      const int8_t* qa = x.q8x32.qs + i * kDigits * x.cols;
      const float* ds = x.q8x32.ds + i * n_blocks * 2;
      float acc = 0.0f;
      for (int64_t b = 0; b < n_blocks; ++b) {
        int32_t dot = 0;
        for (int k = 0; k < kDigits; ++k) {
          const int8_t* digit = qa + k * x.cols + b * kQK;
          int32_t part = 0;
          for (int l = 0; l < kQK; ++l) part += dec.v[b * kQK + l] * digit[l];
          dot = dot * kDigitBase + part;
        }
        acc += (dec.d[b] * ds[2 * b]) * static_cast<float>(dot);
        if constexpr (kHasMin) acc += dec.m[b] * ds[2 * b + 1];
      }
      y[i * ldy + r] = acc;
    }
  }
}

// ---- k-quants (super-blocks of 256) -----------------------------------------------------------

constexpr int kGroups = kQK_K / kQ8x256SumGroup;  // 16 groups of 16 elements per super-block

// A weight row decoded to signed values v and, per 16-element group, an integer scale and min:
// x = d * sc * v - dmin * mn (per super-block d, dmin).
struct KQuantRow {
  std::vector<int8_t> v;
  std::vector<int16_t> sc, mn;
  std::vector<float> d, dmin;
};

template <DType T>
void decode_kquant_superblock(const uint8_t* src, int8_t* v, int16_t* sc, int16_t* mn, float* d, float* dmin) {
  if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
    using Block = std::conditional_t<T == DType::Q4_K, BlockQ4_K, BlockQ5_K>;
    const auto& b = *reinterpret_cast<const Block*>(src);
    uint8_t scales[8], mins[8];
    unpack_q4k_scales(b.scales, scales, mins);
    for (int c = 0; c < 4; ++c) {  // 64-element chunks: low nibbles, then high nibbles
      for (int l = 0; l < 32; ++l) {
        int lo = b.qs[32 * c + l] & 0x0f, hi = b.qs[32 * c + l] >> 4;
        if constexpr (T == DType::Q5_K) {
          lo |= ((b.qh[l] >> (2 * c)) & 1) << 4;
          hi |= ((b.qh[l] >> (2 * c + 1)) & 1) << 4;
        }
        v[64 * c + l] = static_cast<int8_t>(lo);
        v[64 * c + 32 + l] = static_cast<int8_t>(hi);
      }
    }
    for (int g = 0; g < kGroups; ++g) {
      sc[g] = scales[g / 2];
      mn[g] = mins[g / 2];
    }
    *d = fp16_to_f32(b.d);
    *dmin = fp16_to_f32(b.dmin);
  } else if constexpr (T == DType::Q6_K) {
    const auto& b = *reinterpret_cast<const BlockQ6_K*>(src);
    for (int h = 0; h < 2; ++h) {  // 128-element halves
      const uint8_t* ql = b.ql + 64 * h;
      const uint8_t* qh = b.qh + 32 * h;
      int8_t* vh = v + 128 * h;
      for (int l = 0; l < 32; ++l) {
        vh[l] = static_cast<int8_t>(((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32);
        vh[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32);
        vh[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        vh[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
    for (int g = 0; g < kGroups; ++g) {
      sc[g] = b.scales[g];
      mn[g] = 0;
    }
    *d = fp16_to_f32(b.d);
    *dmin = 0.0f;
  } else if constexpr (T == DType::Q3_K) {
    const auto& b = *reinterpret_cast<const BlockQ3_K*>(src);
    int8_t scales[16];
    unpack_q3k_scales(b.scales, scales);
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 4; ++j)
        for (int l = 0; l < 32; ++l) {
          const int low = (b.qs[32 * h + l] >> (2 * j)) & 3;
          const int high = (b.hmask[l] >> (4 * h + j)) & 1;
          v[128 * h + 32 * j + l] = static_cast<int8_t>(low - (high ? 0 : 4));
        }
    for (int g = 0; g < kGroups; ++g) {
      sc[g] = scales[g];
      mn[g] = 0;
    }
    *d = fp16_to_f32(b.d);
    *dmin = 0.0f;
  } else {
    static_assert(T == DType::Q2_K);
    const auto& b = *reinterpret_cast<const BlockQ2_K*>(src);
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 4; ++j)
        for (int l = 0; l < 32; ++l) v[128 * h + 32 * j + l] = static_cast<int8_t>((b.qs[32 * h + l] >> (2 * j)) & 3);
    for (int g = 0; g < kGroups; ++g) {
      sc[g] = b.scales[g] & 0x0f;
      mn[g] = b.scales[g] >> 4;
    }
    *d = fp16_to_f32(b.d);
    *dmin = fp16_to_f32(b.dmin);
  }
}

// Per super-block and digit k: isum_k = sum_g sc_g * dot_g(v, digit k) and msum_k = sum_g mn_g *
// bsum_g(k) are exact integers; then acc += (d * da_k) * isum_k for each digit (da_hi = 255 da:
// sum_g sc_g * dot_g(v, q) could overflow int32 at 16 bits) and acc -= (dmin * da) * msum with
// msum = 255 * msum_hi + msum_lo (exact: |msum| <= 16 groups * 63 * 16 * 32512 < 2^31).
template <DType T, int kDigits>
void gemm_kquant(const WeightRows& w, const Activations& x, float* y, int64_t ldy) {
  constexpr size_t kBlockBytes = T == DType::Q2_K   ? sizeof(BlockQ2_K)
                                 : T == DType::Q3_K ? sizeof(BlockQ3_K)
                                 : T == DType::Q4_K ? sizeof(BlockQ4_K)
                                 : T == DType::Q5_K ? sizeof(BlockQ5_K)
                                                    : sizeof(BlockQ6_K);
  const int64_t n_super = w.cols / kQK_K;
  thread_local KQuantRow dec;
  if (static_cast<int64_t>(dec.v.size()) < w.cols) {
    dec.v.resize(w.cols);
    dec.sc.resize(w.cols / kQ8x256SumGroup);
    dec.mn.resize(w.cols / kQ8x256SumGroup);
  }
  if (static_cast<int64_t>(dec.d.size()) < n_super) {
    dec.d.resize(n_super);
    dec.dmin.resize(n_super);
  }
  for (int64_t r = 0; r < w.n_rows; ++r) {
    const uint8_t* row = w.data + static_cast<size_t>(r) * w.row_stride;
    for (int64_t sb = 0; sb < n_super; ++sb)
      decode_kquant_superblock<T>(row + sb * kBlockBytes, dec.v.data() + sb * kQK_K, dec.sc.data() + sb * kGroups,
                                  dec.mn.data() + sb * kGroups, &dec.d[sb], &dec.dmin[sb]);
    const int64_t n_groups16 = x.cols / kQ8x256SumGroup;
    for (int64_t i = 0; i < x.n; ++i) {
      const float* da = x.q8x256.d + i * n_super;
      float acc = 0.0f;
      for (int64_t sb = 0; sb < n_super; ++sb) {
        int32_t msum = 0;
        for (int k = 0; k < kDigits; ++k) {
          const int8_t* qa = x.q8x256.qs + (i * kDigits + k) * x.cols;
          const int16_t* bsums = x.q8x256.bsums + (i * kDigits + k) * n_groups16;
          int32_t isum = 0, msum_k = 0;
          for (int g = 0; g < kGroups; ++g) {
            const int64_t e0 = sb * kQK_K + g * kQ8x256SumGroup;
            int32_t dot = 0;
            for (int l = 0; l < kQ8x256SumGroup; ++l) dot += dec.v[e0 + l] * qa[e0 + l];
            isum += dec.sc[sb * kGroups + g] * dot;
            msum_k += dec.mn[sb * kGroups + g] * bsums[sb * kGroups + g];
          }
          const float da_k = k + 1 < kDigits ? da[sb] * static_cast<float>(kDigitBase) : da[sb];
          acc += (dec.d[sb] * da_k) * static_cast<float>(isum);
          msum = msum * kDigitBase + msum_k;
        }
        acc -= (dec.dmin[sb] * da[sb]) * static_cast<float>(msum);
      }
      y[i * ldy + r] = acc;
    }
  }
}

template <int kDigits>
void quantize_x32(const float* x, int64_t cols, int8_t* qs, float* ds) {
  for (int64_t b = 0; b < cols / kQ8x32Block; ++b) {
    int32_t q[kQ8x32Block];
    const float d = quantize_block<kDigits>(x + b * kQ8x32Block, kQ8x32Block, qs + b * kQ8x32Block, cols, q);
    int32_t sum = 0;
    for (int l = 0; l < kQ8x32Block; ++l) sum += q[l];
    ds[2 * b] = d;
    ds[2 * b + 1] = d * static_cast<float>(sum);  // exact sum: |sum| <= 32 * 32512
  }
}

template <int kDigits>
void quantize_x256(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bsums) {
  constexpr int kGroupsPerBlock = kQ8x256Block / kQ8x256SumGroup;
  for (int64_t b = 0; b < cols / kQ8x256Block; ++b) {
    int32_t q[kQ8x256Block];
    d[b] = quantize_block<kDigits>(x + b * kQ8x256Block, kQ8x256Block, qs + b * kQ8x256Block, cols, q);
    for (int k = 0; k < kDigits; ++k) {
      const int8_t* digit = qs + k * cols + b * kQ8x256Block;
      for (int g = 0; g < kGroupsPerBlock; ++g) {
        int32_t sum = 0;
        for (int l = 0; l < kQ8x256SumGroup; ++l) sum += digit[g * kQ8x256SumGroup + l];
        bsums[k * (cols / kQ8x256SumGroup) + b * kGroupsPerBlock + g] = static_cast<int16_t>(sum);
      }
    }
  }
}

template <int kDigits>
Kernel find_quantized(DType t) {
  switch (t) {
    case DType::Q4_0: return {ActFormat::kQ8x32, gemm_legacy<DType::Q4_0, kDigits>};
    case DType::Q4_1: return {ActFormat::kQ8x32, gemm_legacy<DType::Q4_1, kDigits>};
    case DType::Q5_0: return {ActFormat::kQ8x32, gemm_legacy<DType::Q5_0, kDigits>};
    case DType::Q5_1: return {ActFormat::kQ8x32, gemm_legacy<DType::Q5_1, kDigits>};
    case DType::Q8_0: return {ActFormat::kQ8x32, gemm_legacy<DType::Q8_0, kDigits>};
    case DType::Q2_K: return {ActFormat::kQ8x256, gemm_kquant<DType::Q2_K, kDigits>};
    case DType::Q3_K: return {ActFormat::kQ8x256, gemm_kquant<DType::Q3_K, kDigits>};
    case DType::Q4_K: return {ActFormat::kQ8x256, gemm_kquant<DType::Q4_K, kDigits>};
    case DType::Q5_K: return {ActFormat::kQ8x256, gemm_kquant<DType::Q5_K, kDigits>};
    case DType::Q6_K: return {ActFormat::kQ8x256, gemm_kquant<DType::Q6_K, kDigits>};
    default: return {};
  }
}

}  // namespace

void scalar_quantize_q8x32(const float* x, int64_t cols, int8_t* qs, float* ds) { quantize_x32<1>(x, cols, qs, ds); }
void scalar_quantize_q16x32(const float* x, int64_t cols, int8_t* qs, float* ds) { quantize_x32<2>(x, cols, qs, ds); }
void scalar_quantize_q8x256(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bsums) {
  quantize_x256<1>(x, cols, qs, d, bsums);
}
void scalar_quantize_q16x256(const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bsums) {
  quantize_x256<2>(x, cols, qs, d, bsums);
}

Kernel scalar_find_kernel(DType t, int digits) {
  switch (t) {
    case DType::F32: return {ActFormat::kF32, gemm_float<DType::F32>};
    case DType::F16: return {ActFormat::kF32, gemm_float<DType::F16>};
    case DType::BF16: return {ActFormat::kF32, gemm_float<DType::BF16>};
    default: return digits == 2 ? find_quantized<2>(t) : find_quantized<1>(t);
  }
}

}  // namespace tern::cpu::detail
