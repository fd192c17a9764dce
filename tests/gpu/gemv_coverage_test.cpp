// Which products the quantized GEMV kernels take (gemv.h gemv_quant_takes): host logic only, so
// it runs without a GPU and CI checks it. A product they leave runs on the generic kernel, which
// dequantizes element by element, ~20x slower: a shape that silently lands there is a cliff no
// correctness test notices (the generic kernel is correct). The 16-bit activation tile once did
// that to the 8B ffn_down (14336 q6_k columns).
#include <gtest/gtest.h>

#include <string>

#include "backends/cuda/matmul_qmma.h"
#include "gemv_args.h"

namespace tern {
namespace {

using gputest::plain_product;

// H100 / H200 (227 KiB of opt-in shared memory per block) and A100 (163 KiB): every Llama-3-8B
// product (d 4096, ff 14336), at both precisions, every n. (On an A100 the 14336-column products
// at 8 bits take the single-row tile for every n: four rows do not fit.)
TEST(GemvCoverage, HopperAndAmpere8BProductsTakeTheQuantizedKernels) {
  const std::pair<int64_t, int64_t> shapes[] = {{4096, 4096}, {14336, 4096}, {4096, 14336}, {128256, 4096}};
  for (int smem : {232448, 166912}) {
    for (int bits : {16, 8}) {
      for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
        for (auto [rows, cols] : shapes) {
          for (int64_t n : {1, 4, 512}) {
            EXPECT_TRUE(cuda::gemv_quant_takes(plain_product(t, rows, cols, bits, smem, n)))
                << dtype_name(t) << " " << rows << " x " << cols << " n=" << n << " at " << bits << " bits, " << smem
                << " bytes of shared memory";
          }
        }
      }
    }
  }
}

// The tile n > 1 runs in on an H200: four rows, but at 16 bits two for the q4_k ffn_down, where
// four rows leave one block per SM and two rows two.
TEST(GemvCoverage, HopperTileRows) {
  constexpr int kSmem = 232448;
  EXPECT_EQ(cuda::gemv_quant_tile_rows(plain_product(DType::Q4_K, 4096, 4096, 16, kSmem, 512)), 4);
  EXPECT_EQ(cuda::gemv_quant_tile_rows(plain_product(DType::Q4_K, 4096, 14336, 16, kSmem, 512)), 2);
  EXPECT_EQ(cuda::gemv_quant_tile_rows(plain_product(DType::Q6_K, 4096, 14336, 16, kSmem, 512)), 4);
  EXPECT_EQ(cuda::gemv_quant_tile_rows(plain_product(DType::Q4_K, 4096, 14336, 8, kSmem, 512)), 4);
  EXPECT_EQ(cuda::gemv_quant_tile_rows(plain_product(DType::Q6_K, 4096, 14336, 8, kSmem, 512)), 4);
}

// The tensor-core products (matmul_qmma.h) of prefill chunks: every 8B product at both precisions
// on an H200's and an A100's shared memory; none on an RTX 4090's 99 KiB (two stages do not fit,
// the GEMV runs them with the same bits), none without the scratch, none past 65535 token tiles.
TEST(GemvCoverage, TensorCoreProductsOnHopperAndAmpere) {
  const std::pair<int64_t, int64_t> shapes[] = {{4096, 4096}, {14336, 4096}, {4096, 14336}, {128256, 4096}};
  uint8_t scratch = 0;
  for (int bits : {16, 8}) {
    for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
      for (auto [rows, cols] : shapes) {
        for (int smem : {232448, 166912, 101376}) {
          cuda::MatmulArgs a = plain_product(t, rows, cols, bits, smem, 512);
          a.qmma_x = &scratch;
          EXPECT_EQ(cuda::qmma_takes(a), smem > 101376)
              << dtype_name(t) << " " << rows << " x " << cols << " at " << bits << " bits, " << smem << " bytes";
        }
      }
    }
  }
  cuda::MatmulArgs a = plain_product(DType::Q4_K, 4096, 4096, 16, 232448, 512);
  EXPECT_FALSE(cuda::qmma_takes(a)) << "no scratch";
  a.qmma_x = &scratch;
  a.n = int64_t{65536} * 32;
  EXPECT_FALSE(cuda::qmma_takes(a)) << "more token tiles than a launch's grid holds";
}

// Types without a quantized kernel are left to the generic one.
TEST(GemvCoverage, OtherTypesAreLeft) {
  for (DType t : {DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::F16}) {
    EXPECT_FALSE(cuda::gemv_quant_takes(plain_product(t, 4096, 4096, 16, 232448, 1))) << dtype_name(t);
  }
}

}  // namespace
}  // namespace tern
