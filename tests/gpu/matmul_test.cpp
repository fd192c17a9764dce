// CUDA matmul against matmul_ref (the CPU oracle) for every weight type, odd shapes (rows not a
// multiple of the 8-row blocks, units not a multiple of the 128-unit steps or of the 4-unit lane
// items, rows whose byte size is not a multiple of 16), and n across the 4-row activation tiles; plus batch invariance:
// each row of a batched product is bitwise the row computed alone.
//
// Tolerances:
//   f32, f16, bf16 and the generic kernel (no activation rounding): ||y - y_ref|| / ||y_ref|| <=
//   1e-5 against matmul_ref (fp32 sums in another order).
//   q4_0, q4_1, q8_0, q4_k, q5_k, q6_k round activations per 32 elements (gemv.h) to int16
//   (CudaBackendOptions::act_bits = 16, the default, as the CPU's default) or int8 (8, as
//   llama.cpp). Every test of this suite runs at both precisions (the parameter). They are
//   checked twice: against an exact (double) product of the dequantized weights with the
//   activations rounded the same way, per output |y - y'| <= 1e-5 * sum_k |w_k x'_k| (a layout or
//   scale mistake is off by tens of percent); and, for outputs large enough to average, against
//   matmul_ref: rel. L2 <= 3e-2 at 8 bits (measured ~0.6%), <= 2e-4 at 16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>

#include "backends/cpu/matmul.h"
#include "gemv_args.h"
#include "gpu_test_util.h"
#include "raw_quant.h"

namespace tern {
namespace {

using gputest::DeviceTensor;

struct Case {
  DType dtype;
  int64_t rows, cols;
};

bool rounds_activations(DType t) {
  switch (t) {
    case DType::Q4_0: case DType::Q4_1: case DType::Q8_0: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
      return true;
    default:
      return false;
  }
}

// x as the kernels see it at `bits` (8 or 16): per 32 elements q = rint(x * (q_max / amax)),
// x' = q * (amax / q_max), q_max = 127 or 32512, each step rounded to float32 like the kernel.
std::vector<float> rounded_activations(const std::vector<float>& x, int bits) {
  const float q_max = bits == 16 ? 32512.0f : 127.0f;
  std::vector<float> out(x.size());
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0.0f;
    for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    // q_max / amax is inf for amax = 0 and overflows for amax below ~1e-34 (16 bits): such a
    // unit quantizes to zeros.
    const float quotient = q_max / amax, inv = std::isfinite(quotient) ? quotient : 0.0f, d = amax / q_max;
    for (size_t i = b; i < b + 32; ++i) out[i] = static_cast<float>(std::nearbyint(x[i] * inv)) * d;
  }
  return out;
}

// Checks y [n, rows] against the exact product of the dequantized weights with x'.
void expect_matches_rounded_product(const Tensor& w_host, const std::vector<float>& xq, int64_t n,
                                 const std::vector<float>& y) {
  std::vector<float> wrow(static_cast<size_t>(w_host.cols));
  int bad = 0;
  for (int64_t r = 0; r < w_host.rows; ++r) {
    ASSERT_TRUE(dequantize_row_ref(w_host.dtype, w_host.row(r), wrow.data(), w_host.cols));
    for (int64_t i = 0; i < n; ++i) {
      double exact = 0.0, bound = 0.0;
      for (int64_t k = 0; k < w_host.cols; ++k) {
        const double t = static_cast<double>(wrow[k]) * xq[i * w_host.cols + k];
        exact += t;
        bound += std::fabs(t);
      }
      const double got = y[i * w_host.rows + r];
      if (!(std::fabs(got - exact) <= 1e-5 * bound + 1e-30) && bad++ < 5) {
        ADD_FAILURE() << "row " << r << " x " << i << ": got " << got << ", exact " << exact << ", bound " << bound;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

std::string describe(const Case& c, int64_t n) {
  return std::string(dtype_name(c.dtype)) + " rows=" + std::to_string(c.rows) + " cols=" + std::to_string(c.cols) +
         " n=" + std::to_string(n);
}

// The parameter: CudaBackendOptions::act_bits of every backend a test makes.
class GpuMatmul : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    TERN_REQUIRE_GPU();
    backend_ = gputest::make_cuda(opts());
    ASSERT_NE(backend_, nullptr);
  }
  int bits() const { return GetParam(); }
  cuda::CudaBackendOptions opts() const {
    cuda::CudaBackendOptions o;
    o.act_bits = bits();
    return o;
  }
  // For the tests of float weights alone, which never quantize activations: one run is enough.
  bool float_only_repeat() const { return bits() != 16; }
  std::unique_ptr<Backend> backend_;

  // Runs one case at several n; checks against the reference and row-by-row invariance.
  void check(const Case& c, const std::vector<int64_t>& ns, uint32_t seed) {
    Backend& b = *backend_;
    const auto wv = gputest::random_floats(static_cast<size_t>(c.rows * c.cols), seed, 0.05f);
    gputest::HostTensor w_host = (c.dtype == DType::F32)
                                     ? gputest::host_f32(wv, c.rows, c.cols)
                                     : gputest::host_quantized(wv, c.dtype, c.rows, c.cols);
    std::unique_ptr<Buffer> w_owner;
    const Tensor w = b.upload_weight(w_host.t, w_owner);
    const int64_t n_max = *std::max_element(ns.begin(), ns.end());
    const auto xv = gputest::random_floats(static_cast<size_t>(n_max * c.cols), seed + 1);

    // Every row alone (n = 1): the reference for invariance.
    std::vector<float> single(static_cast<size_t>(n_max * c.rows));
    DeviceTensor x1 = gputest::device_empty(b, DType::F32, 1, c.cols);
    DeviceTensor y1 = gputest::device_empty(b, DType::F32, 1, c.rows);
    for (int64_t i = 0; i < n_max; ++i) {
      b.copy_from_host(xv.data() + i * c.cols, x1.t);
      b.matmul(w, x1.t, y1.t);
      b.copy_to_host(y1.t, single.data() + i * c.rows);
    }

    for (int64_t n : ns) {
      SCOPED_TRACE(describe(c, n));
      std::vector<float> ref(static_cast<size_t>(n * c.rows));
      cpu::matmul_ref(w_host.t, xv.data(), n, ref.data());
      DeviceTensor x = gputest::device_empty(b, DType::F32, n, c.cols);
      DeviceTensor y = gputest::device_empty(b, DType::F32, n, c.rows);
      b.copy_from_host(xv.data(), x.t);
      b.matmul(w, x.t, y.t);
      const std::vector<float> got = gputest::download(b, y.t);
      if (rounds_activations(c.dtype)) {
        const std::vector<float> xq = rounded_activations(std::vector<float>(xv.begin(), xv.begin() + n * c.cols), bits());
        expect_matches_rounded_product(w_host.t, xq, n, got);
        if (n * c.rows >= 64) {
          EXPECT_LE(gputest::rel_l2(got, ref), bits() == 16 ? 2e-4 : 3e-2);
        }
      } else {
        EXPECT_LE(gputest::rel_l2(got, ref), 1e-5);
      }
      const std::vector<float> alone(single.begin(), single.begin() + n * c.rows);
      EXPECT_TRUE(gputest::bitwise_equal(got, alone)) << "batched rows differ from rows computed alone";
    }
  }
};

TEST_P(GpuMatmul, FloatTypes) {
  if (float_only_repeat()) GTEST_SKIP() << "float weights: run at 16 bits only";
  uint32_t seed = 10;
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    for (Case c : {Case{t, 1, 256}, Case{t, 37, 576}, Case{t, 300, 4096}, Case{t, 9, 36}}) {
      c.dtype = t;
      check(c, {1, 3, 4, 5, 9}, seed++);
    }
  }
}

TEST_P(GpuMatmul, LegacyQuants) {
  uint32_t seed = 100;
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0}) {
    // Lane items of 4 units end with 1 (544 = 17 units, 306-byte q4_0 rows), 2 (576), 3 (224)
    // valid units; 2080 = 65 units (a partial step); 14336 = 3.5 steps (binary counter with two
    // levels and a partial last step).
    for (Case c : {Case{t, 1, 32}, Case{t, 13, 544}, Case{t, 33, 576}, Case{t, 7, 224}, Case{t, 17, 2080},
                   Case{t, 300, 4096}, Case{t, 24, 14336}}) {
      check(c, {1, 2, 4, 5, 9}, seed++);
    }
  }
}

TEST_P(GpuMatmul, KQuants) {
  uint32_t seed = 200;
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    // 2304 = 9 blocks (a second step of one block; odd q6_k rows are 2-byte aligned).
    for (Case c : {Case{t, 1, 256}, Case{t, 11, 2304}, Case{t, 300, 4096}, Case{t, 20, 14336}}) {
      check(c, {1, 3, 4, 5, 9}, seed++);
    }
  }
}

TEST_P(GpuMatmul, GenericKernelTypes) {
  if (float_only_repeat()) GTEST_SKIP() << "the generic kernel does not round activations: run once";
  uint32_t seed = 300;
  for (DType t : {DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K}) {
    const int64_t cols = (t == DType::Q5_0 || t == DType::Q5_1) ? 544 : 2304;
    check(Case{t, 19, cols}, {1, 4, 6}, seed++);
  }
}

// A large batch (prefill-sized n) takes the same kernel as decode: spot-check a few rows.
TEST_P(GpuMatmul, LargeBatchMatchesReference) {
  check(Case{DType::Q4_K, 64, 4096}, {67}, 400);
  check(Case{DType::Q8_0, 64, 4096}, {67}, 401);
  check(Case{DType::F16, 64, 4096}, {67}, 402);
}

// Units whose largest value is so small that q_max / amax overflows (or is zero) quantize to
// zeros, as on the CPU, instead of multiplying by inf: every output finite and equal to the
// rounded product, on every kernel family at n = 1 and in a tile.
TEST_P(GpuMatmul, TinyUnitsQuantizeToZero) {
  Backend& b = *backend_;
  for (DType t : {DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::Q4_1}) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t rows = 64, cols = 4096, n = 3;
    const auto wv = gputest::random_floats(static_cast<size_t>(rows * cols), 900, 0.05f);
    gputest::HostTensor w_host = gputest::host_quantized(wv, t, rows, cols);
    std::unique_ptr<Buffer> w_owner;
    const Tensor w = b.upload_weight(w_host.t, w_owner);
    std::vector<float> xv = gputest::random_floats(static_cast<size_t>(n * cols), 901);
    for (int64_t i = 0; i < n; ++i) {
      for (int k = 0; k < 32; ++k) xv[i * cols + 64 + k] = (k % 2 ? 1.0f : -1.0f) * 2e-38f;  // unit 2: overflows
      for (int k = 0; k < 32; ++k) xv[i * cols + 96 + k] = 0.0f;                          // unit 3: zero
    }
    DeviceTensor x = gputest::device_empty(b, DType::F32, n, cols);
    DeviceTensor y = gputest::device_empty(b, DType::F32, n, rows);
    b.copy_from_host(xv.data(), x.t);
    b.matmul(w, x.t, y.t);
    const std::vector<float> got = gputest::download(b, y.t);
    for (float v : got) ASSERT_TRUE(std::isfinite(v));
    expect_matches_rounded_product(w_host.t, rounded_activations(xv, bits()), n, got);
  }
}

// Launch shapes of smaller devices (CudaBackendOptions::gemv_smem_cap): an A100's 163 KiB, where
// 14336-column rows at 8 bits take the single-row tile for every n, and an RTX 4090's 99 KiB,
// where some take the generic kernel. Wherever the quantized kernels take a product
// (gemv_quant_takes), its bits equal the H200 shapes'.
TEST_P(GpuMatmul, SmallerDeviceLaunchShapesEqualHopperOnes) {
  Backend& h = *backend_;
  for (int cap : {166912, 101376}) {
    cuda::CudaBackendOptions o = opts();
    o.gemv_smem_cap = cap;
    std::unique_ptr<Backend> small = gputest::make_cuda(o);
    ASSERT_NE(small, nullptr);
    for (DType t : {DType::Q4_K, DType::Q6_K, DType::Q8_0, DType::Q4_1}) {
      for (int64_t cols : {int64_t{4096}, int64_t{14336}}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " cols=" + std::to_string(cols) + " cap=" + std::to_string(cap));
        const int64_t rows = 48;
        const auto wv = gputest::random_floats(static_cast<size_t>(rows * cols), 910, 0.05f);
        gputest::HostTensor w_host = gputest::host_quantized(wv, t, rows, cols);
        const auto xv = gputest::random_floats(static_cast<size_t>(5 * cols), 911);
        // Where the generic kernel takes it, other arithmetic: nothing to compare.
        if (!cuda::gemv_quant_takes(gputest::plain_product(t, rows, cols, bits(), cap, 5))) continue;
        for (int64_t n : {int64_t{1}, int64_t{5}}) {
          auto run = [&](Backend& b) {
            std::unique_ptr<Buffer> owner;
            const Tensor w = b.upload_weight(w_host.t, owner);
            DeviceTensor x = gputest::device_empty(b, DType::F32, n, cols);
            DeviceTensor y = gputest::device_empty(b, DType::F32, n, rows);
            b.copy_from_host(xv.data(), x.t);
            b.matmul(w, x.t, y.t);
            return gputest::download(b, y.t);
          };
          EXPECT_TRUE(gputest::bitwise_equal(run(*small), run(h))) << "n=" << n;
        }
      }
    }
  }
}

// Consecutive products of one activation (q/k/v) share a launch; each output must be bitwise
// what a separate launch gives.
TEST_P(GpuMatmul, FusedLaunchesEqualSeparateOnes) {
  Backend& b = *backend_;
  // The second shape's row counts are not multiples of 4: the float tile kernel's row tiles
  // (matmul.cu, 4 rows a warp at n > 1) straddle the matrices; n = 9 also leaves a partial
  // activation tile.
  struct Shape {
    int64_t rows[3];
    int64_t n;
  };
  for (const Shape& shape : {Shape{{64, 16, 24}, 3}, Shape{{37, 6, 9}, 9}}) {
    for (DType t : {DType::Q4_K, DType::F16}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " rows " + std::to_string(shape.rows[0]));
      const int64_t cols = 512, n = shape.n;
      const int64_t* rows = shape.rows;
      gputest::HostTensor hw[3];
      std::unique_ptr<Buffer> owners[3];
      Tensor w[3];
      for (int m = 0; m < 3; ++m) {
        hw[m] = gputest::host_quantized(gputest::random_floats(rows[m] * cols, 500 + m, 0.05f), t, rows[m], cols);
        w[m] = b.upload_weight(hw[m].t, owners[m]);
      }
      const auto xv = gputest::random_floats(n * cols, 510);
      DeviceTensor x = gputest::device_empty(b, DType::F32, n, cols);
      b.copy_from_host(xv.data(), x.t);
      DeviceTensor fused[3], separate[3];
      for (int m = 0; m < 3; ++m) {
        fused[m] = gputest::device_empty(b, DType::F32, n, rows[m]);
        separate[m] = gputest::device_empty(b, DType::F32, n, rows[m]);
      }
      for (int m = 0; m < 3; ++m) b.matmul(w[m], x.t, fused[m].t);  // recorded back to back: one launch
      for (int m = 0; m < 3; ++m) {
        b.matmul(w[m], x.t, separate[m].t);
        (void)gputest::download(b, separate[m].t);  // a sync point between them: separate launches
      }
      for (int m = 0; m < 3; ++m) {
        EXPECT_TRUE(gputest::bitwise_equal(gputest::download(b, fused[m].t), gputest::download(b, separate[m].t)));
      }
    }
  }
}

// A backend on the legacy GEMV kernels (CudaBackendOptions::legacy_gemv): the reference the
// faster kernels are compared with bit for bit.
std::unique_ptr<Backend> make_legacy(int bits) {
  cuda::CudaBackendOptions o;
  o.act_bits = bits;
  o.legacy_gemv = true;
  return gputest::make_cuda(o);
}

// The default GEMV kernels (bulk-copy staging for 16-byte aligned quantized rows, the
// bulk-staged float kernel) against the previous ones (CudaBackendOptions::legacy_gemv):
// the same canonical sums, so the same bits, for aligned rows (bulk path) and rows that are not
// (the default falls back to per-lane staging), at several pipeline depths
// (TERN_CUDA_GEMV_STAGE_BYTES: 2 stages, the default, 16 stages) so that stage reuse wraps many
// times within a warp's rows.
TEST_P(GpuMatmul, DefaultKernelsEqualLegacyKernels) {
  std::unique_ptr<Backend> legacy = make_legacy(bits());
  ASSERT_NE(legacy, nullptr);
  std::vector<std::unique_ptr<Backend>> fresh;
  for (const char* budget : {"1", "0", "1000000"}) {
    setenv("TERN_CUDA_GEMV_STAGE_BYTES", budget, 1);
    fresh.push_back(gputest::make_cuda(opts()));
    ASSERT_NE(fresh.back(), nullptr);
  }
  // The register-streamed quantized kernel (gemv_stream.cu, n = 1) at one and two blocks per SM
  // (fresh[3], fresh[4]); the products it does not take (steps that are not whole 16-byte
  // pieces: q6_k rows of 2304 / 1024 / 512, q8_0 of 576) fall back to the default's kernels.
  for (const int blocks : {1, 2}) {
    cuda::CudaBackendOptions options = opts();
    options.stream_gemv = true;
    options.gemv_stream_blocks = blocks;
    fresh.push_back(gputest::make_cuda(options));
    ASSERT_NE(fresh.back(), nullptr);
  }
  // The multi-row / split-row kernel (gemv_rows.cu, n = 1, long quantized rows) in every shape
  // it has: 2 and 4 rows per warp step, rows split over 2 and 4 warps. A budget of 1 MB per warp
  // leaves one block per SM, so the groups are few and each takes several row sets (the split
  // rows' double-buffered partial sums are reused); a budget of 1 byte gives two stages.
  struct RowsShape {
    int rows, parts;
    const char* budget;
  };
  const RowsShape rows_shapes[] = {{0, 0, "0"}, {1, 1, "1000000"}, {2, 1, "0"}, {4, 1, "1"},
                                   {1, 2, "1000000"}, {1, 4, "1000000"}, {1, 2, "0"}, {1, 4, "1"}};
  for (const RowsShape& r : rows_shapes) {
    setenv("TERN_CUDA_GEMV_STAGE_BYTES", r.budget, 1);
    cuda::CudaBackendOptions options = opts();
    options.rows_gemv = true;
    options.gemv_rows_per_step = r.rows;
    options.gemv_parts_per_row = r.parts;
    fresh.push_back(gputest::make_cuda(options));
    ASSERT_NE(fresh.back(), nullptr);
  }
  unsetenv("TERN_CUDA_GEMV_STAGE_BYTES");
  // The single-row kernels alone (the default takes the multi-row kernel for some n = 1 shapes).
  cuda::CudaBackendOptions single_options = opts();
  single_options.single_gemv = true;
  fresh.push_back(gputest::make_cuda(single_options));
  ASSERT_NE(fresh.back(), nullptr);
  // On sm_90 the default and the multi-row backends really run their kernels (a binary without
  // sm_90 code would fall back to the legacy ones and make this test vacuous).
  const auto info = cuda::device_info(0);
  ASSERT_TRUE(info.is_ok());
  if (info.value().cc_major >= 9) {
    EXPECT_EQ(cuda::backend_stats(*fresh[1]).gemv_path, 0);
    EXPECT_EQ(cuda::backend_stats(*fresh[3]).gemv_path, 4);
    EXPECT_EQ(cuda::backend_stats(*fresh[fresh.size() - 2]).gemv_path, 2);
    EXPECT_EQ(cuda::backend_stats(*fresh.back()).gemv_path, 3);
  }
  // Rows of at most 2048 elements whose matrices split into whole groups take segmented steps
  // (several rows per warp step): 576 / 544 / 512-wide rows four or eight to a step, 1536 / 2048
  // two; 30 rows of 1024 do not split into groups of four and take whole steps.
  const Case cases[] = {
      {DType::Q4_K, 600, 4096}, {DType::Q4_K, 70, 14336}, {DType::Q6_K, 300, 4096}, {DType::Q6_K, 40, 14336},
      {DType::Q6_K, 33, 2304},  {DType::Q8_0, 300, 4096}, {DType::Q8_0, 30, 14336}, {DType::Q4_1, 300, 4096},
      {DType::Q4_1, 100, 576},  {DType::Q4_0, 64, 4096},  {DType::Q5_K, 64, 4096},  {DType::F16, 700, 4096},
      {DType::BF16, 300, 4000}, {DType::F32, 100, 1000},  {DType::F16, 50, 14336},  {DType::Q8_0, 64, 576},
      {DType::Q4_K, 64, 2048},  {DType::Q4_1, 48, 1536},  {DType::Q6_K, 30, 1024},  {DType::Q4_0, 36, 544},
      {DType::Q5_K, 40, 512},   {DType::Q6_K, 64, 512},
      // For the multi-row / split-row kernel: 3, 5 and 7 steps (split runs of 2 and 4 steps with a
      // shorter last run; 4 parts need 4 runs, else it splits in 2 or not at all), many row sets
      // per group, an odd row count (one row per step), fewer rows than groups.
      {DType::Q4_K, 1100, 14336}, {DType::Q4_K, 96, 28672}, {DType::Q6_K, 64, 12288}, {DType::Q8_0, 48, 20480},
      {DType::Q5_K, 130, 14336},  {DType::Q6_K, 2, 14336},  {DType::Q4_K, 31, 8192},
  };
  uint32_t seed = 600;
  for (const Case& c : cases) {
    const auto wv = gputest::random_floats(static_cast<size_t>(c.rows * c.cols), seed++, 0.05f);
    const gputest::HostTensor w_host = c.dtype == DType::F32 ? gputest::host_f32(wv, c.rows, c.cols)
                                                             : gputest::host_quantized(wv, c.dtype, c.rows, c.cols);
    // n = 0 stands for one all-zero activation row: contributions of -0 (a negative scale times
    // a zero sum) must come out as the full-warp tree gives them (+0) in segmented steps too.
    for (int64_t n_case : {1, 5, 0}) {
      const int64_t n = n_case == 0 ? 1 : n_case;
      SCOPED_TRACE(describe(c, n_case));
      auto xv = gputest::random_floats(static_cast<size_t>(n * c.cols), seed++);
      if (n_case == 0) std::fill(xv.begin(), xv.end(), 0.0f);
      auto product = [&](Backend& b) {
        std::unique_ptr<Buffer> w_owner;
        const Tensor w = b.upload_weight(w_host.t, w_owner);
        DeviceTensor x = gputest::device_empty(b, DType::F32, n, c.cols);
        DeviceTensor y = gputest::device_empty(b, DType::F32, n, c.rows);
        b.copy_from_host(xv.data(), x.t);
        b.matmul(w, x.t, y.t);
        return gputest::download(b, y.t);
      };
      const std::vector<float> want = product(*legacy);
      for (auto& b : fresh) {
        EXPECT_TRUE(gputest::bitwise_equal(product(*b), want)) << "default kernels differ from the legacy ones";
      }
    }
  }
}

// The multi-row kernel takes consecutive rows of the joint row index of a fused launch (q/k/v,
// gate/up), so a row set may straddle two matrices (71 + 53 + 20 rows: sets of 2 and 4 cross
// both boundaries), and split rows fold their parts per matrix row: each output must be the
// legacy kernels' bits.
TEST_P(GpuMatmul, RowsKernelOnFusedMatricesEqualsLegacy) {
  std::unique_ptr<Backend> legacy = make_legacy(bits());
  ASSERT_NE(legacy, nullptr);
  const int64_t rows[3] = {71, 53, 20};
  for (const auto& [rows_per_step, parts] : {std::pair{2, 1}, std::pair{4, 1}, std::pair{1, 2}, std::pair{1, 4}}) {
    cuda::CudaBackendOptions options = opts();
    options.rows_gemv = true;
    options.gemv_rows_per_step = rows_per_step;
    options.gemv_parts_per_row = parts;
    std::unique_ptr<Backend> fused_backend = gputest::make_cuda(options);
    ASSERT_NE(fused_backend, nullptr);
    for (const auto& [dtype, cols] : {std::pair{DType::Q4_K, int64_t{4096}}, std::pair{DType::Q6_K, int64_t{16384}},
                                      std::pair{DType::Q8_0, int64_t{8192}}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " cols " + std::to_string(cols) + " shape " +
                   std::to_string(rows_per_step) + "x" + std::to_string(parts));
      gputest::HostTensor hw[3];
      for (int m = 0; m < 3; ++m) {
        hw[m] = gputest::host_quantized(gputest::random_floats(rows[m] * cols, 700 + m, 0.05f), dtype, rows[m], cols);
      }
      const auto xv = gputest::random_floats(cols, 710);
      // All three products recorded back to back (one fused launch), then downloaded.
      auto products = [&](Backend& b) {
        std::unique_ptr<Buffer> owners[3];
        Tensor w[3];
        DeviceTensor y[3];
        for (int m = 0; m < 3; ++m) {
          w[m] = b.upload_weight(hw[m].t, owners[m]);
          y[m] = gputest::device_empty(b, DType::F32, 1, rows[m]);
        }
        DeviceTensor x = gputest::device_empty(b, DType::F32, 1, cols);
        b.copy_from_host(xv.data(), x.t);
        for (int m = 0; m < 3; ++m) b.matmul(w[m], x.t, y[m].t);
        std::vector<std::vector<float>> out;
        for (int m = 0; m < 3; ++m) out.push_back(gputest::download(b, y[m].t));
        return out;
      };
      const auto want = products(*legacy), got = products(*fused_backend);
      for (int m = 0; m < 3; ++m) EXPECT_TRUE(gputest::bitwise_equal(got[m], want[m])) << "matrix " << m;
    }
  }
}

// Weight bytes the quantizer rarely or never writes (every quant, scale and min byte uniform over
// 0..255, only the f16 scales kept finite): the multi-row kernel reads its items out of the
// bulk-copy stages with per-type loads (gemv_items.cuh, kStaged: 16-byte vectors for q4_k /
// q5_k, 8-byte for q8_0, shifted words for q6_k's 210-byte blocks at every even offset) and
// takes q4_k's high nibbles in place as unsigned bytes (16x the nibble, dp4a.u32.s32, the sum
// shifted back): nibbles of 8..15 and negative sums must come out as the legacy kernels' bits.
// Rows of 14336 end in a half step; the activations include runs of +-max.
TEST_P(GpuMatmul, RowsKernelOnRawQuantBytesEqualsLegacy) {
  std::unique_ptr<Backend> legacy = make_legacy(bits());
  ASSERT_NE(legacy, nullptr);
  std::vector<std::unique_ptr<Backend>> fresh;
  fresh.push_back(gputest::make_cuda(opts()));
  for (const int rows_per_step : {1, 2, 4}) {
    cuda::CudaBackendOptions options = opts();
    options.rows_gemv = true;
    options.gemv_rows_per_step = rows_per_step;
    fresh.push_back(gputest::make_cuda(options));
  }
  for (const auto& b : fresh) ASSERT_NE(b, nullptr);
  std::mt19937 rng(720);
  for (const gputest::RawQuantLayout& lay : gputest::kRawLayouts) {
    for (const int64_t cols : {int64_t{4096}, int64_t{14336}}) {
      const int64_t rows = 72;
      SCOPED_TRACE(std::string(dtype_name(lay.dtype)) + " cols " + std::to_string(cols));
      const gputest::HostTensor hw = gputest::raw_quant_weights(lay, rows, cols, rng);
      const std::vector<float> xv = gputest::activations_with_runs(cols, 730);
      auto product = [&](Backend& b) {
        std::unique_ptr<Buffer> w_owner;
        const Tensor w = b.upload_weight(hw.t, w_owner);
        DeviceTensor x = gputest::device_empty(b, DType::F32, 1, cols);
        DeviceTensor y = gputest::device_empty(b, DType::F32, 1, rows);
        b.copy_from_host(xv.data(), x.t);
        b.matmul(w, x.t, y.t);
        return gputest::download(b, y.t);
      };
      const std::vector<float> want = product(*legacy);
      for (const float v : want) ASSERT_TRUE(std::isfinite(v));
      for (size_t k = 0; k < fresh.size(); ++k) {
        EXPECT_TRUE(gputest::bitwise_equal(product(*fresh[k]), want)) << "backend " << k;
      }
    }
  }
}

// The register-streamed float kernel (gemv_float_stream.cu, F32 / F16 / BF16 at n = 1) in every
// compiled shape (rows per warp x chunks per load batch; one block per SM so that warps walk many
// units, and the per-shape default; fixed strides and dynamic units) against the previous float
// kernels: the same bits for rows
// of partial last chunks (cols not a multiple of 256), fewer rows than a unit, odd row counts
// (a last unit with missing rows), rows wider than a load batch, all-zero activations, and q/k/v
// fused launches whose units straddle matrices. n = 2 .. 6 take the previous kernels on both
// sides, and must equal each row computed alone.
TEST_P(GpuMatmul, StreamedFloatKernelEqualsPreviousKernels) {
  if (float_only_repeat()) GTEST_SKIP() << "float weights: run at 16 bits only";
  cuda::CudaBackendOptions previous_options = opts();
  previous_options.previous_float_gemv = true;
  std::unique_ptr<Backend> previous = gputest::make_cuda(previous_options);
  ASSERT_NE(previous, nullptr);
  struct Shape {
    int rows, unroll, blocks;
    bool dynamic;  // units claimed from the work counter (reset by each launch for the next)
    int pipe;      // CudaBackendOptions::float_gemv_pipe: 1 the two-buffer kernel, 2 the one-buffer one
  };
  std::vector<std::unique_ptr<Backend>> streamed;
  for (const Shape& sh : {Shape{0, 0, 0, false, 2}, Shape{1, 8, 1, false, 2}, Shape{1, 16, 0, false, 2},
                          Shape{2, 4, 1, false, 2}, Shape{2, 8, 0, false, 2}, Shape{4, 4, 1, false, 2},
                          Shape{4, 4, 0, false, 2}, Shape{0, 0, 0, true, 0}, Shape{1, 8, 1, true, 0},
                          Shape{2, 8, 1, true, 0}, Shape{0, 0, 0, false, 1}, Shape{1, 8, 0, false, 1},
                          Shape{1, 8, 1, false, 1}, Shape{1, 4, 0, false, 1}, Shape{2, 4, 0, false, 1},
                          Shape{2, 4, 1, false, 1}}) {
    cuda::CudaBackendOptions o = opts();
    o.float_gemv_rows = sh.rows;
    o.float_gemv_unroll = sh.unroll;
    o.float_gemv_blocks = sh.blocks;
    o.float_gemv_dynamic = sh.dynamic;
    o.float_gemv_pipe = sh.pipe;
    streamed.push_back(gputest::make_cuda(o));
    ASSERT_NE(streamed.back(), nullptr);
  }
  const Case cases[] = {{DType::F16, 1, 8},      {DType::F16, 3, 264},    {DType::BF16, 7, 1000},  {DType::F32, 33, 248},
                        {DType::F16, 700, 4096}, {DType::BF16, 301, 4000}, {DType::F32, 65, 2056}, {DType::F16, 61, 14336},
                        {DType::BF16, 9, 5128},  {DType::F32, 5, 8200}};
  uint32_t seed = 900;
  for (const Case& c : cases) {
    const auto wv = gputest::random_floats(static_cast<size_t>(c.rows * c.cols), seed++, 0.05f);
    const gputest::HostTensor w_host = c.dtype == DType::F32 ? gputest::host_f32(wv, c.rows, c.cols)
                                                             : gputest::host_quantized(wv, c.dtype, c.rows, c.cols);
    for (int64_t n_case : {1, 0, 2, 3, 4, 5, 6}) {  // 0: one all-zero activation row
      const int64_t n = n_case == 0 ? 1 : n_case;
      SCOPED_TRACE(describe(c, n_case));
      auto xv = gputest::random_floats(static_cast<size_t>(n * c.cols), seed++);
      if (n_case == 0) std::fill(xv.begin(), xv.end(), 0.0f);
      auto product = [&](Backend& b) {
        std::unique_ptr<Buffer> w_owner;
        const Tensor w = b.upload_weight(w_host.t, w_owner);
        DeviceTensor x = gputest::device_empty(b, DType::F32, n, c.cols);
        DeviceTensor y = gputest::device_empty(b, DType::F32, n, c.rows);
        b.copy_from_host(xv.data(), x.t);
        b.matmul(w, x.t, y.t);
        return gputest::download(b, y.t);
      };
      const std::vector<float> want = product(*previous);
      for (auto& b : streamed) EXPECT_TRUE(gputest::bitwise_equal(product(*b), want)) << "streamed kernel differs";
    }
  }
  // q/k/v in one launch: 71 + 53 + 21 rows, so units of 2 and 4 rows straddle the matrices.
  const int64_t rows[3] = {71, 53, 21};
  for (const auto& [dtype, cols] : {std::pair{DType::F16, int64_t{4096}}, std::pair{DType::BF16, int64_t{776}}}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)) + " fused cols " + std::to_string(cols));
    gputest::HostTensor hw[3];
    for (int m = 0; m < 3; ++m) {
      hw[m] = gputest::host_quantized(gputest::random_floats(rows[m] * cols, 950 + m, 0.05f), dtype, rows[m], cols);
    }
    const auto xv = gputest::random_floats(cols, 960);
    auto products = [&](Backend& b) {
      std::unique_ptr<Buffer> owners[3];
      Tensor w[3];
      DeviceTensor y[3];
      for (int m = 0; m < 3; ++m) {
        w[m] = b.upload_weight(hw[m].t, owners[m]);
        y[m] = gputest::device_empty(b, DType::F32, 1, rows[m]);
      }
      DeviceTensor x = gputest::device_empty(b, DType::F32, 1, cols);
      b.copy_from_host(xv.data(), x.t);
      for (int m = 0; m < 3; ++m) b.matmul(w[m], x.t, y[m].t);
      std::vector<float> out;
      for (int m = 0; m < 3; ++m) {
        const auto v = gputest::download(b, y[m].t);
        out.insert(out.end(), v.begin(), v.end());
      }
      return out;
    };
    const auto want = products(*previous);
    for (auto& b : streamed) EXPECT_TRUE(gputest::bitwise_equal(products(*b), want)) << "streamed kernel differs";
  }
}

// The register-streamed quantized kernel (gemv_stream.cu) on the products of Llama-3-8B's
// decode step (4096 x 4096, 1024 x 4096, 14336 x 4096, 4096 x 14336 for q4_k / q6_k / q8_0, q/k/v
// as one launch of three matrices whose two-row pairs straddle them: 4095 + 1025 + 1024 rows)
// against the legacy kernels and the default path, bit for bit, at one and two blocks per SM.
// Weight bytes are uniform over 0..255 (every nibble, scale and min value; f16 scales kept
// finite), the activations include runs of +-max: products with several pairs per warp, the
// half step of 14336-wide rows, an odd row count (a pair with a missing row).
TEST_P(GpuMatmul, StreamKernelOn8BShapesEqualsLegacy) {
  std::unique_ptr<Backend> legacy = make_legacy(bits());
  ASSERT_NE(legacy, nullptr);
  std::vector<std::unique_ptr<Backend>> fresh;
  fresh.push_back(gputest::make_cuda(opts()));
  for (const int blocks : {1, 2}) {
    cuda::CudaBackendOptions options = opts();
    options.stream_gemv = true;
    options.gemv_stream_blocks = blocks;
    fresh.push_back(gputest::make_cuda(options));
  }
  for (const auto& b : fresh) ASSERT_NE(b, nullptr);
  struct Shape {
    std::vector<int64_t> rows;
    int64_t cols;
  };
  const Shape shapes[] = {{{4096}, 4096}, {{1024}, 4096}, {{14336}, 4096}, {{4096}, 14336}, {{4095, 1025, 1024}, 4096}};
  std::mt19937 rng(740);
  for (const gputest::RawQuantLayout& lay : gputest::kRawLayouts) {
    if (lay.dtype == DType::Q5_K) continue;  // q4_k, q6_k and q8_0: the types of the 8B mixes
    for (const Shape& sh : shapes) {
      SCOPED_TRACE(std::string(dtype_name(lay.dtype)) + " rows " + std::to_string(sh.rows[0]) + " (" +
                   std::to_string(sh.rows.size()) + " matrices) cols " + std::to_string(sh.cols));
      std::vector<gputest::HostTensor> hw;
      hw.reserve(sh.rows.size());  // (moves keep each tensor's view of its bytes valid anyway)
      for (const int64_t rows : sh.rows) hw.push_back(gputest::raw_quant_weights(lay, rows, sh.cols, rng));
      const std::vector<float> xv = gputest::activations_with_runs(sh.cols, 750);
      auto products = [&](Backend& b) {
        std::vector<std::unique_ptr<Buffer>> owners(sh.rows.size());
        std::vector<Tensor> w(sh.rows.size());
        std::vector<DeviceTensor> y(sh.rows.size());
        for (size_t m = 0; m < sh.rows.size(); ++m) {
          w[m] = b.upload_weight(hw[m].t, owners[m]);
          y[m] = gputest::device_empty(b, DType::F32, 1, sh.rows[m]);
        }
        DeviceTensor x = gputest::device_empty(b, DType::F32, 1, sh.cols);
        b.copy_from_host(xv.data(), x.t);
        for (size_t m = 0; m < sh.rows.size(); ++m) b.matmul(w[m], x.t, y[m].t);
        std::vector<float> out;
        for (size_t m = 0; m < sh.rows.size(); ++m) {
          const auto v = gputest::download(b, y[m].t);
          out.insert(out.end(), v.begin(), v.end());
        }
        return out;
      };
      const std::vector<float> want = products(*legacy);
      for (const float v : want) ASSERT_TRUE(std::isfinite(v));
      for (size_t k = 0; k < fresh.size(); ++k) {
        EXPECT_TRUE(gputest::bitwise_equal(products(*fresh[k]), want)) << "backend " << k;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ActBits, GpuMatmul, ::testing::Values(16, 8),
                         [](const ::testing::TestParamInfo<int>& info) { return "x" + std::to_string(info.param); });

}  // namespace
}  // namespace tern
