// Plain reference (de)quantization of GGUF blocks: the oracle for every fast kernel and the
// quantizer behind `tern synth`. Scalar, single-threaded, deterministic.
//
// Exactness contract (checked by tests/core/quant_ref_test.cpp against goldens written by
// tools/gen_quant_goldens.py from the gguf Python package):
//  - dequantize_* is bit-exact (0 ULP) with gguf.quants.dequantize for every type it shares with
//    gguf-py (q8_1 and q8_k, which gguf-py cannot decode, against the GGUF formula in numpy),
//    because both evaluate the same float32 expressions in the same order
//    (e.g. q4_k: (d * sc) * q - (dmin * m)).
//    note for fast kernels: with an fp16 d (11-bit significand) and these integer ranges every
//    product in the formulas is exact in float32 (worst case q6_k: 11 + 7 + 5 = 23 bits), so any
//    multiplication order, integer pre-products (sc * q) and FMA all reproduce the reference
//    exactly. The only rounding is the final "+ m" / "- dmin * m" (one rounding either way) and
//    q8_k's float32 d * q (a single product).
//    The .cpp files are built with -ffp-contract=off for the encoders: gguf-py rounds x * (1/d)
//    before adding 8.5, an FMA would not.
//  - quantize_* for f16, bf16, q4_0, q4_1, q5_0, q5_1 and q8_0 is byte-identical to
//    gguf.quants.quantize. The other types (q8_1, k-quants, q8_k) have no Python quantizer; they
//    use tern's own scale/min search (quant_ref_k_quant.cpp) and are tested on round-trip error bounds.
//  - Scales are fp16, so inputs must keep every block scale inside the fp16 range (roughly
//    |x| < 65504 * levels); beyond it the block decodes to inf/nan, as it does in gguf-py. Very
//    small blocks (k-quant super-scales below ~6e-5, i.e. |x| below ~1e-2 for q4_k) get fp16
//    subnormal scales and lose relative precision, also as in gguf/ggml.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "core/quant_blocks.h"

namespace tern {

// Dequantizes n elements of type t starting at src (n a multiple of the block size) into dst.
// Supports F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K.
// Returns false for a type it does not support.
bool dequantize_row_ref(DType t, const void* src, float* dst, int64_t n);

// Quantizes n floats into type t (same type list). Round-to-nearest schemes in the spirit of
// ggml's reference quantizers; the output is a valid block stream any GGUF reader decodes.
// Precondition: src is finite for the quantized types (f16/bf16 also take inf and nan).
// Returns false for a type it does not support.
bool quantize_row_ref(DType t, const float* src, void* dst, int64_t n);

// True when both functions above support t.
bool quant_ref_supports(DType t);
// Every type quant_ref supports, in GGUF id order (for `tern synth --dtype` help and tests).
std::span<const DType> quant_ref_types();

// Per-block forms, for kernel tests that build or check single blocks. y / x hold the block's
// element count (kQK or kQK_K) floats.
void dequantize_block_ref(const BlockQ4_0& b, float* y);
void dequantize_block_ref(const BlockQ4_1& b, float* y);
void dequantize_block_ref(const BlockQ5_0& b, float* y);
void dequantize_block_ref(const BlockQ5_1& b, float* y);
void dequantize_block_ref(const BlockQ8_0& b, float* y);
void dequantize_block_ref(const BlockQ8_1& b, float* y);
void dequantize_block_ref(const BlockQ2_K& b, float* y);
void dequantize_block_ref(const BlockQ3_K& b, float* y);
void dequantize_block_ref(const BlockQ4_K& b, float* y);
void dequantize_block_ref(const BlockQ5_K& b, float* y);
void dequantize_block_ref(const BlockQ6_K& b, float* y);
void dequantize_block_ref(const BlockQ8_K& b, float* y);

void quantize_block_ref(const float* x, BlockQ4_0* b);
void quantize_block_ref(const float* x, BlockQ4_1* b);
void quantize_block_ref(const float* x, BlockQ5_0* b);
void quantize_block_ref(const float* x, BlockQ5_1* b);
void quantize_block_ref(const float* x, BlockQ8_0* b);
void quantize_block_ref(const float* x, BlockQ8_1* b);
void quantize_block_ref(const float* x, BlockQ2_K* b);
void quantize_block_ref(const float* x, BlockQ3_K* b);
void quantize_block_ref(const float* x, BlockQ4_K* b);
void quantize_block_ref(const float* x, BlockQ5_K* b);
void quantize_block_ref(const float* x, BlockQ6_K* b);
void quantize_block_ref(const float* x, BlockQ8_K* b);

}  // namespace tern
