// Activation blocks whose largest magnitude is so small that q_max / amax overflows (below
// 127 / FLT_MAX = 3.7e-37 in the 8-bit mode, 32512 / FLT_MAX = 9.6e-35 in the 16-bit one,
// including subnormals) quantize to zeros with a finite scale at every ISA level and in
// both modes. Before, 0 * inf gave NaN and the float -> int conversion of NaN was undefined.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/matmul.h"
#include "backends/cpu/matmul_kernels.h"

namespace tern::cpu {
namespace {

using namespace detail;

struct Quantizers {
  QuantizeQ8x32Fn x32;
  QuantizeQ8x256Fn x256;
};

Quantizers quantizers(Isa isa, int digits) {
  if (isa == Isa::kScalar) return digits == 1 ? Quantizers{scalar_quantize_q8x32, scalar_quantize_q8x256}
                                              : Quantizers{scalar_quantize_q16x32, scalar_quantize_q16x256};
  if (isa == Isa::kAvx2) return digits == 1 ? Quantizers{avx2_quantize_q8x32, avx2_quantize_q8x256}
                                            : Quantizers{avx2_quantize_q16x32, avx2_quantize_q16x256};
  return digits == 1 ? Quantizers{avx512_quantize_q8x32, avx512_quantize_q8x256}
                     : Quantizers{avx512_quantize_q16x32, avx512_quantize_q16x256};
}

TEST(ActivationQuant, TinyBlocksQuantizeToZerosWithFiniteScales) {
  constexpr int64_t kCols = 512;
  std::vector<float> x(kCols);
  for (int64_t j = 0; j < 256; ++j) x[j] = (j % 3 == 0 ? 1e-38f : -2e-38f) * static_cast<float>(j % 5);  // tiny normals
  for (int64_t j = 256; j < kCols; ++j) x[j] = (j % 2 ? 1e-40f : -1e-41f);                            // subnormals
  for (Isa isa : supported_isas()) {
    for (int digits : {1, 2}) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " digits " + std::to_string(digits));
      const Quantizers q = quantizers(isa, digits);
      std::vector<int8_t> qs(2 * kCols, 99);
      std::vector<float> scales(kCols / 16, -1.0f);
      std::vector<int16_t> bsums(2 * kCols / 16, 99);
      q.x32(x.data(), kCols, qs.data(), scales.data());
      for (int64_t j = 0; j < digits * kCols; ++j) ASSERT_EQ(qs[j], 0) << "x32 element " << j;
      for (int64_t b = 0; b < 2 * (kCols / 32); ++b) ASSERT_TRUE(std::isfinite(scales[b])) << "x32 scale " << b;
      std::fill(qs.begin(), qs.end(), int8_t{99});
      q.x256(x.data(), kCols, qs.data(), scales.data(), bsums.data());
      for (int64_t j = 0; j < digits * kCols; ++j) ASSERT_EQ(qs[j], 0) << "x256 element " << j;
      for (int64_t b = 0; b < kCols / 256; ++b) ASSERT_TRUE(std::isfinite(scales[b])) << "x256 scale " << b;
      for (int64_t g = 0; g < digits * (kCols / 16); ++g) ASSERT_EQ(bsums[g], 0) << "bsum " << g;
    }
  }
}

}  // namespace
}  // namespace tern::cpu
