// GGUF quantization block layouts, byte for byte as stored in the file (ggml-common.h in ggml
// defines them; sizes are asserted below). Scales are IEEE half stored as uint16_t bits.
// Letters: QK = elements per block; QK_K = 256 for the k-quants ("super-blocks").
#pragma once

#include <cstdint>

namespace tern {

constexpr int kQK = 32;    // elements per block of the legacy quants (q4_0 .. q8_1)
constexpr int kQK_K = 256; // elements per k-quant super-block
constexpr int kKScaleBytes = 12;  // packed 6-bit scales and mins of q4_k / q5_k

#pragma pack(push, 1)
// x = (q - 8) * d; qs[j] holds element j (low nibble) and element j + 16 (high nibble).
struct BlockQ4_0 { uint16_t d; uint8_t qs[kQK / 2]; };
// x = q * d + m; nibble order as q4_0.
struct BlockQ4_1 { uint16_t d; uint16_t m; uint8_t qs[kQK / 2]; };
// 5-bit: low nibbles as q4_0, bit 4 of element j in bit j of qh. x = (q - 16) * d.
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
// x = q * d + m.
struct BlockQ5_1 { uint16_t d; uint16_t m; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
// x = q * d.
struct BlockQ8_0 { uint16_t d; int8_t qs[kQK]; };
// Activation block for q4_1/q5_1 dot products: s = d * sum(qs).
struct BlockQ8_1 { uint16_t d; uint16_t s; int8_t qs[kQK]; };
// 16 sub-blocks of 16: scales[i] = scale (low 4 bits) | min (high 4 bits); 2-bit quants.
struct BlockQ2_K { uint8_t scales[kQK_K / 16]; uint8_t qs[kQK_K / 4]; uint16_t d; uint16_t dmin; };
// 16 sub-blocks of 16, 6-bit scales packed in 12 bytes; high bit of each 3-bit quant in hmask.
struct BlockQ3_K { uint8_t hmask[kQK_K / 8]; uint8_t qs[kQK_K / 4]; uint8_t scales[12]; uint16_t d; };
// 8 sub-blocks of 32 with 6-bit scales and mins packed in 12 bytes. x = d*sc*q - dmin*m.
struct BlockQ4_K { uint16_t d; uint16_t dmin; uint8_t scales[kKScaleBytes]; uint8_t qs[kQK_K / 2]; };
struct BlockQ5_K { uint16_t d; uint16_t dmin; uint8_t scales[kKScaleBytes]; uint8_t qh[kQK_K / 8]; uint8_t qs[kQK_K / 2]; };
// 16 sub-blocks of 16 with int8 scales; 6-bit quants split into ql (low 4) and qh (high 2). x = d*sc*(q-32).
struct BlockQ6_K { uint8_t ql[kQK_K / 2]; uint8_t qh[kQK_K / 4]; int8_t scales[kQK_K / 16]; uint16_t d; };
// Activation block for k-quant dot products: float scale, bsums = sums of each group of 16.
struct BlockQ8_K { float d; int8_t qs[kQK_K]; int16_t bsums[kQK_K / 16]; };
#pragma pack(pop)

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

}  // namespace tern
