// Reference codecs for the legacy 32-element blocks: q4_0, q4_1, q5_0, q5_1, q8_0, q8_1.
//
// Decoders evaluate exactly the float32 expressions of the GGUF definitions (x = d*q, or
// x = d*q + m with q converted to float first), so they match gguf-py bit for bit.
// Encoders follow gguf-py's round-to-nearest quantizers operation for operation (same float32
// divisions, reciprocal, truncation and clamping), so their bytes match gguf-py's too:
//   q4_0 / q5_0: d = x_absmax_signed / -8 (-16); q = min(15 (31), trunc(x / d + 8.5 (16.5)))
//     — the signed extreme maps to q = 0, which uses the one extra negative level.
//   q4_1 / q5_1: d = (max - min) / 15 (31), m = min; q = min(15 (31), trunc((x - min) / d + 0.5))
//   q8_0 / q8_1: d = absmax / 127; q = round-half-away(x / d)
// where "/ d" is a multiply by the float reciprocal 1/d (0 when d == 0), as in gguf-py.
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "core/quant_ref.h"
#include "core/quant_ref_layout.h"

namespace tern {
namespace {

using quant_layout::get_bits;
using quant_layout::legacy_high_bit;
using quant_layout::legacy_nibble;
using quant_layout::put_bits;

float reciprocal_or_zero(float d) { return d == 0.0f ? 0.0f : 1.0f / d; }

// The element with the largest magnitude, keeping its sign (first one on ties).
float signed_absmax(const float* x, int n) {
  float amax = 0.0f, signed_max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      signed_max = x[i];
    }
  }
  return signed_max;
}

void min_max(const float* x, int n, float* min, float* max) {
  *min = x[0];
  *max = x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < *min) *min = x[i];
    if (x[i] > *max) *max = x[i];
  }
}

// trunc(v) clamped to [0, q_max]; v >= 0 for finite inputs by construction of the encoders.
int trunc_clamped(float v, int q_max) {
  const int q = static_cast<int>(std::trunc(v));
  return q < 0 ? 0 : (q > q_max ? q_max : q);
}

// Packs 4-bit (and for q5, the 5th bit of) 32 quants into qs / qh. qh may be null (q4).
void pack_legacy(const int* q, uint8_t* qs, uint8_t* qh) {
  std::memset(qs, 0, kQK / 2);
  if (qh) std::memset(qh, 0, 4);
  for (int e = 0; e < kQK; ++e) {
    put_bits(qs, legacy_nibble(e), 4, q[e]);
    if (qh) put_bits(qh, legacy_high_bit(e), 1, q[e] >> 4);
  }
}

int q4(const uint8_t* qs, int e) { return get_bits(qs, legacy_nibble(e), 4); }
int q5(const uint8_t* qs, const uint8_t* qh, int e) {
  return q4(qs, e) | (get_bits(qh, legacy_high_bit(e), 1) << 4);
}

// Symmetric 8-bit encoding shared by q8_0 and q8_1. Returns the float scale d (before fp16).
float quantize_q8_symmetric(const float* x, int8_t* qs) {
  float amax = 0.0f;
  for (int i = 0; i < kQK; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = reciprocal_or_zero(d);
  for (int i = 0; i < kQK; ++i) qs[i] = static_cast<int8_t>(std::round(x[i] * id));
  return d;
}

}  // namespace

void dequantize_block_ref(const BlockQ4_0& b, float* y) {
  const float d = fp16_to_f32(b.d);
  for (int e = 0; e < kQK; ++e) y[e] = d * static_cast<float>(q4(b.qs, e) - 8);
}

void dequantize_block_ref(const BlockQ4_1& b, float* y) {
  const float d = fp16_to_f32(b.d), m = fp16_to_f32(b.m);
  for (int e = 0; e < kQK; ++e) y[e] = d * static_cast<float>(q4(b.qs, e)) + m;
}

void dequantize_block_ref(const BlockQ5_0& b, float* y) {
  const float d = fp16_to_f32(b.d);
  for (int e = 0; e < kQK; ++e) y[e] = d * static_cast<float>(q5(b.qs, b.qh, e) - 16);
}

void dequantize_block_ref(const BlockQ5_1& b, float* y) {
  const float d = fp16_to_f32(b.d), m = fp16_to_f32(b.m);
  for (int e = 0; e < kQK; ++e) y[e] = d * static_cast<float>(q5(b.qs, b.qh, e)) + m;
}

void dequantize_block_ref(const BlockQ8_0& b, float* y) {
  const float d = fp16_to_f32(b.d);
  for (int e = 0; e < kQK; ++e) y[e] = static_cast<float>(b.qs[e]) * d;
}

// q8_1's s field (d * sum(q), used by dot products) carries no extra information for decoding.
void dequantize_block_ref(const BlockQ8_1& b, float* y) {
  const float d = fp16_to_f32(b.d);
  for (int e = 0; e < kQK; ++e) y[e] = static_cast<float>(b.qs[e]) * d;
}

void quantize_block_ref(const float* x, BlockQ4_0* b) {
  const float d = signed_absmax(x, kQK) / -8.0f;
  const float id = reciprocal_or_zero(d);
  int q[kQK];
  for (int e = 0; e < kQK; ++e) q[e] = trunc_clamped(x[e] * id + 8.5f, 15);
  b->d = f32_to_fp16(d);
  pack_legacy(q, b->qs, nullptr);
}

void quantize_block_ref(const float* x, BlockQ4_1* b) {
  float min, max;
  min_max(x, kQK, &min, &max);
  const float d = (max - min) / 15.0f;
  const float id = reciprocal_or_zero(d);
  int q[kQK];
  for (int e = 0; e < kQK; ++e) q[e] = trunc_clamped((x[e] - min) * id + 0.5f, 15);
  b->d = f32_to_fp16(d);
  b->m = f32_to_fp16(min);
  pack_legacy(q, b->qs, nullptr);
}

void quantize_block_ref(const float* x, BlockQ5_0* b) {
  const float d = signed_absmax(x, kQK) / -16.0f;
  const float id = reciprocal_or_zero(d);
  int q[kQK];
  for (int e = 0; e < kQK; ++e) q[e] = trunc_clamped(x[e] * id + 16.5f, 31);
  b->d = f32_to_fp16(d);
  pack_legacy(q, b->qs, b->qh);
}

void quantize_block_ref(const float* x, BlockQ5_1* b) {
  float min, max;
  min_max(x, kQK, &min, &max);
  const float d = (max - min) / 31.0f;
  const float id = reciprocal_or_zero(d);
  int q[kQK];
  for (int e = 0; e < kQK; ++e) q[e] = trunc_clamped((x[e] - min) * id + 0.5f, 31);
  b->d = f32_to_fp16(d);
  b->m = f32_to_fp16(min);
  pack_legacy(q, b->qs, b->qh);
}

void quantize_block_ref(const float* x, BlockQ8_0* b) { b->d = f32_to_fp16(quantize_q8_symmetric(x, b->qs)); }

// s = d * sum(q) with the unrounded float d, stored as fp16 (the dot-product kernels use it to
// fold in q4_1/q5_1 block minimums).
void quantize_block_ref(const float* x, BlockQ8_1* b) {
  const float d = quantize_q8_symmetric(x, b->qs);
  int sum = 0;
  for (int e = 0; e < kQK; ++e) sum += b->qs[e];
  b->d = f32_to_fp16(d);
  b->s = f32_to_fp16(d * static_cast<float>(sum));
}

}  // namespace tern
