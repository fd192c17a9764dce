// Plain reference (de)quantization of GGUF blocks: the oracle for every fast kernel and the
// quantizer behind `tern synth`. Scalar, single-threaded, deterministic.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace tern {

// Dequantizes n elements of type t starting at src (n a multiple of the block size) into dst.
// Supports F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K.
// Returns false for a type it does not support.
bool dequantize_row_ref(DType t, const void* src, float* dst, int64_t n);

// Quantizes n floats into type t (same type list). Round-to-nearest schemes in the spirit of
// ggml's reference quantizers; the output is a valid block stream any GGUF reader decodes.
// Returns false for a type it does not support.
bool quantize_row_ref(DType t, const float* src, void* dst, int64_t n);

}  // namespace tern
