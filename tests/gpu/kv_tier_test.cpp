// KV tiers with the pool in GPU memory: blocks leave the device (host RAM, SSD) and come back
// through the Backend's batched copies (copy_to_host_n / copy_from_host_n) and copy-on-write
// goes through copy_on_device. Checked byte for byte on the pool, and end to end: sessions on a
// device pool far smaller than their working set give the same greedy tokens as on a pool that
// holds everything.
#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include "engine/session.h"
#include "gpu_model_util.h"
#include "gpu_test_util.h"

namespace tern {
namespace {

using gputest::load_on;
using gputest::Loaded;
using gputest::prompt_ids;
using gputest::synthesized;

class GpuKvTiers : public ::testing::Test {
 protected:
  void SetUp() override { TERN_REQUIRE_GPU(); }
};

std::vector<uint8_t> pattern(size_t bytes, uint64_t seed) {
  std::vector<uint8_t> p(bytes);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (uint8_t& b : p) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<uint8_t>(x >> 56);
  }
  return p;
}

// A fresh directory under /tmp, removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int n = 0;
    path = std::filesystem::temp_directory_path() / ("tern_gpu_kv_tier_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

TEST_F(GpuKvTiers, BatchedBlockCopiesRoundTripAndCopyOnDeviceDuplicates) {
  auto backend = gputest::make_cuda();
  ASSERT_NE(backend, nullptr);
  KvPoolConfig c;
  c.n_layers = 3;
  c.n_kv_heads = 8;
  c.head_dim = 128;
  c.n_blocks = 300;  // 192 KiB per block: a 300-block run spans four 16 MiB transfer chunks
  auto pool = std::move(KvPool::create(*backend, c)).value();
  const size_t bytes = pool->block_payload_bytes();
  std::vector<std::vector<uint8_t>> want;
  std::vector<const uint8_t*> srcs;
  std::vector<int32_t> blocks;
  for (int32_t b = 0; b < c.n_blocks; ++b) {
    want.push_back(pattern(bytes, static_cast<uint64_t>(b)));
    blocks.push_back(c.n_blocks - 1 - b);  // not in address order
  }
  for (const auto& w : want) srcs.push_back(w.data());
  pool->copy_blocks_from_host(srcs, blocks);
  std::vector<uint8_t> got(bytes);
  for (size_t i = 0; i < blocks.size(); ++i) {
    pool->copy_block_to_host(blocks[i], got.data());
    ASSERT_EQ(got, want[i]) << "block " << blocks[i];
  }
  pool->copy_block(blocks[5], blocks[7]);
  pool->copy_block_to_host(blocks[7], got.data());
  EXPECT_EQ(got, want[5]);
  pool->copy_block_to_host(blocks[5], got.data());
  EXPECT_EQ(got, want[5]) << "the source of a device copy changed";
}

// Sessions take turns on `pool`; between turns a session is parked (reset), so its blocks
// become evictable. Returns every turn's greedy tokens.
std::vector<std::vector<int32_t>> play(Loaded& m, KvPool& pool, int* restored_tokens) {
  const int V = m.model->config().n_vocab;
  const std::vector<int32_t> system = prompt_ids(64, V, 9);  // shared by every session
  constexpr int kSessions = 3, kTurns = 3;
  std::vector<std::unique_ptr<Session>> sessions;
  std::vector<std::vector<int32_t>> history(kSessions, system), outputs;
  for (int s = 0; s < kSessions; ++s) sessions.push_back(std::make_unique<Session>(*m.model, pool));
  for (int turn = 0; turn < kTurns; ++turn) {
    for (int s = 0; s < kSessions; ++s) {
      const std::vector<int32_t> more = prompt_ids(48, V, static_cast<uint32_t>(100 * s + turn));
      history[s].insert(history[s].end(), more.begin(), more.end());
      GenerateOptions g;
      g.max_tokens = 10;
      g.prefill_chunk_tokens = 64;
      auto r = sessions[s]->generate(history[s], g);
      EXPECT_TRUE(r.is_ok()) << r.status().message();
      if (!r.is_ok()) return outputs;
      outputs.push_back(r->tokens);
      *restored_tokens += r->stats.restored_tokens;
      history[s].insert(history[s].end(), r->tokens.begin(), r->tokens.end());
      sessions[s]->reset();
    }
  }
  return outputs;
}

void spill_and_restore(const KvTierOptions& tiers, bool expect_host) {
  auto file = synthesized("tiny-llama", "q4_k_m");
  ASSERT_NE(file, nullptr);
  Loaded m = load_on(file, gputest::make_cuda(), 1024);
  ASSERT_NE(m.model, nullptr);
  KvPoolConfig c = m.kv->config();
  c.n_blocks = 256;
  auto big = std::move(KvPool::create(*m.backend, c)).value();
  int restored_big = 0, restored_small = 0;
  const auto want = play(m, *big, &restored_big);
  c.n_blocks = 20;  // 320 tokens; the sessions reach ~280 tokens each
  auto small = std::move(KvPool::create(*m.backend, c)).value();
  KvTierOptions o = tiers;
  o.model_fingerprint = m.model->config().fingerprint;
  small->enable_tiers(o);
  const auto got = play(m, *small, &restored_small);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "turn " << i;
  EXPECT_EQ(restored_big, 0);
  EXPECT_GT(small->stats().evictions, 0);
  EXPECT_GT(restored_small, 0);
  const KvTierStats& st = small->tiers()->stats();
  if (expect_host) EXPECT_GT(st.restored_from_host_blocks, 0u);
  else EXPECT_GT(st.restored_from_disk_blocks, 0u);
}

TEST_F(GpuKvTiers, SmallDevicePoolSpillsToHostRamWithIdenticalOutputs) {
  KvTierOptions o;
  o.model_id = "tiny-llama";
  o.host_bytes = 64ull << 20;
  spill_and_restore(o, /*expect_host=*/true);
}

TEST_F(GpuKvTiers, SmallDevicePoolSpillsToDiskWithIdenticalOutputs) {
  TempDir dir;
  KvTierOptions o;
  o.model_id = "tiny-llama";
  o.disk_dir = dir.path.string();
  o.disk_bytes = 1ull << 30;
  spill_and_restore(o, /*expect_host=*/false);
}

// A block-aligned prompt another session computed: all but its last token come from the shared
// blocks (the last one copied on the device), and the output equals a cold run's.
TEST_F(GpuKvTiers, AlignedPromptCopiesTheSharedLastBlockOnTheDevice) {
  auto file = synthesized("tiny-llama", "q4_k_m");
  ASSERT_NE(file, nullptr);
  Loaded m = load_on(file, gputest::make_cuda(), 1024);
  ASSERT_NE(m.model, nullptr);
  const std::vector<int32_t> prompt = prompt_ids(64, m.model->config().n_vocab, 5);
  GenerateOptions g;
  g.max_tokens = 12;
  GenerateOptions cold = g;
  cold.reuse_prefix = false;
  Session a(*m.model, *m.kv), b(*m.model, *m.kv);
  auto want = a.generate(prompt, cold);
  ASSERT_TRUE(want.is_ok()) << want.status().message();
  Session c(*m.model, *m.kv);
  auto first = c.generate(prompt, g);  // registers the blocks and keeps holding them
  ASSERT_TRUE(first.is_ok());
  auto got = b.generate(prompt, g);
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  EXPECT_EQ(got->stats.cached_tokens, 63);
  EXPECT_EQ(got->tokens, want->tokens);
  EXPECT_EQ(first->tokens, want->tokens);
}

}  // namespace
}  // namespace tern
