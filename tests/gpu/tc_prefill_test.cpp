// The opt-in tensor-core prefill (src/backends/cuda/matmul_tc.h): bf16 cuBLASLt GEMMs on
// weights dequantized to bf16, for products of >= tc_prefill_min_tokens activation rows.
//
// Tolerances (matmul, per output y = sum_k w_k x_k over K = cols):
//   - against the exact (double) product of the bf16-rounded dequantized weights and bf16-rounded
//     activations: |y - y'| <= 1e-4 * sum_k |w'_k x'_k|. Only the fp32 summation differs, so a
//     dequantization, layout or tiling mistake (off by whole elements) fails by orders of
//     magnitude.
//   - against the CPU reference (matmul_ref: exact dequantized weights, f32 x): the two bf16
//     roundings bound each product's relative error by ~2^-8, so |y - y_ref| <= 2^-7 *
//     sum_k |w_k x_k|; and rel. L2 over the output <= 1e-2 (measured figures are printed).
// Models: prefill logits within rel. L2 5e-2 of the CPU reference for the synthesized mixes and
// the SmolLM2 shape (measured 1.0e-2 .. 1.6e-2 on an H200, 2026-11-30), 0.2 for the hand-made
// f32 fixtures of tests/data/models, whose logits amplify the bf16 roundings (measured: llama
// 0.14, qwen2 0.058, qwen3 0.033; a layout or dequantization mistake gives ~1). Greedy tokens
// are compared with each side decoding on its own (the GPU decodes with the bit-exact GEMV
// path); where they part, the test prints the step and the reference's logit gap, and fails
// unless that gap is a near-tie (<= 0.25 on logits of std ~2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "backends/cpu/matmul.h"
#include "backends/cuda/matmul_tc.h"
#include "gpu_model_util.h"
#include "gpu_test_util.h"

namespace tern {
namespace {

using gputest::DeviceTensor;

float bf16_round(float v) {  // round to nearest even, as __float2bfloat16_rn
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&v, &bits, 4);
  return v;
}

cuda::CudaBackendOptions tc_options(int min_tokens = 64) {
  cuda::CudaBackendOptions o;
  o.tc_prefill = true;
  o.tc_prefill_min_tokens = min_tokens;
  return o;
}

struct Case {
  DType dtype;
  int64_t rows, cols;
};

gputest::HostTensor host_weight(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const auto v = gputest::random_floats(static_cast<size_t>(rows * cols), seed, 0.05f);
  return t == DType::F32 ? gputest::host_f32(v, rows, cols) : gputest::host_quantized(v, t, rows, cols);
}

// Checks rows `check_rows` of y [n, w.rows] against both bounds; prints the measured errors.
void expect_tc_product(const Tensor& w, const std::vector<float>& x, int64_t n, const std::vector<float>& y,
                       const std::vector<int64_t>& check_rows, const std::string& what) {
  const int64_t K = w.cols;
  std::vector<float> wrow(static_cast<size_t>(K)), xb(x.size());
  for (size_t i = 0; i < x.size(); ++i) xb[i] = bf16_round(x[i]);
  int bad = 0;
  double worst_tight = 0.0, worst_ref = 0.0, num = 0.0, den = 0.0;
  for (int64_t r : check_rows) {
    ASSERT_TRUE(dequantize_row_ref(w.dtype, w.row(r), wrow.data(), K));
    for (int64_t i = 0; i < n; ++i) {
      double exact_b = 0.0, bound_b = 0.0, exact = 0.0, bound = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double tb = static_cast<double>(bf16_round(wrow[k])) * xb[i * K + k];
        const double t = static_cast<double>(wrow[k]) * x[i * K + k];
        exact_b += tb;
        bound_b += std::fabs(tb);
        exact += t;
        bound += std::fabs(t);
      }
      const double got = y[i * w.rows + r];
      const double e_tight = std::fabs(got - exact_b) / (bound_b + 1e-30);
      const double e_ref = std::fabs(got - exact) / (bound + 1e-30);
      worst_tight = std::max(worst_tight, e_tight);
      worst_ref = std::max(worst_ref, e_ref);
      num += (got - exact) * (got - exact);
      den += exact * exact;
      if (!(e_tight <= 1e-4 && e_ref <= 0x1p-7) && bad++ < 5) {
        ADD_FAILURE() << what << ": row " << r << " x " << i << ": got " << got << ", bf16-exact " << exact_b
                      << ", exact " << exact << ", sum|wx| " << bound;
      }
    }
  }
  const double rel = std::sqrt(num / (den + 1e-300));
  std::printf("[ tc      ] %-28s rel L2 vs exact %.2e, max |err|/sum|wx| %.2e (vs bf16-exact %.2e)\n", what.c_str(),
              rel, worst_ref, worst_tight);
  EXPECT_EQ(bad, 0) << what;
  EXPECT_LE(rel, 1e-2) << what;
}

class GpuTcPrefill : public ::testing::Test {
 protected:
  void SetUp() override { TERN_REQUIRE_GPU(); }
};

TEST_F(GpuTcPrefill, MatmulMatchesReferenceWithinBf16Bounds) {
  auto backend = gputest::make_cuda(tc_options());
  ASSERT_NE(backend, nullptr);
  Backend& b = *backend;
  uint32_t seed = 700;
  // Odd shapes: rows off the 128-row tiles, legacy rows of 17 / 18 / 7 units (not 16-byte
  // multiples), k-quant rows of 9 super-blocks, float rows not a multiple of 8 (the
  // element-wise dequantizer) and types without a dedicated decoder (q5_0, q3_k).
  const std::vector<Case> cases = {
      {DType::Q4_K, 300, 4096}, {DType::Q4_K, 37, 2304}, {DType::Q5_K, 129, 2304}, {DType::Q6_K, 300, 4096},
      {DType::Q6_K, 65, 256},   {DType::Q8_0, 300, 4096}, {DType::Q8_0, 33, 544},  {DType::Q4_0, 130, 576},
      {DType::Q4_0, 7, 224},    {DType::Q4_1, 200, 1024}, {DType::F16, 257, 4096}, {DType::F16, 9, 36},
      {DType::BF16, 257, 4096}, {DType::BF16, 13, 100},   {DType::F32, 31, 520},   {DType::Q5_0, 19, 544},
      {DType::Q3_K, 21, 512}};
  for (const Case& c : cases) {
    const int64_t n = (seed % 2 == 0) ? 64 : 131;  // the threshold itself and an odd n
    const std::string what = std::string(dtype_name(c.dtype)) + " " + std::to_string(c.rows) + "x" +
                             std::to_string(c.cols) + " n=" + std::to_string(n);
    SCOPED_TRACE(what);
    const gputest::HostTensor w_host = host_weight(c.dtype, c.rows, c.cols, seed++);
    std::unique_ptr<Buffer> owner;
    const Tensor w = b.upload_weight(w_host.t, owner);
    const auto xv = gputest::random_floats(static_cast<size_t>(n * c.cols), seed++);
    DeviceTensor x = gputest::device_copy(b, gputest::host_f32(xv, n, c.cols).t);
    DeviceTensor y = gputest::device_empty(b, DType::F32, n, c.rows);
    const int64_t before = cuda::backend_stats(b).tc_matmuls;
    b.matmul(w, x.t, y.t);
    const std::vector<float> got = gputest::download(b, y.t);
    EXPECT_EQ(cuda::backend_stats(b).tc_matmuls, before + 1) << "the product did not take the tensor cores";
    std::vector<int64_t> all_rows(static_cast<size_t>(c.rows));
    for (int64_t r = 0; r < c.rows; ++r) all_rows[r] = r;
    expect_tc_product(w_host.t, xv, n, got, all_rows, what);
  }
}

// A weight above kTcWeightTileElems runs in row tiles: rows on both sides of the tile edge and
// in the short last tile must be right.
TEST_F(GpuTcPrefill, LargeWeightRunsInRowTiles) {
  auto backend = gputest::make_cuda(tc_options());
  ASSERT_NE(backend, nullptr);
  Backend& b = *backend;
  const int64_t cols = 4096, rows = cuda::kTcWeightTileElems / cols + 200, n = 64;
  const int64_t tile = cuda::tc_weight_tile_rows(rows, cols);
  ASSERT_LT(tile, rows);
  const gputest::HostTensor w_host = host_weight(DType::Q8_0, rows, cols, 801);
  std::unique_ptr<Buffer> owner;
  const Tensor w = b.upload_weight(w_host.t, owner);
  const auto xv = gputest::random_floats(static_cast<size_t>(n * cols), 802);
  DeviceTensor x = gputest::device_copy(b, gputest::host_f32(xv, n, cols).t);
  DeviceTensor y = gputest::device_empty(b, DType::F32, n, rows);
  b.matmul(w, x.t, y.t);
  const std::vector<float> got = gputest::download(b, y.t);
  expect_tc_product(w_host.t, xv, n, got, {0, 1, tile - 2, tile - 1, tile, tile + 1, rows - 2, rows - 1},
                    "q8_0 " + std::to_string(rows) + "x4096 tiled");
}

// Below the threshold nothing changes: the rows are the GEMV path's bits. At the threshold the
// product takes the tensor cores (and so differs from the GEMV bits).
TEST_F(GpuTcPrefill, ThresholdSelectsThePath) {
  auto tc = gputest::make_cuda(tc_options(64));
  auto plain = gputest::make_cuda();
  ASSERT_NE(tc, nullptr);
  ASSERT_NE(plain, nullptr);
  const gputest::HostTensor w_host = host_weight(DType::Q4_K, 96, 1024, 810);
  std::unique_ptr<Buffer> o1, o2;
  const Tensor w_tc = tc->upload_weight(w_host.t, o1), w_plain = plain->upload_weight(w_host.t, o2);
  for (int64_t n : {63, 64}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const auto xv = gputest::random_floats(static_cast<size_t>(n * 1024), 811);
    const gputest::HostTensor xh = gputest::host_f32(xv, n, 1024);
    DeviceTensor x1 = gputest::device_copy(*tc, xh.t), x2 = gputest::device_copy(*plain, xh.t);
    DeviceTensor y1 = gputest::device_empty(*tc, DType::F32, n, 96), y2 = gputest::device_empty(*plain, DType::F32, n, 96);
    const int64_t before = cuda::backend_stats(*tc).tc_matmuls;
    tc->matmul(w_tc, x1.t, y1.t);
    plain->matmul(w_plain, x2.t, y2.t);
    const bool same = gputest::bitwise_equal(gputest::download(*tc, y1.t), gputest::download(*plain, y2.t));
    EXPECT_EQ(cuda::backend_stats(*tc).tc_matmuls - before, n >= 64 ? 1 : 0);
    EXPECT_EQ(same, n < 64);
  }
}

// Products recorded back to back share one bf16 copy of x (q/k/v, gate/up: different dtypes
// too); each must be bitwise what it gives alone. The second identical step replays as a CUDA
// graph (cuBLASLt captured) and must give the same bits again.
TEST_F(GpuTcPrefill, SharedActivationsAndGraphReplayAreExact) {
  auto backend = gputest::make_cuda(tc_options());
  ASSERT_NE(backend, nullptr);
  Backend& b = *backend;
  const int64_t cols = 512, n = 80;
  const DType types[3] = {DType::Q4_K, DType::Q6_K, DType::Q4_K};
  const int64_t rows[3] = {256, 64, 96};
  gputest::HostTensor hw[3];
  std::unique_ptr<Buffer> owners[3];
  Tensor w[3];
  DeviceTensor together[3], alone[3];
  for (int m = 0; m < 3; ++m) {
    hw[m] = host_weight(types[m], rows[m], cols, 820 + m);
    w[m] = b.upload_weight(hw[m].t, owners[m]);
    together[m] = gputest::device_empty(b, DType::F32, n, rows[m]);
    alone[m] = gputest::device_empty(b, DType::F32, n, rows[m]);
  }
  DeviceTensor x = gputest::device_copy(b, gputest::host_f32(gputest::random_floats(n * cols, 830), n, cols).t);
  for (int m = 0; m < 3; ++m) {
    b.matmul(w[m], x.t, alone[m].t);
    (void)gputest::download(b, alone[m].t);  // a sync point: separate steps, x converted each time
  }
  for (int round = 0; round < 3; ++round) {  // the same step thrice: eager, captured, replayed
    for (int m = 0; m < 3; ++m) b.matmul(w[m], x.t, together[m].t);
    for (int m = 0; m < 3; ++m) {
      const std::vector<float> got = gputest::download(b, together[m].t);
      EXPECT_TRUE(gputest::bitwise_equal(got, gputest::download(b, alone[m].t))) << "round " << round << " m " << m;
    }
  }
  EXPECT_GE(cuda::backend_stats(b).steps_graph, 1);
}

// Whole models: prefill through the tensor cores against the CPU reference, then greedy decoding
// on each side; reports where the tokens part.
void compare_model(std::shared_ptr<const gguf::File> file, std::unique_ptr<Backend> oracle, const std::string& what,
                   int prompt_tokens, int decode_steps, double tol) {
  gputest::Loaded ref = gputest::load_on(file, std::move(oracle), 1024, DType::F16);
  gputest::Loaded gpu = gputest::load_on(file, gputest::make_cuda(tc_options()), 1024, DType::F16);
  ASSERT_TRUE(ref.model && gpu.model);
  const int V = ref.model->config().n_vocab;
  const std::vector<int32_t> prompt = gputest::prompt_ids(prompt_tokens, V, 31);
  const int64_t before = cuda::backend_stats(*gpu.backend).tc_matmuls;
  const auto lr = gputest::forward(ref, prompt), lg = gputest::forward(gpu, prompt);
  EXPECT_GT(cuda::backend_stats(*gpu.backend).tc_matmuls, before) << what << ": prefill did not use the tensor cores";
  double worst = 0.0;
  for (int r = 0; r < prompt_tokens; ++r) {
    const std::vector<float> a(lg.begin() + int64_t{r} * V, lg.begin() + int64_t{r + 1} * V);
    const std::vector<float> b(lr.begin() + int64_t{r} * V, lr.begin() + int64_t{r + 1} * V);
    worst = std::max(worst, gputest::rel_l2(a, b));
  }
  EXPECT_LE(worst, tol) << what;
  int t_ref = gputest::argmax(lr.data() + int64_t{prompt_tokens - 1} * V, V);
  int t_gpu = gputest::argmax(lg.data() + int64_t{prompt_tokens - 1} * V, V);
  std::vector<float> last_ref(lr.end() - V, lr.end());
  int parted = -1;
  float gap = 0.0f;
  for (int step = 0; step <= decode_steps; ++step) {
    if (t_ref != t_gpu) {
      parted = step;
      gap = last_ref[t_ref] - last_ref[t_gpu];
      break;
    }
    if (step == decode_steps) break;
    last_ref = gputest::forward(ref, {t_ref});
    const auto g = gputest::forward(gpu, {t_gpu});
    t_ref = gputest::argmax(last_ref.data(), V);
    t_gpu = gputest::argmax(g.data(), V);
  }
  if (parted < 0) {
    std::printf("[ tc      ] %-28s prefill logits rel L2 <= %.2e; greedy tokens identical for %d steps\n",
                what.c_str(), worst, decode_steps + 1);
  } else {
    std::printf("[ tc      ] %-28s prefill logits rel L2 <= %.2e; greedy tokens part at step %d, reference "
                "logit gap %.4f\n", what.c_str(), worst, parted, gap);
    EXPECT_LE(gap, 0.25f) << what << ": tokens part at step " << parted << " on a clear choice";
  }
}

std::unique_ptr<Backend> cpu_oracle() {
  return std::make_unique<cpu::CpuBackend>(cpu::CpuBackendOptions{1, true});
}

TEST_F(GpuTcPrefill, TinyModelsMatchCpuReference) {
  for (const char* name : {"llama_tiny.gguf", "qwen2_tiny.gguf", "qwen3_tiny.gguf"}) {
    auto file = gputest::open_file(gputest::test_data_dir() + "/models/" + name);
    ASSERT_NE(file, nullptr);
    compare_model(file, cpu_oracle(), name, 100, 16, 0.2);
  }
  struct Mix {
    const char* preset;
    const char* mix;
  };
  for (const Mix& m : {Mix{"tiny-llama", "f16"}, Mix{"tiny-llama", "bf16"}, Mix{"tiny-llama", "q8_0"},
                       Mix{"tiny-llama", "q4_0"}, Mix{"tiny-llama", "q4_1"}, Mix{"tiny-llama", "q4_k_m"},
                       Mix{"tiny-qwen3", "q6_k"}}) {
    auto file = gputest::synthesized(m.preset, m.mix);
    ASSERT_NE(file, nullptr);
    compare_model(file, cpu_oracle(), std::string(m.preset) + " " + m.mix, 100, 16, 5e-2);
  }
}

// The default model's shape and mix (SmolLM2-135M, q4_1; synthesized, since the real file does
// not travel to the GPU machine), against the CPU backend's fast path (the reference kernels
// would take minutes at this size).
TEST_F(GpuTcPrefill, DefaultModelShapeMatchesCpu) {
  auto file = gputest::synthesized("smollm2-135m", "q4_1");
  ASSERT_NE(file, nullptr);
  compare_model(file, std::make_unique<cpu::CpuBackend>(cpu::CpuBackendOptions{8, false}), "smollm2-135m q4_1", 160,
                16, 5e-2);
}

}  // namespace
}  // namespace tern
