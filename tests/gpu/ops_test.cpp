// The small CUDA ops against the CPU reference (backends/cpu/ops_ref.h):
//   embed (every table type), kv_write (f16 / f32 caches, alone and fused into the rope's
//   launch), gather, add, add_bias: bit-exact;
//   rms_norm: bit-exact except when the double sum of squares rounds differently (1e-6);
//   swiglu (expf vs std::exp) and rope (sincosf vs std::sin/cos): 1e-6 relative.
#include <gtest/gtest.h>

#include <numeric>

#include "backends/cpu/ops_ref.h"
#include "core/argmax.h"
#include "core/fp16.h"
#include "gpu_test_util.h"

namespace tern {
namespace {

using gputest::DeviceTensor;
using gputest::HostTensor;

using GpuOps = gputest::CudaBackendTest;

TEST_F(GpuOps, EmbedEveryTableTypeIsBitExact) {
  Backend& b = *backend_;
  const int64_t vocab = 37, cols = 512;
  const auto values = gputest::random_floats(static_cast<size_t>(vocab * cols), 1);
  std::vector<int32_t> blocks = {0};
  BatchPlan plan = gputest::single_sequence_plan(0, 9, blocks, 16);
  plan.token_ids = {0, 36, 5, 5, 17, 1, 30, 2, 36};
  for (DType t : quant_ref_types()) {
    if (t == DType::Q8_1) continue;  // an activation format, never a table
    SCOPED_TRACE(std::string(dtype_name(t)));
    HostTensor table = t == DType::F32 ? gputest::host_f32(values, vocab, cols)
                                       : gputest::host_quantized(values, t, vocab, cols);
    std::vector<float> ref_v(9 * cols);
    Tensor ref = Tensor::view(ref_v.data(), DType::F32, 9, cols);
    cpu::ref::embed(table.t, plan, ref);

    std::unique_ptr<Buffer> owner;
    const Tensor dev_table = b.upload_weight(table.t, owner);
    DeviceTensor out = gputest::device_empty(b, DType::F32, 9, cols);
    b.begin_step(plan);
    b.embed(dev_table, out.t);
    EXPECT_TRUE(gputest::bitwise_equal(gputest::download(b, out.t), ref_v));
  }
}

TEST_F(GpuOps, RmsNormMatchesReference) {
  Backend& b = *backend_;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 576}, {7, 4096}, {33, 128}, {3, 5}}) {
    SCOPED_TRACE("rows=" + std::to_string(rows) + " cols=" + std::to_string(cols));
    const auto xv = gputest::random_floats(static_cast<size_t>(rows * cols), 2, 3.0f);
    const auto wv = gputest::random_floats(static_cast<size_t>(cols), 3);
    HostTensor x = gputest::host_f32(xv, rows, cols), w = gputest::host_f32(wv, 1, cols);
    std::vector<float> ref_v(xv.size());
    Tensor ref = Tensor::view(ref_v.data(), DType::F32, rows, cols);
    cpu::ref::rms_norm(x.t, w.t, 1e-5f, ref);

    DeviceTensor dx = gputest::device_copy(b, x.t), dw = gputest::device_copy(b, w.t);
    DeviceTensor out = gputest::device_empty(b, DType::F32, rows, cols);
    b.rms_norm(dx.t, dw.t, 1e-5f, out.t);
    EXPECT_LE(gputest::rel_l2(gputest::download(b, out.t), ref_v), 1e-6);
    b.rms_norm(dx.t, dw.t, 1e-5f, dx.t);  // in place
    EXPECT_LE(gputest::rel_l2(gputest::download(b, dx.t), ref_v), 1e-6);
  }
}

// add followed by rms_norm of its result is one fused launch; it must equal the two ops.
TEST_F(GpuOps, FusedAddRmsNormEqualsSeparateOps) {
  Backend& b = *backend_;
  const int64_t rows = 6, cols = 576;
  const auto xv = gputest::random_floats(rows * cols, 30, 2.0f), dv = gputest::random_floats(rows * cols, 31);
  const auto wv = gputest::random_floats(cols, 32);
  HostTensor hx = gputest::host_f32(xv, rows, cols), hd = gputest::host_f32(dv, rows, cols),
             hw = gputest::host_f32(wv, 1, cols);
  std::vector<float> sum_ref(xv.size()), norm_ref(xv.size());
  Tensor sum_t = Tensor::view(sum_ref.data(), DType::F32, rows, cols), norm_t = Tensor::view(norm_ref.data(), DType::F32, rows, cols);
  cpu::ref::add(hx.t, hd.t, sum_t);
  cpu::ref::rms_norm(sum_t, hw.t, 1e-5f, norm_t);

  DeviceTensor x = gputest::device_copy(b, hx.t), d = gputest::device_copy(b, hd.t), w = gputest::device_copy(b, hw.t);
  DeviceTensor out = gputest::device_empty(b, DType::F32, rows, cols);
  b.add(x.t, d.t, x.t);  // in place, as the models do
  b.rms_norm(x.t, w.t, 1e-5f, out.t);
  EXPECT_TRUE(gputest::bitwise_equal(gputest::download(b, x.t), sum_ref));
  const std::vector<float> fused = gputest::download(b, out.t);
  EXPECT_LE(gputest::rel_l2(fused, norm_ref), 1e-6);
  // The same ops with a sync point in between run as two launches: same bits.
  DeviceTensor x2 = gputest::device_copy(b, hx.t);
  b.add(x2.t, d.t, x2.t);
  (void)gputest::download(b, x2.t);
  b.rms_norm(x2.t, w.t, 1e-5f, out.t);
  EXPECT_TRUE(gputest::bitwise_equal(gputest::download(b, out.t), fused));
}

TEST_F(GpuOps, ElementwiseOpsMatchReference) {
  Backend& b = *backend_;
  const int64_t rows = 5, cols = 1000;
  const auto av = gputest::random_floats(rows * cols, 4, 4.0f), bv = gputest::random_floats(rows * cols, 5);
  const auto biasv = gputest::random_floats(cols, 6);
  HostTensor ha = gputest::host_f32(av, rows, cols), hb = gputest::host_f32(bv, rows, cols),
             hbias = gputest::host_f32(biasv, 1, cols);
  DeviceTensor da = gputest::device_copy(b, ha.t), db = gputest::device_copy(b, hb.t),
               dbias = gputest::device_copy(b, hbias.t);
  DeviceTensor out = gputest::device_empty(b, DType::F32, rows, cols);

  std::vector<float> ref_v(av.size());
  Tensor ref = Tensor::view(ref_v.data(), DType::F32, rows, cols);
  cpu::ref::add(ha.t, hb.t, ref);
  b.add(da.t, db.t, out.t);
  EXPECT_TRUE(gputest::bitwise_equal(gputest::download(b, out.t), ref_v));

  cpu::ref::swiglu(ha.t, hb.t, ref);
  b.swiglu(da.t, db.t, out.t);
  EXPECT_LE(gputest::rel_l2(gputest::download(b, out.t), ref_v), 1e-6);

  cpu::ref::add_bias(ha.t, hbias.t);  // in place on the host copy
  b.add_bias(da.t, dbias.t);
  EXPECT_TRUE(gputest::bitwise_equal(gputest::download(b, da.t), gputest::host_values(ha.t)));
}

TEST_F(GpuOps, RopeMatchesReference) {
  Backend& b = *backend_;
  struct RopeCase {
    int n_heads, head_dim, n_rot;
    bool neox;
    float mscale;
  };
  const std::vector<int32_t> positions = {0, 1, 2, 63, 1000, 4095, 40000};
  for (const RopeCase& rc : {RopeCase{9, 64, 64, false, 1.0f}, RopeCase{4, 128, 128, true, 1.0f},
                             RopeCase{2, 80, 32, true, 1.2f}, RopeCase{3, 64, 48, false, 0.9f}}) {
    SCOPED_TRACE("heads=" + std::to_string(rc.n_heads) + " hd=" + std::to_string(rc.head_dim) +
                 " n_rot=" + std::to_string(rc.n_rot) + (rc.neox ? " neox" : ""));
    const int n = static_cast<int>(positions.size());
    const int64_t cols = int64_t{rc.n_heads} * rc.head_dim;
    std::vector<float> inv(rc.n_rot / 2);
    for (int i = 0; i < rc.n_rot / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / rc.n_rot);
    HostTensor hinv = gputest::host_f32(inv, 1, rc.n_rot / 2);
    RopeParams host_rope{rc.n_rot, rc.neox, rc.mscale, hinv.t};
    DeviceTensor dinv = gputest::device_copy(b, hinv.t);
    RopeParams dev_rope{rc.n_rot, rc.neox, rc.mscale, dinv.t};

    BatchPlan plan;
    plan.positions = positions;
    plan.token_ids.assign(n, 0);
    plan.seq_index.assign(n, 0);
    plan.kv_slots.assign(n, 0);
    plan.block_offsets = {0, 1};
    plan.block_ids = {0};
    const auto xv = gputest::random_floats(static_cast<size_t>(n * cols), 7);
    HostTensor hx = gputest::host_f32(xv, n, cols);
    DeviceTensor dx = gputest::device_copy(b, hx.t);
    cpu::ref::rope(hx.t, rc.n_heads, rc.head_dim, host_rope, plan);
    b.begin_step(plan);
    b.rope(dx.t, rc.n_heads, rc.head_dim, dev_rope);
    EXPECT_LE(gputest::rel_l2(gputest::download(b, dx.t), gputest::host_values(hx.t)), 1e-6);
  }
}

// A layer's two ropes (q then k) share one launch; each tensor must come out bitwise as from its
// own launch. Roping one tensor twice must not fuse (the second rotation reads the first's output).
TEST_F(GpuOps, FusedRopesEqualSeparateOnes) {
  Backend& b = *backend_;
  const int head_dim = 64, n_rot = 64, q_heads = 9, k_heads = 3;
  const std::vector<int32_t> positions = {0, 5, 77, 4095};
  const int n = static_cast<int>(positions.size());
  std::vector<float> inv(n_rot / 2);
  for (int i = 0; i < n_rot / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / n_rot);
  DeviceTensor dinv = gputest::device_copy(b, gputest::host_f32(inv, 1, n_rot / 2).t);
  const RopeParams rope{n_rot, true, 1.0f, dinv.t};
  BatchPlan plan;
  plan.positions = positions;
  plan.token_ids.assign(n, 0);
  plan.seq_index.assign(n, 0);
  plan.kv_slots.assign(n, 0);
  plan.block_offsets = {0, 1};
  plan.block_ids = {0};
  const auto qv = gputest::random_floats(static_cast<size_t>(n * q_heads * head_dim), 21);
  const auto kv = gputest::random_floats(static_cast<size_t>(n * k_heads * head_dim), 22);
  auto upload = [&](const std::vector<float>& v, int heads) {
    return gputest::device_copy(b, gputest::host_f32(v, n, int64_t{heads} * head_dim).t);
  };
  DeviceTensor q_fused = upload(qv, q_heads), k_fused = upload(kv, k_heads);
  DeviceTensor q_alone = upload(qv, q_heads), k_alone = upload(kv, k_heads);
  b.begin_step(plan);
  b.rope(q_fused.t, q_heads, head_dim, rope);
  b.rope(k_fused.t, k_heads, head_dim, rope);  // recorded back to back: one launch
  const auto q1 = gputest::download(b, q_fused.t), k1 = gputest::download(b, k_fused.t);
  b.begin_step(plan);
  b.rope(q_alone.t, q_heads, head_dim, rope);
  (void)gputest::download(b, q_alone.t);  // a sync point: separate launches
  b.begin_step(plan);
  b.rope(k_alone.t, k_heads, head_dim, rope);
  EXPECT_TRUE(gputest::bitwise_equal(q1, gputest::download(b, q_alone.t)));
  EXPECT_TRUE(gputest::bitwise_equal(k1, gputest::download(b, k_alone.t)));

  // Twice on one tensor in one step equals twice in separate steps.
  DeviceTensor twice = upload(kv, k_heads);
  b.begin_step(plan);
  b.rope(twice.t, k_heads, head_dim, rope);
  b.rope(twice.t, k_heads, head_dim, rope);
  b.begin_step(plan);
  b.rope(k_alone.t, k_heads, head_dim, rope);  // k_alone already holds one rotation
  EXPECT_TRUE(gputest::bitwise_equal(gputest::download(b, twice.t), gputest::download(b, k_alone.t)));
}

// The layer's rope (q and k, one launch) followed by kv_write records one launch that also writes
// the cache (RopeArgs::kv). It must leave q, k and the cache exactly as the separate launches do:
// full and partial rotation, both pair layouts, both cache types, and a k-only rope.
TEST_F(GpuOps, RopeWithFusedKvWriteEqualsSeparateOps) {
  Backend& b = *backend_;
  const int head_dim = 64, q_heads = 8, k_heads = 2;
  const int64_t kv_cols = int64_t{k_heads} * head_dim, cache_rows = 8 * 16;
  const BatchPlan plan = gputest::single_sequence_plan(40, 21, {5, 2, 7, 1}, 16);
  const int n = plan.n_tokens();
  const auto qv = gputest::random_floats(static_cast<size_t>(n * q_heads * head_dim), 31, 2.0f);
  const auto kv = gputest::random_floats(static_cast<size_t>(n * kv_cols), 32, 2.0f);
  const auto vv = gputest::random_floats(static_cast<size_t>(n * kv_cols), 33, 2.0f);
  auto upload = [&](const std::vector<float>& v, int64_t cols) {
    return gputest::device_copy(b, gputest::host_f32(v, n, cols).t);
  };
  for (const int n_rot : {64, 32}) {
    for (const bool neox : {false, true}) {
      for (const DType cache_type : {DType::F16, DType::F32}) {
        for (const bool with_q : {true, false}) {
          SCOPED_TRACE(testing::Message() << "n_rot " << n_rot << " neox " << neox << " cache "
                                          << dtype_name(cache_type) << " q rope " << with_q);
          std::vector<float> inv(n_rot / 2);
          for (int i = 0; i < n_rot / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / n_rot);
          DeviceTensor dinv = gputest::device_copy(b, gputest::host_f32(inv, 1, n_rot / 2).t);
          const RopeParams rope{n_rot, neox, 1.0f, dinv.t};
          struct Run {
            std::vector<float> q, k;
            std::vector<uint8_t> k_cache, v_cache;
          };
          auto run = [&](bool fused) {
            DeviceTensor dq = upload(qv, int64_t{q_heads} * head_dim), dk = upload(kv, kv_cols), dv = upload(vv, kv_cols);
            const size_t cache_bytes = row_bytes(cache_type, kv_cols) * cache_rows;
            std::vector<uint8_t> zeros(cache_bytes, 0);
            const Tensor zero_cache = Tensor::view(zeros.data(), cache_type, cache_rows, kv_cols);
            DeviceTensor dkc = gputest::device_copy(b, zero_cache), dvc = gputest::device_copy(b, zero_cache);
            KvLayerView view{dkc.t, dvc.t, 16};
            const int64_t fused_before = cuda::backend_stats(b).fused_kv_writes;
            b.begin_step(plan);
            if (with_q) b.rope(dq.t, q_heads, head_dim, rope);
            b.rope(dk.t, k_heads, head_dim, rope);
            if (!fused) (void)gputest::download(b, dk.t);  // a sync point: kv_write launches alone
            b.kv_write(dk.t, dv.t, view);
            Run r;
            r.q = gputest::download(b, dq.t);
            r.k = gputest::download(b, dk.t);
            r.k_cache.resize(cache_bytes);
            r.v_cache.resize(cache_bytes);
            b.copy_to_host(dkc.t, r.k_cache.data());
            b.copy_to_host(dvc.t, r.v_cache.data());
            EXPECT_EQ(cuda::backend_stats(b).fused_kv_writes, fused_before + (fused ? 1 : 0));
            return r;
          };
          const Run fused = run(true), alone = run(false);
          EXPECT_TRUE(gputest::bitwise_equal(fused.q, alone.q));
          EXPECT_TRUE(gputest::bitwise_equal(fused.k, alone.k));
          EXPECT_EQ(fused.k_cache, alone.k_cache);
          EXPECT_EQ(fused.v_cache, alone.v_cache);
        }
      }
    }
  }
}

// Greedy sampling on the device picks what the host scan (core/argmax.h) picks: random rows of
// vocabulary sizes around the blocks' 4096-element shares, ties, NaNs (leading and not), infinities
// and all-equal rows, several rows per call.
TEST_F(GpuOps, ArgmaxRowsPicksTheHostArgmax) {
  Backend& b = *backend_;
  const float nan = std::nanf(""), inf = INFINITY;
  for (const int64_t cols : {int64_t{1}, int64_t{7}, int64_t{4096}, int64_t{4097}, int64_t{49152}, int64_t{128256},
                             int64_t{600000}}) {
    SCOPED_TRACE(testing::Message() << "cols " << cols);
    const int rows = 9;
    std::vector<float> x = gputest::random_floats(static_cast<size_t>(rows * cols), 40 + static_cast<uint32_t>(cols));
    auto at = [&](int r, int64_t c) -> float& { return x[static_cast<size_t>(r * cols + c % cols)]; };
    // Row 1: the max twice (the lower index wins); row 2: a leading NaN; row 3: NaNs elsewhere
    // and +inf; row 4: all -inf; row 5: all equal; row 6: the max at the last element; row 7:
    // NaN everywhere; row 8: -0 and +0 as the max.
    at(1, cols / 3) = 50.0f;
    at(1, cols / 2) = 50.0f;
    at(2, 0) = nan;
    at(2, cols - 1) = 60.0f;
    at(3, cols / 5) = nan;
    at(3, cols / 4) = inf;
    at(3, cols - 1) = nan;
    for (int64_t c = 0; c < cols; ++c) {
      at(4, c) = -inf;
      at(5, c) = 1.25f;
      at(7, c) = nan;
      at(8, c) = -1.0f;
    }
    at(6, cols - 1) = 70.0f;
    at(8, cols / 2) = -0.0f;
    at(8, cols - 1) = 0.0f;
    DeviceTensor dx = gputest::device_copy(b, gputest::host_f32(x, rows, cols).t);
    std::vector<int32_t> got(rows, -2);
    b.argmax_rows(dx.t, got.data());
    for (int r = 0; r < rows; ++r) {
      EXPECT_EQ(got[r], first_argmax(x.data() + r * cols, static_cast<size_t>(cols))) << "row " << r;
    }
    // A row range of a larger tensor (the logits workspace is sliced per step).
    std::vector<int32_t> two(2, -2);
    b.argmax_rows(dx.t.slice_rows(3, 2), two.data());
    EXPECT_EQ(two[0], got[3]);
    EXPECT_EQ(two[1], got[4]);
  }
}

TEST_F(GpuOps, KvWriteAndGatherAreBitExact) {
  Backend& b = *backend_;
  const int64_t cols = 3 * 64, cache_rows = 8 * 16;
  std::vector<int32_t> blocks = {5, 2, 7};
  BatchPlan plan = gputest::single_sequence_plan(3, 30, blocks, 16);
  plan.logit_rows = {0, 7, 29};
  const int n = plan.n_tokens();
  const auto kv = gputest::random_floats(static_cast<size_t>(n * cols), 8, 2.0f);
  const auto vv = gputest::random_floats(static_cast<size_t>(n * cols), 9, 2.0f);
  HostTensor hk = gputest::host_f32(kv, n, cols), hv = gputest::host_f32(vv, n, cols);
  DeviceTensor dk = gputest::device_copy(b, hk.t), dv = gputest::device_copy(b, hv.t);
  b.begin_step(plan);
  for (DType cache_type : {DType::F16, DType::F32}) {
    SCOPED_TRACE(std::string(dtype_name(cache_type)));
    const size_t cache_bytes = row_bytes(cache_type, cols) * cache_rows;
    std::vector<uint8_t> hkc(cache_bytes, 0), hvc(cache_bytes, 0);
    KvLayerView host_view{Tensor::view(hkc.data(), cache_type, cache_rows, cols),
                          Tensor::view(hvc.data(), cache_type, cache_rows, cols), 16};
    cpu::ref::kv_write(hk.t, hv.t, host_view, plan);
    DeviceTensor dkc = gputest::device_empty(b, cache_type, cache_rows, cols);
    DeviceTensor dvc = gputest::device_empty(b, cache_type, cache_rows, cols);
    KvLayerView dev_view{dkc.t, dvc.t, 16};
    b.kv_write(dk.t, dv.t, dev_view);
    std::vector<uint8_t> got(cache_bytes);
    b.copy_to_host(dkc.t, got.data());
    EXPECT_EQ(got, hkc);
    b.copy_to_host(dvc.t, got.data());
    EXPECT_EQ(got, hvc);
  }
  std::vector<float> ref_v(3 * cols);
  Tensor ref = Tensor::view(ref_v.data(), DType::F32, 3, cols);
  cpu::ref::gather_logit_rows(hk.t, plan, ref);
  DeviceTensor out = gputest::device_empty(b, DType::F32, 3, cols);
  b.gather_logit_rows(dk.t, out.t);
  EXPECT_TRUE(gputest::bitwise_equal(gputest::download(b, out.t), ref_v));
}

}  // namespace
}  // namespace tern
