// Helpers of the GPU tests: a CUDA backend next to the CPU reference, host <-> device tensors and
// error measures. Every test starts with TERN_REQUIRE_GPU(), which skips it when the machine has
// no CUDA device (CI builds and lists these tests but has no GPU; ctest -LE gpu leaves them out).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "core/quant_ref.h"
#include "ops/backend.h"

#define TERN_REQUIRE_GPU()                                                       \
  do {                                                                           \
    if (::tern::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";     \
  } while (0)

namespace tern::gputest {

inline std::unique_ptr<Backend> make_cuda(cuda::CudaBackendOptions options = {}) {
  auto b = cuda::create_backend(options);
  EXPECT_TRUE(b.is_ok()) << (b.is_ok() ? "" : b.status().message());
  return b.is_ok() ? std::move(b).value() : nullptr;
}

// A test on a CUDA backend: skipped without a device.
class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TERN_REQUIRE_GPU();
    backend_ = make_cuda();
    ASSERT_NE(backend_, nullptr);
  }
  std::unique_ptr<Backend> backend_;
};

// A host tensor with its storage.
struct HostTensor {
  std::vector<uint8_t> bytes;
  Tensor t;
};

inline HostTensor host_f32(const std::vector<float>& v, int64_t rows, int64_t cols) {
  HostTensor h;
  h.bytes.resize(v.size() * sizeof(float));
  std::memcpy(h.bytes.data(), v.data(), h.bytes.size());
  h.t = Tensor::view(h.bytes.data(), DType::F32, rows, cols);
  return h;
}

// Quantizes rows of floats into type t with the reference quantizer.
inline HostTensor host_quantized(const std::vector<float>& v, DType t, int64_t rows, int64_t cols) {
  HostTensor h;
  const size_t rb = row_bytes(t, cols);
  h.bytes.resize(rb * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_TRUE(quantize_row_ref(t, v.data() + r * cols, h.bytes.data() + r * rb, cols));
  }
  h.t = Tensor::view(h.bytes.data(), t, rows, cols);
  return h;
}

// A device tensor with its storage.
struct DeviceTensor {
  std::unique_ptr<Buffer> buffer;
  Tensor t;
};

inline DeviceTensor device_empty(Backend& b, DType dtype, int64_t rows, int64_t cols) {
  DeviceTensor d;
  d.buffer = b.alloc(row_bytes(dtype, cols) * static_cast<size_t>(rows));
  d.t = Tensor::view(d.buffer->data(), dtype, rows, cols, Device::kCuda);
  return d;
}

inline DeviceTensor device_copy(Backend& b, const Tensor& host) {
  DeviceTensor d = device_empty(b, host.dtype, host.rows, host.cols);
  b.copy_from_host(host.data, d.t);
  return d;
}

inline std::vector<float> download(Backend& b, const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.rows * t.cols));
  b.copy_to_host(t, v.data());
  return v;
}

inline std::vector<float> host_values(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.rows * t.cols));
  for (int64_t r = 0; r < t.rows; ++r) std::memcpy(v.data() + r * t.cols, t.row(r), t.cols * sizeof(float));
  return v;
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// ||a - b|| / ||b||; infinity if either holds a NaN or the sizes differ.
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return den == 0.0 ? std::sqrt(num) : std::sqrt(num / den);
}

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A plan for one sequence: tokens at positions [first_pos, first_pos + n), the sequence's blocks
// listed in `blocks`, logits for every row.
inline BatchPlan single_sequence_plan(int first_pos, int n, const std::vector<int32_t>& blocks, int block_tokens,
                                      uint32_t seed = 1) {
  BatchPlan p;
  std::mt19937 rng(seed);
  for (int i = 0; i < n; ++i) {
    const int pos = first_pos + i;
    p.token_ids.push_back(static_cast<int32_t>(rng() % 100));
    p.seq_index.push_back(0);
    p.positions.push_back(pos);
    p.kv_slots.push_back(blocks[pos / block_tokens] * block_tokens + pos % block_tokens);
    p.logit_rows.push_back(i);
  }
  p.block_offsets = {0, static_cast<int32_t>(blocks.size())};
  p.block_ids = blocks;
  return p;
}

}  // namespace tern::gputest
