// Prompts whose cached prefix ends on a block boundary, and trims into shared blocks: only the
// tokens that must be computed are (the last prompt token, for its logits), through a
// copy-on-write of the shared block; the shared block itself is never written, and the output
// equals a cold run token for token.
#include <gtest/gtest.h>

#include "../common/model_fixture.h"
#include "engine/session.h"
#include "kv_tier_test_util.h"

namespace tern::testing {
namespace {

std::vector<int32_t> ids(int n, uint32_t seed) {
  std::vector<int32_t> out(n);
  uint32_t x = seed * 2654435761u + 11;
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    out[i] = static_cast<int32_t>((x >> 8) % 20000) + 100;
  }
  return out;
}

class KvBlockBoundary : public ::testing::Test {
 public:
  void SetUp() override {
    m_ = load_test_model(default_model_path(), 2, false, 1024);
    ASSERT_NE(m_.model, nullptr);
  }
  std::unique_ptr<KvPool> pool(int n_blocks, const KvTierOptions* tiers = nullptr) {
    KvPoolConfig c = m_.kv->config();
    c.n_blocks = n_blocks;
    auto p = std::move(KvPool::create(*m_.backend, c)).value();
    if (tiers != nullptr) p->enable_tiers(*tiers);
    return p;
  }
  GenResult run(Session& s, const std::vector<int32_t>& prompt, int max_tokens = 12) {
    GenerateOptions g;
    g.max_tokens = max_tokens;
    g.prefill_chunk_tokens = 32;
    auto r = s.generate(prompt, g);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    return r.is_ok() ? std::move(r).value() : GenResult{};
  }
  // Greedy output of `prompt` on a fresh pool with nothing cached.
  GenResult cold(const std::vector<int32_t>& prompt, int max_tokens = 12) {
    auto p = pool(64);
    Session s(*m_.model, *p);
    GenResult r = run(s, prompt, max_tokens);
    EXPECT_EQ(r.stats.cached_tokens, 0);
    return r;
  }
  int bt() const { return m_.kv->config().block_tokens; }
  LoadedTestModel m_;
};

TEST_F(KvBlockBoundary, AlignedPromptFromTheIndexComputesOnlyItsLastToken) {
  const std::vector<int32_t> prompt = ids(4 * bt(), 1);
  const GenResult want = cold(prompt);
  auto p = pool(64);
  Session first(*m_.model, *p);
  run(first, prompt);  // registers the prompt's 4 blocks; `first` keeps holding them
  Session second(*m_.model, *p);
  const GenResult got = run(second, prompt);
  EXPECT_EQ(got.stats.cached_tokens, static_cast<int>(prompt.size()) - 1);
  EXPECT_EQ(got.stats.restored_tokens, 0);
  EXPECT_EQ(got.tokens, want.tokens);
}

TEST_F(KvBlockBoundary, AlignedPromptFromACachedBlockNobodyHoldsComputesOnlyItsLastToken) {
  const std::vector<int32_t> prompt = ids(3 * bt(), 2);
  const GenResult want = cold(prompt);
  auto p = pool(64);
  {
    Session first(*m_.model, *p);
    run(first, prompt);
  }  // its blocks are now cached, held by no one
  Session second(*m_.model, *p);
  const GenResult got = run(second, prompt);
  EXPECT_EQ(got.stats.cached_tokens, static_cast<int>(prompt.size()) - 1);
  EXPECT_EQ(got.tokens, want.tokens);
  // The rewritten last block is registered again: a third session finds all of it.
  Session third(*m_.model, *p);
  const GenResult again = run(third, prompt);
  EXPECT_EQ(again.stats.cached_tokens, static_cast<int>(prompt.size()) - 1);
  EXPECT_EQ(again.tokens, want.tokens);
}

TEST_F(KvBlockBoundary, TrimIntoASharedBlockCopiesItAndLeavesTheOriginalUntouched) {
  const std::vector<int32_t> prompt = ids(3 * bt(), 3);
  const GenResult want = cold(prompt);
  auto p = pool(64);
  Session a(*m_.model, *p);
  Session b(*m_.model, *p);
  run(a, prompt);
  run(b, prompt);  // shares a's first 2 blocks and copies the last
  // The prompt's first block, under the hash the sessions registered it with (salt 0).
  const BlockHash first_hash =
      hash_block(root_block_hash(m_.model->config().fingerprint), std::span<const int32_t>(prompt.data(), bt()));
  const std::optional<int32_t> found = p->acquire_cached(first_hash);
  ASSERT_TRUE(found.has_value());
  const int32_t shared = *found;
  ASSERT_EQ(p->refcount(shared), 3);  // a, b and this test
  const std::vector<uint8_t> before = block_bytes(*p, shared);
  // Regenerate on a prompt that ends inside the first (shared) block: a trim into it.
  const std::vector<int32_t> short_prompt(prompt.begin(), prompt.begin() + bt() / 2);
  const GenResult short_want = cold(short_prompt);
  const GenResult short_got = run(a, short_prompt);
  EXPECT_EQ(short_got.stats.cached_tokens, bt() / 2 - 1) << "kept up to the last token, not cut to the block start";
  EXPECT_EQ(short_got.tokens, short_want.tokens);
  EXPECT_EQ(block_bytes(*p, shared), before) << "a shared block was written";
  p->release(shared);
  // b still holds the original prefix and continues as a cold run would.
  const GenResult b_again = run(b, prompt);
  EXPECT_EQ(b_again.stats.cached_tokens, static_cast<int>(prompt.size()) - 1);
  EXPECT_EQ(b_again.tokens, want.tokens);
}

TEST_F(KvBlockBoundary, AlignedPromptRestoredFromDiskCountsAllButTheLastTokenAsRestored) {
  TempDir dir;
  WarningLog log;
  KvTierOptions o;
  o.model_id = "SmolLM2-135M-Instruct";
  o.model_fingerprint = m_.model->config().fingerprint;
  o.warn = log.sink();
  o.disk_dir = dir.path.string();
  o.disk_bytes = 1ull << 30;
  const std::vector<int32_t> prompt = ids(5 * bt(), 4);
  const GenResult want = cold(prompt);
  {
    auto p = pool(64, &o);
    Session s(*m_.model, *p);
    run(s, prompt);
  }  // the pool's end finishes the queued writes
  auto p = pool(64, &o);
  Session s(*m_.model, *p);
  const GenResult got = run(s, prompt);
  EXPECT_EQ(got.stats.cached_tokens, static_cast<int>(prompt.size()) - 1);
  EXPECT_EQ(got.stats.restored_tokens, static_cast<int>(prompt.size()) - 1);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(p->tiers()->stats().restored_from_disk_blocks, 5u);
  EXPECT_EQ(log.lines.size(), 0u) << log.all();
}

}  // namespace
}  // namespace tern::testing
