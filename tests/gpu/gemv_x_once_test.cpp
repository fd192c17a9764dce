// The multi-row GEMV's activation tile formed once per launch (CudaBackendOptions::gemv_x_once,
// gemv_x_once.cuh): block 0 publishes its quantized tile and the other blocks copy it, or form
// their own when it is late. Every mode must give the single-row kernels' bits, for the decode
// shapes it is meant for (q+k fused with the RMSNorm prologue, v carrying the norm, ffn_down's
// 14336-wide rows, q8_0), launch after launch on the same buffers with new activations each
// time: a flag or counter left set would hand a launch the previous launch's tile. On sm_90 the
// blocks must really have copied the tile (the backend's diagnostic counters), so the test cannot
// pass by every block forming its own; with carry (5 / 6) v and the q8_0 launch take the tile of
// the launch before them (same norm), while the next round's q+k, after ffn_down cleared the
// flag, must not.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "gpu_test_util.h"

namespace tern {
namespace {

using gputest::DeviceTensor;
using gputest::HostTensor;

struct Mode {
  int once;  // CudaBackendOptions::gemv_x_once: 1 on, 3 on + every-SM grid, 4 on without waiting, 5 / 6 + carry
  bool rows;      // GemvPath::kRows with this shape (else the default path's choice)
  int rows_per_step, parts;
  const char* stage_bytes;  // TERN_CUDA_GEMV_STAGE_BYTES ("1000000": one block per SM, many row sets per warp)
};

class GpuGemvXOnce : public ::testing::Test {
 protected:
  void SetUp() override { TERN_REQUIRE_GPU(); }
};

TEST_F(GpuGemvXOnce, EqualsPerBlockTiles) {
  cuda::CudaBackendOptions single_options;
  single_options.single_gemv = true;
  std::unique_ptr<Backend> single = gputest::make_cuda(single_options);
  ASSERT_NE(single, nullptr);
  const Mode modes[] = {{1, false, 0, 0, "0"},       {3, false, 0, 0, "0"},       {4, false, 0, 0, "0"},
                        {1, true, 2, 1, "1000000"},  {3, true, 4, 1, "1"},        {4, true, 1, 2, "1000000"},
                        {1, true, 1, 4, "0"},        {3, true, 2, 1, "1000000"}, {5, false, 0, 0, "0"},
                        {6, false, 0, 0, "0"},       {5, true, 1, 2, "1000000"}, {6, true, 2, 1, "1"}};
  std::vector<std::unique_ptr<Backend>> once;
  for (const Mode& m : modes) {
    setenv("TERN_CUDA_GEMV_STAGE_BYTES", m.stage_bytes, 1);
    cuda::CudaBackendOptions o;
    o.gemv_x_once = m.once;
    o.rows_gemv = m.rows;
    o.gemv_rows_per_step = m.rows_per_step;
    o.gemv_parts_per_row = m.parts;
    o.gemv_mixed = 2;  // v keeps its own launch, which carries the tile (modes 5 / 6)
    once.push_back(gputest::make_cuda(o));
    ASSERT_NE(once.back(), nullptr);
  }
  unsetenv("TERN_CUDA_GEMV_STAGE_BYTES");

  constexpr int64_t kD = 4096, kFfn = 14336;
  auto quantized = [](DType t, int64_t rows, int64_t cols, uint32_t seed) {
    return gputest::host_quantized(gputest::random_floats(static_cast<size_t>(rows * cols), seed, 0.05f), t, rows, cols);
  };
  const HostTensor wq = quantized(DType::Q4_K, 4096, kD, 1), wk = quantized(DType::Q4_K, 1024, kD, 2),
                   wv = quantized(DType::Q6_K, 1024, kD, 3), wd = quantized(DType::Q4_K, 1024, kFfn, 4),
                   w8 = quantized(DType::Q8_0, 2048, kD, 5);
  const HostTensor g = gputest::host_f32(gputest::random_floats(kD, 6, 1.0f), 1, kD);

  // One backend's buffers, reused by every launch so that later rounds replay the same steps.
  struct Run {
    DeviceTensor wq, wk, wv, wd, w8, g, x, f, h, yq, yk, yv, yd, y8;
  };
  auto prepare = [&](Backend& b) {
    Run r;
    r.wq = gputest::device_copy(b, wq.t);
    r.wk = gputest::device_copy(b, wk.t);
    r.wv = gputest::device_copy(b, wv.t);
    r.wd = gputest::device_copy(b, wd.t);
    r.w8 = gputest::device_copy(b, w8.t);
    r.g = gputest::device_copy(b, g.t);
    r.x = gputest::device_empty(b, DType::F32, 1, kD);
    r.f = gputest::device_empty(b, DType::F32, 1, kFfn);
    r.h = gputest::device_empty(b, DType::F32, 1, kD);
    r.yq = gputest::device_empty(b, DType::F32, 1, 4096);
    r.yk = gputest::device_empty(b, DType::F32, 1, 1024);
    r.yv = gputest::device_empty(b, DType::F32, 1, 1024);
    r.yd = gputest::device_empty(b, DType::F32, 1, 1024);
    r.y8 = gputest::device_empty(b, DType::F32, 1, 2048);
    return r;
  };
  // rms_norm -> q + k (one launch with the norm), v (another type: carries the norm), q8_0 on the
  // normed row (plain), ffn_down on a 14336-wide row (plain). Returns every output, h included.
  auto step = [](Backend& b, Run& r, const std::vector<float>& xv, const std::vector<float>& fv) {
    b.copy_from_host(xv.data(), r.x.t);
    b.copy_from_host(fv.data(), r.f.t);
    b.rms_norm(r.x.t, r.g.t, 1e-5f, r.h.t);
    b.matmul(r.wq.t, r.h.t, r.yq.t);
    b.matmul(r.wk.t, r.h.t, r.yk.t);
    b.matmul(r.wv.t, r.h.t, r.yv.t);
    b.matmul(r.w8.t, r.h.t, r.y8.t);
    b.matmul(r.wd.t, r.f.t, r.yd.t);
    std::vector<float> all;
    for (const DeviceTensor* t : {&r.h, &r.yq, &r.yk, &r.yv, &r.y8, &r.yd}) {
      const auto v = gputest::download(b, t->t);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };

  Run ref = prepare(*single);
  std::vector<Run> runs;
  for (auto& b : once) runs.push_back(prepare(*b));
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const auto xv = gputest::random_floats(kD, 100 + round, 2.0f), fv = gputest::random_floats(kFfn, 200 + round);
    const auto want = step(*single, ref, xv, fv);
    for (size_t i = 0; i < once.size(); ++i) {
      EXPECT_TRUE(gputest::bitwise_equal(step(*once[i], runs[i], xv, fv), want))
          << "mode " << i << " (gemv_x_once " << modes[i].once << ")";
    }
  }
  const auto info = cuda::device_info(0);
  ASSERT_TRUE(info.is_ok());
  if (info.value().cc_major >= 9) {
    for (size_t i = 0; i < once.size(); ++i) {
      const cuda::CudaBackendStats s = cuda::backend_stats(*once[i]);
      SCOPED_TRACE("mode " + std::to_string(i));
      EXPECT_GT(s.gemv_fusions, 0);
      EXPECT_GT(s.x_once_copies + s.x_once_late, 0);  // the multi-row kernel ran with the tile shared
      // And most blocks found block 0's tile within the 20 us wait (it takes ~2 us to form; under
      // compute-sanitizer, which slows the kernel many times over, they may not: a timing check).
      if (modes[i].once != 4) {
        EXPECT_GT(s.x_once_copies, s.x_once_late) << s.x_once_copies << " copied, " << s.x_once_late << " late";
      }
      // v (and the q8_0 launch after it) took the kept tile of the launch before it, every block.
      if (modes[i].once >= 5) {
        EXPECT_GT(s.x_once_carried, 0);
      } else {
        EXPECT_EQ(s.x_once_carried, 0);
      }
    }
  }
  const cuda::CudaBackendStats s = cuda::backend_stats(*single);
  EXPECT_EQ(s.x_once_copies + s.x_once_late + s.x_once_carried, 0);
}

}  // namespace
}  // namespace tern
