// Type dispatch for the reference (de)quantizers, plus the plain float types (f32, f16, bf16).
// The block codecs live in quant_ref_legacy.cpp (32-element blocks) and quant_ref_k*.cpp
// (256-element super-blocks).
#include "core/quant_ref.h"

#include <array>
#include <cstring>

#include "core/check.h"
#include "core/fp16.h"

namespace tern {
namespace {

// Runs the per-block codec over a row. Blocks are byte-packed (alignof == 1), so any src/dst
// pointer is a valid Block pointer.
template <typename Block>
void dequantize_blocks(const void* src, float* dst, int64_t n, int64_t block_elems) {
  static_assert(alignof(Block) == 1);
  TERN_CHECK_MSG(n % block_elems == 0, "row length must be a multiple of the block size");
  const auto* blocks = static_cast<const Block*>(src);
  for (int64_t i = 0; i < n / block_elems; ++i) dequantize_block_ref(blocks[i], dst + i * block_elems);
}

template <typename Block>
void quantize_blocks(const float* src, void* dst, int64_t n, int64_t block_elems) {
  static_assert(alignof(Block) == 1);
  TERN_CHECK_MSG(n % block_elems == 0, "row length must be a multiple of the block size");
  auto* blocks = static_cast<Block*>(dst);
  for (int64_t i = 0; i < n / block_elems; ++i) quantize_block_ref(src + i * block_elems, &blocks[i]);
}

// 16-bit float types: storage may be unaligned, so read and write through memcpy.
template <float (*to_f32)(uint16_t)>
void dequantize_halfs(const void* src, float* dst, int64_t n) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, bytes + 2 * i, 2);
    dst[i] = to_f32(h);
  }
}

template <uint16_t (*from_f32)(float)>
void quantize_halfs(const float* src, void* dst, int64_t n) {
  auto* bytes = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = from_f32(src[i]);
    std::memcpy(bytes + 2 * i, &h, 2);
  }
}

constexpr std::array kSupported = {DType::F32,  DType::F16,  DType::Q4_0, DType::Q4_1, DType::Q5_0,
                                   DType::Q5_1, DType::Q8_0, DType::Q8_1, DType::Q2_K, DType::Q3_K,
                                   DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K, DType::BF16};

}  // namespace

bool dequantize_row_ref(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return true;
    case DType::F16: dequantize_halfs<fp16_to_f32>(src, dst, n); return true;
    case DType::BF16: dequantize_halfs<bf16_to_f32>(src, dst, n); return true;
    case DType::Q4_0: dequantize_blocks<BlockQ4_0>(src, dst, n, kQK); return true;
    case DType::Q4_1: dequantize_blocks<BlockQ4_1>(src, dst, n, kQK); return true;
    case DType::Q5_0: dequantize_blocks<BlockQ5_0>(src, dst, n, kQK); return true;
    case DType::Q5_1: dequantize_blocks<BlockQ5_1>(src, dst, n, kQK); return true;
    case DType::Q8_0: dequantize_blocks<BlockQ8_0>(src, dst, n, kQK); return true;
    case DType::Q8_1: dequantize_blocks<BlockQ8_1>(src, dst, n, kQK); return true;
    case DType::Q2_K: dequantize_blocks<BlockQ2_K>(src, dst, n, kQK_K); return true;
    case DType::Q3_K: dequantize_blocks<BlockQ3_K>(src, dst, n, kQK_K); return true;
    case DType::Q4_K: dequantize_blocks<BlockQ4_K>(src, dst, n, kQK_K); return true;
    case DType::Q5_K: dequantize_blocks<BlockQ5_K>(src, dst, n, kQK_K); return true;
    case DType::Q6_K: dequantize_blocks<BlockQ6_K>(src, dst, n, kQK_K); return true;
    case DType::Q8_K: dequantize_blocks<BlockQ8_K>(src, dst, n, kQK_K); return true;
    default: return false;
  }
}

bool quantize_row_ref(DType t, const float* src, void* dst, int64_t n) {
  switch (t) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return true;
    case DType::F16: quantize_halfs<f32_to_fp16>(src, dst, n); return true;
    case DType::BF16: quantize_halfs<f32_to_bf16>(src, dst, n); return true;
    case DType::Q4_0: quantize_blocks<BlockQ4_0>(src, dst, n, kQK); return true;
    case DType::Q4_1: quantize_blocks<BlockQ4_1>(src, dst, n, kQK); return true;
    case DType::Q5_0: quantize_blocks<BlockQ5_0>(src, dst, n, kQK); return true;
    case DType::Q5_1: quantize_blocks<BlockQ5_1>(src, dst, n, kQK); return true;
    case DType::Q8_0: quantize_blocks<BlockQ8_0>(src, dst, n, kQK); return true;
    case DType::Q8_1: quantize_blocks<BlockQ8_1>(src, dst, n, kQK); return true;
    case DType::Q2_K: quantize_blocks<BlockQ2_K>(src, dst, n, kQK_K); return true;
    case DType::Q3_K: quantize_blocks<BlockQ3_K>(src, dst, n, kQK_K); return true;
    case DType::Q4_K: quantize_blocks<BlockQ4_K>(src, dst, n, kQK_K); return true;
    case DType::Q5_K: quantize_blocks<BlockQ5_K>(src, dst, n, kQK_K); return true;
    case DType::Q6_K: quantize_blocks<BlockQ6_K>(src, dst, n, kQK_K); return true;
    case DType::Q8_K: quantize_blocks<BlockQ8_K>(src, dst, n, kQK_K); return true;
    default: return false;
  }
}

bool quant_ref_supports(DType t) {
  for (DType s : kSupported)
    if (s == t) return true;
  return false;
}

std::span<const DType> quant_ref_types() { return kSupported; }

}  // namespace tern
