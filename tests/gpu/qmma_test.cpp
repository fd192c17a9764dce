// The tensor-core quantized product (matmul_qmma.h) against the GEMV family, bit for bit: every
// type it takes, at both activation precisions (the parameter), odd shapes (partial lane items
// and steps, rows of 3.5 steps, rows and tokens that do not fill a block's 64 x 32 tile), raw
// quant bytes (every code, scale and min byte uniform), zero and +-max activation units, and
// whole synthesized models (fused q/k/v and gate/up launches, RMSNorm and SwiGLU prologues,
// residual and SwiGLU epilogues). One backend sends every product of n >= 2 rows to the tensor
// cores (CudaBackendOptions::qmma_min_tokens = 2), the other none; the host check that the
// kernel takes each shape keeps a silent fallback to the GEMV from passing these tests.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/matmul_qmma.h"
#include "gemv_args.h"
#include "gpu_model_util.h"
#include "gpu_test_util.h"
#include "raw_quant.h"

namespace tern {
namespace {

using gputest::DeviceTensor;

class GpuQmma : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    TERN_REQUIRE_GPU();
    gemv_ = gputest::make_cuda(opts(-1));
    qmma_ = gputest::make_cuda(opts(2));
    ASSERT_NE(gemv_, nullptr);
    ASSERT_NE(qmma_, nullptr);
    ASSERT_EQ(cuda::backend_stats(*gemv_).qmma_min_tokens, 0);
    ASSERT_EQ(cuda::backend_stats(*qmma_).qmma_min_tokens, 2);
  }
  int bits() const { return GetParam(); }
  cuda::CudaBackendOptions opts(int qmma_min) const {
    cuda::CudaBackendOptions o;
    o.act_bits = bits();
    o.qmma_min_tokens = qmma_min;
    return o;
  }
  // The kernel takes a packed, aligned product of this shape (on an H200's shared memory).
  bool takes(DType t, int64_t rows, int64_t cols, int64_t n) const {
    cuda::MatmulArgs a = gputest::plain_product(t, rows, cols, bits(), 232448, n);
    uint8_t fake_scratch = 0;
    a.qmma_x = &fake_scratch;
    return cuda::qmma_takes(a);
  }
  std::vector<float> product(Backend& b, const Tensor& w_host, const std::vector<float>& xv, int64_t n) {
    std::unique_ptr<Buffer> w_owner;
    const Tensor w = b.upload_weight(w_host, w_owner);
    DeviceTensor x = gputest::device_empty(b, DType::F32, n, w_host.cols);
    DeviceTensor y = gputest::device_empty(b, DType::F32, n, w_host.rows);
    b.copy_from_host(xv.data(), x.t);
    b.matmul(w, x.t, y.t);
    return gputest::download(b, y.t);
  }
  void expect_same(const Tensor& w_host, const std::vector<float>& xv, int64_t n) {
    ASSERT_TRUE(takes(w_host.dtype, w_host.rows, w_host.cols, n));
    const int64_t before = cuda::backend_stats(*qmma_).qmma_matmuls;
    const std::vector<float> want = product(*gemv_, w_host, xv, n);
    const std::vector<float> got = product(*qmma_, w_host, xv, n);
    EXPECT_GT(cuda::backend_stats(*qmma_).qmma_matmuls, before);
    for (const float v : want) ASSERT_TRUE(std::isfinite(v));
    EXPECT_TRUE(gputest::bitwise_equal(got, want));
  }
  std::unique_ptr<Backend> gemv_, qmma_;
};

// n activation rows of random values, with an all-zero unit, a unit of +-4 runs and a row of zeros.
std::vector<float> activations(int64_t n, int64_t cols, uint32_t seed) {
  std::vector<float> xv;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<float> row = gputest::activations_with_runs(cols, seed + static_cast<uint32_t>(i));
    if (i % 3 == 1) std::fill_n(row.begin() + (cols > 64 ? 32 : 0), 32, 0.0f);
    if (i == n - 2) std::fill(row.begin(), row.end(), 0.0f);
    xv.insert(xv.end(), row.begin(), row.end());
  }
  return xv;
}

TEST_P(GpuQmma, QuantizedWeightsEqualGemv) {
  struct Case {
    DType dtype;
    int64_t rows, cols;
  };
  uint32_t seed = 900;
  std::vector<Case> cases;
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0}) {
    // lane items ending with 1, 2, 3 valid units (544, 576, 224); a partial step (2080); 3.5 steps
    for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
             {13, 544}, {70, 576}, {7, 224}, {17, 2080}, {130, 4096}, {24, 14336}}) {
      cases.push_back({t, rows, cols});
    }
  }
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    for (const auto& [rows, cols] :
         std::vector<std::pair<int64_t, int64_t>>{{1, 256}, {11, 2304}, {130, 4096}, {20, 14336}}) {
      cases.push_back({t, rows, cols});
    }
  }
  for (const Case& c : cases) {
    const auto wv = gputest::random_floats(static_cast<size_t>(c.rows * c.cols), seed++, 0.05f);
    const gputest::HostTensor w = gputest::host_quantized(wv, c.dtype, c.rows, c.cols);
    for (const int64_t n : {2, 7, 16, 33, 70}) {
      SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " rows=" + std::to_string(c.rows) +
                   " cols=" + std::to_string(c.cols) + " n=" + std::to_string(n));
      expect_same(w.t, activations(n, c.cols, seed), n);
    }
  }
}

TEST_P(GpuQmma, RawQuantBytesEqualGemv) {
  std::vector<gputest::RawQuantLayout> layouts(std::begin(gputest::kRawLayouts), std::end(gputest::kRawLayouts));
  layouts.push_back({DType::Q4_0, 18, {0}});
  layouts.push_back({DType::Q4_1, 20, {0, 2}});
  std::mt19937 rng(910);
  for (const gputest::RawQuantLayout& lay : layouts) {
    for (const int64_t cols : {int64_t{4096}, int64_t{14336}}) {
      const int64_t rows = 72, n = 40;
      SCOPED_TRACE(std::string(dtype_name(lay.dtype)) + " cols " + std::to_string(cols));
      const gputest::HostTensor w = gputest::raw_quant_weights(lay, rows, cols, rng);
      expect_same(w.t, activations(n, cols, 920), n);
    }
  }
}

// Products the GEMV would not take stay off the tensor cores (n = 1 must have the same bits), and
// so do types without a kernel here.
TEST_P(GpuQmma, TakesOnlyWhatTheGemvTakes) {
  EXPECT_TRUE(takes(DType::Q4_K, 4096, 4096, 512));
  EXPECT_TRUE(takes(DType::Q6_K, 4096, 14336, 512));
  EXPECT_TRUE(takes(DType::Q8_0, 4096, 28672, 64));
  EXPECT_FALSE(takes(DType::Q8_0, 4096, 28672 + 4096, 64)) << "more steps than the counter holds";
  EXPECT_FALSE(takes(DType::Q3_K, 64, 4096, 64));
  EXPECT_FALSE(takes(DType::F16, 64, 4096, 64));
  cuda::MatmulArgs a = gputest::plain_product(DType::Q4_K, 64, 4096, bits(), 232448, 64);
  EXPECT_FALSE(cuda::qmma_takes(a)) << "no scratch";
}

// Whole models: every product of a 40-token prefill on the tensor cores equals the GEMV's rows,
// with the fusions the backend folds into product launches; decode steps stay on the GEMV.
TEST_P(GpuQmma, ModelsEqualGemvModels) {
  struct MixCase {
    const char* preset;
    const char* mix;
  };
  for (const MixCase& c : {MixCase{"tiny-llama", "q4_k_m"}, MixCase{"tiny-llama", "q8_0"},
                           MixCase{"tiny-llama", "q4_0"}, MixCase{"tiny-llama", "q4_1"},
                           MixCase{"tiny-qwen2", "q5_k_m"}, MixCase{"tiny-qwen3", "q6_k"}}) {
    SCOPED_TRACE(std::string(c.preset) + " " + c.mix);
    auto file = gputest::synthesized(c.preset, c.mix);
    ASSERT_NE(file, nullptr);
    gputest::Loaded a = gputest::load_on(file, gputest::make_cuda(opts(-1)));
    gputest::Loaded b = gputest::load_on(file, gputest::make_cuda(opts(2)));
    ASSERT_TRUE(a.model && b.model);
    const int V = a.model->config().n_vocab;
    std::vector<int32_t> ids = gputest::prompt_ids(40, V, 31);
    for (int step = 0; step < 3; ++step) {
      const std::vector<float> la = gputest::forward(a, ids), lb = gputest::forward(b, ids);
      EXPECT_TRUE(gputest::bitwise_equal(lb, la)) << "step " << step;
      ids = {gputest::argmax(la.data() + (la.size() / V - 1) * V, V)};
    }
    EXPECT_GT(cuda::backend_stats(*b.backend).qmma_matmuls, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(ActBits, GpuQmma, ::testing::Values(16, 8),
                         [](const ::testing::TestParamInfo<int>& p) { return "x" + std::to_string(p.param); });

}  // namespace
}  // namespace tern
