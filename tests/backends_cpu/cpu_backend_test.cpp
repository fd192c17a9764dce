// CpuBackend's decode packs: upload_weight makes one for a q4_k weight (at AVX-512), matmuls
// through the backend give bitwise the results of a backend without packs, and releasing the
// pack (the model dropping its weight buffers) leaves matmuls correct, reading the rows again.
#include "backends/cpu/cpu_backend.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/matmul.h"
#include "core/quant_ref.h"

namespace tern::cpu {
namespace {

TEST(CpuBackendDecodePack, SameResultsWithAndWithoutAndAfterRelease) {
  const int64_t rows = 40, cols = 512;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint8_t> bytes(row_bytes(DType::Q4_K, cols) * rows);
  Tensor host = Tensor::view(bytes.data(), DType::Q4_K, rows, cols);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = 0.05f * normal(rng);
    ASSERT_TRUE(quantize_row_ref(DType::Q4_K, row.data(), host.row(r), cols));
  }
  std::vector<float> x(cols);
  for (float& v : x) v = normal(rng);
  Tensor xt = Tensor::view(x.data(), DType::F32, 1, cols);

  CpuBackendOptions plain_options{2, false};
  plain_options.decode_packs = false;
  CpuBackend plain(plain_options);
  std::unique_ptr<Buffer> none;
  const Tensor w_plain = plain.upload_weight(host, none);
  EXPECT_EQ(none, nullptr);
  std::vector<float> want(rows);
  Tensor want_t = Tensor::view(want.data(), DType::F32, 1, rows);
  plain.matmul(w_plain, xt, want_t);

  CpuBackend packed(CpuBackendOptions{2, false});
  std::unique_ptr<Buffer> owner;
  const Tensor w = packed.upload_weight(host, owner);
  EXPECT_EQ(owner != nullptr, decode_pack_bytes(active_isa(), host) > 0);
  for (int round = 0; round < 2; ++round) {  // with the pack, then after releasing it
    std::vector<float> got(rows, NAN), got_group(rows, NAN);
    Tensor got_t = Tensor::view(got.data(), DType::F32, 1, rows), got_group_t = Tensor::view(got_group.data(), DType::F32, 1, rows);
    packed.matmul(w, xt, got_t);
    const Tensor* ws[] = {&w};
    Tensor* outs[] = {&got_group_t};
    packed.matmul_group(ws, outs, 1, xt);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), rows * sizeof(float))) << "round " << round;
    EXPECT_EQ(0, std::memcmp(got_group.data(), want.data(), rows * sizeof(float))) << "round " << round;
    owner.reset();
  }
}

}  // namespace
}  // namespace tern::cpu
