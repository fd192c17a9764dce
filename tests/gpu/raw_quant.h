// Raw quantized weights and activations for the bitwise kernel comparisons (GpuMatmul, GpuQmma):
// bytes the quantizer rarely or never writes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gpu_test_util.h"

namespace tern::gputest {

// Raw quantized weights for the bitwise kernel comparisons: uniform random bytes, with each
// block's f16 scales replaced by finite values of either sign in [2^-10, 2^-6), so that every
// product stays far from overflow.
struct RawQuantLayout {
  DType dtype;
  int block_bytes;
  std::vector<int> f16_at;  // offsets of the block's f16 scales
};
inline const RawQuantLayout kRawLayouts[] = {
    {DType::Q4_K, 144, {0, 2}}, {DType::Q5_K, 176, {0, 2}}, {DType::Q6_K, 210, {208}}, {DType::Q8_0, 34, {0}}};

inline HostTensor raw_quant_weights(const RawQuantLayout& lay, int64_t rows, int64_t cols, std::mt19937& rng) {
  HostTensor hw;
  hw.bytes.resize(row_bytes(lay.dtype, cols) * rows);
  for (size_t i = 0; i + 4 <= hw.bytes.size(); i += 4) {
    const uint32_t word = static_cast<uint32_t>(rng());
    std::memcpy(hw.bytes.data() + i, &word, 4);
  }
  for (size_t b = 0; b < hw.bytes.size(); b += lay.block_bytes) {
    for (const int off : lay.f16_at) {
      const uint16_t h = static_cast<uint16_t>((rng() & 0x8000u) | ((5u + rng() % 4u) << 10) | (rng() & 0x3ffu));
      hw.bytes[b + off] = static_cast<uint8_t>(h & 0xff);
      hw.bytes[b + off + 1] = static_cast<uint8_t>(h >> 8);
    }
  }
  hw.t = Tensor::view(hw.bytes.data(), lay.dtype, rows, cols);
  return hw;
}

// Random activations with runs of 32 values of +-4 every 97 elements (int8 tiles at +-127).
inline std::vector<float> activations_with_runs(int64_t cols, uint32_t seed) {
  auto xv = random_floats(cols, seed);
  for (int64_t i = 0; i < cols; i += 97) std::fill_n(xv.begin() + i, std::min<int64_t>(32, cols - i), i % 2 ? 4.0f : -4.0f);
  return xv;
}

}  // namespace tern::gputest
