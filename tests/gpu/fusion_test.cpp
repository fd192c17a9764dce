// GEMV fusion (kernels.h GemvFusion, CudaBackendOptions::fuse_gemv): an RMSNorm or SwiGLU folded
// into the product that consumes it, and the residual add folded into the product it follows,
// must give the bits of the separate ops, for every weight type and GEMV kernel the fused records
// reach (quantized kernels in-kernel; float and generic kernels through their fallback), odd
// widths, n across the activation tiles, and whole models at prefill and decode.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "gpu_model_util.h"
#include "gpu_test_util.h"

namespace tern {
namespace {

using gputest::DeviceTensor;
using gputest::HostTensor;

class GpuFusion : public ::testing::Test {
 protected:
  void SetUp() override {
    TERN_REQUIRE_GPU();
    cuda::CudaBackendOptions on, epi, off;
    on.fuse_swiglu = true;  // off by default (cuda_backend.h); tested here all the same
    epi.fuse_swiglu_epilogue = true;
    off.fuse_gemv = false;
    // Per-type launches (the third weight's launch carries the norm): mixed-type launches, on by
    // default, have their own test (MixedTypeLaunchEqualsSeparateOps).
    for (cuda::CudaBackendOptions* o : {&on, &epi, &off}) o->gemv_mixed = 2;
    fused_ = gputest::make_cuda(on);
    epilogue_ = gputest::make_cuda(epi);
    plain_ = gputest::make_cuda(off);
    ASSERT_TRUE(fused_ && epilogue_ && plain_);
    // The multi-row / split-row kernel (gemv_rows.cu: n = 1, rows of more than 2048 elements of
    // q8_0 / k-quants) with the RMSNorm prologue and the residual epilogue, in each of its shapes
    // (0 x 0: chosen per product).
    for (const auto& [rows, parts] : {std::pair{0, 0}, std::pair{2, 1}, std::pair{4, 1}, std::pair{1, 2}, std::pair{1, 4}}) {
      cuda::CudaBackendOptions o;
      o.rows_gemv = true;
      o.gemv_rows_per_step = rows;
      o.gemv_parts_per_row = parts;
      o.gemv_mixed = 2;
      rows_.push_back(gputest::make_cuda(o));
      ASSERT_NE(rows_.back(), nullptr);
    }
    // The register-streamed quantized kernel (gemv_stream.cu: n = 1, k-quant / q8_0 rows whose
    // steps are whole 16-byte pieces) at one and two blocks per SM, with the same fusions; with
    // SwiGLU epilogues for the gate/up pairs (stream_epilogue_).
    for (const int blocks : {1, 2}) {
      cuda::CudaBackendOptions o;
      o.stream_gemv = true;
      o.gemv_stream_blocks = blocks;
      o.gemv_mixed = 2;
      rows_.push_back(gputest::make_cuda(o));
      ASSERT_NE(rows_.back(), nullptr);
      o.fuse_swiglu_epilogue = true;
      stream_epilogue_.push_back(gputest::make_cuda(o));
      ASSERT_NE(stream_epilogue_.back(), nullptr);
    }
  }
  std::unique_ptr<Backend> fused_, epilogue_, plain_;
  std::vector<std::unique_ptr<Backend>> rows_;
  std::vector<std::unique_ptr<Backend>> stream_epilogue_;
};

bool rows_kernel_type(DType t) {
  return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K || t == DType::Q8_0;
}

bool is_k_quant(DType t) { return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K; }

HostTensor weights(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const auto v = gputest::random_floats(static_cast<size_t>(rows * cols), seed, 0.05f);
  if (t == DType::F32) return gputest::host_f32(v, rows, cols);
  return gputest::host_quantized(v, t, rows, cols);
}

// rms_norm(x) -> h; h @ W1, h @ W2 (one launch), h @ W3 (another weight type: a second launch
// that carries the norm). Returns h, y1, y2, y3 and x, concatenated.
std::vector<float> norm_then_products(Backend& b, const HostTensor& x, const HostTensor& g, const HostTensor& w1,
                                      const HostTensor& w2, const HostTensor& w3) {
  const int64_t n = x.t.rows, cols = x.t.cols;
  DeviceTensor dx = gputest::device_copy(b, x.t), dg = gputest::device_copy(b, g.t);
  DeviceTensor d1 = gputest::device_copy(b, w1.t), d2 = gputest::device_copy(b, w2.t), d3 = gputest::device_copy(b, w3.t);
  DeviceTensor h = gputest::device_empty(b, DType::F32, n, cols);
  DeviceTensor y1 = gputest::device_empty(b, DType::F32, n, w1.t.rows), y2 = gputest::device_empty(b, DType::F32, n, w2.t.rows),
               y3 = gputest::device_empty(b, DType::F32, n, w3.t.rows);
  b.rms_norm(dx.t, dg.t, 1e-5f, h.t);
  b.matmul(d1.t, h.t, y1.t);
  b.matmul(d2.t, h.t, y2.t);
  b.matmul(d3.t, h.t, y3.t);
  std::vector<float> all;
  for (const DeviceTensor* t : {&h, &y1, &y2, &y3, &dx}) {
    const auto v = gputest::download(b, t->t);
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

TEST_F(GpuFusion, NormPrologueEqualsSeparateOps) {
  const DType types[] = {DType::Q4_K, DType::Q6_K, DType::Q5_K, DType::Q8_0, DType::Q4_0,
                         DType::Q4_1, DType::F16,  DType::BF16, DType::F32};
  for (DType t : types) {
    std::vector<int64_t> widths = {1536, 4096, 14336, 2304};
    if (!is_k_quant(t)) widths.insert(widths.end(), {576, 1568});
    const bool is_float = t == DType::F32 || t == DType::F16 || t == DType::BF16;
    if (is_float) widths.push_back(1004);  // not a multiple of 8: the generic kernel
    for (int64_t cols : widths) {
      // The third weight has another type: its own launch, which carries the norm.
      DType other = is_k_quant(t) ? DType::Q6_K : DType::Q8_0;
      if (t == DType::Q6_K) other = DType::Q4_K;
      if (t == DType::Q8_0) other = DType::Q4_0;
      if (is_float) other = t == DType::F16 ? DType::F32 : DType::F16;
      const HostTensor w1 = weights(t, 40, cols, 1), w2 = weights(t, 24, cols, 2), w3 = weights(other, 24, cols, 3);
      const HostTensor g = gputest::host_f32(gputest::random_floats(cols, 4, 1.0f), 1, cols);
      for (int64_t n : {1, 3, 6}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " cols=" + std::to_string(cols) + " n=" + std::to_string(n));
        const HostTensor x = gputest::host_f32(gputest::random_floats(n * cols, 5 + n, 2.0f), n, cols);
        const int64_t before = cuda::backend_stats(*fused_).gemv_fusions;
        const auto a = norm_then_products(*fused_, x, g, w1, w2, w3);
        const auto b = norm_then_products(*plain_, x, g, w1, w2, w3);
        EXPECT_TRUE(gputest::bitwise_equal(a, b));
        EXPECT_EQ(cuda::backend_stats(*fused_).gemv_fusions - before, 2);  // the norm, and its carry
        if (n == 1 && cols > 2048 && rows_kernel_type(t)) {
          for (auto& r : rows_) {
            const int64_t rows_before = cuda::backend_stats(*r).gemv_fusions;
            EXPECT_TRUE(gputest::bitwise_equal(norm_then_products(*r, x, g, w1, w2, w3), b)) << "rows kernel";
            EXPECT_EQ(cuda::backend_stats(*r).gemv_fusions - rows_before, 2);
          }
        }
      }
    }
  }
  EXPECT_EQ(cuda::backend_stats(*plain_).gemv_fusions, 0);
}

// Mixed-type launches (CudaBackendOptions::gemv_mixed, MatmulArgs::tail_mat): Q4_K_M's q6_k v
// joins the q4_k q+k launch of the same activations (with the RMSNorm prologue the q+k launch
// took, or without one), and one multi-row kernel computes both types' rows: the same bits as
// separate ops, on the default and the multi-row paths. Rows of 4096 and 14336 (four steps of the two types'
// lengths, the last a half step). Not joined: several activation rows, an odd q4_k row count
// (two-row sets would straddle the types), q6_k rows that are not whole bulk copies (2304).
TEST_F(GpuFusion, MixedTypeLaunchEqualsSeparateOps) {
  std::vector<std::unique_ptr<Backend>> mixed;
  for (int variant = 0; variant < 5; ++variant) {
    cuda::CudaBackendOptions o;
    o.gemv_mixed = variant == 2 ? 0 : 1;  // 2: the default options (on)
    o.rows_gemv = variant == 1;
    o.stream_gemv = variant >= 3;  // the register-streamed kernel, one and two blocks per SM
    o.gemv_stream_blocks = variant >= 3 ? variant - 2 : 0;
    mixed.push_back(gputest::make_cuda(o));
    ASSERT_NE(mixed.back(), nullptr);
  }
  const auto info = cuda::device_info(0);
  ASSERT_TRUE(info.is_ok());
  const bool sm90 = info.value().cc_major >= 9;
  // The three products without a norm: x @ W1, x @ W2, x @ W3.
  auto products = [](Backend& b, const HostTensor& x, const HostTensor& w1, const HostTensor& w2, const HostTensor& w3) {
    const int64_t n = x.t.rows;
    DeviceTensor dx = gputest::device_copy(b, x.t);
    DeviceTensor d1 = gputest::device_copy(b, w1.t), d2 = gputest::device_copy(b, w2.t), d3 = gputest::device_copy(b, w3.t);
    DeviceTensor y1 = gputest::device_empty(b, DType::F32, n, w1.t.rows), y2 = gputest::device_empty(b, DType::F32, n, w2.t.rows),
                 y3 = gputest::device_empty(b, DType::F32, n, w3.t.rows);
    b.matmul(d1.t, dx.t, y1.t);
    b.matmul(d2.t, dx.t, y2.t);
    b.matmul(d3.t, dx.t, y3.t);
    std::vector<float> all;
    for (const DeviceTensor* t : {&y1, &y2, &y3}) {
      const auto v = gputest::download(b, t->t);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  for (const int64_t cols : {int64_t{4096}, int64_t{14336}, int64_t{2304}}) {
    for (const int64_t q_rows : {int64_t{40}, int64_t{41}}) {
      const HostTensor w1 = weights(DType::Q4_K, q_rows, cols, 31), w2 = weights(DType::Q4_K, 24, cols, 32),
                       w3 = weights(DType::Q6_K, 26, cols, 33);
      const HostTensor g = gputest::host_f32(gputest::random_floats(cols, 34, 1.0f), 1, cols);
      for (const int64_t n : {1, 3}) {
        SCOPED_TRACE("cols=" + std::to_string(cols) + " q rows=" + std::to_string(q_rows) + " n=" + std::to_string(n));
        const HostTensor x = gputest::host_f32(gputest::random_floats(n * cols, 35 + n, 2.0f), n, cols);
        const auto want_norm = norm_then_products(*plain_, x, g, w1, w2, w3);
        const auto want_plain = products(*plain_, x, w1, w2, w3);
        // 2304 columns: q6_k rows of 1890 bytes, not whole bulk copies, so v keeps its launch.
        const bool joins = sm90 && n == 1 && q_rows % 2 == 0 && cols != 2304;
        for (size_t k = 0; k < mixed.size(); ++k) {
          const int64_t before = cuda::backend_stats(*mixed[k]).gemv_mixed;
          EXPECT_TRUE(gputest::bitwise_equal(norm_then_products(*mixed[k], x, g, w1, w2, w3), want_norm)) << "backend " << k;
          EXPECT_TRUE(gputest::bitwise_equal(products(*mixed[k], x, w1, w2, w3), want_plain)) << "backend " << k;
          EXPECT_EQ(cuda::backend_stats(*mixed[k]).gemv_mixed - before, joins ? 2 : 0) << "backend " << k;
        }
      }
    }
  }
  EXPECT_EQ(cuda::backend_stats(*fused_).gemv_mixed, 0);  // the fixture's backends: off
}

// swiglu(gate, up, gate) in place, gate @ W_down -> out, then x += out (as the models do, in
// either operand order). Returns gate, out and x.
std::vector<float> swiglu_product_residual(Backend& b, const HostTensor& gate, const HostTensor& up,
                                           const HostTensor& w, const HostTensor& x, bool residual_first) {
  const int64_t n = gate.t.rows;
  DeviceTensor dg = gputest::device_copy(b, gate.t), du = gputest::device_copy(b, up.t), dw = gputest::device_copy(b, w.t),
               dx = gputest::device_copy(b, x.t);
  DeviceTensor out = gputest::device_empty(b, DType::F32, n, w.t.rows);
  b.swiglu(dg.t, du.t, dg.t);
  b.matmul(dw.t, dg.t, out.t);
  if (residual_first) {
    b.add(dx.t, out.t, dx.t);
  } else {
    b.add(out.t, dx.t, dx.t);
  }
  std::vector<float> all;
  for (const DeviceTensor* t : {&dg, &out, &dx}) {
    const auto v = gputest::download(b, t->t);
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

TEST_F(GpuFusion, SwigluPrologueAndResidualEpilogueEqualSeparateOps) {
  const DType types[] = {DType::Q4_K, DType::Q6_K, DType::Q8_0, DType::Q4_1, DType::F16, DType::F32};
  for (DType t : types) {
    std::vector<int64_t> widths = {1536, 14336, 2304};
    if (!is_k_quant(t)) widths.insert(widths.end(), {576, 1568});
    for (int64_t ff : widths) {
      const int64_t rows = 72;
      const HostTensor w = weights(t, rows, ff, 21);
      for (int64_t n : {1, 3, 6}) {  // SwiGLU folds in for n <= 4; the residual add for any n
        for (bool residual_first : {true, false}) {
          SCOPED_TRACE(std::string(dtype_name(t)) + " ff=" + std::to_string(ff) + " n=" + std::to_string(n) +
                       (residual_first ? " x+out" : " out+x"));
          const HostTensor gate = gputest::host_f32(gputest::random_floats(n * ff, 22 + n, 3.0f), n, ff);
          const HostTensor up = gputest::host_f32(gputest::random_floats(n * ff, 23 + n), n, ff);
          const HostTensor x = gputest::host_f32(gputest::random_floats(n * rows, 24 + n), n, rows);
          const int64_t before = cuda::backend_stats(*fused_).gemv_fusions;
          const auto a = swiglu_product_residual(*fused_, gate, up, w, x, residual_first);
          const auto b = swiglu_product_residual(*plain_, gate, up, w, x, residual_first);
          EXPECT_TRUE(gputest::bitwise_equal(a, b));
          EXPECT_EQ(cuda::backend_stats(*fused_).gemv_fusions - before, n <= 4 ? 2 : 1);
          if (n == 1 && ff > 2048 && rows_kernel_type(t)) {  // the residual epilogue (no SwiGLU prologue)
            for (auto& r : rows_) {
              const int64_t rows_before = cuda::backend_stats(*r).gemv_fusions;
              EXPECT_TRUE(gputest::bitwise_equal(swiglu_product_residual(*r, gate, up, w, x, residual_first), b))
                  << "rows kernel";
              EXPECT_EQ(cuda::backend_stats(*r).gemv_fusions - rows_before, 1);
            }
          }
        }
      }
    }
  }
}

// rms_norm(x) -> h; h @ W_gate -> gate, h @ W_up -> up (one launch); swiglu(gate, up, out) with
// out = gate, up or its own buffer (which = 0, 1, 2). Returns gate, up and out.
std::vector<float> norm_gate_up_swiglu(Backend& b, const HostTensor& x, const HostTensor& g, const HostTensor& wg,
                                       const HostTensor& wu, int which) {
  const int64_t n = x.t.rows, cols = x.t.cols, ff = wg.t.rows;
  DeviceTensor dx = gputest::device_copy(b, x.t), dg = gputest::device_copy(b, g.t);
  DeviceTensor d1 = gputest::device_copy(b, wg.t), d2 = gputest::device_copy(b, wu.t);
  DeviceTensor h = gputest::device_empty(b, DType::F32, n, cols);
  DeviceTensor gate = gputest::device_empty(b, DType::F32, n, ff), up = gputest::device_empty(b, DType::F32, n, ff),
               own = gputest::device_empty(b, DType::F32, n, ff);
  b.rms_norm(dx.t, dg.t, 1e-5f, h.t);
  b.matmul(d1.t, h.t, gate.t);
  b.matmul(d2.t, h.t, up.t);
  b.swiglu(gate.t, up.t, which == 0 ? gate.t : (which == 1 ? up.t : own.t));
  std::vector<float> all;
  for (const DeviceTensor* t : {&gate, &up, &own}) {
    if (t == &own && which != 2) continue;
    const auto v = gputest::download(b, t->t);
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

// The SwiGLU epilogue: the gate/up launch pairs the two matrices' rows per warp (segmented and
// full steps, tiles of 1 and 4 rows) and stores silu(gate) * up; other kernels run the
// elementwise kernel after the product.
TEST_F(GpuFusion, SwigluEpilogueEqualsSeparateOps) {
  const DType types[] = {DType::Q4_K, DType::Q6_K, DType::Q8_0, DType::Q4_1, DType::Q4_0, DType::F16, DType::BF16};
  for (DType t : types) {
    std::vector<int64_t> widths = {1536, 4096};
    if (!is_k_quant(t)) widths.push_back(576);
    for (int64_t cols : widths) {
      for (int64_t ff : {1536, 100}) {  // 100 rows: no segmented steps (rows % 4 != 0)
        const HostTensor wg = weights(t, ff, cols, 41), wu = weights(t, ff, cols, 42);
        const HostTensor g = gputest::host_f32(gputest::random_floats(cols, 43, 1.0f), 1, cols);
        for (int64_t n : {1, 3, 6}) {
          for (int which : {0, 1, 2}) {
            SCOPED_TRACE(std::string(dtype_name(t)) + " cols=" + std::to_string(cols) + " ff=" + std::to_string(ff) +
                         " n=" + std::to_string(n) + " out=" + std::to_string(which));
            const HostTensor x = gputest::host_f32(gputest::random_floats(n * cols, 44 + n, 2.0f), n, cols);
            const int64_t before = cuda::backend_stats(*epilogue_).gemv_fusions;
            const auto a = norm_gate_up_swiglu(*epilogue_, x, g, wg, wu, which);
            const auto b = norm_gate_up_swiglu(*plain_, x, g, wg, wu, which);
            EXPECT_TRUE(gputest::bitwise_equal(a, b));
            EXPECT_EQ(cuda::backend_stats(*epilogue_).gemv_fusions - before, 2);  // the norm and the SwiGLU
            for (auto& s : stream_epilogue_) {
              const int64_t s_before = cuda::backend_stats(*s).gemv_fusions;
              EXPECT_TRUE(gputest::bitwise_equal(norm_gate_up_swiglu(*s, x, g, wg, wu, which), b)) << "stream kernel";
              EXPECT_EQ(cuda::backend_stats(*s).gemv_fusions - s_before, 2);
            }
          }
        }
      }
    }
  }
}

// A write into the norm's input between the norm and the product keeps them apart; a product
// whose output is the norm's input is not fused (its blocks would overwrite what others read).
TEST_F(GpuFusion, OverlapsAreNotFused) {
  const int64_t cols = 256;
  const HostTensor w = weights(DType::Q8_0, cols, cols, 31);
  const HostTensor g = gputest::host_f32(gputest::random_floats(cols, 32), 1, cols);
  const HostTensor x = gputest::host_f32(gputest::random_floats(cols, 33), 1, cols);
  std::vector<std::vector<float>> results;
  for (Backend* b : {fused_.get(), plain_.get()}) {
    DeviceTensor dx = gputest::device_copy(*b, x.t), dg = gputest::device_copy(*b, g.t), dw = gputest::device_copy(*b, w.t);
    DeviceTensor h = gputest::device_empty(*b, DType::F32, 1, cols);
    b->rms_norm(dx.t, dg.t, 1e-5f, h.t);
    b->matmul(dw.t, h.t, dx.t);  // writes the norm's input
    const auto v = gputest::download(*b, dx.t);
    results.push_back(v);
  }
  EXPECT_EQ(cuda::backend_stats(*fused_).gemv_fusions, 0);
  EXPECT_TRUE(gputest::bitwise_equal(results[0], results[1]));
}

// Whole models: fused (the default, and with the SwiGLU prologue) and separate ops give the same
// logits, bit for bit, over a prefill in chunks (17 tokens, then 3: the SwiGLU fusion's n <= 4)
// and greedy decode steps.
TEST_F(GpuFusion, WholeModelsEqualSeparateOps) {
  struct MixCase {
    const char* preset;
    const char* mix;
  };
  for (const MixCase& c : {MixCase{"tiny-llama", "q4_k_m"}, MixCase{"tiny-llama", "q8_0"}, MixCase{"tiny-llama", "f16"},
                           MixCase{"tiny-llama", "q4_1"}, MixCase{"tiny-qwen2", "q5_k_m"}, MixCase{"tiny-qwen3", "q6_k"}}) {
    SCOPED_TRACE(std::string(c.preset) + " " + c.mix);
    auto file = gputest::synthesized(c.preset, c.mix);
    ASSERT_NE(file, nullptr);
    // on: the SwiGLU prologue (floats at n = 1 still take their epilogue); def: the default (the
    // SwiGLU epilogues); glu: no SwiGLU fusion.
    cuda::CudaBackendOptions all, noglu, off;
    all.fuse_swiglu = true;
    noglu.fuse_swiglu_epilogue = false;
    noglu.fuse_float_swiglu_epilogue = false;
    off.fuse_gemv = false;
    gputest::Loaded on = gputest::load_on(file, gputest::make_cuda(all)),
                    def = gputest::load_on(file, gputest::make_cuda()),
                    glu = gputest::load_on(file, gputest::make_cuda(noglu)),
                    sep = gputest::load_on(file, gputest::make_cuda(off));
    ASSERT_TRUE(on.model && def.model && glu.model && sep.model);
    const int V = on.model->config().n_vocab;
    const auto ids = gputest::prompt_ids(20, V, 7);
    const std::vector<int32_t> head(ids.begin(), ids.begin() + 17), tail(ids.begin() + 17, ids.end());
    const auto first = gputest::forward(sep, head);
    EXPECT_TRUE(gputest::bitwise_equal(gputest::forward(on, head), first));
    EXPECT_TRUE(gputest::bitwise_equal(gputest::forward(def, head), first));
    EXPECT_TRUE(gputest::bitwise_equal(gputest::forward(glu, head), first));
    const auto last = gputest::forward(sep, tail);
    EXPECT_TRUE(gputest::bitwise_equal(gputest::forward(on, tail), last));
    EXPECT_TRUE(gputest::bitwise_equal(gputest::forward(def, tail), last));
    EXPECT_TRUE(gputest::bitwise_equal(gputest::forward(glu, tail), last));
    int32_t next = gputest::argmax(last.data() + (tail.size() - 1) * V, V);
    for (int step = 0; step < 12; ++step) {
      const auto a = gputest::forward(on, {next}), b = gputest::forward(sep, {next}), c = gputest::forward(def, {next});
      const auto d = gputest::forward(glu, {next});
      ASSERT_TRUE(gputest::bitwise_equal(a, b)) << "step " << step;
      ASSERT_TRUE(gputest::bitwise_equal(c, b)) << "step " << step;
      ASSERT_TRUE(gputest::bitwise_equal(d, b)) << "step " << step;
      next = gputest::argmax(a.data(), V);
    }
    EXPECT_GT(cuda::backend_stats(*glu.backend).gemv_fusions, 0);
    EXPECT_GT(cuda::backend_stats(*on.backend).gemv_fusions, cuda::backend_stats(*glu.backend).gemv_fusions);
    EXPECT_GT(cuda::backend_stats(*def.backend).gemv_fusions, cuda::backend_stats(*glu.backend).gemv_fusions);
    EXPECT_EQ(cuda::backend_stats(*sep.backend).gemv_fusions, 0);
  }
}

// Batch-1 decode of a small model (gemv_quant.cu): the early-load single-row instances (kEarly:
// the RMSNorm weight before the PDL wait, the residual epilogue's old value right after it; the
// default for products of at most one block per SM) on SmolLM2's layer shape (576 wide, q4_1:
// q/k/v, o and gate/up take the per-lane-staged kernel, down the bulk one), three layers: a
// prefill (n > 1: not early), then greedy decode steps, eager and replayed from a graph, give the
// same logits bit for bit as the plain instances (gemv_norm_preload off).
TEST_F(GpuFusion, GemvEarlyLoadsEqualPlainLaunches) {
  const synth::ModelShape* smol = synth::find_preset("smollm2-135m");
  ASSERT_NE(smol, nullptr);
  synth::ModelShape shape = *smol;
  shape.name = "smollm2-3-layers";
  shape.n_layers = 3;
  shape.n_vocab = 2048;
  auto file = gputest::synthesized(shape, "q4_1");
  ASSERT_NE(file, nullptr);
  cuda::CudaBackendOptions none;
  none.gemv_norm_preload = 2;
  gputest::Loaded early = gputest::load_on(file, gputest::make_cuda(cuda::CudaBackendOptions{})),
                  plain = gputest::load_on(file, gputest::make_cuda(none));
  ASSERT_TRUE(early.model && plain.model);
  const int V = early.model->config().n_vocab;
  const auto ids = gputest::prompt_ids(20, V, 11);
  const auto first = gputest::forward(plain, ids);
  EXPECT_TRUE(gputest::bitwise_equal(gputest::forward(early, ids), first));
  int32_t next = gputest::argmax(first.data() + (ids.size() - 1) * V, V);
  for (int step = 0; step < 16; ++step) {
    const auto a = gputest::forward(early, {next}), d = gputest::forward(plain, {next});
    ASSERT_TRUE(gputest::bitwise_equal(a, d)) << "step " << step;
    next = gputest::argmax(d.data(), V);
  }
  // Both eager steps and graph replays were compared.
  const cuda::CudaBackendStats se = cuda::backend_stats(*early.backend);
  EXPECT_GT(se.steps_eager, 0);
  EXPECT_GT(se.steps_graph, 0);
  EXPECT_GT(cuda::backend_stats(*plain.backend).steps_graph, 0);
}

// The fused decode attention (attention.h "fused decode": rope and K/V write in the attention
// launch) in whole models: a 150-token prefill (in chunks of 64: context
// past 128, where the chunk split and so the fusion start), then greedy decode steps with fused
// decode off, the rope taken in (3, the default) and the compact kernel (with and without the
// rope) give the same logits bit for bit, for Llama
// (head_dim 64), Qwen2 (biases) and Qwen3 (q/k norms, head_dim 128: the span kernel's
// compile-time form), f16 and f32 caches.
TEST_F(GpuFusion, FusedDecodeAttentionEqualsSeparateLaunches) {
  struct MixCase {
    const char* preset;
    const char* mix;
    DType kv;
  };
  for (const MixCase& c : {MixCase{"tiny-llama", "q4_k_m", DType::F16}, MixCase{"tiny-qwen2", "q5_k_m", DType::F16},
                           MixCase{"tiny-qwen3", "q6_k", DType::F16}, MixCase{"tiny-llama", "f16", DType::F32}}) {
    SCOPED_TRACE(std::string(c.preset) + " " + c.mix + " " + std::string(dtype_name(c.kv)));
    auto file = gputest::synthesized(c.preset, c.mix);
    ASSERT_NE(file, nullptr);
    cuda::CudaBackendOptions rope, off, cmp, cmp_rope;
    for (cuda::CudaBackendOptions* o : {&rope, &off}) o->attention_compact = 0;
    cmp.attention_compact = 1;  // the compact decode kernel (attention_compact.cu), rope launch separate
    cmp_rope.attention_compact = 2;  // the compact kernel with the rope taken in
    rope.attention_fused_decode = 3;
    off.attention_fused_decode = 0;
    gputest::Loaded r = gputest::load_on(file, gputest::make_cuda(rope), 1024, c.kv),
                    s = gputest::load_on(file, gputest::make_cuda(off), 1024, c.kv),
                    cp = gputest::load_on(file, gputest::make_cuda(cmp), 1024, c.kv),
                    cr = gputest::load_on(file, gputest::make_cuda(cmp_rope), 1024, c.kv);
    ASSERT_TRUE(r.model && s.model && cp.model && cr.model);
    const int V = r.model->config().n_vocab;
    const auto ids = gputest::prompt_ids(150, V, 9);
    std::vector<float> last;
    for (size_t b = 0; b < ids.size(); b += 64) {
      const std::vector<int32_t> part(ids.begin() + b, ids.begin() + std::min(ids.size(), b + 64));
      last = gputest::forward(s, part);
      ASSERT_TRUE(gputest::bitwise_equal(gputest::forward(r, part), last)) << "prefill from " << b;
      ASSERT_TRUE(gputest::bitwise_equal(gputest::forward(cp, part), last)) << "prefill from " << b;
      ASSERT_TRUE(gputest::bitwise_equal(gputest::forward(cr, part), last)) << "prefill from " << b;
    }
    int32_t next = gputest::argmax(last.data() + (last.size() / V - 1) * V, V);
    for (int step = 0; step < 10; ++step) {
      const auto a = gputest::forward(r, {next}), b = gputest::forward(s, {next});
      ASSERT_TRUE(gputest::bitwise_equal(a, b)) << "step " << step;
      ASSERT_TRUE(gputest::bitwise_equal(gputest::forward(cp, {next}), b)) << "step " << step << " (compact)";
      ASSERT_TRUE(gputest::bitwise_equal(gputest::forward(cr, {next}), b)) << "step " << step << " (compact, rope)";
      next = gputest::argmax(a.data(), V);
    }
    EXPECT_GT(cuda::backend_stats(*r.backend).fused_attentions, 0);
    EXPECT_EQ(cuda::backend_stats(*s.backend).fused_attentions, 0);
    if (c.kv == DType::F16) {
      EXPECT_GT(cuda::backend_stats(*cp.backend).compact_attentions, 0);
      EXPECT_GT(cuda::backend_stats(*cr.backend).compact_attentions, 0);
      EXPECT_GT(cuda::backend_stats(*cr.backend).fused_attentions, 0);  // the rope taken in
      EXPECT_EQ(cuda::backend_stats(*cp.backend).fused_attentions, 0);  // the rope its own launch
    } else {
      // An f32 cache is not the compact kernel's: both backends run the default fused decode.
      EXPECT_EQ(cuda::backend_stats(*cp.backend).compact_attentions, 0);
      EXPECT_EQ(cuda::backend_stats(*cr.backend).compact_attentions, 0);
      EXPECT_GT(cuda::backend_stats(*cp.backend).fused_attentions, 0);
    }
    EXPECT_EQ(cuda::backend_stats(*r.backend).compact_attentions, 0);
  }
}

}  // namespace
}  // namespace tern
