// Reference decoders for the 256-element k-quant super-blocks: q2_k, q3_k, q4_k, q5_k, q6_k,
// q8_k. (Encoders: quant_ref_k_quant.cpp.)
//
// Each decoder first forms the sub-block's float scale (and min) as one float32 product, then
// applies it to the integer quant, in the order of the GGUF definitions and gguf-py:
//   q2_k:       y = (d * sc) * q - (dmin * m)          q in [0, 3],   sc, m 4-bit
//   q3_k:       y = (d * sc) * q                       q in [-4, 3],  sc 6-bit signed
//   q4_k, q5_k: y = (d * sc) * q - (dmin * m)          q in [0, 15] / [0, 31], sc, m 6-bit
//   q6_k:       y = (d * sc) * q                       q in [-32, 31], sc int8
//   q8_k:       y = q * d                              q int8, d float32
// (All those products happen to be exact in float32, see quant_ref.h; the order is kept anyway so
// the code reads like the definition.)
#include "core/fp16.h"
#include "core/quant_ref.h"
#include "core/quant_ref_layout.h"

namespace tern {

using quant_layout::get_bits;
using quant_layout::get_scale_min_k4;
using quant_layout::get_scale_q3k;
using quant_layout::k_bit;
using quant_layout::k_crumb;
using quant_layout::k_nibble;
using quant_layout::q6k_nibble;

// 16 sub-blocks of 16. scales[j]: low nibble = scale, high nibble = min.
void dequantize_block_ref(const BlockQ2_K& b, float* y) {
  const float d = fp16_to_f32(b.d), dmin = fp16_to_f32(b.dmin);
  for (int j = 0; j < kQK_K / 16; ++j) {
    const float dl = d * static_cast<float>(b.scales[j] & 0x0f);
    const float ml = dmin * static_cast<float>(b.scales[j] >> 4);
    for (int e = 16 * j; e < 16 * (j + 1); ++e) {
      y[e] = dl * static_cast<float>(get_bits(b.qs, k_crumb(e), 2)) - ml;
    }
  }
}

// 16 sub-blocks of 16. The quant's 3rd bit is stored inverted: hmask bit set means q = low2,
// clear means q = low2 - 4.
void dequantize_block_ref(const BlockQ3_K& b, float* y) {
  const float d = fp16_to_f32(b.d);
  for (int j = 0; j < kQK_K / 16; ++j) {
    const float dl = d * static_cast<float>(get_scale_q3k(b.scales, j));
    for (int e = 16 * j; e < 16 * (j + 1); ++e) {
      const int q = get_bits(b.qs, k_crumb(e), 2) - (get_bits(b.hmask, k_bit(e), 1) ? 0 : 4);
      y[e] = dl * static_cast<float>(q);
    }
  }
}

// 8 sub-blocks of 32.
void dequantize_block_ref(const BlockQ4_K& b, float* y) {
  const float d = fp16_to_f32(b.d), dmin = fp16_to_f32(b.dmin);
  for (int j = 0; j < kQK_K / 32; ++j) {
    int sc, m;
    get_scale_min_k4(b.scales, j, &sc, &m);
    const float dl = d * static_cast<float>(sc);
    const float ml = dmin * static_cast<float>(m);
    for (int e = 32 * j; e < 32 * (j + 1); ++e) {
      y[e] = dl * static_cast<float>(get_bits(b.qs, k_nibble(e), 4)) - ml;
    }
  }
}

// 8 sub-blocks of 32; the 5th bit of each quant lives in qh.
void dequantize_block_ref(const BlockQ5_K& b, float* y) {
  const float d = fp16_to_f32(b.d), dmin = fp16_to_f32(b.dmin);
  for (int j = 0; j < kQK_K / 32; ++j) {
    int sc, m;
    get_scale_min_k4(b.scales, j, &sc, &m);
    const float dl = d * static_cast<float>(sc);
    const float ml = dmin * static_cast<float>(m);
    for (int e = 32 * j; e < 32 * (j + 1); ++e) {
      const int q = get_bits(b.qs, k_nibble(e), 4) | (get_bits(b.qh, k_bit(e), 1) << 4);
      y[e] = dl * static_cast<float>(q) - ml;
    }
  }
}

// 16 sub-blocks of 16; quant = low nibble from ql | high 2 bits from qh, biased by 32.
void dequantize_block_ref(const BlockQ6_K& b, float* y) {
  const float d = fp16_to_f32(b.d);
  for (int j = 0; j < kQK_K / 16; ++j) {
    const float dl = d * static_cast<float>(b.scales[j]);
    for (int e = 16 * j; e < 16 * (j + 1); ++e) {
      const int q = (get_bits(b.ql, q6k_nibble(e), 4) | (get_bits(b.qh, k_crumb(e), 2) << 4)) - 32;
      y[e] = dl * static_cast<float>(q);
    }
  }
}

// bsums are a dot-product helper and play no part in decoding.
void dequantize_block_ref(const BlockQ8_K& b, float* y) {
  const float d = b.d;  // a by-value read of a packed member is fine (no reference is formed)
  for (int e = 0; e < kQK_K; ++e) y[e] = static_cast<float>(b.qs[e]) * d;
}

}  // namespace tern
