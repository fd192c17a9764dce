// The L2 prefetch of upcoming weights (l2_prefetch.h, CudaBackendOptions::l2_prefetch_mb): a hint
// that must change no bits, and the ranges its records get from the products after them.
// L2PrefetchPlan runs on the host (CI); GpuL2Prefetch needs a device.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/l2_prefetch.h"
#include "backends/cuda/step_queue.h"
#include "gpu_model_util.h"
#include "gpu_test_util.h"

namespace tern {
namespace {

using cuda::L2PrefetchArgs;
using cuda::MatmulArgs;
using cuda::OpKind;
using cuda::OpRecord;

template <typename Args>
Args& push(std::vector<OpRecord>& ops, OpKind kind) {
  OpRecord& r = ops.emplace_back();
  std::memset(&r, 0, sizeof(r));
  r.kind = kind;
  return *reinterpret_cast<Args*>(r.args);
}

const L2PrefetchArgs& prefetch_at(const std::vector<OpRecord>& ops, size_t i) {
  return *reinterpret_cast<const L2PrefetchArgs*>(ops[i].args);
}

// Fake weight addresses: only their values matter to the plan.
const void* at(uintptr_t address) { return reinterpret_cast<const void*>(address); }

// One layer's records after the rope: prefetch, attention, o, norm, gate / up, down.
std::vector<OpRecord> layer(uint64_t room, uint64_t second_bytes) {
  std::vector<OpRecord> ops;
  L2PrefetchArgs& p = push<L2PrefetchArgs>(ops, OpKind::kL2Prefetch);
  p.room = room;
  p.second_bytes = second_bytes;
  push<cuda::AttentionArgs>(ops, OpKind::kAttention);
  MatmulArgs& o = push<MatmulArgs>(ops, OpKind::kMatmul);
  o.n_mats = 1;
  o.w[0] = at(0x100000);
  o.w_stride_bytes[0] = 2304;  // 4096 q4_k columns
  o.rows[0] = 4096;
  push<cuda::RmsNormArgs>(ops, OpKind::kRmsNorm);
  MatmulArgs& gu = push<MatmulArgs>(ops, OpKind::kMatmul);
  gu.n_mats = 2;
  gu.w[0] = at(0x10000000);
  gu.w[1] = at(0x20000008);  // not 16-byte aligned: the range starts at the next 16 bytes
  gu.w_stride_bytes[0] = gu.w_stride_bytes[1] = 2304;
  gu.rows[0] = gu.rows[1] = 14336;
  MatmulArgs& down = push<MatmulArgs>(ops, OpKind::kMatmul);
  down.n_mats = 1;
  down.w[0] = at(0x30000000);
  down.w_stride_bytes[0] = 11760;
  down.rows[0] = 4096;
  return ops;
}

TEST(L2PrefetchPlan, TakesTheOProjectionThenTheFirstBytesOfGateAndUp) {
  std::vector<OpRecord> ops = layer(uint64_t{64} << 20, uint64_t{16} << 20);
  cuda::resolve_l2_prefetches(ops);
  const L2PrefetchArgs& p = prefetch_at(ops, 0);
  ASSERT_EQ(p.n_ranges, 3);
  EXPECT_EQ(p.ptr[0], at(0x100000));
  EXPECT_EQ(p.bytes[0], uint64_t{2304} * 4096);
  EXPECT_EQ(p.ptr[1], at(0x10000000));
  EXPECT_EQ(p.bytes[1], uint64_t{8} << 20);
  EXPECT_EQ(p.ptr[2], at(0x20000010));
  EXPECT_EQ(p.bytes[2], uint64_t{8} << 20);
}

TEST(L2PrefetchPlan, StaysWithinTheRoom) {
  const uint64_t o_bytes = uint64_t{2304} * 4096;
  std::vector<OpRecord> ops = layer(o_bytes + (uint64_t{3} << 20) + 5, uint64_t{16} << 20);
  cuda::resolve_l2_prefetches(ops);
  const L2PrefetchArgs& p = prefetch_at(ops, 0);
  ASSERT_EQ(p.n_ranges, 2);  // o whole, gate's first 3 MB (16-byte multiple), nothing of up
  EXPECT_EQ(p.bytes[0], o_bytes);
  EXPECT_EQ(p.bytes[1], uint64_t{3} << 20);
  // o only: the gate / up launch adds nothing.
  ops = layer(uint64_t{64} << 20, 0);
  cuda::resolve_l2_prefetches(ops);
  ASSERT_EQ(prefetch_at(ops, 0).n_ranges, 1);
  // A room smaller than o: its first bytes.
  ops = layer(1000, uint64_t{16} << 20);
  cuda::resolve_l2_prefetches(ops);
  ASSERT_EQ(prefetch_at(ops, 0).n_ranges, 1);
  EXPECT_EQ(prefetch_at(ops, 0).bytes[0], 992u);
}

TEST(L2PrefetchPlan, StopsAtTheNextLayerAndAtTensorCoreProducts) {
  // Only one product before the next layer's rope: just that one.
  std::vector<OpRecord> ops = layer(uint64_t{64} << 20, uint64_t{16} << 20);
  ops.erase(ops.begin() + 3, ops.end());  // prefetch, attention, o
  push<cuda::RopeArgs>(ops, OpKind::kRope);
  MatmulArgs& later = push<MatmulArgs>(ops, OpKind::kMatmul);
  later.n_mats = 1;
  later.w[0] = at(0x40000000);
  later.w_stride_bytes[0] = 64;
  later.rows[0] = 64;
  cuda::resolve_l2_prefetches(ops);
  ASSERT_EQ(prefetch_at(ops, 0).n_ranges, 1);
  EXPECT_EQ(prefetch_at(ops, 0).ptr[0], at(0x100000));
  // A tensor-core product right after the attention: nothing.
  ops = layer(uint64_t{64} << 20, uint64_t{16} << 20);
  ops[2].kind = OpKind::kMatmulTc;
  cuda::resolve_l2_prefetches(ops);
  EXPECT_EQ(prefetch_at(ops, 0).n_ranges, 0);
  // Resolving again (a replayed list) gives the same record.
  ops = layer(uint64_t{64} << 20, uint64_t{16} << 20);
  cuda::resolve_l2_prefetches(ops);
  const std::vector<OpRecord> once = ops;
  cuda::resolve_l2_prefetches(ops);
  EXPECT_EQ(std::memcmp(once.data(), ops.data(), ops.size() * sizeof(OpRecord)), 0);
}

// Whole models with the prefetch in each form (o only, o + gate / up bytes, evict_last and
// whatever the K/V, each way of issuing it) give the logits of the model without it, bit for bit, over a prefill in
// chunks (17 tokens, then 3: both decode-sized, so prefetched too) and greedy decode steps.
TEST(GpuL2Prefetch, WholeModelsEqualWithoutPrefetch) {
  TERN_REQUIRE_GPU();
  auto info = cuda::device_info(0);
  ASSERT_TRUE(info.is_ok());
  const bool hopper = info->cc_major >= 9;  // earlier GPUs never prefetch
  struct MixCase {
    const char* preset;
    const char* mix;
  };
  for (const MixCase& c : {MixCase{"tiny-llama", "q4_k_m"}, MixCase{"tiny-llama", "f16"}, MixCase{"tiny-qwen2", "q5_k_m"}}) {
    SCOPED_TRACE(std::string(c.preset) + " " + c.mix);
    auto file = gputest::synthesized(c.preset, c.mix);
    ASSERT_NE(file, nullptr);
    // o only, o + 1 MB of gate / up, then the other ways of asking (L2PrefetchArgs::issue).
    cuda::CudaBackendOptions off, o, ffn, last, spread, lines;
    off.l2_prefetch_mb = -1;
    o.l2_prefetch_mb = 0;
    ffn.l2_prefetch_mb = 1;
    last.l2_prefetch_mb = 16;
    last.l2_prefetch_evict_last = true;
    last.l2_prefetch_any = true;
    spread.l2_prefetch_mb = 4;
    spread.l2_prefetch_issue = 1;
    lines.l2_prefetch_mb = 4;
    lines.l2_prefetch_issue = 3;
    lines.l2_prefetch_evict_last = true;
    gputest::Loaded base = gputest::load_on(file, gputest::make_cuda(off));
    std::vector<gputest::Loaded> on;
    for (const auto& opt : {o, ffn, last, spread, lines}) on.push_back(gputest::load_on(file, gputest::make_cuda(opt)));
    ASSERT_TRUE(base.model);
    for (auto& m : on) ASSERT_TRUE(m.model);
    const int V = base.model->config().n_vocab;
    const auto ids = gputest::prompt_ids(20, V, 11);
    const std::vector<int32_t> head(ids.begin(), ids.begin() + 17), tail(ids.begin() + 17, ids.end());
    const auto first = gputest::forward(base, head);
    for (auto& m : on) EXPECT_TRUE(gputest::bitwise_equal(gputest::forward(m, head), first));
    const auto last_logits = gputest::forward(base, tail);
    for (auto& m : on) EXPECT_TRUE(gputest::bitwise_equal(gputest::forward(m, tail), last_logits));
    int32_t next = gputest::argmax(last_logits.data() + (tail.size() - 1) * V, V);
    for (int step = 0; step < 12; ++step) {
      const auto want = gputest::forward(base, {next});
      for (auto& m : on) ASSERT_TRUE(gputest::bitwise_equal(gputest::forward(m, {next}), want)) << "step " << step;
      next = gputest::argmax(want.data(), V);
    }
    EXPECT_EQ(cuda::backend_stats(*base.backend).l2_prefetches, 0);
    for (auto& m : on) {
      const cuda::CudaBackendStats st = cuda::backend_stats(*m.backend);
      if (hopper) {
        EXPECT_GT(st.l2_prefetches, 0);
        EXPECT_GT(st.l2_prefetch_bytes, 0);
      } else {
        EXPECT_EQ(st.l2_prefetches, 0);
      }
    }
    // o + 1 MB of gate / up asks for more than o alone.
    if (hopper) {
      EXPECT_GT(cuda::backend_stats(*on[1].backend).l2_prefetch_bytes, cuda::backend_stats(*on[0].backend).l2_prefetch_bytes);
    }
  }
}

}  // namespace
}  // namespace tern
