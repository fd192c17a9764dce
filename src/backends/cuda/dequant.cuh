// Element-wise dequantization of GGUF rows on the device, bit-exact with dequantize_row_ref
// (core/quant_ref.h): the same float32 expressions in the same order, with explicit rounding
// intrinsics so nothing is fused into an FMA. Used by the embedding lookup (any table type) and
// by the generic matmul for the types without a dedicated kernel (q5_0, q5_1, q2_k, q3_k, q8_k).
// Slow on purpose: every element re-reads its block's scales.
#pragma once

#include "backends/cuda/common.cuh"
#include "core/dtype.h"

namespace tern::cuda {

__device__ __forceinline__ int nibble(const uint8_t* qs, int byte, int shift) { return (qs[byte] >> shift) & 0x0f; }

// k-quant bit slots (core/quant_ref_layout.h): i is the element index inside the 256-block.
__device__ __forceinline__ int k_crumb(const uint8_t* bytes, int i) {
  return (bytes[(i / 128) * 32 + i % 32] >> (2 * ((i % 128) / 32))) & 3;
}
__device__ __forceinline__ int k_bit(const uint8_t* bytes, int i) { return (bytes[i % 32] >> (i / 32)) & 1; }
__device__ __forceinline__ int k_nibble(const uint8_t* bytes, int i) {
  return nibble(bytes, (i / 64) * 32 + i % 32, 4 * ((i % 64) / 32));
}
__device__ __forceinline__ int q6k_nibble(const uint8_t* bytes, int i) {
  return nibble(bytes, (i / 128) * 64 + i % 64, 4 * ((i % 128) / 64));
}

__device__ __forceinline__ void scale_min_k4(const uint8_t* packed, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = packed[j] & 0x3f;
    *min = packed[j + 4] & 0x3f;
  } else {
    *scale = (packed[j + 4] & 0x0f) | ((packed[j - 4] >> 6) << 4);
    *min = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
  }
}

__device__ __forceinline__ int scale_q3k(const uint8_t* packed, int j) {
  const int low = (packed[j % 8] >> (4 * (j / 8))) & 0x0f;
  const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 0x03;
  return (low | (high << 4)) - 32;
}

// Element e of a row of type t. Precondition: t is one of the types handled below.
__device__ inline float dequant_element(DType t, const uint8_t* row, int64_t e) {
  switch (t) {
    case DType::F32:
      return reinterpret_cast<const float*>(row)[e];
    case DType::F16:
      return half_bits_to_float(load_u16(row + 2 * e));
    case DType::BF16:
      return bf16_bits_to_float(load_u16(row + 2 * e));
    case DType::Q4_0: {
      const uint8_t* b = row + (e / 32) * 18;
      const int i = static_cast<int>(e % 32);
      const float d = half_bits_to_float(load_u16(b));
      return __fmul_rn(d, static_cast<float>(nibble(b + 2, i % 16, 4 * (i / 16)) - 8));
    }
    case DType::Q4_1: {
      const uint8_t* b = row + (e / 32) * 20;
      const int i = static_cast<int>(e % 32);
      const float d = half_bits_to_float(load_u16(b)), m = half_bits_to_float(load_u16(b + 2));
      return __fadd_rn(__fmul_rn(d, static_cast<float>(nibble(b + 4, i % 16, 4 * (i / 16)))), m);
    }
    case DType::Q5_0: {
      const uint8_t* b = row + (e / 32) * 22;
      const int i = static_cast<int>(e % 32);
      const float d = half_bits_to_float(load_u16(b));
      const int q = nibble(b + 6, i % 16, 4 * (i / 16)) | (((b[2 + i / 8] >> (i % 8)) & 1) << 4);
      return __fmul_rn(d, static_cast<float>(q - 16));
    }
    case DType::Q5_1: {
      const uint8_t* b = row + (e / 32) * 24;
      const int i = static_cast<int>(e % 32);
      const float d = half_bits_to_float(load_u16(b)), m = half_bits_to_float(load_u16(b + 2));
      const int q = nibble(b + 8, i % 16, 4 * (i / 16)) | (((b[4 + i / 8] >> (i % 8)) & 1) << 4);
      return __fadd_rn(__fmul_rn(d, static_cast<float>(q)), m);
    }
    case DType::Q8_0: {
      const uint8_t* b = row + (e / 32) * 34;
      const int i = static_cast<int>(e % 32);
      return __fmul_rn(static_cast<float>(static_cast<int8_t>(b[2 + i])), half_bits_to_float(load_u16(b)));
    }
    case DType::Q2_K: {
      const uint8_t* b = row + (e / 256) * 84;
      const int i = static_cast<int>(e % 256);
      const float d = half_bits_to_float(load_u16(b + 80)), dmin = half_bits_to_float(load_u16(b + 82));
      const int sc = b[i / 16];
      const float dl = __fmul_rn(d, static_cast<float>(sc & 0x0f));
      const float ml = __fmul_rn(dmin, static_cast<float>(sc >> 4));
      return __fsub_rn(__fmul_rn(dl, static_cast<float>(k_crumb(b + 16, i))), ml);
    }
    case DType::Q3_K: {
      const uint8_t* b = row + (e / 256) * 110;
      const int i = static_cast<int>(e % 256);
      const float d = half_bits_to_float(load_u16(b + 108));
      const float dl = __fmul_rn(d, static_cast<float>(scale_q3k(b + 96, i / 16)));
      const int q = k_crumb(b + 32, i) - (k_bit(b, i) ? 0 : 4);
      return __fmul_rn(dl, static_cast<float>(q));
    }
    case DType::Q4_K:
    case DType::Q5_K: {
      const bool q5 = t == DType::Q5_K;
      const uint8_t* b = row + (e / 256) * (q5 ? 176 : 144);
      const int i = static_cast<int>(e % 256);
      const float d = half_bits_to_float(load_u16(b)), dmin = half_bits_to_float(load_u16(b + 2));
      int sc, m;
      scale_min_k4(b + 4, i / 32, &sc, &m);
      const float dl = __fmul_rn(d, static_cast<float>(sc));
      const float ml = __fmul_rn(dmin, static_cast<float>(m));
      const int q = q5 ? (k_nibble(b + 48, i) | (k_bit(b + 16, i) << 4)) : k_nibble(b + 16, i);
      return __fsub_rn(__fmul_rn(dl, static_cast<float>(q)), ml);
    }
    case DType::Q6_K: {
      const uint8_t* b = row + (e / 256) * 210;
      const int i = static_cast<int>(e % 256);
      const float d = half_bits_to_float(load_u16(b + 208));
      const float dl = __fmul_rn(d, static_cast<float>(static_cast<int8_t>(b[192 + i / 16])));
      const int q = (q6k_nibble(b, i) | (k_crumb(b + 128, i) << 4)) - 32;
      return __fmul_rn(dl, static_cast<float>(q));
    }
    case DType::Q8_K: {
      const uint8_t* b = row + (e / 256) * 292;
      const int i = static_cast<int>(e % 256);
      return __fmul_rn(static_cast<float>(static_cast<int8_t>(b[4 + i])), *reinterpret_cast<const float*>(b));
    }
    default:
      return __int_as_float(0x7fc00000);  // unreachable: launchers reject other types
  }
}

__host__ __device__ constexpr bool dequant_element_supports(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q4_0: case DType::Q4_1:
    case DType::Q5_0: case DType::Q5_1: case DType::Q8_0: case DType::Q2_K: case DType::Q3_K:
    case DType::Q4_K: case DType::Q5_K: case DType::Q6_K: case DType::Q8_K:
      return true;
    default:
      return false;
  }
}

}  // namespace tern::cuda
